/*
 * outbox.c: moving rows of an application's outbox into topics on
 * PostgreSQL (the mover, mq-send --from-outbox, reads them: ../outbox.c).
 *
 * Invariants:
 * - The rows are stored and the source's mark (outbox.moved) raised in
 *   one transaction, as on SQLite (../sqlite/outbox.c): a row is in mq
 *   exactly when its id is at or below the mark.
 * - The source's row is locked first (FOR UPDATE), so movers of one
 *   outbox go one at a time and the second sees the first's mark; then
 *   the topics of the batch, in order of name, as every append locks its
 *   topic: two movers of batches with the same topics never deadlock.
 * - Each row goes through send() (send.sql), the function applications
 *   call in their own transactions: one way to append a single message.
 */
#include <stdlib.h>
#include <string.h>

#include "pg.h"

/*
 * The topics' max-size, locked in order of name, for the rows above the
 * mark (those below it are in mq already, whatever a topic's max-size
 * has become since); 0 or PG_RETRY.
 */
static int
lock_topics(struct pgq *q, struct mq_outbox *o, int64_t moved)
{
	struct pg_arr names = { 0 };
	PGresult *r;
	int64_t max;
	size_t i;
	int k;

	for (i = 0; i < o->n; i++)
		if (o->rows[i].id > moved)
			pg_arr_str(&names, o->rows[i].a.topic);
	r = pg_q(q, "cannot read topics", "SELECT name, max_size FROM topic "
	    "WHERE name = ANY($1::text[]) ORDER BY name FOR UPDATE", 1,
	    pg_arr_end(&names));
	pg_arr_free(&names);
	if (!r)
		return PG_RETRY;
	for (i = 0; i < o->n; i++) {
		if (o->rows[i].id <= moved)
			continue;
		max = MQ_DEFAULT_MAX_SIZE;	/* a topic made on first send */
		for (k = 0; k < PQntuples(r); k++)
			if (!strcmp(PQgetvalue(r, k, 0), o->rows[i].a.topic))
				max = pg_get(r, k, 1);
		if (o->rows[i].r.len > (size_t)max) {
			PQclear(r);
			pg_rollback(q);
			o->bad = i;
			o->max_size = max;
			return MQ_E_TOOBIG;
		}
	}
	PQclear(r);
	return 0;
}

/* One row through send(); 0 or PG_RETRY. */
static int
send_row(struct pgq *q, const struct mq_outrow *w, struct mq_sent *out)
{
	const char *v[7];
	int len[7] = { 0 }, fmt[7] = { 0 };
	PGresult *r;

	v[0] = w->a.topic;
	v[1] = w->r.len ? w->r.body : "";
	len[1] = (int)w->r.len;
	fmt[1] = 1;
	v[2] = w->a.key;
	v[3] = w->a.delay >= 0 ? pg_int(q, w->a.delay) : NULL;
	v[4] = w->a.at >= 0 ? pg_int(q, w->a.at) : NULL;
	v[5] = w->r.dedup;
	v[6] = w->a.ttl ? pg_int(q, w->a.ttl) : NULL;
	TRY(r, pg_runc(q, "SELECT send($1, $2::bytea, $3, $4::bigint * "
	    "interval '1 millisecond', to_timestamp($5::bigint / 1000.0), $6, "
	    "$7::bigint * interval '1 millisecond')", 7, v, len, fmt,
	    "cannot store message"));
	out->off = pg_get(r, 0, 0);
	PQclear(r);
	return 0;
}

static int
move(struct pgq *q, struct mq_outbox *o)
{
	PGresult *r;
	int64_t moved, n = 0;
	size_t i;
	int rc;

	pg_begin(q);
	TRY(r, pg_q(q, "cannot store outbox mark", "INSERT INTO outbox "
	    "(source, moved, ts) VALUES ($1, 0, $2) ON CONFLICT (source) DO "
	    "NOTHING", 2, o->source, pg_int(q, pg_now())));
	PQclear(r);
	TRY(r, pg_q(q, "cannot read outbox", "SELECT moved FROM outbox "
	    "WHERE source = $1 FOR UPDATE", 1, o->source));
	moved = o->moved = pg_get(r, 0, 0);
	PQclear(r);
	if (moved > o->seq) {
		pg_rollback(q);
		return MQ_E_BEHIND;
	}
	if ((rc = lock_topics(q, o, moved)) != 0)
		return rc;
	for (i = 0; i < o->n; i++) {
		o->sent[i].off = o->sent[i].dup = 0;
		if (o->rows[i].id <= moved)
			continue;
		if (send_row(q, &o->rows[i], &o->sent[i]) == PG_RETRY)
			return PG_RETRY;
		n++;
	}
	if (n == 0) {
		pg_rollback(q);
		return 0;
	}
	o->moved = o->rows[o->n - 1].id;
	TRY(r, pg_q(q, "cannot store outbox mark", "UPDATE outbox SET "
	    "moved = greatest(moved, $2), rows = rows + $3, ts = $4 "
	    "WHERE source = $1", 4, o->source, pg_int(q, o->moved),
	    pg_int(q, n), pg_int(q, pg_now())));
	PQclear(r);
	return pg_commit(q);
}

int
pg_outbox(struct mq *mq, struct mq_outbox *o)
{
	const char *source = o->source;
	int utf8 = mq_utf8_valid((const unsigned char *)source, strlen(source));
	char *src = pg_text_form(mq_strdup(source));
	size_t i;
	int rc;

	/* the source's path need not be UTF-8, nor then the ids the rows
	   get from it (an id a row gave is UTF-8: one that is not is such
	   an id) */
	o->source = src;
	for (i = 0; !utf8 && i < o->n; i++)
		if (o->rows[i].r.dedup && !mq_utf8_valid((const unsigned char *)
		    o->rows[i].r.dedup, strlen(o->rows[i].r.dedup)))
			o->rows[i].r.dedup =
			    pg_text_form((char *)o->rows[i].r.dedup);
	while ((rc = move(PGQ(mq), o)) == PG_RETRY)
		;
	o->source = source;
	free(src);
	return rc;
}
