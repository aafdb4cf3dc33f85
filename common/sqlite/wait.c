/*
 * wait.c: sleeping until one of a waiter's topics may have something new.
 *
 * A waiter sleeps on its topics' slots in the -mq file (engine.c), all in
 * one sleep (FUTEX_WAITV for more than one): writers bump a topic's slot
 * once a commit that changed the topic is made (before its sync: a reader
 * shows nothing before what it saw is durable), and wake the slot's
 * sleepers.  The waiter remembers the number it last saw of each, taken
 * before the caller's first look at the database, so a commit that lands
 * between a look and the sleep is not missed.  A signal (sig.c) pokes the
 * first slot, so one that lands just before the sleep is not slept
 * through either.
 *
 * Writers that are not mq (the sqlite3 shell) bump nothing: every second
 * a waiter asks PRAGMA data_version, which changes whenever another
 * connection committed.  A waiter back at its caller's time says whether
 * anything was committed since its caller last looked (MQ_WAIT_QUIET when
 * not), so that a follower's look of every second is a question, not a
 * claim.  When mq's writers commit to other topics, data_version changes
 * all the same: at the caller's time, a change is told at once when the
 * caller last looked QUIET_MS ago or more, else when that time has come
 * (and not asked for before: a question is a read transaction, much of
 * what an idle follower's second costs), so that a commit by a writer
 * that is not mq is seen within a second on a database where nothing
 * else was committed, and within QUIET_MS where mq writes.  A caller
 * that waits longer than a second (mq-replay -f) is told of a change at
 * the next look of every second.  Without the -mq file, or with a topic
 * that does not exist yet, it asks every 50ms.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sq.h"

#define SAFETY_MS	1000
#define FALLBACK_MS	50
#define QUIET_MS	5000

struct sq_waiter {
	struct mq_waiter base;
	int		 n;
	int64_t		 topic[MQ_LANES_MAX];
	uint32_t	*slot[MQ_LANES_MAX];	/* [0] NULL: polls */
	uint32_t	 seen[MQ_LANES_MAX];
	int64_t		 dv;		/* as its caller last looked */
	int64_t		 looked;	/* when */
};

static uint32_t *volatile poked;

static void
poke(void)
{
	uint32_t *p = poked;

	if (p)
		__atomic_add_fetch(p, 1, __ATOMIC_RELEASE);
}

struct mq_waiter *
sq_waiter(struct mq *mq, const char *const *topics, int n)
{
	struct sq *q = SQ(mq);
	struct sq_waiter *w = mq_alloc(sizeof *w);
	struct mq_topic t;
	int i;

	memset(w, 0, sizeof *w);
	w->base.q = mq;
	w->n = n;
	for (i = 0; i < n; i++) {
		if (!sq_topic_get(mq, topics[i], &t) ||
		    !(w->slot[i] = sq_slot(q, t.id))) {
			w->slot[0] = NULL;	/* one missing: all polled */
			break;
		}
		w->topic[i] = t.id;
		w->seen[i] = __atomic_load_n(w->slot[i], __ATOMIC_ACQUIRE);
	}
	if (w->slot[0]) {
		poked = w->slot[0];
		mq_on_signal(poke);
	}
	w->dv = sq_data_version(q);
	w->looked = mq_now();
	return &w->base;
}

void
sq_waiter_free(struct mq_waiter *mw)
{
	struct sq_waiter *w = (struct sq_waiter *)mw;

	if (w->slot[0]) {
		mq_on_signal(NULL);
		poked = NULL;
	}
	free(w);
}

/* Which slots moved since they were last seen: bit i for topic i. */
static uint32_t
moved(struct sq_waiter *w)
{
	uint32_t cur, bits = 0;
	int i;

	for (i = 0; i < w->n && w->slot[0]; i++)
		if ((cur = __atomic_load_n(w->slot[i], __ATOMIC_ACQUIRE)) !=
		    w->seen[i]) {
			w->seen[i] = cur;
			bits |= (uint32_t)1 << i;
		}
	return bits;
}

/*
 * rc, after which the caller looks: when, and data_version then, dv (0:
 * not asked, a wake on a slot; then a change it made is looked at again
 * once QUIET_MS have passed, not before).
 */
static int
looked(struct sq_waiter *w, int64_t dv, int rc)
{
	if (dv)
		w->dv = dv;
	w->looked = mq_now();
	return rc;
}

/*
 * Returns 2 when a writer changed a topic since the last return (or the
 * waiter's creation), with *changed saying which; 1 when one may have
 * changed (a writer that is not mq; a signal: the caller looks at
 * mq_stop and its children), 0 when `until` (ms since the epoch) came
 * first.
 */
int
sq_wait(struct mq_waiter *mw, int64_t until, uint32_t *changed)
{
	struct sq_waiter *w = (struct sq_waiter *)mw;
	struct sq *q = SQ(mw->q);
	struct timespec ts;
	int64_t now, ms, dv, look = mq_now() + (w->slot[0] ? SAFETY_MS :
	    FALLBACK_MS);

	for (;;) {
		if ((*changed = moved(w)))
			return looked(w, 0, 2);
		now = mq_now();
		if (now >= look && look < until) {
			if ((dv = sq_data_version(q)) != w->dv)
				return looked(w, dv, 1);
			look = now + (w->slot[0] ? SAFETY_MS : FALLBACK_MS);
		}
		if (now >= until) {
			/* a change is told QUIET_MS after the caller's last
			   look at the soonest: before that, nothing to ask */
			if (w->slot[0] && now - w->looked < QUIET_MS)
				return MQ_WAIT_QUIET;
			dv = sq_data_version(q);
			if (w->slot[0] && dv == w->dv)
				return MQ_WAIT_QUIET;
			return looked(w, dv, 0);
		}
		ms = (until < look ? until : look) - now;
		if (w->slot[0]) {
			sq_slot_wait(q, w->n, w->topic, w->slot, w->seen, ms);
		} else {
			ts.tv_sec = ms / 1000;
			ts.tv_nsec = ms % 1000 * 1000000;
			if (nanosleep(&ts, NULL) < 0 && errno == EINTR)
				return 1;
		}
	}
}
