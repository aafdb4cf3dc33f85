/*
 * open.c: opening, creating and migrating the database, statements and
 * transactions: what every operation of the SQLite backend stands on.
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
 * - The journal is WAL.  A write transaction first queues for the
 *   write lock and a durable one ends synced (engine.c: synchronous=NORMAL
 *   and the WAL synced after the lock is let go, one sync for every
 *   commit that finished before it began).  Without the -mq file that
 *   needs, synchronous=FULL syncs each commit; MQ_SYNC=normal syncs only
 *   at checkpoints.  Closing checkpoints only when the WAL has grown
 *   (engine.c: sq_wal_close), and the -wal and -shm files stay beside
 *   the database.
 * - Statements are prepared once per connection, found again by the
 *   address of their text (sq_stmt), and reset before reuse.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sq.h"
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
	/*
	 * 2 -> 3: one history row per ended attempt, appended, keyed for
	 * --trace (no separate index); who delivered the current attempt
	 */
	"ALTER TABLE delivery ADD COLUMN since INTEGER;"
	"ALTER TABLE delivery ADD COLUMN host TEXT;"
	"ALTER TABLE delivery ADD COLUMN pid INTEGER;"
	"CREATE TABLE history3 (grp INTEGER NOT NULL, off INTEGER NOT NULL, "
	"ts INTEGER NOT NULL, n INTEGER NOT NULL, attempt INTEGER NOT NULL, "
	"event TEXT NOT NULL, host TEXT, pid INTEGER, reason TEXT, "
	"since INTEGER, dhost TEXT, dpid INTEGER, "
	"PRIMARY KEY (grp, off, ts, n)) WITHOUT ROWID;"
	"INSERT INTO history3 (grp, off, ts, n, attempt, event, host, pid, "
	"reason) SELECT grp, off, ts, rowid, attempt, event, host, pid, reason "
	"FROM history;"
	"DROP TABLE history;"
	"ALTER TABLE history3 RENAME TO history;"
	"CREATE VIEW events AS "
	"SELECT grp, off, since AS ts, 0 AS k, n, attempt, 'delivered' AS event, "
	"dhost AS host, dpid AS pid, NULL AS reason "
	"FROM history WHERE since IS NOT NULL "
	"UNION ALL SELECT grp, off, ts, 1, n, attempt, event, host, pid, reason "
	"FROM history "
	"UNION ALL SELECT grp, off, since, 0, 0, attempt, 'delivered', host, pid, "
	"NULL FROM delivery WHERE state = 1 AND since IS NOT NULL;",
	/* 3 -> 4: a consumer's handler group */
	"ALTER TABLE consumer ADD COLUMN pgid INTEGER;"
	"ALTER TABLE consumer ADD COLUMN pgstart INTEGER;",
	/*
	 * 4 -> 5: when each group last settled, kept by the statements that
	 * add to settled; until then, the history's last ack says
	 */
	"ALTER TABLE grp ADD COLUMN settled_ts INTEGER;"
	"UPDATE grp SET settled_ts = (SELECT max(ts) FROM history "
	"WHERE history.grp = grp.id AND event = 'acked');",
	/* 5 -> 6: pausing a topic or a group */
	"ALTER TABLE topic ADD COLUMN paused_until INTEGER;"
	"ALTER TABLE grp ADD COLUMN paused_until INTEGER;",
	/* 6 -> 7: a time limit for a group's handlers */
	"ALTER TABLE grp ADD COLUMN timeout INTEGER;",
	/* 7 -> 8: mq-topic cancel */
	"ALTER TABLE grp ADD COLUMN cancelled INTEGER NOT NULL DEFAULT 0;",
	/* 8 -> 9: a time to live */
	"ALTER TABLE topic ADD COLUMN ttl INTEGER;"
	"ALTER TABLE msg ADD COLUMN expires INTEGER;"
	"ALTER TABLE grp ADD COLUMN lapsed INTEGER NOT NULL DEFAULT 0;",
	/* 9 -> 10: message headers; how far each outbox has been moved;
	   idempotent consumption; rate and per-key limits */
	"ALTER TABLE msg ADD COLUMN headers TEXT;"
	"CREATE TABLE outbox (source TEXT PRIMARY KEY, moved INTEGER NOT NULL, "
	"rows INTEGER NOT NULL DEFAULT 0, ts INTEGER NOT NULL) WITHOUT ROWID;"
	"ALTER TABLE msg ADD COLUMN dedup TEXT;"
	"ALTER TABLE grp ADD COLUMN idem TEXT;"
	"ALTER TABLE grp ADD COLUMN idem_window INTEGER NOT NULL "
	"DEFAULT 86400000;"
	"ALTER TABLE grp ADD COLUMN duplicates INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE grp ADD COLUMN rate_n INTEGER;"
	"ALTER TABLE grp ADD COLUMN rate_ms INTEGER;"
	"ALTER TABLE grp ADD COLUMN rate_tat INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE grp ADD COLUMN per_key INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE delivery ADD COLUMN bid TEXT;"
	"CREATE INDEX delivery_bid ON delivery (grp, bid) "
	"WHERE bid IS NOT NULL;"
	"CREATE TABLE consumed (grp INTEGER NOT NULL, bid TEXT NOT NULL, "
	"off INTEGER NOT NULL, ts INTEGER NOT NULL, PRIMARY KEY (grp, bid)) "
	"WITHOUT ROWID;",
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

/* The status for a failed system call on one of the database's files. */
static int
status_of_errno(int eno)
{
	switch (eno) {
	case EACCES:
	case EPERM:
	case EROFS:
		return MQ_EX_NOPERM;
	case ENOENT:
	case ENOTDIR:
		return MQ_EX_NOINPUT;
	default:	/* ENOSPC, EDQUOT, EIO, ... */
		return MQ_EX_IOERR;
	}
}

/*
 * SQLite, refused a file for writing (no space, an I/O error), retries it
 * read-only and keeps the errno of that retry: "no such file" for a
 * -journal or -wal it was making.  The refusal is noted here, through the
 * unix VFS's hook for its open() calls, so that the error can name the
 * file and what the system said.  (One process, no threads: one note.)
 */
static sqlite3_syscall_ptr sys_open;
static char refused[PATH_MAX];
static int refused_errno;

static int
noting_open(const char *path, int flags, int mode)
{
	int fd = ((int (*)(const char *, int, int))sys_open)(path, flags, mode);
	int eno = errno, rw = flags & (O_WRONLY | O_RDWR | O_CREAT);

	if (fd < 0 && rw) {
		refused_errno = eno;
		snprintf(refused, sizeof refused, "%s", path);
	} else if (fd >= 0 && rw && !strcmp(path, refused)) {
		refused_errno = 0;	/* it was made since */
	}
	errno = eno;
	return fd;
}

static void
note_refusals(void)
{
	sqlite3_vfs *vfs = sqlite3_vfs_find(NULL);

	if (sys_open || !vfs || vfs->iVersion < 3 || !vfs->xGetSystemCall)
		return;
	if ((sys_open = vfs->xGetSystemCall(vfs, "open")))
		vfs->xSetSystemCall(vfs, "open",
		    (sqlite3_syscall_ptr)noting_open);
}

/* Ends the program naming the file SQLite was refused, if it was. */
static void
die_refused(const char *what)
{
	if (refused_errno)
		mq_die(status_of_errno(refused_errno), "%s: %s: %s", what,
		    refused, strerror(refused_errno));
}

/*
 * A writer told "read-only" or "cannot open" names the file at fault:
 * the database, its -wal or -shm, or its directory, whichever this user
 * may not write.  Returns 0 when none is.
 */
static int
culprit(struct sq *q, char *buf, size_t len)
{
	static const char *suffix[] = { "", "-wal", "-shm" };
	char *dir = mq_strdup(q->base.path), *slash = strrchr(dir, '/');
	size_t i;
	int found = 0;

	for (i = 0; i < 3 && !found; i++) {
		snprintf(buf, len, "%s%s", q->base.path, suffix[i]);
		found = access(buf, F_OK) == 0 && access(buf, R_OK | W_OK) < 0;
	}
	if (!found) {
		if (slash)
			*(slash == dir ? slash + 1 : slash) = '\0';
		snprintf(buf, len, "%s", slash ? dir : ".");
		found = access(buf, W_OK | X_OK) < 0;
	}
	free(dir);
	return found;
}

void
sq_die(struct sq *q, const char *what)
{
	int rc = sqlite3_extended_errcode(q->db);
	int eno = sqlite3_system_errno(q->db);
	const char *msg = sqlite3_errmsg(q->db);
	char file[PATH_MAX + 8];

	if ((rc & 0xff) == SQLITE_BUSY)
		msg = "database is busy (locked by another process); try again";
	if ((rc & 0xff) == SQLITE_CANTOPEN && eno)
		msg = strerror(eno);
	if (q->mode != MQ_READ && ((rc & 0xff) == SQLITE_READONLY ||
	    (rc & 0xff) == SQLITE_CANTOPEN)) {
		if (culprit(q, file, sizeof file))
			mq_die(MQ_EX_NOPERM, "%s: %s: %s", what, file,
			    strerror(errno));
		/*
		 * Nothing this user may not write: SQLite could not open one
		 * of the files for writing (an I/O error, no space, no inode)
		 * and fell back to reading it.
		 */
		die_refused(what);
		mq_die(MQ_EX_IOERR, "%s: %s: a file of the database could not "
		    "be opened for writing", what, q->base.path);
	}
	if ((rc & 0xff) == SQLITE_CANTOPEN)
		die_refused(what);
	mq_die(status_of(rc, eno), "%s: %s: %s", what, q->base.path, msg);
}

/*
 * The statement for this text, prepared on first use.  Texts are string
 * literals: their address is their name (one table slot each).
 */
sqlite3_stmt *
sq_stmt(struct sq *q, const char *sql)
{
	size_t h = ((uintptr_t)sql >> 3) % SQ_NSTMT, i;
	sqlite3_stmt *s;

	for (i = 0; i < SQ_NSTMT; i++, h = (h + 1) % SQ_NSTMT) {
		if (q->sql[h] == sql) {
			s = q->stmt[h];
			sqlite3_reset(s);
			sqlite3_clear_bindings(s);
			return s;
		}
		if (!q->sql[h])
			break;
	}
	if (i == SQ_NSTMT)
		mq_die(MQ_EX_SOFTWARE, "too many statements");
	if (sqlite3_prepare_v3(q->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s,
	    NULL) != SQLITE_OK)
		sq_die(q, "cannot prepare statement");
	q->sql[h] = sql;
	q->stmt[h] = s;
	return s;
}

/* Steps once; returns SQLITE_ROW or SQLITE_DONE, dies otherwise. */
int
sq_step(struct sq *q, sqlite3_stmt *s, const char *what)
{
	int rc = sqlite3_step(s);

	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		sqlite3_reset(s);
		sq_die(q, what);
	}
	if (rc == SQLITE_DONE)
		sqlite3_reset(s);
	return rc;
}

void
sq_exec(struct sq *q, const char *sql, const char *what)
{
	if (sqlite3_exec(q->db, sql, NULL, NULL, NULL) != SQLITE_OK)
		sq_die(q, what);
}

/*
 * A query of one integer result with nargs integer parameters: the
 * result, or dflt for no row or NULL.
 */
int64_t
sq_int(struct sq *q, const char *sql, int64_t dflt, int nargs, ...)
{
	sqlite3_stmt *s = sq_stmt(q, sql);
	int64_t v = dflt;
	va_list ap;
	int i;

	va_start(ap, nargs);
	for (i = 1; i <= nargs; i++)
		sqlite3_bind_int64(s, i, va_arg(ap, int64_t));
	va_end(ap);
	if (sq_step(q, s, "cannot read database") == SQLITE_ROW &&
	    sqlite3_column_type(s, 0) != SQLITE_NULL)
		v = sqlite3_column_int64(s, 0);
	sqlite3_reset(s);
	return v;
}

char *
sq_text(sqlite3_stmt *s, int i)
{
	const unsigned char *t = sqlite3_column_text(s, i);

	return t ? mq_memdup(t, sqlite3_column_bytes(s, i)) : NULL;
}

void
sq_copy(sqlite3_stmt *s, int i, char *buf, size_t len)
{
	const unsigned char *t = sqlite3_column_text(s, i);

	snprintf(buf, len, "%s", t ? (const char *)t : "");
}

static int64_t
pragma_int(struct sq *q, const char *sql)
{
	sqlite3_stmt *s;
	int64_t v = 0;
	int rc;

	if (sqlite3_prepare_v2(q->db, sql, -1, &s, NULL) != SQLITE_OK)
		sq_die(q, "cannot read database");
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		v = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		sq_die(q, "cannot read database");
	return v;
}

/* Makes the directory entries of new files survive a power cut. */
static void
sync_dir(const char *path)
{
	char *dir = mq_strdup(path), *slash = strrchr(dir, '/');
	int fd;

	if (slash)
		*(slash == dir ? slash + 1 : slash) = '\0';
	if ((fd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY |
	    O_CLOEXEC)) < 0 || fsync(fd) < 0)
		mq_die(MQ_EX_IOERR, "cannot sync directory %s:", slash ? dir :
		    ".");
	close(fd);
	free(dir);
}

/*
 * mkdir -p for the directory of path, the new ones with mode (less
 * umask), each synced into its parent: a new queue's directories must
 * outlive a power cut as its files do.
 */
static void
mkparents(const char *path, mode_t mode)
{
	char *p = mq_strdup(path), *s;

	for (s = p + 1; (s = strchr(s, '/')); s++) {
		*s = '\0';
		if (mkdir(p, mode) == 0)
			sync_dir(p);
		else if (errno != EEXIST)
			mq_die(status_of_errno(errno), "cannot create directory "
			    "%s:", p);
		*s = '/';
	}
	free(p);
}

/*
 * SQLite's own busy handler sleeps longer and longer (up to 100ms a try),
 * so under contention a waiter can lose every race for seconds.  This one
 * retries every 0.2-2ms, at random, until the timeout.  Other mq writers
 * rarely make it wait: they queue before (engine.c); what is left is
 * other programs and checkpoints.
 */
static int
on_busy(void *arg, int count)
{
	struct sq *q = arg;
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

/* After each commit: how full the WAL is (sq_commit checkpoints). */
static int
on_wal(void *arg, sqlite3 *db, const char *name, int frames)
{
	((struct sq *)arg)->wal_frames = frames;
	return SQLITE_OK;
}

/* The journal mode the file is in now: 1 for WAL. */
static int
in_wal(struct sq *q)
{
	sqlite3_stmt *s;
	int wal = 0;

	if (sqlite3_prepare_v2(q->db, "PRAGMA journal_mode", -1, &s, NULL) !=
	    SQLITE_OK)
		sq_die(q, "cannot read journal mode");
	if (sqlite3_step(s) == SQLITE_ROW)
		wal = !sqlite3_stricmp((const char *)sqlite3_column_text(s, 0),
		    "wal");
	sqlite3_finalize(s);
	return wal;
}

/*
 * The file's first 100 bytes, read through the connection's own
 * descriptor (an open() and close() of ours would drop every lock this
 * process holds on the file).  Past the end of a shorter file, zeros.
 */
static int
header(struct sq *q, unsigned char *h)
{
	sqlite3_file *f = NULL;
	int rc;

	if (sqlite3_file_control(q->db, "main", SQLITE_FCNTL_FILE_POINTER,
	    &f) != SQLITE_OK || !f || !f->pMethods)
		return -1;
	rc = f->pMethods->xRead(f, h, 100, 0);
	return rc == SQLITE_OK || rc == SQLITE_IOERR_SHORT_READ ? 0 : -1;
}

/*
 * WAL mode, for a new file or one found in another mode (changed with
 * the sqlite3 shell, or a switch that failed).  It cannot change inside a
 * transaction, and while another first writer holds a lock it fails with
 * SQLITE_BUSY without calling the busy handler: retry until the busy
 * timeout.  The switch is checked, not assumed: the pragma answers with
 * the mode it left the connection in, and after a failed write of the
 * header it can answer "wal" while the file stayed in rollback mode, so
 * the file's header must say WAL too (read as it is in the file, not in
 * SQLite's cache).  A switch that did not happen is an error, not a
 * database that quietly stays in rollback mode.
 */
static void
wal_mode(struct sq *q)
{
	int64_t end = mq_now() + q->busy_ms;
	unsigned char h[100];
	sqlite3_stmt *s;
	char mode[16] = "";
	int rc;

	for (;;) {
		if (sqlite3_prepare_v2(q->db, "PRAGMA journal_mode=WAL", -1, &s,
		    NULL) != SQLITE_OK)
			sq_die(q, "cannot set WAL mode");
		rc = sqlite3_step(s);
		if (rc == SQLITE_ROW)
			sq_copy(s, 0, mode, sizeof mode);
		sqlite3_finalize(s);
		if (rc == SQLITE_ROW || rc == SQLITE_DONE)
			break;
		if ((rc & 0xff) != SQLITE_BUSY || mq_now() >= end)
			sq_die(q, "cannot set WAL mode");
		usleep(1000 + arc4random_uniform(4000));
	}
	if (header(q, h) < 0)
		mq_die(MQ_EX_IOERR, "cannot set WAL mode: %s: its header "
		    "cannot be read to check it", q->base.path);
	if (h[18] == 2 && h[19] == 2 && (!*mode || !sqlite3_stricmp(mode,
	    "wal")))
		return;
	/* the pragma's answer, unless it claims a WAL the file lacks */
	mq_die(MQ_EX_IOERR, "cannot set WAL mode: %s: the file stays in %s "
	    "mode", q->base.path, *mode && sqlite3_stricmp(mode, "wal") ?
	    mode : "rollback-journal");
}

/*
 * A reader of a WAL file needs the -shm beside it, and SQLite cannot make
 * one in a directory it may not write to.  Such a file with no -wal (a
 * backup, a copy) has nothing uncommitted, and is read as immutable.
 */
static int
readable(struct sq *q)
{
	int rc = sqlite3_exec(q->db, "SELECT 1 FROM sqlite_master LIMIT 1",
	    NULL, NULL, NULL);

	return (rc & 0xff) != SQLITE_READONLY && (rc & 0xff) != SQLITE_CANTOPEN;
}

/* What every connection of ours gets, when opened or opened again. */
static void
configure(struct sq *q)
{
	sqlite3_extended_result_codes(q->db, 1);
	/*
	 * Most mq programs run for one transaction.  Were the last one to
	 * close to checkpoint the WAL into the database, each would pay two
	 * more fsyncs; the WAL is checkpointed as it fills instead
	 * (sq_commit), the last to close empties it once it has grown
	 * (sq_wal_close), and mq-purge --vacuum truncates it.
	 */
	sqlite3_db_config(q->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
	sqlite3_busy_handler(q->db, on_busy, q);
}

/*
 * A hot journal beside the file: a writer died in the middle of a
 * rollback-mode write (a new database's first, before WAL mode).  It is
 * rolled back, never read around: by this user if they may write the
 * file (a read-write connection rolls it back on its first read), else
 * the reader stops and says who can.
 */
static void
recover(struct sq *q)
{
	char *journal = mq_alloc(strlen(q->base.path) + 9), *dir, *slash;
	struct stat st;
	sqlite3 *db;
	int hot, may;

	sprintf(journal, "%s-journal", q->base.path);
	hot = stat(journal, &st) == 0 && st.st_size > 0;
	free(journal);
	if (!hot)
		return;
	dir = mq_strdup(q->base.path);
	if ((slash = strrchr(dir, '/')))
		*(slash == dir ? slash + 1 : slash) = '\0';
	may = access(q->base.path, W_OK) == 0 &&
	    access(slash ? dir : ".", W_OK | X_OK) == 0;
	free(dir);
	if (!may)
		mq_die(MQ_EX_IOERR, "cannot read database %s: it needs "
		    "recovery by a writer (a hot journal is beside it)",
		    q->base.path);
	if (sqlite3_open_v2(q->base.path, &db, SQLITE_OPEN_READWRITE |
	    SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK ||
	    sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", NULL, NULL,
	    NULL) != SQLITE_OK)
		mq_die(MQ_EX_IOERR, "cannot recover database %s: %s",
		    q->base.path, sqlite3_errmsg(db));
	sqlite3_close(db);
	sqlite3_close(q->db);
	if (sqlite3_open_v2(q->base.path, &q->db, SQLITE_OPEN_READONLY |
	    SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE, NULL) != SQLITE_OK)
		sq_die(q, "cannot open database");
	configure(q);
}

static void
reopen_immutable(struct sq *q)
{
	char *wal, *uri, *u;
	const char *p, *path = q->base.path;
	struct stat st;
	size_t n = strlen(path);

	wal = mq_alloc(n + 5);
	snprintf(wal, n + 5, "%s-wal", path);
	if (stat(wal, &st) == 0 && st.st_size > 0) {
		free(wal);
		return;		/* it has a WAL to read: let the error stand */
	}
	free(wal);
	u = uri = mq_alloc(3 * n + 32);
	u += sprintf(u, "file:");
	for (p = path; *p; p++)
		if (*p == '%' || *p == '?' || *p == '#')
			u += sprintf(u, "%%%02X", (unsigned char)*p);
		else
			*u++ = *p;
	strcpy(u, "?immutable=1");
	sqlite3_close(q->db);
	if (sqlite3_open_v2(uri, &q->db, SQLITE_OPEN_READONLY |
	    SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
		sq_die(q, "cannot open database");
	free(uri);
	configure(q);
}

/*
 * A new file beside (or as) the database, with its mode and group; a new
 * database 0666 less the umask, as touch(1) makes a file, so that umask
 * 002 in a setgid directory makes one its group can write.
 */
static int
make_file(const char *path, const struct stat *db)
{
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
	    db ? db->st_mode & 0666 : 0666);

	if (fd < 0)
		return errno == EEXIST ? 0 : -1;	/* another made it */
	if (db) {
		(void)fchmod(fd, db->st_mode & 0666);
		(void)fchown(fd, (uid_t)-1, db->st_gid);	/* if ours to give */
	}
	close(fd);
	return 1;
}

/*
 * Whether a file is empty or in WAL mode, by its header (read before
 * SQLite opens it: no lock of ours to lose): those are the files SQLite
 * itself would make a -wal and -shm for.  (Whether it is mq's, the
 * application id may not say yet: it can still be in the WAL.  A file
 * that is not mq's is refused by sq_open after.)
 */
static int
ours(const char *path)
{
	unsigned char h[100];
	ssize_t n = 0;
	int fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = pread(fd, h, sizeof h, 0);
		close(fd);
	}
	if (n < (ssize_t)sizeof h)
		return n == 0;
	return !memcmp(h, "SQLite format 3", 16) && h[18] == 2 && h[19] == 2;
}

/*
 * The -wal and -shm of a WAL file, those missing, made as make_file
 * makes them: 1 if one was.  must: a writer's, which needs them, dies
 * naming the one it could not make; a reader's are a courtesy, and SQLite
 * reads without them where they cannot be made.
 */
static int
make_beside(const char *path, const struct stat *db, int must)
{
	static const char *suffix[] = { "-wal", "-shm" };
	char file[PATH_MAX + 8];
	int made = 0, i, rc;

	for (i = 0; i < 2; i++) {
		snprintf(file, sizeof file, "%s%s", path, suffix[i]);
		if (access(file, F_OK) == 0)
			continue;
		if ((rc = make_file(file, db)) < 0 && must)
			mq_die(status_of_errno(errno), "cannot create %s:",
			    file);
		made |= rc > 0;
	}
	return made;
}

/*
 * Before SQLite opens anything (so no lock of this process's is lost by
 * a close): a writer makes the database, its -wal and -shm files itself
 * when they are missing.  So a failure says what it is, with the file at
 * fault (SQLite, refused a file, retries read-only and reports that
 * retry's "no such file"); the -wal and -shm take the database's mode and
 * group, so a database a group shares works for every member; and the
 * new directory entries are synced.
 */
static void
make_files(const char *path)
{
	struct stat db;
	int made;

	if ((made = make_file(path, NULL)) < 0)
		mq_die(status_of_errno(errno), "cannot create database %s:",
		    path);
	if (stat(path, &db) < 0)
		mq_die(status_of_errno(errno), "cannot open database %s:", path);
	if (ours(path))
		made |= make_beside(path, &db, 1);
	if (made)
		sync_dir(path);
}

/*
 * A reader makes a missing -wal and -shm of a WAL file too, before SQLite
 * would (with this user's group, which the database's other users may not
 * write: the next writer of the group then fails with 77).  SQLite has
 * the file open but has read nothing, so the header is read through it.
 */
static void
reader_files(struct sq *q)
{
	unsigned char h[100];
	struct stat db;

	if (header(q, h) == 0 && !memcmp(h, "SQLite format 3", 16) &&
	    h[18] == 2 && h[19] == 2 && stat(q->base.path, &db) == 0 &&
	    make_beside(q->base.path, &db, 0))
		sync_dir(q->base.path);	/* a writer will not: it finds them */
}

static void
create_or_migrate(struct sq *q)
{
	int64_t v, tables;
	int i;

	sq_begin(q);
	v = pragma_int(q, "PRAGMA user_version");
	tables = pragma_int(q, "SELECT count(*) FROM sqlite_master");
	if (v == 0 && tables == 0) {
		sq_exec(q, schema_sql, "cannot create schema");
	} else {
		for (i = (int)v; i < SCHEMA_VERSION; i++)
			sq_exec(q, migrations[i - 1], "cannot migrate schema");
	}
	if (v != SCHEMA_VERSION) {
		char sql[64];

		snprintf(sql, sizeof sql, "PRAGMA user_version = %d",
		    SCHEMA_VERSION);
		sq_exec(q, sql, "cannot migrate schema");
	}
	sq_commit(q, SQ_DURABLE);
}


static void
free_sq(struct sq *q)
{
	int i;

	for (i = 0; i < SQ_NSTMT; i++)
		sqlite3_finalize(q->stmt[i]);
	sqlite3_finalize(q->dv);
	sq_wal_close(q);
	sqlite3_close(q->db);
	sq_engine_close(q);
	for (i = 0; i < q->nreaped; i++)
		free(q->reaped[i].c);
	free(q->reaped);
	free(q->touched);
	free(q->base.path);
	free(q);
}

/* Opens (creates, migrates) the database; be: the table of operations. */
struct mq *
sq_open(const char *path, int mode, const struct mq_backend *be)
{
	struct sq *q = mq_alloc(sizeof *q);
	struct stat st;
	int64_t appid, v, tables;
	int flags, rc;
	const char *sync;

	q->base.be = be;
	q->shmfd = -1;
	/* settings first: a usage error touches nothing */
	q->busy_ms = mq_busy_timeout();
	sync = getenv("MQ_SYNC");
	if (sync && *sync && strcmp(sync, "full") && strcmp(sync, "normal"))
		mq_die(MQ_EX_USAGE, "invalid MQ_SYNC '%s': want full or normal",
		    sync);
	q->base.path = mq_strdup(path);
	q->mode = mode;
	note_refusals();
	if (stat(path, &st) < 0) {
		if (errno != ENOENT)
			mq_die(status_of_errno(errno), "cannot open database "
			    "%s:", path);
		if (mode != MQ_WRITE)
			mq_die(MQ_EX_NOINPUT, "cannot open database %s: "
			    "no such file", path);
		mkparents(path, mq_is_private(path) ? 0700 : 0777);
	} else if (!S_ISREG(st.st_mode)) {
		mq_die(MQ_EX_DATAERR, "cannot open database %s: not a regular "
		    "file", path);
	}
	if (mode == MQ_UPDATE)
		q->mode = mode = MQ_WRITE;	/* it exists: from here, a writer */
	if (mode == MQ_WRITE)
		make_files(path);

	flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE;
	flags |= mode != MQ_READ ?
	    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY;
	rc = sqlite3_open_v2(path, &q->db, flags, NULL);
	if (rc != SQLITE_OK) {
		if (!q->db)
			mq_die(MQ_EX_SOFTWARE, "cannot open database %s: out of "
			    "memory", path);
		sq_die(q, "cannot open database");
	}
	configure(q);
	if (mode != MQ_READ && sqlite3_db_readonly(q->db, "main") == 1) {
		/* SQLite could not open it for writing and fell back to reading */
		char file[PATH_MAX + 8];

		if (culprit(q, file, sizeof file))
			mq_die(MQ_EX_NOPERM, "cannot open database: %s: %s", file,
			    strerror(errno));
		die_refused("cannot open database");
		mq_die(MQ_EX_IOERR, "cannot open database %s for writing: I/O "
		    "error, no space or no inode", path);
	}
	if (mode == MQ_READ) {
		reader_files(q);
		recover(q);
		if (!readable(q))
			reopen_immutable(q);
	}

	/* one snapshot, so a file being created meanwhile reads consistently */
	sq_exec(q, "BEGIN", "cannot read database");
	appid = pragma_int(q, "PRAGMA application_id");
	v = pragma_int(q, "PRAGMA user_version");
	tables = pragma_int(q, "SELECT count(*) FROM sqlite_master");
	sq_exec(q, "COMMIT", "cannot read database");
	if (appid != MQ_APPID && !(appid == 0 && v == 0 && tables == 0))
		mq_die(MQ_EX_DATAERR, "cannot open database %s: not an mq "
		    "database (application_id %#llx)", path,
		    (unsigned long long)appid);
	if (v > SCHEMA_VERSION)
		mq_die(MQ_EX_DATAERR, "cannot open database %s: schema "
		    "version %lld is newer than this mq (%d); upgrade mq",
		    path, (long long)v, SCHEMA_VERSION);

	if (v < SCHEMA_VERSION && mode == MQ_READ) {
		if (tables == 0)
			mq_die(MQ_EX_NOINPUT, "database %s is empty", path);
		/* an older file: upgrade it through a writable handle */
		free_sq(q);
		sq_close(sq_open(path, MQ_WRITE, be));
		return sq_open(path, MQ_READ, be);
	}
	if (mode != MQ_READ && (tables == 0 || !in_wal(q)))
		wal_mode(q);
	q->sync = sync && !strcmp(sync, "normal") ? SQ_NONE : SQ_GROUP;
	sq_engine_open(q);	/* SQ_GROUP needs it; without it, SQ_FULL */
	sq_exec(q, q->sync == SQ_FULL ? "PRAGMA synchronous=FULL" :
	    "PRAGMA synchronous=NORMAL", "cannot set up database");
	/* 2 MiB of pages: a stream of any length stays small (16 MB RSS) */
	sq_exec(q, "PRAGMA cache_size=-2048", "cannot set up database");
	if (mode != MQ_READ)
		sqlite3_wal_hook(q->db, on_wal, q);
	if (v < SCHEMA_VERSION)
		create_or_migrate(q);
	return &q->base;
}

void
sq_close(struct mq *mq)
{
	free_sq(SQ(mq));
}

/* BEGIN, COMMIT and the like, prepared once: SQLITE_DONE or an error. */
static int
tx(struct sq *q, const char *sql)
{
	int rc = sqlite3_step(sq_stmt(q, sql));

	return rc == SQLITE_ROW ? SQLITE_DONE : rc;
}

/* Write transactions queue first (engine.c), then take SQLite's lock. */
void
sq_begin(struct sq *q)
{
	sq_queue_enter(q);
	if (tx(q, "BEGIN IMMEDIATE") != SQLITE_DONE) {
		sq_queue_leave(q);
		sq_die(q, "cannot start write");
	}
	q->in_tx = q->in_write = 1;
	q->ntouched = 0;
	q->seen = sq_commits_seen(q);
	sq_comb_recover(q);
}

void
sq_begin_read(struct sq *q)
{
	if (tx(q, "BEGIN") != SQLITE_DONE)
		sq_die(q, "cannot start read");
	q->in_tx = 1;
	q->in_write = 0;
}

/* This transaction changed topic: wake its followers once it commits. */
void
sq_touch(struct sq *q, int64_t topic)
{
	int i;

	for (i = 0; i < q->ntouched; i++)
		if (q->touched[i] == topic)
			return;
	if (q->ntouched == q->atouched) {
		q->atouched = q->atouched ? 2 * q->atouched : 4;
		q->touched = mq_array(q->touched, q->atouched,
		    sizeof *q->touched);
	}
	q->touched[q->ntouched++] = topic;
}

/*
 * Ends a transaction.  A read ends by rolling back; but what it read may
 * have been committed and not yet synced by its writer, so before anything
 * read is shown, the commits it may have seen are made durable (in the
 * common case they are already).  A write commits, leaves the queue,
 * checkpoints if the WAL has grown, wakes the followers of the topics it
 * changed, and with SQ_DURABLE returns only once the commit is on disk.
 * The followers are woken before the sync, not after: what they claim
 * meanwhile they show only once it is durable (they end their own
 * transactions here, with SQ_SEEN or SQ_DURABLE), so their work overlaps
 * the sync instead of following it.
 */
void
sq_commit(struct sq *q, int how)
{
	uint64_t seq;
	int i;

	if (!q->in_write) {
		q->seen = sq_commits_seen(q);
		sq_rollback(q);
		if (how != SQ_LAZY)
			sq_durable(q, q->seen, 1);
		return;
	}
	/* only durable commits are numbered: nobody waits for a lazy one */
	seq = how == SQ_DURABLE ? sq_commit_begins(q) : 0;
	if (tx(q, "COMMIT") != SQLITE_DONE)
		sq_die(q, "cannot commit");
	q->in_tx = q->in_write = 0;
	sq_commit_done(q, seq);
	sq_comb_end(q, seq);
	sq_checkpoint(q, q->wal_frames);	/* in the queue: see engine.c */
	q->wal_left = q->wal_frames;
	q->wal_frames = 0;
	sq_queue_leave(q);
	for (i = 0; i < q->ntouched; i++)
		sq_wake(q, q->touched[i]);
	q->ntouched = 0;
	if (how == SQ_DURABLE)
		sq_durable(q, seq, 0);
	else if (how == SQ_SEEN)
		sq_durable(q, q->seen, 1);	/* only what it read */
}

void
sq_rollback(struct sq *q)
{
	if (q->in_tx)
		tx(q, "ROLLBACK");
	sq_comb_end(q, 0);
	if (q->in_write)
		sq_queue_leave(q);
	q->in_tx = q->in_write = 0;
	q->ntouched = 0;
}

int64_t
sq_data_version(struct sq *q)
{
	int64_t v = 0;
	int rc;

	if (!q->dv && sqlite3_prepare_v3(q->db, "PRAGMA data_version", -1,
	    SQLITE_PREPARE_PERSISTENT, &q->dv, NULL) != SQLITE_OK)
		sq_die(q, "cannot read database");
	rc = sqlite3_step(q->dv);
	if (rc == SQLITE_ROW)
		v = sqlite3_column_int64(q->dv, 0);
	sqlite3_reset(q->dv);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		sq_die(q, "cannot read database");
	return v;
}

/* For the other files of this folder. */
int
sq_status_of_errno(int eno)
{
	return status_of_errno(eno);
}

int
sq_status_of(int rc, int eno)
{
	return status_of(rc, eno);
}

void
sq_sync_dir(const char *path)
{
	sync_dir(path);
}
