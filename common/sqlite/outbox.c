/*
 * outbox.c: moving rows of an application's outbox into topics (the
 * mover, mq-send --from-outbox, reads them: ../outbox.c).
 *
 * Invariants:
 * - The rows are appended and the source's mark (outbox.moved) raised in
 *   one write transaction: a row is in mq exactly when its id is at or
 *   below the mark.  So rows at or below the mark are skipped, whoever
 *   moved them, and a mover killed at any moment neither loses a row
 *   nor stores one twice, however long it stays down (no dedup window
 *   is relied on).
 * - Movers of one source run one after the other: SQLite has one writer.
 */
#include "sq.h"

int
sq_outbox(struct mq *mq, struct mq_outbox *o)
{
	struct sq *q = SQ(mq);
	sqlite3_stmt *s;
	int64_t moved, n = 0;
	size_t i;
	int rc;

	sq_begin(q);
	s = sq_stmt(q, "SELECT moved FROM outbox WHERE source = ?");
	sqlite3_bind_text(s, 1, o->source, -1, SQLITE_STATIC);
	moved = sq_step(q, s, "cannot read outbox") == SQLITE_ROW ?
	    sqlite3_column_int64(s, 0) : 0;
	sqlite3_reset(s);
	o->moved = moved;
	if (moved > o->seq) {
		sq_rollback(q);
		return MQ_E_BEHIND;
	}
	for (i = 0; i < o->n; i++) {
		o->sent[i].off = o->sent[i].dup = 0;
		if (o->rows[i].id <= moved)
			continue;
		rc = sq_append_tx(q, &o->rows[i].a, &o->rows[i].r, 1,
		    &o->sent[i]);
		if (rc == MQ_E_TOOBIG) {
			sq_rollback(q);
			o->bad = i;
			o->max_size = o->rows[i].a.max_size;
			return rc;
		}
		n++;
	}
	if (n == 0) {
		sq_rollback(q);
		return 0;
	}
	o->moved = o->rows[o->n - 1].id;
	s = sq_stmt(q, "INSERT INTO outbox (source, moved, rows, ts) "
	    "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (source) DO UPDATE SET "
	    "moved = max(moved, ?2), rows = rows + ?3, ts = ?4");
	sqlite3_bind_text(s, 1, o->source, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, o->moved);
	sqlite3_bind_int64(s, 3, n);
	sqlite3_bind_int64(s, 4, mq_now());
	sq_step(q, s, "cannot store outbox mark");
	sq_commit(q, SQ_DURABLE);
	return 0;
}
