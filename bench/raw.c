/*
 * raw.c: the baseline for mq-send's bulk load, plain SQLite and nothing
 * else.  Reads lines from stdin and inserts each as a row of a table shaped
 * like mq's msg table, BATCH rows per BEGIN IMMEDIATE ... COMMIT, with one
 * prepared statement reused, in a WAL database with synchronous=FULL: the
 * same durable work mq-send does, minus mq's own bookkeeping.
 *
 * usage: raw DBFILE < lines
 *
 * Built by bench/run.sh: cc -O2 bench/raw.c $(pkg-config --cflags --libs
 * sqlite3).  Not part of mq; exits 1 on any error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#define BATCH	10000	/* BATCH_MAX of cmd/mq-send.c */

static sqlite3 *db;

static void
die(const char *what)
{
	fprintf(stderr, "raw: %s: %s\n", what, db ? sqlite3_errmsg(db) :
	    "out of memory");
	exit(1);
}

static void
exec(const char *sql)
{
	if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
		die(sql);
}

static long long
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int
main(int argc, char *argv[])
{
	sqlite3_stmt *s;
	char *line = NULL;
	size_t cap = 0, n = 0;
	ssize_t len;
	long long off = 0, ts;

	if (argc != 2) {
		fprintf(stderr, "usage: raw DBFILE < lines\n");
		return 1;
	}
	if (sqlite3_open(argv[1], &db) != SQLITE_OK)
		die("cannot open database");
	exec("PRAGMA journal_mode=WAL");
	exec("PRAGMA synchronous=FULL");
	exec("CREATE TABLE IF NOT EXISTS msg (topic INTEGER, off INTEGER, "
	    "ts INTEGER, due INTEGER, key TEXT, body BLOB, "
	    "PRIMARY KEY (topic, off)) WITHOUT ROWID");
	if (sqlite3_prepare_v2(db, "INSERT INTO msg (topic, off, ts, due, key, "
	    "body) VALUES (1, ?, ?, ?, NULL, ?)", -1, &s, NULL) != SQLITE_OK)
		die("cannot prepare");

	while ((len = getline(&line, &cap, stdin)) >= 0) {
		if (len > 0 && line[len - 1] == '\n')
			len--;
		if (n == 0)
			exec("BEGIN IMMEDIATE");
		ts = now_ms();
		sqlite3_bind_int64(s, 1, ++off);
		sqlite3_bind_int64(s, 2, ts);
		sqlite3_bind_int64(s, 3, ts);
		sqlite3_bind_blob(s, 4, line, (int)len, SQLITE_STATIC);
		if (sqlite3_step(s) != SQLITE_DONE)
			die("cannot insert");
		sqlite3_reset(s);
		if (++n == BATCH) {
			exec("COMMIT");
			n = 0;
		}
	}
	if (ferror(stdin)) {
		fprintf(stderr, "raw: cannot read input\n");
		return 1;
	}
	if (n)
		exec("COMMIT");
	sqlite3_finalize(s);
	free(line);
	if (sqlite3_close(db) != SQLITE_OK)
		die("cannot close");
	return 0;
}
