/*
 * rawq.c: the plain-SQLite baselines of the queue benchmarks: what each
 * mq figure is compared with, written the shortest way SQLite allows.
 * Every mode opens DBFILE in WAL mode with synchronous=FULL (each COMMIT
 * synced) and uses a table shaped like mq's msg table, (topic, off) the
 * primary key of a WITHOUT ROWID table, 100-byte bodies, topic 1; load
 * adds a lease column (0: free), which the other modes ignore.
 *
 *   rawq load DBFILE N
 *	Setup, not timed: N messages, 10,000 per transaction.
 *   rawq commit DBFILE N [MIN_MS MAX_MS OUT]
 *	N messages, one per BEGIN IMMEDIATE ... COMMIT, from one connection
 *	kept open: a producer that commits each message on its own.  Prints
 *	"TOTAL_US N", TOTAL_US the sum of the commits' times, each from
 *	BEGIN to COMMIT's return (opening the database is not counted).
 *	With MIN_MS MAX_MS, sleeps a random MIN_MS..MAX_MS before each
 *	commit and appends the time of each to OUT in microseconds, one a
 *	line: the latency of one durable commit.
 *   rawq pipe DBFILE
 *	A long-lived producer on a pipe, as bench/prod.c drives mq-send:
 *	for each line read from stdin, one BEGIN IMMEDIATE, INSERT of the
 *	line, COMMIT, then its offset printed and flushed.  The same work as
 *	one mq-send fed a line at a time, the pipe included.
 *   rawq lease DBFILE BATCH
 *	Consumes the topic as a receiver and an acker would, in two
 *	transactions per BATCH messages: UPDATE ... SET lease = now + 30s
 *	WHERE off IN (the first BATCH with lease = 0) RETURNING off, body,
 *	writing each body as a line to stdout, COMMIT; then DELETE each of
 *	those offsets (one prepared statement, BATCH steps), COMMIT.  Ends
 *	when no free message is left.
 *   rawq delete DBFILE BATCH
 *	Consumes the topic at most once: DELETE ... WHERE off IN (the first
 *	BATCH in offset order) RETURNING off, body, bodies to stdout, one
 *	transaction per BATCH, until it is empty.
 *   rawq scan DBFILE
 *	Reads the topic in offset order, one statement, bodies to stdout.
 *
 * Built by bench/run.sh with $(pkg-config --cflags --libs sqlite3); not
 * part of mq.  Exits 1 on any error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#define LOAD_BATCH	10000
#define BODY_LEN	100

static sqlite3 *db;
static char body[BODY_LEN + 1];

static void
die(const char *what)
{
	fprintf(stderr, "rawq: %s: %s\n", what, db ? sqlite3_errmsg(db) :
	    "out of memory");
	exit(1);
}

static void
exec(const char *sql)
{
	if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
		die(sql);
}

static sqlite3_stmt *
prepare(const char *sql)
{
	sqlite3_stmt *s;

	if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
		die(sql);
	return s;
}

static long long
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static long long
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
open_db(const char *path, int lease)
{
	if (sqlite3_open(path, &db) != SQLITE_OK)
		die("cannot open database");
	exec("PRAGMA journal_mode=WAL");
	exec("PRAGMA synchronous=FULL");
	if (lease)
		exec("CREATE TABLE IF NOT EXISTS msg (topic INTEGER, "
		    "off INTEGER, ts INTEGER, due INTEGER, key TEXT, body BLOB, "
		    "lease INTEGER NOT NULL DEFAULT 0, "
		    "PRIMARY KEY (topic, off)) WITHOUT ROWID");
	else
		exec("CREATE TABLE IF NOT EXISTS msg (topic INTEGER, "
		    "off INTEGER, ts INTEGER, due INTEGER, key TEXT, body BLOB, "
		    "PRIMARY KEY (topic, off)) WITHOUT ROWID");
}

/* Inserts message off with body b of len bytes. */
static void
insert_body(sqlite3_stmt *s, long long off, const char *b, size_t len)
{
	long long ts = now_ms();

	sqlite3_bind_int64(s, 1, off);
	sqlite3_bind_int64(s, 2, ts);
	sqlite3_bind_int64(s, 3, ts);
	sqlite3_bind_blob(s, 4, b, (int)len, SQLITE_STATIC);
	if (sqlite3_step(s) != SQLITE_DONE)
		die("cannot insert");
	sqlite3_reset(s);
}

/* The message: 90 letters and the offset in 10 digits, like run.sh's. */
static void
insert(sqlite3_stmt *s, long long off)
{
	snprintf(body + BODY_LEN - 10, 11, "%010llu",
	    (unsigned long long)off % 10000000000ULL);
	insert_body(s, off, body, BODY_LEN);
}

static sqlite3_stmt *
insert_stmt(void)
{
	return prepare("INSERT INTO msg (topic, off, ts, due, key, body) "
	    "VALUES (1, ?, ?, ?, NULL, ?)");
}

static void
load(long long n)
{
	sqlite3_stmt *s = insert_stmt();
	long long i;

	for (i = 1; i <= n; i++) {
		if (i % LOAD_BATCH == 1)
			exec("BEGIN IMMEDIATE");
		insert(s, i);
		if (i % LOAD_BATCH == 0)
			exec("COMMIT");
	}
	if (n % LOAD_BATCH)
		exec("COMMIT");
	sqlite3_finalize(s);
}

static void
commit(long long n, long lo, long hi, const char *path)
{
	sqlite3_stmt *s = insert_stmt();
	struct timespec d;
	long long i, t0, us, total = 0;
	FILE *out = NULL;

	if (path && !(out = fopen(path, "a")))
		die(path);
	srandom((unsigned)(now_us() ^ (long long)getpid()));
	for (i = 1; i <= n; i++) {
		if (out) {
			us = lo * 1000 + random() % ((hi - lo) * 1000 + 1);
			d.tv_sec = us / 1000000;
			d.tv_nsec = us % 1000000 * 1000;
			while (nanosleep(&d, &d) != 0)
				;
		}
		t0 = now_us();
		exec("BEGIN IMMEDIATE");
		insert(s, i);
		exec("COMMIT");
		us = now_us() - t0;
		total += us;
		if (out)
			fprintf(out, "%lld\n", us);
	}
	if (out && fclose(out) != 0)
		die(path);
	sqlite3_finalize(s);
	printf("%lld %lld\n", total, n);
}

static void
pipe_in(void)
{
	sqlite3_stmt *s = insert_stmt();
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	long long off = 0;

	while ((len = getline(&line, &cap, stdin)) >= 0) {
		if (len > 0 && line[len - 1] == '\n')
			len--;
		exec("BEGIN IMMEDIATE");
		insert_body(s, ++off, line, (size_t)len);
		exec("COMMIT");
		if (printf("%lld\n", off) < 0 || fflush(stdout) == EOF)
			die("cannot write");
	}
	if (ferror(stdin))
		die("cannot read");
	free(line);
	sqlite3_finalize(s);
}

/* Writes the body of each row (column 1) as a line; returns the rows. */
static int
put_rows(sqlite3_stmt *s, long long *off)
{
	int n = 0, rc;

	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if (off)
			off[n] = sqlite3_column_int64(s, 0);
		fwrite(sqlite3_column_blob(s, 1), 1, sqlite3_column_bytes(s, 1),
		    stdout);
		putchar('\n');
		n++;
	}
	if (rc != SQLITE_DONE)
		die("cannot step");
	sqlite3_reset(s);
	return n;
}

static void
lease(int batch)
{
	sqlite3_stmt *take = prepare("UPDATE msg SET lease = ?2 "
	    "WHERE topic = 1 AND off IN (SELECT off FROM msg WHERE topic = 1 "
	    "AND lease = 0 ORDER BY off LIMIT ?1) RETURNING off, body");
	sqlite3_stmt *del = prepare("DELETE FROM msg WHERE topic = 1 "
	    "AND off = ?");
	long long *off = malloc(batch * sizeof *off);
	int i, n;

	if (!off)
		die("malloc");
	do {
		exec("BEGIN IMMEDIATE");
		sqlite3_bind_int(take, 1, batch);
		sqlite3_bind_int64(take, 2, now_ms() + 30000);
		n = put_rows(take, off);
		exec("COMMIT");
		if (fflush(stdout) == EOF)
			die("cannot write");
		if (n == 0)
			break;
		exec("BEGIN IMMEDIATE");
		for (i = 0; i < n; i++) {
			sqlite3_bind_int64(del, 1, off[i]);
			if (sqlite3_step(del) != SQLITE_DONE)
				die("cannot delete");
			sqlite3_reset(del);
		}
		exec("COMMIT");
	} while (n == batch);
	free(off);
	sqlite3_finalize(take);
	sqlite3_finalize(del);
}

static void
delete(int batch)
{
	sqlite3_stmt *s = prepare("DELETE FROM msg WHERE topic = 1 AND off IN "
	    "(SELECT off FROM msg WHERE topic = 1 ORDER BY off LIMIT ?) "
	    "RETURNING off, body");
	int n;

	do {
		exec("BEGIN IMMEDIATE");
		sqlite3_bind_int(s, 1, batch);
		n = put_rows(s, NULL);
		exec("COMMIT");
		if (fflush(stdout) == EOF)
			die("cannot write");
	} while (n == batch);
	sqlite3_finalize(s);
}

static void
scan(void)
{
	sqlite3_stmt *s = prepare("SELECT off, body FROM msg WHERE topic = 1 "
	    "ORDER BY off");

	exec("BEGIN");
	put_rows(s, NULL);
	exec("COMMIT");
	sqlite3_finalize(s);
}

static void
usage(void)
{
	fprintf(stderr, "usage: rawq load DBFILE N\n"
	    "       rawq commit DBFILE N [MIN_MS MAX_MS OUT]\n"
	    "       rawq pipe DBFILE\n"
	    "       rawq lease|delete DBFILE BATCH\n"
	    "       rawq scan DBFILE\n");
	exit(1);
}

int
main(int argc, char *argv[])
{
	const char *mode;
	long long n = 0;
	long lo = 0, hi = 0;

	if (argc < 3)
		usage();
	mode = argv[1];
	if (argc >= 4 && (n = atoll(argv[3])) <= 0)
		usage();
	memset(body, 'a', BODY_LEN);
	if (!strcmp(mode, "load") && argc == 4) {
		open_db(argv[2], 1);
		load(n);
	} else if (!strcmp(mode, "commit") && (argc == 4 || argc == 7)) {
		if (argc == 7 && ((lo = atol(argv[4])) < 0 ||
		    (hi = atol(argv[5])) < lo))
			usage();
		open_db(argv[2], 0);
		commit(n, lo, hi, argc == 7 ? argv[6] : NULL);
	} else if (!strcmp(mode, "pipe") && argc == 3) {
		open_db(argv[2], 0);
		pipe_in();
	} else if (!strcmp(mode, "lease") && argc == 4) {
		open_db(argv[2], 1);
		lease((int)n);
	} else if (!strcmp(mode, "delete") && argc == 4) {
		open_db(argv[2], 1);
		delete((int)n);
	} else if (!strcmp(mode, "scan") && argc == 3) {
		open_db(argv[2], 1);
		scan();
	} else {
		usage();
	}
	if (fflush(stdout) == EOF)
		die("cannot write");
	if (sqlite3_close(db) != SQLITE_OK)
		die("cannot close");
	return 0;
}
