/*
 * topic.c: topics and groups on PostgreSQL: finding, creating,
 * configuring, deleting, and their counts (one snapshot: REPEATABLE READ,
 * read only).  As on SQLite, counts come from counters and delivery rows,
 * never from the log.
 *
 * Functions that return int and take a transaction return PG_RETRY when
 * it was rolled back for a deadlock; the operation then starts over.
 */
#include <stdlib.h>
#include <string.h>

#include "pg.h"

#define TOPIC_COLS "id, name, created, next_off, last_ts, msgs, bytes, " \
	"coalesce(retention, -1), dedup_window, max_size, gap_below, " \
	"paused_until, ttl"
#define TOPIC_NCOLS 13

static void
topic_cols(PGresult *r, int i, struct mq_topic *t)
{
	t->id = pg_get(r, i, 0);
	pg_copy(r, i, 1, t->name, sizeof t->name);
	t->created = pg_get(r, i, 2);
	t->next_off = pg_get(r, i, 3);
	t->last_ts = pg_get(r, i, 4);
	t->msgs = pg_get(r, i, 5);
	t->bytes = pg_get(r, i, 6);
	t->retention = pg_get(r, i, 7);
	t->dedup_window = pg_get(r, i, 8);
	t->max_size = pg_get(r, i, 9);
	t->gap_below = pg_get(r, i, 10);
	t->paused_until = pg_get(r, i, 11);	/* NULL: 0 */
	t->ttl = pg_get(r, i, 12);		/* NULL: 0 */
}

/* 1 found, 0 not, PG_RETRY; with lock, the row stays locked to commit. */
int
pg_topic_row(struct pgq *q, const char *name, struct mq_topic *t, int lock)
{
	PGresult *r;
	int found;

	TRY(r, lock ? pg_q(q, "cannot read topic", "SELECT " TOPIC_COLS
	    " FROM topic WHERE name = $1 FOR UPDATE", 1, name) :
	    pg_q(q, "cannot read topic", "SELECT " TOPIC_COLS
	    " FROM topic WHERE name = $1", 1, name));
	if ((found = PQntuples(r) > 0))
		topic_cols(r, 0, t);
	PQclear(r);
	return found;
}

/* Inside a transaction; 0 or PG_RETRY. */
int
pg_topic_ensure(struct pgq *q, const char *name, struct mq_topic *t, int lock)
{
	PGresult *r;
	int rc;

	if ((rc = pg_topic_row(q, name, t, lock)) != 0)
		return rc < 0 ? rc : 0;
	TRY(r, pg_q(q, "cannot create topic", "INSERT INTO topic (name, "
	    "created) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", 2, name,
	    pg_int(q, pg_now())));
	if (atoi(PQcmdTuples(r)))
		pg_notify(q, 0);	/* wakes those waiting for a topic */
	PQclear(r);
	if ((rc = pg_topic_row(q, name, t, lock)) < 0)
		return rc;
	if (!rc)
		mq_die(MQ_EX_SOFTWARE, "topic %s vanished", name);
	return 0;
}

#define GROUP_COLS "id, topic, name, created, pos, lease, max_attempts, " \
	"backoff, ordered, settled, delivered, failed, deadlettered, " \
	"settled_ts, paused_until, timeout, cancelled, lapsed, idem, " \
	"idem_window, duplicates, rate_n, rate_ms, rate_tat, per_key"

#define GROUP_NCOLS 25

/* The columns of GROUP_COLS from column c on. */
static void
group_cols_at(PGresult *r, int i, int c, struct mq_group *g)
{
	g->id = pg_get(r, i, c + 0);
	g->topic = pg_get(r, i, c + 1);
	pg_copy(r, i, c + 2, g->name, sizeof g->name);
	g->created = pg_get(r, i, c + 3);
	g->pos = pg_get(r, i, c + 4);
	g->lease = pg_get(r, i, c + 5);
	g->max_attempts = (int)pg_get(r, i, c + 6);
	pg_copy(r, i, c + 7, g->backoff, sizeof g->backoff);
	g->ordered = (int)pg_get(r, i, c + 8);
	g->settled = pg_get(r, i, c + 9);
	g->delivered = pg_get(r, i, c + 10);
	g->failed = pg_get(r, i, c + 11);
	g->deadlettered = pg_get(r, i, c + 12);
	g->settled_ts = pg_get(r, i, c + 13);	/* NULL: 0 */
	g->paused_until = pg_get(r, i, c + 14);	/* NULL: 0 */
	g->timeout = pg_get(r, i, c + 15);	/* NULL: 0 */
	g->cancelled = pg_get(r, i, c + 16);
	g->lapsed = pg_get(r, i, c + 17);
	pg_copy(r, i, c + 18, g->idem, sizeof g->idem);	/* NULL: "" */
	g->idem_window = pg_get(r, i, c + 19);
	g->duplicates = pg_get(r, i, c + 20);
	g->rate_n = pg_get(r, i, c + 21);	/* NULL: 0 */
	g->rate_ms = pg_get(r, i, c + 22);
	g->rate_tat = pg_get(r, i, c + 23);
	g->per_key = (int)pg_get(r, i, c + 24);
}

#define group_cols(r, i, g) group_cols_at(r, i, 0, g)

int
pg_group_row(struct pgq *q, int64_t topic, const char *name,
    struct mq_group *g, int lock)
{
	PGresult *r;
	int found;

	TRY(r, lock ? pg_q(q, "cannot read group", "SELECT " GROUP_COLS
	    " FROM grp WHERE topic = $1 AND name = $2 FOR UPDATE", 2,
	    pg_int(q, topic), name) :
	    pg_q(q, "cannot read group", "SELECT " GROUP_COLS
	    " FROM grp WHERE topic = $1 AND name = $2", 2, pg_int(q, topic),
	    name));
	if ((found = PQntuples(r) > 0))
		group_cols(r, 0, g);
	PQclear(r);
	return found;
}

int64_t
pg_first_off(struct pgq *q, int64_t topic)
{
	PGresult *r = pg_q(q, "cannot read messages",
	    "SELECT coalesce(min(off), 0) FROM msg WHERE topic = $1", 1,
	    pg_int(q, topic));
	int64_t v;

	if (!r)
		return PG_RETRY;
	v = pg_get(r, 0, 0);
	PQclear(r);
	return v;
}

int64_t
pg_count_range(struct pgq *q, int64_t topic, int64_t from, int64_t to)
{
	PGresult *r = pg_q(q, "cannot count messages", "SELECT count(*) "
	    "FROM msg WHERE topic = $1 AND off >= $2 AND off < $3", 3,
	    pg_int(q, topic), pg_int(q, from), pg_int(q, to));
	int64_t v;

	if (!r)
		return PG_RETRY;
	v = pg_get(r, 0, 0);
	PQclear(r);
	return v;
}

/* A new group starts at the first stored message, or with latest at the end. */
int
pg_group_ensure(struct pgq *q, const struct mq_topic *t, const char *name,
    int latest, struct mq_group *g, int lock)
{
	PGresult *r;
	int64_t first;
	int rc;

	if ((rc = pg_group_row(q, t->id, name, g, lock)) != 0)
		return rc < 0 ? rc : 0;
	if ((first = pg_first_off(q, t->id)) < 0)
		return PG_RETRY;
	TRY(r, pg_q(q, "cannot create group", "INSERT INTO grp (topic, name, "
	    "created, pos) VALUES ($1, $2, $3, $4) ON CONFLICT (topic, name) "
	    "DO NOTHING", 4, pg_int(q, t->id), name, pg_int(q, pg_now()),
	    pg_int(q, latest || !first ? t->next_off : first)));
	PQclear(r);
	if ((rc = pg_group_row(q, t->id, name, g, lock)) < 0)
		return rc;
	if (!rc)
		mq_die(MQ_EX_SOFTWARE, "group %s vanished", name);
	return 0;
}

/*
 * The group of topic/name, locked, and its topic's pause (a claim needs
 * only the topic's id and this): queued on p, and read from its result
 * by pg_group_locked_row, 1, 0 if none.
 */
void
pg_group_locked(struct pgq *q, struct pg_pipe *p, const char *topic,
    const char *name)
{
	pg_pipe_q(q, p, "cannot read group", "SELECT " GROUP_COLS ", (SELECT "
	    "paused_until FROM topic WHERE name = $1) FROM grp WHERE topic = "
	    "(SELECT id FROM topic WHERE name = $1) AND name = $2 FOR UPDATE",
	    2, topic, name);
}

int
pg_group_locked_row(PGresult *r, struct mq_group *g, int64_t *topic_paused)
{
	if (PQntuples(r) == 0)
		return 0;
	group_cols(r, 0, g);
	*topic_paused = pg_get(r, 0, GROUP_NCOLS);
	return 1;
}

int
pg_topic_get(struct mq *mq, const char *name, struct mq_topic *t)
{
	return pg_topic_row(PGQ(mq), name, t, 0) > 0;
}

int
pg_topic_list(struct mq *mq, struct mq_topic **out)
{
	struct pgq *q = PGQ(mq);
	struct mq_topic *t;
	PGresult *r = pg_q(q, "cannot read topics", "SELECT " TOPIC_COLS
	    " FROM topic ORDER BY name", 0);
	int i, n = PQntuples(r);

	t = mq_array(NULL, n, sizeof *t);
	for (i = 0; i < n; i++)
		topic_cols(r, i, &t[i]);
	PQclear(r);
	*out = t;
	return n;
}

static int
topic_set(struct pgq *q, int64_t id, const struct mq_topic_conf *c)
{
	PGresult *r;

	if (!c)
		return 0;
	if (c->retention != MQ_KEEP) {
		TRY(r, pg_q(q, "cannot update topic", "UPDATE topic SET "
		    "retention = $2 WHERE id = $1", 2, pg_int(q, id),
		    c->retention >= 0 ? pg_int(q, c->retention) : NULL));
		PQclear(r);
	}
	if (c->dedup_window != MQ_KEEP) {
		TRY(r, pg_q(q, "cannot update topic", "UPDATE topic SET "
		    "dedup_window = $2 WHERE id = $1", 2, pg_int(q, id),
		    pg_int(q, c->dedup_window)));
		PQclear(r);
	}
	if (c->max_size != MQ_KEEP) {
		TRY(r, pg_q(q, "cannot update topic", "UPDATE topic SET "
		    "max_size = $2 WHERE id = $1", 2, pg_int(q, id),
		    pg_int(q, c->max_size)));
		PQclear(r);
	}
	if (c->ttl != MQ_KEEP) {
		TRY(r, pg_q(q, "cannot update topic", "UPDATE topic SET "
		    "ttl = $2 WHERE id = $1", 2, pg_int(q, id),
		    c->ttl ? pg_int(q, c->ttl) : NULL));
		PQclear(r);
	}
	if (c->paused_until != MQ_KEEP) {
		TRY(r, pg_q(q, "cannot update topic", "UPDATE topic SET "
		    "paused_until = $2 WHERE id = $1", 2, pg_int(q, id),
		    c->paused_until ? pg_int(q, c->paused_until) : NULL));
		PQclear(r);
		pg_notify(q, id);	/* a resume wakes its consumers */
	}
	return 0;
}

static int
topic_create(struct pgq *q, const char *name, const struct mq_topic_conf *c,
    struct mq_topic *t)
{
	PGresult *r;
	int rc;

	if (pg_begin(q))
		return PG_RETRY;
	TRY(r, pg_q(q, "cannot create topic", "INSERT INTO topic (name, "
	    "created) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", 2, name,
	    pg_int(q, pg_now())));
	rc = atoi(PQcmdTuples(r));
	PQclear(r);
	if (rc)
		pg_notify(q, 0);	/* wakes those waiting for a topic */
	if (pg_topic_row(q, name, t, 1) < 0)
		return PG_RETRY;
	if (rc && (topic_set(q, t->id, c) < 0 ||
	    pg_topic_row(q, name, t, 0) < 0))
		return PG_RETRY;
	if (pg_commit(q))
		return PG_RETRY;
	return rc > 0;
}

int
pg_topic_create(struct mq *mq, const char *name, const struct mq_topic_conf *c,
    struct mq_topic *t)
{
	int rc;

	while ((rc = topic_create(PGQ(mq), name, c, t)) == PG_RETRY)
		;
	return rc;
}

static int
topic_conf(struct pgq *q, const char *name, const struct mq_topic_conf *c,
    struct mq_topic *t)
{
	int rc;

	if (pg_begin(q))
		return PG_RETRY;
	if ((rc = pg_topic_row(q, name, t, 1)) <= 0) {
		pg_rollback(q);
		return rc < 0 ? rc : MQ_E_NOTOPIC;
	}
	if (topic_set(q, t->id, c) < 0 || pg_topic_row(q, name, t, 0) < 0 ||
	    pg_commit(q))
		return PG_RETRY;
	return 0;
}

int
pg_topic_conf(struct mq *mq, const char *name, const struct mq_topic_conf *c,
    struct mq_topic *t)
{
	int rc;

	while ((rc = topic_conf(PGQ(mq), name, c, t)) == PG_RETRY)
		;
	return rc;
}

/* The groups of a topic, by name (with lock, ours until commit). */
int
pg_groups(struct pgq *q, int64_t topic, struct mq_group **out, int lock)
{
	PGresult *r;
	struct mq_group *g;
	int i, n;

	if (!(r = lock ? pg_q(q, "cannot read groups", "SELECT " GROUP_COLS
	    " FROM grp WHERE topic = $1 ORDER BY name FOR UPDATE", 1,
	    pg_int(q, topic)) : pg_q(q, "cannot read groups", "SELECT "
	    GROUP_COLS " FROM grp WHERE topic = $1 ORDER BY name", 1,
	    pg_int(q, topic))))
		return PG_RETRY;
	n = PQntuples(r);
	g = mq_array(NULL, n, sizeof *g);
	for (i = 0; i < n; i++)
		group_cols(r, i, &g[i]);
	PQclear(r);
	*out = g;
	return n;
}

/* What deleting the group would lose: its unsettled messages. */
static int64_t
unsettled(struct pgq *q, const struct mq_topic *t, const struct mq_group *g)
{
	struct mq_gstats st;

	if (pg_stats(q, t, g, pg_now(), &st) < 0)
		return PG_RETRY;
	return st.lag + st.delayed + st.dead;
}

static int
drop_group(struct pgq *q, int64_t id)
{
	static const char *sql[] = {
		"DELETE FROM delivery WHERE grp = $1",
		"DELETE FROM lease WHERE grp = $1",
		"DELETE FROM history WHERE grp = $1",
		"DELETE FROM acks WHERE grp = $1",
		"DELETE FROM consumer WHERE grp = $1",
		"DELETE FROM consumed WHERE grp = $1",
		"DELETE FROM grp WHERE id = $1",
	};
	PGresult *r;
	size_t i;

	for (i = 0; i < sizeof sql / sizeof *sql; i++) {
		TRY(r, pg_q(q, "cannot delete group", sql[i], 1, pg_int(q, id)));
		PQclear(r);
	}
	return 0;
}

static int
topic_delete(struct pgq *q, const char *name, int force, struct mq_held *h)
{
	static const char *sql[] = {
		"DELETE FROM dedup WHERE topic = $1",
		"DELETE FROM msg WHERE topic = $1",
		"DELETE FROM topic WHERE id = $1",
	};
	struct mq_topic t;
	struct mq_group *g;
	PGresult *r;
	int64_t n;
	size_t k;
	int i, ng, rc;

	if (pg_begin(q))
		return PG_RETRY;
	if ((rc = pg_topic_row(q, name, &t, 1)) <= 0) {
		pg_rollback(q);
		return rc < 0 ? rc : MQ_E_NOTOPIC;
	}
	if ((ng = pg_groups(q, t.id, &g, 0)) < 0)
		return PG_RETRY;
	for (i = 0; i < ng && !force; i++) {
		if ((n = unsettled(q, &t, &g[i])) < 0) {
			free(g);
			return PG_RETRY;
		}
		if (n > 0) {
			h->n = n;
			snprintf(h->group, sizeof h->group, "%s", g[i].name);
			free(g);
			pg_rollback(q);
			return MQ_E_HELD;
		}
	}
	for (i = 0; i < ng; i++)
		if (drop_group(q, g[i].id) < 0) {
			free(g);
			return PG_RETRY;
		}
	free(g);
	for (k = 0; k < sizeof sql / sizeof *sql; k++) {
		TRY(r, pg_q(q, "cannot delete topic", sql[k], 1,
		    pg_int(q, t.id)));
		PQclear(r);
	}
	pg_notify(q, t.id);
	return pg_commit(q);
}

int
pg_topic_delete(struct mq *mq, const char *name, int force, struct mq_held *h)
{
	int rc;

	while ((rc = topic_delete(PGQ(mq), name, force, h)) == PG_RETRY)
		;
	return rc;
}

int
pg_group_get(struct mq *mq, const char *topic, const char *name,
    struct mq_group *g)
{
	struct pgq *q = PGQ(mq);
	struct mq_topic t;

	return pg_topic_row(q, topic, &t, 0) > 0 &&
	    pg_group_row(q, t.id, name, g, 0) > 0;
}

static int
group_conf(struct pgq *q, const char *topic, const char *name,
    const struct mq_group_conf *c, struct mq_group *g)
{
	struct mq_topic t;
	PGresult *r;
	int created, rc;

	if (pg_begin(q) || pg_topic_ensure(q, topic, &t, 0) < 0)
		return PG_RETRY;
	if ((rc = pg_group_row(q, t.id, name, g, 1)) < 0)
		return PG_RETRY;
	created = !rc;
	if (pg_group_ensure(q, &t, name, c->latest, g, 1) < 0)
		return PG_RETRY;
	TRY(r, pg_q(q, "cannot update group", "UPDATE grp SET "
	    "lease = coalesce($2, lease), "
	    "max_attempts = coalesce($3, max_attempts), "
	    "ordered = coalesce($4, ordered), "
	    "backoff = coalesce($5, backoff), paused_until = CASE WHEN $6 "
	    "THEN $7::bigint ELSE paused_until END, timeout = CASE WHEN $8 "
	    "THEN $9::bigint ELSE timeout END WHERE id = $1", 9,
	    pg_int(q, g->id),
	    c->lease != MQ_KEEP ? pg_int(q, c->lease) : NULL,
	    c->max_attempts > 0 ? pg_int(q, c->max_attempts) : NULL,
	    c->ordered >= 0 ? pg_int(q, c->ordered) : NULL,
	    c->backoff, c->paused_until != MQ_KEEP ? "true" : "false",
	    c->paused_until != MQ_KEEP && c->paused_until ?
	    pg_int(q, c->paused_until) : NULL,
	    c->timeout != MQ_KEEP ? "true" : "false",
	    c->timeout != MQ_KEEP && c->timeout ? pg_int(q, c->timeout) : NULL));
	PQclear(r);
	/* idempotent-by off, or another id: what it remembers goes */
	TRY(r, pg_q(q, "cannot update group", "WITH x AS (SELECT $2::text IS "
	    "NOT NULL AND $2::text IS DISTINCT FROM coalesce((SELECT idem FROM "
	    "grp WHERE id = $1), '') AS yes), f AS (DELETE FROM consumed WHERE "
	    "grp = $1 AND (SELECT yes FROM x)), b AS (UPDATE delivery SET "
	    "bid = NULL WHERE grp = $1 AND bid IS NOT NULL AND (SELECT yes "
	    "FROM x)) "
	    "UPDATE grp SET idem = CASE WHEN $2::text IS NULL THEN idem "
	    "ELSE nullif($2::text, '') END, idem_window = coalesce($3, "
	    "idem_window), rate_n = CASE WHEN $4 THEN nullif($5::bigint, 0) "
	    "ELSE rate_n END, rate_ms = CASE WHEN $4 THEN nullif($6::bigint, "
	    "0) ELSE rate_ms END, rate_tat = CASE WHEN $4 THEN 0 ELSE rate_tat "
	    "END, per_key = coalesce($7, per_key) WHERE id = $1", 7,
	    pg_int(q, g->id), c->idem,
	    c->idem_window != MQ_KEEP ? pg_int(q, c->idem_window) : NULL,
	    c->rate_n != MQ_KEEP ? "true" : "false",
	    pg_int(q, c->rate_n != MQ_KEEP ? c->rate_n : 0),
	    pg_int(q, c->rate_ms != MQ_KEEP ? c->rate_ms : 0),
	    c->per_key >= 0 ? pg_int(q, c->per_key) : NULL));
	PQclear(r);
	if (pg_group_row(q, t.id, name, g, 0) < 0)
		return PG_RETRY;
	pg_notify(q, t.id);	/* a new lease or order may free work */
	if (pg_commit(q))
		return PG_RETRY;
	return created;
}

int
pg_group_conf(struct mq *mq, const char *topic, const char *name,
    const struct mq_group_conf *c, struct mq_group *g)
{
	int rc;

	while ((rc = group_conf(PGQ(mq), topic, name, c, g)) == PG_RETRY)
		;
	return rc;
}

static int
group_delete(struct pgq *q, const char *topic, const char *name, int force,
    struct mq_held *h)
{
	struct mq_topic t;
	struct mq_group g;
	int64_t n;
	int rc;

	if (pg_begin(q))
		return PG_RETRY;
	if ((rc = pg_topic_row(q, topic, &t, 0)) <= 0) {
		if (rc < 0)
			return rc;
		pg_rollback(q);
		return MQ_E_NOTOPIC;
	}
	if ((rc = pg_group_row(q, t.id, name, &g, 1)) <= 0) {
		if (rc < 0)
			return rc;
		pg_rollback(q);
		return MQ_E_NOGROUP;
	}
	if (!force) {
		if ((n = unsettled(q, &t, &g)) < 0)
			return PG_RETRY;
		if (n > 0) {
			h->n = n;
			snprintf(h->group, sizeof h->group, "%s", g.name);
			pg_rollback(q);
			return MQ_E_HELD;
		}
	}
	if (drop_group(q, g.id) < 0)
		return PG_RETRY;
	return pg_commit(q);
}

int
pg_group_delete(struct mq *mq, const char *topic, const char *name, int force,
    struct mq_held *h)
{
	int rc;

	memset(h, 0, sizeof *h);
	while ((rc = group_delete(PGQ(mq), topic, name, force, h)) == PG_RETRY)
		;
	return rc;
}

/*
 * A group's state, from its cursor and its delivery rows only (as
 * sq_stats): one statement for the delivery counts, one for the pending.
 */
int
pg_stats(struct pgq *q, const struct mq_topic *t, const struct mq_group *g,
    int64_t now, struct mq_gstats *st)
{
	PGresult *r;
	int64_t off, delayed;

	memset(st, 0, sizeof *st);
	/* and the runs of lease (lease.sql): in flight, or expired, each
	   offset not acked (a 0 bit), from the first */
	TRY(r, pg_q(q, "cannot read deliveries", "SELECT d.a + l.a, "
	    "d.b + l.b, d.c, d.d, d.e, d.f, least(d.g, l.g), d.h FROM (SELECT "
	    "count(*) FILTER (WHERE state = 1 AND due > $2) a, "
	    "count(*) FILTER (WHERE state = 1 AND due <= $2) b, "
	    "count(*) FILTER (WHERE state = 0 AND attempt > 0) c, "
	    "count(*) FILTER (WHERE state = 0 AND attempt = 0 AND due > $2) d, "
	    "count(*) FILTER (WHERE state = 0 AND attempt = 0 AND due <= $2) e, "
	    "count(*) FILTER (WHERE state = 2) f, "
	    "min(off) FILTER (WHERE state = 1 OR (state = 0 AND "
	    "(attempt > 0 OR due <= $2))) g, "
	    "(SELECT count(*) FROM consumer WHERE grp = $1) h "
	    "FROM delivery WHERE grp = $1) d, (SELECT coalesce(sum(u) FILTER "
	    "(WHERE due > $2), 0) a, coalesce(sum(u) FILTER (WHERE due <= $2), "
	    "0) b, min(lo - 1 + nullif(position(B'0' IN acked), 0)) g FROM "
	    "(SELECT due, lo, acked, length(replace(acked::text, '1', '')) AS "
	    "u FROM lease WHERE grp = $1) x) l", 2,
	    pg_int(q, g->id), pg_int(q, now)));
	st->inflight = pg_get(r, 0, 0);
	st->expired = pg_get(r, 0, 1);
	st->retrying = pg_get(r, 0, 2);
	st->delayed = pg_get(r, 0, 3);
	st->waiting = pg_get(r, 0, 4);
	st->dead = pg_get(r, 0, 5);
	st->oldest_off = pg_get(r, 0, 6);
	st->consumers = pg_get(r, 0, 7);
	PQclear(r);
	off = g->pos > t->gap_below ? g->pos : t->gap_below;
	st->pending = t->next_off > off ? t->next_off - off : 0;
	if (g->pos < t->gap_below) {
		if ((delayed = pg_count_range(q, t->id, g->pos, t->gap_below)) < 0)
			return PG_RETRY;
		st->pending += delayed;
	}
	/* less the delayed, and those with a row already (mark.c): their
	   rows count them, or nothing does (cancelled) */
	if (st->pending) {
		TRY(r, pg_q(q, "cannot count messages", "SELECT (SELECT "
		    "count(*) FROM msg WHERE topic = $1 AND off >= $2 AND "
		    "due > ts AND due > $3), count(*), count(*) FILTER (WHERE "
		    "EXISTS (SELECT 1 FROM msg m WHERE m.topic = $1 AND "
		    "m.off = d.off AND m.due > m.ts AND m.due > $3)) FROM "
		    "delivery d WHERE d.grp = $4 AND d.off >= $2", 4, pg_int(q, t->id), pg_int(q, g->pos),
		    pg_int(q, now), pg_int(q, g->id)));
		delayed = pg_get(r, 0, 0) - pg_get(r, 0, 2);
		st->ahead = pg_get(r, 0, 1);
		off = st->ahead + delayed;
		PQclear(r);
		st->pending -= off < st->pending ? off : st->pending;
		st->delayed += delayed > 0 ? delayed : 0;
	}
	st->lag = st->pending + st->inflight + st->expired + st->retrying +
	    st->waiting;
	off = st->oldest_off;
	if (st->pending && (!off || g->pos < off))
		off = g->pos;
	if (off) {
		TRY(r, pg_q(q, "cannot read messages", "SELECT off, ts FROM msg "
		    "WHERE topic = $1 AND off >= $2 AND NOT (due > ts AND "
		    "due > $3 AND off >= $4) AND NOT EXISTS (SELECT 1 FROM "
		    "delivery d WHERE d.grp = $5 AND d.off = msg.off AND "
		    "d.off >= $4 AND (d.state = 5 OR d.due > $3)) ORDER BY off "
		    "LIMIT 1", 5, pg_int(q, t->id), pg_int(q, off),
		    pg_int(q, now), pg_int(q, g->pos), pg_int(q, g->id)));
		if (PQntuples(r)) {
			st->oldest_off = pg_get(r, 0, 0);
			st->oldest_ts = pg_get(r, 0, 1);
		}
		PQclear(r);
	}
	return 0;
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

/* One snapshot: REPEATABLE READ, READ ONLY. */
static int
snapshot(struct pgq *q, struct mq_lag *L)
{
	struct mq_topic *t, one;
	struct mq_group *g;
	struct mq_lag_row *row;
	PGresult *r;
	int i, k, nt, ng, rc = 0;

	L->n = 0;
	TRY(r, pg_q(q, "cannot start read", "BEGIN ISOLATION LEVEL "
	    "REPEATABLE READ READ ONLY", 0));
	PQclear(r);
	q->in_tx = 2;
	L->now = pg_now();
	if (L->topic && (rc = pg_topic_row(q, L->topic, &one, 0)) <= 0) {
		pg_rollback(q);
		return rc < 0 ? rc : MQ_E_NOTOPIC;
	}
	nt = pg_topic_list(&q->base, &t);
	for (i = 0; i < nt; i++) {
		if (L->topic && strcmp(t[i].name, L->topic))
			continue;
		if ((ng = pg_groups(q, t[i].id, &g, 0)) < 0) {
			free(t);
			return PG_RETRY;
		}
		for (k = 0; k < ng; k++) {
			if (L->group && strcmp(g[k].name, L->group))
				continue;
			row = add_row(L);
			row->t = t[i];
			row->g = g[k];
			row->has_group = 1;
			if (pg_stats(q, &t[i], &g[k], L->now, &row->s) < 0) {
				free(g);
				free(t);
				return PG_RETRY;
			}
		}
		if (ng == 0 && !L->group)
			add_row(L)->t = t[i];
		free(g);
	}
	free(t);
	pg_rollback(q);
	return L->group && L->n == 0 ? MQ_E_NOGROUP : 0;
}

int
pg_snapshot(struct mq *mq, struct mq_lag *L)
{
	int rc;

	while ((rc = snapshot(PGQ(mq), L)) == PG_RETRY) {
		free(L->rows);
		L->rows = NULL;
	}
	return rc;
}

#define CONSUMER_COLS "c.id, c.grp, c.host, c.boot, c.pid, c.start, " \
	"c.since, c.seen, t.name, g.name, (SELECT count(*) FROM delivery d " \
	"WHERE d.consumer = c.id AND d.state = 1), coalesce(c.pgid, 0), " \
	"coalesce(c.pgstart, 0)"

static int
consumer_rows(PGresult *r, struct mq_consumer **out)
{
	struct mq_consumer *c;
	int i, n = PQntuples(r);

	c = mq_array(NULL, n, sizeof *c);
	for (i = 0; i < n; i++) {
		memset(&c[i], 0, sizeof c[i]);
		c[i].id = pg_get(r, i, 0);
		c[i].grp = pg_get(r, i, 1);
		pg_copy(r, i, 2, c[i].host, sizeof c[i].host);
		pg_copy(r, i, 3, c[i].boot, sizeof c[i].boot);
		c[i].pid = pg_get(r, i, 4);
		c[i].start = pg_get(r, i, 5);
		c[i].since = pg_get(r, i, 6);
		c[i].seen = pg_get(r, i, 7);
		pg_copy(r, i, 8, c[i].topic, sizeof c[i].topic);
		pg_copy(r, i, 9, c[i].group, sizeof c[i].group);
		c[i].held = pg_get(r, i, 10);
		c[i].pgid = pg_get(r, i, 11);
		c[i].pgstart = pg_get(r, i, 12);
	}
	*out = c;
	return n;
}

int
pg_consumers(struct mq *mq, const char *topic, const char *group,
    struct mq_consumer **out)
{
	struct pgq *q = PGQ(mq);
	PGresult *r = pg_q(q, "cannot read consumers", "SELECT " CONSUMER_COLS
	    " FROM consumer c JOIN grp g ON g.id = c.grp JOIN topic t ON "
	    "t.id = g.topic WHERE t.name = $1 AND g.name = $2 ORDER BY c.id",
	    2, topic, group);
	int n = consumer_rows(r, out);

	PQclear(r);
	return n;
}

/* A group's consumers (every host), in the caller's transaction. */
int
pg_consumers_of(struct pgq *q, const char *topic, const char *group,
    struct mq_consumer **out)
{
	PGresult *r;
	int n;

	TRY(r, pg_q(q, "cannot read consumers", "SELECT " CONSUMER_COLS
	    " FROM consumer c JOIN grp g ON g.id = c.grp JOIN topic t ON "
	    "t.id = g.topic WHERE t.name = $1 AND g.name = $2 ORDER BY c.id",
	    2, topic, group));
	n = consumer_rows(r, out);
	PQclear(r);
	return n;
}

/*
 * The group's consumers but this process's own (one a lane, whose locks
 * this session holds and so could take again) whose advisory locks were
 * free: their sessions are over, and the locks are now this session's
 * (one round trip for the whole group; the CTE keeps the lock attempts
 * to the group's rows).
 */
int
pg_dead_consumers_of(struct pgq *q, const char *topic, const char *group,
    struct mq_consumer **out)
{
	struct pg_arr mine;
	PGresult *r;
	int i, n;

	memset(&mine, 0, sizeof mine);
	for (i = 0; i < q->nlockkey; i++)
		pg_arr_int(&mine, q->lockkey[i]);
	r = pg_q(q, "cannot read consumers", "WITH c AS MATERIALIZED "
	    "(SELECT " CONSUMER_COLS " FROM consumer c JOIN grp g ON g.id = "
	    "c.grp JOIN topic t ON t.id = g.topic WHERE t.name = $1 AND "
	    "g.name = $2 AND c.id <> ALL ($3::bigint[])) SELECT * FROM c "
	    "WHERE pg_try_advisory_lock($4::int, mod(c.id, 2147483647)::int) "
	    "ORDER BY c.id", 4, topic, group, pg_arr_end(&mine),
	    pg_int(q, q->lockspace));
	pg_arr_free(&mine);
	if (!r)
		return PG_RETRY;
	n = consumer_rows(r, out);
	PQclear(r);
	return n;
}

/* Topic and (if group) group, inside a transaction: 0, MQ_E_NO*, PG_RETRY. */
int
pg_need(struct pgq *q, const char *topic, const char *group,
    struct mq_topic *t, struct mq_group *g, int lock)
{
	PGresult *r;
	int rc;

	if (group && !lock) {	/* both in one round trip */
		TRY(r, pg_q(q, "cannot read group", "SELECT t.*, g.* FROM "
		    "(SELECT " TOPIC_COLS " FROM topic WHERE name = $1) t LEFT "
		    "JOIN LATERAL (SELECT " GROUP_COLS " FROM grp WHERE topic = "
		    "t.id AND name = $2) g ON true", 2, topic, group));
		rc = PQntuples(r) == 0 ? MQ_E_NOTOPIC :
		    pg_null(r, 0, TOPIC_NCOLS) ? MQ_E_NOGROUP : 0;
		if (rc != MQ_E_NOTOPIC)
			topic_cols(r, 0, t);
		if (rc == 0)
			group_cols_at(r, 0, TOPIC_NCOLS, g);
		PQclear(r);
		return rc;
	}
	if ((rc = pg_topic_row(q, topic, t, 0)) <= 0)
		return rc < 0 ? rc : MQ_E_NOTOPIC;
	if (group && (rc = pg_group_row(q, t->id, group, g, lock)) <= 0)
		return rc < 0 ? rc : MQ_E_NOGROUP;
	return 0;
}

static void
arr_put(struct pg_arr *a, const char *s, size_t n)
{
	if (a->len + n + 2 > a->cap) {
		a->cap = (a->len + n + 2) * 2;
		a->s = mq_array(a->s, a->cap, 1);
	}
	memcpy(a->s + a->len, s, n);
	a->len += n;
	a->s[a->len] = '\0';
}

static void
arr_sep(struct pg_arr *a)
{
	arr_put(a, a->n++ ? "," : "{", 1);
}

void
pg_arr_int(struct pg_arr *a, int64_t v)
{
	char b[24];

	arr_sep(a);
	arr_put(a, b, (size_t)snprintf(b, sizeof b, "%lld", (long long)v));
}

/* A text element, quoted: backslash before " and \. */
void
pg_arr_str(struct pg_arr *a, const char *s)
{
	arr_sep(a);
	if (!s) {
		arr_put(a, "NULL", 4);
		return;
	}
	arr_put(a, "\"", 1);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			arr_put(a, "\\", 1);
		arr_put(a, s, 1);
	}
	arr_put(a, "\"", 1);
}

const char *
pg_arr_end(struct pg_arr *a)
{
	if (!a->n)
		arr_put(a, "{", 1);
	arr_put(a, "}", 1);
	return a->s;
}

void
pg_arr_free(struct pg_arr *a)
{
	free(a->s);
	memset(a, 0, sizeof *a);
}

/*
 * Offsets of topic below this are durable, as the last append's NOTIFY
 * that this session heard said (NOTIFY_SQL in pg.c); 0: none heard.
 */
int64_t
pg_durable_below(struct pgq *q, int64_t topic)
{
	int i;

	for (i = 0; i < q->ndurable; i++)
		if (q->durable[i].topic == topic)
			return q->durable[i].below;
	return 0;
}

void
pg_heard_durable(struct pgq *q, int64_t topic, int64_t below)
{
	int i;

	for (i = 0; i < q->ndurable && q->durable[i].topic != topic; i++)
		;
	if (i == q->ndurable) {
		if (i == MQ_LANES_MAX)
			i = 0;		/* (a waiter has at most that many) */
		else
			q->ndurable++;
		q->durable[i].topic = topic;
		q->durable[i].below = 0;
	}
	if (below > q->durable[i].below)
		q->durable[i].below = below;
}
