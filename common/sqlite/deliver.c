/*
 * deliver.c: appending, claiming and settling, and the consumers that
 * hold leases.  The rules (backoff, dead letters, reasons) are policy.c's;
 * this file keeps the rows.
 *
 * Invariants:
 * - topic.next_off is read and raised inside the append's write
 *   transaction, so offsets are dense and unique; the counters beside it
 *   change by increments.
 * - Every offset below grp.pos has been handed out; one handed out and
 *   not settled has exactly one delivery row.  pos only grows, by max().
 * - A delivery is leased to one receipt at a time: state 1 with a fresh
 *   random token per attempt.  Settling names attempt and token in the
 *   statement that changes the row, so a stale receipt changes nothing.
 * - attempt counts deliveries; at max_attempts a failure or an expired
 *   lease makes a dead letter instead of a retry.
 * - A claim that finds nothing writes nothing (a read only), so idle
 *   consumers take no lock; a claim commits without a sync (losing it only
 *   delivers again), but what it returns was durable first.  Appends,
 *   settles and auto-acks are durable when they return.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sq.h"

#define SCAN_MAX	4096	/* messages examined per claim */
#define REREAD_MS	5000	/* sq_reap: a list of consumers kept so long */

/*
 * A history row: an attempt that ended (with when and by whom it was
 * delivered: a->since 0 for none), or a redrive.
 */
void
sq_history(struct sq *q, int64_t grp, int64_t off, int attempt,
    const char *event, const char *reason, const struct sq_by *a)
{
	sqlite3_stmt *s = sq_stmt(q, "INSERT INTO history (grp, off, ts, n, "
	    "attempt, event, host, pid, reason, since, dhost, dpid) "
	    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");

	sqlite3_bind_int64(s, 1, grp);
	sqlite3_bind_int64(s, 2, off);
	sqlite3_bind_int64(s, 3, mq_now());
	sqlite3_bind_int64(s, 4, mq_history_n());
	sqlite3_bind_int(s, 5, attempt);
	sqlite3_bind_text(s, 6, event, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 7, mq_hostname(), -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 8, mq_pid());
	if (reason)
		sqlite3_bind_text(s, 9, reason, -1, SQLITE_STATIC);
	if (a && a->since) {
		sqlite3_bind_int64(s, 10, a->since);
		sqlite3_bind_text(s, 11, a->host, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(s, 12, a->pid);
	}
	sq_step(q, s, "cannot record history");
}

/* Who delivered an attempt: columns since, host, pid from column i on. */
static void
by_cols(sqlite3_stmt *s, int i, struct sq_by *a)
{
	a->since = sqlite3_column_int64(s, i);
	sq_copy(s, i + 1, a->host, sizeof a->host);
	a->pid = sqlite3_column_int64(s, i + 2);
}

/* The b of the largest 2^b <= n (n >= 1), at most 4. */
static int
rows_log2(int n)
{
	int b;

	for (b = 4; 1 << b > n; b--)
		;
	return b;
}

/*
 * Statements that write rows 2^b at a time (b = 0..4): head ends in
 * "FROM (VALUES ", row is "(?, ...)"; the parameters the head names come
 * first, so those of row j follow them.  A caller writes n rows with the
 * largest that fits (rows_log2), then the rest.  One row is a plain
 * INSERT ... VALUES, one, with the same parameters numbered alike: SQLite
 * runs it in about a third fewer instructions than a SELECT of one row
 * of VALUES (callgrind, mq-send of one message a commit: 10.6k against
 * 14.8k).
 */
#define ROWS2(r)	r ", " r
#define ROWS4(r)	ROWS2(r) ", " ROWS2(r)
#define ROWS8(r)	ROWS4(r) ", " ROWS4(r)
#define ROWS16(r)	ROWS8(r) ", " ROWS8(r)
#define ROWS_MAX	16
#define ROWS_SQL(one, head, r) { one, head ROWS2(r) ")", \
	head ROWS4(r) ")", head ROWS8(r) ")", head ROWS16(r) ")" }

/* appending */

/* A dedup id seen inside the window: the offset it first got, else 0. */
static int64_t
dedup_seen(struct sq *q, const struct mq_topic *t, const char *id,
    int64_t now)
{
	sqlite3_stmt *s = sq_stmt(q, "SELECT off FROM dedup "
	    "WHERE topic = ? AND id = ? AND ts > ?");
	int64_t off = 0;

	sqlite3_bind_int64(s, 1, t->id);
	sqlite3_bind_text(s, 2, id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, now - t->dedup_window);
	if (sq_step(q, s, "cannot read dedup ids") == SQLITE_ROW)
		off = sqlite3_column_int64(s, 0);
	sqlite3_reset(s);
	return off;
}

/* What the messages of one append share: times (expires 0: never). */
struct stamp {
	int64_t		ts, due, expires;
};

/*
 * Writes messages r[at[i]] at offsets off[i], i < n (n <= ROWS_MAX), with
 * the stamps, key and headers they share.
 */
static void
msg_rows(struct sq *q, const struct mq_topic *t, const struct mq_append *a,
    const struct stamp *st, const struct mq_rec *r, const size_t *at,
    const int64_t *off, int n)
{
	static const char *const sql[] = ROWS_SQL("INSERT INTO msg (topic, ts, "
	    "due, key, expires, headers, off, body, dedup) VALUES (?1, ?2, ?3, "
	    "?4, ?5, ?6, ?7, ?8, ?9)", "INSERT INTO msg (topic, "
	    "ts, due, key, expires, headers, off, body, dedup) SELECT ?1, ?2, "
	    "?3, ?4, ?5, ?6, column1, column2, column3 FROM (VALUES ",
	    "(?, ?, ?)");
	const struct mq_rec *m;
	sqlite3_stmt *s;
	int i, j, b, p;

	for (i = 0; i < n; ) {
		b = rows_log2(n - i);
		s = sq_stmt(q, sql[b]);
		sqlite3_bind_int64(s, 1, t->id);
		sqlite3_bind_int64(s, 2, st->ts);
		sqlite3_bind_int64(s, 3, st->due);
		if (a->key)
			sqlite3_bind_text(s, 4, a->key, -1, SQLITE_STATIC);
		if (st->expires)
			sqlite3_bind_int64(s, 5, st->expires);
		if (a->headers)
			sqlite3_bind_text(s, 6, a->headers, -1, SQLITE_STATIC);
		for (j = 0; j < 1 << b; j++, i++) {
			m = &r[at[i]];
			p = 7 + 3 * j;
			sqlite3_bind_int64(s, p, off[i]);
			sqlite3_bind_blob64(s, p + 1, m->len ? m->body : "",
			    m->len, SQLITE_STATIC);
			if (m->dedup)
				sqlite3_bind_text(s, p + 2, m->dedup, -1,
				    SQLITE_STATIC);
		}
		sq_step(q, s, "cannot store message");
	}
}

/*
 * In a write transaction: appends n messages to topic t (as read in this
 * transaction), or with MQ_E_TOOBIG none.
 */
int
sq_append_to(struct sq *q, const struct mq_topic *t, struct mq_append *a,
    const struct mq_rec *r, size_t n, struct mq_sent *out)
{
	sqlite3_stmt *s;
	int64_t now, ts, due, off, bytes = 0, stored = 0, ttl;
	int64_t offs[ROWS_MAX];
	struct stamp st;
	size_t i, at[ROWS_MAX];
	int np = 0;

	ttl = a->ttl ? a->ttl : t->ttl;		/* 0: for ever */
	for (i = 0; i < n; i++)
		if (r[i].len > (size_t)t->max_size) {
			a->bad = i;
			a->max_size = t->max_size;
			return MQ_E_TOOBIG;
		}
	now = mq_now();
	mq_rule_stamp(now, t->last_ts, a->delay, a->at, &ts, &due);
	off = t->next_off;
	st.ts = ts;
	st.due = due > ts ? due : ts;
	st.expires = ttl ? ts + ttl : 0;
	for (i = 0; i < n; i++) {
		out[i].dup = 0;
		if (r[i].dedup && (out[i].off = dedup_seen(q, t, r[i].dedup,
		    now))) {
			out[i].dup = 1;
			continue;
		}
		if (r[i].dedup) {
			s = sq_stmt(q, "INSERT OR REPLACE INTO dedup "
			    "(topic, id, off, ts) VALUES (?, ?, ?, ?)");
			sqlite3_bind_int64(s, 1, t->id);
			sqlite3_bind_text(s, 2, r[i].dedup, -1, SQLITE_STATIC);
			sqlite3_bind_int64(s, 3, off);
			sqlite3_bind_int64(s, 4, now);
			sq_step(q, s, "cannot store dedup id");
		}
		at[np] = i;
		offs[np++] = off;
		if (np == ROWS_MAX) {
			msg_rows(q, t, a, &st, r, at, offs, np);
			np = 0;
		}
		out[i].off = off++;
		stored++;
		bytes += r[i].len;
	}
	if (np)
		msg_rows(q, t, a, &st, r, at, offs, np);
	if (stored) {
		s = sq_stmt(q, "UPDATE topic SET next_off = next_off + ?2, "
		    "msgs = msgs + ?2, bytes = bytes + ?3, "
		    "last_ts = max(last_ts, ?4) WHERE id = ?1");
		sqlite3_bind_int64(s, 1, t->id);
		sqlite3_bind_int64(s, 2, stored);
		sqlite3_bind_int64(s, 3, bytes);
		sqlite3_bind_int64(s, 4, ts);
		sq_step(q, s, "cannot update topic");
		if (a->replace && a->key)
			sq_replace_older(q, t, a->key, off - 1);
		sq_touch(q, t->id);
	}
	return 0;
}

/*
 * In a write transaction: appends n messages, making the topic if need
 * be, or with MQ_E_TOOBIG none (the topic may have been made: roll back).
 */
int
sq_append_tx(struct sq *q, struct mq_append *a, const struct mq_rec *r,
    size_t n, struct mq_sent *out)
{
	struct mq_topic t;

	sq_topic_ensure(q, a->topic, &t);
	return sq_append_to(q, &t, a, r, n, out);
}

/*
 * One message while the writer queue is busy goes through a slot
 * (combine.c); otherwise a transaction of its own, which takes along
 * the slots others left: those of its topic and key in its own append
 * when it is one message with none of delay, headers, ttl or --replace,
 * the others in appends of their own.
 */
int
sq_append(struct mq *mq, struct mq_append *a, const struct mq_rec *r,
    size_t n, struct mq_sent *out)
{
	struct sq *q = SQ(mq);
	struct mq_rec rj[SQ_NTAKEN + 1];
	struct mq_sent sj[SQ_NTAKEN + 1];
	struct mq_topic t;
	int slot[SQ_NTAKEN], rc, k = 0;

	if (n == 1 && sq_comb_send(q, a, r, out))
		return 0;
	sq_begin(q);
	sq_topic_ensure(q, a->topic, &t);
	sq_comb_gather(q);
	if (n == 1 && r[0].len <= (size_t)t.max_size)
		k = sq_comb_join(q, a, &t, rj + 1, slot, SQ_NTAKEN);
	if (k) {
		rj[0] = r[0];
		rc = sq_append_to(q, &t, a, rj, (size_t)k + 1, sj);
		out[0] = sj[0];
		sq_comb_joined(q, slot, sj + 1, k);
	} else
		rc = sq_append_to(q, &t, a, r, n, out);
	if (rc != 0) {
		sq_rollback(q);
		return rc;
	}
	sq_comb_take(q);
	sq_commit(q, SQ_DURABLE);
	return 0;
}

/* claiming */

/*
 * A lease made and not yet written: claim_new writes up to LEASE_MAX in
 * one statement, as SQLite opens the cursors of delivery's table and
 * indexes once a statement, not once a row.  What it reads in between
 * counts them itself (kept()): a key or business id they hold.  key and
 * bid point into the struct due, which lives until they are written.
 * claim_due writes each lease at once: its leases replace rows that are
 * there already, which kept() would count a second time.
 */
struct lease {
	int64_t		 off;
	int		 attempt, expired;
	uint32_t	 token;
	const char	*key, *bid;
};

#define LEASE_MAX	16

struct claimer {
	struct sq		*q;
	const struct mq_claim	*c;
	struct mq_topic		 t;
	struct mq_group		 g;
	int64_t			 now, lease, pos;
	int64_t			 delivered, settled, dead, lapsed, dups;
	struct sq_by		 me;	/* delivering now: this process */
	struct mq_msg		*out;
	int			 n, max, changed;
	int			 passed;	/* claim_new passed a due row */
	int			 scanned;	/* messages claim_new looked at */
	struct lease		 lz[LEASE_MAX];	/* leases not yet written */
	int			 nlz;
	int			 batch;		/* keep leases until lz is full */
};

/* A row of a delivery that is due, or of a new message. */
struct due {
	int64_t		off, due, expires;	/* expires 0: never */
	int		state, attempt, expired;	/* state -1: new */
	char		*key;
	char		*bid;		/* business id (--idempotent-by) */
	char		*dedup;		/* the message's dedup id */
	struct sq_by	by;		/* who delivered it (a lease) */
	struct mq_msg	m;		/* the message, read with it */
};

/*
 * Leases kept of key (or of business id bid) for other messages than
 * off.  They are all leased for a time to come; in claim_new, of messages
 * before off.
 */
static int
kept(const struct claimer *k, const char *key, const char *bid, int64_t off)
{
	const struct lease *l;
	int n = 0;

	for (l = k->lz; l < k->lz + k->nlz; l++)
		if (l->off != off && (key ? l->key && !strcmp(l->key, key) :
		    l->bid && !strcmp(l->bid, bid)))
			n++;
	return n;
}

/* Writes the leases kept.  ?1-?6 are the same for all (due, who). */
static void
write_leases(struct claimer *k)
{
	static const char *const sql[] = ROWS_SQL("INSERT OR REPLACE INTO "
	    "delivery (grp, off, state, due, attempt, expired, token, "
	    "consumer, key, since, host, pid, bid) VALUES (?1, ?7, 1, ?2, ?8, "
	    "?9, ?10, ?3, ?11, ?4, ?5, ?6, ?12)", "INSERT OR REPLACE INTO "
	    "delivery (grp, off, state, due, attempt, expired, token, "
	    "consumer, key, since, host, pid, bid) SELECT ?1, column1, 1, "
	    "?2, column2, column3, column4, ?3, column5, ?4, ?5, ?6, column6 "
	    "FROM (VALUES ", "(?, ?, ?, ?, ?, ?)");
	const struct lease *l;
	sqlite3_stmt *s;
	int i = 0, j, b, p;

	while (i < k->nlz) {
		b = rows_log2(k->nlz - i);
		s = sq_stmt(k->q, sql[b]);
		sqlite3_bind_int64(s, 1, k->g.id);
		sqlite3_bind_int64(s, 2, k->now + k->lease);
		if (k->c->consumer)
			sqlite3_bind_int64(s, 3, k->c->consumer);
		sqlite3_bind_int64(s, 4, k->me.since);
		sqlite3_bind_text(s, 5, k->me.host, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 6, k->me.pid);
		for (j = 0; j < 1 << b; j++, i++) {
			l = &k->lz[i];
			p = 7 + 6 * j;
			sqlite3_bind_int64(s, p, l->off);
			sqlite3_bind_int(s, p + 1, l->attempt);
			sqlite3_bind_int(s, p + 2, l->expired);
			sqlite3_bind_int64(s, p + 3, l->token);
			if (l->key)
				sqlite3_bind_text(s, p + 4, l->key, -1,
				    SQLITE_STATIC);
			if (l->bid)
				sqlite3_bind_text(s, p + 5, l->bid, -1,
				    SQLITE_STATIC);
		}
		sq_step(k->q, s, "cannot store delivery");
	}
	k->nlz = 0;
}

/*
 * Acked business ids, remembered for the group's window: bid[i] settled
 * at off[i], n of them.
 */
static void
consumed_rows(struct sq *q, const struct mq_group *g, char *const *bid,
    const int64_t *off, int n, int64_t now)
{
	static const char *const sql[] = ROWS_SQL("INSERT OR REPLACE INTO "
	    "consumed (grp, bid, off, ts) VALUES (?1, ?3, ?4, ?2)",
	    "INSERT OR REPLACE INTO "
	    "consumed (grp, bid, off, ts) SELECT ?1, column1, column2, ?2 "
	    "FROM (VALUES ", "(?, ?)");
	sqlite3_stmt *s;
	int i, j, b;

	for (i = 0; i < n; i += 1 << b) {
		b = rows_log2(n - i);
		s = sq_stmt(q, sql[b]);
		sqlite3_bind_int64(s, 1, g->id);
		sqlite3_bind_int64(s, 2, now);
		for (j = 0; j < 1 << b; j++) {
			sqlite3_bind_text(s, 3 + 2 * j, bid[i + j], -1,
			    SQLITE_STATIC);
			sqlite3_bind_int64(s, 4 + 2 * j, off[i + j]);
		}
		sq_step(q, s, "cannot store business id");
	}
}

static void
deliver(struct claimer *k, struct due *d)
{
	struct sq *q = k->q;
	struct mq_msg *m = &k->out[k->n];
	sqlite3_stmt *s;
	uint32_t token = 0;

	d->attempt++;
	k->delivered++;
	k->changed = 1;
	if (k->c->autoack) {
		if (d->state >= 0) {
			s = sq_stmt(q, "DELETE FROM delivery WHERE grp = ? "
			    "AND off = ?");
			sqlite3_bind_int64(s, 1, k->g.id);
			sqlite3_bind_int64(s, 2, d->off);
			sq_step(q, s, "cannot delete delivery");
		}
		k->settled++;
		sq_history(q, k->g.id, d->off, d->attempt, "acked", "auto-ack",
		    &k->me);
		if (d->bid)
			consumed_rows(q, &k->g, &d->bid, &d->off, 1, k->now);
	} else if (d->m.body) {
		token = mq_token();
		k->lz[k->nlz++] = (struct lease){ d->off, d->attempt,
		    d->expired, token, d->key, d->bid };
		if (!k->batch || k->nlz == LEASE_MAX)
			write_leases(k);
	}
	if (!d->m.body) {
		/* purged under a delivery: nothing left to deliver (the
		   row leased or waiting goes) */
		s = sq_stmt(q, "DELETE FROM delivery WHERE grp = ? AND off = ?");
		sqlite3_bind_int64(s, 1, k->g.id);
		sqlite3_bind_int64(s, 2, d->off);
		sq_step(q, s, "cannot delete delivery");
		return;
	}
	*m = d->m;
	memset(&d->m, 0, sizeof d->m);
	m->attempt = d->attempt;
	m->token = token;
	m->receipt[0] = '\0';
	if (!k->c->autoack)	/* settled already: no receipt to give */
		mq_format_receipt(m->receipt, sizeof m->receipt, k->t.name,
		    k->g.name, m->off, m->attempt, token);
	k->n++;
}

static void
free_due(struct due *d, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		free(d[i].key);
		free(d[i].bid);
		free(d[i].dedup);
		mq_msg_free(&d[i].m);
	}
}

/* The message columns (off, ts, due, key, body, headers) from column i on. */
static void
msg_cols(sqlite3_stmt *s, int i, struct mq_msg *m)
{
	memset(m, 0, sizeof *m);
	if (sqlite3_column_type(s, i) == SQLITE_NULL)
		return;		/* no such message (purged) */
	m->off = sqlite3_column_int64(s, i);
	m->ts = sqlite3_column_int64(s, i + 1);
	m->due = sqlite3_column_int64(s, i + 2);
	m->key = sq_text(s, i + 3);
	m->len = sqlite3_column_bytes(s, i + 4);
	m->body = (unsigned char *)mq_memdup(sqlite3_column_blob(s, i + 4),
	    m->len);
	m->headers = sq_text(s, i + 5);
}

void
sq_msg_row(sqlite3_stmt *s, struct mq_msg *m)
{
	msg_cols(s, 0, m);
}

void
sq_msg_at(sqlite3_stmt *s, int i, struct mq_msg *m)
{
	msg_cols(s, i, m);
}

/*
 * Due deliveries: waiting ones whose time came and leases that ran out,
 * up to max.  In an ordered group a keyed delivery is due only when no
 * earlier unsettled delivery has its key.  A row at or after the group's
 * position (rescheduled before it was handed out: mark.c) waits for the
 * position to pass it, as a delayed message waits: due is when it may
 * go, not a way past the messages before it; so such a row is never
 * leased, and never settled, before the position has passed it.
 */
#define DUE_SQL "SELECT d.off, d.state, d.attempt, d.expired, d.key, " \
	"m.off, m.ts, m.due, m.key, m.body, m.headers, d.since, d.host, " \
	"d.pid, m.expires, m.dedup, d.bid FROM delivery d LEFT JOIN msg m ON " \
	"m.topic = ?4 AND m.off = d.off WHERE d.grp = ?1 AND d.state < 2 " \
	"AND d.due <= ?2 AND d.off < ?5"
#define DUE_ORDERED " AND (d.key IS NULL OR NOT EXISTS (SELECT 1 FROM " \
	"delivery e INDEXED BY delivery_key WHERE e.grp = ?1 AND " \
	"e.key = d.key AND e.off < d.off AND e.state < 2))"
#define DUE_PER_KEY " AND (d.key IS NULL OR (SELECT count(*) FROM " \
	"delivery e INDEXED BY delivery_key WHERE e.grp = ?1 AND " \
	"e.key = d.key AND e.state = 1 AND e.off != d.off) < ?6)"
#define DUE_IDEM " AND (d.bid IS NULL OR NOT EXISTS (SELECT 1 FROM " \
	"delivery e INDEXED BY delivery_bid WHERE e.grp = ?1 AND " \
	"e.bid = d.bid AND e.state = 1 AND e.due > ?2 AND e.off != d.off))"
#define DUE_END " ORDER BY d.due, d.off LIMIT ?3"

static int
due_rows(struct claimer *k, struct due *d, int max)
{
	static const char *const sql[6] = {
		DUE_SQL DUE_END,
		DUE_SQL DUE_ORDERED DUE_END,
		DUE_SQL DUE_PER_KEY DUE_END,
		DUE_SQL DUE_IDEM DUE_END,
		DUE_SQL DUE_ORDERED DUE_IDEM DUE_END,
		DUE_SQL DUE_PER_KEY DUE_IDEM DUE_END,
	};
	sqlite3_stmt *s = sq_stmt(k->q, sql[(k->g.ordered ? 1 :
	    k->g.per_key ? 2 : 0) + 3 * !!*k->g.idem]);
	int n = 0;

	sqlite3_bind_int64(s, 1, k->g.id);
	sqlite3_bind_int64(s, 2, k->now);
	sqlite3_bind_int(s, 3, max);
	sqlite3_bind_int64(s, 4, k->t.id);
	sqlite3_bind_int64(s, 5, k->pos);
	if (k->g.per_key && !k->g.ordered)
		sqlite3_bind_int(s, 6, k->g.per_key);
	while (n < max && sq_step(k->q, s, "cannot read deliveries") ==
	    SQLITE_ROW) {
		memset(&d[n], 0, sizeof d[n]);
		d[n].off = sqlite3_column_int64(s, 0);
		d[n].state = sqlite3_column_int(s, 1);
		d[n].attempt = sqlite3_column_int(s, 2);
		d[n].expired = sqlite3_column_int(s, 3);
		d[n].key = sq_text(s, 4);
		msg_cols(s, 5, &d[n].m);
		by_cols(s, 11, &d[n].by);
		d[n].expires = sqlite3_column_int64(s, 14);
		d[n].dedup = sq_text(s, 15);
		d[n].bid = sq_text(s, 16);
		n++;
	}
	sqlite3_reset(s);
	return n;
}

/* idempotent consumption (--idempotent-by) */

/*
 * What the group knows of a business id, in one look: the offset that
 * settled it inside the window (the result; 0: none), and whether another
 * delivery of it is leased for a time to come (*busy).
 */
static int64_t
bid_seen(struct claimer *k, const struct due *d, int *busy)
{
	sqlite3_stmt *s = sq_stmt(k->q, "SELECT (SELECT off FROM consumed "
	    "WHERE grp = ?1 AND bid = ?2 AND ts > ?3), EXISTS (SELECT 1 FROM "
	    "delivery INDEXED BY delivery_bid WHERE grp = ?1 AND bid = ?2 AND "
	    "state = 1 AND due > ?4 AND off != ?5)");
	int64_t off;

	sqlite3_bind_int64(s, 1, k->g.id);
	sqlite3_bind_text(s, 2, d->bid, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, k->now - k->g.idem_window);
	sqlite3_bind_int64(s, 4, k->now);
	sqlite3_bind_int64(s, 5, d->off);
	sq_step(k->q, s, "cannot read business ids");
	off = sqlite3_column_int64(s, 0);
	*busy = sqlite3_column_int(s, 1);
	sqlite3_reset(s);
	return off;
}

/* An earlier message of key than off is unsettled (an ordered group). */
static int
key_held(struct claimer *k, const char *key, int64_t off)
{
	sqlite3_stmt *s = sq_stmt(k->q, "SELECT 1 FROM delivery INDEXED BY "
	    "delivery_key WHERE grp = ? AND key = ? AND state < 2 AND off < ? "
	    "LIMIT 1");
	int held;

	sqlite3_bind_int64(s, 1, k->g.id);
	sqlite3_bind_text(s, 2, key, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, off);
	held = sq_step(k->q, s, "cannot read deliveries") == SQLITE_ROW;
	sqlite3_reset(s);
	return held;
}

/*
 * Settled with no delivery (its row goes, if it has one): a duplicate,
 * or lapsed (its time to live ran out before the group handed it out).
 */
static void
settle_undelivered(struct claimer *k, struct due *d, int attempt,
    const char *event, const char *why)
{
	sqlite3_stmt *s;

	if (d->state >= 0) {
		s = sq_stmt(k->q, "DELETE FROM delivery WHERE grp = ? AND "
		    "off = ?");
		sqlite3_bind_int64(s, 1, k->g.id);
		sqlite3_bind_int64(s, 2, d->off);
		sq_step(k->q, s, "cannot delete delivery");
	}
	sq_history(k->q, k->g.id, d->off, attempt, event, why, NULL);
	k->settled++;
	k->changed = 1;
}

/*
 * In a group with --idempotent-by: 1 when the message went as a
 * duplicate of one acked (settled, never handed out), or now waits as a
 * row, due, for the delivery of its business id that is leased to end
 * (due_rows passes it by until then); 0: it goes.
 */
static int
idempotent(struct claimer *k, struct due *d)
{
	sqlite3_stmt *s;
	char why[48];
	int64_t first;
	int busy;

	if (!*k->g.idem || (!d->bid && !(d->bid = mq_business_id(k->g.idem,
	    &d->m, d->dedup))))
		return 0;
	if ((first = bid_seen(k, d, &busy))) {
		snprintf(why, sizeof why, "duplicate of #%lld",
		    (long long)first);
		settle_undelivered(k, d, d->attempt, "duplicate", why);
		k->dups++;
		return 1;
	}
	if (!busy && !kept(k, NULL, d->bid, d->off))
		return 0;
	s = sq_stmt(k->q, "INSERT OR REPLACE INTO delivery (grp, off, state, "
	    "due, attempt, expired, key, bid) VALUES (?, ?, 0, ?, ?, ?, ?, ?)");
	sqlite3_bind_int64(s, 1, k->g.id);
	sqlite3_bind_int64(s, 2, d->off);
	sqlite3_bind_int64(s, 3, k->now);
	sqlite3_bind_int(s, 4, d->attempt);
	sqlite3_bind_int(s, 5, d->expired);
	if (d->key)
		sqlite3_bind_text(s, 6, d->key, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 7, d->bid, -1, SQLITE_STATIC);
	sq_step(k->q, s, "cannot store delivery");
	k->changed = 1;
	return 1;
}

/*
 * A group with --per-key N (unordered): N other deliveries of key are
 * leased (their lease run out or not: each comes again itself).
 */
static int
key_full(struct claimer *k, const char *key, int64_t off)
{
	sqlite3_stmt *s;
	int n;

	if (!key || !k->g.per_key || k->g.ordered)
		return 0;
	n = kept(k, key, NULL, off);
	s = sq_stmt(k->q, "SELECT count(*) FROM delivery INDEXED BY "
	    "delivery_key WHERE grp = ? AND key = ? AND state = 1 AND off != ?");
	sqlite3_bind_int64(s, 1, k->g.id);
	sqlite3_bind_text(s, 2, key, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, off);
	if (sq_step(k->q, s, "cannot read deliveries") == SQLITE_ROW)
		n += sqlite3_column_int(s, 0);
	sqlite3_reset(s);
	return n >= k->g.per_key;
}

/*
 * A lease that ran out at max attempts becomes a dead letter and takes no
 * slot: the loop goes on (every row it sees leaves the due set, so it
 * ends).
 */
static void
claim_due(struct claimer *k)
{
	struct due *d = mq_array(NULL, k->max, sizeof *d);
	struct mq_verdict v;
	sqlite3_stmt *s;
	int i, n;

	do {
		n = due_rows(k, d, k->max - k->n);
		for (i = 0; i < n; i++) {
			if (mq_rule_lapsed(d[i].state, d[i].attempt,
			    d[i].expires, k->now)) {
				settle_undelivered(k, &d[i], 0, "lapsed",
				    "its time to live ran out");
				k->lapsed++;
				continue;
			}
			if (key_full(k, d[i].key, d[i].off))
				continue;	/* an earlier row filled it */
			if (d[i].state == MQ_LEASED) {
				d[i].expired++;
				k->changed = 1;
				sq_history(k->q, k->g.id, d[i].off, d[i].attempt,
				    "expired", "lease ran out", &d[i].by);
				if (mq_rule_expired(&k->g, d[i].attempt,
				    d[i].expired, &v)) {
					s = sq_stmt(k->q, "UPDATE delivery SET "
					    "state = 2, consumer = NULL, "
					    "expired = ?3, reason = ?4 "
					    "WHERE grp = ?1 AND off = ?2");
					sqlite3_bind_int64(s, 1, k->g.id);
					sqlite3_bind_int64(s, 2, d[i].off);
					sqlite3_bind_int(s, 3, d[i].expired);
					sqlite3_bind_text(s, 4, v.reason, -1,
					    SQLITE_STATIC);
					sq_step(k->q, s, "cannot store delivery");
					sq_history(k->q, k->g.id, d[i].off,
					    d[i].attempt, "dead", v.reason, NULL);
					k->dead++;
					continue;
				}
			}
			if (!idempotent(k, &d[i]))
				deliver(k, &d[i]);
		}
		free_due(d, n);
	} while (n > 0 && k->n < k->max);
	free(d);
}

/* Delayed, or behind its key: it waits as a row, due when it may go. */
static void
hold(struct claimer *k, struct due *d)
{
	sqlite3_stmt *s = sq_stmt(k->q, "INSERT OR REPLACE INTO delivery "
	    "(grp, off, state, due, attempt, key) VALUES (?, ?, 0, ?, 0, ?)");

	sqlite3_bind_int64(s, 1, k->g.id);
	sqlite3_bind_int64(s, 2, d->off);
	sqlite3_bind_int64(s, 3, d->m.due > k->now ? d->m.due : k->now);
	if (d->key)
		sqlite3_bind_text(s, 4, d->key, -1, SQLITE_STATIC);
	sq_step(k->q, s, "cannot store delivery");
}

/*
 * New messages from the group's position on.  A message with a delivery
 * row there already (cancelled or rescheduled before it was handed out:
 * mark.c) is passed by: a cancelled one's row goes, a rescheduled one's
 * stays and is handed out when due.  Only a group that has such rows
 * pays for looking (one seek per claim otherwise).
 */
static void
claim_new(struct claimer *k)
{
	static const char plain[] = "SELECT off, ts, due, key, body, headers, "
	    "NULL, NULL, expires, dedup FROM msg WHERE topic = ?1 AND "
	    "off >= ?2 AND off < ?3 ORDER BY off LIMIT ?4";
	static const char marked[] = "SELECT m.off, m.ts, m.due, m.key, "
	    "m.body, m.headers, d.state, d.due, m.expires, m.dedup FROM msg m "
	    "LEFT JOIN delivery d ON d.grp = ?5 "
	    "AND d.off = m.off WHERE m.topic = ?1 AND m.off >= ?2 AND "
	    "m.off < ?3 ORDER BY m.off LIMIT ?4";
	struct due *d = mq_array(NULL, 256, sizeof *d);
	sqlite3_stmt *s;
	int i, n, want, ahead;

	ahead = sq_int(k->q, "SELECT EXISTS (SELECT 1 FROM delivery WHERE "
	    "grp = ? AND off >= ?)", 0, 2, k->g.id, k->pos);
	k->batch = 1;
	while (k->n < k->max && k->scanned < SCAN_MAX) {
		want = k->max - k->n < 256 ? k->max - k->n : 256;
		s = sq_stmt(k->q, ahead ? marked : plain);
		sqlite3_bind_int64(s, 1, k->t.id);
		sqlite3_bind_int64(s, 2, k->pos);
		sqlite3_bind_int64(s, 3, k->t.next_off);
		sqlite3_bind_int(s, 4, want);
		if (ahead)
			sqlite3_bind_int64(s, 5, k->g.id);
		for (n = 0; n < want && sq_step(k->q, s, "cannot read messages")
		    == SQLITE_ROW; n++) {
			memset(&d[n], 0, sizeof d[n]);
			msg_cols(s, 0, &d[n].m);
			d[n].off = d[n].m.off;
			d[n].state = sqlite3_column_type(s, 6) == SQLITE_NULL ?
			    -1 : sqlite3_column_int(s, 6);
			d[n].due = sqlite3_column_int64(s, 7);
			d[n].expires = sqlite3_column_int64(s, 8);
			d[n].dedup = sq_text(s, 9);
			d[n].key = d[n].m.key ? mq_strdup(d[n].m.key) : NULL;
		}
		sqlite3_reset(s);
		if (n == 0)
			break;
		for (i = 0; i < n && !k->passed; i++) {
			k->pos = d[i].off + 1;
			k->changed = 1;
			k->scanned++;
			if (d[i].state == MQ_SKIP) {
				s = sq_stmt(k->q, "DELETE FROM delivery WHERE "
				    "grp = ? AND off = ?");
				sqlite3_bind_int64(s, 1, k->g.id);
				sqlite3_bind_int64(s, 2, d[i].off);
				sq_step(k->q, s, "cannot delete delivery");
			}
			/* a due one goes next, before what follows it */
			k->passed = d[i].state == MQ_WAITING &&
			    d[i].due <= k->now;
			if (d[i].state >= 0)
				continue;
			if (mq_rule_lapsed(-1, 0, d[i].expires, k->now)) {
				settle_undelivered(k, &d[i], 0, "lapsed",
				    "its time to live ran out");
				k->lapsed++;
				continue;
			}
			if (d[i].m.due > k->now || (k->g.ordered && d[i].key &&
			    (kept(k, d[i].key, NULL, d[i].off) ||
			    key_held(k, d[i].key, d[i].off))) ||
			    key_full(k, d[i].key, d[i].off))
				hold(k, &d[i]);
			else if (!idempotent(k, &d[i]))
				deliver(k, &d[i]);
		}
		write_leases(k);	/* before their keys are freed */
		free_due(d, n);
		if (k->passed)
			break;
	}
	k->batch = 0;
	free(d);
}

/*
 * Whether a claim could find something: a delivery due, or a message at or
 * after the group's position.  A read, so idle consumers need not take the
 * write lock to learn there is nothing (it may say yes for an ordered
 * group whose due rows all wait behind their keys).
 */
static int
claimable(struct sq *q, const struct mq_group *g, int64_t now)
{
	sqlite3_stmt *s = sq_stmt(q, "SELECT EXISTS (SELECT 1 FROM delivery "
	    "WHERE grp = ?1 AND state < 2 AND due <= ?2 AND off < ?4) OR "
	    "EXISTS (SELECT 1 FROM msg WHERE topic = ?3 AND off >= ?4)");
	int yes = 1;

	sqlite3_bind_int64(s, 1, g->id);
	sqlite3_bind_int64(s, 2, now);
	sqlite3_bind_int64(s, 3, g->topic);
	sqlite3_bind_int64(s, 4, g->pos);
	if (sq_step(q, s, "cannot read deliveries") == SQLITE_ROW)
		yes = sqlite3_column_int(s, 0);
	sqlite3_reset(s);
	return yes;
}

/*
 * The next moment after now a waiting delivery or a lease of the group
 * falls due.  Rows due already but not claimable wait behind their key and
 * move only when another delivery settles, which wakes the topic.
 */
static int64_t
next_due(struct sq *q, const struct mq_group *g, int64_t now)
{
	return sq_int(q, "SELECT min(due) FROM delivery WHERE grp = ? AND "
	    "state < 2 AND due > ?", INT64_MAX, 2, g->id, now);
}

int
sq_claim(struct mq *mq, const struct mq_claim *c, struct mq_msg *out, int max,
    int64_t *next)
{
	struct sq *q = SQ(mq);
	struct claimer k;
	sqlite3_stmt *s;
	int64_t paused, t0 = 0;

	memset(&k, 0, sizeof k);
	k.q = q;
	k.c = c;
	k.out = out;
	k.max = max;
	/*
	 * Nothing to claim: learn it in one read, without the write lock
	 * (not worth it when the topic was just changed for us).
	 */
	if (!c->woken) {
		sq_begin_read(q);
		k.now = mq_now();
		if (sq_need(q, c->topic, c->group, &k.t, &k.g) == 0 &&
		    ((paused = mq_paused(&k.t, &k.g, k.now)) ||
		    !claimable(q, &k.g, k.now))) {
			if (next)
				*next = paused ? paused :
				    next_due(q, &k.g, k.now);
			sq_rollback(q);
			return 0;
		}
		sq_rollback(q);
	}

	sq_begin(q);
	k.now = mq_now();
	if (!sq_topic_row(q, c->topic, &k.t) ||
	    !sq_group_row(q, k.t.id, c->group, &k.g)) {
		sq_topic_ensure(q, c->topic, &k.t);
		sq_group_ensure(q, &k.t, c->group, c->latest, &k.g);
		k.changed = 1;
	}
	if ((paused = mq_paused(&k.t, &k.g, k.now))) {	/* until it ends */
		if (next)
			*next = paused;
		if (k.changed)
			sq_commit(q, SQ_SEEN);
		else
			sq_rollback(q);
		return 0;
	}
	k.lease = c->lease ? c->lease : k.g.lease;
	if (!(k.max = mq_rule_rate(&k.g, k.now, max, &t0, &paused))) {
		if (next)	/* --rate: none may go before then */
			*next = paused;
		if (k.changed)
			sq_commit(q, SQ_SEEN);
		else
			sq_rollback(q);
		return 0;
	}
	k.pos = k.g.pos;
	k.me.since = k.now;
	snprintf(k.me.host, sizeof k.me.host, "%s", mq_hostname());
	k.me.pid = mq_pid();
	claim_due(&k);
	while (k.n < k.max) {
		claim_new(&k);
		if (!k.passed)
			break;
		k.passed = 0;
		claim_due(&k);	/* what claim_new passed, due: it goes next */
	}
	if (next)
		*next = k.scanned >= SCAN_MAX && k.n < k.max ? 0 : k.n ?
		    k.now : next_due(q, &k.g, k.now);
	if (!k.changed) {
		sq_rollback(q);
		return 0;
	}
	s = sq_stmt(q, "UPDATE grp SET pos = max(pos, ?2), "
	    "delivered = delivered + ?3, settled = settled + ?4, "
	    "deadlettered = deadlettered + ?5, lapsed = lapsed + ?7, "
	    "duplicates = duplicates + ?8, rate_tat = ?9, "
	    "settled_ts = CASE WHEN ?4 > 0 THEN ?6 ELSE settled_ts END "
	    "WHERE id = ?1");
	sqlite3_bind_int64(s, 1, k.g.id);
	sqlite3_bind_int64(s, 2, k.pos);
	sqlite3_bind_int64(s, 3, k.delivered);
	sqlite3_bind_int64(s, 4, k.settled);
	sqlite3_bind_int64(s, 5, k.dead);
	sqlite3_bind_int64(s, 6, k.now);
	sqlite3_bind_int64(s, 7, k.lapsed);
	sqlite3_bind_int64(s, 8, k.dups);
	sqlite3_bind_int64(s, 9, mq_rule_rate_tat(&k.g, t0, k.n));
	sq_step(q, s, "cannot update group");
	sq_commit(q, c->autoack ? SQ_DURABLE : SQ_SEEN);
	return k.n;
}

/* settling */

#define LIVE "grp = ?1 AND off = ?2 AND state = 1 AND attempt = ?3 " \
	"AND token = ?4"

struct gcache {
	char		topic[MQ_NAME_MAX + 1];
	struct mq_topic	t;
	struct mq_group	g;
	int		found;
	int64_t		settled, failed, dead;
};

static struct gcache *
group_of(struct sq *q, struct gcache **gc, int *ngc, const struct mq_receipt *r)
{
	struct gcache *c;
	int i;

	for (i = 0; i < *ngc; i++)
		if (!strcmp((*gc)[i].topic, r->topic) &&
		    !strcmp((*gc)[i].g.name, r->group))
			return &(*gc)[i];
	*gc = mq_array(*gc, *ngc + 1, sizeof **gc);
	c = &(*gc)[(*ngc)++];
	memset(c, 0, sizeof *c);
	snprintf(c->topic, sizeof c->topic, "%s", r->topic);
	snprintf(c->g.name, sizeof c->g.name, "%s", r->group);
	c->found = sq_need(q, r->topic, r->group, &c->t, &c->g) == 0;
	return c;
}

static void
bind_live(sqlite3_stmt *s, const struct gcache *c, const struct mq_receipt *r)
{
	sqlite3_bind_int64(s, 1, c->g.id);
	sqlite3_bind_int64(s, 2, r->off);
	sqlite3_bind_int(s, 3, r->attempt);
	sqlite3_bind_int64(s, 4, r->token);
}

/*
 * Whether a receipt names a live delivery (leased, same attempt and
 * token), and if so who delivered it.  The statement that then changes
 * the row names the same attempt and token again.
 */
static int
live(struct sq *q, const struct gcache *c, const struct mq_receipt *r,
    struct sq_by *a, char **bid)
{
	sqlite3_stmt *s = sq_stmt(q, "SELECT since, host, pid, bid FROM "
	    "delivery WHERE " LIVE);
	int found;

	bind_live(s, c, r);
	if ((found = sq_step(q, s, "cannot read delivery") == SQLITE_ROW)) {
		by_cols(s, 0, a);
		if (bid)
			*bid = sq_text(s, 3);
	}
	sqlite3_reset(s);
	return found;
}

/*
 * Changes the live delivery of a receipt; the statement binds ?1-?4.  bid
 * (NULL: not wanted) gets its business id.
 */
static int
change(struct sq *q, sqlite3_stmt *s, const struct gcache *c,
    const struct mq_receipt *r, struct sq_by *a, char **bid)
{
	if (!live(q, c, r, a, bid)) {
		sqlite3_reset(s);
		return 0;
	}
	bind_live(s, c, r);
	sq_step(q, s, "cannot settle delivery");
	return 1;
}

/* The receipt's outcome, or -1 when it matched no live delivery. */
static int
settle_one(struct sq *q, struct gcache *c, struct mq_settle *st, int64_t now)
{
	const struct mq_receipt *r = &st->r;
	struct mq_verdict v;
	struct sq_by a;
	sqlite3_stmt *s;

	switch (st->how) {
	case MQ_ACK:	/* ack_run's */
		mq_die(MQ_EX_SOFTWARE, "an ack settled alone");
	case MQ_FAIL:
		mq_rule_fail(&c->g, r->attempt, now, st->delay, st->reason, &v);
		st->due = v.due;
		s = sq_stmt(q, "UPDATE delivery SET state = ?5, due = ?6, "
		    "consumer = NULL, reason = ?7 WHERE " LIVE);
		sqlite3_bind_int(s, 5, v.state);
		sqlite3_bind_int64(s, 6, v.due);
		if (v.reason[0])
			sqlite3_bind_text(s, 7, v.reason, -1, SQLITE_STATIC);
		if (!change(q, s, c, r, &a, NULL))
			return -1;
		c->failed++;
		sq_history(q, c->g.id, r->off, r->attempt, "failed", st->reason,
		    &a);
		sq_touch(q, c->t.id);
		if (v.state != MQ_DEAD)
			return MQ_SETTLED;
		c->dead++;
		sq_history(q, c->g.id, r->off, r->attempt, "dead", v.reason,
		    NULL);
		return MQ_WENT_DEAD;
	case MQ_DEAD_LETTER:
		s = sq_stmt(q, "UPDATE delivery SET state = 2, consumer = NULL, "
		    "reason = ?5 WHERE " LIVE);
		sqlite3_bind_text(s, 5, st->reason ? st->reason :
		    "dead-lettered", -1, SQLITE_STATIC);
		if (!change(q, s, c, r, &a, NULL))
			return -1;
		c->dead++;
		sq_history(q, c->g.id, r->off, r->attempt, "dead", st->reason ?
		    st->reason : "dead-lettered", &a);
		sq_touch(q, c->t.id);	/* an ordered key moves on */
		return MQ_SETTLED;
	case MQ_GIVEBACK:
		/* settled by an auto-ack that could not be written: due now */
		s = sq_stmt(q, "INSERT INTO delivery (grp, off, state, due, "
		    "attempt, key) SELECT ?1, ?2, 0, ?3, ?4, key FROM msg "
		    "WHERE topic = ?5 AND off = ?2 AND off < (SELECT pos FROM "
		    "grp WHERE id = ?1) AND NOT EXISTS (SELECT 1 FROM delivery "
		    "WHERE grp = ?1 AND off = ?2)");
		sqlite3_bind_int64(s, 1, c->g.id);
		sqlite3_bind_int64(s, 2, r->off);
		sqlite3_bind_int64(s, 3, now);
		sqlite3_bind_int(s, 4, r->attempt);
		sqlite3_bind_int64(s, 5, c->t.id);
		sq_step(q, s, "cannot give back delivery");
		if (sqlite3_changes(q->db) != 1)
			return -1;
		/* its business id was not consumed after all */
		s = sq_stmt(q, "DELETE FROM consumed WHERE grp = ? AND off = ?");
		sqlite3_bind_int64(s, 1, c->g.id);
		sqlite3_bind_int64(s, 2, r->off);
		sq_step(q, s, "cannot give back delivery");
		c->settled--;
		sq_history(q, c->g.id, r->off, r->attempt, "released",
		    st->reason, NULL);
		sq_touch(q, c->t.id);
		return MQ_SETTLED;
	case MQ_EXTEND:
		/* a lease of a business id (--idempotent-by) that ran out
		   may not come back: another may have the id now */
		s = sq_stmt(q, "UPDATE delivery SET due = ?5 WHERE " LIVE
		    " AND (bid IS NULL OR due > ?6)");
		sqlite3_bind_int64(s, 5, now + st->extend);
		sqlite3_bind_int64(s, 6, now);
		return change(q, s, c, r, &a, NULL) &&
		    sqlite3_changes(q->db) ? MQ_SETTLED : -1;
	default:	/* MQ_RELEASE */
		s = sq_stmt(q, "UPDATE delivery SET state = 0, due = ?5, "
		    "consumer = NULL WHERE " LIVE);
		sqlite3_bind_int64(s, 5, now);
		if (!change(q, s, c, r, &a, NULL))
			return -1;
		sq_history(q, c->g.id, r->off, r->attempt, "released",
		    st->reason, &a);
		sq_touch(q, c->t.id);
		return MQ_SETTLED;
	}
}

/*
 * Acks (n <= ACK_MAX) of one group, a few statements for all, not three
 * an ack: one deletes their live deliveries, naming each receipt's
 * offset, attempt and token, and returns who delivered them; history and
 * business ids are written 2^b rows at a time, in the order of the
 * receipts.  A receipt that names no live delivery (or one an earlier
 * receipt of the run took) gets -1.
 */
#define ACK_MAX		16
#define ACK_TERM	"grp = ?1 AND off = ? AND attempt = ? AND token = ?"
#define OR2(t)		t " OR " t
#define OR16(t)		OR2(OR2(OR2(OR2(t))))
#define ACK_LIVE	"state = 1 AND (" OR16(ACK_TERM) ")"
_Static_assert(ACK_MAX == 16 && LEASE_MAX == 16, "16 terms, ROWS16");

/* Binds the receipts to ACK_LIVE. */
static void
bind_acks(sqlite3_stmt *s, const struct gcache *c,
    struct mq_settle *const *ack, int n)
{
	const struct mq_receipt *r;
	int j;

	sqlite3_bind_int64(s, 1, c->g.id);
	for (j = 0; j < n; j++) {
		r = &ack[j]->r;
		sqlite3_bind_int64(s, 2 + 3 * j, r->off);
		sqlite3_bind_int(s, 3 + 3 * j, r->attempt);
		sqlite3_bind_int64(s, 4 + 3 * j, r->token);
	}
}

static void
ack_run(struct sq *q, struct gcache *c, struct mq_settle *const *ack, int n,
    int64_t now)
{
	static const char *const hist[] = ROWS_SQL("INSERT INTO history "
	    "(grp, off, ts, n, attempt, event, host, pid, since, dhost, dpid) "
	    "VALUES (?1, ?5, ?2, ?6, ?7, 'acked', ?3, ?4, ?8, ?9, ?10)",
	    "INSERT INTO history "
	    "(grp, off, ts, n, attempt, event, host, pid, since, dhost, dpid) "
	    "SELECT ?1, column1, ?2, column2, column3, 'acked', ?3, ?4, "
	    "column4, column5, column6 FROM (VALUES ", "(?, ?, ?, ?, ?, ?)");
	struct sq_by a[ACK_MAX], *w;	/* by receipt, as bid */
	char *bid[ACK_MAX], *ids[ACK_MAX];
	int64_t offs[ACK_MAX];
	int got[ACK_MAX];		/* the receipts that go, in order */
	const struct mq_receipt *r;
	sqlite3_stmt *s;
	int64_t off, ts;
	int i, j, ng = 0, nb, b, p;

	s = sq_stmt(q, "DELETE FROM delivery WHERE " ACK_LIVE " RETURNING "
	    "off, attempt, token, since, host, pid, bid");
	bind_acks(s, c, ack, n);
	for (i = 0; i < n; i++) {
		ack[i]->result = -1;
		bid[i] = NULL;
	}
	while (sq_step(q, s, "cannot settle delivery") == SQLITE_ROW) {
		off = sqlite3_column_int64(s, 0);
		for (i = 0; i < n; i++) {
			r = &ack[i]->r;
			if (ack[i]->result < 0 && r->off == off && r->attempt ==
			    sqlite3_column_int(s, 1) && r->token ==
			    (uint32_t)sqlite3_column_int64(s, 2))
				break;
		}
		if (i == n)
			continue;	/* (each row is some receipt's) */
		ack[i]->result = MQ_SETTLED;
		by_cols(s, 3, &a[i]);
		if (*c->g.idem)
			bid[i] = sq_text(s, 6);
	}
	sqlite3_reset(s);
	for (i = 0; i < n; i++)
		if (ack[i]->result == MQ_SETTLED)
			got[ng++] = i;
	if (!ng)
		return;

	ts = mq_now();
	for (i = 0; i < ng; i += 1 << b) {
		b = rows_log2(ng - i);
		s = sq_stmt(q, hist[b]);
		sqlite3_bind_int64(s, 1, c->g.id);
		sqlite3_bind_int64(s, 2, ts);
		sqlite3_bind_text(s, 3, mq_hostname(), -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 4, mq_pid());
		for (j = 0; j < 1 << b; j++) {
			r = &ack[got[i + j]]->r;
			w = &a[got[i + j]];
			p = 5 + 6 * j;
			sqlite3_bind_int64(s, p, r->off);
			sqlite3_bind_int64(s, p + 1, mq_history_n());
			sqlite3_bind_int(s, p + 2, r->attempt);
			if (w->since) {
				sqlite3_bind_int64(s, p + 3, w->since);
				sqlite3_bind_text(s, p + 4, w->host, -1,
				    SQLITE_STATIC);
				sqlite3_bind_int64(s, p + 5, w->pid);
			}
		}
		sq_step(q, s, "cannot record history");
	}
	c->settled += ng;

	/* their business ids, consumed: duplicates waiting go as such */
	for (i = nb = 0; i < ng; i++)
		if (bid[got[i]]) {
			ids[nb] = bid[got[i]];
			offs[nb++] = ack[got[i]]->r.off;
		}
	consumed_rows(q, &c->g, ids, offs, nb, now);
	for (i = 0; i < n; i++)
		free(bid[i]);
	if (c->g.ordered || c->g.per_key || nb)
		sq_touch(q, c->t.id);	/* their keys (or ids) are free */
}

/*
 * Settles a batch of receipts in one transaction.  A receipt that does
 * not match its delivery is stale (its message was handed out) or unknown.
 * The acks of a group go together (ack_run): an ack, and those of its
 * group after it up to one of the group's that is not an ack, passing
 * by other groups' receipts (which change other rows).
 */
#define UNSEEN	(-2)	/* a result not yet known */

void
sq_settle(struct mq *mq, struct mq_settle *st, size_t n)
{
	struct sq *q = SQ(mq);
	struct gcache *gc = NULL, *c;
	struct mq_settle *run[ACK_MAX];
	int64_t now = mq_now();
	sqlite3_stmt *s;
	size_t i, j;
	int ngc = 0, nrun, k, *gi = mq_array(NULL, n ? n : 1, sizeof *gi);

	sq_begin(q);
	for (i = 0; i < n; i++) {
		st[i].result = UNSEEN;
		gi[i] = (int)(group_of(q, &gc, &ngc, &st[i].r) - gc);
	}
	for (i = 0; i < n; i++) {
		if (st[i].result != UNSEEN)
			continue;
		c = &gc[gi[i]];
		run[0] = &st[i];
		nrun = 1;
		if (!c->found)
			st[i].result = -1;
		else if (st[i].how != MQ_ACK)
			st[i].result = settle_one(q, c, &st[i], now);
		else {
			for (j = i + 1; j < n && nrun < ACK_MAX; j++) {
				if (gi[j] != gi[i] || st[j].result != UNSEEN)
					continue;
				if (st[j].how != MQ_ACK)
					break;
				run[nrun++] = &st[j];
			}
			ack_run(q, c, run, nrun, now);
		}
		for (k = 0; k < nrun; k++) {
			if (run[k]->result >= 0)
				continue;
			/* stale: it was handed out; unknown: never */
			run[k]->result = c->found && run[k]->r.off <
			    c->t.next_off ? MQ_STALE : MQ_UNKNOWN;
		}
	}
	free(gi);
	for (i = 0; i < (size_t)ngc; i++) {
		c = &gc[i];
		if (!c->settled && !c->failed && !c->dead)
			continue;	/* (settled < 0: given back) */
		s = sq_stmt(q, "UPDATE grp SET settled = settled + ?2, "
		    "failed = failed + ?3, deadlettered = deadlettered + ?4, "
		    "settled_ts = CASE WHEN ?2 > 0 THEN ?5 ELSE settled_ts END "
		    "WHERE id = ?1");
		sqlite3_bind_int64(s, 1, c->g.id);
		sqlite3_bind_int64(s, 2, c->settled);
		sqlite3_bind_int64(s, 3, c->failed);
		sqlite3_bind_int64(s, 4, c->dead);
		sqlite3_bind_int64(s, 5, now);
		sq_step(q, s, "cannot update group");
	}
	free(gc);
	sq_commit(q, SQ_DURABLE);
}

/* consumers */

int64_t
sq_join(struct mq *mq, const char *topic, const char *group, int latest,
    const struct mq_consumer *me, int64_t *lease)
{
	struct sq *q = SQ(mq);
	struct mq_topic t;
	struct mq_group g;
	sqlite3_stmt *s;
	int64_t id;

	sq_begin(q);
	sq_topic_ensure(q, topic, &t);
	sq_group_ensure(q, &t, group, latest, &g);
	if (lease)
		*lease = g.lease;
	s = sq_stmt(q, "INSERT INTO consumer (grp, host, boot, pid, start, "
	    "since, seen, pgid, pgstart) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
	sqlite3_bind_int64(s, 1, g.id);
	sqlite3_bind_text(s, 2, me->host, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, me->boot, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 4, me->pid);
	sqlite3_bind_int64(s, 5, me->start);
	sqlite3_bind_int64(s, 6, me->since);
	sqlite3_bind_int64(s, 7, me->seen);
	if (me->pgid) {
		sqlite3_bind_int64(s, 8, me->pgid);
		sqlite3_bind_int64(s, 9, me->pgstart);
	}
	sq_step(q, s, "cannot register consumer");
	id = sqlite3_last_insert_rowid(q->db);
	sq_commit(q, SQ_LAZY);
	sq_joined(q);	/* after the commit: a reaper's next read sees it */
	return id;
}

/* Keeps the consumer listed and, with lease_until, its leases alive. */
void
sq_beat(struct mq *mq, int64_t id, int64_t lease_until)
{
	struct sq *q = SQ(mq);
	sqlite3_stmt *s;

	sq_begin(q);
	s = sq_stmt(q, "UPDATE consumer SET seen = ? WHERE id = ?");
	sqlite3_bind_int64(s, 1, mq_now());
	sqlite3_bind_int64(s, 2, id);
	sq_step(q, s, "cannot update consumer");
	if (lease_until) {
		/* not a lease run out whose business id may have gone to
		   another (--idempotent-by) */
		s = sq_stmt(q, "UPDATE delivery SET due = ?2 WHERE "
		    "consumer = ?1 AND state = 1 AND due < ?2 AND (bid IS NULL "
		    "OR due > ?3)");
		sqlite3_bind_int64(s, 1, id);
		sqlite3_bind_int64(s, 2, lease_until);
		sqlite3_bind_int64(s, 3, mq_now());
		sq_step(q, s, "cannot extend leases");
	}
	sq_commit(q, SQ_LAZY);
}

/*
 * The leases of a consumer go back to waiting, due now; the caller's
 * transaction.  Returns the topic they belong to (0: none held).
 */
int64_t
sq_release(struct sq *q, int64_t consumer, int64_t now)
{
	sqlite3_stmt *s = sq_stmt(q, "INSERT INTO history (grp, off, ts, n, "
	    "attempt, event, host, pid, reason, since, dhost, dpid) "
	    "SELECT d.grp, d.off, ?2, ?3, d.attempt, 'released', c.host, "
	    "c.pid, 'consumer gone', d.since, d.host, d.pid FROM delivery d "
	    "JOIN consumer c ON c.id = d.consumer "
	    "WHERE d.consumer = ?1 AND d.state = 1");
	int64_t topic;

	sqlite3_bind_int64(s, 1, consumer);
	sqlite3_bind_int64(s, 2, now);
	sqlite3_bind_int64(s, 3, mq_history_n());	/* one row per (grp, off) */
	sq_step(q, s, "cannot release leases");
	s = sq_stmt(q, "UPDATE delivery SET state = 0, due = ?2, "
	    "consumer = NULL WHERE consumer = ?1 AND state = 1");
	sqlite3_bind_int64(s, 1, consumer);
	sqlite3_bind_int64(s, 2, now);
	sq_step(q, s, "cannot release leases");
	topic = sq_int(q, "SELECT g.topic FROM consumer c JOIN grp g "
	    "ON g.id = c.grp WHERE c.id = ?", 0, 1, consumer);
	s = sq_stmt(q, "DELETE FROM consumer WHERE id = ?");
	sqlite3_bind_int64(s, 1, consumer);
	sq_step(q, s, "cannot remove consumer");
	return topic;
}

/* Leaving releases whatever is still held: delivered again at once. */
void
sq_leave(struct mq *mq, int64_t id)
{
	struct sq *q = SQ(mq);
	int64_t topic;

	sq_begin(q);
	if ((topic = sq_release(q, id, mq_now())))
		sq_touch(q, topic);
	sq_commit(q, SQ_LAZY);
}

/*
 * The group's consumers on this host that are gone, released when release
 * is set; with r, the list read is kept there.
 */
static int
count_gone(struct sq *q, const char *const who[3],
    int (*gone)(const struct mq_consumer *, const char *), const char *boot,
    int release, struct sq_reaped *r)
{
	struct mq_consumer *c;
	int64_t topic;
	int i, n, dead = 0;

	n = sq_consumers_on(q, who[0], who[1], who[2], &c);
	for (i = 0; i < n; i++) {
		if (!gone(&c[i], boot))
			continue;
		dead++;
		if (release && (topic = sq_release(q, c[i].id, mq_now())))
			sq_touch(q, topic);
	}
	if (r) {
		free(r->c);
		r->c = c;
		r->n = n;
	} else
		free(c);
	return dead;
}

/* Where the last read of a group's consumers is kept (sq_reap). */
static struct sq_reaped *
reaped_of(struct sq *q, const char *topic, const char *group)
{
	struct sq_reaped *r;
	int i;

	for (i = 0; i < q->nreaped; i++)
		if (!strcmp(q->reaped[i].topic, topic) &&
		    !strcmp(q->reaped[i].group, group))
			return &q->reaped[i];
	q->reaped = mq_array(q->reaped, q->nreaped + 1, sizeof *q->reaped);
	r = &q->reaped[q->nreaped++];
	memset(r, 0, sizeof *r);
	strlcpy(r->topic, topic, sizeof r->topic);
	strlcpy(r->group, group, sizeof r->group);
	return r;
}

/*
 * Releases the leases of a group's consumers on this host that are gone.
 * Reads first, so the common case takes no write lock; then reads again
 * under the lock, since meanwhile another process may have reaped the same row
 * and a new consumer taken its id.
 *
 * An idle follower reaps every second: the list it read last is asked
 * again (is each one's process alive?) without a transaction while no
 * consumer joined since (the -mq file counts joins) and it is younger
 * than REREAD_MS; only when one ended is the list read again, and gone()
 * asked of the rows read.  A consumer whose join was not counted (its
 * -mq file read-only to it, an older mq, a program that is not mq) is
 * found by the next read, at most REREAD_MS later.
 */
int
sq_reap(struct mq *mq, const char *topic, const char *group, const char *host,
    int (*gone)(const struct mq_consumer *, const char *), const char *boot)
{
	const char *who[3] = { topic, group, host };
	struct sq *q = SQ(mq);
	struct sq_reaped *r = reaped_of(q, topic, group);
	uint32_t joins = sq_joins(q);	/* before the read: see above */
	int64_t now = mq_now();
	int i, n;

	if (q->shm && r->at && joins == r->joins && now >= r->at &&
	    now - r->at < REREAD_MS) {
		/* only asks: a row kept may have gone since, its handler
		   group with it, and its group id be another's */
		for (i = 0; i < r->n && !mq_consumer_ended(&r->c[i], boot);
		    i++)
			;
		if (i == r->n)
			return 0;
	}
	sq_begin_read(q);
	n = count_gone(q, who, gone, boot, 0, r);
	sq_rollback(q);
	r->joins = joins;
	r->at = now;
	if (!n)
		return 0;
	sq_begin(q);
	n = count_gone(q, who, gone, boot, 1, NULL);
	sq_commit(q, SQ_LAZY);
	r->at = 0;	/* the list changed */
	return n;
}
