/*
 * policy.c: the delivery rules, the same whatever stores the deliveries.
 * Pure: no I/O, no clock (the caller passes now), so every backend asks
 * here instead of encoding the rules in its own queries.
 *
 * - A failed delivery waits for its group's backoff step (or the delay
 *   the failure asked for) and is tried again, unless it has had
 *   max_attempts deliveries: then it becomes a dead letter.
 * - A lease that ran out counts as a delivery that failed without a
 *   word: at max_attempts it becomes a dead letter, otherwise it is due
 *   again at once.
 * - The backoff schedule's last step repeats.
 * - A message's time never goes back within its topic, and it is never
 *   due before it was sent.
 * - A group moved before the oldest message stored goes on from it, and
 *   one moved past the end waits at the end.
 * - A message whose time to live ran out before a group delivered it
 *   lapses for that group: it is settled, never delivered; one delivered
 *   once (a retry, a lease) goes on as any other.
 * - A cancel settles what a group has not settled, but a message in
 *   flight only with force (its receipt goes stale); a reschedule moves
 *   what waits (not handed out yet, or waiting for a retry), a message in
 *   flight only with force, and never a dead letter (redrive it).
 * - In a group with --idempotent-by, a message's business id is its dedup
 *   id, its key, or a field of its first line.  One whose id the group
 *   acked inside its window is settled as a duplicate, never handed out;
 *   one whose id is leased (a lease that has not run out) waits until
 *   that delivery ends; one without an id goes as in any group.
 * - A group with --rate N/DUR hands out at most N in any DUR (a burst of
 *   N after a quiet DUR, then one every DUR/N): the generic cell rate
 *   algorithm, over the group's one number rate_tat.  Redeliveries
 *   count; duplicates, lapses and dead letters do not.
 */
#include <stdlib.h>
#include <string.h>

#include "mq.h"

int64_t
mq_backoff(const char *schedule, int attempt)
{
	int64_t *steps, d;
	int n;

	if (mq_parse_backoff(schedule, &steps, &n) < 0)
		return 10000;
	if (attempt < 1)
		attempt = 1;
	d = steps[attempt - 1 < n ? attempt - 1 : n - 1];
	free(steps);
	return d;
}

void
mq_rule_fail(const struct mq_group *g, int attempt, int64_t now,
    int64_t delay, const char *why, struct mq_verdict *v)
{
	memset(v, 0, sizeof *v);
	if (attempt >= g->max_attempts) {
		v->state = MQ_DEAD;
		v->due = now;
		snprintf(v->reason, sizeof v->reason,
		    "attempts exhausted (%d)%s%s", attempt, why ? ": " : "",
		    why ? why : "");
		return;
	}
	v->state = MQ_WAITING;
	v->due = now + (delay >= 0 ? delay : mq_backoff(g->backoff, attempt));
	if (why)
		snprintf(v->reason, sizeof v->reason, "%s", why);
}

/* Returns 1 when the delivery whose lease ran out is now a dead letter. */
int
mq_rule_expired(const struct mq_group *g, int attempt, int expired,
    struct mq_verdict *v)
{
	memset(v, 0, sizeof *v);
	if (attempt < g->max_attempts) {
		v->state = MQ_WAITING;
		return 0;
	}
	v->state = MQ_DEAD;
	snprintf(v->reason, sizeof v->reason, "lease expired %d times",
	    expired);
	return 1;
}

/*
 * The time and due time of messages appended at now to a topic whose
 * last message has last_ts, with --delay (or -1) or --at (or -1).
 */
void
mq_rule_stamp(int64_t now, int64_t last_ts, int64_t delay, int64_t at,
    int64_t *ts, int64_t *due)
{
	*ts = now > last_ts ? now : last_ts;
	*due = delay >= 0 ? now + delay : at >= 0 ? at : *ts;
	if (*due < *ts)
		*due = *ts;
}

/*
 * Where a move puts a group now at pos, in a topic whose oldest stored
 * offset is first (0: none) and whose next is next_off; at_time is the
 * backend's offset for MQ_TO_TIME.
 */
int64_t
mq_rule_move(const struct mq_move *m, int64_t at_time, int64_t pos,
    int64_t first, int64_t next_off)
{
	int64_t to, lo = first ? first : next_off;

	switch (m->to) {
	case MQ_TO_EARLIEST: to = 1; break;
	case MQ_TO_LATEST: to = next_off; break;
	case MQ_TO_TIME: to = at_time; break;
	case MQ_TO_OFFSET: to = m->arg; break;
	default: to = pos + m->arg; break;
	}
	if (to < lo)
		to = lo;
	return to > next_off ? next_off : to;
}

/* A paused topic pauses its groups; the later end of the two holds. */
int64_t
mq_paused(const struct mq_topic *t, const struct mq_group *g, int64_t now)
{
	int64_t until = t->paused_until > g->paused_until ? t->paused_until :
	    g->paused_until;

	return until > now ? until : 0;
}

/*
 * state: the group's delivery row of the message (-1: none); ahead: the
 * group's position has not passed it.
 */
int
mq_rule_mark(int op, int state, int ahead, int force)
{
	if (state == MQ_SKIP || (state < 0 && !ahead))
		return MQ_M_NONE;
	if (state == MQ_LEASED && !force)
		return MQ_M_REFUSE;
	if (op == MQ_CANCEL)
		return ahead ? MQ_M_SKIP : MQ_M_DROP;
	if (state == MQ_DEAD)
		return MQ_M_REFUSE;
	return state < 0 ? MQ_M_AHEAD : MQ_M_DUE;
}

/*
 * Whether a message lapses instead of going out: its row's state (-1:
 * none yet) and attempts, and when it expires (0: never).
 */
int
mq_rule_lapsed(int state, int attempt, int64_t expires, int64_t now)
{
	return expires && expires <= now && attempt == 0 &&
	    state != MQ_LEASED;
}

/*
 * A message's business id in a group with --idempotent-by (how: "dedup",
 * "key" or "field:N"): its dedup id, its key, or the Nth field of its
 * first line (fields are separated by blanks, as awk's).  NULL: none.
 */
char *
mq_business_id(const char *how, const struct mq_msg *m, const char *dedup)
{
	const unsigned char *p = m->body, *end = m->body + m->len, *f;
	long n;

	if (!strcmp(how, "dedup"))
		return dedup ? mq_strdup(dedup) : NULL;
	if (!strcmp(how, "key"))
		return m->key ? mq_strdup(m->key) : NULL;
	if (strncmp(how, "field:", 6) || !p)
		return NULL;
	for (n = strtol(how + 6, NULL, 10); ; n--) {
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		if (p == end || *p == '\n' || *p == '\0')
			return NULL;
		for (f = p; p < end && *p != ' ' && *p != '\t' && *p != '\n' &&
		    *p != '\0'; p++)
			;
		if (n == 1)
			return mq_memdup(f, (size_t)(p - f));
	}
}

/* --rate: the microseconds between two deliveries on schedule. */
static int64_t
rate_step(const struct mq_group *g)
{
	return (g->rate_ms * 1000 + g->rate_n - 1) / g->rate_n;
}

/*
 * How many of want may go now under the group's rate (want when it has
 * none); *t0 (us) is the schedule they start from, for mq_rule_rate_tat.
 * 0: none may; *next is when one may (ms).
 */
int
mq_rule_rate(const struct mq_group *g, int64_t now, int want, int64_t *t0,
    int64_t *next)
{
	int64_t step, may, us = now * 1000;

	if (!g->rate_n)
		return want;
	step = rate_step(g);
	*t0 = g->rate_tat > us ? g->rate_tat : us;
	may = (us + g->rate_ms * 1000 - *t0) / step;
	if (may <= 0) {
		*next = (*t0 + step - g->rate_ms * 1000 + 999) / 1000;
		return 0;
	}
	return may < want ? (int)may : want;
}

/* The group's rate_tat once n went from the schedule t0 on. */
int64_t
mq_rule_rate_tat(const struct mq_group *g, int64_t t0, int n)
{
	return g->rate_n && n > 0 ? t0 + n * rate_step(g) : g->rate_tat;
}
