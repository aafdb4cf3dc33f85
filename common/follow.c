/*
 * follow.c: the loop every consumer runs: claim what is there, hand it
 * on, and when there is nothing, sleep until a topic changes, a lease
 * or retry falls due, a handler ends or it is time to stop.
 *
 * A consumer may take from several topics, its lanes (mq-recv TOPIC1
 * TOPIC2 ...), as a member of the group of the same name on each: one
 * sleep wakes on a change to any of them; each lane is claimed from,
 * reaped and registered in on its own, each claim one transaction.
 * Strict order: a claim asks the first lane for all it wants and a later
 * lane only for what the lanes before it lacked, so a message of a later
 * lane is taken only when the earlier ones had nothing more due; one
 * batch may hold several lanes, earlier lanes first.  Fair: the same,
 * but each claim begins at the lane after the one the last began at (the
 * first claim at a lane drawn at random, so that one-message runs take
 * turns too).  Turns are claims, not messages: asking every lane for a
 * share of each claim would cost a transaction a lane a claim (on
 * PostgreSQL, half the rate of one topic), and a worker's claims are
 * its free handler slots, a message or a few.
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
 * A consumer makes its topics and groups when they are not there, so a
 * typo makes a new group that replays the whole topic, or waits on an
 * empty new topic: with MQ_NO_CREATE set it is 66 instead, before any is
 * made; else, when stderr is a terminal, the note to print once they are
 * made, or NULL.
 */
static char *
creating(struct mq *q, struct mq_follow *f)
{
	const char *no = getenv("MQ_NO_CREATE"), *name;
	struct mq_topic t;
	struct mq_group g;
	char *note = NULL;
	size_t len = 0;
	FILE *nf;
	int i, topic, refuse = no && *no && strcmp(no, "0");

	if (!refuse && !isatty(2))
		return NULL;	/* nothing to say: no look (a script's start) */
	if (!(nf = open_memstream(&note, &len)))
		mq_die(MQ_EX_SOFTWARE, "out of memory:");
	for (i = 0; i < f->nlanes; i++) {
		name = f->topics[i];
		topic = mq_topic_get(q, name, &t) > 0;
		if (topic && mq_group_get(q, name, f->c.group, &g) > 0)
			continue;
		if (refuse)
			mq_die(MQ_EX_NOINPUT, "no such %s: %s%s%s (MQ_NO_CREATE "
			    "is set)", topic ? "group" : "topic", name, topic ?
			    "/" : "", topic ? f->c.group : "");
		if (!topic)
			fprintf(nf, "%s: created topic %s and group %s "
			    "(empty)\n", mq_prog, name, f->c.group);
		else
			fprintf(nf, "%s: created group %s on %s (%s, %lld "
			    "messages)\n", mq_prog, f->c.group, name,
			    f->c.latest ? "from the end" :
			    "from the oldest message", (long long)(f->c.latest ?
			    0 : t.msgs));
	}
	fclose(nf);
	if (!len) {
		free(note);
		return NULL;
	}
	return note;
}

/* A lane: its claim (its topic, its woken and consumer) and lease. */
struct lane {
	struct mq_claim	 c;
	int64_t		 lease;
	int64_t		 member;	/* this process, a consumer of it */
};

/* Up to max from lane i into m, each message tagged with its lane. */
static int
claim_lane(struct mq *q, struct lane *L, int i, struct mq_msg *m, int max,
    int64_t *next_due)
{
	int64_t due = INT64_MAX;
	int k, j;

	if (max <= 0)
		return 0;
	k = mq_claim(q, &L[i].c, m, max, &due);
	L[i].c.woken = k == max;	/* more is likely there */
	for (j = 0; j < k; j++) {
		m[j].topic = L[i].c.topic;
		m[j].lane = i;
	}
	if (due < *next_due)
		*next_due = due;
	return k;
}

/*
 * One claim of up to want messages across the lanes (see the top of the
 * file); *next_due as mq_claim's, the earliest of the lanes asked.
 */
static int
claim(struct mq *q, struct mq_follow *f, struct lane *L, int *turn,
    struct mq_msg *m, int want, int64_t *next_due)
{
	int n = f->nlanes, start = f->fair ? *turn : 0, j, k = 0;

	*next_due = INT64_MAX;
	for (j = 0; j < n && k < want && *next_due != 0; j++)
		k += claim_lane(q, L, (start + j) % n, m + k, want - k,
		    next_due);	/* next 0: the lane may have more: again */
	*turn = (*turn + 1) % n;
	return k;
}

int
mq_follow(struct mq *q, struct mq_follow *f)
{
	struct mq_msg *msgs = mq_array(NULL, CHUNK, sizeof *msgs);
	struct lane L[MQ_LANES_MAX];
	struct mq_waiter *w = NULL;
	int64_t now, next_due, reaped, beat, wake, every = MEMBER_BEAT;
	int64_t idle = mq_idle_ms(q);
	int i, k, want, turn = 0, running = 0, stopped = 0, status = 0;
	int quiet = 0, rc;
	uint32_t changed;
	char *note = creating(q, f);

	mq_catch_stop();
	for (i = 0; i < f->nlanes; i++) {
		L[i].c = f->c;
		L[i].c.topic = f->topics[i];
		L[i].lease = f->c.lease;
		L[i].member = 0;
		mq_reap(q, L[i].c.topic, f->c.group);
	}
	reaped = mq_now();
	if (f->fair)	/* so that one-message runs take turns too */
		turn = (int)arc4random_uniform((uint32_t)f->nlanes);
	for (i = 0; i < f->nlanes && f->member; i++) {
		L[i].member = mq_join(q, L[i].c.topic, f->c.group,
		    f->c.latest, f->pgid, f->pgstart, &L[i].lease);
		if (f->beat_lease)	/* else the leases stay the receipts' */
			L[i].c.consumer = L[i].member;
		if (f->c.lease)
			L[i].lease = f->c.lease;
		if (f->beat_lease && (i == 0 || L[i].lease / 3 < every))
			every = L[i].lease / 3;	/* the shortest lease's */
	}
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
			for (i = 0; i < f->nlanes; i++)
				mq_reap(q, L[i].c.topic, f->c.group);
			reaped = now;
		}
		if (!quiet)
			next_due = INT64_MAX;
		want = CHUNK;
		if (f->limit && want > f->limit - f->taken)
			want = (int)(f->limit - f->taken);
		if (f->want)
			want = f->want(f, want);
		if (!stopped && want > 0 && !quiet) {
			k = claim(q, f, L, &turn, msgs, want, &next_due);
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
			for (i = 0; i < f->nlanes; i++)
				mq_beat(q, L[i].member, f->beat_lease &&
				    running ? now + L[i].lease : 0);
			beat = now + every;
		}
		if (!w) {	/* made before one more look: nothing is missed */
			w = mq_waiter_new(q, f->topics, f->nlanes);
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
		changed = 0;
		if ((rc = mq_wait(w, wake, &changed)) == 2)
			for (i = 0; i < f->nlanes; i++)
				if (changed & (uint32_t)1 << i)
					L[i].c.woken = 1;
		/* nothing committed, nothing due, no handler: no look */
		quiet = rc == MQ_WAIT_QUIET && running == 0 &&
		    mq_now() < next_due;
	}
	for (i = 0; i < f->nlanes && f->member; i++)
		mq_leave(q, L[i].member);	/* gives back what it holds */
	mq_waiter_free(w);
	free(msgs);
	return status;
}
