/*
 * mark.c: cancelling and rescheduling messages (mq-topic cancel, delay).
 * One write transaction: find the messages (offsets, every one of a key,
 * the one of a dedup id), read each group's delivery row of each, ask
 * mq_rule_mark what becomes of it, and change nothing if it refuses any.
 *
 * A message a group has not handed out yet gets a row at or after the
 * group's position (MQ_SKIP when cancelled, waiting when rescheduled);
 * claim_new passes such rows by (deliver.c).  mq-send --replace settles
 * earlier messages of its key the same way (sq_replace_older).
 */
#include <stdlib.h>
#include <string.h>

#include "sq.h"

/*
 * The offsets m names, in order; MQ_E_NOMSG with *missing (0 for a key or
 * dedup id that names none).
 */
static int
targets(struct sq *q, const struct mq_topic *t, const struct mq_mark *m,
    int64_t **offs, int64_t *missing)
{
	sqlite3_stmt *s;
	int64_t *o = NULL, off;
	int i, n = 0;

	if (m->key || m->dedup) {
		s = m->key ? sq_stmt(q, "SELECT off FROM msg WHERE topic = ? "
		    "AND key = ? ORDER BY off") : sq_stmt(q, "SELECT d.off "
		    "FROM dedup d JOIN msg ON msg.topic = d.topic AND "
		    "msg.off = d.off WHERE d.topic = ? AND d.id = ? AND "
		    "d.ts > ?");	/* inside the window, as mq-send has it */
		sqlite3_bind_int64(s, 1, t->id);
		sqlite3_bind_text(s, 2, m->key ? m->key : m->dedup, -1,
		    SQLITE_STATIC);
		if (m->dedup)
			sqlite3_bind_int64(s, 3, mq_now() - t->dedup_window);
		while (sq_step(q, s, "cannot read messages") == SQLITE_ROW) {
			o = mq_array(o, n + 1, sizeof *o);
			o[n++] = sqlite3_column_int64(s, 0);
		}
		sqlite3_reset(s);
		*offs = o;
		return n ? n : MQ_E_NOMSG;
	}
	for (i = 0; i < m->noffs; i++) {
		off = sq_int(q, "SELECT off FROM msg WHERE topic = ? AND off = ?",
		    0, 2, t->id, m->offs[i]);
		if (!off) {
			free(o);
			*missing = m->offs[i];
			return MQ_E_NOMSG;
		}
		o = mq_array(o, n + 1, sizeof *o);
		o[n++] = off;
	}
	*offs = o;
	return n;
}

/*
 * A message a group has not handed out, or holds back with no attempt
 * made, is settled: its row goes, or, at or after the group's position,
 * says so (MQ_SKIP) until the position passes it.
 */
static void
settle_row(struct sq *q, int64_t grp, int64_t off, int ahead, int attempt)
{
	sqlite3_stmt *s = sq_stmt(q, ahead ? "INSERT OR REPLACE INTO delivery "
	    "(grp, off, state, due, attempt) VALUES (?1, ?2, 5, 0, ?3)" :
	    "DELETE FROM delivery WHERE grp = ?1 AND off = ?2");

	sqlite3_bind_int64(s, 1, grp);
	sqlite3_bind_int64(s, 2, off);
	if (ahead)
		sqlite3_bind_int(s, 3, attempt);
	sq_step(q, s, "cannot store delivery");
}

static void
count_settled(struct sq *q, int64_t grp, int64_t n, int cancelled)
{
	sqlite3_stmt *s = sq_stmt(q, "UPDATE grp SET settled = settled + ?2, "
	    "cancelled = cancelled + ?3, settled_ts = ?4 WHERE id = ?1");

	sqlite3_bind_int64(s, 1, grp);
	sqlite3_bind_int64(s, 2, n);
	sqlite3_bind_int64(s, 3, cancelled ? n : 0);
	sqlite3_bind_int64(s, 4, mq_now());
	sq_step(q, s, "cannot update group");
}

/*
 * mq-send --replace, in the append's transaction: the earlier messages
 * of key (below off) that a group has not handed out, or holds back with
 * no attempt made (delayed, behind its key), are settled as replaced.
 */
void
sq_replace_older(struct sq *q, const struct mq_topic *t, const char *key,
    int64_t off)
{
	struct mq_group *g;
	sqlite3_stmt *s;
	char why[40];
	int64_t *o = NULL;
	int i, j, n, ng;

	snprintf(why, sizeof why, "by #%lld", (long long)off);
	ng = sq_groups(q, t->id, &g);
	for (i = 0; i < ng; i++) {
		s = sq_stmt(q, "SELECT m.off FROM msg m LEFT JOIN delivery d "
		    "ON d.grp = ?2 AND d.off = m.off WHERE m.topic = ?1 AND "
		    "m.key = ?3 AND m.off >= ?4 AND m.off < ?5 AND (d.state IS "
		    "NULL OR (d.state = 0 AND d.attempt = 0)) UNION ALL SELECT "
		    "off FROM delivery WHERE grp = ?2 AND key = ?3 AND "
		    "state = 0 AND attempt = 0 AND off < ?4");
		sqlite3_bind_int64(s, 1, t->id);
		sqlite3_bind_int64(s, 2, g[i].id);
		sqlite3_bind_text(s, 3, key, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 4, g[i].pos);
		sqlite3_bind_int64(s, 5, off);
		for (n = 0; sq_step(q, s, "cannot read messages") == SQLITE_ROW;
		    n++) {
			o = mq_array(o, n + 1, sizeof *o);
			o[n] = sqlite3_column_int64(s, 0);
		}
		sqlite3_reset(s);
		for (j = 0; j < n; j++) {
			settle_row(q, g[i].id, o[j], o[j] >= g[i].pos, 0);
			sq_history(q, g[i].id, o[j], 0, "replaced", why, NULL);
		}
		if (n)
			count_settled(q, g[i].id, n, 0);
	}
	free(o);
	free(g);
}

/* Does what r->act says; returns 1 when that settled the message. */
static int
apply(struct sq *q, const struct mq_mark *m, int64_t grp,
    const struct mq_marked *r, int attempt, const struct sq_by *by)
{
	sqlite3_stmt *s;
	int settled = r->act == MQ_M_DROP || r->act == MQ_M_SKIP;

	if (settled)
		settle_row(q, grp, r->off, r->act == MQ_M_SKIP, attempt);
	else {
		s = sq_stmt(q, r->act == MQ_M_DUE ? "UPDATE delivery SET "
		    "state = 0, due = ?3, consumer = NULL, token = 0 WHERE "
		    "grp = ?1 AND off = ?2" : "INSERT INTO delivery (grp, off, "
		    "state, due, attempt, key) SELECT ?1, ?2, 0, ?3, 0, key "
		    "FROM msg WHERE topic = (SELECT topic FROM grp WHERE "
		    "id = ?1) AND off = ?2");
		sqlite3_bind_int64(s, 1, grp);
		sqlite3_bind_int64(s, 2, r->off);
		sqlite3_bind_int64(s, 3, m->due);
		sq_step(q, s, "cannot store delivery");
	}
	sq_history(q, grp, r->off, attempt, m->op == MQ_CANCEL ? "cancelled" :
	    "rescheduled", m->reason, r->state == MQ_LEASED ? by : NULL);
	return settled;
}

int
sq_mark(struct mq *mq, const struct mq_mark *m, struct mq_marked **out)
{
	struct sq *q = SQ(mq);
	struct mq_topic t;
	struct mq_group *g = NULL, one;
	struct mq_marked *res = NULL, *r;
	struct sq_by by;
	sqlite3_stmt *s;
	int64_t *offs = NULL, missing = 0, settled;
	int i, j, ng, noff, nres = 0, refused = 0, attempt;

	*out = NULL;
	if (m->dry)
		sq_begin_read(q);
	else
		sq_begin(q);
	if ((ng = sq_need(q, m->topic, m->group, &t, &one)) < 0 ||
	    (noff = targets(q, &t, m, &offs, &missing)) <= 0) {
		free(offs);
		sq_rollback(q);
		if (ng >= 0) {
			*out = mq_array(NULL, 1, sizeof **out);
			(*out)[0].off = missing;
			return MQ_E_NOMSG;
		}
		return ng;
	}
	if (m->group) {
		g = mq_array(NULL, 1, sizeof *g);
		g[0] = one;
		ng = 1;
	} else
		ng = sq_groups(q, t.id, &g);
	res = mq_array(NULL, (size_t)ng * noff + 1, sizeof *res);
	for (i = 0; i < ng; i++) {
		settled = 0;
		for (j = 0; j < noff; j++) {
			r = &res[nres++];
			memset(r, 0, sizeof *r);
			snprintf(r->group, sizeof r->group, "%s", g[i].name);
			r->off = offs[j];
			s = sq_stmt(q, "SELECT state, attempt, since, host, pid "
			    "FROM delivery WHERE grp = ? AND off = ?");
			sqlite3_bind_int64(s, 1, g[i].id);
			sqlite3_bind_int64(s, 2, offs[j]);
			r->state = -1;
			attempt = 0;
			memset(&by, 0, sizeof by);
			if (sq_step(q, s, "cannot read deliveries") ==
			    SQLITE_ROW) {
				r->state = sqlite3_column_int(s, 0);
				attempt = sqlite3_column_int(s, 1);
				by.since = sqlite3_column_int64(s, 2);
				sq_copy(s, 3, by.host, sizeof by.host);
				by.pid = sqlite3_column_int64(s, 4);
			}
			sqlite3_reset(s);
			r->act = mq_rule_mark(m->op, r->state,
			    offs[j] >= g[i].pos, m->force);
			refused |= r->act == MQ_M_REFUSE;
			if (r->act > MQ_M_REFUSE && !m->dry && !refused)
				settled += apply(q, m, g[i].id, r, attempt,
				    &by);
			if (r->state < 0)	/* for the caller */
				r->state = offs[j] >= g[i].pos ? MQ_NOT_YET :
				    MQ_DONE;
		}
		if (settled && !m->dry && !refused)
			count_settled(q, g[i].id, settled, 1);
	}
	free(offs);
	free(g);
	*out = res;
	if (m->dry || refused) {
		sq_rollback(q);
		return nres;
	}
	sq_touch(q, t.id);	/* a message due sooner: followers look again */
	sq_commit(q, SQ_DURABLE);
	return nres;
}
