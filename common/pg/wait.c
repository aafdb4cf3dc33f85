/*
 * wait.c: sleeping until one of a waiter's topics may have something new,
 * on PostgreSQL.
 *
 * A waiter LISTENs on each of its topics' channels (mq_<lockspace>_<id>)
 * on its one connection, and sleeps on its socket; whatever changes a
 * topic NOTIFYs its channel from the same transaction, and the server
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
	int		 n;
	const char	*topic[MQ_LANES_MAX];	/* the caller's */
	int64_t		 id[MQ_LANES_MAX];	/* 0: does not exist yet */
	int		 missing;	/* topics with id 0 */
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
 * LISTENs on the channel of each topic not yet listened to that exists
 * now, and on channel 0, which hears of every topic made, while one
 * does not; bit i of the result: topic i is listened to from now on.
 */
static uint32_t
listen_topics(struct pgq *q, struct pg_waiter *w)
{
	struct mq_topic t;
	uint32_t got = 0;
	int i;

	for (i = 0, w->missing = 0; i < w->n; i++) {
		if (w->id[i])
			continue;
		if (pg_topic_row(q, w->topic[i], &t, 0) > 0 &&
		    listen_on(q, t.id)) {
			w->id[i] = t.id;
			got |= (uint32_t)1 << i;
		} else
			w->missing++;
	}
	if (w->missing)
		listen_on(q, 0);
	return got;
}

struct mq_waiter *
pg_waiter(struct mq *mq, const char *const *topics, int n)
{
	struct pg_waiter *w = mq_alloc(sizeof *w);

	memset(w, 0, sizeof *w);
	w->base.q = mq;
	w->n = n;
	memcpy(w->topic, topics, n * sizeof *topics);
	if (pokefd[0] < 0) {
		if (pipe2(pokefd, O_CLOEXEC | O_NONBLOCK) < 0)
			mq_die(MQ_EX_SOFTWARE, "cannot make a pipe: %s",
			    strerror(errno));
	}
	mq_on_signal(poke);
	listen_topics(PGQ(mq), w);
	return &w->base;
}

void
pg_waiter_free(struct mq_waiter *mw)
{
	struct pg_waiter *w = (struct pg_waiter *)mw;
	struct pgq *q = PGQ(mw->q);
	PGresult *r;

	mq_on_signal(NULL);
	if (w->missing < w->n && PQstatus(q->conn) == CONNECTION_OK &&
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
	if (q->nlockkey && !pg_relock(q, pg_now() + RECONNECT_MS))
		mq_die(MQ_EX_TEMPFAIL, "lost connection to %s, and this "
		    "consumer was given up meanwhile: start again", q->shown);
	memset(w->id, 0, sizeof w->id);
	listen_topics(q, w);
}

/* The topics a notification names: bit i for topic i. */
static uint32_t
which(struct pgq *q, struct pg_waiter *w, const char *channel)
{
	char buf[64];
	uint32_t bits = 0;
	int i;

	for (i = 0; i < w->n; i++) {
		if (!w->id[i])
			continue;
		pg_channel(q, w->id[i], buf, sizeof buf);
		if (!strcmp(buf, channel))
			bits |= (uint32_t)1 << i;
	}
	return bits;
}

/* An append's NOTIFY said offsets below end of topics bits are durable. */
static void
heard(struct pgq *q, struct pg_waiter *w, uint32_t bits, const char *end)
{
	char *e;
	long long v = strtoll(end, &e, 10);
	int i;

	if (*e || v <= 0)
		return;
	for (i = 0; i < w->n; i++)
		if (bits & (uint32_t)1 << i)
			pg_heard_durable(q, w->id[i], v);
}

/*
 * Returns 2 when a NOTIFY said a topic changed, with *changed saying
 * which, 1 when one may have (a signal, the safety look, a reconnect), 0
 * when `until` (ms since the epoch) came first.
 */
int
pg_wait(struct mq_waiter *mw, int64_t until, uint32_t *changed)
{
	struct pg_waiter *w = (struct pg_waiter *)mw;
	struct pgq *q = PGQ(mw->q);
	struct pollfd p[2];
	PGnotify *n;
	int64_t now, look = pg_now() + SAFETY_MS, ms;
	uint32_t bits;
	int made = 0;
	char junk[64];

	*changed = 0;
	for (;;) {
		if (PQconsumeInput(q->conn) == 0 ||
		    PQstatus(q->conn) != CONNECTION_OK) {
			reconnect(q, w);
			return 1;
		}
		while ((n = PQnotifies(q->conn))) {
			if (!(bits = which(q, w, n->relname)))
				made = 1;	/* channel 0: a topic was made */
			else if (*n->extra)	/* an append's end, flushed */
				heard(q, w, bits, n->extra);
			*changed |= bits;
			PQfreemem(n);
		}
		if (made && w->missing)	/* one of ours? */
			*changed |= listen_topics(q, w);
		if (*changed)
			return 2;
		if (read(pokefd[0], junk, sizeof junk) > 0)
			return 1;
		now = pg_now();
		if (now >= look) {
			listen_topics(q, w);	/* those not there before */
			if (w->missing < w->n)
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
