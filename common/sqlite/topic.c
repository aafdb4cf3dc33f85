/*
 * topic.c: topics and groups: finding, creating, configuring, deleting,
 * and their counts for monitors (one consistent snapshot).
 *
 * Invariants:
 * - A group's position (grp.pos) only moves by max() outside of a move
 *   (log.c); settings are changed column by column, never by rewriting the
 *   row from a copy read earlier.
 * - Counts come from counters and delivery rows, not from the log: their
 *   cost follows the unsettled deliveries, not the number of messages.
 */
#include <stdlib.h>
#include <string.h>

#include "sq.h"

#define TOPIC_COLS "id, name, created, next_off, last_ts, msgs, bytes, " \
	"coalesce(retention, -1), dedup_window, max_size, gap_below, " \
	"paused_until, ttl"

static void
topic_cols(sqlite3_stmt *s, struct mq_topic *t)
{
	t->id = sqlite3_column_int64(s, 0);
	sq_copy(s, 1, t->name, sizeof t->name);
	t->created = sqlite3_column_int64(s, 2);
	t->next_off = sqlite3_column_int64(s, 3);
	t->last_ts = sqlite3_column_int64(s, 4);
	t->msgs = sqlite3_column_int64(s, 5);
	t->bytes = sqlite3_column_int64(s, 6);
	t->retention = sqlite3_column_int64(s, 7);
	t->dedup_window = sqlite3_column_int64(s, 8);
	t->max_size = sqlite3_column_int64(s, 9);
	t->gap_below = sqlite3_column_int64(s, 10);
	t->paused_until = sqlite3_column_int64(s, 11);	/* NULL: 0 */
	t->ttl = sqlite3_column_int64(s, 12);		/* NULL: 0 */
}

int
sq_topic_row(struct sq *q, const char *name, struct mq_topic *t)
{
	sqlite3_stmt *s = sq_stmt(q,
	    "SELECT " TOPIC_COLS " FROM topic WHERE name = ?");
	int found;

	sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
	if ((found = sq_step(q, s, "cannot read topic") == SQLITE_ROW))
		topic_cols(s, t);
	sqlite3_reset(s);
	return found;
}

/* Inside a write transaction. */
void
sq_topic_ensure(struct sq *q, const char *name, struct mq_topic *t)
{
	sqlite3_stmt *s;

	if (sq_topic_row(q, name, t))
		return;
	s = sq_stmt(q, "INSERT INTO topic (name, created) VALUES (?, ?)");
	sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, mq_now());
	sq_step(q, s, "cannot create topic");
	if (!sq_topic_row(q, name, t))
		mq_die(MQ_EX_SOFTWARE, "topic %s vanished", name);
}

#define GROUP_COLS "id, topic, name, created, pos, lease, max_attempts, " \
	"backoff, ordered, settled, delivered, failed, deadlettered, " \
	"settled_ts, paused_until, timeout, cancelled, lapsed, idem, " \
	"idem_window, duplicates, rate_n, rate_ms, rate_tat, per_key"

static void
group_cols(sqlite3_stmt *s, struct mq_group *g)
{
	g->id = sqlite3_column_int64(s, 0);
	g->topic = sqlite3_column_int64(s, 1);
	sq_copy(s, 2, g->name, sizeof g->name);
	g->created = sqlite3_column_int64(s, 3);
	g->pos = sqlite3_column_int64(s, 4);
	g->lease = sqlite3_column_int64(s, 5);
	g->max_attempts = sqlite3_column_int(s, 6);
	sq_copy(s, 7, g->backoff, sizeof g->backoff);
	g->ordered = sqlite3_column_int(s, 8);
	g->settled = sqlite3_column_int64(s, 9);
	g->delivered = sqlite3_column_int64(s, 10);
	g->failed = sqlite3_column_int64(s, 11);
	g->deadlettered = sqlite3_column_int64(s, 12);
	g->settled_ts = sqlite3_column_int64(s, 13);	/* NULL: 0 */
	g->paused_until = sqlite3_column_int64(s, 14);	/* NULL: 0 */
	g->timeout = sqlite3_column_int64(s, 15);	/* NULL: 0 */
	g->cancelled = sqlite3_column_int64(s, 16);
	g->lapsed = sqlite3_column_int64(s, 17);
	sq_copy(s, 18, g->idem, sizeof g->idem);	/* NULL: "" */
	g->idem_window = sqlite3_column_int64(s, 19);
	g->duplicates = sqlite3_column_int64(s, 20);
	g->rate_n = sqlite3_column_int64(s, 21);	/* NULL: 0 */
	g->rate_ms = sqlite3_column_int64(s, 22);
	g->rate_tat = sqlite3_column_int64(s, 23);
	g->per_key = sqlite3_column_int(s, 24);
}

int
sq_group_row(struct sq *q, int64_t topic, const char *name, struct mq_group *g)
{
	sqlite3_stmt *s = sq_stmt(q,
	    "SELECT " GROUP_COLS " FROM grp WHERE topic = ? AND name = ?");
	int found;

	sqlite3_bind_int64(s, 1, topic);
	sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
	if ((found = sq_step(q, s, "cannot read group") == SQLITE_ROW))
		group_cols(s, g);
	sqlite3_reset(s);
	return found;
}

int64_t
sq_first_off(struct sq *q, int64_t topic)
{
	return sq_int(q, "SELECT min(off) FROM msg WHERE topic = ?", 0, 1,
	    topic);
}

int64_t
sq_count_range(struct sq *q, int64_t topic, int64_t from, int64_t to)
{
	return sq_int(q, "SELECT count(*) FROM msg WHERE topic = ? "
	    "AND off >= ? AND off < ?", 0, 3, topic, from, to);
}

/*
 * Inside a write transaction.  A new group starts at the topic's first
 * stored message, or with latest at its end.
 */
void
sq_group_ensure(struct sq *q, const struct mq_topic *t, const char *name,
    int latest, struct mq_group *g)
{
	sqlite3_stmt *s;
	int64_t first;

	if (sq_group_row(q, t->id, name, g))
		return;
	s = sq_stmt(q, "INSERT INTO grp (topic, name, created, pos) "
	    "VALUES (?, ?, ?, ?)");
	sqlite3_bind_int64(s, 1, t->id);
	sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, mq_now());
	sqlite3_bind_int64(s, 4, latest || !(first = sq_first_off(q, t->id)) ?
	    t->next_off : first);
	sq_step(q, s, "cannot create group");
	if (!sq_group_row(q, t->id, name, g))
		mq_die(MQ_EX_SOFTWARE, "group %s vanished", name);
}

/* Topic and (if group) group, inside a transaction: 0 or MQ_E_NO*. */
int
sq_need(struct sq *q, const char *topic, const char *group,
    struct mq_topic *t, struct mq_group *g)
{
	if (!sq_topic_row(q, topic, t))
		return MQ_E_NOTOPIC;
	if (group && !sq_group_row(q, t->id, group, g))
		return MQ_E_NOGROUP;
	return 0;
}

int
sq_topic_get(struct mq *mq, const char *name, struct mq_topic *t)
{
	struct sq *q = SQ(mq);
	int found;

	sq_begin_read(q);
	found = sq_topic_row(q, name, t);
	sq_rollback(q);
	return found;
}

static int
topics(struct sq *q, struct mq_topic **out)
{
	sqlite3_stmt *s = sq_stmt(q,
	    "SELECT " TOPIC_COLS " FROM topic ORDER BY name");
	struct mq_topic *t = NULL;
	int n = 0;

	while (sq_step(q, s, "cannot read topics") == SQLITE_ROW) {
		t = mq_array(t, n + 1, sizeof *t);
		topic_cols(s, &t[n++]);
	}
	*out = t;
	return n;
}

int
sq_topic_list(struct mq *mq, struct mq_topic **out)
{
	struct sq *q = SQ(mq);
	int n;

	sq_begin_read(q);
	n = topics(q, out);
	sq_rollback(q);
	return n;
}

/* One column of a row (sql: ?1 its id, ?2 the value): v, or NULL. */
static void
set_col(struct sq *q, const char *sql, int64_t id, int64_t v, int null,
    const char *what)
{
	sqlite3_stmt *s = sq_stmt(q, sql);

	sqlite3_bind_int64(s, 1, id);
	if (!null)
		sqlite3_bind_int64(s, 2, v);
	sq_step(q, s, what);
}

static void
topic_set(struct sq *q, int64_t id, const struct mq_topic_conf *c)
{
	if (!c)
		return;
	if (c->retention != MQ_KEEP)
		set_col(q, "UPDATE topic SET retention = ?2 WHERE id = ?1",
		    id, c->retention, c->retention < 0, "cannot update topic");
	if (c->dedup_window != MQ_KEEP)
		set_col(q, "UPDATE topic SET dedup_window = ?2 WHERE id = ?1",
		    id, c->dedup_window, 0, "cannot update topic");
	if (c->max_size != MQ_KEEP)
		set_col(q, "UPDATE topic SET max_size = ?2 WHERE id = ?1",
		    id, c->max_size, 0, "cannot update topic");
	if (c->ttl != MQ_KEEP)
		set_col(q, "UPDATE topic SET ttl = ?2 WHERE id = ?1", id,
		    c->ttl, !c->ttl, "cannot update topic");
	if (c->paused_until != MQ_KEEP) {
		set_col(q, "UPDATE topic SET paused_until = ?2 "
		    "WHERE id = ?1", id, c->paused_until, !c->paused_until,
		    "cannot update topic");
		sq_touch(q, id);	/* a resume wakes its consumers */
	}
}

/* Returns 1 when it made the topic, 0 when it was there (left as it is). */
int
sq_topic_create(struct mq *mq, const char *name,
    const struct mq_topic_conf *c, struct mq_topic *t)
{
	struct sq *q = SQ(mq);

	sq_begin(q);
	if (sq_topic_row(q, name, t)) {
		sq_rollback(q);
		return 0;
	}
	sq_topic_ensure(q, name, t);
	topic_set(q, t->id, c);
	sq_topic_row(q, name, t);
	sq_commit(q, SQ_DURABLE);
	return 1;
}

int
sq_topic_conf(struct mq *mq, const char *name, const struct mq_topic_conf *c,
    struct mq_topic *t)
{
	struct sq *q = SQ(mq);

	sq_begin(q);
	if (!sq_topic_row(q, name, t)) {
		sq_rollback(q);
		return MQ_E_NOTOPIC;
	}
	topic_set(q, t->id, c);
	sq_topic_row(q, name, t);
	sq_commit(q, SQ_DURABLE);
	return 0;
}

/* What deleting the group would lose: its unsettled messages. */
static int64_t
unsettled(struct sq *q, const struct mq_topic *t, const struct mq_group *g)
{
	struct mq_gstats st;

	sq_stats(q, t, g, mq_now(), &st);
	return st.lag + st.delayed + st.dead;
}

static void
exec_id(struct sq *q, const char *sql, int64_t id, const char *what)
{
	sqlite3_stmt *s = sq_stmt(q, sql);

	sqlite3_bind_int64(s, 1, id);
	sq_step(q, s, what);
}

static void
drop_group(struct sq *q, int64_t id)
{
	exec_id(q, "DELETE FROM delivery WHERE grp = ?", id,
	    "cannot delete group");
	exec_id(q, "DELETE FROM history WHERE grp = ?", id,
	    "cannot delete group");
	exec_id(q, "DELETE FROM consumer WHERE grp = ?", id,
	    "cannot delete group");
	exec_id(q, "DELETE FROM consumed WHERE grp = ?", id,
	    "cannot delete group");
	exec_id(q, "DELETE FROM grp WHERE id = ?", id, "cannot delete group");
}

int
sq_groups(struct sq *q, int64_t topic, struct mq_group **out)
{
	sqlite3_stmt *s = sq_stmt(q,
	    "SELECT " GROUP_COLS " FROM grp WHERE topic = ? ORDER BY name");
	struct mq_group *g = NULL;
	int n = 0;

	sqlite3_bind_int64(s, 1, topic);
	while (sq_step(q, s, "cannot read groups") == SQLITE_ROW) {
		g = mq_array(g, n + 1, sizeof *g);
		group_cols(s, &g[n++]);
	}
	*out = g;
	return n;
}

int
sq_topic_delete(struct mq *mq, const char *name, int force, struct mq_held *h)
{
	struct sq *q = SQ(mq);
	struct mq_topic t;
	struct mq_group *g;
	int i, n;

	sq_begin(q);
	if (!sq_topic_row(q, name, &t)) {
		sq_rollback(q);
		return MQ_E_NOTOPIC;
	}
	n = sq_groups(q, t.id, &g);
	for (i = 0; i < n && !force; i++)
		if ((h->n = unsettled(q, &t, &g[i])) > 0) {
			snprintf(h->group, sizeof h->group, "%s", g[i].name);
			free(g);
			sq_rollback(q);
			return MQ_E_HELD;
		}
	for (i = 0; i < n; i++)
		drop_group(q, g[i].id);
	free(g);
	exec_id(q, "DELETE FROM dedup WHERE topic = ?", t.id,
	    "cannot delete topic");
	exec_id(q, "DELETE FROM msg WHERE topic = ?", t.id,
	    "cannot delete topic");
	exec_id(q, "DELETE FROM topic WHERE id = ?", t.id,
	    "cannot delete topic");
	sq_touch(q, t.id);
	sq_commit(q, SQ_DURABLE);
	return 0;
}

int
sq_group_get(struct mq *mq, const char *topic, const char *name,
    struct mq_group *g)
{
	struct sq *q = SQ(mq);
	struct mq_topic t;
	int rc;

	sq_begin_read(q);
	rc = sq_need(q, topic, name, &t, g);
	sq_rollback(q);
	return rc == 0;
}

/* Creates topic and group as needed; returns 1 when the group is new. */
int
sq_group_conf(struct mq *mq, const char *topic, const char *name,
    const struct mq_group_conf *c, struct mq_group *g)
{
	struct sq *q = SQ(mq);
	struct mq_topic t;
	sqlite3_stmt *s;
	int created;

	sq_begin(q);
	sq_topic_ensure(q, topic, &t);
	created = !sq_group_row(q, t.id, name, g);
	sq_group_ensure(q, &t, name, c->latest, g);
	if (c->lease != MQ_KEEP)
		set_col(q, "UPDATE grp SET lease = ?2 WHERE id = ?1",
		    g->id, c->lease, 0, "cannot update group");
	if (c->max_attempts > 0)
		set_col(q, "UPDATE grp SET max_attempts = ?2 WHERE id = ?1",
		    g->id, c->max_attempts, 0, "cannot update group");
	if (c->ordered >= 0)
		set_col(q, "UPDATE grp SET ordered = ?2 WHERE id = ?1",
		    g->id, c->ordered, 0, "cannot update group");
	if (c->backoff) {
		s = sq_stmt(q, "UPDATE grp SET backoff = ?2 WHERE id = ?1");
		sqlite3_bind_int64(s, 1, g->id);
		sqlite3_bind_text(s, 2, c->backoff, -1, SQLITE_STATIC);
		sq_step(q, s, "cannot update group");
	}
	if (c->paused_until != MQ_KEEP)
		set_col(q, "UPDATE grp SET paused_until = ?2 WHERE id = ?1",
		    g->id, c->paused_until, !c->paused_until,
		    "cannot update group");
	if (c->timeout != MQ_KEEP)
		set_col(q, "UPDATE grp SET timeout = ?2 WHERE id = ?1",
		    g->id, c->timeout, !c->timeout, "cannot update group");
	if (c->idem_window != MQ_KEEP)
		set_col(q, "UPDATE grp SET idem_window = ?2 WHERE id = ?1",
		    g->id, c->idem_window, 0, "cannot update group");
	if (c->rate_n != MQ_KEEP) {	/* a new rate starts afresh */
		s = sq_stmt(q, "UPDATE grp SET rate_n = nullif(?2, 0), "
		    "rate_ms = nullif(?3, 0), rate_tat = 0 WHERE id = ?1");
		sqlite3_bind_int64(s, 1, g->id);
		sqlite3_bind_int64(s, 2, c->rate_n);
		sqlite3_bind_int64(s, 3, c->rate_ms);
		sq_step(q, s, "cannot update group");
	}
	if (c->per_key >= 0)
		set_col(q, "UPDATE grp SET per_key = ?2 WHERE id = ?1",
		    g->id, c->per_key, 0, "cannot update group");
	if (c->idem) {	/* off, or another id: what it remembers goes */
		if (strcmp(c->idem, g->idem)) {
			exec_id(q, "DELETE FROM consumed WHERE grp = ?", g->id,
			    "cannot update group");
			exec_id(q, "UPDATE delivery SET bid = NULL WHERE "
			    "grp = ? AND bid IS NOT NULL", g->id,
			    "cannot update group");
		}
		s = sq_stmt(q, "UPDATE grp SET idem = ?2 WHERE id = ?1");
		sqlite3_bind_int64(s, 1, g->id);
		if (*c->idem)
			sqlite3_bind_text(s, 2, c->idem, -1, SQLITE_STATIC);
		sq_step(q, s, "cannot update group");
	}
	sq_group_row(q, t.id, name, g);
	sq_touch(q, t.id);	/* a new lease or order may free work */
	sq_commit(q, SQ_DURABLE);
	return created;
}

int
sq_group_delete(struct mq *mq, const char *topic, const char *name, int force,
    struct mq_held *h)
{
	struct sq *q = SQ(mq);
	struct mq_topic t;
	struct mq_group g;
	int rc;

	sq_begin(q);
	if ((rc = sq_need(q, topic, name, &t, &g)) < 0) {
		sq_rollback(q);
		return rc;
	}
	if (!force && (h->n = unsettled(q, &t, &g)) > 0) {
		snprintf(h->group, sizeof h->group, "%s", g.name);
		sq_rollback(q);
		return MQ_E_HELD;
	}
	drop_group(q, g.id);
	sq_commit(q, SQ_DURABLE);
	return 0;
}

/*
 * Messages from the group's position on that have a delivery row
 * already (cancelled or rescheduled before they were handed out) are not
 * pending: those rows count them, or nothing does (cancelled).
 */
static void
ahead(struct sq *q, const struct mq_topic *t, const struct mq_group *g,
    int64_t now, struct mq_gstats *st)
{
	/* from the rows (few), never from the log (the planner may not know) */
	sqlite3_stmt *s = sq_stmt(q, "SELECT count(*), count(*) FILTER "
	    "(WHERE EXISTS (SELECT 1 FROM msg m WHERE m.topic = ?4 AND "
	    "m.off = d.off AND m.due > m.ts AND m.due > ?3)) FROM delivery d "
	    "WHERE d.grp = ?1 AND d.off >= ?2");
	int64_t n = 0, delayed = 0;

	sqlite3_bind_int64(s, 1, g->id);
	sqlite3_bind_int64(s, 2, g->pos);
	sqlite3_bind_int64(s, 3, now);
	sqlite3_bind_int64(s, 4, t->id);
	if (sq_step(q, s, "cannot read deliveries") == SQLITE_ROW) {
		n = sqlite3_column_int64(s, 0);
		delayed = sqlite3_column_int64(s, 1);
	}
	sqlite3_reset(s);
	st->ahead = n;
	n -= delayed;
	st->pending -= n < st->pending ? n : st->pending;
	st->delayed -= delayed < st->delayed ? delayed : st->delayed;
}

/*
 * A group's state, from its cursor and its delivery rows only: the cost
 * follows the number of unsettled deliveries, not the size of the log.
 */
void
sq_stats(struct sq *q, const struct mq_topic *t, const struct mq_group *g,
    int64_t now, struct mq_gstats *st)
{
	sqlite3_stmt *s = sq_stmt(q,
	    "SELECT "
	    "count(*) FILTER (WHERE state = 1 AND due > ?2), "
	    "count(*) FILTER (WHERE state = 1 AND due <= ?2), "
	    "count(*) FILTER (WHERE state = 0 AND attempt > 0), "
	    "count(*) FILTER (WHERE state = 0 AND attempt = 0 AND due > ?2), "
	    "count(*) FILTER (WHERE state = 0 AND attempt = 0 AND due <= ?2), "
	    "count(*) FILTER (WHERE state = 2), "
	    "min(off) FILTER (WHERE state = 1 OR (state = 0 AND "
	    "(attempt > 0 OR due <= ?2))) "
	    "FROM delivery WHERE grp = ?1");
	int64_t off;

	memset(st, 0, sizeof *st);
	sqlite3_bind_int64(s, 1, g->id);
	sqlite3_bind_int64(s, 2, now);
	if (sq_step(q, s, "cannot read deliveries") == SQLITE_ROW) {
		st->inflight = sqlite3_column_int64(s, 0);
		st->expired = sqlite3_column_int64(s, 1);
		st->retrying = sqlite3_column_int64(s, 2);
		st->delayed = sqlite3_column_int64(s, 3);
		st->waiting = sqlite3_column_int64(s, 4);
		st->dead = sqlite3_column_int64(s, 5);
		st->oldest_off = sqlite3_column_type(s, 6) == SQLITE_NULL ?
		    0 : sqlite3_column_int64(s, 6);
	}
	sqlite3_reset(s);

	/*
	 * Not handed out yet: the messages from pos on, less the delayed.
	 * Offsets from gap_below on are dense; below it, count what is stored.
	 */
	off = g->pos > t->gap_below ? g->pos : t->gap_below;
	st->pending = t->next_off > off ? t->next_off - off : 0;
	if (g->pos < t->gap_below)
		st->pending += sq_count_range(q, t->id, g->pos, t->gap_below);
	if (st->pending) {
		int64_t delayed = sq_int(q, "SELECT count(*) FROM msg "
		    "INDEXED BY msg_delayed WHERE topic = ? AND off >= ? "
		    "AND due > ts AND due > ?", 0, 3, t->id, g->pos, now);

		st->pending -= delayed < st->pending ? delayed : st->pending;
		st->delayed += delayed;
	}
	/* messages from pos on with a row (mark.c): counted by their rows */
	if (st->pending || st->delayed)
		ahead(q, t, g, now, st);
	st->lag = st->pending + st->inflight + st->expired + st->retrying +
	    st->waiting;

	/* the oldest due and unsettled message: a delivery row or pending */
	st->oldest_ts = 0;
	off = st->oldest_off;
	if (st->pending && (!off || g->pos < off))
		off = g->pos;
	if (off) {
		s = sq_stmt(q, st->ahead ? "SELECT off, ts FROM msg WHERE "
		    "topic = ?1 AND off >= ?2 AND NOT (due > ts AND due > ?3 "
		    "AND off >= ?4) AND NOT EXISTS (SELECT 1 FROM delivery d "
		    "WHERE d.grp = ?5 AND d.off = msg.off AND d.off >= ?4 AND "
		    "(d.state = 5 OR d.due > ?3)) ORDER BY off LIMIT 1" :
		    "SELECT off, ts FROM msg WHERE topic = ?1 AND "
		    "off >= ?2 AND NOT (due > ts AND due > ?3 AND off >= ?4) "
		    "ORDER BY off LIMIT 1");
		if (st->ahead)
			sqlite3_bind_int64(s, 5, g->id);
		sqlite3_bind_int64(s, 1, t->id);
		sqlite3_bind_int64(s, 2, off);
		sqlite3_bind_int64(s, 3, now);
		sqlite3_bind_int64(s, 4, g->pos);
		if (sq_step(q, s, "cannot read messages") == SQLITE_ROW) {
			st->oldest_off = sqlite3_column_int64(s, 0);
			st->oldest_ts = sqlite3_column_int64(s, 1);
		}
		sqlite3_reset(s);
	}
	st->consumers = sq_int(q, "SELECT count(*) FROM consumer WHERE grp = ?",
	    0, 1, g->id);
}

static struct mq_lag_row *
add_row(struct mq_lag *L)
{
	struct mq_lag_row *r;

	L->rows = mq_array(L->rows, L->n + 1, sizeof *L->rows);
	r = &L->rows[L->n++];
	memset(r, 0, sizeof *r);
	return r;
}

/*
 * One read transaction: the rows of L->topic and L->group (every one
 * when NULL), with their counts.
 */
int
sq_snapshot(struct mq *mq, struct mq_lag *L)
{
	struct sq *q = SQ(mq);
	struct mq_topic *t, one;
	struct mq_group *g;
	struct mq_lag_row *r;
	int i, k, nt, ng, rc = 0;

	L->n = 0;
	sq_begin_read(q);
	L->now = mq_now();
	if (L->topic && !sq_topic_row(q, L->topic, &one)) {
		sq_rollback(q);
		return MQ_E_NOTOPIC;
	}
	nt = topics(q, &t);
	for (i = 0; i < nt; i++) {
		if (L->topic && strcmp(t[i].name, L->topic))
			continue;
		ng = sq_groups(q, t[i].id, &g);
		for (k = 0; k < ng; k++) {
			if (L->group && strcmp(g[k].name, L->group))
				continue;
			r = add_row(L);
			r->t = t[i];
			r->g = g[k];
			r->has_group = 1;
			sq_stats(q, &t[i], &g[k], L->now, &r->s);
		}
		if (ng == 0 && !L->group)
			add_row(L)->t = t[i];
		free(g);
	}
	free(t);
	if (L->group && L->n == 0)
		rc = MQ_E_NOGROUP;
	sq_rollback(q);
	return rc;
}

#define CONSUMER_COLS "c.id, c.grp, c.host, c.boot, c.pid, c.start, " \
	"c.since, c.seen, t.name, g.name, (SELECT count(*) FROM delivery d " \
	"WHERE d.consumer = c.id AND d.state = 1), coalesce(c.pgid, 0), " \
	"coalesce(c.pgstart, 0)"

static int
consumer_rows(struct sq *q, sqlite3_stmt *s, struct mq_consumer **out)
{
	struct mq_consumer *c = NULL;
	int n = 0;

	while (sq_step(q, s, "cannot read consumers") == SQLITE_ROW) {
		c = mq_array(c, n + 1, sizeof *c);
		memset(&c[n], 0, sizeof c[n]);
		c[n].id = sqlite3_column_int64(s, 0);
		c[n].grp = sqlite3_column_int64(s, 1);
		sq_copy(s, 2, c[n].host, sizeof c[n].host);
		sq_copy(s, 3, c[n].boot, sizeof c[n].boot);
		c[n].pid = sqlite3_column_int64(s, 4);
		c[n].start = sqlite3_column_int64(s, 5);
		c[n].since = sqlite3_column_int64(s, 6);
		c[n].seen = sqlite3_column_int64(s, 7);
		sq_copy(s, 8, c[n].topic, sizeof c[n].topic);
		sq_copy(s, 9, c[n].group, sizeof c[n].group);
		c[n].held = sqlite3_column_int64(s, 10);
		c[n].pgid = sqlite3_column_int64(s, 11);
		c[n].pgstart = sqlite3_column_int64(s, 12);
		n++;
	}
	*out = c;
	return n;
}

/* The consumers of a group (or of the host, with topic NULL). */
int
sq_consumers(struct mq *mq, const char *topic, const char *group,
    struct mq_consumer **out)
{
	struct sq *q = SQ(mq);
	sqlite3_stmt *s;
	int n;

	sq_begin_read(q);
	s = sq_stmt(q, "SELECT " CONSUMER_COLS " FROM consumer c "
	    "JOIN grp g ON g.id = c.grp JOIN topic t ON t.id = g.topic "
	    "WHERE t.name = ? AND g.name = ? ORDER BY c.id");
	sqlite3_bind_text(s, 1, topic, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, group, -1, SQLITE_STATIC);
	n = consumer_rows(q, s, out);
	sq_rollback(q);
	return n;
}

/* A group's consumers on a host, in the caller's transaction (deliver.c). */
int
sq_consumers_on(struct sq *q, const char *topic, const char *group,
    const char *host, struct mq_consumer **out)
{
	sqlite3_stmt *s = sq_stmt(q, "SELECT " CONSUMER_COLS " FROM consumer c "
	    "JOIN grp g ON g.id = c.grp JOIN topic t ON t.id = g.topic "
	    "WHERE t.name = ? AND g.name = ? AND c.host = ?");

	sqlite3_bind_text(s, 1, topic, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, group, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, host, -1, SQLITE_STATIC);
	return consumer_rows(q, s, out);
}
