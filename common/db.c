/*
 * db.c: finding, opening, creating and migrating the database, and
 * transactions.
 *
 * Invariants:
 * - The file is ours when PRAGMA application_id is MQ_APPID; its
 *   user_version is the schema version.  An empty file (no tables) is new
 *   and gets schema.sql.  Anything else is refused before a byte is written.
 * - Creation and migration run inside BEGIN IMMEDIATE and check the version
 *   again under the lock, so concurrent first writers create it once.
 * - Every write transaction starts with BEGIN IMMEDIATE: a deferred one that
 *   upgrades to a write can get SQLITE_BUSY that no busy timeout waits out.
 *   Busy past the timeout (MQ_BUSY_TIMEOUT, default 5s) exits 75 with the
 *   transaction rolled back, so nothing is half done.
 * - The journal is WAL, synchronous FULL unless MQ_SYNC=normal: a COMMIT
 *   that returned is on disk.  Closing does not checkpoint (see mq_open),
 *   so the -wal and -shm files stay beside the database.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "db.h"
#include "schema.h"	/* schema_sql[], SCHEMA_VERSION: made from schema.sql */

#define MQ_APPID	0x6D712020

/*
 * Upgrade steps: migrations[v - 1] takes a version v database to v + 1.
 * A step may not be edited once released; add a new one.
 */
static const char *migrations[] = {
	/* 1 -> 2: delivery counters per group, an index of delayed messages */
	"ALTER TABLE grp ADD COLUMN delivered INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE grp ADD COLUMN failed INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE grp ADD COLUMN deadlettered INTEGER NOT NULL DEFAULT 0;"
	"CREATE INDEX msg_delayed ON msg (topic, off) WHERE due > ts;"
	"ALTER TABLE topic ADD COLUMN gap_below INTEGER NOT NULL DEFAULT 0;",
};
_Static_assert(sizeof migrations / sizeof *migrations == SCHEMA_VERSION - 1,
    "one migration step per schema version");

int
mq_schema_version(void)
{
	return SCHEMA_VERSION;
}

static int
status_of(int rc, int eno)
{
	switch (rc & 0xff) {
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return MQ_EX_TEMPFAIL;
	case SQLITE_READONLY:
	case SQLITE_PERM:
	case SQLITE_AUTH:
		return MQ_EX_NOPERM;
	case SQLITE_CANTOPEN:
		if (eno == EACCES || eno == EPERM || eno == EROFS)
			return MQ_EX_NOPERM;
		if (eno == ENOENT || eno == ENOTDIR)
			return MQ_EX_NOINPUT;
		return MQ_EX_IOERR;
	case SQLITE_IOERR:
	case SQLITE_FULL:
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
	case SQLITE_PROTOCOL:
		return MQ_EX_IOERR;
	case SQLITE_TOOBIG:
	case SQLITE_MISMATCH:
		return MQ_EX_DATAERR;
	case SQLITE_NOMEM:
	default:
		return MQ_EX_SOFTWARE;
	}
}

void
mq_dbdie(struct mq *q, const char *what)
{
	int rc = sqlite3_extended_errcode(q->db);
	int eno = sqlite3_system_errno(q->db);
	const char *msg = sqlite3_errmsg(q->db);

	if ((rc & 0xff) == SQLITE_BUSY)
		msg = "database is busy (locked by another process); try again";
	if ((rc & 0xff) == SQLITE_CANTOPEN && eno)
		msg = strerror(eno);
	mq_die(status_of(rc, eno), "%s: %s: %s", what, q->path, msg);
}

sqlite3_stmt *
mq_stmt(struct mq *q, int slot, const char *sql)
{
	sqlite3_stmt *s = q->stmt[slot];

	if (!s) {
		if (sqlite3_prepare_v3(q->db, sql, -1, SQLITE_PREPARE_PERSISTENT,
		    &s, NULL) != SQLITE_OK)
			mq_dbdie(q, "cannot prepare statement");
		q->stmt[slot] = s;
	} else {
		sqlite3_reset(s);
		sqlite3_clear_bindings(s);
	}
	return s;
}

/* Steps once; returns SQLITE_ROW or SQLITE_DONE, dies otherwise. */
int
mq_step(struct mq *q, sqlite3_stmt *s, const char *what)
{
	int rc = sqlite3_step(s);

	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		sqlite3_reset(s);
		mq_dbdie(q, what);
	}
	if (rc == SQLITE_DONE)
		sqlite3_reset(s);
	return rc;
}

static void
exec(struct mq *q, const char *sql, const char *what)
{
	if (sqlite3_exec(q->db, sql, NULL, NULL, NULL) != SQLITE_OK)
		mq_dbdie(q, what);
}

static int64_t
pragma_int(struct mq *q, const char *sql)
{
	sqlite3_stmt *s;
	int64_t v = 0;
	int rc;

	if (sqlite3_prepare_v2(q->db, sql, -1, &s, NULL) != SQLITE_OK)
		mq_dbdie(q, "cannot read database");
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		v = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		mq_dbdie(q, "cannot read database");
	return v;
}

const char *
mq_default_path(void)
{
	static char buf[PATH_MAX];
	const char *env, *home;

	if ((env = getenv("MQ_DB")) && *env)
		return env;
	if ((env = getenv("XDG_DATA_HOME")) && *env)
		snprintf(buf, sizeof buf, "%s/mq/mq.db", env);
	else if ((home = getenv("HOME")) && *home)
		snprintf(buf, sizeof buf, "%s/.local/share/mq/mq.db", home);
	else
		mq_die(MQ_EX_USAGE, "no database: set MQ_DB or HOME, or use -d");
	return buf;
}

/* mkdir -p for the directory of path */
static void
mkparents(const char *path)
{
	char *p = mq_strdup(path), *s;

	for (s = p + 1; (s = strchr(s, '/')); s++) {
		*s = '\0';
		if (mkdir(p, 0777) < 0 && errno != EEXIST)
			mq_die(errno == EACCES ? MQ_EX_NOPERM : MQ_EX_IOERR,
			    "cannot create directory %s:", p);
		*s = '/';
	}
	free(p);
}

static int64_t
busy_timeout(void)
{
	const char *env = getenv("MQ_BUSY_TIMEOUT");
	int64_t ms = 5000;

	if (env && *env && mq_parse_duration(env, &ms) < 0)
		mq_die(MQ_EX_USAGE, "invalid MQ_BUSY_TIMEOUT '%s': want a "
		    "duration such as 5s", env);
	return ms > INT_MAX ? INT_MAX : ms;
}

/*
 * SQLite's own busy handler sleeps longer and longer (up to 100ms a try),
 * so under contention a waiter can lose every race for seconds.  This one
 * retries every 0.2-2ms, at random, until the timeout.
 */
static int
on_busy(void *arg, int count)
{
	struct mq *q = arg;
	struct timespec ts;

	if (count == 0)
		q->busy_since = mq_now();
	else if (mq_now() - q->busy_since >= q->busy_ms)
		return 0;
	ts.tv_sec = 0;
	ts.tv_nsec = 200000 + (long)arc4random_uniform(1800000);
	nanosleep(&ts, NULL);
	return 1;
}

/*
 * WAL mode for a new file.  It cannot change inside a transaction, and
 * while another first writer holds a lock it fails with SQLITE_BUSY without
 * calling the busy handler: retry until the busy timeout.
 */
static void
wal_mode(struct mq *q)
{
	int64_t end = mq_now() + q->busy_ms;
	sqlite3_stmt *s;
	int rc;

	for (;;) {
		if (sqlite3_prepare_v2(q->db, "PRAGMA journal_mode=WAL", -1, &s,
		    NULL) != SQLITE_OK)
			mq_dbdie(q, "cannot set WAL mode");
		rc = sqlite3_step(s);
		sqlite3_finalize(s);
		if (rc == SQLITE_ROW || rc == SQLITE_DONE)
			return;
		if ((rc & 0xff) != SQLITE_BUSY || mq_now() >= end)
			mq_dbdie(q, "cannot set WAL mode");
		usleep(1000 + arc4random_uniform(4000));
	}
}

/*
 * A reader of a WAL file needs the -shm beside it, and SQLite cannot make
 * one in a directory it may not write to.  Such a file with no -wal (a
 * backup, a copy) has nothing uncommitted, and is read as immutable.
 */
static int
readable(struct mq *q)
{
	int rc = sqlite3_exec(q->db, "SELECT 1 FROM sqlite_master LIMIT 1",
	    NULL, NULL, NULL);

	return (rc & 0xff) != SQLITE_READONLY && (rc & 0xff) != SQLITE_CANTOPEN;
}

static void
reopen_immutable(struct mq *q)
{
	char *wal, *uri, *u;
	const char *p;
	struct stat st;
	size_t n = strlen(q->path);

	wal = mq_alloc(n + 5);
	snprintf(wal, n + 5, "%s-wal", q->path);
	if (stat(wal, &st) == 0 && st.st_size > 0) {
		free(wal);
		return;		/* it has a WAL to read: let the error stand */
	}
	free(wal);
	u = uri = mq_alloc(3 * n + 32);
	u += sprintf(u, "file:");
	for (p = q->path; *p; p++)
		if (*p == '%' || *p == '?' || *p == '#')
			u += sprintf(u, "%%%02X", (unsigned char)*p);
		else
			*u++ = *p;
	strcpy(u, "?immutable=1");
	sqlite3_close(q->db);
	if (sqlite3_open_v2(uri, &q->db, SQLITE_OPEN_READONLY |
	    SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
		mq_dbdie(q, "cannot open database");
	free(uri);
	sqlite3_extended_result_codes(q->db, 1);
}

static void
create_or_migrate(struct mq *q)
{
	int64_t v, tables;
	int i;

	mq_begin(q);
	v = pragma_int(q, "PRAGMA user_version");
	tables = pragma_int(q, "SELECT count(*) FROM sqlite_master");
	if (v == 0 && tables == 0) {
		exec(q, schema_sql, "cannot create schema");
	} else {
		for (i = (int)v; i < SCHEMA_VERSION; i++)
			exec(q, migrations[i - 1], "cannot migrate schema");
	}
	if (v != SCHEMA_VERSION) {
		char sql[64];

		snprintf(sql, sizeof sql, "PRAGMA user_version = %d",
		    SCHEMA_VERSION);
		exec(q, sql, "cannot migrate schema");
	}
	mq_commit(q);
}

struct mq *
mq_open(const char *path, int mode)
{
	struct mq *q = mq_alloc(sizeof *q);
	struct stat st;
	int64_t appid, v, tables;
	int flags, rc;
	const char *sync;

	if (!path)
		path = mq_default_path();
	/* settings first: a usage error touches nothing */
	q->busy_ms = busy_timeout();
	sync = getenv("MQ_SYNC");
	if (sync && *sync && strcmp(sync, "full") && strcmp(sync, "normal"))
		mq_die(MQ_EX_USAGE, "invalid MQ_SYNC '%s': want full or normal",
		    sync);
	q->path = mq_strdup(path);
	q->mode = mode;
	if (stat(path, &st) < 0) {
		if (errno != ENOENT)
			mq_die(errno == EACCES ? MQ_EX_NOPERM : MQ_EX_IOERR,
			    "cannot open database %s:", path);
		if (mode != MQ_WRITE)
			mq_die(MQ_EX_NOINPUT, "cannot open database %s: "
			    "no such file", path);
		mkparents(path);
	} else if (!S_ISREG(st.st_mode)) {
		mq_die(MQ_EX_DATAERR, "cannot open database %s: not a regular "
		    "file", path);
	}
	if (mode == MQ_UPDATE)
		q->mode = mode = MQ_WRITE;	/* it exists: from here, a writer */

	flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE;
	flags |= mode != MQ_READ ?
	    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY;
	rc = sqlite3_open_v2(path, &q->db, flags, NULL);
	if (rc != SQLITE_OK) {
		if (!q->db)
			mq_die(MQ_EX_SOFTWARE, "cannot open database %s: out of "
			    "memory", path);
		mq_dbdie(q, "cannot open database");
	}
	sqlite3_extended_result_codes(q->db, 1);
	/*
	 * Most mq programs run for one transaction.  Were the last one to
	 * close to checkpoint the WAL into the database, each would pay two
	 * more fsyncs; the WAL is checkpointed as it fills instead
	 * (wal_autocheckpoint), and mq-purge --vacuum truncates it.
	 */
	sqlite3_db_config(q->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
	sqlite3_busy_handler(q->db, on_busy, q);
	if (mode == MQ_READ && !readable(q))
		reopen_immutable(q);

	/* one snapshot, so a file being created meanwhile reads consistently */
	exec(q, "BEGIN", "cannot read database");
	appid = pragma_int(q, "PRAGMA application_id");
	v = pragma_int(q, "PRAGMA user_version");
	tables = pragma_int(q, "SELECT count(*) FROM sqlite_master");
	exec(q, "COMMIT", "cannot read database");
	if (appid != MQ_APPID && !(appid == 0 && v == 0 && tables == 0))
		mq_die(MQ_EX_DATAERR, "cannot open database %s: not an mq "
		    "database (application_id %#llx)", path,
		    (unsigned long long)appid);
	if (v > SCHEMA_VERSION)
		mq_die(MQ_EX_DATAERR, "cannot open database %s: schema "
		    "version %lld is newer than this mq (%d); upgrade mq",
		    path, (long long)v, SCHEMA_VERSION);

	q->sync_normal = sync && !strcmp(sync, "normal");
	q->sync_now = !q->sync_normal;
	exec(q, q->sync_normal ?
	    "PRAGMA synchronous=NORMAL" : "PRAGMA synchronous=FULL",
	    "cannot set up database");
	exec(q, "PRAGMA cache_size=-16384", "cannot set up database");

	if (v < SCHEMA_VERSION) {
		if (mode == MQ_READ && tables == 0)
			mq_die(MQ_EX_NOINPUT, "database %s is empty", path);
		if (mode == MQ_READ) {
			/* an older file: upgrade it through a writable handle */
			sqlite3_close(q->db);
			free(q->path);
			free(q);
			mq_close(mq_open(path, MQ_WRITE));
			return mq_open(path, MQ_READ);
		}
		if (tables == 0)
			wal_mode(q);
		create_or_migrate(q);
	}
	return q;
}

void
mq_close(struct mq *q)
{
	int i;

	if (!q)
		return;
	for (i = 0; i < MQ_NSTMT; i++)
		sqlite3_finalize(q->stmt[i]);
	sqlite3_finalize(q->dv);
	sqlite3_close(q->db);
	free(q->path);
	free(q);
}

const char *
mq_path(struct mq *q)
{
	return q->path;
}

void
mq_begin(struct mq *q)
{
	if (sqlite3_exec(q->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
		mq_dbdie(q, "cannot start write");
	q->in_tx = 1;
}

void
mq_begin_read(struct mq *q)
{
	exec(q, "BEGIN", "cannot start read");
	q->in_tx = 1;
}

void
mq_commit(struct mq *q)
{
	if (sqlite3_exec(q->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
		mq_dbdie(q, "cannot commit");
	q->in_tx = 0;
}

void
mq_rollback(struct mq *q)
{
	if (q->in_tx)
		sqlite3_exec(q->db, "ROLLBACK", NULL, NULL, NULL);
	q->in_tx = 0;
}

/*
 * Whether the next commits sync (FULL) or leave the sync to a later commit
 * (NORMAL: in WAL mode a later synced commit covers the earlier frames).
 * MQ_SYNC=normal keeps NORMAL throughout.
 */
void
mq_sync(struct mq *q, int full)
{
	full = full && !q->sync_normal;
	if (full == q->sync_now)
		return;
	exec(q, full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL",
	    "cannot set synchronous");
	q->sync_now = full;
}

int64_t
mq_data_version(struct mq *q)
{
	int64_t v = 0;
	int rc;

	if (!q->dv && sqlite3_prepare_v3(q->db, "PRAGMA data_version", -1,
	    SQLITE_PREPARE_PERSISTENT, &q->dv, NULL) != SQLITE_OK)
		mq_dbdie(q, "cannot read database");
	rc = sqlite3_step(q->dv);
	if (rc == SQLITE_ROW)
		v = sqlite3_column_int64(q->dv, 0);
	sqlite3_reset(q->dv);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		mq_dbdie(q, "cannot read database");
	return v;
}
