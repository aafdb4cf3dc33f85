/*
 * follow.c: the loop every consumer runs: claim what is there, hand it
 * on, and when there is nothing, sleep until the topic changes, a lease
 * or retry falls due, a handler ends or it is time to stop.
 *
 * Invariants:
 * - The waiter is made before the last look that found nothing, so a
 *   message sent in between wakes it (wait.c).
 * - Consumers of this group and host whose process died are looked for
 *   at the start and then at most once a second (mq_reap), so their
 *   leases come back at once.
 * - A registered consumer (member) beats every third of its lease, with
 *   its leases extended while handlers run (exec mode), and leaves at the
 *   end, which gives back whatever it still holds.
 * - The first SIGTERM or SIGINT stops the claiming; running handlers
 *   finish and are settled.  A second one halts them.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mq.h"

#define CHUNK		256
#define MEMBER_BEAT	10000	/* a printing member: only to stay listed */

/*
 * A consumer makes its topic and group when they are not there, so a
 * typo makes a new group that replays the whole topic, or waits on an
 * empty new topic: with MQ_NO_CREATE set it is 66 instead; else, when
 * stderr is a terminal, the note to print once they are made, or NULL.
 */
static char *
creating(struct mq *q, const struct mq_claim *c)
{
	const char *no = getenv("MQ_NO_CREATE");
	struct mq_topic t;
	struct mq_group g;
	char *note = NULL;
	size_t len = 0;
	FILE *f;
	int topic, refuse = no && *no && strcmp(no, "0");

	if (!refuse && !isatty(2))
		return NULL;	/* nothing to say: no look (a script's start) */
	topic = mq_topic_get(q, c->topic, &t) > 0;
	if (topic && mq_group_get(q, c->topic, c->group, &g) > 0)
		return NULL;
	if (refuse)
		mq_die(MQ_EX_NOINPUT, "no such %s: %s%s%s (MQ_NO_CREATE is "
		    "set)", topic ? "group" : "topic", c->topic, topic ? "/" :
		    "", topic ? c->group : "");
	if (!(f = open_memstream(&note, &len)))
		return NULL;
	if (!topic)
		fprintf(f, "%s: created topic %s and group %s (empty)\n",
		    mq_prog, c->topic, c->group);
	else
		fprintf(f, "%s: created group %s on %s (%s, %lld messages)\n",
		    mq_prog, c->group, c->topic, c->latest ? "from the end" :
		    "from the oldest message", (long long)(c->latest ? 0 :
		    t.msgs));
	fclose(f);
	return note;
}

int
mq_follow(struct mq *q, struct mq_follow *f)
{
	struct mq_msg *msgs = mq_array(NULL, CHUNK, sizeof *msgs);
	struct mq_waiter *w = NULL;
	int64_t now, next_due, reaped, beat, wake, every;
	int64_t idle = mq_idle_ms(q);
	int k, want, running = 0, stopped = 0, status = 0;
	char *note = creating(q, &f->c);

	mq_catch_stop();
	mq_reap(q, f->c.topic, f->c.group);
	reaped = mq_now();
	f->lease = f->c.lease;
	if (f->member) {
		f->c.consumer = mq_join(q, f->c.topic, f->c.group, f->c.latest,
		    f->pgid, f->pgstart, &f->lease);
		if (f->c.lease)
			f->lease = f->c.lease;
	}
	every = f->beat_lease ? f->lease / 3 : MEMBER_BEAT;
	beat = mq_now() + every;
	for (;;) {
		if (f->busy)
			running = f->busy(f);
		if (mq_stop >= 2 && f->halt) {
			f->halt(f);
			break;
		}
		if ((mq_stop || (f->stop_at && mq_now() >= f->stop_at)) &&
		    !stopped) {
			stopped = 1;
			if (mq_stop && running && isatty(2))
				fprintf(stderr, "%s: stopping: waiting for %d "
				    "handler%s; ^C again to kill them\n",
				    mq_prog, running, running == 1 ? "" : "s");
		}
		if (stopped && running == 0)
			break;
		now = mq_now();
		if (now - reaped >= idle) {
			mq_reap(q, f->c.topic, f->c.group);
			reaped = now;
		}
		next_due = INT64_MAX;
		want = CHUNK;
		if (f->limit && want > f->limit - f->taken)
			want = (int)(f->limit - f->taken);
		if (f->want)
			want = f->want(f, want);
		if (!stopped && want > 0) {
			k = mq_claim(q, &f->c, msgs, want, &next_due);
			f->c.woken = k == want;	/* more is likely there */
			if (note) {	/* made by now */
				fputs(note, stderr);
				free(note);
				note = NULL;
			}
			f->taken += k;
			if (k && f->got(f, msgs, k) < 0) {
				status = -1;
				break;
			}
			if (k == want || (k && f->busy) || next_due == 0)
				continue;	/* more may be there; handlers
						   just started count as running */
		}
		if (running == 0 && f->limit && f->taken >= f->limit)
			break;
		if (running == 0 && !f->follow && (mq_now() >= f->until ||
		    (f->first && f->taken)))
			break;
		if (f->member && now >= beat) {
			mq_beat(q, f->c.consumer, f->beat_lease && running ?
			    now + f->lease : 0);
			beat = now + every;
		}
		if (!w) {	/* made before one more look: nothing is missed */
			w = mq_waiter_new(q, f->c.topic);
			continue;
		}
		wake = next_due;
		if (f->member && beat < wake)
			wake = beat;
		if (!f->follow && running == 0 && f->until < wake)
			wake = f->until;
		if (wake > reaped + idle)
			wake = reaped + idle;
		if (f->busy && f->wake_by < wake)
			wake = f->wake_by;	/* a timeout, a pipe to read */
		if (f->stop_at && !stopped && f->stop_at < wake)
			wake = f->stop_at;
		f->c.woken = mq_wait(w, wake) == 2;
	}
	if (f->member)
		mq_leave(q, f->c.consumer);	/* gives back what is still held */
	mq_waiter_free(w);
	free(msgs);
	return status;
}
