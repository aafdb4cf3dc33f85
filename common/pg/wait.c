/*
 * wait.c: sleeping until a topic may have something new, on PostgreSQL.
 *
 * A waiter LISTENs on its topic's channel (mq_<lockspace>_<id>); whatever
 * changes the topic NOTIFYs it from the same transaction, and the server
 * delivers that at commit.  LISTEN is issued when the waiter is made,
 * before the caller's last look at the topic, so a commit in between is
 * not missed: its notification waits on the socket.  A signal (sig.c)
 * writes to a pipe the waiter also polls, so one that lands just before
 * the sleep is not slept through.
 *
 * A waiter whose topic does not exist yet LISTENs on channel 0, which
 * every transaction that makes a topic notifies, and then on its topic's.
 * The fallback: any waiter tells its caller to look again every SAFETY_MS
 * (a writer that is not mq notifies nobody).  When the connection drops
 * while waiting (the server restarted), the waiter reconnects, once a
 * second for up to RECONNECT_MS, LISTENs again and tells its caller to
 * look: notifications sent while it was away are lost, the look is not.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pg.h"

#define SAFETY_MS	5000
#define RECONNECT_MS	60000

struct pg_waiter {
	struct mq_waiter base;
	char		 topic[MQ_NAME_MAX + 1];
	int64_t		 id;		/* 0: the topic does not exist yet */
};

static int pokefd[2] = { -1, -1 };

static void
poke(void)
{
	ssize_t n = write(pokefd[1], "", 1);

	(void)n;	/* full: a poke is already there */
}

/* LISTENs on channel ID. */
static int
listen_on(struct pgq *q, int64_t id)
{
	PGresult *r;
	char sql[64];

	memcpy(sql, "LISTEN ", 7);
	pg_channel(q, id, sql + 7, sizeof sql - 7);
	if (!(r = pg_q(q, "cannot listen", sql, 0)))
		return 0;
	PQclear(r);
	return 1;
}

/*
 * LISTENs on the topic's channel if it exists now, else on channel 0,
 * which hears of every topic made.
 */
static void
listen_topic(struct pgq *q, struct pg_waiter *w)
{
	struct mq_topic t;

	if (pg_topic_row(q, w->topic, &t, 0) > 0 && listen_on(q, t.id))
		w->id = t.id;
	else
		listen_on(q, 0);
}

struct mq_waiter *
pg_waiter(struct mq *mq, const char *topic)
{
	struct pg_waiter *w = mq_alloc(sizeof *w);

	w->base.q = mq;
	snprintf(w->topic, sizeof w->topic, "%s", topic);
	if (pokefd[0] < 0) {
		if (pipe2(pokefd, O_CLOEXEC | O_NONBLOCK) < 0)
			mq_die(MQ_EX_SOFTWARE, "cannot make a pipe: %s",
			    strerror(errno));
	}
	mq_on_signal(poke);
	listen_topic(PGQ(mq), w);
	return &w->base;
}

void
pg_waiter_free(struct mq_waiter *mw)
{
	struct pg_waiter *w = (struct pg_waiter *)mw;
	struct pgq *q = PGQ(mw->q);
	PGresult *r;

	mq_on_signal(NULL);
	if (w->id && PQstatus(q->conn) == CONNECTION_OK &&
	    (r = pg_q(q, "cannot stop listening", "UNLISTEN *", 0)))
		PQclear(r);
	free(w);
}

/*
 * The connection dropped: reconnect (the server may be restarting), then
 * take this consumer's advisory lock again.  If another consumer reaped
 * this one meanwhile (its leases went back), it cannot go on as itself:
 * 75, try again.
 */
static void
reconnect(struct pgq *q, struct pg_waiter *w)
{
	int64_t end = pg_now() + RECONNECT_MS;
	char buf[512];

	snprintf(buf, sizeof buf, "%s", PQerrorMessage(q->conn));
	for (;;) {
		PQreset(q->conn);
		if (PQstatus(q->conn) == CONNECTION_OK)
			break;
		if (pg_now() >= end || mq_stop)
			mq_die(MQ_EX_TEMPFAIL, "lost connection to %s: %.*s",
			    q->shown, (int)strcspn(buf, "\n"), buf);
		sleep(1);
	}
	pg_session(q);
	if (q->lockkey && !pg_relock(q, pg_now() + RECONNECT_MS))
		mq_die(MQ_EX_TEMPFAIL, "lost connection to %s, and this "
		    "consumer was given up meanwhile: start again", q->shown);
	w->id = 0;
	listen_topic(q, w);
}

/*
 * Returns 2 when a NOTIFY said the topic changed, 1 when it may have (a
 * signal, the safety look, a reconnect), 0 when `until` (ms since the
 * epoch) came first.
 */
int
pg_wait(struct mq_waiter *mw, int64_t until)
{
	struct pg_waiter *w = (struct pg_waiter *)mw;
	struct pgq *q = PGQ(mw->q);
	struct pollfd p[2];
	PGnotify *n;
	int64_t now, look = pg_now() + SAFETY_MS, ms;
	int got = 0;
	char junk[64];

	for (;;) {
		if (PQconsumeInput(q->conn) == 0 ||
		    PQstatus(q->conn) != CONNECTION_OK) {
			reconnect(q, w);
			return 1;
		}
		while ((n = PQnotifies(q->conn))) {
			got = 1;
			PQfreemem(n);
		}
		if (got && !w->id) {	/* a topic was made: ours? */
			listen_topic(q, w);
			got = w->id != 0;
		}
		if (got)
			return 2;
		if (read(pokefd[0], junk, sizeof junk) > 0)
			return 1;
		now = pg_now();
		if (now >= look) {
			if (w->id)
				return 1;
			listen_topic(q, w);
			if (w->id)
				return 1;
			look = now + SAFETY_MS;
		}
		if (now >= until)
			return 0;
		ms = (until < look ? until : look) - now;
		p[0].fd = PQsocket(q->conn);
		p[0].events = POLLIN;
		p[1].fd = pokefd[0];
		p[1].events = POLLIN;
		if (poll(p, 2, (int)ms) < 0 && errno != EINTR)
			mq_die(MQ_EX_SOFTWARE, "cannot wait: %s", strerror(errno));
	}
}
