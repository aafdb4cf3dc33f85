/*
 * store.c: the storage layer.  Every SQL statement of mq is in this file
 * (and the schema and pragmas in db.c); the rest of the library and the
 * programs see only the C functions below, so another backend can stand
 * behind the same interface.
 *
 * Invariants:
 * - Functions that write assume the caller holds the write lock
 *   (mq_begin); they never begin or commit themselves.
 * - topic.next_off, msgs, bytes and last_ts change only through
 *   mq_store_append and mq_topic_save_counts under that lock, so offsets are
 *   dense and unique whatever the number of writers.
 * - A statement is prepared once per connection and reset before reuse
 *   (mq_stmt); strings returned are the caller's to free.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db.h"

enum {
	S_TOPIC_GET, S_TOPIC_ADD, S_TOPIC_SAVE, S_TOPIC_EACH,
	S_GROUP_GET, S_GROUP_ADD, S_GROUP_SAVE, S_GROUP_EACH,
	S_APPEND, S_DUE, S_DUE_ORDERED, S_NEW, S_KEY_BUSY, S_DLV_GET,
	S_DLV_PUT, S_DLV_DEL, S_MSG, S_HISTORY, S_CONS_ADD, S_CONS_DEL,
	S_CONS_SEEN, S_CONS_ON, S_RELEASE_HIST, S_RELEASE, S_EXTEND_CONS, S_NEXT_DUE,
	S_TOPIC_SET, S_GSTATS, S_GSTATS_OLDEST, S_GCOUNT,
	S_READ, S_READ_KEY, S_TS_AT, S_COUNT_RANGE, S_CANCEL_FROM, S_CANCEL_BELOW,
	S_COUNT_FROM, S_COUNT_BELOW,
	S_REDRIVE_HIST, S_REDRIVE, S_HIST_EACH,
	S_SETTLED, S_RANGE_SIZE, S_DEL_MSG, S_DEL_DLV, S_DEL_HIST, S_BUMP_POS,
	S_TOPIC_SHRINK, S_DEL_DEAD, S_DEL_DEAD_G, S_CNT_DEAD, S_CNT_DEAD_G,
	S_FIRST_STORED, S_CONS_OF, S_DEDUP_GET, S_DEDUP_PUT, S_DEDUP_EXPIRE,
	S_CLAIMABLE, S_GSTATS_DELAYED, S_RANGE_SETTLED, S_DEL_SETTLED,
	S_DEL_HIST_GONE, S_GAP, S_DEDUP_COUNT,
	S_LAST
};

_Static_assert(S_LAST <= MQ_NSTMT, "too many statements for struct mq");

static char *
col_text(sqlite3_stmt *s, int i)
{
	const unsigned char *t = sqlite3_column_text(s, i);

	return t ? mq_memdup(t, sqlite3_column_bytes(s, i)) : NULL;
}

static void
col_copy(sqlite3_stmt *s, int i, char *buf, size_t len)
{
	const unsigned char *t = sqlite3_column_text(s, i);

	snprintf(buf, len, "%s", t ? (const char *)t : "");
}

/*
 * Runs a query of one integer result with up to three integer parameters
 * (the rest unbound); returns it, or dflt for no row or NULL.
 */
static int64_t
one_int(struct mq *q, int slot, const char *sql, int64_t dflt, int nargs,
    int64_t a, int64_t b, int64_t c)
{
	sqlite3_stmt *s = mq_stmt(q, slot, sql);
	int64_t v = dflt;

	if (nargs > 0)
		sqlite3_bind_int64(s, 1, a);
	if (nargs > 1)
		sqlite3_bind_int64(s, 2, b);
	if (nargs > 2)
		sqlite3_bind_int64(s, 3, c);
	if (mq_step(q, s, "cannot read database") == SQLITE_ROW &&
	    sqlite3_column_type(s, 0) != SQLITE_NULL)
		v = sqlite3_column_int64(s, 0);
	sqlite3_reset(s);
	return v;
}

/*
 * Steps a statement that either counts (dry: SELECT count(*) ...) or
 * changes (DELETE/UPDATE ...) the same rows; returns the count either way.
 */
static int64_t
count_or_change(struct mq *q, sqlite3_stmt *s, int dry, const char *what)
{
	int64_t n = 0;

	if (mq_step(q, s, what) == SQLITE_ROW && dry)
		n = sqlite3_column_int64(s, 0);
	else if (!dry)
		n = sqlite3_changes(q->db);
	sqlite3_reset(s);
	return n;
}

/* topics */

#define TOPIC_COLS "id, name, created, next_off, last_ts, msgs, bytes, " \
	"coalesce(retention, -1), dedup_window, max_size, gap_below"

static void
topic_row(sqlite3_stmt *s, struct mq_topic *t)
{
	t->id = sqlite3_column_int64(s, 0);
	col_copy(s, 1, t->name, sizeof t->name);
	t->created = sqlite3_column_int64(s, 2);
	t->next_off = sqlite3_column_int64(s, 3);
	t->last_ts = sqlite3_column_int64(s, 4);
	t->msgs = sqlite3_column_int64(s, 5);
	t->bytes = sqlite3_column_int64(s, 6);
	t->retention = sqlite3_column_int64(s, 7);
	t->dedup_window = sqlite3_column_int64(s, 8);
	t->max_size = sqlite3_column_int64(s, 9);
	t->gap_below = sqlite3_column_int64(s, 10);
}

int
mq_topic_get(struct mq *q, const char *name, struct mq_topic *t)
{
	sqlite3_stmt *s = mq_stmt(q, S_TOPIC_GET,
	    "SELECT " TOPIC_COLS " FROM topic WHERE name = ?");
	int found;

	sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
	if ((found = mq_step(q, s, "cannot read topic") == SQLITE_ROW))
		topic_row(s, t);
	sqlite3_reset(s);
	return found;
}

void
mq_topic_ensure(struct mq *q, const char *name, struct mq_topic *t)
{
	sqlite3_stmt *s;

	if (mq_topic_get(q, name, t))
		return;
	s = mq_stmt(q, S_TOPIC_ADD,
	    "INSERT INTO topic (name, created) VALUES (?, ?)");
	sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, mq_now());
	mq_step(q, s, "cannot create topic");
	if (!mq_topic_get(q, name, t))
		mq_die(MQ_EX_SOFTWARE, "topic %s vanished", name);
}

void
mq_topic_save_counts(struct mq *q, const struct mq_topic *t)
{
	sqlite3_stmt *s = mq_stmt(q, S_TOPIC_SAVE,
	    "UPDATE topic SET next_off = ?, last_ts = ?, msgs = ?, bytes = ? "
	    "WHERE id = ?");

	sqlite3_bind_int64(s, 1, t->next_off);
	sqlite3_bind_int64(s, 2, t->last_ts);
	sqlite3_bind_int64(s, 3, t->msgs);
	sqlite3_bind_int64(s, 4, t->bytes);
	sqlite3_bind_int64(s, 5, t->id);
	mq_step(q, s, "cannot update topic");
}

void
mq_topic_each(struct mq *q, void (*fn)(const struct mq_topic *, void *),
    void *arg)
{
	sqlite3_stmt *s = mq_stmt(q, S_TOPIC_EACH,
	    "SELECT " TOPIC_COLS " FROM topic ORDER BY name");
	struct mq_topic t;

	while (mq_step(q, s, "cannot read topics") == SQLITE_ROW) {
		topic_row(s, &t);
		fn(&t, arg);
	}
}

/* groups */

#define GROUP_COLS "id, topic, name, created, pos, lease, max_attempts, " \
	"backoff, ordered, settled, delivered, failed, deadlettered"

static void
group_row(sqlite3_stmt *s, struct mq_group *g)
{
	g->id = sqlite3_column_int64(s, 0);
	g->topic = sqlite3_column_int64(s, 1);
	col_copy(s, 2, g->name, sizeof g->name);
	g->created = sqlite3_column_int64(s, 3);
	g->pos = sqlite3_column_int64(s, 4);
	g->lease = sqlite3_column_int64(s, 5);
	g->max_attempts = sqlite3_column_int(s, 6);
	col_copy(s, 7, g->backoff, sizeof g->backoff);
	g->ordered = sqlite3_column_int(s, 8);
	g->settled = sqlite3_column_int64(s, 9);
	g->delivered = sqlite3_column_int64(s, 10);
	g->failed = sqlite3_column_int64(s, 11);
	g->deadlettered = sqlite3_column_int64(s, 12);
}

int
mq_group_get(struct mq *q, const struct mq_topic *t, const char *name,
    struct mq_group *g)
{
	sqlite3_stmt *s = mq_stmt(q, S_GROUP_GET,
	    "SELECT " GROUP_COLS " FROM grp WHERE topic = ? AND name = ?");
	int found;

	sqlite3_bind_int64(s, 1, t->id);
	sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
	if ((found = mq_step(q, s, "cannot read group") == SQLITE_ROW))
		group_row(s, g);
	sqlite3_reset(s);
	return found;
}

void
mq_group_create(struct mq *q, const struct mq_topic *t, const char *name,
    int latest, struct mq_group *g)
{
	sqlite3_stmt *s = mq_stmt(q, S_GROUP_ADD,
	    "INSERT INTO grp (topic, name, created, pos) VALUES (?, ?, ?, ?)");
	int64_t first;

	sqlite3_bind_int64(s, 1, t->id);
	sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, mq_now());
	sqlite3_bind_int64(s, 4, latest || !(first = mq_store_first_off(q, t)) ?
	    t->next_off : first);
	mq_step(q, s, "cannot create group");
	if (!mq_group_get(q, t, name, g))
		mq_die(MQ_EX_SOFTWARE, "group %s vanished", name);
}

void
mq_group_save(struct mq *q, const struct mq_group *g)
{
	sqlite3_stmt *s = mq_stmt(q, S_GROUP_SAVE,
	    "UPDATE grp SET pos = ?, lease = ?, max_attempts = ?, backoff = ?, "
	    "ordered = ?, settled = ?, delivered = ?, failed = ?, "
	    "deadlettered = ? WHERE id = ?");

	sqlite3_bind_int64(s, 1, g->pos);
	sqlite3_bind_int64(s, 2, g->lease);
	sqlite3_bind_int(s, 3, g->max_attempts);
	sqlite3_bind_text(s, 4, g->backoff, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 5, g->ordered);
	sqlite3_bind_int64(s, 6, g->settled);
	sqlite3_bind_int64(s, 7, g->delivered);
	sqlite3_bind_int64(s, 8, g->failed);
	sqlite3_bind_int64(s, 9, g->deadlettered);
	sqlite3_bind_int64(s, 10, g->id);
	mq_step(q, s, "cannot update group");
}

void
mq_group_each(struct mq *q, const struct mq_topic *t,
    void (*fn)(const struct mq_group *, void *), void *arg)
{
	sqlite3_stmt *s = mq_stmt(q, S_GROUP_EACH,
	    "SELECT " GROUP_COLS " FROM grp WHERE topic = ? ORDER BY name");
	struct mq_group g;

	sqlite3_bind_int64(s, 1, t->id);
	while (mq_step(q, s, "cannot read groups") == SQLITE_ROW) {
		group_row(s, &g);
		fn(&g, arg);
	}
}

/* messages */

/*
 * Appends a message and returns its offset.  With a dedup id seen inside
 * the topic's window, stores nothing and returns the offset it was first
 * stored at, with *dup set.
 */
int64_t
mq_store_append(struct mq *q, struct mq_topic *t, int64_t now, int64_t due,
    const char *key, const char *dedup, const void *body, size_t len, int *dup)
{
	sqlite3_stmt *s;
	int64_t off = t->next_off, ts = now > t->last_ts ? now : t->last_ts;

	*dup = 0;
	if (dedup) {
		s = mq_stmt(q, S_DEDUP_GET, "SELECT off FROM dedup "
		    "WHERE topic = ? AND id = ? AND ts > ?");
		sqlite3_bind_int64(s, 1, t->id);
		sqlite3_bind_text(s, 2, dedup, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 3, now - t->dedup_window);
		if (mq_step(q, s, "cannot read dedup ids") == SQLITE_ROW) {
			off = sqlite3_column_int64(s, 0);
			sqlite3_reset(s);
			*dup = 1;
			return off;
		}
		s = mq_stmt(q, S_DEDUP_PUT, "INSERT OR REPLACE INTO dedup "
		    "(topic, id, off, ts) VALUES (?, ?, ?, ?)");
		sqlite3_bind_int64(s, 1, t->id);
		sqlite3_bind_text(s, 2, dedup, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 3, off);
		sqlite3_bind_int64(s, 4, now);
		mq_step(q, s, "cannot store dedup id");
	}
	s = mq_stmt(q, S_APPEND,
	    "INSERT INTO msg (topic, off, ts, due, key, body) "
	    "VALUES (?, ?, ?, ?, ?, ?)");
	sqlite3_bind_int64(s, 1, t->id);
	sqlite3_bind_int64(s, 2, off);
	sqlite3_bind_int64(s, 3, ts);
	sqlite3_bind_int64(s, 4, due > ts ? due : ts);
	if (key)
		sqlite3_bind_text(s, 5, key, -1, SQLITE_STATIC);
	sqlite3_bind_blob64(s, 6, len ? body : "", len, SQLITE_STATIC);
	mq_step(q, s, "cannot store message");
	t->next_off = off + 1;
	t->last_ts = ts;
	t->msgs++;
	t->bytes += len;
	return off;
}

/* Forgets dedup ids older than the topic's window; returns how many. */
int64_t
mq_store_dedup_expire(struct mq *q, const struct mq_topic *t, int64_t now,
    int dry)
{
	sqlite3_stmt *s = dry ? mq_stmt(q, S_DEDUP_COUNT,
	    "SELECT count(*) FROM dedup WHERE topic = ? AND ts <= ?") :
	    mq_stmt(q, S_DEDUP_EXPIRE,
	    "DELETE FROM dedup WHERE topic = ? AND ts <= ?");

	sqlite3_bind_int64(s, 1, t->id);
	sqlite3_bind_int64(s, 2, now - t->dedup_window);
	return count_or_change(q, s, dry, "cannot expire dedup ids");
}

/* A row of "SELECT off, ts, due, key, body FROM msg". */
static void
msg_row(sqlite3_stmt *s, struct mq_msg *m)
{
	m->off = sqlite3_column_int64(s, 0);
	m->ts = sqlite3_column_int64(s, 1);
	m->due = sqlite3_column_int64(s, 2);
	m->key = col_text(s, 3);
	m->len = sqlite3_column_bytes(s, 4);
	m->body = (unsigned char *)mq_memdup(sqlite3_column_blob(s, 4), m->len);
}

int
mq_store_msg(struct mq *q, int64_t topic, int64_t off, struct mq_msg *m)
{
	sqlite3_stmt *s = mq_stmt(q, S_MSG,
	    "SELECT off, ts, due, key, body FROM msg WHERE topic = ? AND off = ?");
	int found;

	sqlite3_bind_int64(s, 1, topic);
	sqlite3_bind_int64(s, 2, off);
	if ((found = mq_step(q, s, "cannot read message") == SQLITE_ROW))
		msg_row(s, m);
	sqlite3_reset(s);
	return found;
}

void
mq_msg_free(struct mq_msg *m)
{
	free(m->key);
	free(m->body);
	m->key = NULL;
	m->body = NULL;
}

/* deliveries */

#define DLV_COLS "grp, off, state, due, attempt, expired, token, " \
	"coalesce(consumer, 0), key"

static void
dlv_row(sqlite3_stmt *s, struct mq_delivery *d)
{
	d->grp = sqlite3_column_int64(s, 0);
	d->off = sqlite3_column_int64(s, 1);
	d->state = sqlite3_column_int(s, 2);
	d->due = sqlite3_column_int64(s, 3);
	d->attempt = sqlite3_column_int(s, 4);
	d->expired = sqlite3_column_int(s, 5);
	d->token = (uint32_t)sqlite3_column_int64(s, 6);
	d->consumer = sqlite3_column_int64(s, 7);
	d->key = col_text(s, 8);
}

void
mq_delivery_free(struct mq_delivery *d)
{
	free(d->key);
	d->key = NULL;
}

/*
 * Deliveries of a group that are due: waiting ones whose time came and
 * leases that ran out.  In an ordered group a keyed delivery is due only
 * when no earlier unsettled delivery has its key.
 */
int
mq_store_due(struct mq *q, const struct mq_group *g, int64_t now,
    struct mq_delivery *out, int max)
{
	sqlite3_stmt *s;
	int n = 0;

	if (g->ordered)
		s = mq_stmt(q, S_DUE_ORDERED,
		    "SELECT " DLV_COLS " FROM delivery d "
		    "WHERE grp = ?1 AND state < 2 AND due <= ?2 AND (key IS NULL "
		    "OR NOT EXISTS (SELECT 1 FROM delivery e WHERE e.grp = ?1 "
		    "AND e.key = d.key AND e.off < d.off AND e.state < 2)) "
		    "ORDER BY due, off LIMIT ?3");
	else
		s = mq_stmt(q, S_DUE,
		    "SELECT " DLV_COLS " FROM delivery "
		    "WHERE grp = ?1 AND state < 2 AND due <= ?2 "
		    "ORDER BY due, off LIMIT ?3");
	sqlite3_bind_int64(s, 1, g->id);
	sqlite3_bind_int64(s, 2, now);
	sqlite3_bind_int(s, 3, max);
	while (n < max && mq_step(q, s, "cannot read deliveries") == SQLITE_ROW)
		dlv_row(s, &out[n++]);
	sqlite3_reset(s);
	return n;
}

/* Messages from offset `from` on, as fresh deliveries (state -1). */
int
mq_store_new(struct mq *q, const struct mq_group *g, int64_t from,
    int64_t upto, struct mq_delivery *out, int max)
{
	sqlite3_stmt *s = mq_stmt(q, S_NEW,
	    "SELECT off, due, key FROM msg WHERE topic = ? AND off >= ? "
	    "AND off < ? ORDER BY off LIMIT ?");
	int n = 0;

	sqlite3_bind_int64(s, 1, g->topic);
	sqlite3_bind_int64(s, 2, from);
	sqlite3_bind_int64(s, 3, upto);
	sqlite3_bind_int(s, 4, max);
	while (n < max && mq_step(q, s, "cannot read messages") == SQLITE_ROW) {
		memset(&out[n], 0, sizeof out[n]);
		out[n].grp = g->id;
		out[n].off = sqlite3_column_int64(s, 0);
		out[n].due = sqlite3_column_int64(s, 1);
		out[n].key = col_text(s, 2);
		out[n].state = -1;
		n++;
	}
	sqlite3_reset(s);
	return n;
}

/*
 * The next moment after `now` a waiting delivery or a lease of the group
 * falls due.  Rows due already but not claimable wait behind their key and
 * move only when another delivery settles, which is a commit.
 */
int64_t
mq_store_next_due(struct mq *q, const struct mq_group *g, int64_t now)
{
	return one_int(q, S_NEXT_DUE, "SELECT min(due) FROM delivery "
	    "WHERE grp = ? AND state < 2 AND due > ?", INT64_MAX, 2, g->id,
	    now, 0);
}

int
mq_store_key_busy(struct mq *q, const struct mq_group *g, const char *key)
{
	sqlite3_stmt *s = mq_stmt(q, S_KEY_BUSY,
	    "SELECT 1 FROM delivery WHERE grp = ? AND key = ? AND state < 2 "
	    "LIMIT 1");
	int busy;

	sqlite3_bind_int64(s, 1, g->id);
	sqlite3_bind_text(s, 2, key, -1, SQLITE_STATIC);
	busy = mq_step(q, s, "cannot read deliveries") == SQLITE_ROW;
	sqlite3_reset(s);
	return busy;
}

int
mq_store_delivery_get(struct mq *q, int64_t grp, int64_t off,
    struct mq_delivery *d)
{
	sqlite3_stmt *s = mq_stmt(q, S_DLV_GET,
	    "SELECT " DLV_COLS " FROM delivery WHERE grp = ? AND off = ?");
	int found;

	sqlite3_bind_int64(s, 1, grp);
	sqlite3_bind_int64(s, 2, off);
	if ((found = mq_step(q, s, "cannot read delivery") == SQLITE_ROW))
		dlv_row(s, d);
	sqlite3_reset(s);
	return found;
}

void
mq_store_delivery_put(struct mq *q, const struct mq_delivery *d,
    const char *reason)
{
	sqlite3_stmt *s = mq_stmt(q, S_DLV_PUT,
	    "INSERT OR REPLACE INTO delivery (grp, off, state, due, attempt, "
	    "expired, token, consumer, key, reason) "
	    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");

	sqlite3_bind_int64(s, 1, d->grp);
	sqlite3_bind_int64(s, 2, d->off);
	sqlite3_bind_int(s, 3, d->state);
	sqlite3_bind_int64(s, 4, d->due);
	sqlite3_bind_int(s, 5, d->attempt);
	sqlite3_bind_int(s, 6, d->expired);
	sqlite3_bind_int64(s, 7, d->token);
	if (d->consumer)
		sqlite3_bind_int64(s, 8, d->consumer);
	if (d->key)
		sqlite3_bind_text(s, 9, d->key, -1, SQLITE_STATIC);
	if (reason)
		sqlite3_bind_text(s, 10, reason, -1, SQLITE_STATIC);
	mq_step(q, s, "cannot store delivery");
}

void
mq_store_delivery_del(struct mq *q, int64_t grp, int64_t off)
{
	sqlite3_stmt *s = mq_stmt(q, S_DLV_DEL,
	    "DELETE FROM delivery WHERE grp = ? AND off = ?");

	sqlite3_bind_int64(s, 1, grp);
	sqlite3_bind_int64(s, 2, off);
	mq_step(q, s, "cannot delete delivery");
}

void
mq_store_history(struct mq *q, int64_t grp, int64_t off, int attempt,
    const char *event, int64_t consumer, const char *reason)
{
	sqlite3_stmt *s = mq_stmt(q, S_HISTORY,
	    "INSERT INTO history (grp, off, ts, attempt, event, host, pid, "
	    "reason) VALUES (?1, ?2, ?3, ?4, ?5, "
	    "coalesce((SELECT host FROM consumer WHERE id = ?6), ?7), "
	    "coalesce((SELECT pid FROM consumer WHERE id = ?6), ?8), ?9)");

	sqlite3_bind_int64(s, 1, grp);
	sqlite3_bind_int64(s, 2, off);
	sqlite3_bind_int64(s, 3, mq_now());
	sqlite3_bind_int(s, 4, attempt);
	sqlite3_bind_text(s, 5, event, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 6, consumer);
	sqlite3_bind_text(s, 7, mq_hostname(), -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 8, getpid());
	if (reason)
		sqlite3_bind_text(s, 9, reason, -1, SQLITE_STATIC);
	mq_step(q, s, "cannot record history");
}

/* consumers */

int64_t
mq_store_consumer_add(struct mq *q, const struct mq_consumer *c)
{
	sqlite3_stmt *s = mq_stmt(q, S_CONS_ADD,
	    "INSERT INTO consumer (grp, host, boot, pid, start, since, seen) "
	    "VALUES (?, ?, ?, ?, ?, ?, ?)");

	sqlite3_bind_int64(s, 1, c->grp);
	sqlite3_bind_text(s, 2, c->host, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, c->boot, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 4, c->pid);
	sqlite3_bind_int64(s, 5, c->start);
	sqlite3_bind_int64(s, 6, c->since);
	sqlite3_bind_int64(s, 7, c->seen);
	mq_step(q, s, "cannot register consumer");
	return sqlite3_last_insert_rowid(q->db);
}

void
mq_store_consumer_del(struct mq *q, int64_t id)
{
	sqlite3_stmt *s = mq_stmt(q, S_CONS_DEL,
	    "DELETE FROM consumer WHERE id = ?");

	sqlite3_bind_int64(s, 1, id);
	mq_step(q, s, "cannot remove consumer");
}

void
mq_store_consumer_seen(struct mq *q, int64_t id, int64_t now)
{
	sqlite3_stmt *s = mq_stmt(q, S_CONS_SEEN,
	    "UPDATE consumer SET seen = ? WHERE id = ?");

	sqlite3_bind_int64(s, 1, now);
	sqlite3_bind_int64(s, 2, id);
	mq_step(q, s, "cannot update consumer");
}

int
mq_store_consumers_on(struct mq *q, const char *host, struct mq_consumer **out)
{
	sqlite3_stmt *s = mq_stmt(q, S_CONS_ON,
	    "SELECT id, grp, host, boot, pid, start, since, seen FROM consumer "
	    "WHERE host = ?");
	struct mq_consumer *c = NULL;
	int n = 0;

	sqlite3_bind_text(s, 1, host, -1, SQLITE_STATIC);
	while (mq_step(q, s, "cannot read consumers") == SQLITE_ROW) {
		c = mq_array(c, n + 1, sizeof *c);
		c[n].id = sqlite3_column_int64(s, 0);
		c[n].grp = sqlite3_column_int64(s, 1);
		col_copy(s, 2, c[n].host, sizeof c[n].host);
		col_copy(s, 3, c[n].boot, sizeof c[n].boot);
		c[n].pid = sqlite3_column_int64(s, 4);
		c[n].start = sqlite3_column_int64(s, 5);
		c[n].since = sqlite3_column_int64(s, 6);
		c[n].seen = sqlite3_column_int64(s, 7);
		n++;
	}
	*out = c;
	return n;
}

/* Leases of a consumer that is gone go back to waiting, due now. */
int
mq_store_release(struct mq *q, int64_t consumer, int64_t now)
{
	sqlite3_stmt *s = mq_stmt(q, S_RELEASE_HIST,
	    "INSERT INTO history (grp, off, ts, attempt, event, host, pid, "
	    "reason) SELECT d.grp, d.off, ?2, d.attempt, 'released', c.host, "
	    "c.pid, 'consumer gone' FROM delivery d JOIN consumer c "
	    "ON c.id = d.consumer WHERE d.consumer = ?1 AND d.state = 1");

	sqlite3_bind_int64(s, 1, consumer);
	sqlite3_bind_int64(s, 2, now);
	mq_step(q, s, "cannot release leases");
	s = mq_stmt(q, S_RELEASE,
	    "UPDATE delivery SET state = 0, due = ?2, consumer = NULL "
	    "WHERE consumer = ?1 AND state = 1");
	sqlite3_bind_int64(s, 1, consumer);
	sqlite3_bind_int64(s, 2, now);
	mq_step(q, s, "cannot release leases");
	return sqlite3_changes(q->db);
}

/* Pushes the end of every lease a consumer holds to at least `due`. */
int
mq_store_extend_consumer(struct mq *q, int64_t consumer, int64_t due)
{
	sqlite3_stmt *s = mq_stmt(q, S_EXTEND_CONS,
	    "UPDATE delivery SET due = ?2 WHERE consumer = ?1 AND state = 1 "
	    "AND due < ?2");

	sqlite3_bind_int64(s, 1, consumer);
	sqlite3_bind_int64(s, 2, due);
	mq_step(q, s, "cannot extend leases");
	return sqlite3_changes(q->db);
}

/* administration */

void
mq_topic_set(struct mq *q, const struct mq_topic *t)
{
	sqlite3_stmt *s = mq_stmt(q, S_TOPIC_SET,
	    "UPDATE topic SET retention = ?, dedup_window = ?, max_size = ? "
	    "WHERE id = ?");

	if (t->retention >= 0)
		sqlite3_bind_int64(s, 1, t->retention);
	sqlite3_bind_int64(s, 2, t->dedup_window);
	sqlite3_bind_int64(s, 3, t->max_size);
	sqlite3_bind_int64(s, 4, t->id);
	mq_step(q, s, "cannot update topic");
}

static void
exec_bound(struct mq *q, const char *sql, int64_t id, const char *what)
{
	sqlite3_stmt *s;

	if (sqlite3_prepare_v2(q->db, sql, -1, &s, NULL) != SQLITE_OK)
		mq_dbdie(q, what);
	sqlite3_bind_int64(s, 1, id);
	if (sqlite3_step(s) != SQLITE_DONE) {
		sqlite3_finalize(s);
		mq_dbdie(q, what);
	}
	sqlite3_finalize(s);
}

void
mq_group_delete(struct mq *q, const struct mq_group *g)
{
	static const char *sql[] = {
		"DELETE FROM delivery WHERE grp = ?",
		"DELETE FROM history WHERE grp = ?",
		"DELETE FROM consumer WHERE grp = ?",
		"DELETE FROM grp WHERE id = ?",
	};
	size_t i;

	for (i = 0; i < sizeof sql / sizeof *sql; i++)
		exec_bound(q, sql[i], g->id, "cannot delete group");
}

void
mq_topic_delete(struct mq *q, const struct mq_topic *t)
{
	static const char *sql[] = {
		"DELETE FROM delivery WHERE grp IN "
		    "(SELECT id FROM grp WHERE topic = ?1)",
		"DELETE FROM history WHERE grp IN "
		    "(SELECT id FROM grp WHERE topic = ?1)",
		"DELETE FROM consumer WHERE grp IN "
		    "(SELECT id FROM grp WHERE topic = ?1)",
		"DELETE FROM grp WHERE topic = ?1",
		"DELETE FROM dedup WHERE topic = ?1",
		"DELETE FROM msg WHERE topic = ?1",
		"DELETE FROM topic WHERE id = ?1",
	};
	size_t i;

	for (i = 0; i < sizeof sql / sizeof *sql; i++)
		exec_bound(q, sql[i], t->id, "cannot delete topic");
}

/*
 * A group's state, from its cursor and its delivery rows only: the cost
 * follows the number of unsettled deliveries, not the size of the log.
 */
void
mq_group_stats(struct mq *q, const struct mq_topic *t,
    const struct mq_group *g, int64_t now, struct mq_gstats *st)
{
	sqlite3_stmt *s = mq_stmt(q, S_GSTATS,
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
	if (mq_step(q, s, "cannot read deliveries") == SQLITE_ROW) {
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
		st->pending += mq_store_count_range(q, t, g->pos, t->gap_below);
	if (st->pending) {
		int64_t delayed = 0;

		s = mq_stmt(q, S_GSTATS_DELAYED,
		    "SELECT count(*) FROM msg INDEXED BY msg_delayed "
		    "WHERE topic = ? AND off >= ? AND due > ts AND due > ?");
		sqlite3_bind_int64(s, 1, t->id);
		sqlite3_bind_int64(s, 2, g->pos);
		sqlite3_bind_int64(s, 3, now);
		if (mq_step(q, s, "cannot count messages") == SQLITE_ROW)
			delayed = sqlite3_column_int64(s, 0);
		sqlite3_reset(s);
		st->pending -= delayed < st->pending ? delayed : st->pending;
		st->delayed += delayed;
	}
	st->lag = st->pending + st->inflight + st->expired + st->retrying +
	    st->waiting;

	/* the oldest due and unsettled message: a delivery row or pending */
	st->oldest_ts = 0;
	off = st->oldest_off;
	if (st->pending && (!off || g->pos < off))
		off = g->pos;
	if (off) {
		s = mq_stmt(q, S_GSTATS_OLDEST,
		    "SELECT off, ts FROM msg WHERE topic = ?1 AND off >= ?2 "
		    "AND NOT (due > ts AND due > ?3 AND off >= ?4) "
		    "ORDER BY off LIMIT 1");
		sqlite3_bind_int64(s, 1, t->id);
		sqlite3_bind_int64(s, 2, off);
		sqlite3_bind_int64(s, 3, now);
		sqlite3_bind_int64(s, 4, g->pos);
		if (mq_step(q, s, "cannot read messages") == SQLITE_ROW) {
			st->oldest_off = sqlite3_column_int64(s, 0);
			st->oldest_ts = sqlite3_column_int64(s, 1);
		}
		sqlite3_reset(s);
	}
	s = mq_stmt(q, S_GCOUNT, "SELECT count(*) FROM consumer WHERE grp = ?");
	sqlite3_bind_int64(s, 1, g->id);
	if (mq_step(q, s, "cannot read consumers") == SQLITE_ROW)
		st->consumers = sqlite3_column_int64(s, 0);
	sqlite3_reset(s);
}

/* reading the log */

/*
 * Messages with from <= off <= to (and the key, if given), in offset
 * order, at most max.  An index seek, then a range scan.
 */
int
mq_store_read(struct mq *q, const struct mq_topic *t, int64_t from, int64_t to,
    const char *key, struct mq_msg *out, int max)
{
	sqlite3_stmt *s;
	int n = 0;

	if (key)
		s = mq_stmt(q, S_READ_KEY,
		    "SELECT off, ts, due, key, body FROM msg WHERE topic = ?1 "
		    "AND key = ?4 AND off >= ?2 AND off <= ?3 ORDER BY off "
		    "LIMIT ?5");
	else
		s = mq_stmt(q, S_READ,
		    "SELECT off, ts, due, key, body FROM msg WHERE topic = ?1 "
		    "AND off >= ?2 AND off <= ?3 ORDER BY off LIMIT ?5");
	sqlite3_bind_int64(s, 1, t->id);
	sqlite3_bind_int64(s, 2, from);
	sqlite3_bind_int64(s, 3, to);
	if (key)
		sqlite3_bind_text(s, 4, key, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 5, max);
	while (n < max && mq_step(q, s, "cannot read messages") == SQLITE_ROW) {
		memset(&out[n], 0, sizeof out[n]);
		msg_row(s, &out[n++]);
	}
	sqlite3_reset(s);
	return n;
}

/* The first stored offset >= off, with its time; 0 if none. */
static int64_t
next_stored(struct mq *q, const struct mq_topic *t, int64_t off, int64_t *ts)
{
	sqlite3_stmt *s = mq_stmt(q, S_TS_AT,
	    "SELECT off, ts FROM msg WHERE topic = ? AND off >= ? "
	    "ORDER BY off LIMIT 1");
	int64_t found = 0;

	sqlite3_bind_int64(s, 1, t->id);
	sqlite3_bind_int64(s, 2, off);
	if (mq_step(q, s, "cannot read messages") == SQLITE_ROW) {
		found = sqlite3_column_int64(s, 0);
		*ts = sqlite3_column_int64(s, 1);
	}
	sqlite3_reset(s);
	return found;
}

/*
 * The first offset whose message time is >= ts (next_off if none).  Times
 * never decrease along offsets (mq_store_append), so this is a binary
 * search of point lookups: no index on time is needed.
 */
int64_t
mq_store_offset_at(struct mq *q, const struct mq_topic *t, int64_t ts)
{
	int64_t lo = 1, hi = t->next_off, mid, off, mts;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		off = next_stored(q, t, mid, &mts);
		if (!off) {
			hi = mid;
		} else if (mts >= ts) {
			hi = mid;
		} else {
			lo = off + 1;
		}
	}
	return lo;
}

int64_t
mq_store_count_range(struct mq *q, const struct mq_topic *t, int64_t from,
    int64_t to)
{
	return one_int(q, S_COUNT_RANGE, "SELECT count(*) FROM msg "
	    "WHERE topic = ? AND off >= ? AND off < ?", 0, 3, t->id, from, to);
}

/*
 * Moving a group: deliveries at or after `off` (all states) are dropped
 * when rewinding; deliveries before `off` that are not dead letters are
 * dropped when skipping ahead.  With dry set, only counts.
 */
int64_t
mq_store_cancel(struct mq *q, const struct mq_group *g, int64_t off,
    int below, int dry)
{
	static const char *sql[2][2] = {
		{ "DELETE FROM delivery WHERE grp = ? AND off >= ?",
		  "SELECT count(*) FROM delivery WHERE grp = ? AND off >= ?" },
		{ "DELETE FROM delivery WHERE grp = ? AND off < ? AND state < 2",
		  "SELECT count(*) FROM delivery WHERE grp = ? AND off < ? "
		  "AND state < 2" },
	};
	static const int slot[2][2] = {
		{ S_CANCEL_FROM, S_COUNT_FROM }, { S_CANCEL_BELOW, S_COUNT_BELOW },
	};
	sqlite3_stmt *s;

	below = !!below;
	dry = !!dry;
	s = mq_stmt(q, slot[below][dry], sql[below][dry]);
	sqlite3_bind_int64(s, 1, g->id);
	sqlite3_bind_int64(s, 2, off);
	return count_or_change(q, s, dry, "cannot cancel deliveries");
}

/*
 * Dead letters of a group (all, or the one at off) go back to waiting,
 * due now, with their attempts reset.
 */
int64_t
mq_store_redrive(struct mq *q, const struct mq_group *g, int64_t off,
    int64_t now)
{
	sqlite3_stmt *s = mq_stmt(q, S_REDRIVE_HIST,
	    "INSERT INTO history (grp, off, ts, attempt, event, host, pid) "
	    "SELECT grp, off, ?3, attempt, 'redriven', ?4, ?5 FROM delivery "
	    "WHERE grp = ?1 AND state = 2 AND (?2 = 0 OR off = ?2)");

	sqlite3_bind_int64(s, 1, g->id);
	sqlite3_bind_int64(s, 2, off);
	sqlite3_bind_int64(s, 3, now);
	sqlite3_bind_text(s, 4, mq_hostname(), -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 5, getpid());
	mq_step(q, s, "cannot redrive");
	s = mq_stmt(q, S_REDRIVE,
	    "UPDATE delivery SET state = 0, due = ?3, attempt = 0, expired = 0, "
	    "reason = NULL, consumer = NULL "
	    "WHERE grp = ?1 AND state = 2 AND (?2 = 0 OR off = ?2)");
	sqlite3_bind_int64(s, 1, g->id);
	sqlite3_bind_int64(s, 2, off);
	sqlite3_bind_int64(s, 3, now);
	mq_step(q, s, "cannot redrive");
	return sqlite3_changes(q->db);
}

void
mq_store_history_each(struct mq *q, int64_t grp, int64_t off,
    void (*fn)(const struct mq_event *, void *), void *arg)
{
	sqlite3_stmt *s = mq_stmt(q, S_HIST_EACH,
	    "SELECT ts, attempt, event, coalesce(host, ''), coalesce(pid, 0), "
	    "reason FROM history WHERE grp = ? AND off = ? ORDER BY rowid");
	struct mq_event e;

	sqlite3_bind_int64(s, 1, grp);
	sqlite3_bind_int64(s, 2, off);
	while (mq_step(q, s, "cannot read history") == SQLITE_ROW) {
		e.ts = sqlite3_column_int64(s, 0);
		e.attempt = sqlite3_column_int(s, 1);
		e.event = (const char *)sqlite3_column_text(s, 2);
		e.host = (const char *)sqlite3_column_text(s, 3);
		e.pid = sqlite3_column_int64(s, 4);
		e.reason = (const char *)sqlite3_column_text(s, 5);
		fn(&e, arg);
	}
}

/* retention */

/*
 * Every offset below the returned one has been handed out to every group
 * of the topic (the lowest position); those of them without a delivery
 * row in any group are settled by all.  A topic without groups has
 * nothing handed out: 0.
 */
int64_t
mq_store_handed_out(struct mq *q, const struct mq_topic *t)
{
	return one_int(q, S_SETTLED, "SELECT min(pos) FROM grp WHERE topic = ?",
	    0, 1, t->id, 0, 0);
}

/* The lowest stored offset, 0 if the topic is empty. */
int64_t
mq_store_first_off(struct mq *q, const struct mq_topic *t)
{
	return one_int(q, S_FIRST_STORED, "SELECT min(off) FROM msg "
	    "WHERE topic = ?", 0, 1, t->id, 0, 0);
}

/*
 * "No group holds this message": no delivery row for it in any group of
 * the topic, dead letters of group ?4 (-1: of every group) not counted.
 */
#define UNHELD "NOT EXISTS (SELECT 1 FROM delivery d WHERE d.grp IN " \
	"(SELECT id FROM grp WHERE topic = ?1) AND d.off = msg.off AND " \
	"NOT (d.state = 2 AND (?4 = -1 OR ?4 = d.grp)))"

/*
 * Count and body bytes of the messages with lo <= off < hi; with settled,
 * only those no group holds (see UNHELD; skip_dead as its ?4).
 */
void
mq_store_range_size(struct mq *q, const struct mq_topic *t, int64_t lo,
    int64_t hi, int settled, int64_t skip_dead, int64_t *n, int64_t *bytes)
{
	sqlite3_stmt *s = settled ?
	    mq_stmt(q, S_RANGE_SETTLED, "SELECT count(*), "
	    "coalesce(sum(length(body)), 0) FROM msg WHERE topic = ?1 "
	    "AND off >= ?2 AND off < ?3 AND " UNHELD) :
	    mq_stmt(q, S_RANGE_SIZE, "SELECT count(*), "
	    "coalesce(sum(length(body)), 0) FROM msg WHERE topic = ?1 "
	    "AND off >= ?2 AND off < ?3");

	*n = *bytes = 0;
	sqlite3_bind_int64(s, 1, t->id);
	sqlite3_bind_int64(s, 2, lo);
	sqlite3_bind_int64(s, 3, hi);
	if (settled)
		sqlite3_bind_int64(s, 4, skip_dead);
	if (mq_step(q, s, "cannot count messages") == SQLITE_ROW) {
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

/*
 * Deletes the messages with lo <= off < hi and their history, and keeps
 * the topic's counters.  With settled, only those no group holds;
 * otherwise all of them, with their deliveries of every state, and groups
 * still before hi move up to it.  One call is one short piece of a purge:
 * the caller holds the write lock for just this range.
 */
void
mq_store_purge_range(struct mq *q, struct mq_topic *t, int64_t lo, int64_t hi,
    int settled, int64_t *n, int64_t *bytes)
{
	sqlite3_stmt *s;

	mq_store_range_size(q, t, lo, hi, settled, 0, n, bytes);
	if (*n == 0 && settled)
		return;
	if (settled) {
		s = mq_stmt(q, S_DEL_SETTLED, "DELETE FROM msg WHERE topic = ?1 "
		    "AND off >= ?2 AND off < ?3 AND " UNHELD);
		bind3(s, t->id, lo, hi);
		sqlite3_bind_int64(s, 4, 0);
		mq_step(q, s, "cannot delete messages");
		s = mq_stmt(q, S_GAP, "UPDATE topic SET gap_below = ?3 "
		    "WHERE id = ?1 AND gap_below < ?3");
		bind3(s, t->id, lo, hi);
		mq_step(q, s, "cannot update topic");
		s = mq_stmt(q, S_DEL_HIST_GONE, "DELETE FROM history WHERE grp "
		    "IN (SELECT id FROM grp WHERE topic = ?1) AND off >= ?2 AND "
		    "off < ?3 AND NOT EXISTS (SELECT 1 FROM msg WHERE "
		    "topic = ?1 AND msg.off = history.off)");
		bind3(s, t->id, lo, hi);
		mq_step(q, s, "cannot delete history");
	} else {
		s = mq_stmt(q, S_DEL_MSG,
		    "DELETE FROM msg WHERE topic = ?1 AND off >= ?2 AND off < ?3");
		bind3(s, t->id, lo, hi);
		mq_step(q, s, "cannot delete messages");
		s = mq_stmt(q, S_DEL_DLV,
		    "DELETE FROM delivery WHERE grp IN (SELECT id FROM grp "
		    "WHERE topic = ?1) AND off >= ?2 AND off < ?3");
		bind3(s, t->id, lo, hi);
		mq_step(q, s, "cannot delete deliveries");
		s = mq_stmt(q, S_DEL_HIST,
		    "DELETE FROM history WHERE grp IN (SELECT id FROM grp "
		    "WHERE topic = ?1) AND off >= ?2 AND off < ?3");
		bind3(s, t->id, lo, hi);
		mq_step(q, s, "cannot delete history");
		s = mq_stmt(q, S_BUMP_POS,	/* never past the end */
		    "UPDATE grp SET pos = min(?3, (SELECT next_off FROM topic "
		    "WHERE id = ?1)) WHERE topic = ?1 AND pos < ?3");
		bind3(s, t->id, lo, hi);
		mq_step(q, s, "cannot update groups");
	}
	s = mq_stmt(q, S_TOPIC_SHRINK,
	    "UPDATE topic SET msgs = max(msgs - ?2, 0), bytes = max(bytes - ?3, 0) "
	    "WHERE id = ?1");
	bind3(s, t->id, *n, *bytes);
	mq_step(q, s, "cannot update topic");
	t->msgs -= *n;
	t->bytes -= *bytes;
}

/* Drops (or with dry, counts) dead letters of a topic, or of one group. */
int64_t
mq_store_drop_dead(struct mq *q, const struct mq_topic *t,
    const struct mq_group *g, int dry)
{
	sqlite3_stmt *s;

	if (g && dry)
		s = mq_stmt(q, S_CNT_DEAD_G, "SELECT count(*) FROM delivery "
		    "WHERE grp = ?1 AND state = 2");
	else if (g)
		s = mq_stmt(q, S_DEL_DEAD_G,
		    "DELETE FROM delivery WHERE grp = ?1 AND state = 2");
	else if (dry)
		s = mq_stmt(q, S_CNT_DEAD, "SELECT count(*) FROM delivery "
		    "WHERE grp IN (SELECT id FROM grp WHERE topic = ?1) "
		    "AND state = 2");
	else
		s = mq_stmt(q, S_DEL_DEAD, "DELETE FROM delivery WHERE grp IN "
		    "(SELECT id FROM grp WHERE topic = ?1) AND state = 2");
	sqlite3_bind_int64(s, 1, g ? g->id : t->id);
	return count_or_change(q, s, dry, "cannot drop dead letters");
}

/* Reclaims free pages and truncates the WAL.  Outside any transaction. */
void
mq_store_vacuum(struct mq *q)
{
	if (sqlite3_exec(q->db, "PRAGMA wal_checkpoint(TRUNCATE); VACUUM; "
	    "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL) != SQLITE_OK)
		mq_dbdie(q, "cannot vacuum");
}

/* The consumers of a group, each with the number of leases it holds. */
int
mq_store_consumers_of(struct mq *q, int64_t grp, struct mq_consumer **out,
    int64_t **held)
{
	sqlite3_stmt *s = mq_stmt(q, S_CONS_OF,
	    "SELECT c.id, c.grp, c.host, c.boot, c.pid, c.start, c.since, "
	    "c.seen, (SELECT count(*) FROM delivery d WHERE d.consumer = c.id "
	    "AND d.state = 1) FROM consumer c WHERE c.grp = ? ORDER BY c.id");
	struct mq_consumer *c = NULL;
	int64_t *h = NULL;
	int n = 0;

	sqlite3_bind_int64(s, 1, grp);
	while (mq_step(q, s, "cannot read consumers") == SQLITE_ROW) {
		c = mq_array(c, n + 1, sizeof *c);
		h = mq_array(h, n + 1, sizeof *h);
		c[n].id = sqlite3_column_int64(s, 0);
		c[n].grp = sqlite3_column_int64(s, 1);
		col_copy(s, 2, c[n].host, sizeof c[n].host);
		col_copy(s, 3, c[n].boot, sizeof c[n].boot);
		c[n].pid = sqlite3_column_int64(s, 4);
		c[n].start = sqlite3_column_int64(s, 5);
		c[n].since = sqlite3_column_int64(s, 6);
		c[n].seen = sqlite3_column_int64(s, 7);
		h[n] = sqlite3_column_int64(s, 8);
		n++;
	}
	*out = c;
	*held = h;
	return n;
}

/*
 * Whether a claim could find something: a delivery due, or a message at or
 * after the group's position.  A read, so idle consumers need not take the
 * write lock to learn there is nothing (it may say yes for an ordered
 * group whose due rows all wait behind their keys).
 */
int
mq_store_claimable(struct mq *q, const struct mq_group *g, int64_t now)
{
	sqlite3_stmt *s = mq_stmt(q, S_CLAIMABLE,
	    "SELECT EXISTS (SELECT 1 FROM delivery WHERE grp = ?1 AND state < 2 "
	    "AND due <= ?2) OR EXISTS (SELECT 1 FROM msg WHERE topic = ?3 "
	    "AND off >= ?4)");
	int yes = 1;

	sqlite3_bind_int64(s, 1, g->id);
	sqlite3_bind_int64(s, 2, now);
	sqlite3_bind_int64(s, 3, g->topic);
	sqlite3_bind_int64(s, 4, g->pos);
	if (mq_step(q, s, "cannot read deliveries") == SQLITE_ROW)
		yes = sqlite3_column_int(s, 0);
	sqlite3_reset(s);
	return yes;
}
