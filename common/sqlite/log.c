/*
 * log.c: the log as a log: reading a range, finding an offset by time,
 * moving a group's position, redriving dead letters, tracing a message,
 * purging, vacuuming.
 *
 * Invariants:
 * - Message times never decrease along offsets (deliver.c), so a time maps
 *   to an offset by binary search, without an index on time.
 * - Offsets below topic.gap_below may have holes (a purge of settled
 *   messages); from there on every offset up to next_off is stored.
 * - A purge deletes in short chunks, each its own transaction, and reads
 *   the groups' positions again under each chunk's lock, so a group
 *   rewound meanwhile is respected.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sq.h"

#define CHUNK	2000	/* offsets a purge transaction covers */

int
sq_read(struct mq *mq, const struct mq_read *rd, struct mq_msg *out, int max)
{
	struct sq *q = SQ(mq);
	struct mq_topic t;
	sqlite3_stmt *s;
	int n = 0;

	sq_begin_read(q);
	if (!sq_topic_row(q, rd->topic, &t)) {
		sq_rollback(q);
		return MQ_E_NOTOPIC;
	}
	if (rd->key)
		s = sq_stmt(q, "SELECT off, ts, due, key, body, headers FROM msg "
		    "WHERE topic = ?1 AND key = ?4 AND off >= ?2 AND off <= ?3 "
		    "ORDER BY off LIMIT ?5");
	else
		s = sq_stmt(q, "SELECT off, ts, due, key, body, headers FROM msg "
		    "WHERE topic = ?1 AND off >= ?2 AND off <= ?3 ORDER BY off "
		    "LIMIT ?5");
	sqlite3_bind_int64(s, 1, t.id);
	sqlite3_bind_int64(s, 2, rd->from);
	sqlite3_bind_int64(s, 3, rd->to);
	if (rd->key)
		sqlite3_bind_text(s, 4, rd->key, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 5, max);
	while (n < max && sq_step(q, s, "cannot read messages") == SQLITE_ROW)
		sq_msg_row(s, &out[n++]);
	sqlite3_reset(s);
	sq_commit(q, SQ_SEEN);	/* what is shown is on disk */
	return n;
}

/* The first stored offset >= off, with its time; 0 if none. */
static int64_t
next_stored(struct sq *q, int64_t topic, int64_t off, int64_t *ts)
{
	sqlite3_stmt *s = sq_stmt(q, "SELECT off, ts FROM msg WHERE topic = ? "
	    "AND off >= ? ORDER BY off LIMIT 1");
	int64_t found = 0;

	sqlite3_bind_int64(s, 1, topic);
	sqlite3_bind_int64(s, 2, off);
	if (sq_step(q, s, "cannot read messages") == SQLITE_ROW) {
		found = sqlite3_column_int64(s, 0);
		*ts = sqlite3_column_int64(s, 1);
	}
	sqlite3_reset(s);
	return found;
}

/* The first offset whose time is >= ts (next_off if none); binary search. */
static int64_t
offset_at(struct sq *q, const struct mq_topic *t, int64_t ts)
{
	int64_t lo = 1, hi = t->next_off, mid, off, mts;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		off = next_stored(q, t->id, mid, &mts);
		if (!off || mts >= ts)
			hi = mid;
		else
			lo = off + 1;
	}
	return lo;
}

int64_t
sq_offset_at(struct mq *mq, const char *topic, int64_t ts)
{
	struct sq *q = SQ(mq);
	struct mq_topic t;
	int64_t off = MQ_E_NOTOPIC;

	sq_begin_read(q);
	if (sq_topic_row(q, topic, &t))
		off = offset_at(q, &t, ts);
	sq_rollback(q);
	return off;
}

/*
 * Moving a group: deliveries at or after the new position (all states)
 * are dropped when rewinding; those before it that are not dead letters
 * when skipping ahead.  With dry, only counts.
 */
static int64_t
cancel(struct sq *q, int64_t grp, int64_t off, int below, int dry)
{
	static const char *sql[2][2] = {
		{ "DELETE FROM delivery WHERE grp = ? AND off >= ?",
		  "SELECT count(*) FROM delivery WHERE grp = ? AND off >= ? "
		  "AND state <> 5" },
		{ "DELETE FROM delivery WHERE grp = ? AND off < ? AND state < 2",
		  "SELECT count(*) FROM delivery WHERE grp = ? AND off < ? "
		  "AND state < 2" },
	};
	sqlite3_stmt *s;
	int64_t n = 0;

	if (!dry) {	/* cancelled ones (mark.c) were settled: not counted */
		s = sq_stmt(q, "DELETE FROM delivery WHERE grp = ?1 AND "
		    "state = 5 AND (off < ?2) = ?3");
		sqlite3_bind_int64(s, 1, grp);
		sqlite3_bind_int64(s, 2, off);
		sqlite3_bind_int(s, 3, !!below);
		sq_step(q, s, "cannot cancel deliveries");
	}
	s = sq_stmt(q, sql[!!below][!!dry]);
	sqlite3_bind_int64(s, 1, grp);
	sqlite3_bind_int64(s, 2, off);
	if (sq_step(q, s, "cannot cancel deliveries") == SQLITE_ROW && dry)
		n = sqlite3_column_int64(s, 0);
	else if (!dry)
		n = sqlite3_changes(q->db);
	sqlite3_reset(s);
	return n;
}

int
sq_move(struct mq *mq, const char *topic, const char *group,
    const struct mq_move *m, struct mq_moved *out)
{
	struct sq *q = SQ(mq);
	struct mq_topic t;
	struct mq_group g;
	sqlite3_stmt *s;
	int64_t pos, first;
	int rc;

	memset(out, 0, sizeof *out);
	if (m->dry)
		sq_begin_read(q);
	else
		sq_begin(q);
	if ((rc = sq_need(q, topic, group, &t, &g)) < 0) {
		sq_rollback(q);
		return rc;
	}
	pos = m->to == MQ_TO_TIME ? offset_at(q, &t, m->arg) : 0;
	first = sq_first_off(q, t.id);
	pos = mq_rule_move(m, pos, g.pos, first, t.next_off);
	out->from = g.pos;
	out->to = pos;
	if (pos == g.pos && m->to == MQ_TO_SHIFT) {
		out->unchanged = 1;
		sq_rollback(q);
		return 0;
	}
	if (pos < g.pos) {
		out->again = sq_count_range(q, t.id, pos, g.pos);
		out->dropped = cancel(q, g.id, pos, 0, m->dry);
	} else {
		out->skipped = sq_count_range(q, t.id, g.pos, pos);
		out->dropped = cancel(q, g.id, pos, 1, m->dry);
	}
	if (m->dry) {
		sq_rollback(q);
		return 0;
	}
	s = sq_stmt(q, "UPDATE grp SET pos = ?2 WHERE id = ?1");
	sqlite3_bind_int64(s, 1, g.id);
	sqlite3_bind_int64(s, 2, pos);
	sq_step(q, s, "cannot move group");
	sq_touch(q, t.id);
	sq_commit(q, SQ_DURABLE);
	return 0;
}

/*
 * Dead letters of a group (all, or those at offs) go back to waiting,
 * due now, with their attempts reset.  found[i]: whether offs[i] was one.
 */
static int64_t
redrive_one(struct sq *q, int64_t grp, int64_t off, int dry)
{
	sqlite3_stmt *s;

	if (dry)
		return sq_int(q, "SELECT count(*) FROM delivery WHERE grp = ?1 "
		    "AND state = 2 AND (?2 = 0 OR off = ?2)", 0, 2, grp, off);
	s = sq_stmt(q, "INSERT INTO history (grp, off, ts, n, attempt, event, "
	    "host, pid) SELECT grp, off, ?3, ?6, attempt, 'redriven', ?4, ?5 "
	    "FROM delivery WHERE grp = ?1 AND state = 2 AND (?2 = 0 OR off = ?2)");
	sqlite3_bind_int64(s, 1, grp);
	sqlite3_bind_int64(s, 2, off);
	sqlite3_bind_int64(s, 3, mq_now());
	sqlite3_bind_text(s, 4, mq_hostname(), -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 5, getpid());
	sqlite3_bind_int64(s, 6, mq_history_n());	/* one row per (grp, off) */
	sq_step(q, s, "cannot redrive");
	s = sq_stmt(q, "UPDATE delivery SET state = 0, due = ?3, attempt = 0, "
	    "expired = 0, reason = NULL, consumer = NULL "
	    "WHERE grp = ?1 AND state = 2 AND (?2 = 0 OR off = ?2)");
	sqlite3_bind_int64(s, 1, grp);
	sqlite3_bind_int64(s, 2, off);
	sqlite3_bind_int64(s, 3, mq_now());
	sq_step(q, s, "cannot redrive");
	return sqlite3_changes(q->db);
}

int
sq_redrive(struct mq *mq, const char *topic, const char *group,
    const int64_t *offs, int *found, int n, int dry, int64_t *count)
{
	struct sq *q = SQ(mq);
	struct mq_topic t;
	struct mq_group g;
	int64_t k;
	int i, rc;

	if (dry)
		sq_begin_read(q);
	else
		sq_begin(q);
	if ((rc = sq_need(q, topic, group, &t, &g)) < 0) {
		sq_rollback(q);
		return rc;
	}
	*count = n ? 0 : redrive_one(q, g.id, 0, dry);
	for (i = 0; i < n; i++) {
		k = redrive_one(q, g.id, offs[i], dry);
		found[i] = k > 0;
		*count += k;
	}
	if (dry || !*count) {
		sq_rollback(q);
		return 0;
	}
	sq_touch(q, t.id);
	sq_commit(q, SQ_DURABLE);
	return 0;
}

static void
events(struct sq *q, int64_t grp, int64_t off, struct mq_trace_group *tg)
{
	sqlite3_stmt *s = sq_stmt(q, "SELECT ts, attempt, event, "
	    "coalesce(host, ''), coalesce(pid, 0), reason FROM events "
	    "WHERE grp = ? AND off = ? ORDER BY ts, k, n");
	struct mq_event *e;

	sqlite3_bind_int64(s, 1, grp);
	sqlite3_bind_int64(s, 2, off);
	while (sq_step(q, s, "cannot read history") == SQLITE_ROW) {
		tg->ev = mq_array(tg->ev, tg->nev + 1, sizeof *tg->ev);
		e = &tg->ev[tg->nev++];
		e->ts = sqlite3_column_int64(s, 0);
		e->attempt = sqlite3_column_int(s, 1);
		e->event = sq_text(s, 2);
		e->host = sq_text(s, 3);
		e->pid = sqlite3_column_int64(s, 4);
		e->reason = sq_text(s, 5);
	}
}

int
sq_trace(struct mq *mq, const char *topic, int64_t off, struct mq_trace *tr)
{
	struct sq *q = SQ(mq);
	struct mq_topic t;
	struct mq_trace_group *tg;
	sqlite3_stmt *s;
	int64_t *ids = NULL;
	int found, i;

	sq_begin_read(q);
	if (!sq_topic_row(q, topic, &t)) {
		sq_rollback(q);
		return MQ_E_NOTOPIC;
	}
	s = sq_stmt(q, "SELECT off, ts, due, key, body, headers FROM msg "
	    "WHERE topic = ? AND off = ?");
	sqlite3_bind_int64(s, 1, t.id);
	sqlite3_bind_int64(s, 2, off);
	if ((found = sq_step(q, s, "cannot read message") == SQLITE_ROW))
		sq_msg_row(s, &tr->m);
	sqlite3_reset(s);
	if (!found) {
		sq_rollback(q);
		return MQ_E_NOMSG;
	}
	s = sq_stmt(q, "SELECT g.id, g.name, g.pos, d.state, d.attempt, d.due "
	    "FROM grp g LEFT JOIN delivery d ON d.grp = g.id AND d.off = ?2 "
	    "WHERE g.topic = ?1 ORDER BY g.name");
	sqlite3_bind_int64(s, 1, t.id);
	sqlite3_bind_int64(s, 2, off);
	while (sq_step(q, s, "cannot read groups") == SQLITE_ROW) {
		tr->g = mq_array(tr->g, tr->n + 1, sizeof *tr->g);
		ids = mq_array(ids, tr->n + 1, sizeof *ids);
		ids[tr->n] = sqlite3_column_int64(s, 0);
		tg = &tr->g[tr->n++];
		memset(tg, 0, sizeof *tg);
		sq_copy(s, 1, tg->name, sizeof tg->name);
		if (sqlite3_column_type(s, 3) != SQLITE_NULL &&
		    sqlite3_column_int(s, 3) == MQ_SKIP) {
			tg->state = MQ_DONE;	/* cancelled */
		} else if (sqlite3_column_type(s, 3) != SQLITE_NULL) {
			tg->state = sqlite3_column_int(s, 3);
			tg->attempt = sqlite3_column_int(s, 4);
			tg->due = sqlite3_column_int64(s, 5);
		} else {
			tg->state = off < sqlite3_column_int64(s, 2) ?
			    MQ_DONE : MQ_NOT_YET;
		}
	}
	for (i = 0; i < tr->n; i++)
		events(q, ids[i], off, &tr->g[i]);
	free(ids);
	sq_commit(q, SQ_SEEN);
	return 0;
}

/* listing */

/*
 * The state of a delivery row as mq_list says it (MQ_I_*), and the last
 * reason it was given: its own (dead), or its history's latest.
 */
#define ITEM_STATE "CASE d.state WHEN 1 THEN CASE WHEN d.due <= ?6 THEN 2 " \
	"ELSE 1 END WHEN 2 THEN 4 ELSE CASE WHEN d.attempt > 0 THEN 3 " \
	"ELSE 0 END END"

/* ?1 topic, ?2 group, ?3 and ?4 the offsets, ?5 the key or NULL */
static void
bind_list(sqlite3_stmt *s, int64_t topic, int64_t grp, const struct mq_list *l)
{
	sqlite3_bind_int64(s, 1, topic);
	sqlite3_bind_int64(s, 2, grp);
	sqlite3_bind_int64(s, 3, l->from);
	sqlite3_bind_int64(s, 4, l->to);
	if (l->key)
		sqlite3_bind_text(s, 5, l->key, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(s, 5);
}

int
sq_list(struct mq *mq, const struct mq_list *l, struct mq_item *out, int max)
{
	struct sq *q = SQ(mq);
	struct mq_topic t = { 0 };
	struct mq_group g;
	struct mq_item *it;
	sqlite3_stmt *s;
	int n = 0;

	sq_begin_read(q);
	if (!sq_topic_row(q, l->topic, &t) ||
	    !sq_group_row(q, t.id, l->group, &g)) {
		sq_rollback(q);
		return t.id ? MQ_E_NOGROUP : MQ_E_NOTOPIC;
	}
	/* what the group handed out and has not settled */
	s = sq_stmt(q, "SELECT d.off, " ITEM_STATE ", d.attempt, d.expired, "
	    "d.due, d.host, d.pid, coalesce(d.reason, (SELECT h.reason FROM "
	    "history h WHERE h.grp = d.grp AND h.off = d.off AND h.reason IS "
	    "NOT NULL ORDER BY h.ts DESC, h.n DESC LIMIT 1)), m.off, m.ts, "
	    "m.due, m.key, m.body, m.headers FROM delivery d LEFT JOIN msg m ON "
	    "m.topic = ?1 AND m.off = d.off WHERE d.grp = ?2 AND d.off >= ?3 "
	    "AND d.off <= ?4 AND (?5 IS NULL OR d.key = ?5) AND d.state <> 5 AND "
	    "(?7 >> " ITEM_STATE ") & 1 ORDER BY d.off LIMIT ?8");
	bind_list(s, t.id, g.id, l);
	sqlite3_bind_int64(s, 6, l->now);
	sqlite3_bind_int(s, 7, l->states);
	sqlite3_bind_int(s, 8, max);
	while (sq_step(q, s, "cannot read deliveries") == SQLITE_ROW) {
		it = &out[n++];
		memset(it, 0, sizeof *it);
		sq_msg_at(s, 8, &it->m);
		it->off = sqlite3_column_int64(s, 0);
		it->state = sqlite3_column_int(s, 1);
		it->m.attempt = sqlite3_column_int(s, 2);
		it->expired = sqlite3_column_int(s, 3);
		it->due = sqlite3_column_int64(s, 4);
		it->host = it->state == MQ_I_INFLIGHT ||
		    it->state == MQ_I_EXPIRED ? sq_text(s, 5) : NULL;
		it->pid = sqlite3_column_int64(s, 6);
		it->reason = sq_text(s, 7);
	}
	sqlite3_reset(s);
	/* and the log from the group's position on, but for those */
	if (l->states & 1 << MQ_I_PENDING) {
		s = sq_stmt(q, "SELECT off, ts, due, key, body, headers FROM msg m "
		    "WHERE topic = ?1 AND off >= max(?3, ?6) AND off <= ?4 AND "
		    "(?5 IS NULL OR key = ?5) AND NOT EXISTS (SELECT 1 FROM "
		    "delivery d WHERE d.grp = ?2 AND d.off = m.off) ORDER BY "
		    "off LIMIT ?7");
		bind_list(s, t.id, g.id, l);
		sqlite3_bind_int64(s, 6, g.pos);
		sqlite3_bind_int(s, 7, max);
		while (sq_step(q, s, "cannot read messages") == SQLITE_ROW) {
			it = &out[n++];
			memset(it, 0, sizeof *it);
			sq_msg_at(s, 0, &it->m);
			it->off = it->m.off;
			it->state = MQ_I_PENDING;
			it->due = it->m.due;
		}
		sqlite3_reset(s);
	}
	sq_commit(q, SQ_SEEN);
	return n;
}

/* purging */

/*
 * "No group holds this message": no delivery row for it in any group of
 * the topic, dead letters of group ?4 (-1: of every group) not counted.
 */
#define UNHELD "NOT EXISTS (SELECT 1 FROM delivery d WHERE d.grp IN " \
	"(SELECT id FROM grp WHERE topic = ?1) AND d.off = msg.off AND " \
	"NOT (d.state = 2 AND (?4 = -1 OR ?4 = d.grp)))"

/*
 * Count and body bytes of the messages with lo <= off < hi; with settled,
 * only those no group holds (UNHELD, skip_dead as its ?4).
 */
static void
range_size(struct sq *q, int64_t topic, int64_t lo, int64_t hi, int settled,
    int64_t skip_dead, int64_t *n, int64_t *bytes)
{
	sqlite3_stmt *s = settled ?
	    sq_stmt(q, "SELECT count(*), coalesce(sum(length(body)), 0) "
	    "FROM msg WHERE topic = ?1 AND off >= ?2 AND off < ?3 AND " UNHELD) :
	    sq_stmt(q, "SELECT count(*), coalesce(sum(length(body)), 0) "
	    "FROM msg WHERE topic = ?1 AND off >= ?2 AND off < ?3");

	*n = *bytes = 0;
	sqlite3_bind_int64(s, 1, topic);
	sqlite3_bind_int64(s, 2, lo);
	sqlite3_bind_int64(s, 3, hi);
	if (settled)
		sqlite3_bind_int64(s, 4, skip_dead);
	if (sq_step(q, s, "cannot count messages") == SQLITE_ROW) {
		*n = sqlite3_column_int64(s, 0);
		*bytes = sqlite3_column_int64(s, 1);
	}
	sqlite3_reset(s);
}

static void
bind3(sqlite3_stmt *s, int64_t a, int64_t b, int64_t c)
{
	sqlite3_bind_int64(s, 1, a);
	sqlite3_bind_int64(s, 2, b);
	sqlite3_bind_int64(s, 3, c);
}

/* Every offset below this has been handed out to every group (0: none). */
static int64_t
handed_out(struct sq *q, int64_t topic)
{
	return sq_int(q, "SELECT min(pos) FROM grp WHERE topic = ?", 0, 1,
	    topic);
}

/*
 * Deletes the messages with lo <= off < hi and their history, and keeps
 * the topic's counters.  With settled, only those no group holds;
 * otherwise all of them, with their deliveries of every state, and groups
 * still before hi move up to it (never past the end).
 */
static void
purge_range(struct sq *q, int64_t topic, int64_t lo, int64_t hi, int settled,
    int64_t *n, int64_t *bytes)
{
	sqlite3_stmt *s;

	range_size(q, topic, lo, hi, settled, 0, n, bytes);
	if (*n == 0 && settled)
		return;
	if (settled) {
		s = sq_stmt(q, "DELETE FROM msg WHERE topic = ?1 AND off >= ?2 "
		    "AND off < ?3 AND " UNHELD);
		bind3(s, topic, lo, hi);
		sqlite3_bind_int64(s, 4, 0);
		sq_step(q, s, "cannot delete messages");
		s = sq_stmt(q, "UPDATE topic SET gap_below = ?3 "
		    "WHERE id = ?1 AND gap_below < ?3");
		bind3(s, topic, lo, hi);
		sq_step(q, s, "cannot update topic");
		s = sq_stmt(q, "DELETE FROM history WHERE grp IN (SELECT id "
		    "FROM grp WHERE topic = ?1) AND off >= ?2 AND off < ?3 AND "
		    "NOT EXISTS (SELECT 1 FROM msg WHERE topic = ?1 AND "
		    "msg.off = history.off)");
		bind3(s, topic, lo, hi);
		sq_step(q, s, "cannot delete history");
	} else {
		s = sq_stmt(q, "DELETE FROM msg WHERE topic = ?1 AND off >= ?2 "
		    "AND off < ?3");
		bind3(s, topic, lo, hi);
		sq_step(q, s, "cannot delete messages");
		s = sq_stmt(q, "DELETE FROM delivery WHERE grp IN (SELECT id "
		    "FROM grp WHERE topic = ?1) AND off >= ?2 AND off < ?3");
		bind3(s, topic, lo, hi);
		sq_step(q, s, "cannot delete deliveries");
		s = sq_stmt(q, "DELETE FROM history WHERE grp IN (SELECT id "
		    "FROM grp WHERE topic = ?1) AND off >= ?2 AND off < ?3");
		bind3(s, topic, lo, hi);
		sq_step(q, s, "cannot delete history");
		s = sq_stmt(q, "UPDATE grp SET pos = min(?3, (SELECT next_off "
		    "FROM topic WHERE id = ?1)) WHERE topic = ?1 AND pos < ?3");
		bind3(s, topic, lo, hi);
		sq_step(q, s, "cannot update groups");
	}
	s = sq_stmt(q, "UPDATE topic SET msgs = max(msgs - ?2, 0), "
	    "bytes = max(bytes - ?3, 0) WHERE id = ?1");
	bind3(s, topic, *n, *bytes);
	sq_step(q, s, "cannot update topic");
}

static int64_t
drop_dead(struct sq *q, int64_t topic, int64_t grp, int dry)
{
	sqlite3_stmt *s;
	int64_t n;

	if (dry)
		return grp ? sq_int(q, "SELECT count(*) FROM delivery "
		    "WHERE grp = ? AND state = 2", 0, 1, grp) :
		    sq_int(q, "SELECT count(*) FROM delivery WHERE grp IN "
		    "(SELECT id FROM grp WHERE topic = ?) AND state = 2", 0, 1,
		    topic);
	s = grp ? sq_stmt(q, "DELETE FROM delivery WHERE grp = ? AND state = 2") :
	    sq_stmt(q, "DELETE FROM delivery WHERE grp IN (SELECT id FROM grp "
	    "WHERE topic = ?) AND state = 2");
	sqlite3_bind_int64(s, 1, grp ? grp : topic);
	sq_step(q, s, "cannot drop dead letters");
	n = sqlite3_changes(q->db);
	return n;
}

static int64_t
dedup_expire(struct sq *q, const struct mq_topic *t, int64_t now, int dry)
{
	sqlite3_stmt *s;
	int64_t n;

	if (dry)
		return sq_int(q, "SELECT count(*) FROM dedup WHERE topic = ? AND "
		    "ts <= ?", 0, 2, t->id, now - t->dedup_window);
	s = sq_stmt(q, "DELETE FROM dedup WHERE topic = ? AND ts <= ?");
	sqlite3_bind_int64(s, 1, t->id);
	sqlite3_bind_int64(s, 2, now - t->dedup_window);
	sq_step(q, s, "cannot expire dedup ids");
	n = sqlite3_changes(q->db);
	/* and the business ids its groups acked, past their window */
	s = sq_stmt(q, "DELETE FROM consumed WHERE grp IN (SELECT id FROM grp "
	    "WHERE topic = ?1) AND ts <= ?2 - (SELECT idem_window FROM grp "
	    "WHERE id = consumed.grp)");
	sqlite3_bind_int64(s, 1, t->id);
	sqlite3_bind_int64(s, 2, now);
	sq_step(q, s, "cannot expire business ids");
	return n;
}

/*
 * The first call: drops dead letters, forgets expired dedup ids and works
 * out the range: below p->all every message goes (retention, or --force);
 * from there to what every group has handed out, the ones no group holds.
 * With --older-than/--before-offset only what is below the line, and all
 * of it or nothing (MQ_E_HELD, p->held) unless forced or no group loses
 * anything.  With dry, counts what would go, changes nothing, and is done.
 */
static int
plan(struct sq *q, const char *topic, struct mq_purge *p)
{
	struct mq_topic t;
	struct mq_group g;
	int64_t now = mq_now(), settled, n, bytes, held, skip = 0, mid;
	int fixed = p->older >= 0 || p->before >= 0, may, rc;

	if (p->dry)
		sq_begin_read(q);
	else
		sq_begin(q);
	if ((rc = sq_need(q, topic, p->dead ? p->group : NULL, &t, &g)) < 0) {
		sq_rollback(q);
		return rc;
	}
	if (p->dead) {
		p->dropped = drop_dead(q, t.id, p->group ? g.id : 0, p->dry);
		skip = p->dry ? (p->group ? g.id : -1) : 0;
	}
	if (!fixed)
		dedup_expire(q, &t, now, p->dry);
	p->lo = sq_first_off(q, t.id);
	settled = handed_out(q, t.id);
	p->all = 0;
	if (p->before >= 0)
		p->all = p->before;
	else if (p->older >= 0)
		p->all = offset_at(q, &t, now - p->older);
	else if (t.retention >= 0)
		p->all = offset_at(q, &t, now - t.retention);
	if (p->all > t.next_off)
		p->all = t.next_off;
	p->line = INT64_MAX;
	may = p->force || settled == 0;	/* no group: nobody loses anything */
	if (fixed) {
		settled = p->all < settled ? p->all : settled;
		range_size(q, t.id, p->lo, p->all, 0, 0, &n, &bytes);
		range_size(q, t.id, p->lo, settled, 1, skip, &held, &bytes);
		if ((p->held = n - held) > 0 && !may) {
			sq_rollback(q);
			return MQ_E_HELD;
		}
		p->line = p->all;
		if (!may)
			p->all = 0;	/* everything below is settled anyway */
	}
	p->planned = 1;
	if (p->dry) {
		if (p->lo) {
			mid = p->all > p->lo ? p->all : p->lo;
			range_size(q, t.id, p->lo, mid, 0, 0, &p->deleted,
			    &p->bytes);
			range_size(q, t.id, mid, settled, 1, skip, &n, &bytes);
			p->deleted += n;
			p->bytes += bytes;
		}
		sq_rollback(q);
		return 0;
	}
	sq_commit(q, SQ_DURABLE);
	return p->lo ? 1 : 0;
}

/* One chunk: 1 if there may be more, 0 when done. */
static int
chunk(struct sq *q, const char *topic, struct mq_purge *p)
{
	struct mq_topic t;
	int64_t settled, hi, n, bytes;

	sq_begin(q);
	if (!sq_topic_row(q, topic, &t)) {
		sq_rollback(q);
		return 0;
	}
	hi = p->lo + CHUNK;
	if (p->lo < p->all) {
		hi = hi < p->all ? hi : p->all;
		purge_range(q, t.id, p->lo, hi, 0, &n, &bytes);
	} else {
		settled = handed_out(q, t.id);
		if (settled > p->line)
			settled = p->line;
		hi = hi < settled ? hi : settled;
		if (hi <= p->lo) {
			sq_rollback(q);
			return 0;
		}
		purge_range(q, t.id, p->lo, hi, 1, &n, &bytes);
	}
	sq_commit(q, SQ_DURABLE);
	p->deleted += n;
	p->bytes += bytes;
	p->lo = hi;
	return 1;
}

int
sq_purge(struct mq *mq, const char *topic, struct mq_purge *p)
{
	if (!p->planned)
		return plan(SQ(mq), topic, p);
	return chunk(SQ(mq), topic, p);
}

/* Reclaims free pages and truncates the WAL.  Outside any transaction. */
void
sq_vacuum(struct mq *mq)
{
	struct sq *q = SQ(mq);

	sq_queue_enter(q);
	if (sqlite3_exec(q->db, "PRAGMA wal_checkpoint(TRUNCATE); VACUUM; "
	    "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL) != SQLITE_OK) {
		sq_queue_leave(q);
		sq_die(q, "cannot vacuum");
	}
	sq_queue_leave(q);
}
