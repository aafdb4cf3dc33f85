/*
 * deliver.c: the delivery logic of a consumer group: claim, settle, lease,
 * retry with backoff, dead letters, and the consumers that hold leases.
 *
 * Invariants (the storage layer keeps the rows; this file keeps the rules):
 * - Every offset below grp.pos has been handed out; an offset handed out
 *   and not settled has exactly one delivery row.  Settling deletes the row
 *   (ack) or turns it into a dead letter; nothing else removes it.
 * - A delivery is leased to one receipt at a time: state LEASED with a
 *   fresh random token per attempt.  A receipt whose attempt or token does
 *   not match the row is stale and changes nothing.
 * - attempt counts deliveries.  A delivery that fails or whose lease runs
 *   out at attempt >= max_attempts becomes a dead letter instead of being
 *   retried, so a group delivers a message at most max_attempts times.
 * - Leases taken by a registered consumer (exec mode) belong to that
 *   process; when it is gone (mq_reap) they are released at once.  Other
 *   leases run their full time.
 * - Claiming writes nothing when there is nothing to claim, so idle
 *   consumers do not wake each other.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mq.h"

#define SCAN_MAX	4096	/* messages examined per claim transaction */

const char *
mq_hostname(void)
{
	static char host[256];

	if (!host[0] && (gethostname(host, sizeof host - 1) < 0 || !host[0]))
		strcpy(host, "localhost");
	return host;
}

static void
boot_id(char *buf, size_t len)
{
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

	buf[0] = '\0';
	if (f) {
		if (fgets(buf, (int)len, f))
			buf[strcspn(buf, "\n")] = '\0';
		fclose(f);
	}
}

/* Start time of a process in clock ticks since boot; -1 if unknown. */
static int64_t
proc_start(pid_t pid)
{
	char path[64], buf[1024], *p;
	long long v = -1;
	size_t n;
	FILE *f;
	int i;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	if (!(f = fopen(path, "re")))
		return -1;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* field 2 is "(comm)" and may hold spaces; count from its end */
	if (!(p = strrchr(buf, ')')))
		return -1;
	for (i = 2; i < 22 && p; i++)
		p = strchr(p + 1, ' ');
	if (p)
		v = strtoll(p + 1, NULL, 10);
	return v;
}

static int
alive(const struct mq_consumer *c, const char *boot)
{
	if (strcmp(c->boot, boot))
		return 0;	/* this host rebooted since */
	if (kill((pid_t)c->pid, 0) < 0 && errno == ESRCH)
		return 0;
	if (c->start >= 0 && proc_start((pid_t)c->pid) != c->start)
		return 0;	/* the pid was reused */
	return 1;
}

static int
count_dead(struct mq *q, const char *boot, int release)
{
	struct mq_consumer *c;
	int i, n, dead = 0;

	n = mq_store_consumers_on(q, mq_hostname(), &c);
	for (i = 0; i < n; i++) {
		if (c[i].pid == getpid() || alive(&c[i], boot))
			continue;
		dead++;
		if (release) {
			mq_store_release(q, c[i].id, mq_now());
			mq_store_consumer_del(q, c[i].id);
		}
	}
	free(c);
	return dead;
}

/*
 * Releases the leases of consumers on this host whose process is gone.
 * Reads first, so the common case takes no write lock; then reads again
 * under the lock, since meanwhile another process may have reaped the
 * same row and a new consumer taken its id.
 */
static void
reap(struct mq *q)
{
	char boot[40];

	boot_id(boot, sizeof boot);
	if (count_dead(q, boot, 0)) {
		mq_begin(q);
		count_dead(q, boot, 1);
		mq_commit(q);
	}
}

static void
reap_now_and_then(struct mq *q)
{
	static int64_t last;
	int64_t now = mq_now();

	if (now - last >= 1000) {
		reap(q);
		last = now;
	}
}

/* Registers this process as a consumer of a group; *lease gets its lease. */
int64_t
mq_consumer_join(struct mq *q, const char *topic, const char *group,
    int latest, int64_t *lease)
{
	struct mq_consumer c;
	struct mq_topic t;
	struct mq_group g;
	int64_t id;

	memset(&c, 0, sizeof c);
	snprintf(c.host, sizeof c.host, "%s", mq_hostname());
	boot_id(c.boot, sizeof c.boot);
	c.pid = getpid();
	c.start = proc_start(getpid());
	c.since = c.seen = mq_now();
	mq_begin(q);
	mq_topic_ensure(q, topic, &t);
	if (!mq_group_get(q, &t, group, &g))
		mq_group_create(q, &t, group, latest, &g);
	c.grp = g.id;
	if (lease)
		*lease = g.lease;
	id = mq_store_consumer_add(q, &c);
	mq_commit(q);
	return id;
}

/* Leaving releases whatever is still held: redelivered at once. */
void
mq_consumer_leave(struct mq *q, int64_t id)
{
	mq_begin(q);
	mq_store_release(q, id, mq_now());
	mq_store_consumer_del(q, id);
	mq_commit(q);
}

void
mq_consumer_heartbeat(struct mq *q, int64_t id, int64_t lease_until)
{
	mq_begin(q);
	mq_store_consumer_seen(q, id, mq_now());
	if (lease_until)
		mq_store_extend_consumer(q, id, lease_until);
	mq_commit(q);
}

static int64_t
backoff_step(const struct mq_group *g, int attempt)
{
	int64_t *steps, d;
	int n;

	if (mq_parse_backoff(g->backoff, &steps, &n) < 0)
		return 10000;
	d = steps[attempt - 1 < n ? attempt - 1 : n - 1];
	free(steps);
	return d;
}

struct claimer {
	struct mq		*q;
	const struct mq_claim	*c;
	struct mq_topic		 t;
	struct mq_group		 g;
	int64_t			 now, lease;
	struct mq_msg		*out;
	int			 n, max, changed;
};

static void
deliver(struct claimer *k, struct mq_delivery *d)
{
	struct mq *q = k->q;
	struct mq_msg *m = &k->out[k->n];

	d->attempt++;
	k->g.delivered++;
	if (k->c->autoack) {
		if (d->state >= 0)
			mq_store_delivery_del(q, d->grp, d->off);
		k->g.settled++;
		mq_store_history(q, d->grp, d->off, d->attempt, "acked",
		    k->c->consumer, "auto-ack");
	} else {
		d->state = MQ_LEASED;
		d->due = k->now + k->lease;
		d->token = arc4random();
		d->consumer = k->c->consumer;
		mq_store_delivery_put(q, d, NULL);
		mq_store_history(q, d->grp, d->off, d->attempt, "delivered",
		    k->c->consumer, NULL);
	}
	k->changed = 1;
	memset(m, 0, sizeof *m);
	if (!mq_store_msg(q, k->t.id, d->off, m)) {
		/* purged under a delivery: nothing left to deliver */
		mq_store_delivery_del(q, d->grp, d->off);
		return;
	}
	m->attempt = d->attempt;
	m->token = d->token;
	if (!k->c->autoack)	/* settled already: no receipt to give */
		mq_format_receipt(m->receipt, sizeof m->receipt, k->t.name,
		    k->g.name, d->off, d->attempt, d->token);
	k->n++;
}

/*
 * Due deliveries, until max are claimed or none is due.  A lease that ran
 * out at max attempts becomes a dead letter and takes no slot: the loop
 * goes on (every row it sees leaves the due set, so it ends).
 */
static void
claim_due(struct claimer *k)
{
	struct mq_delivery *d = mq_array(NULL, k->max, sizeof *d);
	char reason[64];
	int i, n;

again:
	n = mq_store_due(k->q, &k->g, k->now, d, k->max - k->n);
	for (i = 0; i < n; i++) {
		if (d[i].state == MQ_LEASED) {
			d[i].expired++;
			mq_store_history(k->q, d[i].grp, d[i].off, d[i].attempt,
			    "expired", d[i].consumer, "lease ran out");
			k->changed = 1;
			if (d[i].attempt >= k->g.max_attempts) {
				snprintf(reason, sizeof reason,
				    "lease expired %d times", d[i].expired);
				d[i].state = MQ_DEAD;
				d[i].consumer = 0;
				k->g.deadlettered++;
				mq_store_delivery_put(k->q, &d[i], reason);
				mq_store_history(k->q, d[i].grp, d[i].off,
				    d[i].attempt, "dead", 0, reason);
				continue;
			}
		}
		deliver(k, &d[i]);
	}
	for (i = 0; i < n; i++)
		mq_delivery_free(&d[i]);
	if (n > 0 && k->n < k->max)
		goto again;
	free(d);
}

static void
claim_new(struct claimer *k)
{
	struct mq_delivery *d = mq_array(NULL, 256, sizeof *d);
	int i, n, scanned = 0;

	while (k->n < k->max && scanned < SCAN_MAX) {
		n = mq_store_new(k->q, &k->g, k->g.pos, k->t.next_off, d,
		    k->max - k->n < 256 ? k->max - k->n : 256);
		if (n == 0)
			break;
		for (i = 0; i < n; i++) {
			k->g.pos = d[i].off + 1;
			k->changed = 1;
			scanned++;
			if (d[i].due > k->now || (k->g.ordered && d[i].key &&
			    mq_store_key_busy(k->q, &k->g, d[i].key))) {
				/* delayed, or behind its key: wait as a row */
				d[i].state = MQ_WAITING;
				d[i].due = d[i].due > k->now ? d[i].due : k->now;
				mq_store_delivery_put(k->q, &d[i], NULL);
				continue;
			}
			deliver(k, &d[i]);
		}
		for (i = 0; i < n; i++)
			mq_delivery_free(&d[i]);
	}
	free(d);
}

/*
 * Claims up to max messages for a group, creating topic and group on first
 * use.  Returns how many were put in out[] (bodies and receipts filled);
 * all are committed when this returns.
 */
int
mq_claim(struct mq *q, const struct mq_claim *c, struct mq_msg *out, int max,
    int64_t *next_due)
{
	struct claimer k;

	memset(&k, 0, sizeof k);
	k.q = q;
	k.c = c;
	k.out = out;
	k.max = max;
	reap_now_and_then(q);
	/*
	 * Nothing to claim: learn it without the write lock, in one read
	 * transaction (one shared lock, not one per query: every commit to
	 * the database, of any topic, wakes each waiting consumer for this).
	 */
	mq_begin_read(q);
	k.now = mq_now();
	if (mq_topic_get(q, c->topic, &k.t) &&
	    mq_group_get(q, &k.t, c->group, &k.g) &&
	    !mq_store_claimable(q, &k.g, k.now)) {
		if (next_due)
			*next_due = mq_store_next_due(q, &k.g, k.now);
		mq_rollback(q);
		return 0;
	}
	mq_rollback(q);
	mq_begin(q);
	k.now = mq_now();
	if (!mq_topic_get(q, c->topic, &k.t)) {
		mq_topic_ensure(q, c->topic, &k.t);
		k.changed = 1;
	}
	if (!mq_group_get(q, &k.t, c->group, &k.g)) {
		mq_group_create(q, &k.t, c->group, c->latest, &k.g);
		k.changed = 1;
	}
	k.lease = c->lease ? c->lease : k.g.lease;
	claim_due(&k);
	if (k.n < k.max)
		claim_new(&k);
	if (next_due)
		*next_due = k.n ? k.now : mq_store_next_due(q, &k.g, k.now);
	if (k.changed) {
		mq_group_save(q, &k.g);
		mq_commit(q);
	} else {
		mq_rollback(q);
	}
	return k.n;
}

/*
 * Settles one receipt inside the caller's write transaction.
 */
int
mq_settle(struct mq *q, const struct mq_receipt *r, const struct mq_settle *s)
{
	struct mq_topic t;
	struct mq_group g;
	struct mq_delivery d;
	char reason[512];
	int64_t now = mq_now();
	int ret = MQ_SETTLED;

	if (!mq_topic_get(q, r->topic, &t) || !mq_group_get(q, &t, r->group, &g))
		return MQ_UNKNOWN;
	if (!mq_store_delivery_get(q, g.id, r->off, &d))
		return r->off < t.next_off ? MQ_STALE : MQ_UNKNOWN;
	if (d.state != MQ_LEASED || d.attempt != r->attempt ||
	    d.token != r->token) {
		mq_delivery_free(&d);
		return MQ_STALE;
	}
	switch (s->how) {
	case MQ_ACK:
		mq_store_delivery_del(q, g.id, d.off);
		g.settled++;
		mq_group_save(q, &g);
		mq_store_history(q, g.id, d.off, d.attempt, "acked", 0, NULL);
		break;
	case MQ_FAIL:
		g.failed++;
		if (d.attempt >= g.max_attempts) {
			g.deadlettered++;
			snprintf(reason, sizeof reason, "attempts exhausted (%d)%s%s",
			    d.attempt, s->reason ? ": " : "",
			    s->reason ? s->reason : "");
			d.state = MQ_DEAD;
			d.consumer = 0;
			mq_store_delivery_put(q, &d, reason);
			mq_store_history(q, g.id, d.off, d.attempt, "failed", 0,
			    s->reason);
			mq_store_history(q, g.id, d.off, d.attempt, "dead", 0,
			    reason);
			ret = MQ_WENT_DEAD;
			break;
		}
		d.state = MQ_WAITING;
		d.due = now + (s->delay >= 0 ? s->delay :
		    backoff_step(&g, d.attempt));
		d.consumer = 0;
		mq_store_delivery_put(q, &d, s->reason);
		mq_store_history(q, g.id, d.off, d.attempt, "failed", 0,
		    s->reason);
		break;
	case MQ_DEAD_LETTER:
		g.deadlettered++;
		d.state = MQ_DEAD;
		d.consumer = 0;
		mq_store_delivery_put(q, &d, s->reason ? s->reason :
		    "dead-lettered");
		mq_store_history(q, g.id, d.off, d.attempt, "dead", 0,
		    s->reason ? s->reason : "dead-lettered");
		break;
	case MQ_EXTEND:
		d.due = now + s->extend;
		mq_store_delivery_put(q, &d, NULL);
		break;
	case MQ_RELEASE:
		d.state = MQ_WAITING;
		d.due = now;
		d.consumer = 0;
		mq_store_delivery_put(q, &d, NULL);
		mq_store_history(q, g.id, d.off, d.attempt, "released", 0,
		    s->reason);
		break;
	}
	if (s->how == MQ_FAIL || s->how == MQ_DEAD_LETTER)
		mq_group_save(q, &g);
	mq_delivery_free(&d);
	return ret;
}
