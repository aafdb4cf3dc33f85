/*
 * combine.c: concurrent producers share transactions, not only syncs.
 *
 * A commit holds the writer queue (engine.c) for a hundred microseconds
 * or so, most of it spent on what every transaction pays once: the
 * locks, the pages another process changed read again, the frames
 * written.  A message costs a microsecond or two of that.  So an mq-send
 * of one message leaves it in a slot of the -mq file, then tries the
 * queue: held, it does not wait its turn, as whoever holds the queue and
 * appends takes every slot waiting there into its own transaction before
 * it commits (flat combining); free, it takes the slot back and goes the
 * ordinary way.  The owner sleeps on the slot, wakes with the offset and
 * the number of the commit that stored it, and waits for that commit to
 * be durable as if it were its own.  Slots of the holder's own topic and
 * key join its own append when they can (sq_comb_join): one statement
 * for them all.  Before it takes slots, a holder that sees others send
 * lets the processes ready to run go first (sq_comb_gather), so that
 * senders just handed their next message join this commit.
 *
 * Only what needs nothing but a topic and a body (and a key) goes into a
 * slot: one message, no dedup id, no delay, no headers, to a topic that
 * exists, that fits.  Anything else (or every slot in use) takes the ordinary way.
 *
 * A slot's life: FREE, then FILLING (its owner writes it), READY, then
 * TAKEN by a queue holder inside its transaction, then DONE after its
 * COMMIT, or REFUSED (no such topic, too big: the owner then sends it
 * the ordinary way, which says why), and FREE again once the owner has
 * read it.  Rules:
 * - Only the queue holder takes slots, and it settles every slot it took
 *   before it leaves the queue: DONE after COMMIT, READY again after a
 *   rollback.  So a TAKEN slot seen by the next holder means its taker
 *   died; that holder settles it before it writes anything (sq_comb_
 *   recover, from sq_begin): the dead taker's transaction committed iff
 *   the topic's next offset passed the slot's, since nothing else can
 *   have appended in between (a slot's offset is reset whenever it is
 *   made READY, so a taker that died before it gave one leaves none that
 *   could pass for stored).  (An mq older than this file, or a writer
 *   that may only read the -mq file, does not look; with a taker killed
 *   just then and such a writer next in the queue, the slot's owner can
 *   be told a wrong answer: a duplicate or a message lost that was never
 *   reported as sent.)
 * - The owner sleeps with a short limit and, whenever it wakes with its
 *   slot not settled, tries the queue itself: getting it means nobody
 *   holds it, so the slot is READY (nobody came, or a holder that does
 *   not append left it), settled by a holder that has left, or TAKEN by
 *   one that died; it settles it and goes on.  A holder that leaves the
 *   queue wakes the owners of READY slots.
 * - A holder decides on a slot only once it has taken it (a look
 *   before is a hint: the owner may take a READY slot back and fill it
 *   anew): one it took that turns out not to join its append goes back
 *   to READY.
 * - An owner that gives up (the busy timeout) takes its slot back from
 *   READY; if a holder took it first it waits for the answer.
 * - A slot whose owner died is reused by the next owner that needs one;
 *   a FREE slot has no owner, so a slot just being taken is not one.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "sq.h"
#include "shm.h"

enum { COMB_FREE, COMB_FILLING, COMB_READY, COMB_TAKEN, COMB_DONE,
    COMB_REFUSED };

#define COMB_LOOK_MS	20	/* an owner's sleep before it looks again */

_Static_assert(sizeof(struct sq_comb) <= 8192, "a slot is 8 KB");
/* where t/043-combine.bats reads them */
_Static_assert(offsetof(struct sq_shm, writing) == 24, "writing moved");
_Static_assert(offsetof(struct sq_shm, combined) == 60, "combined moved");
_Static_assert(offsetof(struct sq_shm, comb_word) == 131144, "slots moved");
_Static_assert(offsetof(struct sq_shm, synced) == 40, "synced moved");
_Static_assert(NCOMB <= SQ_NTAKEN, "sq.h: taken[] holds every slot");

static uint32_t
me(void)
{
	static uint32_t pid;

	if (!pid)
		pid = (uint32_t)getpid();
	return pid;
}

static int
dead(uint32_t pid)
{
	return pid && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

static uint32_t *
state_of(struct sq *q, int i)
{
	return &q->shm->comb_word[i].state;
}

/* Sets a slot's state and wakes its owner. */
static void
set_state(struct sq *q, int i, uint32_t state)
{
	uint32_t *w = &q->shm->comb_word[i].wake;

	STORE(state_of(q, i), state);
	ADD(w, 1);
	mq_futex_wake(w);
}

/* From one state to another, if it is still the one: 1 if so. */
static int
move(struct sq *q, int i, uint32_t from, uint32_t to)
{
	return CAS(state_of(q, i), from, to);
}

/*
 * A free slot, or one whose owner died, now FILLING and ours; or -1.  A
 * free slot has no owner (0), so one being taken from FREE is never
 * taken as a dead owner's; of a dead owner's, the one that swaps the
 * owner for itself has it (nobody else changes such a slot's state).
 */
static int
slot_get(struct sq *q)
{
	struct sq_comb *c;
	uint32_t st, o;
	int i;

	for (i = 0; i < NCOMB; i++)
		if (LOAD(state_of(q, i)) == COMB_FREE &&
		    move(q, i, COMB_FREE, COMB_FILLING)) {
			STORE(&q->shm->comb[i].owner, me());
			return i;
		}
	for (i = 0; i < NCOMB; i++) {
		c = &q->shm->comb[i];
		st = LOAD(state_of(q, i));
		o = LOAD(&c->owner);
		if ((st == COMB_FILLING || st == COMB_DONE ||
		    st == COMB_REFUSED) && dead(o) && CAS(&c->owner, o, me())) {
			STORE(state_of(q, i), COMB_FILLING);
			return i;
		}
	}
	return -1;
}

/* The owner lets go of its slot. */
static void
slot_free(struct sq *q, int i)
{
	STORE(&q->shm->comb[i].owner, 0);
	STORE(state_of(q, i), COMB_FREE);
}

/*
 * Back to READY, not stored: off says so to a recovery (a holder that
 * dies after taking it, before it gives it an offset, must not leave an
 * old one that a topic's next offset has passed).
 */
static void
set_ready(struct sq *q, int i)
{
	q->shm->comb[i].off = INT64_MAX;
	set_state(q, i, COMB_READY);
}

/*
 * Sends one message through a slot when the writer queue is busy:
 * returns 1 when it is stored and durable (out filled in), 0 when the
 * caller must append it the ordinary way (then it may hold the queue
 * already).
 */
int
sq_comb_send(struct sq *q, const struct mq_append *a, const struct mq_rec *r,
    struct mq_sent *out)
{
	struct sq_comb *c;
	uint32_t w, st;
	uint64_t seq;
	int64_t start;
	size_t tlen, klen = a->key ? strlen(a->key) : 0;
	int i;

	if (q->sync != SQ_GROUP || !q->shm_rw || q->queued || r->dedup ||
	    a->delay >= 0 || a->at >= 0 || a->replace || a->ttl || a->headers ||
	    r->len > COMB_BODY ||
	    klen > COMB_KEY || (tlen = strlen(a->topic)) > MQ_NAME_MAX)
		return 0;
	if ((i = slot_get(q)) < 0)
		return 0;
	c = &q->shm->comb[i];
	memcpy(c->topic, a->topic, tlen + 1);
	c->haskey = a->key != NULL;
	if (a->key)
		memcpy(c->key, a->key, klen + 1);
	c->len = (uint32_t)r->len;
	if (r->len)
		memcpy(c->body, r->body, r->len);
	c->off = INT64_MAX;
	STORE(&c->taker, 0);
	STORE(state_of(q, i), COMB_READY);
	start = mq_now();
	for (;;) {
		w = LOAD(&q->shm->comb_word[i].wake);
		st = LOAD(state_of(q, i));
		if (st == COMB_DONE) {
			out->off = c->off;
			out->dup = 0;
			seq = c->seq;
			slot_free(q, i);
			sq_durable(q, seq, 0);
			return 1;
		}
		if (st == COMB_REFUSED) {
			slot_free(q, i);
			return 0;
		}
		/*
		 * The queue free: nobody took it (the first time round, the
		 * common case with one writer: the ordinary way, combining
		 * others; its BEGIN settles what a dead holder took), or its
		 * taker is gone (a live one holds the queue until it has
		 * settled the slot).  A slot taken back first: nothing that
		 * fails from here on leaves our message behind to be stored.
		 */
		if (flock(q->shmfd, LOCK_EX | LOCK_NB) == 0) {
			q->queued = 1;
			if (move(q, i, COMB_READY, COMB_FILLING)) {
				slot_free(q, i);
				return 0;
			}
			sq_comb_recover(q);
			sq_queue_leave(q);
			continue;
		}
		/* (the ordinary way reports a lock that fails) */
		if ((errno != EWOULDBLOCK || mq_now() - start >= q->busy_ms) &&
		    move(q, i, COMB_READY, COMB_FILLING)) {
			slot_free(q, i);
			q->queue_since = start;	/* the busy timeout runs on */
			return 0;
		}
		mq_futex_wait(&q->shm->comb_word[i].wake, w, COMB_LOOK_MS);
	}
}

/*
 * In the queue, at the start of a write: the slots a dead holder took
 * (the only TAKEN ones a holder can see) are settled before anything is
 * written.  Its commit, if it made one, is numbered at most writing, and
 * every commit so numbered has ended: written may say so, for the sync.
 */
void
sq_comb_recover(struct sq *q)
{
	struct sq_comb *c;
	sqlite3_stmt *s;
	int64_t next;
	int i, tx = 0;

	if (!q->shm_rw || !q->queued)
		return;
	for (i = 0; i < NCOMB; i++) {
		if (LOAD(state_of(q, i)) != COMB_TAKEN)
			continue;
		c = &q->shm->comb[i];
		if (!q->in_tx) {
			sq_begin_read(q);
			tx = 1;
		}
		/* (a statement any schema version can run: before a migration) */
		s = sq_stmt(q, "SELECT next_off FROM topic WHERE name = ?");
		sqlite3_bind_text(s, 1, c->topic, -1, SQLITE_STATIC);
		next = sq_step(q, s, "cannot read topic") == SQLITE_ROW ?
		    sqlite3_column_int64(s, 0) : 0;
		sqlite3_reset(s);
		if (next > c->off) {
			sq_max_store(&q->shm->written, LOAD(&q->shm->writing));
			c->seq = LOAD(&q->shm->writing);
			set_state(q, i, COMB_DONE);
		} else
			set_ready(q, i);
	}
	if (tx) {
		sq_exec(q, "ROLLBACK", "cannot end read");
		q->in_tx = 0;
	}
}

/* Slots i and j go to the same topic with the same key (or none). */
static int
alike(struct sq *q, int i, int j)
{
	struct sq_comb *a = &q->shm->comb[i], *b = &q->shm->comb[j];

	return !strcmp(a->topic, b->topic) && a->haskey == b->haskey &&
	    (!a->haskey || !strcmp(a->key, b->key));
}

/*
 * Appends the messages of slots in[0..n), alike, in one append; with the
 * topic gone or a body too big for it, each is tried alone, and refused
 * alone.
 */
static void
take_run(struct sq *q, const int *in, int n)
{
	struct sq_comb *c = &q->shm->comb[in[0]];
	struct mq_rec r[NCOMB];
	struct mq_sent s[NCOMB];
	struct mq_append a;
	struct mq_topic t;
	int k;

	memset(&a, 0, sizeof a);
	a.topic = c->topic;
	a.key = c->haskey ? c->key : NULL;
	a.delay = a.at = -1;
	for (k = 0; k < n; k++) {
		r[k].body = q->shm->comb[in[k]].body;
		r[k].len = q->shm->comb[in[k]].len;
		r[k].dedup = NULL;
	}
	if (!sq_topic_row(q, c->topic, &t) ||
	    sq_append_to(q, &t, &a, r, (size_t)n, s) != 0) {
		if (n > 1) {
			for (k = 0; k < n; k++)
				take_run(q, &in[k], 1);
		} else
			set_state(q, in[0], COMB_REFUSED);
		return;
	}
	for (k = 0; k < n; k++) {
		q->shm->comb[in[k]].off = s[k].off;
		q->taken[q->ntaken++] = in[k];
	}
	ADD(&q->shm->combined, (uint32_t)n);
}

/* Slot c's message can join an append a to topic t. */
static int
joins(const struct sq_comb *c, const struct mq_append *a,
    const struct mq_topic *t)
{
	return !strcmp(c->topic, a->topic) && c->haskey == (a->key != NULL) &&
	    (!a->key || !strcmp(c->key, a->key)) &&
	    (int64_t)c->len <= t->max_size;
}

/* Slots waiting to be taken. */
static int
ready(struct sq *q)
{
	int i, n = 0;

	for (i = 0; i < NCOMB; i++)
		n += LOAD(state_of(q, i)) == COMB_READY;
	return n;
}

static int64_t
usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#define GATHER_MAX	4	/* yields of one holder, at most */
#define GATHER_SLOW	1000	/* us: a yield that ran more than senders */
#define GATHER_REST	1000000	/* us without yields after one */

/*
 * The queue holder, before it takes slots, when others send too (a slot
 * waits, or slots were taken, by itself or others, since its last
 * append): gives its CPU to whatever is ready to run, up to GATHER_MAX
 * times while each brings more messages to slots.  A sender just handed
 * its next line then leaves it in a slot for this commit, instead of
 * queueing for a commit of its own with it alone.  With nothing else
 * ready to run a yield returns at once.
 *
 * A yield holds the queue for as long as the others run: a long one
 * (another busy process had the CPU for its time slice, milliseconds)
 * costs more than a commit, so after one the process does not yield for
 * a while.  Nor does a lone sender, nor the first append of a process
 * (a program that sends one message cannot learn from a long yield).
 */
void
sq_comb_gather(struct sq *q)
{
	uint32_t c;
	int64_t t, t0;
	int n, was, k = 0;

	if (!q->shm_rw || q->sync != SQ_GROUP)
		return;
	c = LOAD(&q->shm->combined);
	if (q->gathered && (t = usec()) >= q->gather_after &&
	    ((n = ready(q)) || c != q->combined))
		do {
			was = n;
			sched_yield();
			t0 = t;
			if ((t = usec()) - t0 >= GATHER_SLOW) {
				q->gather_after = t + GATHER_REST;
				break;
			}
			n = ready(q);
		} while (n > was && ++k < GATHER_MAX);
	q->combined = c;	/* only the holder adds to it */
	q->gathered = 1;
}

/*
 * The queue holder's own append of one message, with none of delay,
 * headers, ttl or --replace (a dedup id is the message's own: it may have
 * one), to topic t: the READY slots of the same topic and key whose bodies
 * t takes join it, as r[0..) from slots slot[0..) (room for max): one
 * look at the topic, one change of its counters, one statement for them
 * all.  Returns how many joined; sq_comb_joined gives them their offsets.
 */
int
sq_comb_join(struct sq *q, const struct mq_append *a, const struct mq_topic *t,
    struct mq_rec *r, int *slot, int max)
{
	struct sq_comb *c;
	int i, n = 0;

	if (!q->shm_rw || q->sync != SQ_GROUP || a->delay >= 0 || a->at >= 0 ||
	    a->replace || a->ttl || a->headers)
		return 0;
	for (i = 0; i < NCOMB && n < max; i++) {
		c = &q->shm->comb[i];
		/* a look first; once taken, the slot is ours to read: its
		   owner may have taken it back and filled it anew meanwhile */
		if (LOAD(state_of(q, i)) != COMB_READY || !joins(c, a, t) ||
		    !move(q, i, COMB_READY, COMB_TAKEN))
			continue;
		if (!joins(c, a, t)) {
			set_ready(q, i);
			continue;
		}
		STORE(&c->taker, me());
		r[n].body = c->body;
		r[n].len = c->len;
		r[n].dedup = NULL;
		q->taken[q->ntaken++] = i;
		slot[n++] = i;
	}
	return n;
}

/* The n slots slot[0..n) that joined were stored at s[0..n). */
void
sq_comb_joined(struct sq *q, const int *slot, const struct mq_sent *s, int n)
{
	int k;

	for (k = 0; k < n; k++)
		q->shm->comb[slot[k]].off = s[k].off;
	ADD(&q->shm->combined, (uint32_t)n);
}

/*
 * The queue holder, in its append transaction before COMMIT: appends the
 * message of every READY slot, those of one topic and key in one append
 * (one look at the topic, one change of its counters): runs in the order
 * of their first slots, each in slot order.
 */
void
sq_comb_take(struct sq *q)
{
	int got[NCOMB], run[NCOMB], ngot = 0, nrun, i, j;

	if (!q->shm_rw || q->sync != SQ_GROUP)
		return;
	for (i = 0; i < NCOMB; i++) {
		if (LOAD(state_of(q, i)) != COMB_READY ||
		    !move(q, i, COMB_READY, COMB_TAKEN))
			continue;
		STORE(&q->shm->comb[i].taker, me());
		got[ngot++] = i;
	}
	for (i = 0; i < ngot; i++) {
		if (got[i] < 0)		/* in an earlier run */
			continue;
		run[0] = got[i];
		nrun = 1;
		for (j = i + 1; j < ngot; j++)
			if (got[j] >= 0 && alike(q, got[i], got[j])) {
				run[nrun++] = got[j];
				got[j] = -1;
			}
		take_run(q, run, nrun);
	}
}

/*
 * After the holder's COMMIT (seq: its number), or its rollback (seq 0).
 * Slots are taken only into durable commits, which are numbered.
 */
void
sq_comb_end(struct sq *q, uint64_t seq)
{
	int i;

	for (i = 0; i < q->ntaken; i++) {
		q->shm->comb[q->taken[i]].seq = seq;
		if (seq)
			set_state(q, q->taken[i], COMB_DONE);
		else
			set_ready(q, q->taken[i]);
	}
	q->ntaken = 0;
}

/* Leaving the queue: the owners of slots nobody took look again. */
void
sq_comb_left(struct sq *q)
{
	uint32_t *w;
	int i;

	if (!q->shm_rw)
		return;
	for (i = 0; i < NCOMB; i++)
		if (LOAD(state_of(q, i)) == COMB_READY) {
			w = &q->shm->comb_word[i].wake;
			ADD(w, 1);
			mq_futex_wake(w);
		}
}
