/*
 * log.c: the log as a log on PostgreSQL: reading a range, finding an
 * offset by time, moving a group's position, redriving dead letters,
 * tracing a message, purging, vacuuming.  The same rules as
 * ../sqlite/log.c, which explains them; what differs is locking.
 *
 * Invariants:
 * - Message times never decrease along offsets, so a time maps to an
 *   offset by binary search, without an index on time.
 * - A purge deletes in short chunks, each its own transaction.  Each
 *   chunk locks the topic's group rows before it reads their positions,
 *   so a group rewound meanwhile (which updates its row) is either seen
 *   or waits, and a give-back (which reads its group's position FOR
 *   SHARE) cannot slip a delivery under a message being deleted.
 * - Reads that take several statements run in one REPEATABLE READ
 *   snapshot.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pg.h"

#define CHUNK	2000	/* offsets a purge transaction covers */

static int64_t
one(struct pgq *q, PGresult *r)
{
	int64_t v;

	(void)q;
	if (!r)
		return PG_RETRY;
	v = PQntuples(r) ? pg_get(r, 0, 0) : 0;
	PQclear(r);
	return v;
}

static int
read_range(struct pgq *q, const struct mq_read *rd, struct mq_msg *out,
    int max)
{
	struct mq_topic t;
	PGresult *r;
	int i, n, rc;

	if (pg_begin_read(q))
		return PG_RETRY;
	if ((rc = pg_topic_row(q, rd->topic, &t, 0)) <= 0) {
		pg_rollback(q);
		return rc < 0 ? rc : MQ_E_NOTOPIC;
	}
	/* and where the WAL was after the snapshot: what it shows was
	   committed below that, but perhaps not flushed (see pg_begin) */
	TRY(r, pg_q(q, "cannot read messages", "SELECT off, ts, due, key, "
	    "body, headers, pg_current_wal_insert_lsn() FROM msg WHERE "
	    "topic = $1 AND "
	    "off >= $2 AND off <= $3 AND ($4::text IS NULL OR key = $4) "
	    "ORDER BY off LIMIT $5", 5, pg_int(q, t.id), pg_int(q, rd->from),
	    pg_int(q, rd->to), rd->key, pg_int(q, max)));
	n = PQntuples(r);
	for (i = 0; i < n; i++)
		pg_msg_row(r, i, 0, &out[i]);
	pg_rollback(q);
	if (n)
		pg_flush(q, PQgetvalue(r, 0, 6));
	PQclear(r);
	return n;
}

int
pg_read(struct mq *mq, const struct mq_read *rd, struct mq_msg *out, int max)
{
	int rc;

	while ((rc = read_range(PGQ(mq), rd, out, max)) == PG_RETRY)
		;
	return rc;
}

/* The first stored offset >= off and its time; 0 if none, PG_RETRY. */
static int64_t
next_stored(struct pgq *q, int64_t topic, int64_t off, int64_t *ts)
{
	PGresult *r;
	int64_t found = 0;

	TRY(r, pg_q(q, "cannot read messages", "SELECT off, ts FROM msg "
	    "WHERE topic = $1 AND off >= $2 ORDER BY off LIMIT 1", 2,
	    pg_int(q, topic), pg_int(q, off)));
	if (PQntuples(r)) {
		found = pg_get(r, 0, 0);
		*ts = pg_get(r, 0, 1);
	}
	PQclear(r);
	return found;
}

/* The first offset whose time is >= ts (next_off if none); binary search. */
static int64_t
offset_at(struct pgq *q, const struct mq_topic *t, int64_t ts)
{
	int64_t lo = 1, hi = t->next_off, mid, off, mts = 0;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if ((off = next_stored(q, t->id, mid, &mts)) < 0)
			return PG_RETRY;
		if (!off || mts >= ts)
			hi = mid;
		else
			lo = off + 1;
	}
	return lo;
}

static int64_t
find_offset(struct pgq *q, const char *topic, int64_t ts)
{
	struct mq_topic t;
	int64_t off;
	int rc;

	if (pg_begin_read(q))
		return PG_RETRY;
	if ((rc = pg_topic_row(q, topic, &t, 0)) <= 0) {
		pg_rollback(q);
		return rc < 0 ? rc : MQ_E_NOTOPIC;
	}
	off = offset_at(q, &t, ts);
	pg_rollback(q);
	return off;
}

int64_t
pg_offset_at(struct mq *mq, const char *topic, int64_t ts)
{
	int64_t off;

	while ((off = find_offset(PGQ(mq), topic, ts)) == PG_RETRY)
		;
	return off;
}

static int
run3(struct pgq *q, const char *what, const char *sql, int64_t a, int64_t b,
    int64_t c)
{
	PGresult *r;

	TRY(r, pg_q(q, what, sql, 3, pg_int(q, a), pg_int(q, b),
	    pg_int(q, c)));
	PQclear(r);
	return 0;
}

/* As ../sqlite/log.c's cancel(): deliveries a move drops, or their count. */
static int64_t
cancel(struct pgq *q, int64_t grp, int64_t off, int below, int dry)
{
	static const char *sql[2][2] = {
		{ "WITH c AS (DELETE FROM delivery WHERE grp = $1 AND "
		  "off >= $2 RETURNING state) SELECT count(*) FILTER (WHERE "
		  "state <> 5) FROM c",
		  "SELECT count(*) FROM deliveries WHERE grp = $1 AND off >= $2 "
		  "AND state <> 5" },
		{ "WITH c AS (DELETE FROM delivery WHERE grp = $1 AND off < $2 "
		  "AND state <> 2 RETURNING state) SELECT count(*) FILTER "
		  "(WHERE state <> 5) FROM c",
		  "SELECT count(*) FROM deliveries WHERE grp = $1 AND off < $2 "
		  "AND state < 2" },
	};
	PGresult *r;
	int64_t n;

	/* the group's runs of lease are delivery rows first (lease.sql) */
	if (!dry && run3(q, "cannot cancel deliveries", "SELECT unlease("
	    "$1::bigint, 0, $2::bigint, $3::bigint, false)", grp, INT64_MAX,
	    INT64_MAX) < 0)
		return PG_RETRY;
	/* cancelled ones (mark.c) were settled: gone, not counted */
	TRY(r, pg_q(q, "cannot cancel deliveries", sql[!!below][!!dry], 2,
	    pg_int(q, grp), pg_int(q, off)));
	n = pg_get(r, 0, 0);
	PQclear(r);
	return n;
}

static int
move(struct pgq *q, const char *topic, const char *group,
    const struct mq_move *m, struct mq_moved *out)
{
	struct mq_topic t;
	struct mq_group g;
	PGresult *r;
	int64_t pos, first;
	int rc;

	memset(out, 0, sizeof *out);
	if (m->dry ? pg_begin_read(q) : pg_begin(q))
		return PG_RETRY;
	if ((rc = pg_need(q, topic, group, &t, &g, !m->dry)) < 0) {
		if (rc != PG_RETRY)
			pg_rollback(q);
		return rc;
	}
	pos = m->to == MQ_TO_TIME ? offset_at(q, &t, m->arg) : 0;
	if (pos == PG_RETRY || (first = pg_first_off(q, t.id)) < 0)
		return PG_RETRY;
	pos = mq_rule_move(m, pos, g.pos, first, t.next_off);
	out->from = g.pos;
	out->to = pos;
	if (pos == g.pos && m->to == MQ_TO_SHIFT) {
		out->unchanged = 1;
		pg_rollback(q);
		return 0;
	}
	if (pos < g.pos) {
		out->again = pg_count_range(q, t.id, pos, g.pos);
		out->dropped = cancel(q, g.id, pos, 0, m->dry);
	} else {
		out->skipped = pg_count_range(q, t.id, g.pos, pos);
		out->dropped = cancel(q, g.id, pos, 1, m->dry);
	}
	if (out->again < 0 || out->skipped < 0 || out->dropped < 0)
		return PG_RETRY;
	if (m->dry) {
		pg_rollback(q);
		return 0;
	}
	TRY(r, pg_q(q, "cannot move group", "UPDATE grp SET pos = $2 "
	    "WHERE id = $1", 2, pg_int(q, g.id), pg_int(q, pos)));
	PQclear(r);
	pg_notify(q, t.id);
	return pg_commit(q);
}

int
pg_move(struct mq *mq, const char *topic, const char *group,
    const struct mq_move *m, struct mq_moved *out)
{
	int rc;

	while ((rc = move(PGQ(mq), topic, group, m, out)) == PG_RETRY)
		;
	return rc;
}

/* As ../sqlite/log.c's redrive_one(); off 0: every dead letter. */
static int64_t
redrive_one(struct pgq *q, int64_t grp, int64_t off, int dry)
{
	PGresult *r;
	int64_t n;

	if (dry)
		return one(q, pg_q(q, "cannot count dead letters", "SELECT "
		    "count(*) FROM delivery WHERE grp = $1 AND state = 2 AND "
		    "($2 = 0 OR off = $2)", 2, pg_int(q, grp), pg_int(q, off)));
	TRY(r, pg_q(q, "cannot redrive", "INSERT INTO history (grp, off, ts, "
	    "n, attempt, event, host, pid) SELECT grp, off, $3, $6, attempt, "
	    "'redriven', $4, $5 FROM delivery WHERE grp = $1 AND state = 2 AND "
	    "($2 = 0 OR off = $2)", 6, pg_int(q, grp), pg_int(q, off),
	    pg_int(q, pg_now()), mq_hostname(), pg_int(q, getpid()),
	    pg_int(q, mq_history_n())));
	PQclear(r);
	TRY(r, pg_q(q, "cannot redrive", "UPDATE delivery SET state = 0, "
	    "due = $3, attempt = 0, expired = 0, reason = NULL, consumer = NULL "
	    "WHERE grp = $1 AND state = 2 AND ($2 = 0 OR off = $2)", 3,
	    pg_int(q, grp), pg_int(q, off), pg_int(q, pg_now())));
	n = strtoll(PQcmdTuples(r), NULL, 10);
	PQclear(r);
	return n;
}

static int
redrive(struct pgq *q, const char *topic, const char *group,
    const int64_t *offs, int *found, int n, int dry, int64_t *count)
{
	struct mq_topic t;
	struct mq_group g;
	int64_t k;
	int i, rc;

	if (dry ? pg_begin_read(q) : pg_begin(q))
		return PG_RETRY;
	if ((rc = pg_need(q, topic, group, &t, &g, 0)) < 0) {
		if (rc != PG_RETRY)
			pg_rollback(q);
		return rc;
	}
	if ((*count = n ? 0 : redrive_one(q, g.id, 0, dry)) < 0)
		return PG_RETRY;
	for (i = 0; i < n; i++) {
		if ((k = redrive_one(q, g.id, offs[i], dry)) < 0)
			return PG_RETRY;
		found[i] = k > 0;
		*count += k;
	}
	if (dry || !*count) {
		pg_rollback(q);
		return 0;
	}
	pg_notify(q, t.id);
	return pg_commit(q);
}

int
pg_redrive(struct mq *mq, const char *topic, const char *group,
    const int64_t *offs, int *found, int n, int dry, int64_t *count)
{
	int rc;

	while ((rc = redrive(PGQ(mq), topic, group, offs, found, n, dry,
	    count)) == PG_RETRY)
		;
	return rc;
}

static int
events(struct pgq *q, int64_t grp, int64_t off, struct mq_trace_group *tg)
{
	struct mq_event *e;
	PGresult *r;
	int i;

	TRY(r, pg_q(q, "cannot read history", "SELECT ts, attempt, event, "
	    "coalesce(host, ''), coalesce(pid, 0), reason FROM events_at("
	    "$1, $2) ORDER BY ts, k, n", 2, pg_int(q, grp),
	    pg_int(q, off)));
	for (i = 0; i < PQntuples(r); i++) {
		tg->ev = mq_array(tg->ev, tg->nev + 1, sizeof *tg->ev);
		e = &tg->ev[tg->nev++];
		e->ts = pg_get(r, i, 0);
		e->attempt = (int)pg_get(r, i, 1);
		e->event = pg_str(r, i, 2);
		e->host = pg_str(r, i, 3);
		e->pid = pg_get(r, i, 4);
		e->reason = pg_str(r, i, 5);
	}
	PQclear(r);
	return 0;
}

static int
trace(struct pgq *q, const char *topic, int64_t off, struct mq_trace *tr)
{
	struct mq_topic t;
	struct mq_trace_group *tg;
	PGresult *r;
	int64_t *ids;
	int i, n, rc;

	if (pg_begin_read(q))
		return PG_RETRY;
	if ((rc = pg_topic_row(q, topic, &t, 0)) <= 0) {
		pg_rollback(q);
		return rc < 0 ? rc : MQ_E_NOTOPIC;
	}
	TRY(r, pg_q(q, "cannot read message", "SELECT off, ts, due, key, body, "
	    "headers FROM msg WHERE topic = $1 AND off = $2", 2, pg_int(q, t.id),
	    pg_int(q, off)));
	if (!PQntuples(r)) {
		PQclear(r);
		pg_rollback(q);
		return MQ_E_NOMSG;
	}
	pg_msg_row(r, 0, 0, &tr->m);
	PQclear(r);
	if (!(r = pg_q(q, "cannot read groups", "SELECT g.id, g.name, g.pos, "
	    "d.state, d.attempt, d.due FROM grp g LEFT JOIN deliveries d ON "
	    "d.grp = g.id AND d.off = $2 WHERE g.topic = $1 ORDER BY g.name",
	    2, pg_int(q, t.id), pg_int(q, off))))
		goto retry;
	n = PQntuples(r);
	tr->g = mq_array(NULL, n, sizeof *tr->g);
	ids = mq_array(NULL, n, sizeof *ids);
	for (i = 0; i < n; i++) {
		ids[i] = pg_get(r, i, 0);
		tg = &tr->g[i];
		memset(tg, 0, sizeof *tg);
		pg_copy(r, i, 1, tg->name, sizeof tg->name);
		if (!pg_null(r, i, 3) && pg_get(r, i, 3) == MQ_SKIP) {
			tg->state = MQ_DONE;	/* cancelled */
		} else if (!pg_null(r, i, 3)) {
			tg->state = (int)pg_get(r, i, 3);
			tg->attempt = (int)pg_get(r, i, 4);
			tg->due = pg_get(r, i, 5);
		} else {
			tg->state = off < pg_get(r, i, 2) ? MQ_DONE : MQ_NOT_YET;
		}
	}
	tr->n = n;
	PQclear(r);
	for (i = 0; i < n; i++)
		if (events(q, ids[i], off, &tr->g[i]) < 0) {
			free(ids);
			goto retry;
		}
	free(ids);
	pg_rollback(q);
	pg_flush(q, NULL);	/* what it shows is durable: see pg_begin */
	return 0;
retry:
	mq_trace_free(tr);
	memset(tr, 0, sizeof *tr);
	return PG_RETRY;
}

int
pg_trace(struct mq *mq, const char *topic, int64_t off, struct mq_trace *tr)
{
	int rc;

	memset(tr, 0, sizeof *tr);
	while ((rc = trace(PGQ(mq), topic, off, tr)) == PG_RETRY)
		;
	return rc;
}

/* listing */

/* A delivery row's state as mq_list says it: see sq_list. */
#define ITEM_STATE "(CASE d.state WHEN 1 THEN CASE WHEN d.due <= $6 THEN 2 " \
	"ELSE 1 END WHEN 2 THEN 4 ELSE CASE WHEN d.attempt > 0 THEN 3 " \
	"ELSE 0 END END)"

static int
list(struct pgq *q, const struct mq_list *l, struct mq_item *out, int max)
{
	struct mq_topic t = { 0 };
	struct mq_group g;
	struct mq_item *it;
	PGresult *r;
	int i, n = 0, rc;

	if (pg_begin_read(q))
		return PG_RETRY;
	if ((rc = pg_topic_row(q, l->topic, &t, 0)) <= 0 ||
	    (rc = pg_group_row(q, t.id, l->group, &g, 0)) <= 0) {
		pg_rollback(q);
		return rc < 0 ? rc : t.id ? MQ_E_NOGROUP : MQ_E_NOTOPIC;
	}
	TRY(r, pg_q(q, "cannot read deliveries", "SELECT d.off, " ITEM_STATE
	    ", d.attempt, d.expired, d.due, d.host, d.pid, coalesce(d.reason, "
	    "(SELECT h.reason FROM history h WHERE h.grp = d.grp AND h.off = "
	    "d.off AND h.reason IS NOT NULL ORDER BY h.ts DESC, h.n DESC "
	    "LIMIT 1)), m.off, m.ts, m.due, m.key, m.body, m.headers FROM "
	    "deliveries d "
	    "LEFT JOIN msg m ON m.topic = $1 AND m.off = d.off WHERE d.grp = "
	    "$2 AND d.off >= $3 AND d.off <= $4 AND ($5::text IS NULL OR "
	    "d.key = $5) AND d.state <> 5 AND ($7::int >> " ITEM_STATE ") & 1 "
	    "= 1 ORDER BY "
	    "d.off LIMIT $8", 8, pg_int(q, t.id), pg_int(q, g.id),
	    pg_int(q, l->from), pg_int(q, l->to), l->key, pg_int(q, l->now),
	    pg_int(q, l->states), pg_int(q, max)));
	for (i = 0; i < PQntuples(r); i++) {
		it = &out[n++];
		memset(it, 0, sizeof *it);
		pg_msg_row(r, i, 8, &it->m);
		it->off = pg_get(r, i, 0);
		it->state = (int)pg_get(r, i, 1);
		it->m.attempt = (int)pg_get(r, i, 2);
		it->expired = (int)pg_get(r, i, 3);
		it->due = pg_get(r, i, 4);
		if (it->state == MQ_I_INFLIGHT || it->state == MQ_I_EXPIRED)
			it->host = pg_str(r, i, 5);
		it->pid = pg_get(r, i, 6);
		it->reason = pg_str(r, i, 7);
	}
	PQclear(r);
	if (l->states & 1 << MQ_I_PENDING) {
		if (!(r = pg_q(q, "cannot read messages", "SELECT off, ts, due, "
		    "key, body, headers FROM msg m WHERE topic = $1 AND off >= "
		    "greatest($3::bigint, $6::bigint) AND off <= $4 AND "
		    "($5::text IS NULL OR key = $5) AND NOT EXISTS (SELECT 1 "
		    "FROM deliveries d WHERE d.grp = $2 AND d.off = m.off) "
		    "ORDER BY off LIMIT $7", 7, pg_int(q, t.id),
		    pg_int(q, g.id), pg_int(q, l->from), pg_int(q, l->to),
		    l->key, pg_int(q, g.pos), pg_int(q, max))))
			goto retry;
		for (i = 0; i < PQntuples(r); i++) {
			it = &out[n++];
			memset(it, 0, sizeof *it);
			pg_msg_row(r, i, 0, &it->m);
			it->off = it->m.off;
			it->state = MQ_I_PENDING;
			it->due = it->m.due;
		}
		PQclear(r);
	}
	pg_rollback(q);
	if (n)
		pg_flush(q, NULL);	/* what it shows is durable */
	return n;
retry:
	while (n > 0)
		mq_item_free(&out[--n]);
	return PG_RETRY;
}

int
pg_list(struct mq *mq, const struct mq_list *l, struct mq_item *out, int max)
{
	int rc;

	while ((rc = list(PGQ(mq), l, out, max)) == PG_RETRY)
		;
	return rc;
}

/* purging: as ../sqlite/log.c, which explains each step; a message in
   flight in a run of lease (lease.sql, at most 1024 long) is held too */

#define UNHELD "NOT EXISTS (SELECT 1 FROM delivery d WHERE d.grp IN " \
	"(SELECT id FROM grp WHERE topic = $1) AND d.off = msg.off AND " \
	"NOT (d.state = 2 AND ($4 = -1 OR $4 = d.grp))) AND NOT EXISTS " \
	"(SELECT 1 FROM lease l WHERE l.grp IN (SELECT id FROM grp WHERE " \
	"topic = $1) AND l.lo <= msg.off AND l.lo > msg.off - 1024 AND " \
	"CASE WHEN l.hi > msg.off THEN get_bit(l.acked, (msg.off - " \
	"l.lo)::int) = 0 ELSE false END)"

static int
range_size(struct pgq *q, int64_t topic, int64_t lo, int64_t hi, int settled,
    int64_t skip_dead, int64_t *n, int64_t *bytes)
{
	PGresult *r;

	TRY(r, settled ?
	    pg_q(q, "cannot count messages", "SELECT count(*), "
	    "coalesce(sum(length(body)), 0) FROM msg WHERE topic = $1 AND "
	    "off >= $2 AND off < $3 AND " UNHELD, 4, pg_int(q, topic),
	    pg_int(q, lo), pg_int(q, hi), pg_int(q, skip_dead)) :
	    pg_q(q, "cannot count messages", "SELECT count(*), "
	    "coalesce(sum(length(body)), 0) FROM msg WHERE topic = $1 AND "
	    "off >= $2 AND off < $3", 3, pg_int(q, topic), pg_int(q, lo),
	    pg_int(q, hi)));
	*n = pg_get(r, 0, 0);
	*bytes = pg_get(r, 0, 1);
	PQclear(r);
	return 0;
}

/*
 * Every offset below this has been handed out to every group (0: none).
 * With lock, the group rows stay locked to commit.
 */
static int64_t
handed_out(struct pgq *q, int64_t topic, int lock)
{
	return one(q, lock ? pg_q(q, "cannot read groups", "SELECT "
	    "coalesce(min(pos), 0) FROM (SELECT pos FROM grp WHERE topic = $1 "
	    "ORDER BY id FOR UPDATE) g", 1, pg_int(q, topic)) :
	    pg_q(q, "cannot read groups", "SELECT coalesce(min(pos), 0) FROM "
	    "grp WHERE topic = $1", 1, pg_int(q, topic)));
}

/*
 * The acks of runs of lease (lease.sql) of the messages from lo to hi - 1
 * that are gone: their bits cleared, and a row without any goes.
 */
static int
acks_gone(struct pgq *q, int64_t topic, int64_t lo, int64_t hi)
{
	return run3(q, "cannot delete history", "UPDATE acks a SET offs = "
	    "(SELECT string_agg(CASE WHEN a.lo + i >= $2 AND a.lo + i < $3 "
	    "AND NOT EXISTS (SELECT 1 FROM msg WHERE topic = $1 AND off = "
	    "a.lo + i) THEN '0' ELSE get_bit(a.offs, i)::text END, '' ORDER "
	    "BY i) FROM generate_series(0, length(a.offs) - 1) AS i)::varbit "
	    "WHERE grp IN (SELECT id FROM grp WHERE topic = $1) AND lo < $3 "
	    "AND lo > $2 - 1024 AND lo + length(offs) > $2", topic, lo, hi) <
	    0 || run3(q, "cannot delete history", "DELETE FROM acks WHERE grp "
	    "IN (SELECT id FROM grp WHERE topic = $1) AND lo < $3 AND lo > "
	    "$2::bigint - 1024 AND position(B'1' IN offs) = 0", topic, lo, hi) < 0 ?
	    PG_RETRY : 0;
}

static int
purge_range(struct pgq *q, int64_t topic, int64_t lo, int64_t hi,
    int settled, int64_t *n, int64_t *bytes)
{
	PGresult *r;

	if (range_size(q, topic, lo, hi, settled, 0, n, bytes) < 0)
		return PG_RETRY;
	if (*n == 0 && settled)
		return 0;
	if (settled) {
		TRY(r, pg_q(q, "cannot delete messages", "DELETE FROM msg WHERE "
		    "topic = $1 AND off >= $2 AND off < $3 AND " UNHELD, 4,
		    pg_int(q, topic), pg_int(q, lo), pg_int(q, hi),
		    pg_int(q, 0)));
		PQclear(r);
		if (run3(q, "cannot update topic", "UPDATE topic SET "
		    "gap_below = $3 WHERE id = $1 AND gap_below < $3 AND "
		    "$2::bigint IS NOT NULL", topic, lo, hi) < 0 ||
		    run3(q, "cannot delete history", "DELETE FROM history WHERE "
		    "grp IN (SELECT id FROM grp WHERE topic = $1) AND off >= $2 "
		    "AND off < $3 AND NOT EXISTS (SELECT 1 FROM msg WHERE "
		    "topic = $1 AND msg.off = history.off)", topic, lo, hi) < 0 ||
		    acks_gone(q, topic, lo, hi) < 0)
			return PG_RETRY;
	} else if (run3(q, "cannot delete messages", "DELETE FROM msg WHERE "
	    "topic = $1 AND off >= $2 AND off < $3", topic, lo, hi) < 0 ||
	    run3(q, "cannot delete deliveries", "SELECT unlease(id, "
	    "$2::bigint, $3::bigint, 9223372036854775807, false) FROM grp "
	    "WHERE topic = $1", topic, lo, hi) < 0 ||
	    run3(q, "cannot delete deliveries", "DELETE FROM delivery WHERE "
	    "grp IN (SELECT id FROM grp WHERE topic = $1) AND off >= $2 AND "
	    "off < $3", topic, lo, hi) < 0 ||
	    run3(q, "cannot delete history", "DELETE FROM history WHERE "
	    "grp IN (SELECT id FROM grp WHERE topic = $1) AND off >= $2 AND "
	    "off < $3", topic, lo, hi) < 0 ||
	    acks_gone(q, topic, lo, hi) < 0 ||
	    run3(q, "cannot update groups", "UPDATE grp SET pos = least($3, "
	    "(SELECT next_off FROM topic WHERE id = $1)) WHERE topic = $1 AND "
	    "pos < $3 AND $2::bigint IS NOT NULL", topic, lo, hi) < 0)
		return PG_RETRY;
	return run3(q, "cannot update topic", "UPDATE topic SET msgs = "
	    "greatest(msgs - $2, 0), bytes = greatest(bytes - $3, 0) "
	    "WHERE id = $1", topic, *n, *bytes);
}

static int64_t
drop_dead(struct pgq *q, int64_t topic, int64_t grp, int dry)
{
	PGresult *r;
	int64_t n;

	if (dry)
		return one(q, pg_q(q, "cannot count dead letters", "SELECT "
		    "count(*) FROM delivery WHERE state = 2 AND CASE WHEN $2 > 0 "
		    "THEN grp = $2 ELSE grp IN (SELECT id FROM grp WHERE "
		    "topic = $1) END", 2, pg_int(q, topic), pg_int(q, grp)));
	TRY(r, pg_q(q, "cannot drop dead letters", "DELETE FROM delivery WHERE "
	    "state = 2 AND CASE WHEN $2 > 0 THEN grp = $2 ELSE grp IN (SELECT "
	    "id FROM grp WHERE topic = $1) END", 2, pg_int(q, topic),
	    pg_int(q, grp)));
	n = strtoll(PQcmdTuples(r), NULL, 10);
	PQclear(r);
	return n;
}

static int
dedup_expire(struct pgq *q, const struct mq_topic *t, int64_t now, int dry)
{
	PGresult *r;

	if (dry)
		return 0;
	TRY(r, pg_q(q, "cannot expire dedup ids", "DELETE FROM dedup WHERE "
	    "topic = $1 AND ts <= $2", 2, pg_int(q, t->id),
	    pg_int(q, now - t->dedup_window)));
	PQclear(r);
	/* and the business ids its groups acked, past their window */
	TRY(r, pg_q(q, "cannot expire business ids", "DELETE FROM consumed c "
	    "USING grp g WHERE g.topic = $1 AND c.grp = g.id AND "
	    "c.ts <= $2 - g.idem_window", 2, pg_int(q, t->id),
	    pg_int(q, now)));
	PQclear(r);
	return 0;
}

static int
plan(struct pgq *q, const char *topic, struct mq_purge *p)
{
	struct mq_topic t;
	struct mq_group g;
	int64_t now = pg_now(), settled, n, bytes, held, skip = 0, mid;
	int fixed = p->older >= 0 || p->before >= 0, may, rc;

	if (p->dry ? pg_begin_read(q) : pg_begin(q))
		return PG_RETRY;
	if ((rc = pg_need(q, topic, p->dead ? p->group : NULL, &t, &g, 0)) < 0) {
		if (rc != PG_RETRY)
			pg_rollback(q);
		return rc;
	}
	if (p->dead) {
		if ((p->dropped = drop_dead(q, t.id, p->group ? g.id : 0,
		    p->dry)) < 0)
			return PG_RETRY;
		skip = p->dry ? (p->group ? g.id : -1) : 0;
	}
	if (!fixed && dedup_expire(q, &t, now, p->dry) < 0)
		return PG_RETRY;
	if ((p->lo = pg_first_off(q, t.id)) < 0 ||
	    (settled = handed_out(q, t.id, 0)) < 0)
		return PG_RETRY;
	p->all = 0;
	if (p->before >= 0)
		p->all = p->before;
	else if (p->older >= 0)
		p->all = offset_at(q, &t, now - p->older);
	else if (t.retention >= 0)
		p->all = offset_at(q, &t, now - t.retention);
	if (p->all == PG_RETRY)
		return PG_RETRY;
	if (p->all > t.next_off)
		p->all = t.next_off;
	p->line = INT64_MAX;
	may = p->force || settled == 0;
	if (fixed) {
		settled = p->all < settled ? p->all : settled;
		if (range_size(q, t.id, p->lo, p->all, 0, 0, &n, &bytes) < 0 ||
		    range_size(q, t.id, p->lo, settled, 1, skip, &held,
		    &bytes) < 0)
			return PG_RETRY;
		if ((p->held = n - held) > 0 && !may) {
			pg_rollback(q);
			return MQ_E_HELD;
		}
		p->line = p->all;
		if (!may)
			p->all = 0;
	}
	p->planned = 1;
	if (p->dry) {
		if (p->lo) {
			mid = p->all > p->lo ? p->all : p->lo;
			if (range_size(q, t.id, p->lo, mid, 0, 0, &p->deleted,
			    &p->bytes) < 0 ||
			    range_size(q, t.id, mid, settled, 1, skip, &n,
			    &bytes) < 0) {
				p->planned = 0;
				return PG_RETRY;
			}
			p->deleted += n;
			p->bytes += bytes;
		}
		pg_rollback(q);
		return 0;
	}
	if (pg_commit(q)) {
		p->planned = 0;
		return PG_RETRY;
	}
	return p->lo ? 1 : 0;
}

/* One chunk: 1 if there may be more, 0 when done. */
static int
chunk(struct pgq *q, const char *topic, struct mq_purge *p)
{
	struct mq_topic t;
	int64_t settled, hi, n, bytes;
	int rc;

	if (pg_begin(q))
		return PG_RETRY;
	if ((rc = pg_topic_row(q, topic, &t, 0)) <= 0) {
		if (rc == 0)
			pg_rollback(q);
		return rc;
	}
	hi = p->lo + CHUNK;
	if ((settled = handed_out(q, t.id, 1)) < 0)
		return PG_RETRY;
	if (p->lo < p->all) {
		hi = hi < p->all ? hi : p->all;
		rc = purge_range(q, t.id, p->lo, hi, 0, &n, &bytes);
	} else {
		if (settled > p->line)
			settled = p->line;
		hi = hi < settled ? hi : settled;
		if (hi <= p->lo) {
			pg_rollback(q);
			return 0;
		}
		rc = purge_range(q, t.id, p->lo, hi, 1, &n, &bytes);
	}
	if (rc < 0 || pg_commit(q))
		return PG_RETRY;
	p->deleted += n;
	p->bytes += bytes;
	p->lo = hi;
	return 1;
}

int
pg_purge(struct mq *mq, const char *topic, struct mq_purge *p)
{
	int rc;

	do {
		rc = p->planned ? chunk(PGQ(mq), topic, p) :
		    plan(PGQ(mq), topic, p);
	} while (rc == PG_RETRY);
	return rc;
}

/*
 * Marks the space of deleted rows reusable and refreshes the planner's
 * statistics (a plain VACUUM: it takes no lock that stops senders or
 * receivers, and gives no space back to the file system; see mq-purge(1)).
 */
void
pg_vacuum(struct mq *mq)
{
	struct pgq *q = PGQ(mq);
	PGresult *r;

	r = pg_q(q, "cannot vacuum", "VACUUM (ANALYZE) msg, delivery, lease, "
	    "history, acks, dedup, grp, topic, consumer", 0);
	if (r)
		PQclear(r);
}
