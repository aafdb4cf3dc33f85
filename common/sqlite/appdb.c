/*
 * appdb.c: an application's outbox: the table mq_outbox in the
 * application's own SQLite file (APPDB), not mq's database, whatever
 * backend mq's is.  The mover (../outbox.c) reads rows here, has them
 * stored by the backend (outbox.c beside this file), then deletes them.
 *
 * Invariants:
 * - Ids come from AUTOINCREMENT: never used twice, even after the rows
 *   are deleted, and in SQLite (one writer) they commit in order.  A
 *   plain INTEGER PRIMARY KEY would hand the largest id out again once
 *   its row is deleted, and a new row at or below the mark would be
 *   taken for one moved already and deleted unsent: such a table is
 *   refused.  sqlite_sequence says the largest id ever handed out, so a
 *   file that went back (restored, made again) is told from a live one.
 * - Transactions on APPDB are short (one read of up to a batch, one
 *   delete), so its checkpoints are never starved; the connection is
 *   held between them, never the file (no open() of ours: SQLite's
 *   POSIX locks would go with a close).  A follower waits for the
 *   application's locks as long as they are held (wait_lock).
 * - A row that cannot become a message ends the move before anything of
 *   its batch is stored: one line naming its id, status 65.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "sq.h"

#define TABLE	"mq_outbox"

/* the optional columns, in the order rows are read */
static const char *const optional[] = { "key", "delay", "at", "dedup", "ttl" };
#define NOPT	(sizeof optional / sizeof *optional)

struct mq_appdb {
	sqlite3		*db;
	char		*path, *source;
	sqlite3_stmt	*rows, *seq, *del, *dv;
	int64_t		 version;	/* PRAGMA data_version, last seen */
	int		 patient;	/* waits out locks: wait_lock */
	dev_t		 dev;		/* the file opened (mq_appdb_replaced) */
	ino_t		 ino;
};

/* why: SQLite's message, taken before anything else ran (a ROLLBACK) */
static void __attribute__((noreturn))
die_why(struct mq_appdb *o, int rc, const char *what, const char *why)
{
	if ((rc & 0xff) == SQLITE_BUSY && o->patient && mq_stop)
		exit(mq_finish());	/* see wait_lock */
	if ((rc & 0xff) == SQLITE_NOTADB)	/* bad input, not an I/O error */
		mq_die(MQ_EX_DATAERR, "not an outbox: %s: %s", o->path, why);
	mq_die(sq_status_of(rc, errno), "%s %s: %s", what, o->path, why);
}

static void __attribute__((noreturn))
die(struct mq_appdb *o, int rc, const char *what)
{
	die_why(o, rc, what, sqlite3_errmsg(o->db));
}

static sqlite3_stmt *
prepare(struct mq_appdb *o, const char *sql)
{
	sqlite3_stmt *s;
	int rc;

	if ((rc = sqlite3_prepare_v2(o->db, sql, -1, &s, NULL)) != SQLITE_OK)
		die(o, rc, "cannot read outbox");
	return s;
}

static int
step(struct mq_appdb *o, sqlite3_stmt *s, const char *what)
{
	int rc = sqlite3_step(s);
	char why[256];

	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		snprintf(why, sizeof why, "%s", sqlite3_errmsg(o->db));
		sqlite3_reset(s);
		if (!sqlite3_get_autocommit(o->db))
			sqlite3_exec(o->db, "ROLLBACK", NULL, NULL, NULL);
		die_why(o, rc, what, why);
	}
	return rc;
}

static void
exec(struct mq_appdb *o, const char *sql, const char *what)
{
	int rc;

	if ((rc = sqlite3_exec(o->db, sql, NULL, NULL, NULL)) != SQLITE_OK)
		die(o, rc, what);
}

/*
 * Whether the table is an outbox: AUTOINCREMENT ids, a topic and a body;
 * the optional columns there get read, the others are NULL.  Returns 0
 * when there is no such table.
 */
static int
check(struct mq_appdb *o, char *cols, size_t len)
{
	sqlite3_stmt *s = prepare(o, "SELECT sql FROM sqlite_master WHERE "
	    "type = 'table' AND name = '" TABLE "'");
	const char *sql;
	int found, have = 0, pk = 0;
	size_t i;

	if ((found = step(o, s, "cannot read outbox") == SQLITE_ROW)) {
		sql = (const char *)sqlite3_column_text(s, 0);
		if (!sql || !strcasestr(sql, "autoincrement"))
			mq_die(MQ_EX_DATAERR, "not an outbox: %s: table "
			    TABLE "'s id is not INTEGER PRIMARY KEY "
			    "AUTOINCREMENT", o->path);
	}
	sqlite3_finalize(s);
	if (!found)
		return 0;
	s = prepare(o, "SELECT name, pk FROM pragma_table_info('" TABLE "')");
	snprintf(cols, len, "id, topic, body");
	while (step(o, s, "cannot read outbox") == SQLITE_ROW) {
		const char *c = (const char *)sqlite3_column_text(s, 0);

		if (!strcmp(c, "id"))
			pk = sqlite3_column_int(s, 1) == 1;
		have |= !strcmp(c, "topic") << 0 | !strcmp(c, "body") << 1;
		for (i = 0; i < NOPT; i++)
			if (!strcmp(c, optional[i]))
				have |= 1 << (2 + i);
	}
	sqlite3_finalize(s);
	if (!pk || (have & 3) != 3)
		mq_die(MQ_EX_DATAERR, "not an outbox: %s: table " TABLE " lacks "
		    "%s", o->path, !pk ? "id INTEGER PRIMARY KEY AUTOINCREMENT" :
		    have & 1 ? "a body column" : "a topic column");
	for (i = 0; i < NOPT; i++)
		snprintf(cols + strlen(cols), len - strlen(cols), ", %s%s%s",
		    have & 1 << (2 + i) ? "\"" : "NULL AS \"", optional[i], "\"");
	return 1;
}

/*
 * The busy handler of a follower (patient): it waits out the
 * application's locks however long they are held (the busy timeout
 * would end the service while the application runs a long transaction),
 * until SIGTERM or SIGINT: stopped while waiting, it exits there (step)
 * with what it moved, durable in mq; the rows of those not yet deleted
 * are at or below the mark, for the next mover to delete.
 */
static int
wait_lock(void *arg, int n)
{
	struct timespec ts = { 0, (n < 20 ? 5 : 100) * 1000000L };

	(void)arg;
	if (mq_stop)
		return 0;
	nanosleep(&ts, NULL);
	return !mq_stop;
}

/*
 * Opens APPDB's outbox; with create, makes the file and the table when
 * they are missing (mq-topic outbox-init); patient: a follower's, which
 * waits for locks until a signal (wait_lock).
 */
struct mq_appdb *
mq_appdb_open(const char *path, int create, int patient)
{
	struct mq_appdb *o = mq_alloc(sizeof *o);
	char cols[256], sql[512], real[PATH_MAX];
	struct stat st;
	int rc, there;

	o->path = mq_strdup(path);
	if (!(there = stat(path, &st) == 0) && (errno != ENOENT || !create))
		mq_die(sq_status_of_errno(errno), "cannot open outbox %s:",
		    path);
	if (there && !S_ISREG(st.st_mode))
		mq_die(MQ_EX_DATAERR, "cannot open outbox %s: not a regular "
		    "file", path);
	rc = sqlite3_open_v2(path, &o->db, SQLITE_OPEN_READWRITE |
	    SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE |
	    (create ? SQLITE_OPEN_CREATE : 0), NULL);
	if (!o->db)
		mq_die(MQ_EX_SOFTWARE, "out of memory");
	if (rc != SQLITE_OK)
		die(o, rc, "cannot open outbox");
	sqlite3_busy_timeout(o->db, (int)mq_busy_timeout());
	if ((o->patient = patient))
		sqlite3_busy_handler(o->db, wait_lock, NULL);
	if (!check(o, cols, sizeof cols)) {
		if (!create)
			mq_die(MQ_EX_NOINPUT, "not an outbox: %s: no table "
			    TABLE " (mq-topic outbox-init makes it)", path);
		exec(o, "CREATE TABLE IF NOT EXISTS " TABLE " (\n"
		    "\tid\tINTEGER PRIMARY KEY AUTOINCREMENT,\n"
		    "\ttopic\tTEXT NOT NULL,\n"
		    "\tbody\tBLOB NOT NULL,\n"
		    "\tkey\tTEXT,\n"
		    "\tdelay\tINTEGER,\n"
		    "\tat\tINTEGER,\n"
		    "\tdedup\tTEXT,\n"
		    "\tttl\tINTEGER\n)", "cannot create outbox");
		check(o, cols, sizeof cols);
	}
	if (stat(path, &st) == 0) {	/* there by now */
		o->dev = st.st_dev;
		o->ino = st.st_ino;
	}
	snprintf(sql, sizeof sql, "SELECT %s FROM " TABLE " ORDER BY id "
	    "LIMIT ?", cols);
	o->rows = prepare(o, sql);
	o->seq = prepare(o, "SELECT seq FROM sqlite_sequence WHERE name = '"
	    TABLE "'");
	o->del = prepare(o, "DELETE FROM " TABLE " WHERE id <= ?");
	o->dv = prepare(o, "PRAGMA data_version");
	/* the mark is kept under this name: the host and the file */
	if (!realpath(path, real))
		mq_die(sq_status_of_errno(errno), "cannot open outbox %s:",
		    path);
	o->source = mq_alloc(strlen(mq_hostname()) + strlen(real) + 2);
	sprintf(o->source, "%s:%s", mq_hostname(), real);
	return o;
}

/*
 * Whether another file is at APPDB's path now (moved there: a restore, a
 * deploy): the connection still reads the one it opened, which nobody
 * writes any more.
 */
int
mq_appdb_replaced(struct mq_appdb *o)
{
	struct stat st;

	return stat(o->path, &st) == 0 && (st.st_dev != o->dev ||
	    st.st_ino != o->ino);
}

const char *
mq_appdb_source(struct mq_appdb *o)
{
	return o->source;
}

void
mq_appdb_close(struct mq_appdb *o)
{
	if (!o)
		return;
	sqlite3_finalize(o->rows);
	sqlite3_finalize(o->seq);
	sqlite3_finalize(o->del);
	sqlite3_finalize(o->dv);
	sqlite3_close(o->db);
	free(o->path);
	free(o->source);
	free(o);
}

static void __attribute__((noreturn, format(printf, 3, 4)))
bad(struct mq_appdb *o, int64_t id, const char *fmt, ...)
{
	char why[1200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	sqlite3_reset(o->rows);
	sqlite3_exec(o->db, "ROLLBACK", NULL, NULL, NULL);
	mq_die(MQ_EX_DATAERR, "cannot move outbox %s: row %lld: %s", o->path,
	    (long long)id, why);
}

#define SHOWN	160	/* the bytes of a bad text its line shows */

/* A row's bad text as its line shows it: escaped, cut. */
static const char *
shown(const char *t, char *buf, size_t len)
{
	mq_preview((const unsigned char *)t, strlen(t), SHOWN, buf, len);
	return buf;
}

/*
 * The most milliseconds a row may say (about 285,000 years): what
 * PostgreSQL's interval and timestamp hold, and far from overflowing
 * when added to now (a larger delay was due at once on SQLite).
 */
#define ROW_MS_MAX	9000000000000000LL

/* A column of milliseconds: NULL (-1), a number, or a duration or time. */
static int64_t
ms(struct mq_appdb *o, int64_t id, int col, int time, const char *name)
{
	sqlite3_stmt *s = o->rows;
	const char *t;
	char buf[SHOWN + 1];
	int64_t v;

	switch (sqlite3_column_type(s, col)) {
	case SQLITE_NULL:
		return -1;
	case SQLITE_INTEGER:
		if ((v = sqlite3_column_int64(s, col)) >= 0 && v <= ROW_MS_MAX)
			return v;
		break;
	case SQLITE_TEXT:
		t = (const char *)sqlite3_column_text(s, col);
		if ((time ? mq_parse_time(t, mq_now(), &v) == 0 :
		    mq_parse_duration(t, &v) == 0) && v <= ROW_MS_MAX)
			return v;
		bad(o, id, "invalid %s '%s'", name, shown(t, buf, sizeof buf));
	}
	bad(o, id, "invalid %s: want %s, up to 9e15", name, time ? "ms since "
	    "the epoch or a time" : "ms or a duration");
}

/* The text of a column, checked; NULL for NULL. */
static char *
text(struct mq_appdb *o, int64_t id, int col, const char *name)
{
	const unsigned char *t = sqlite3_column_text(o->rows, col);
	size_t n = sqlite3_column_bytes(o->rows, col);

	if (!t)
		return NULL;
	if (!mq_valid_key(t, n))
		bad(o, id, "invalid %s: want 1-1024 bytes of UTF-8", name);
	return mq_memdup(t, n);
}

static void
row(struct mq_appdb *o, struct mq_outrow *r)
{
	sqlite3_stmt *s = o->rows;
	const char *topic = (const char *)sqlite3_column_text(s, 1);
	const void *body;
	char buf[SHOWN + 1];

	memset(r, 0, sizeof *r);
	r->id = sqlite3_column_int64(s, 0);
	if (!topic || !mq_valid_name(topic))
		bad(o, r->id, "invalid topic '%s'", topic ? shown(topic, buf,
		    sizeof buf) : "NULL");
	if (sqlite3_column_type(s, 2) == SQLITE_NULL)
		bad(o, r->id, "no body (NULL)");
	r->a.topic = mq_strdup(topic);
	r->a.key = text(o, r->id, 3, "key");
	r->a.delay = ms(o, r->id, 4, 0, "delay");
	r->a.at = ms(o, r->id, 5, 1, "at");
	if (r->a.delay >= 0 && r->a.at >= 0)
		bad(o, r->id, "delay and at exclude each other");
	r->r.dedup = text(o, r->id, 6, "dedup");
	if (!r->r.dedup) {	/* the row's own, unique to this outbox */
		snprintf(buf, sizeof buf, "%lld@", (long long)r->id);
		r->r.dedup = mq_alloc(strlen(buf) + strlen(o->source) + 1);
		strcat(strcpy((char *)r->r.dedup, buf), o->source);
	}
	if ((r->a.ttl = ms(o, r->id, 7, 0, "ttl")) == 0)
		bad(o, r->id, "invalid ttl: must be above zero");
	if (r->a.ttl < 0)
		r->a.ttl = 0;	/* the topic's */
	body = sqlite3_column_blob(s, 2);
	r->r.len = sqlite3_column_bytes(s, 2);
	r->r.body = mq_memdup(body ? body : "", r->r.len);
}

/*
 * Up to max rows, of up to about max_bytes of bodies (one at least), in
 * order of id, and the largest id the table has handed out, in one short
 * read.  Returns how many.
 */
int
mq_appdb_read(struct mq_appdb *o, struct mq_outrow *rows, int max,
    size_t max_bytes, int64_t *seq)
{
	size_t bytes = 0;
	int n = 0;

	exec(o, "BEGIN", "cannot read outbox");
	*seq = step(o, o->seq, "cannot read outbox") == SQLITE_ROW ?
	    sqlite3_column_int64(o->seq, 0) : 0;
	sqlite3_reset(o->seq);
	sqlite3_bind_int(o->rows, 1, max);
	while (n < max && bytes < max_bytes &&
	    step(o, o->rows, "cannot read outbox") == SQLITE_ROW) {
		row(o, &rows[n]);
		bytes += rows[n++].r.len;
	}
	sqlite3_reset(o->rows);
	exec(o, "COMMIT", "cannot read outbox");
	return n;
}

/* The largest id handed out, now. */
int64_t
mq_appdb_seq(struct mq_appdb *o)
{
	int64_t seq;

	seq = step(o, o->seq, "cannot read outbox") == SQLITE_ROW ?
	    sqlite3_column_int64(o->seq, 0) : 0;
	sqlite3_reset(o->seq);
	return seq;
}

/* Deletes the rows moved: those at or below the mark. */
void
mq_appdb_delete(struct mq_appdb *o, int64_t upto)
{
	sqlite3_bind_int64(o->del, 1, upto);
	step(o, o->del, "cannot delete from outbox");
	sqlite3_reset(o->del);
}

/* Whether another connection committed to APPDB since the last call. */
int
mq_appdb_changed(struct mq_appdb *o)
{
	int64_t v;

	step(o, o->dv, "cannot read outbox");
	v = sqlite3_column_int64(o->dv, 0);
	sqlite3_reset(o->dv);
	if (v == o->version)
		return 0;
	o->version = v;
	return 1;
}

void
mq_outrows_free(struct mq_outrow *r, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		free((char *)r[i].a.topic);
		free((char *)r[i].a.key);
		free((char *)r[i].r.body);
		free((char *)r[i].r.dedup);
	}
}
