/*
 * deliver.c: appending, claiming and settling on PostgreSQL, and the
 * consumers that hold leases.  The rules are policy.c's, as on SQLite.
 *
 * Invariants:
 * - An append locks its topic row (FOR UPDATE) before it reads next_off,
 *   and holds it to commit: appends to a topic commit one after the
 *   other, so offsets are dense and a group's cursor never passes an
 *   offset whose transaction has not committed (a sequence would hand out
 *   numbers that commit out of order).  Its NOTIFY reaches waiters at
 *   commit.
 * - A claim locks its group row: new messages are handed out by one
 *   claim at a time, pos moves by greatest().  Due deliveries are taken
 *   with FOR UPDATE SKIP LOCKED: a row being settled or claimed elsewhere
 *   is skipped, never waited for, never taken twice.
 * - Settling names attempt and token in the statement that changes the
 *   row (a batch per group and outcome: unnest of arrays).
 * - A registered consumer holds a session-level advisory lock on its id:
 *   the server releases it when the connection drops, whichever host the
 *   consumer was on, so a reaper that can take it knows it is gone.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pg.h"

#define SCAN_MAX	4096	/* messages examined per claim */

/*
 * A consumer's advisory lock: (this installation's lockspace, id), so
 * installations sharing a database (by schema) never share a lock.
 */
#define LOCK_ARGS	"$1::int, mod($2::bigint, 2147483647)::int"

/* K numbers of mq_history_n() in a row; the first. */
static int64_t
pg_n_take(int k)
{
	int64_t first = mq_history_n();

	while (--k > 0)
		mq_history_n();
	return first;
}

int
pg_history(struct pgq *q, int64_t grp, int64_t off, int attempt,
    const char *event, const char *reason, int64_t since, const char *dhost,
    int64_t dpid)
{
	PGresult *r;

	TRY(r, pg_qc(q, "cannot record history", "INSERT INTO history (grp, "
	    "off, ts, n, attempt, event, host, pid, reason, since, dhost, dpid) "
	    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)", 12,
	    pg_int(q, grp), pg_int(q, off), pg_int(q, pg_now()),
	    pg_int(q, mq_history_n()), pg_int(q, attempt), event, mq_hostname(),
	    pg_int(q, mq_pid()), reason, since ? pg_int(q, since) : NULL,
	    since ? dhost : NULL, since ? pg_int(q, dpid) : NULL));
	PQclear(r);
	return 0;
}

/* appending */

static int
append(struct pgq *q, struct mq_append *a, const struct mq_rec *rec,
    size_t n, struct mq_sent *out)
{
	struct mq_topic t;
	struct pg_arr ids = { 0 };
	PGresult *r;
	int64_t now, ts, due, off, bytes = 0, stored = 0, seen;
	size_t i, k, j, rows;
	char *sql = NULL, *end, num[24];
	const char **v = NULL;
	int *len = NULL, *fmt = NULL, nv, done;

	if (pg_begin(q) || pg_topic_ensure(q, a->topic, &t, 1) < 0)
		return PG_RETRY;
	for (i = 0; i < n; i++)
		if (rec[i].len > (size_t)t.max_size) {
			pg_rollback(q);
			a->bad = i;
			a->max_size = t.max_size;
			return MQ_E_TOOBIG;
		}
	now = pg_now();
	mq_rule_stamp(now, t.last_ts, a->delay, a->at, &ts, &due);
	/* dedup ids seen inside the window keep their first offset */
	for (i = 0; i < n; i++) {
		out[i].off = 0;
		out[i].dup = 0;
		if (rec[i].dedup)
			pg_arr_str(&ids, rec[i].dedup);
	}
	if (ids.n) {
		r = pg_q(q, "cannot read dedup ids", "SELECT id, off FROM dedup "
		    "WHERE topic = $1 AND id = ANY($2::text[]) AND ts > $3", 3,
		    pg_int(q, t.id), pg_arr_end(&ids),
		    pg_int(q, now - t.dedup_window));
		pg_arr_free(&ids);
		if (!r)
			return PG_RETRY;
		for (i = 0; i < n; i++)
			for (k = 0; rec[i].dedup && k < (size_t)PQntuples(r);
			    k++)
				if (!strcmp(PQgetvalue(r, (int)k, 0),
				    rec[i].dedup)) {
					out[i].off = pg_get(r, (int)k, 1);
					out[i].dup = 1;
				}
		PQclear(r);
	}
	off = t.next_off;
	for (i = 0; i < n; i++) {
		if (out[i].dup)
			continue;
		for (k = 0; k < i; k++)	/* the same id twice in one batch */
			if (rec[i].dedup && rec[k].dedup && !out[k].dup &&
			    !strcmp(rec[i].dedup, rec[k].dedup))
				break;
		if (k < i) {
			out[i].off = out[k].off;
			out[i].dup = 1;
			continue;
		}
		out[i].off = off++;
		stored++;
		bytes += rec[i].len;
		if (rec[i].dedup) {
			TRY(r, pg_q(q, "cannot store dedup id", "INSERT INTO dedup "
			    "(topic, id, off, ts) VALUES ($1, $2, $3, $4) ON "
			    "CONFLICT (topic, id) DO UPDATE SET off = "
			    "EXCLUDED.off, ts = EXCLUDED.ts", 4, pg_int(q, t.id),
			    rec[i].dedup, pg_int(q, out[i].off),
			    pg_int(q, now)));
			PQclear(r);
		}
	}
	/* the rows, up to 1000 a statement: ($1..$6 shared, then off, body,
	   dedup id) */
	for (i = 0; i < n; i += rows) {
		rows = n - i < 1000 ? n - i : 1000;
		free(sql);
		free(v);
		free(len);
		free(fmt);
		sql = mq_alloc(80 + rows * 64);
		v = mq_array(NULL, 6 + 3 * rows, sizeof *v);
		len = mq_array(NULL, 6 + 3 * rows, sizeof *len);
		fmt = mq_array(NULL, 6 + 3 * rows, sizeof *fmt);
		v[0] = pg_int(q, t.id);
		v[1] = pg_int(q, ts);
		v[2] = pg_int(q, due);
		v[3] = a->key;
		v[4] = a->ttl || t.ttl ? pg_int(q, ts + (a->ttl ? a->ttl :
		    t.ttl)) : NULL;
		v[5] = a->headers;
		for (k = 0; k < 6; k++)
			len[k] = fmt[k] = 0;
		end = stpcpy(sql, "INSERT INTO msg (topic, off, ts, due, key, "
		    "expires, headers, body, dedup) VALUES ");
		nv = 6;
		done = 0;
		for (j = i; j < i + rows; j++) {
			if (out[j].dup)
				continue;
			end += sprintf(end, "%s($1,$%d::bigint,$2,$3,$4,$5,$6,$%d,"
			    "$%d)", done++ ? "," : "", nv + 1, nv + 2,
			    nv + 3);	/* < 64 */
			/* not pg_int(): its 16 buffers would wrap onto v[0..2] */
			snprintf(num, sizeof num, "%lld", (long long)out[j].off);
			v[nv] = mq_strdup(num);
			len[nv] = fmt[nv] = 0;
			nv++;
			v[nv] = rec[j].len ? rec[j].body : "";
			len[nv] = (int)rec[j].len;
			fmt[nv] = 1;	/* binary: no escaping of bodies */
			nv++;
			v[nv] = rec[j].dedup;
			len[nv] = fmt[nv] = 0;
			nv++;
		}
		if (done) {
			r = pg_run(q, sql, nv, v, len, fmt,
			    "cannot store message");
			for (k = 6; k < (size_t)nv; k += 3)
				free((char *)v[k]);
			if (!r) {
				free(sql);
				free(v);
				free(len);
				free(fmt);
				return PG_RETRY;
			}
			PQclear(r);
		}
	}
	free(sql);
	free(v);
	free(len);
	free(fmt);
	if (stored) {
		TRY(r, pg_q(q, "cannot update topic", "UPDATE topic SET "
		    "next_off = next_off + $2, msgs = msgs + $2, "
		    "bytes = bytes + $3, last_ts = greatest(last_ts, $4) "
		    "WHERE id = $1", 4, pg_int(q, t.id), pg_int(q, stored),
		    pg_int(q, bytes), pg_int(q, ts)));
		PQclear(r);
		if (a->replace && a->key &&
		    pg_replace_older(q, &t, a->key, off - 1) < 0)
			return PG_RETRY;
		pg_notify(q, t.id);
	}
	(void)seen;
	return pg_commit(q);
}

static void
put32(char **p, uint32_t v)
{
	unsigned char *b = (unsigned char *)*p;

	b[0] = v >> 24;
	b[1] = v >> 16;
	b[2] = v >> 8;
	b[3] = v;
	*p += 4;
}

/* The bodies as a bytea[] in the binary array format; *len its size. */
static char *
bytea_array(const struct mq_rec *rec, size_t n, int *len)
{
	size_t i, size = 20;
	char *buf, *p;

	for (i = 0; i < n; i++)
		size += 4 + rec[i].len;
	if (size > INT_MAX)
		return NULL;
	p = buf = mq_alloc(size);
	put32(&p, 1);		/* dimensions */
	put32(&p, 0);		/* no NULLs */
	put32(&p, 17);		/* of bytea */
	put32(&p, (uint32_t)n);
	put32(&p, 1);		/* lower bound */
	for (i = 0; i < n; i++) {
		put32(&p, (uint32_t)rec[i].len);
		if (rec[i].len)
			memcpy(p, rec[i].body, rec[i].len);
		p += rec[i].len;
	}
	*len = (int)size;
	return buf;
}

/*
 * A batch without dedup ids to a topic that exists, in one statement,
 * which commits as it ends: the topic's row is updated first, so it stays
 * locked (offsets taken in commit order) until the commit.  0 when done;
 * 1 when the slow way must do it (no such topic yet, or a body over its
 * max-size, which it reports).  A batch a producer appends for others
 * (combine.c) also writes its number in its session's row of combined, in
 * the same transaction, and fails (an error: the statement is rolled
 * back) when the row has that number already: another settled the batch
 * as not stored, its holder having died.
 */
int
pg_append_fast(struct pgq *q, struct mq_append *a, const struct mq_rec *rec,
    size_t n, struct mq_sent *out)
{
	const char *v[13];
	int len[13] = { 0 }, fmt[13] = { 0 };
	char *bodies, chan[64];
	int64_t now = pg_now(), bytes = 0, big = 0, first;
	PGresult *r;
	size_t i;

	if (a->replace)
		return 1;
	for (i = 0; i < n; i++) {
		if (rec[i].dedup)
			return 1;
		bytes += rec[i].len;
		if ((int64_t)rec[i].len > big)
			big = rec[i].len;
	}
	if (!(bodies = bytea_array(rec, n, &len[1])))
		return 1;
	pg_channel(q, 0, chan, sizeof chan);
	chan[strlen(chan) - 1] = '\0';		/* mq_<lockspace>_ */
	v[0] = a->topic;
	v[1] = bodies;
	fmt[1] = 1;
	v[2] = pg_int(q, (int64_t)n);
	v[3] = pg_int(q, bytes);
	v[4] = pg_int(q, now);
	v[5] = pg_int(q, big);
	v[6] = a->delay >= 0 ? pg_int(q, now + a->delay) :
	    a->at >= 0 ? pg_int(q, a->at) : NULL;
	v[7] = a->key;
	v[8] = q->async ? chan : NULL;	/* else the flush tells them */
	v[9] = a->ttl ? pg_int(q, a->ttl) : NULL;
	v[10] = a->headers;
	v[11] = q->comb_batch ? pg_int(q, q->comb_token) : NULL;
	v[12] = q->comb_batch ? pg_int(q, q->comb_seq) : NULL;
	r = pg_run_flush(q, "WITH t AS (UPDATE topic SET next_off = next_off + $3, "
	    "msgs = msgs + $3, bytes = bytes + $4, last_ts = greatest(last_ts, "
	    "$5) WHERE name = $1 AND max_size >= $6 RETURNING id, "
	    "next_off - $3 AS first, last_ts AS ts, ttl), i AS (INSERT INTO "
	    "msg (topic, off, ts, due, key, body, expires, headers) SELECT "
	    "t.id, t.first + u.o - 1, t.ts, greatest(t.ts, $7::bigint), $8, "
	    "u.b, t.ts + coalesce($10::bigint, t.ttl), $11 FROM t, "
	    "unnest($2::bytea[]) "
	    "WITH ORDINALITY AS u(b, o)), c AS (INSERT INTO combined (token, "
	    "seq, topic, first, ts) SELECT $12, $13, id, first, ts FROM t "
	    "WHERE $12::bigint IS NOT NULL ON CONFLICT (token) DO UPDATE SET "
	    "seq = excluded.seq, topic = excluded.topic, first = "
	    "excluded.first, ts = excluded.ts WHERE combined.seq < "
	    "excluded.seq RETURNING seq) SELECT first, CASE WHEN "
	    "$9::text IS NOT NULL THEN pg_notify($9 || id, '') END, "
	    "set_config('synchronous_commit', 'off', true), "
	    "set_config('mq.end', id || ' ' || (first + $3), false), "
	    "CASE WHEN $12::bigint IS NOT NULL AND NOT EXISTS (SELECT FROM c) "
	    "THEN ('batch settled by another, from ' || first)::int END "
	    "FROM t",
	    13,
	    v, len, fmt, a->topic, "cannot store messages");
	free(bodies);
	if (!r)
		return PG_RETRY;
	if (PQntuples(r) != 1) {
		PQclear(r);
		return 1;
	}
	first = pg_get(r, 0, 0);
	PQclear(r);
	for (i = 0; i < n; i++) {
		out[i].off = first + (int64_t)i;
		out[i].dup = 0;
	}
	return 0;
}

int
pg_append(struct mq *mq, struct mq_append *a, const struct mq_rec *r,
    size_t n, struct mq_sent *out)
{
	int rc;

	if ((rc = pg_comb_append(PGQ(mq), a, r, n, out)) == 0)
		return 0;
	while ((rc = pg_append_fast(PGQ(mq), a, r, n, out)) == PG_RETRY)
		;
	if (rc == 0)
		return 0;
	while ((rc = append(PGQ(mq), a, r, n, out)) == PG_RETRY)
		;
	return rc;
}

/* claiming */

void
pg_msg_row(PGresult *r, int i, int c, struct mq_msg *m)
{
	memset(m, 0, sizeof *m);
	if (PQgetisnull(r, i, c))
		return;		/* no such message (purged) */
	m->off = pg_get(r, i, c);
	m->ts = pg_get(r, i, c + 1);
	m->due = pg_get(r, i, c + 2);
	m->key = pg_str(r, i, c + 3);
	m->body = pg_bytes(r, i, c + 4, &m->len);
	m->headers = pg_str(r, i, c + 5);
}

/* Keys and the first offset of each (key_first, key_mark). */
struct keymap {
	struct { char *key; int64_t off; } *e;
	int		 n;
};

struct claimer {
	struct pgq		*q;
	const struct mq_claim	*c;
	struct mq_topic		 t;
	struct mq_group		 g;
	int64_t			 now, lease, pos;
	int64_t			 delivered, settled, dead, dups;
	struct mq_msg		*out;
	int			 n, max;
	int			 passed;	/* claim_new passed a due row */
	int			 seen;		/* messages claim_new looked at */
	int			 gone;		/* due rows dead or lapsed */
	int64_t			*done;		/* due rows handed out */
	int			 ndone;
	int64_t			*drop;		/* rows it settles (drop_row) */
	int			 ndrop;
	/* the deliveries to write, as arrays */
	struct pg_arr		 l_off, l_att, l_exp, l_tok, l_key;	/* leased */
	struct pg_arr		 h_off, h_due, h_key;		/* held back */
	struct pg_arr		 a_off, a_att;			/* auto-acked */
	/* settled without a delivery: lapsed (first -1) or duplicates
	   of the delivery of offset first */
	struct pg_arr		 s_off, s_att, s_first;
	/* --idempotent-by: business ids of the leases, of the ones that
	   wait for a lease of theirs to end, of the duplicates, of the
	   auto-acked; and those this claim hands out */
	struct pg_arr		 l_bid;
	struct pg_arr		 b_off, b_att, b_exp, b_key, b_bid;
	struct pg_arr		 c_bid, c_off;
	struct { char *bid; int64_t off; } *handed;
	int			 nhanded;
	/* an ordered group: what this claim leaves unsettled of each key
	   (handed out, held back, waiting for its id), not written yet, so
	   that no read of the claim after it sees it (keymap) */
	struct keymap		 own;
	/* --per-key: deliveries in flight per key, read once a claim */
	struct { char *key; int n; } *inflight;
	int			 ninflight, kread;
	/* new offsets handed out as runs of lease (one_run), under one
	   token */
	int64_t			*run;
	int			 nrun;
	uint32_t		 rtok;
	/* read in the claim's first round trip, before the group's row
	   came back (claim): used when that row says they still hold */
	PGresult		*pre_due, *pre_new;
};

static void key_free(struct keymap *);

static void
offs_free(int64_t **a, int *n)
{
	free(*a);
	*a = NULL;
	*n = 0;
}

static void
free_arrays(struct claimer *k)
{
	pg_arr_free(&k->l_off);
	pg_arr_free(&k->l_att);
	pg_arr_free(&k->l_exp);
	pg_arr_free(&k->l_tok);
	pg_arr_free(&k->l_key);
	pg_arr_free(&k->h_off);
	pg_arr_free(&k->h_due);
	pg_arr_free(&k->h_key);
	pg_arr_free(&k->a_off);
	pg_arr_free(&k->a_att);
	pg_arr_free(&k->s_off);
	pg_arr_free(&k->s_att);
	pg_arr_free(&k->s_first);
	pg_arr_free(&k->l_bid);
	pg_arr_free(&k->b_off);
	pg_arr_free(&k->b_att);
	pg_arr_free(&k->b_exp);
	pg_arr_free(&k->b_key);
	pg_arr_free(&k->b_bid);
	pg_arr_free(&k->c_bid);
	pg_arr_free(&k->c_off);
	while (k->nhanded > 0)
		free(k->handed[--k->nhanded].bid);
	free(k->handed);
	k->handed = NULL;
	key_free(&k->own);
	while (k->ninflight > 0)
		free(k->inflight[--k->ninflight].key);
	free(k->inflight);
	k->inflight = NULL;
	k->kread = 0;
	offs_free(&k->done, &k->ndone);
	offs_free(&k->drop, &k->ndrop);
	offs_free(&k->run, &k->nrun);
	PQclear(k->pre_due);
	PQclear(k->pre_new);
	k->pre_due = k->pre_new = NULL;
}

/* The group's delivery row of off goes (write_claim): settled. */
static void
drop_row(struct claimer *k, int64_t off)
{
	k->drop = mq_array(k->drop, k->ndrop + 1, sizeof *k->drop);
	k->drop[k->ndrop++] = off;
	pg_arr_int(&k->l_off, -off);	/* negative: marks "delete" */
	pg_arr_int(&k->l_att, 0);
	pg_arr_int(&k->l_exp, 0);
	pg_arr_int(&k->l_tok, 0);
	pg_arr_str(&k->l_key, NULL);
	pg_arr_str(&k->l_bid, NULL);
}

/* Settled with no delivery: a duplicate of the delivery of first, or,
   when first is -1, lapsed (its time to live ran out first). */
static void
settle_undelivered(struct claimer *k, int64_t off, int attempt,
    int64_t first)
{
	pg_arr_int(&k->s_off, off);
	pg_arr_int(&k->s_att, attempt);
	pg_arr_int(&k->s_first, first);
	k->settled++;
}

/* The most offsets a run of lease holds (events_at() in lease.sql). */
#define RUN_MAX	1024

/*
 * A group whose deliveries need no row of their own while they are in
 * flight: nothing looks at them by key, business id or consumer (lease
 * in lease.sql).
 */
#define PLAIN_SQL "g.ordered = 0 AND g.per_key = 0 AND g.idem IS NULL"

static int
plain(const struct mq_group *g)
{
	return !g->ordered && !g->per_key && !*g->idem;
}

/* Hands m out (attempt already counted), or drops a purged one. */
static void
deliver(struct claimer *k, struct mq_msg *m, int attempt, int expired,
    const char *key, int existed, const char *bid)
{
	uint32_t token = 0;

	k->delivered++;
	if (!m->body) {		/* purged under a delivery: the row goes */
		if (existed)
			drop_row(k, m->off);
		mq_msg_free(m);
		return;
	}
	if (k->c->autoack) {
		k->settled++;
		pg_arr_int(&k->a_off, m->off);
		pg_arr_int(&k->a_att, attempt);
		if (existed)
			drop_row(k, m->off);
		if (bid) {
			pg_arr_str(&k->c_bid, bid);
			pg_arr_int(&k->c_off, m->off);
		}
	} else if (attempt == 1 && !existed && !k->c->consumer &&
	    plain(&k->g)) {
		/* a new one for a plain mq-recv: in a run of lease */
		while (!k->rtok)	/* one for the run: not 0, "none" */
			k->rtok = mq_token();
		token = k->rtok;
		k->run = mq_array(k->run, k->nrun + 1, sizeof *k->run);
		k->run[k->nrun++] = m->off;
	} else {
		token = mq_token();
		pg_arr_int(&k->l_off, m->off);
		pg_arr_int(&k->l_att, attempt);
		pg_arr_int(&k->l_exp, expired);
		pg_arr_int(&k->l_tok, token);
		pg_arr_str(&k->l_key, key);
		pg_arr_str(&k->l_bid, bid);
	}
	k->out[k->n] = *m;
	k->out[k->n].attempt = attempt;
	k->out[k->n].token = token;
	k->out[k->n].receipt[0] = '\0';
	if (!k->c->autoack)
		mq_format_receipt(k->out[k->n].receipt, MQ_RECEIPT_MAX,
		    k->t.name, k->g.name, m->off, attempt, token);
	k->n++;
}

/* An ordered group's key: the first offset of it not settled. */
static int64_t
key_first(const struct keymap *m, const char *key)
{
	int j;

	for (j = 0; j < m->n; j++)
		if (!strcmp(m->e[j].key, key))
			return m->e[j].off;
	return INT64_MAX;
}

/* off of key is not settled. */
static void
key_mark(struct keymap *m, const char *key, int64_t off)
{
	int j;

	for (j = 0; j < m->n && strcmp(m->e[j].key, key); j++)
		;
	if (j == m->n) {
		m->e = mq_array(m->e, (size_t)m->n + 1, sizeof *m->e);
		m->e[j].key = mq_strdup(key);
		m->e[m->n++].off = off;
	} else if (off < m->e[j].off)
		m->e[j].off = off;
}

static void
key_free(struct keymap *m)
{
	while (m->n > 0)
		free(m->e[--m->n].key);
	free(m->e);
	m->e = NULL;
}

/*
 * --per-key N (an unordered group): how many deliveries of key are in
 * flight (leased, their lease run out or not), as read once a claim and
 * counted up by what it hands out; NULL: no limit for it.  *rc is
 * PG_RETRY when the read failed.
 */
static int *
in_flight(struct claimer *k, const char *key, int *rc)
{
	PGresult *r;
	int i;

	*rc = 0;
	if (!key || !k->g.per_key || k->g.ordered)
		return NULL;
	if (!k->kread) {
		if (!(r = pg_qc(k->q, "cannot read deliveries", "SELECT key, "
		    "count(*) FROM delivery WHERE grp = $1 AND key IS NOT NULL "
		    "AND state = 1 GROUP BY key", 1, pg_int(k->q, k->g.id)))) {
			*rc = PG_RETRY;
			return NULL;
		}
		k->inflight = mq_array(NULL, (size_t)PQntuples(r),
		    sizeof *k->inflight);
		for (i = 0; i < PQntuples(r); i++) {
			k->inflight[i].key = pg_str(r, i, 0);
			k->inflight[i].n = (int)pg_get(r, i, 1);
		}
		k->ninflight = PQntuples(r);
		k->kread = 1;
		PQclear(r);
	}
	for (i = 0; i < k->ninflight; i++)
		if (!strcmp(k->inflight[i].key, key))
			return &k->inflight[i].n;
	k->inflight = mq_array(k->inflight, (size_t)k->ninflight + 1,
	    sizeof *k->inflight);
	k->inflight[k->ninflight].key = mq_strdup(key);
	k->inflight[k->ninflight].n = 0;
	return &k->inflight[k->ninflight++].n;
}

/* idempotent consumption (--idempotent-by) */

struct idem {
	char	*bid;		/* the business id; NULL: none */
	int64_t	 first;		/* acked at this offset, in the window; 0: no */
	int	 busy;		/* leased, and the lease has not run out */
};

static void idem_free(struct idem *, int);

/*
 * The business ids of the first n rows of r (the message's columns from
 * mc on, its dedup id at dc, the id its delivery row has at bc, -1:
 * none), and what the group knows of each, in one statement (one
 * snapshot: an ack that ends a lease has stored its id, or the lease is
 * there).
 */
static struct idem *
idem_look(struct claimer *k, PGresult *r, int n, int mc, int dc, int bc)
{
	struct pg_arr ids = { 0 };
	struct idem *x;
	struct mq_msg m;
	PGresult *b;
	int i;

	x = mq_array(NULL, (size_t)n, sizeof *x);
	for (i = 0; i < n; i++) {
		memset(&x[i], 0, sizeof x[i]);
		if (bc >= 0 && !pg_null(r, i, bc))
			x[i].bid = pg_str(r, i, bc);
		else {
			pg_msg_row(r, i, mc, &m);
			if (m.body)
				x[i].bid = pg_text_form(mq_business_id(k->g.idem,
				    &m, pg_null(r, i, dc) ? NULL :
				    PQgetvalue(r, i, dc)));
			mq_msg_free(&m);
		}
		pg_arr_str(&ids, x[i].bid);
	}
	b = pg_qc(k->q, "cannot read business ids", "SELECT c.off, EXISTS "
	    "(SELECT 1 FROM delivery e WHERE e.grp = $1 AND e.bid = b.bid AND "
	    "e.state = 1 AND e.due > $2) FROM unnest($3::text[]) WITH "
	    "ORDINALITY AS b(bid, i) LEFT JOIN LATERAL (SELECT off FROM "
	    "consumed WHERE grp = $1 AND bid = b.bid AND ts > $4 OFFSET 0) c "
	    "ON true ORDER BY b.i", 4, pg_int(k->q, k->g.id),
	    pg_int(k->q, k->now), pg_arr_end(&ids),
	    pg_int(k->q, k->now - k->g.idem_window));
	pg_arr_free(&ids);
	for (i = 0; b && i < n && i < PQntuples(b); i++) {
		x[i].first = pg_null(b, i, 0) ? 0 : pg_get(b, i, 0);
		x[i].busy = PQgetvalue(b, i, 1)[0] == 't';
	}
	if (b) {
		PQclear(b);
		return x;
	}
	idem_free(x, n);
	return NULL;
}

static void
idem_free(struct idem *x, int n)
{
	int i;

	for (i = 0; x && i < n; i++)
		free(x[i].bid);
	free(x);
}

/*
 * What a group with --idempotent-by does with the message at off: 0 it
 * goes (the claim remembers its id), 1 it is a duplicate (of x->first),
 * 2 it waits for the lease of its id to end.
 */
static int
idem_verdict(struct claimer *k, struct idem *x, int64_t off)
{
	int j;

	if (!x->bid)
		return 0;
	if (x->first)
		return 1;
	if (x->busy)
		return 2;
	for (j = 0; j < k->nhanded; j++)	/* handed out by this claim */
		if (!strcmp(k->handed[j].bid, x->bid)) {
			if (!k->c->autoack)
				return 2;
			x->first = k->handed[j].off;
			return 1;
		}
	k->handed = mq_array(k->handed, (size_t)k->nhanded + 1,
	    sizeof *k->handed);
	k->handed[k->nhanded].bid = mq_strdup(x->bid);
	k->handed[k->nhanded++].off = off;
	return 0;
}

/* Settled as a duplicate of x->first, or held until a lease ends. */
static void
idem_apply(struct claimer *k, int how, const struct idem *x, int64_t off,
    int attempt, int expired, const char *key, int existed)
{
	if (how == 1) {
		settle_undelivered(k, off, attempt, x->first);
		if (existed)
			drop_row(k, off);
		k->dups++;
	} else {
		pg_arr_int(&k->b_off, off);
		pg_arr_int(&k->b_att, attempt);
		pg_arr_int(&k->b_exp, expired);
		pg_arr_str(&k->b_key, key);
		pg_arr_str(&k->b_bid, x->bid);
	}
}

/*
 * Due deliveries, taken with SKIP LOCKED: waiting ones whose time came
 * and leases that ran out (at max attempts: dead letters, no slot), at
 * offsets from lo to the group's position: a row after it (rescheduled
 * before it was handed out) waits for the position, as in
 * ../sqlite/deliver.c.  (off + 0: by delivery_due, the rows due, never
 * by the primary key's range of offsets, which in a generic plan looks
 * narrow and holds every delivery of the group, in flight or not: see
 * prepared() in pg.c)
 */
#define DUE_SQL "SELECT d.off, d.state, d.attempt, d.expired, d.key, " \
	"d.since, d.host, d.pid, m.off, m.ts, m.due, m.key, m.body, " \
	"m.headers, m.expires, m.dedup, d.bid FROM delivery d LEFT JOIN " \
	"LATERAL (SELECT * FROM msg WHERE topic = $4 AND off = d.off " \
	"OFFSET 0) m ON true WHERE d.grp = $1 AND d.state < 2 " \
	"AND d.due <= $2 AND d.off + 0 >= $5 AND d.off + 0 < $6 AND " \
	"d.off <> ALL($7::bigint[]) AND d.off <> ALL($8::bigint[]) AND " \
	"d.off + 0 < " BOUND
/*
 * What a claim may hand out: offsets below next_off as the claim's first
 * statement read it, whose commits are all under the WAL position read
 * with it, so that flushing to there makes them durable (claim).
 */
#define BOUND	"nullif(current_setting('mq.bound', true), '')::bigint"
#define DUE_ORDERED " AND (d.key IS NULL OR NOT EXISTS (SELECT 1 FROM " \
	"delivery e WHERE e.grp = $1 AND e.key = d.key AND e.off < d.off " \
	"AND e.state < 2 AND e.off <> ALL($8::bigint[]) OFFSET 0))"
#define DUE_PER_KEY " AND (d.key IS NULL OR (SELECT count(*) FROM " \
	"delivery e WHERE e.grp = $1 AND e.key = d.key AND e.state = 1 AND " \
	"e.off <> d.off) < (SELECT per_key FROM grp WHERE id = $1))"
#define DUE_IDEM " AND (d.bid IS NULL OR NOT EXISTS (SELECT 1 FROM " \
	"delivery e WHERE e.grp = $1 AND e.bid = d.bid AND e.state = 1 " \
	"AND e.due > $2 AND e.off <> d.off OFFSET 0))"
#define DUE_END " ORDER BY d.due, d.off LIMIT $3 FOR UPDATE OF d SKIP LOCKED"

/* The due rows' statement for g's settings. */
static const char *
due_sql(const struct mq_group *g)
{
	static const char *const sql[6] = {
		DUE_SQL DUE_END,
		DUE_SQL DUE_ORDERED DUE_END,
		DUE_SQL DUE_PER_KEY DUE_END,
		DUE_SQL DUE_IDEM DUE_END,
		DUE_SQL DUE_ORDERED DUE_IDEM DUE_END,
		DUE_SQL DUE_PER_KEY DUE_IDEM DUE_END,
	};

	return sql[(g->ordered ? 1 : g->per_key ? 2 : 0) + 3 * !!*g->idem];
}

static int
claim_due(struct claimer *k, int64_t lo)
{
	struct pgq *q = k->q;
	struct idem *id = NULL;
	struct mq_verdict v;
	struct pg_arr d_off = { 0 }, d_exp = { 0 }, d_rsn = { 0 }, x = { 0 };
	struct pg_arr done = { 0 }, drop = { 0 };
	struct mq_msg m;
	PGresult *r;
	char host[256];
	int i, n, attempt, expired, how, *fl, rc;

	if (k->pre_due) {	/* read already */
		r = k->pre_due;
		k->pre_due = NULL;
	} else {
		/* not those an earlier round handed out: not leased yet */
		for (i = 0; i < k->ndone; i++)
			pg_arr_int(&done, k->done[i]);
		/* nor, for a key's order, the rows it settled (not deleted
		   yet either) */
		for (i = 0; i < k->ndrop; i++)
			pg_arr_int(&drop, k->drop[i]);
		r = pg_qc(q, "cannot read deliveries", due_sql(&k->g), 8,
		    pg_int(q, k->g.id), pg_int(q, k->now),
		    pg_int(q, k->max - k->n), pg_int(q, k->t.id),
		    pg_int(q, lo), pg_int(q, k->pos), pg_arr_end(&done),
		    pg_arr_end(&drop));
		pg_arr_free(&done);
		pg_arr_free(&drop);
		if (!r)
			return PG_RETRY;
	}
	n = PQntuples(r);
	if (n && *k->g.idem && !(id = idem_look(k, r, n, 8, 15, 16))) {
		PQclear(r);
		return PG_RETRY;
	}
	for (i = 0; i < n; i++) {
		attempt = (int)pg_get(r, i, 2);
		expired = (int)pg_get(r, i, 3);
		pg_msg_row(r, i, 8, &m);
		if (m.body && mq_rule_lapsed((int)pg_get(r, i, 1), attempt,
		    pg_get(r, i, 14), k->now)) {
			settle_undelivered(k, m.off, 0, -1);
			pg_arr_int(&x, m.off);	/* its row goes now, below */
			k->gone++;
			mq_msg_free(&m);
			continue;
		}
		fl = in_flight(k, pg_null(r, i, 4) ? NULL : PQgetvalue(r, i, 4),
		    &rc);
		if (rc < 0)
			goto fail;
		/* an earlier row filled its key: not in this claim */
		if (fl && *fl - (pg_get(r, i, 1) == MQ_LEASED) >=
		    k->g.per_key) {
			k->done = mq_array(k->done, k->ndone + 1,
			    sizeof *k->done);
			k->done[k->ndone++] = pg_get(r, i, 0);
			k->gone++;	/* another round: the due rows after it */
			mq_msg_free(&m);
			continue;
		}
		if (pg_get(r, i, 1) == MQ_LEASED) {
			expired++;
			pg_copy(r, i, 6, host, sizeof host);
			if (pg_history(q, k->g.id, pg_get(r, i, 0), attempt,
			    "expired", "lease ran out", pg_get(r, i, 5), host,
			    pg_get(r, i, 7)) < 0)
				goto fail;
			if (mq_rule_expired(&k->g, attempt, expired, &v)) {
				pg_arr_int(&d_off, pg_get(r, i, 0));
				pg_arr_int(&d_exp, expired);
				pg_arr_str(&d_rsn, v.reason);
				if (pg_history(q, k->g.id, pg_get(r, i, 0),
				    attempt, "dead", v.reason, 0, NULL, 0) < 0)
					goto fail;
				k->dead++;
				k->gone++;
				if (fl)		/* out of flight */
					--*fl;
				mq_msg_free(&m);
				continue;
			}
		}
		/* looked at: not again in a later round of this claim */
		k->done = mq_array(k->done, k->ndone + 1, sizeof *k->done);
		k->done[k->ndone++] = pg_get(r, i, 0);
		/* an ordered group: an earlier message of its key that this
		   claim handed out or held back (not written yet, so the SQL
		   did not see it): it waits, due, for a later claim */
		if (k->g.ordered && !pg_null(r, i, 4) && key_first(&k->own,
		    PQgetvalue(r, i, 4)) < pg_get(r, i, 0)) {
			mq_msg_free(&m);
			continue;
		}
		if (id && (how = idem_verdict(k, &id[i], pg_get(r, i, 0)))) {
			idem_apply(k, how, &id[i], pg_get(r, i, 0), attempt,
			    expired, pg_null(r, i, 4) ? NULL :
			    PQgetvalue(r, i, 4), 1);
			if (fl && pg_get(r, i, 1) == MQ_LEASED)
				--*fl;	/* out of flight */
			k->gone++;	/* another round: the due rows after it */
			mq_msg_free(&m);
			continue;
		}
		/* in flight from now on, or (auto-acked) no longer */
		if (fl && !k->c->autoack && pg_get(r, i, 1) != MQ_LEASED)
			++*fl;
		else if (fl && k->c->autoack && pg_get(r, i, 1) == MQ_LEASED)
			--*fl;
		/* settled here (auto-acked, or purged): the due rows behind
		   its key may go, in another round */
		if (k->g.ordered && !pg_null(r, i, 4) && (k->c->autoack ||
		    !m.body))
			k->gone++;
		deliver(k, &m, attempt + 1, expired, PQgetisnull(r, i, 4) ?
		    NULL : PQgetvalue(r, i, 4), 1, id ? id[i].bid : NULL);
	}
	PQclear(r);
	idem_free(id, n);
	if (d_off.n) {
		r = pg_qc(q, "cannot store delivery", "UPDATE delivery d SET "
		    "state = 2, consumer = NULL, expired = v.e, reason = v.r "
		    "FROM unnest($2::bigint[], $3::int[], $4::text[]) AS "
		    "v(off, e, r) WHERE d.grp = $1 AND d.off = v.off", 4,
		    pg_int(q, k->g.id), pg_arr_end(&d_off), pg_arr_end(&d_exp),
		    pg_arr_end(&d_rsn));
		pg_arr_free(&d_off);
		pg_arr_free(&d_exp);
		pg_arr_free(&d_rsn);
		if (!r) {
			pg_arr_free(&x);
			return PG_RETRY;
		}
		PQclear(r);
	}
	if (x.n) {	/* lapsed: out of the due set, and their keys free */
		r = pg_qc(q, "cannot delete delivery", "DELETE FROM delivery "
		    "WHERE grp = $1 AND off = ANY($2::bigint[])", 2,
		    pg_int(q, k->g.id), pg_arr_end(&x));
		pg_arr_free(&x);
		if (!r)
			return PG_RETRY;
		PQclear(r);
	}
	return n;
fail:
	mq_msg_free(&m);
	PQclear(r);
	idem_free(id, n);
	pg_arr_free(&d_off);
	pg_arr_free(&d_exp);
	pg_arr_free(&d_rsn);
	pg_arr_free(&x);
	return PG_RETRY;
}

/* (each message's delivery row looked up by its key, LATERAL and fenced
   by OFFSET 0 so that no plan reads all of the group's rows: see
   prepared() in pg.c) */
#define NEW_SQL "SELECT m.off, m.ts, m.due, m.key, m.body, m.headers, " \
	"d.state, d.due, m.expires, m.dedup FROM msg m LEFT JOIN LATERAL " \
	"(SELECT state, due FROM delivery WHERE grp = $4 AND off = m.off " \
	"OFFSET 0) d ON true WHERE m.topic = $1 AND m.off >= $2 AND " \
	"m.off < " BOUND " ORDER BY m.off LIMIT $3"

/*
 * New messages from pos on: delivered, or held back (delayed, key busy).
 * One with a delivery row there already (cancelled or rescheduled before
 * it was handed out: mark.c) is passed by; a cancelled one's row goes.
 * Another look when a full look handed nothing out for some: up to max,
 * or SCAN_MAX looked at.
 */
static int
claim_new(struct claimer *k)
{
	struct pgq *q = k->q;
	struct mq_msg m;
	PGresult *r, *busy;
	struct idem *x = NULL;
	struct keymap db = { 0 };	/* the rows' first unsettled offsets */
	struct pg_arr drop = { 0 };
	int i, n, want, held, idle, how, *fl, rc, looked = 0;

	do {
		want = k->max - k->n;
		/* below the bound: every offset under it is committed */
		if (k->pre_new) {	/* read already */
			r = k->pre_new;
			k->pre_new = NULL;
		} else if (!(r = pg_qc(q, "cannot read messages", NEW_SQL, 4,
		    pg_int(q, k->t.id), pg_int(q, k->pos), pg_int(q, want),
		    pg_int(q, k->g.id))))
			goto retry;
		/* read ahead (claim) for max, before the due rows took
		   their share of it: no more than want of them */
		if ((n = PQntuples(r)) > want)
			n = want;
		if (n && *k->g.idem && !(x = idem_look(k, r, n, 0, 9, -1))) {
			PQclear(r);
			goto retry;
		}
		if (k->g.ordered && n && !looked) {
			looked = 1;
			/* the first unsettled offset of each key, as the rows
			   say now, less those this claim settled (their rows
			   go in write_claim); a claim_due before deleted those
			   it found dead or lapsed */
			for (i = 0; i < k->ndrop; i++)
				pg_arr_int(&drop, k->drop[i]);
			busy = pg_qc(q, "cannot read deliveries", "SELECT key, "
			    "min(off) FROM delivery WHERE grp = $1 AND key IS NOT "
			    "NULL AND state < 2 AND off <> ALL($2::bigint[]) "
			    "GROUP BY key", 2, pg_int(q, k->g.id),
			    pg_arr_end(&drop));
			pg_arr_free(&drop);
			if (!busy) {
				PQclear(r);
				idem_free(x, n);
				goto retry;
			}
			for (i = 0; i < PQntuples(busy); i++)
				key_mark(&db, PQgetvalue(busy, i, 0),
				    pg_get(busy, i, 1));
			PQclear(busy);
		}
		for (i = idle = 0; i < n && !k->passed; i++) {
			pg_msg_row(r, i, 0, &m);
			k->pos = m.off + 1;
			idle++;
			if (!pg_null(r, i, 6)) {
				if (pg_get(r, i, 6) == MQ_SKIP)
					drop_row(k, m.off);
				/* a due one goes next, before what follows */
				k->passed = pg_get(r, i, 6) == MQ_WAITING &&
				    pg_get(r, i, 7) <= k->now;
				mq_msg_free(&m);
				continue;
			}
			if (mq_rule_lapsed(-1, 0, pg_get(r, i, 8), k->now)) {
				settle_undelivered(k, m.off, 0, -1);
				mq_msg_free(&m);
				continue;
			}
			/* held back (delayed, its key busy or full) before
			   it is looked at as a duplicate, as on SQLite */
			held = m.due > k->now;
			if (k->g.ordered && m.key)
				held |= key_first(&db, m.key) < m.off ||
				    key_first(&k->own, m.key) < m.off;
			fl = in_flight(k, m.key, &rc);
			if (rc < 0) {
				mq_msg_free(&m);
				PQclear(r);
				idem_free(x, n);
				goto retry;
			}
			held |= fl && *fl >= k->g.per_key;
			/* its key is busy from here on while it is not
			   settled: held back, waiting for its id, or leased
			   (an auto-ack, a duplicate, a purged one settle in
			   this claim: the key stays free, as on SQLite) */
			if (held && k->g.ordered && m.key)
				key_mark(&k->own, m.key, m.off);
			if (held) {
				pg_arr_int(&k->h_off, m.off);
				pg_arr_int(&k->h_due, m.due > k->now ? m.due :
				    k->now);
				pg_arr_str(&k->h_key, m.key);
				mq_msg_free(&m);
				continue;
			}
			if (x && (how = idem_verdict(k, &x[i], m.off))) {
				if (how == 2 && k->g.ordered && m.key)
					key_mark(&k->own, m.key, m.off);
				idem_apply(k, how, &x[i], m.off, 0, 0, m.key, 0);
				mq_msg_free(&m);
				continue;
			}
			idle--;
			if (fl && !k->c->autoack)
				++*fl;
			if (k->g.ordered && m.key && m.body && !k->c->autoack)
				key_mark(&k->own, m.key, m.off);
			deliver(k, &m, 1, 0, m.key, 0, x ? x[i].bid : NULL);
		}
		PQclear(r);
		idem_free(x, n);
		x = NULL;
		k->seen += n;
	} while (n == want && idle && !k->passed && k->n < k->max &&
	    k->seen < SCAN_MAX);
	key_free(&db);
	return n;
retry:
	key_free(&db);
	return PG_RETRY;
}

/*
 * Queues on p the writes of what the claim decided: one statement per
 * kind of row.
 */
static void
write_claim(struct claimer *k, struct pg_pipe *p)
{
	struct pgq *q = k->q;
	struct pg_arr lo = { 0 }, hi = { 0 };
	int i;

	if (k->nrun) {
		/* the new ones of a plain mq-recv: a row a run of up to
		   RUN_MAX (ascending: claim_new hands them out in order) */
		for (i = 0; i < k->nrun; i++) {
			if (i == 0 || k->run[i] != k->run[i - 1] + 1 ||
			    (i % RUN_MAX == 0)) {
				if (i > 0)
					pg_arr_int(&hi, k->run[i - 1] + 1);
				pg_arr_int(&lo, k->run[i]);
			}
		}
		pg_arr_int(&hi, k->run[k->nrun - 1] + 1);
		pg_pipe_q(q, p, "cannot store delivery", "INSERT INTO lease "
		    "(grp, lo, hi, due, token, since, host, pid, acked, newly) "
		    "SELECT $1, v.lo, v.hi, $4, $5, $6, $7, $8, z, z FROM "
		    "unnest($2::bigint[], $3::bigint[]) AS v(lo, hi), LATERAL "
		    "(SELECT repeat('0', (v.hi - v.lo)::int)::varbit) AS x(z)",
		    8, pg_int(q, k->g.id),
		    pg_arr_end(&lo), pg_arr_end(&hi),
		    pg_int(q, k->now + k->lease), pg_int(q, k->rtok),
		    pg_int(q, k->now), mq_hostname(), pg_int(q, mq_pid()));
		pg_arr_free(&lo);
		pg_arr_free(&hi);
	}
	if (k->s_off.n) {
		/* lapsed and duplicates: their history, their counts
		   (settled goes below) */
		pg_pipe_q(q, p, "cannot record history", "WITH v AS (SELECT "
		    "* FROM unnest($2::bigint[], $3::int[], $4::bigint[]) AS "
		    "v(o, a, f)), g AS (UPDATE grp SET lapsed = lapsed + "
		    "(SELECT count(*) FROM v WHERE f < 0), duplicates = "
		    "duplicates + (SELECT count(*) FROM v WHERE f >= 0) WHERE "
		    "id = $1) INSERT INTO history (grp, off, ts, n, attempt, "
		    "event, host, pid, reason) SELECT $1, v.o, $5, $6, v.a, "
		    "CASE WHEN v.f < 0 THEN 'lapsed' ELSE 'duplicate' END, $7, "
		    "$8, CASE WHEN v.f < 0 THEN 'its time to live ran out' "
		    "ELSE 'duplicate of #' || v.f END FROM v", 8,
		    pg_int(q, k->g.id), pg_arr_end(&k->s_off),
		    pg_arr_end(&k->s_att), pg_arr_end(&k->s_first),
		    pg_int(q, k->now), pg_int(q, mq_history_n()),
		    mq_hostname(), pg_int(q, mq_pid()));
	}

	if (k->l_off.n) {
		/* leases (new rows or due ones), and due rows auto-acked */
		/* and the group's row, in the same statement */
		pg_pipe_q(q, p, "cannot store delivery", "WITH g AS (UPDATE grp "
		    "SET pos = greatest(pos, $12), delivered = delivered + $13, "
		    "settled = settled + $14, deadlettered = deadlettered + $15, "
		    "settled_ts = CASE WHEN $14::bigint > 0 THEN $9::bigint ELSE "
		    "settled_ts END WHERE id = $1), v AS (SELECT * "
		    "FROM unnest($2::bigint[], $3::int[], $4::int[], "
		    "$5::bigint[], $6::text[], $16::text[]) AS v(off, a, e, t, "
		    "key, bid)), "
		    "gone AS (DELETE FROM delivery WHERE grp = $1 AND off = "
		    "ANY(ARRAY(SELECT -off FROM v WHERE off < 0))) "
		    "INSERT INTO delivery (grp, off, state, due, attempt, "
		    "expired, token, consumer, key, since, host, pid, bid) SELECT "
		    "$1, v.off, 1, $7, v.a, v.e, v.t, $8, v.key, $9, $10, $11, "
		    "v.bid FROM v "
		    "WHERE v.off > 0 ON CONFLICT (grp, off) DO UPDATE SET "
		    "state = 1, due = EXCLUDED.due, attempt = EXCLUDED.attempt, "
		    "expired = EXCLUDED.expired, token = EXCLUDED.token, "
		    "consumer = EXCLUDED.consumer, since = EXCLUDED.since, "
		    "host = EXCLUDED.host, pid = EXCLUDED.pid, "
		    "bid = EXCLUDED.bid", 16,
		    pg_int(q, k->g.id), pg_arr_end(&k->l_off),
		    pg_arr_end(&k->l_att), pg_arr_end(&k->l_exp),
		    pg_arr_end(&k->l_tok), pg_arr_end(&k->l_key),
		    pg_int(q, k->now + k->lease),
		    k->c->consumer ? pg_int(q, k->c->consumer) : NULL,
		    pg_int(q, k->now), mq_hostname(), pg_int(q, mq_pid()),
		    pg_int(q, k->pos), pg_int(q, k->delivered),
		    pg_int(q, k->settled), pg_int(q, k->dead),
		    pg_arr_end(&k->l_bid));
	}
	if (k->b_off.n) {
		/* each waits, due, until the lease of its business id ends */
		pg_pipe_q(q, p, "cannot store delivery", "INSERT INTO delivery "
		    "(grp, off, state, due, attempt, expired, key, bid) SELECT "
		    "$1, v.o, 0, $2, v.a, v.e, v.k, v.b FROM unnest($3::bigint[], "
		    "$4::int[], $5::int[], $6::text[], $7::text[]) AS "
		    "v(o, a, e, k, b) ON CONFLICT (grp, off) DO UPDATE SET "
		    "state = 0, due = EXCLUDED.due, attempt = EXCLUDED.attempt, "
		    "expired = EXCLUDED.expired, consumer = NULL, "
		    "bid = EXCLUDED.bid", 7, pg_int(q, k->g.id),
		    pg_int(q, k->now), pg_arr_end(&k->b_off),
		    pg_arr_end(&k->b_att), pg_arr_end(&k->b_exp),
		    pg_arr_end(&k->b_key), pg_arr_end(&k->b_bid));
	}
	if (k->c_bid.n) {
		/* auto-acked: their business ids are consumed */
		pg_pipe_q(q, p, "cannot store business id", "INSERT INTO "
		    "consumed (grp, bid, off, ts) SELECT $1, v.b, v.o, $4 FROM "
		    "unnest($2::text[], $3::bigint[]) AS v(b, o) ON CONFLICT "
		    "(grp, bid) DO UPDATE SET off = EXCLUDED.off, "
		    "ts = EXCLUDED.ts", 4, pg_int(q, k->g.id),
		    pg_arr_end(&k->c_bid), pg_arr_end(&k->c_off),
		    pg_int(q, k->now));
	}
	if (k->h_off.n) {
		pg_pipe_q(q, p, "cannot store delivery", "INSERT INTO delivery "
		    "(grp, off, state, due, attempt, key) SELECT $1, v.off, 0, "
		    "v.due, 0, v.key FROM unnest($2::bigint[], $3::bigint[], "
		    "$4::text[]) AS v(off, due, key) ON CONFLICT (grp, off) DO "
		    "NOTHING", 4, pg_int(q, k->g.id), pg_arr_end(&k->h_off),
		    pg_arr_end(&k->h_due), pg_arr_end(&k->h_key));
	}
	if (k->a_off.n) {
		/* and the group's row, unless it went with the leases */
		pg_pipe_q(q, p, "cannot record history", "WITH g AS (UPDATE grp "
		    "SET pos = greatest(pos, $8), delivered = delivered + $9, "
		    "settled = settled + $10, deadlettered = deadlettered + $11, "
		    "settled_ts = CASE WHEN $10::bigint > 0 THEN $4::bigint ELSE "
		    "settled_ts END WHERE id = $1 AND NOT $12) INSERT INTO history "
		    "(grp, off, ts, n, attempt, event, host, pid, reason, since, "
		    "dhost, dpid) SELECT $1, v.off, $4, $5, v.a, 'acked', $6, $7, "
		    "'auto-ack', $4, $6, $7 FROM unnest($2::bigint[], $3::int[]) "
		    "AS v(off, a)", 12, pg_int(q, k->g.id), pg_arr_end(&k->a_off),
		    pg_arr_end(&k->a_att), pg_int(q, k->now),
		    pg_int(q, mq_history_n()), mq_hostname(), pg_int(q, mq_pid()),
		    pg_int(q, k->pos), pg_int(q, k->delivered),
		    pg_int(q, k->settled), pg_int(q, k->dead),
		    k->l_off.n ? "true" : "false");
	}
	if (k->l_off.n || k->a_off.n)
		return;		/* the group's row went with one of them */
	pg_pipe_q(q, p, "cannot update group", "UPDATE grp SET pos = "
	    "greatest(pos, $2), delivered = delivered + $3, "
	    "settled = settled + $4, deadlettered = deadlettered + $5, "
	    "settled_ts = CASE WHEN $4::bigint > 0 THEN $6::bigint ELSE "
	    "settled_ts END WHERE id = $1", 6, pg_int(q, k->g.id),
	    pg_int(q, k->pos), pg_int(q, k->delivered), pg_int(q, k->settled),
	    pg_int(q, k->dead), pg_int(q, k->now));
}

/*
 * A group's next due time after now, or now + 1 when rows due already
 * were left for being at or above the claim's bound (one that waited long
 * for the group's lock): its result's first row, or none.  Two look-ups,
 * each of a row or so: the first due after now by delivery_due, the ones
 * at or above the bound by the primary key (state + 0, due + 0: not by
 * delivery_due, which holds every lease in flight).  (One min() over
 * both conditions read every lease of the group: 20 ms at 50,000 in
 * flight, at each claim that handed out nothing, under the group's lock.)
 * And the runs of lease: the first one's end, or now + 1 when one whose
 * time ran out was being acked (unlease passed it by).
 */
#define NEXT_DUE_SQL "SELECT least((SELECT min(due) FROM delivery WHERE " \
	"grp = $1 AND state < 2 AND due > $2), (SELECT $2::bigint + 1 FROM " \
	"delivery WHERE grp = $1 AND off >= " BOUND " AND state + 0 < 2 " \
	"AND due + 0 <= $2 LIMIT 1), (SELECT min(greatest(due, $2 + 1)) " \
	"FROM lease WHERE grp = $1))"

/* The lane's group as this session's last claim of it left it, or NULL. */
static struct pg_claimed *
claimed(struct pgq *q, const char *topic, const char *group)
{
	int i;

	for (i = 0; i < q->nclaimed; i++)
		if (!strcmp(q->claimed[i].topic, topic) &&
		    !strcmp(q->claimed[i].g.name, group))
			return &q->claimed[i];
	return NULL;
}

static void
remember(struct pgq *q, const struct claimer *k, const char *topic)
{
	struct pg_claimed *c = claimed(q, topic, k->g.name);

	if (!c)
		c = &q->claimed[q->nclaimed < MQ_LANES_MAX ? q->nclaimed++ :
		    0];
	snprintf(c->topic, sizeof c->topic, "%s", topic);
	c->tid = k->t.id;
	c->g = k->g;
	c->g.pos = k->pos;
}

/* The reads made before the group's row came back still hold for g. */
static int
still(const struct pg_claimed *was, const struct mq_group *g)
{
	return was->g.id == g->id && was->g.pos == g->pos &&
	    was->g.ordered == g->ordered && was->g.per_key == g->per_key &&
	    !strcmp(was->g.idem, g->idem);
}

/*
 * A claim, in two round trips when the group is as this session's last
 * claim of it left it (one consumer of it, or the last to claim): the
 * first reads the bound (BOUND), locks the group and reads its due rows
 * and new messages as if its row were still that; the second writes the
 * leases and commits.  When the row says otherwise, those reads are
 * dropped and made again, one round trip each.
 */
static int
claim(struct pgq *q, const struct mq_claim *c, struct mq_msg *out, int max,
    int64_t *next)
{
	struct claimer k;
	struct pg_pipe p;
	struct pg_claimed *was;
	PGresult *r, *res[PG_PIPE_MAX];
	char lsn[32];
	int64_t gone0, pos0, t0 = 0, when, now0, hi, bound = 0, tid = 0;
	int rc, i, nd = -1, flush, unplain;

	memset(&k, 0, sizeof k);
	memset(&p, 0, sizeof p);
	k.q = q;
	k.c = c;
	k.out = out;
	k.max = max;
	/* nothing to claim: one read, without any lock */
	if (!c->woken) {
		k.now = pg_now();
		r = pg_qc(q, "cannot read deliveries", "SELECT ((SELECT min(due) "
		    "FROM delivery WHERE grp = g.id AND state < 2 AND due <= $3 "
		    "AND off < g.pos) IS NOT NULL OR EXISTS (SELECT 1 FROM lease "
		    "WHERE grp = g.id AND due <= $3) "
		    "OR g.pos < t.next_off) AND p <= $3, CASE WHEN p > $3 THEN p "
		    "ELSE least((SELECT min(due) FROM delivery WHERE grp = g.id "
		    "AND state < 2 AND due > $3), (SELECT min(due) FROM lease "
		    "WHERE grp = g.id)) END FROM topic t JOIN grp g ON "
		    "g.topic = t.id AND g.name = $2 CROSS JOIN LATERAL (SELECT "
		    "greatest(coalesce(t.paused_until, 0), coalesce("
		    "g.paused_until, 0)) AS p) x WHERE t.name = $1", 3,
		    c->topic, c->group,
		    pg_int(q, k.now));
		/* nothing, or paused: when to look again */
		if (r && PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "t")) {
			if (next)
				*next = pg_null(r, 0, 1) ? INT64_MAX :
				    pg_get(r, 0, 1);
			PQclear(r);
			return 0;
		}
		if (r)
			PQclear(r);
	}
	/*
	 * The bound first, and the WAL's position with it, before this
	 * claim writes any (the group's lock does): flushing to there makes
	 * what it shows durable, and waits for no write of its own.  Then
	 * the group, ours until commit.
	 */
	now0 = pg_now();
	was = claimed(q, c->topic, c->group);
	pg_begin(q);
	pg_pipe_q(q, &p, "cannot read topic", "SELECT set_config('mq.bound', "
	    "next_off::text, true), CASE WHEN pg_is_in_recovery() THEN NULL "
	    "ELSE pg_current_wal_insert_lsn() END, id FROM topic WHERE "
	    "name = $1", 1, c->topic);
	pg_group_locked(q, &p, c->topic, c->group);
	/* runs of lease whose time ran out (every run, in a group that is
	   not plain now) are delivery rows from here on, for the due rows'
	   reads; not the ones an ack is settling (locked), which would wait
	   for the group, ours: a group not plain that keeps one has the
	   claim start over (below) */
	pg_pipe_q(q, &p, "cannot read deliveries", "SELECT unlease(g.id, 0, "
	    "$4::bigint, x.d, true) FROM grp g JOIN topic t ON "
	    "t.id = g.topic CROSS JOIN LATERAL (SELECT CASE WHEN " PLAIN_SQL
	    " THEN $3::bigint ELSE $4::bigint END AS d) x WHERE t.name = $1 "
	    "AND g.name = $2 AND EXISTS (SELECT 1 FROM lease WHERE grp = g.id "
	    "AND due <= x.d)", 4, c->topic, c->group, pg_int(q, now0),
	    pg_int(q, INT64_MAX));
	pg_pipe_q(q, &p, "cannot read deliveries", "SELECT 1 FROM grp g JOIN "
	    "topic t ON t.id = g.topic WHERE t.name = $1 AND g.name = $2 AND "
	    "NOT (" PLAIN_SQL ") AND EXISTS (SELECT 1 FROM lease WHERE grp = "
	    "g.id)", 2, c->topic, c->group);
	if (was) {
		pg_pipe_q(q, &p, "cannot read deliveries", due_sql(&was->g), 8,
		    pg_int(q, was->g.id), pg_int(q, now0), pg_int(q, max),
		    pg_int(q, was->tid), "0", pg_int(q, was->g.pos), "{}", "{}");
		pg_pipe_q(q, &p, "cannot read messages", NEW_SQL, 4,
		    pg_int(q, was->tid), pg_int(q, was->g.pos), pg_int(q, max),
		    pg_int(q, was->g.id));
	}
	if (pg_pipe_run(q, &p, res) < 0)
		return PG_RETRY;
	lsn[0] = '\0';
	if (PQntuples(res[0]) && !pg_null(res[0], 0, 1)) {
		pg_copy(res[0], 0, 1, lsn, sizeof lsn);
		bound = pg_get(res[0], 0, 0);
		tid = pg_get(res[0], 0, 2);
	}
	rc = pg_group_locked_row(res[1], &k.g, &k.t.paused_until);
	/* a group not plain keeps a run an ack holds: again, once the ack
	   is done (a moment) */
	unplain = PQntuples(res[3]) > 0;
	for (i = 0; i < 4; i++)
		PQclear(res[i]);
	if (was) {
		k.pre_due = res[4];
		k.pre_new = res[5];
	}
	if (rc) {
		k.t.id = k.g.topic;
		snprintf(k.t.name, sizeof k.t.name, "%s", c->topic);
	} else if (pg_topic_ensure(q, c->topic, &k.t, 0) < 0 ||
	    pg_group_ensure(q, &k.t, c->group, c->latest, &k.g, 1) < 0)
		goto retry;
	/* the topic the bound and the WAL's position were read of, not one
	   made again under its name since (deleted, then sent to): its
	   offsets below the bound may not be in the WAL up to there */
	if ((lsn[0] && tid != k.t.id) || unplain) {
		pg_rollback(q);
		goto retry;
	}
	/* after the lock: what it hands out is handed out from now on (a
	   due row read before is one due by then, a subset of now's) */
	k.now = pg_now();
	if (mq_paused(&k.t, &k.g, k.now)) {	/* nothing until it ends */
		if (next)
			*next = mq_paused(&k.t, &k.g, k.now);
		free_arrays(&k);
		return pg_commit_seen(q, 0) ? PG_RETRY : 0;
	}
	k.lease = c->lease ? c->lease : k.g.lease;
	if (!(k.max = mq_rule_rate(&k.g, k.now, max, &t0, &when))) {
		if (next)	/* --rate: none may go before then */
			*next = when;
		free_arrays(&k);
		return pg_commit_seen(q, 0) ? PG_RETRY : 0;
	}
	if (!rc || !was || !still(was, &k.g) || k.max != max) {
		PQclear(k.pre_due);	/* read for another row: again */
		PQclear(k.pre_new);
		k.pre_due = k.pre_new = NULL;
	}
	k.pos = k.g.pos;
	/* again after a round in which some went dead or lapsed (those rows
	   are changed at once; the ones it handed out are not leased until
	   write_claim, and are left out): what waited behind their keys
	   may be due now */
	do {
		gone0 = k.gone;
		if ((rc = claim_due(&k, 0)) < 0)
			goto retry;
	} while (rc > 0 && k.n < k.max && k.gone > gone0);
	while (k.n < k.max) {
		pos0 = k.pos;
		if (claim_new(&k) < 0)
			goto retry;
		if (!k.passed)
			break;
		/* what claim_new passed, due: it goes next (rows below pos0
		   were looked at already) */
		k.passed = 0;
		if (claim_due(&k, pos0) < 0)
			goto retry;
	}
	/* the writes and the commit: one round trip */
	write_claim(&k, &p);
	if (k.g.rate_n && k.n)	/* --rate: the schedule moves on */
		pg_pipe_q(q, &p, "cannot update group", "UPDATE grp SET "
		    "rate_tat = $2 WHERE id = $1", 2, pg_int(q, k.g.id),
		    pg_int(q, mq_rule_rate_tat(&k.g, t0, k.n)));
	if (next && !k.n && k.seen < SCAN_MAX) {
		nd = p.n;
		pg_pipe_q(q, &p, "cannot read deliveries", NEXT_DUE_SQL, 2,
		    pg_int(q, k.g.id), pg_int(q, k.now));
	}
	/* a claim need not be durable (it would be made again), what it
	   hands out must be (unless an append's NOTIFY or a claim before
	   said so already); an auto-ack must */
	for (i = 0, hi = 0; i < k.n; i++)
		if (out[i].off > hi)
			hi = out[i].off;
	flush = c->autoack || (k.n > 0 && hi >= pg_durable_below(q, k.t.id));
	pg_pipe_commit(q, &p, flush, c->autoack || !lsn[0] ? NULL : lsn);
	i = p.n;
	if (pg_pipe_run(q, &p, res) < 0)
		goto retry;
	pg_pipe_done(q);
	/* flushed to where the WAL was when the bound was read: every
	   append below the bound had its commit in it (visible to that
	   read), so the claims after this need not wait for what it
	   showed; a stream of claims of a topic filled before waits for
	   one flush, not one each */
	if (flush && !q->async && lsn[0])
		pg_heard_durable(q, k.t.id, bound);
	if (next)
		*next = k.seen >= SCAN_MAX && k.n < k.max ? 0 : k.n ? k.now :
		    nd < 0 || pg_null(res[nd], 0, 0) ? INT64_MAX :
		    pg_get(res[nd], 0, 0);
	while (i > 0)
		PQclear(res[--i]);
	remember(q, &k, c->topic);
	free_arrays(&k);
	return k.n;
retry:
	free_arrays(&k);
	for (i = 0; i < k.n; i++)
		mq_msg_free(&out[i]);
	return PG_RETRY;
}

int
pg_claim(struct mq *mq, const struct mq_claim *c, struct mq_msg *out, int max,
    int64_t *next)
{
	int rc;

	while ((rc = claim(PGQ(mq), c, out, max, next)) == PG_RETRY)
		;
	return rc;
}

/* settling */

struct gcache {
	char		topic[MQ_NAME_MAX + 1];
	struct mq_topic	t;
	struct mq_group	g;
	int		found;
	int64_t		settled, failed, dead;
	/* its acks, settled in one statement: receipts, and their index */
	struct pg_arr	a_off, a_att, a_tok;
	size_t		*a_at;
	int		na;
};

static int
group_of(struct pgq *q, struct gcache **gc, int *ngc,
    const struct mq_receipt *r, struct gcache **out)
{
	struct gcache *c;
	int i, rc;

	for (i = 0; i < *ngc; i++)
		if (!strcmp((*gc)[i].topic, r->topic) &&
		    !strcmp((*gc)[i].g.name, r->group)) {
			*out = &(*gc)[i];
			return 0;
		}
	*gc = mq_array(*gc, *ngc + 1, sizeof **gc);
	c = &(*gc)[(*ngc)++];
	memset(c, 0, sizeof *c);
	snprintf(c->topic, sizeof c->topic, "%s", r->topic);
	snprintf(c->g.name, sizeof c->g.name, "%s", r->group);
	if ((rc = pg_need(q, r->topic, r->group, &c->t, &c->g, 0)) == PG_RETRY)
		return PG_RETRY;
	c->found = rc == 0;
	*out = c;
	return 0;
}

/* (state + 0: by the primary key, never by delivery_due, which holds
   every row of the group in flight: see prepared() in pg.c) */
#define LIVE "d.grp = $1 AND d.off = $2 AND d.state + 0 = 1 AND " \
	"d.attempt = $3 AND d.token = $4"

/* One receipt; its outcome, -1 when it matched no live delivery. */
static int
settle_one(struct pgq *q, struct gcache *c, struct mq_settle *st, int64_t now)
{
	const struct mq_receipt *rc = &st->r;
	struct mq_verdict v;
	PGresult *r;
	const char *g = pg_int(q, c->g.id), *off = pg_int(q, rc->off),
	    *att = pg_int(q, rc->attempt), *tok = pg_int(q, rc->token);
	char host[256];
	int64_t since, pid;

#define MATCHED(r) (PQntuples(r) > 0 ? (since = pg_get(r, 0, 0), \
	pg_copy(r, 0, 1, host, sizeof host), pid = pg_get(r, 0, 2), 1) : 0)

	/* the run of lease that holds it is delivery rows first (none
	   holds the highest offset, of an unknown receipt: no overflow) */
	if (st->how != MQ_ACK && rc->off < INT64_MAX) {
		TRY(r, pg_qc(q, "cannot settle delivery", "SELECT unlease("
		    "$1::bigint, $2::bigint, $2::bigint + 1, $3, false)", 3, g,
		    off, pg_int(q, INT64_MAX)));
		PQclear(r);
	}

	switch (st->how) {
	case MQ_ACK:
		TRY(r, pg_qc(q, "cannot settle delivery", "WITH gone AS (DELETE "
		    "FROM delivery d WHERE " LIVE " RETURNING since, host, pid, "
		    "bid), b AS (INSERT INTO consumed (grp, bid, off, ts) "
		    "SELECT $1, bid, $2, $5 FROM gone WHERE bid IS NOT NULL ON "
		    "CONFLICT (grp, bid) DO UPDATE SET off = EXCLUDED.off, "
		    "ts = EXCLUDED.ts) SELECT * FROM gone", 5, g, off, att, tok,
		    pg_int(q, now)));
		if (!MATCHED(r)) {
			PQclear(r);
			return -1;
		}
		PQclear(r);
		c->settled++;
		if (pg_history(q, c->g.id, rc->off, rc->attempt, "acked", NULL,
		    since, host, pid) < 0)
			return PG_RETRY;
		if (c->g.ordered || c->g.per_key || *c->g.idem)
			pg_notify(q, c->t.id);	/* its key is free */
		return MQ_SETTLED;
	case MQ_FAIL:
		mq_rule_fail(&c->g, rc->attempt, now, st->delay, st->reason, &v);
		st->due = v.due;
		TRY(r, pg_qc(q, "cannot settle delivery", "UPDATE delivery d SET "
		    "state = $5, due = $6, consumer = NULL, reason = $7 WHERE "
		    LIVE " RETURNING since, host, pid", 7, g, off, att, tok,
		    pg_int(q, v.state), pg_int(q, v.due),
		    v.reason[0] ? v.reason : NULL));
		if (!MATCHED(r)) {
			PQclear(r);
			return -1;
		}
		PQclear(r);
		c->failed++;
		if (pg_history(q, c->g.id, rc->off, rc->attempt, "failed",
		    st->reason, since, host, pid) < 0)
			return PG_RETRY;
		pg_notify(q, c->t.id);
		if (v.state != MQ_DEAD)
			return MQ_SETTLED;
		c->dead++;
		if (pg_history(q, c->g.id, rc->off, rc->attempt, "dead",
		    v.reason, 0, NULL, 0) < 0)
			return PG_RETRY;
		return MQ_WENT_DEAD;
	case MQ_DEAD_LETTER:
		TRY(r, pg_qc(q, "cannot settle delivery", "UPDATE delivery d SET "
		    "state = 2, consumer = NULL, reason = $5 WHERE " LIVE
		    " RETURNING since, host, pid", 5, g, off, att, tok,
		    st->reason ? st->reason : "dead-lettered"));
		if (!MATCHED(r)) {
			PQclear(r);
			return -1;
		}
		PQclear(r);
		c->dead++;
		if (pg_history(q, c->g.id, rc->off, rc->attempt, "dead",
		    st->reason ? st->reason : "dead-lettered", since, host,
		    pid) < 0)
			return PG_RETRY;
		pg_notify(q, c->t.id);
		return MQ_SETTLED;
	case MQ_EXTEND:
		/* a lease of a business id (--idempotent-by) that ran out
		   may not come back: another may have the id now */
		TRY(r, pg_qc(q, "cannot settle delivery", "UPDATE delivery d SET "
		    "due = $5 WHERE " LIVE " AND (d.bid IS NULL OR d.due > $6) "
		    "RETURNING since, host, pid", 6, g, off, att, tok,
		    pg_int(q, now + st->extend), pg_int(q, now)));
		since = PQntuples(r);
		PQclear(r);
		return since ? MQ_SETTLED : -1;
	case MQ_GIVEBACK:
		TRY(r, pg_qc(q, "cannot give back delivery", "INSERT INTO "
		    "delivery (grp, off, state, due, attempt, key) SELECT $1, "
		    "$2, 0, $3, $4, key FROM msg WHERE topic = $5 AND off = $2 "
		    "AND off < (SELECT pos FROM grp WHERE id = $1 FOR SHARE) "
		    "ON CONFLICT (grp, off) DO NOTHING", 5, g, off,
		    pg_int(q, now), att, pg_int(q, c->t.id)));
		since = atoi(PQcmdTuples(r));
		PQclear(r);
		if (since != 1)
			return -1;
		/* its business id was not consumed after all */
		TRY(r, pg_qc(q, "cannot give back delivery", "DELETE FROM "
		    "consumed WHERE grp = $1 AND off = $2", 2, g, off));
		PQclear(r);
		c->settled--;
		if (pg_history(q, c->g.id, rc->off, rc->attempt, "released",
		    st->reason, 0, NULL, 0) < 0)
			return PG_RETRY;
		pg_notify(q, c->t.id);
		return MQ_SETTLED;
	default:	/* MQ_RELEASE */
		TRY(r, pg_qc(q, "cannot settle delivery", "UPDATE delivery d SET "
		    "state = 0, due = $5, consumer = NULL WHERE " LIVE
		    " RETURNING since, host, pid", 5, g, off, att, tok,
		    pg_int(q, now)));
		if (!MATCHED(r)) {
			PQclear(r);
			return -1;
		}
		PQclear(r);
		if (pg_history(q, c->g.id, rc->off, rc->attempt, "released",
		    st->reason, since, host, pid) < 0)
			return PG_RETRY;
		pg_notify(q, c->t.id);
		return MQ_SETTLED;
	}
#undef MATCHED
}

/* A stale receipt was handed out once; an unknown one never. */
static int
unmatched(struct gcache *c, const struct mq_receipt *r)
{
	return c->found && r->off < c->t.next_off ? MQ_STALE : MQ_UNKNOWN;
}

struct tokoff { int64_t tok, off; };

static int
by_tokoff(const void *a, const void *b)
{
	const struct tokoff *x = a, *y = b;

	if (x->tok != y->tok)
		return x->tok < y->tok ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/*
 * The acks of the runs of lease: the receipts of a first attempt as
 * ranges [a, b) of offsets of one token (a batch of acks of a stream is a
 * range or a few), queued on p in two statements.  First the runs of lease
 * that hold them: the bits this ack sets in a run's acked are computed
 * against the row as locked, so a receipt given twice, or acked by two at
 * once, settles once; a run made delivery rows meanwhile is gone, and its
 * rows are the next statement's (queue_acks).  Then the runs wholly acked
 * go.
 */
static void
queue_run_acks(struct pgq *q, struct gcache *c, const struct mq_settle *st,
    struct pg_pipe *p, const char *n)
{
	struct tokoff *v = mq_array(NULL, c->na, sizeof *v);
	struct pg_arr ra = { 0 }, rb = { 0 }, rt = { 0 };
	const char *a, *b, *g = pg_int(q, c->g.id);
	int i, k, nv = 0;

	for (i = 0; i < c->na; i++)	/* (none holds the highest offset) */
		if (st[c->a_at[i]].r.attempt == 1 &&
		    st[c->a_at[i]].r.off < INT64_MAX) {
			v[nv].tok = st[c->a_at[i]].r.token;
			v[nv++].off = st[c->a_at[i]].r.off;
		}
	qsort(v, nv, sizeof *v, by_tokoff);
	for (i = 0; i < nv; i = k) {
		for (k = i + 1; k < nv && v[k].tok == v[i].tok &&
		    v[k].off <= v[k - 1].off + 1; k++)
			;
		pg_arr_int(&ra, v[i].off);
		pg_arr_int(&rb, v[k - 1].off + 1);
		pg_arr_int(&rt, v[i].tok);
	}
	free(v);
	a = pg_arr_end(&ra);
	b = pg_arr_end(&rb);
	pg_pipe_q(q, p, "cannot settle delivery", "WITH r AS (SELECT * FROM "
	    "unnest($2::bigint[], $3::bigint[], $4::bigint[]) AS r(a, b, t)), "
	    "m AS (SELECT l.lo, bit_or((repeat('0', (x.a - l.lo)::int) || "
	    "repeat('1', (x.b - x.a)::int) || repeat('0', (l.hi - x.b)::int))"
	    "::varbit) AS b FROM lease l JOIN r ON r.a < l.hi AND r.b > l.lo "
	    "AND r.t = l.token CROSS JOIN LATERAL (SELECT greatest(r.a, l.lo) "
	    "AS a, least(r.b, l.hi) AS b) x WHERE l.grp = $1 AND l.lo < "
	    "(SELECT max(b) FROM r) AND l.hi > (SELECT min(a) FROM r) GROUP BY "
	    "l.lo), u AS (UPDATE lease l SET newly = m.b & ~l.acked, acked = "
	    "l.acked | m.b FROM m WHERE l.grp = $1 AND l.lo = m.lo RETURNING "
	    "l.lo, l.newly, l.token, l.since, l.host, l.pid), s AS (SELECT "
	    "u.lo + i AS off, token FROM u, generate_series(0, length(u.newly) "
	    "- 1) AS i WHERE get_bit(u.newly, i) = 1), h AS (INSERT INTO acks "
	    "(grp, lo, offs, ts, n, host, pid, since, dhost, dpid) SELECT $1, "
	    "lo, newly, $5, $6, $7, $8, since, host, pid FROM u WHERE "
	    "position(B'1' IN newly) > 0), "
	    "g AS (UPDATE grp SET settled = settled + (SELECT count(*) FROM s), "
	    "settled_ts = $5 WHERE id = $1 AND EXISTS (SELECT 1 FROM s)) "
	    "SELECT off, 1, token FROM s", 8, g, a, b, pg_arr_end(&rt),
	    pg_int(q, pg_now()), n, mq_hostname(), pg_int(q, mq_pid()));
	pg_pipe_q(q, p, "cannot settle delivery", "DELETE FROM lease WHERE "
	    "grp = $1 AND lo < (SELECT max(b) FROM unnest($3::bigint[]) b) AND "
	    "hi > (SELECT min(a) FROM unnest($2::bigint[]) a) AND "
	    "position(B'0' IN acked) = 0", 3, g, a, b);
	pg_arr_free(&ra);
	pg_arr_free(&rb);
	pg_arr_free(&rt);
}

/*
 * A group's acks, queued on p: those of runs of lease (queue_run_acks),
 * then, in a statement of its own (a snapshot taken after the runs'
 * rows are locked), the live delivery rows they match, which go, with a
 * history row each.  A receipt given twice settles once.
 */
static void
queue_acks(struct pgq *q, struct gcache *c, const struct mq_settle *st,
    struct pg_pipe *p)
{
	int64_t n0 = pg_n_take(c->na);
	const char *off = pg_arr_end(&c->a_off), *att = pg_arr_end(&c->a_att),
	    *tok = pg_arr_end(&c->a_tok), *g = pg_int(q, c->g.id),
	    *now = pg_int(q, pg_now()), *n = pg_int(q, n0),
	    *pid = pg_int(q, mq_pid());

	queue_run_acks(q, c, st, p, n);

	/* (the receipts' rows by their keys, the offsets' array: no plan
	   reads all of the group's rows; each one's lease checked in the
	   DELETE itself, so that a row changed meanwhile is checked again
	   as it is now (a lease extended goes, one taken again stays), as a
	   lookup by ctid would not: it passes by any row changed since, or
	   on a server whose TID scans do not recheck, deletes it as it is
	   now; OR false keeps the IN a hashed subplan, not a join whose
	   plan could scan the receipts once a row) */
	pg_pipe_q(q, p, "cannot settle delivery", "WITH v AS (SELECT * FROM "
	    "unnest($2::bigint[], $3::int[], $4::bigint[]) AS v(off, a, t)), "
	    "gone AS (DELETE FROM delivery d WHERE d.grp = $1 AND "
	    "d.off = ANY($2::bigint[]) AND d.state + 0 = 1 AND "
	    "((d.off, d.attempt, d.token) IN (SELECT off, a, t FROM v) OR "
	    "false) RETURNING d.off, d.attempt, d.token, d.since, "
	    "d.host, d.pid, d.bid), b AS (INSERT INTO consumed (grp, bid, off, "
	    "ts) SELECT DISTINCT ON (bid) $1, bid, off, $5 FROM gone WHERE bid "
	    "IS NOT NULL ORDER BY bid, off DESC ON CONFLICT (grp, bid) DO "
	    "UPDATE SET off = EXCLUDED.off, ts = EXCLUDED.ts), "
	    "h AS (INSERT INTO history (grp, off, ts, n, attempt, "
	    "event, host, pid, since, dhost, dpid) SELECT $1, off, $5, "
	    "$6::bigint + row_number() OVER (ORDER BY off) - 1, attempt, "
	    "'acked', $7, $8, since, host, pid FROM gone), u AS (UPDATE grp "
	    "SET settled = settled + (SELECT count(*) FROM gone), "
	    "settled_ts = $5 WHERE id = $1 AND EXISTS (SELECT 1 FROM gone)) "
	    "SELECT off, attempt, token FROM gone",
	    8, g, off, att, tok, now, n, mq_hostname(), pid);
	/* the group's settled count goes with them */
	if (c->g.ordered || c->g.per_key || *c->g.idem)
		pg_notify(q, c->t.id);	/* their keys (business ids) free */
}

struct rkey { int64_t off, tok; int att; size_t at; };

static int
by_rkey(const void *a, const void *b)
{
	const struct rkey *x = a, *y = b;

	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	if (x->att != y->att)
		return x->att < y->att ? -1 : 1;
	return x->tok < y->tok ? -1 : x->tok > y->tok;
}

/*
 * The acks that one of queue_acks's results r settled: each row settles
 * the first receipt of it not settled yet (a receipt given twice settles
 * once).
 */
static void
acked(struct gcache *c, struct mq_settle *st, PGresult *r)
{
	struct rkey *v, key;
	int i, lo, hi, mid;

	if (!PQntuples(r))
		return;
	v = mq_array(NULL, c->na, sizeof *v);
	for (i = 0; i < c->na; i++) {
		v[i].off = st[c->a_at[i]].r.off;
		v[i].att = st[c->a_at[i]].r.attempt;
		v[i].tok = st[c->a_at[i]].r.token;
		v[i].at = c->a_at[i];
	}
	qsort(v, c->na, sizeof *v, by_rkey);
	for (i = 0; i < PQntuples(r); i++) {
		key.off = pg_get(r, i, 0);
		key.att = (int)pg_get(r, i, 1);
		key.tok = (uint32_t)pg_get(r, i, 2);
		for (lo = 0, hi = c->na; lo < hi; ) {	/* the first >= key */
			mid = lo + (hi - lo) / 2;
			if (by_rkey(&v[mid], &key) < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (; lo < c->na && !by_rkey(&v[lo], &key); lo++)
			if (st[v[lo].at].result == -1) {
				st[v[lo].at].result = MQ_SETTLED;
				break;
			}
	}
	free(v);
}

static void
free_groups(struct gcache *gc, int ngc)
{
	int i;

	for (i = 0; i < ngc; i++) {
		pg_arr_free(&gc[i].a_off);
		pg_arr_free(&gc[i].a_att);
		pg_arr_free(&gc[i].a_tok);
		free(gc[i].a_at);
	}
	free(gc);
}

/*
 * The receipts of a batch in one transaction: each group's acks in one
 * statement, the rest one by one; the acks, the counts and the commit in
 * one round trip.
 */
static int
settle(struct pgq *q, struct mq_settle *st, size_t n)
{
	struct gcache *gc = NULL, *c;
	struct pg_pipe p;
	PGresult *res[PG_PIPE_MAX];
	int64_t now = pg_now();
	size_t i;
	int ngc = 0, rc, at[PG_PIPE_MAX], nat = 0, j;

	if (pg_begin(q))
		return PG_RETRY;
	for (i = 0; i < n; i++) {
		if (group_of(q, &gc, &ngc, &st[i].r, &c) < 0)
			goto retry;
		if (c->found && st[i].how == MQ_ACK) {	/* below, together */
			pg_arr_int(&c->a_off, st[i].r.off);
			pg_arr_int(&c->a_att, st[i].r.attempt);
			pg_arr_int(&c->a_tok, st[i].r.token);
			c->a_at = mq_array(c->a_at, c->na + 1, sizeof *c->a_at);
			c->a_at[c->na++] = i;
			st[i].result = -1;	/* until an ack settles it */
			continue;
		}
		rc = c->found ? settle_one(q, c, &st[i], now) : -1;
		if (rc == PG_RETRY)
			goto retry;
		st[i].result = rc < 0 ? unmatched(c, &st[i].r) : rc;
	}
	memset(&p, 0, sizeof p);
	for (i = 0; i < (size_t)ngc; i++) {
		c = &gc[i];
		/* room for this group's four and the commit's */
		if (p.n + 4 + PG_PIPE_COMMIT > PG_PIPE_MAX) {
			if (pg_pipe_run(q, &p, res) < 0)
				goto retry;
			for (j = 0; j < nat; j++) {
				if (at[j] >= 0)
					acked(&gc[at[j]], st, res[j]);
				PQclear(res[j]);
			}
			nat = 0;
		}
		if (c->na) {	/* the runs', then the rows' */
			at[nat++] = (int)i;
			at[nat++] = -1;
			at[nat++] = (int)i;
			queue_acks(q, c, st, &p);
		}
		if (!c->settled && !c->failed && !c->dead)
			continue;
		pg_pipe_q(q, &p, "cannot update group", "UPDATE grp SET "
		    "settled = settled + $2, failed = failed + $3, "
		    "deadlettered = deadlettered + $4, settled_ts = CASE WHEN "
		    "$2::bigint > 0 THEN $5::bigint ELSE settled_ts END "
		    "WHERE id = $1", 5, pg_int(q, c->g.id),
		    pg_int(q, c->settled), pg_int(q, c->failed),
		    pg_int(q, c->dead), pg_int(q, now));
		at[nat++] = -1;
	}
	pg_pipe_commit(q, &p, 1, NULL);
	j = p.n;
	if (pg_pipe_run(q, &p, res) < 0)
		goto retry;
	pg_pipe_done(q);
	for (i = 0; i < (size_t)nat; i++)
		if (at[i] >= 0)
			acked(&gc[at[i]], st, res[i]);
	while (j > 0)
		PQclear(res[--j]);
	for (c = gc; c < gc + ngc; c++)	/* the acks none settled */
		for (j = 0; j < c->na; j++)
			if (st[c->a_at[j]].result == -1)
				st[c->a_at[j]].result = unmatched(c,
				    &st[c->a_at[j]].r);
	free_groups(gc, ngc);
	return 0;
retry:
	free_groups(gc, ngc);
	return PG_RETRY;
}

void
pg_settle(struct mq *mq, struct mq_settle *st, size_t n)
{
	while (settle(PGQ(mq), st, n) == PG_RETRY)
		;
}

/* consumers */

static PGresult *
lock(struct pgq *q, const char *fn, int64_t id)
{
	char sql[96];

	snprintf(sql, sizeof sql, "SELECT %s(" LOCK_ARGS ")", fn);
	return pg_q(q, "cannot lock consumer", sql, 2, pg_int(q, q->lockspace),
	    pg_int(q, id));
}

static void
unlock(struct pgq *q, int64_t id)
{
	PGresult *r = lock(q, "pg_advisory_unlock", id);
	int i;

	if (r)
		PQclear(r);
	for (i = 0; i < q->nlockkey; i++)
		if (q->lockkey[i] == id)
			q->lockkey[i--] = q->lockkey[--q->nlockkey];
}

static int
relock(struct pgq *q, int64_t id, int64_t until)
{
	PGresult *r;
	int alive, got;

	/* after a blip the old session may live on until the server drops
	   it (the keepalive bound): its lock goes with it */
	for (;;) {
		r = lock(q, "pg_try_advisory_lock", id);
		got = r && !strcmp(PQgetvalue(r, 0, 0), "t");
		if (r)
			PQclear(r);
		if (got)
			break;
		if (pg_now() >= until || mq_stop)
			return 0;
		sleep(1);
	}
	r = pg_q(q, "cannot read consumers", "SELECT 1 FROM consumer WHERE "
	    "id = $1", 1, pg_int(q, id));
	alive = r && PQntuples(r) > 0;
	if (r)
		PQclear(r);
	if (!alive)
		unlock(q, id);
	return alive;
}

/*
 * After a reconnect: the lock of this consumer (of each lane) again, if
 * it is still registered (0 if another consumer gave one up meanwhile).
 */
int
pg_relock(struct pgq *q, int64_t until)
{
	int i, n = q->nlockkey;

	for (i = 0; i < n; i++)
		if (!relock(q, q->lockkey[i], until))
			return 0;
	return 1;
}

static int
join(struct pgq *q, const char *topic, const char *group, int latest,
    const struct mq_consumer *me, int64_t *lease, int64_t *id)
{
	struct mq_topic t;
	struct mq_group g;
	PGresult *r;

	if (pg_begin(q) || pg_topic_ensure(q, topic, &t, 0) < 0 ||
	    pg_group_ensure(q, &t, group, latest, &g, 0) < 0)
		return PG_RETRY;
	if (lease)
		*lease = g.lease;
	TRY(r, pg_q(q, "cannot register consumer", "INSERT INTO consumer (grp, "
	    "host, boot, pid, start, since, seen, pgid, pgstart) VALUES ($1, "
	    "$2, $3, $4, $5, $6, $7, $8, $9) RETURNING id", 9, pg_int(q, g.id),
	    me->host, me->boot, pg_int(q, me->pid), pg_int(q, me->start),
	    pg_int(q, me->since), pg_int(q, me->seen),
	    me->pgid ? pg_int(q, me->pgid) : NULL,
	    me->pgid ? pg_int(q, me->pgstart) : NULL));
	*id = pg_get(r, 0, 0);
	PQclear(r);
	/* session-level: it outlives the transaction, not the connection */
	if (!(r = lock(q, "pg_advisory_lock", *id)))
		return PG_RETRY;
	PQclear(r);
	if (q->nlockkey < MQ_LANES_MAX)
		q->lockkey[q->nlockkey++] = *id;
	if (pg_commit(q)) {
		unlock(q, *id);
		return PG_RETRY;
	}
	return 0;
}

/*
 * Registers this process, and takes its advisory lock on this connection
 * (held until the connection ends, however it ends).
 */
int64_t
pg_join(struct mq *mq, const char *topic, const char *group, int latest,
    const struct mq_consumer *me, int64_t *lease)
{
	struct pgq *q = PGQ(mq);
	int64_t id;

	while (join(q, topic, group, latest, me, lease, &id) == PG_RETRY)
		;
	return id;
}

static int
beat(struct pgq *q, int64_t id, int64_t lease_until)
{
	PGresult *r;

	if (pg_begin(q))
		return PG_RETRY;
	TRY(r, pg_qc(q, "cannot update consumer", "UPDATE consumer SET seen = $2 "
	    "WHERE id = $1", 2, pg_int(q, id), pg_int(q, pg_now())));
	PQclear(r);
	if (lease_until) {
		/* not a lease run out whose business id may have gone to
		   another (--idempotent-by) */
		TRY(r, pg_qc(q, "cannot extend leases", "UPDATE delivery SET due = "
		    "$2 WHERE consumer = $1 AND state = 1 AND due < $2 AND "
		    "(bid IS NULL OR due > $3)", 3, pg_int(q, id),
		    pg_int(q, lease_until), pg_int(q, pg_now())));
		PQclear(r);
	}
	return pg_commit(q);
}

void
pg_beat(struct mq *mq, int64_t id, int64_t lease_until)
{
	while (beat(PGQ(mq), id, lease_until) == PG_RETRY)
		;
}

/*
 * The leases of a consumer go back to waiting, due now; the consumer row
 * goes.  Returns the topic they belong to (0: none), PG_RETRY.
 */
int64_t
pg_release(struct pgq *q, int64_t consumer, int64_t now)
{
	PGresult *r;
	int64_t topic;

	TRY(r, pg_q(q, "cannot release leases", "INSERT INTO history (grp, off, "
	    "ts, n, attempt, event, host, pid, reason, since, dhost, dpid) "
	    "SELECT d.grp, d.off, $2, $3, d.attempt, 'released', c.host, "
	    "c.pid, 'consumer gone', d.since, d.host, d.pid FROM delivery d "
	    "JOIN consumer c ON c.id = d.consumer WHERE d.consumer = $1 AND "
	    "d.state = 1", 3, pg_int(q, consumer), pg_int(q, now),
	    pg_int(q, mq_history_n())));
	PQclear(r);
	TRY(r, pg_q(q, "cannot release leases", "UPDATE delivery SET state = 0, "
	    "due = $2, consumer = NULL WHERE consumer = $1 AND state = 1", 2,
	    pg_int(q, consumer), pg_int(q, now)));
	PQclear(r);
	TRY(r, pg_q(q, "cannot remove consumer", "DELETE FROM consumer c USING "
	    "grp g WHERE c.id = $1 AND g.id = c.grp RETURNING g.topic", 1,
	    pg_int(q, consumer)));
	topic = PQntuples(r) ? pg_get(r, 0, 0) : 0;
	PQclear(r);
	return topic;
}

static int
leave(struct pgq *q, int64_t id)
{
	int64_t topic;

	if (pg_begin(q) || (topic = pg_release(q, id, pg_now())) < 0)
		return PG_RETRY;
	if (topic)
		pg_notify(q, topic);
	return pg_commit(q);
}

void
pg_leave(struct mq *mq, int64_t id)
{
	struct pgq *q = PGQ(mq);

	while (leave(q, id) == PG_RETRY)
		;
	unlock(q, id);
}

/*
 * A consumer of the group is gone when its advisory lock can be taken:
 * its connection ended, whichever host it ran on.  On this host its
 * handlers' leftovers are killed first (gone(), host.c).
 */
static int
reap(struct pgq *q, const char *topic, const char *group, const char *host,
    int (*gone)(const struct mq_consumer *, const char *), const char *boot,
    int *reaped)
{
	struct mq_consumer *c;
	int64_t t;
	int i, j, n;

	if ((n = pg_dead_consumers_of(q, topic, group, &c)) < 0)
		return PG_RETRY;
	for (i = 0; i < n; i++) {
		/* its session is over; on this host, its handlers too */
		if (!strcmp(c[i].host, host) && !gone(&c[i], boot) &&
		    c[i].pid != getpid()) {
			unlock(q, c[i].id);
			continue;
		}
		if (pg_begin(q) || (t = pg_release(q, c[i].id, pg_now())) < 0)
			break;
		if (t)
			pg_notify(q, t);
		if (pg_commit(q))
			break;
		unlock(q, c[i].id);
		(*reaped)++;
	}
	for (j = i; j < n; j++)		/* to try again: none kept */
		unlock(q, c[j].id);
	free(c);
	return i < n ? PG_RETRY : 0;
}

int
pg_reap(struct mq *mq, const char *topic, const char *group, const char *host,
    int (*gone)(const struct mq_consumer *, const char *), const char *boot)
{
	int n = 0;

	while (reap(PGQ(mq), topic, group, host, gone, boot, &n) == PG_RETRY)
		;
	return n;
}
