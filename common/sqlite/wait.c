/*
 * wait.c: sleeping until a topic may have something new.
 *
 * A waiter sleeps on its topic's slot in the -mq file (engine.c): writers
 * bump it once a commit that changed the topic is durable, and wake the
 * slot's sleepers.  The waiter remembers the number it last saw, taken
 * before the caller's first look at the database, so a commit that lands
 * between a look and the sleep is not missed.  A signal (sig.c) pokes the
 * same word, so one that lands just before the sleep is not slept
 * through either.
 *
 * Writers that are not mq (the sqlite3 shell) bump nothing: every second
 * a waiter asks PRAGMA data_version, which changes whenever another
 * connection committed.  Without the -mq file it asks every 50ms.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "sq.h"

#define SAFETY_MS	1000
#define FALLBACK_MS	50

struct sq_waiter {
	struct mq_waiter base;
	int64_t		 topic;
	uint32_t	*slot;		/* NULL: no -mq file */
	uint32_t	 seen;
	int64_t		 dv;
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
sq_waiter(struct mq *mq, const char *topic)
{
	struct sq *q = SQ(mq);
	struct sq_waiter *w = mq_alloc(sizeof *w);
	struct mq_topic t;

	w->base.q = mq;
	if (sq_topic_get(mq, topic, &t))
		w->topic = t.id;
	if (w->topic && (w->slot = sq_slot(q, w->topic))) {
		w->seen = __atomic_load_n(w->slot, __ATOMIC_ACQUIRE);
		poked = w->slot;
		mq_on_signal(poke);
	}
	w->dv = sq_data_version(q);
	return &w->base;
}

void
sq_waiter_free(struct mq_waiter *mw)
{
	struct sq_waiter *w = (struct sq_waiter *)mw;

	if (w->slot) {
		mq_on_signal(NULL);
		poked = NULL;
	}
	free(w);
}

/*
 * Returns 2 when a writer changed the topic since the last return (or the
 * waiter's creation), 1 when it may have changed (a writer that is not
 * mq; a signal: the caller looks at mq_stop and its children), 0 when
 * `until` (ms since the epoch) came first.
 */
int
sq_wait(struct mq_waiter *mw, int64_t until)
{
	struct sq_waiter *w = (struct sq_waiter *)mw;
	struct sq *q = SQ(mw->q);
	struct timespec ts;
	int64_t now, ms, dv, look = mq_now() + (w->slot ? SAFETY_MS :
	    FALLBACK_MS);
	uint32_t cur;

	for (;;) {
		if (w->slot && (cur = __atomic_load_n(w->slot,
		    __ATOMIC_ACQUIRE)) != w->seen) {
			w->seen = cur;
			return 2;
		}
		now = mq_now();
		if (now >= look) {
			if ((dv = sq_data_version(q)) != w->dv) {
				w->dv = dv;
				return 1;
			}
			look = now + (w->slot ? SAFETY_MS : FALLBACK_MS);
		}
		if (now >= until)
			return 0;
		ms = (until < look ? until : look) - now;
		if (w->slot) {
			sq_slot_wait(q, w->topic, w->slot, w->seen, ms);
		} else {
			ts.tv_sec = ms / 1000;
			ts.tv_nsec = ms % 1000 * 1000000;
			if (nanosleep(&ts, NULL) < 0 && errno == EINTR)
				return 1;
		}
	}
}
