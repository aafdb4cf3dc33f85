/*
 * mark.c: cancelling and rescheduling messages (mq-topic cancel, delay),
 * as ../sqlite/mark.c: one transaction that holds the rows of the groups
 * it changes (FOR UPDATE, by name), so a claim of the same group waits
 * for it or it for the claim: either the claim hands the message out and
 * the cancel refuses it, or the cancel settles it and no claim sees it.
 */
#include <stdlib.h>
#include <string.h>

#include "pg.h"

/*
 * The offsets m names, in order (*offs to free); MQ_E_NOMSG with
 * *missing, or PG_RETRY; 0 for a key or dedup id that names none.
 */
static int
targets(struct pgq *q, const struct mq_topic *t, const struct mq_mark *m,
    int64_t **offs, int64_t *missing)
{
	struct pg_arr a = { 0 };
	PGresult *r;
	int64_t *o;
	int i, j, n;

	if (m->key)
		r = pg_q(q, "cannot read messages", "SELECT off FROM msg WHERE "
		    "topic = $1 AND key = $2 ORDER BY off", 2, pg_int(q, t->id),
		    m->key);
	else if (m->dedup)
		r = pg_q(q, "cannot read messages", "SELECT d.off FROM dedup d "
		    "JOIN msg ON msg.topic = d.topic AND msg.off = d.off WHERE "
		    "d.topic = $1 AND d.id = $2 AND d.ts > $3", 3,
		    pg_int(q, t->id), m->dedup,
		    pg_int(q, pg_now() - t->dedup_window));
	else {
		for (i = 0; i < m->noffs; i++)
			pg_arr_int(&a, m->offs[i]);
		r = pg_q(q, "cannot read messages", "SELECT off FROM msg WHERE "
		    "topic = $1 AND off = ANY($2::bigint[]) ORDER BY off", 2,
		    pg_int(q, t->id), pg_arr_end(&a));
		pg_arr_free(&a);
	}
	if (!r)
		return PG_RETRY;
	n = PQntuples(r);
	o = mq_array(NULL, n + 1, sizeof *o);
	for (i = 0; i < n; i++)
		o[i] = pg_get(r, i, 0);
	PQclear(r);
	/* offsets come sorted and once each (mq_mark): find a missing one */
	for (i = j = 0; !m->key && !m->dedup && i < m->noffs; i++) {
		if (j < n && o[j] == m->offs[i]) {
			j++;
			continue;
		}
		free(o);
		*missing = m->offs[i];
		return MQ_E_NOMSG;
	}
	*offs = o;
	return n;
}

static int
count_settled(struct pgq *q, int64_t grp, int64_t n, int cancelled)
{
	PGresult *u;

	TRY(u, pg_q(q, "cannot update group", "UPDATE grp SET settled = "
	    "settled + $2, cancelled = cancelled + $3, settled_ts = $4 WHERE "
	    "id = $1", 4, pg_int(q, grp), pg_int(q, n),
	    pg_int(q, cancelled ? n : 0), pg_int(q, pg_now())));
	PQclear(u);
	return 0;
}

/*
 * mq-send --replace, in the append's transaction (as
 * ../sqlite/mark.c's sq_replace_older): the earlier messages of key
 * below off that a group has not handed out, or holds back with no
 * attempt made, are settled as replaced.  The groups' rows are locked,
 * after the topic's, so a claim does not hand one out meanwhile.
 */
int
pg_replace_older(struct pgq *q, const struct mq_topic *t, const char *key,
    int64_t off)
{
	struct mq_group *g;
	PGresult *r;
	char why[40];
	int i, ng;

	snprintf(why, sizeof why, "by #%lld", (long long)off);
	if ((ng = pg_groups(q, t->id, &g, 1)) < 0)
		return PG_RETRY;
	for (i = 0; i < ng; i++) {
		/* the rows that go, those that say so (ahead), the history */
		r = pg_q(q, "cannot store delivery", "WITH o AS (SELECT m.off "
		    "FROM msg m LEFT JOIN delivery d ON d.grp = $2 AND d.off = "
		    "m.off WHERE m.topic = $1 AND m.key = $3 AND m.off >= $4 "
		    "AND m.off < $5 AND (d.state IS NULL OR (d.state = 0 AND "
		    "d.attempt = 0)) UNION ALL SELECT off FROM delivery WHERE "
		    "grp = $2 AND key = $3 AND state = 0 AND attempt = 0 AND "
		    "off < $4), gone AS (DELETE FROM delivery d USING o WHERE "
		    "d.grp = $2 AND d.off = o.off AND o.off < $4), ahead AS "
		    "(INSERT INTO delivery (grp, off, state, due, attempt) "
		    "SELECT $2, off, 5, 0, 0 FROM o WHERE off >= $4 ON CONFLICT "
		    "(grp, off) DO UPDATE SET state = 5, due = 0, consumer = "
		    "NULL, token = 0, key = NULL), h AS (INSERT INTO history "
		    "(grp, off, ts, n, attempt, event, host, pid, reason) SELECT "
		    "$2, off, $6, $7, 0, 'replaced', $8, $9, $10 FROM o) SELECT "
		    "count(*) FROM o", 10, pg_int(q, t->id), pg_int(q, g[i].id),
		    key, pg_int(q, g[i].pos), pg_int(q, off), pg_int(q, pg_now()),
		    pg_int(q, mq_history_n()), mq_hostname(), pg_int(q, mq_pid()),
		    why);
		if (!r || (pg_get(r, 0, 0) && count_settled(q, g[i].id,
		    pg_get(r, 0, 0), 0) < 0)) {
			if (r)
				PQclear(r);
			free(g);
			return PG_RETRY;
		}
		PQclear(r);
	}
	free(g);
	return 0;
}

/* Does what r->act says; 1 when that settled the message, or PG_RETRY. */
static int
apply(struct pgq *q, const struct mq_mark *m, int64_t grp,
    const struct mq_marked *r, int attempt, int64_t since, const char *host,
    int64_t pid)
{
	static const char *const sql[] = {
		[MQ_M_DROP] = "DELETE FROM delivery WHERE grp = $1 AND off = $2",
		[MQ_M_SKIP] = "INSERT INTO delivery (grp, off, state, due, "
		    "attempt) VALUES ($1, $2, 5, 0, $3) ON CONFLICT (grp, off) "
		    "DO UPDATE SET state = 5, due = 0, consumer = NULL, "
		    "token = 0, key = NULL",
		[MQ_M_DUE] = "UPDATE delivery SET state = 0, due = $3, "
		    "consumer = NULL, token = 0 WHERE grp = $1 AND off = $2",
		[MQ_M_AHEAD] = "INSERT INTO delivery (grp, off, state, due, "
		    "attempt, key) SELECT $1, $2, 0, $3, 0, key FROM msg WHERE "
		    "topic = (SELECT topic FROM grp WHERE id = $1) AND off = $2",
	};
	PGresult *res;

	/* $3: the attempt a cancelled row keeps, or the new due time */
	TRY(res, pg_q(q, "cannot store delivery", sql[r->act],
	    r->act == MQ_M_DROP ? 2 : 3, pg_int(q, grp), pg_int(q, r->off),
	    pg_int(q, r->act == MQ_M_SKIP ? attempt : m->due)));
	PQclear(res);
	if (pg_history(q, grp, r->off, attempt, m->op == MQ_CANCEL ?
	    "cancelled" : "rescheduled", m->reason, r->state == MQ_LEASED ?
	    since : 0, host, pid) < 0)
		return PG_RETRY;
	return r->act == MQ_M_DROP || r->act == MQ_M_SKIP;
}

/* One group: its rows of the offsets, an action each, applied. */
static int
group(struct pgq *q, const struct mq_mark *m, const struct mq_group *g,
    const int64_t *offs, int noff, struct mq_marked *res, int *refused)
{
	struct pg_arr a = { 0 };
	struct mq_marked *r;
	PGresult *rows;
	int i, j, k, rc, settled = 0;

	/* the runs of lease that hold them are delivery rows first, unless
	   nothing is to change (deliveries shows them the same) */
	if (!m->dry && noff > 0) {
		TRY(rows, pg_q(q, "cannot store delivery", "SELECT unlease("
		    "$1::bigint, $2::bigint, $3::bigint, $4, false)", 4,
		    pg_int(q, g->id), pg_int(q, offs[0]),
		    pg_int(q, offs[noff - 1] + 1), pg_int(q, INT64_MAX)));
		PQclear(rows);
	}
	for (j = 0; j < noff; j++)
		pg_arr_int(&a, offs[j]);
	rows = pg_q(q, "cannot read deliveries", "SELECT off, state, attempt, "
	    "since, host, pid FROM deliveries WHERE grp = $1 AND off = "
	    "ANY($2::bigint[]) ORDER BY off", 2, pg_int(q, g->id),
	    pg_arr_end(&a));
	pg_arr_free(&a);
	if (!rows)
		return PG_RETRY;
	for (j = k = 0; j < noff; j++) {
		r = &res[j];
		memset(r, 0, sizeof *r);
		snprintf(r->group, sizeof r->group, "%s", g->name);
		r->off = offs[j];
		r->state = -1;
		while (k < PQntuples(rows) && pg_get(rows, k, 0) < offs[j])
			k++;
		if (k < PQntuples(rows) && pg_get(rows, k, 0) == offs[j])
			r->state = (int)pg_get(rows, k, 1);
		r->act = mq_rule_mark(m->op, r->state, offs[j] >= g->pos,
		    m->force);
		*refused |= r->act == MQ_M_REFUSE;
		if (r->act > MQ_M_REFUSE && !m->dry && !*refused) {
			i = r->state >= 0;
			rc = apply(q, m, g->id, r, i ? (int)pg_get(rows, k, 2) : 0,
			    i ? pg_get(rows, k, 3) : 0, i ? PQgetvalue(rows, k,
			    4) : NULL, i ? pg_get(rows, k, 5) : 0);
			if (rc < 0) {
				PQclear(rows);
				return PG_RETRY;
			}
			settled += rc;
		}
		if (r->state < 0)	/* for the caller */
			r->state = offs[j] >= g->pos ? MQ_NOT_YET : MQ_DONE;
	}
	PQclear(rows);
	if (!settled || m->dry || *refused)
		return 0;
	return count_settled(q, g->id, settled, 1);
}

static int
mark(struct pgq *q, const struct mq_mark *m, struct mq_marked **out)
{
	struct mq_topic t;
	struct mq_group *g = NULL, one;
	struct mq_marked *res = NULL;
	int64_t *offs = NULL, missing = 0;
	int i, ng, noff = 0, refused = 0, rc;

	*out = NULL;
	if (m->dry ? pg_begin_read(q) : pg_begin(q))
		return PG_RETRY;
	if ((rc = pg_need(q, m->topic, m->group, &t, &one, !m->dry)) < 0 ||
	    (noff = targets(q, &t, m, &offs, &missing)) <= 0) {
		free(offs);
		rc = rc < 0 ? rc : noff ? noff : MQ_E_NOMSG;
		if (rc == PG_RETRY)
			return rc;
		pg_rollback(q);
		if (rc == MQ_E_NOMSG) {
			*out = mq_array(NULL, 1, sizeof **out);
			(*out)[0].off = missing;
		}
		return rc;
	}
	if (m->group) {
		g = mq_array(NULL, 1, sizeof *g);
		g[0] = one;
		ng = 1;
	} else if ((ng = pg_groups(q, t.id, &g, !m->dry)) < 0) {
		free(offs);
		return PG_RETRY;
	}
	res = mq_array(NULL, (size_t)ng * noff + 1, sizeof *res);
	for (i = 0; i < ng; i++)
		if (group(q, m, &g[i], offs, noff, res + (size_t)i * noff,
		    &refused) < 0) {
			free(offs);
			free(g);
			free(res);
			return PG_RETRY;
		}
	free(offs);
	free(g);
	*out = res;
	if (m->dry || refused) {
		pg_rollback(q);
		return ng * noff;
	}
	pg_notify(q, t.id);	/* a message due sooner: followers look again */
	if (pg_commit(q)) {
		free(res);
		*out = NULL;
		return PG_RETRY;
	}
	return ng * noff;
}

int
pg_mark(struct mq *mq, const struct mq_mark *m, struct mq_marked **out)
{
	int rc;

	while ((rc = mark(PGQ(mq), m, out)) == PG_RETRY)
		;
	return rc;
}
