/*
 * rawpg.c: the plain-libpq baselines of bench/pg.sh, mq's PostgreSQL
 * benchmarks: what each mq figure is compared with, written the shortest
 * way libpq allows.  Every mode connects to CONN (a postgresql:// URL or
 * a keyword string; its search_path picks the schema) and uses a table
 * shaped like mq's msg table, (topic, off) its primary key, with bytea
 * bodies (sent and received in binary), topic 1, and a sequence msg_off
 * for the modes whose writers are concurrent.  Commits are as durable as
 * the server's settings make them, as mq's are.
 *
 *   rawpg init CONN
 *	Drops and creates the table and the sequence (empty).
 *   rawpg load CONN N
 *	Setup, not timed: N 100-byte messages (90 letters, the offset in
 *	10 digits), one statement.  (bench/pg.sh then runs ANALYZE, as it
 *	does after loading mq's tables.)
 *   rawpg send CONN < lines
 *	mq-send's bulk load: each line a message, BATCH (mq-send's
 *	BATCH_MAX) per transaction: BEGIN, one multi-row INSERT of the
 *	batch (3 parameters a row; prepared once, a shorter last batch
 *	not), COMMIT.
 *   rawpg delete CONN BATCH
 *	Consumes the topic: WITH c AS (SELECT ... ORDER BY off LIMIT BATCH
 *	FOR UPDATE SKIP LOCKED) DELETE ... USING c RETURNING off, body, one
 *	transaction (one statement) per BATCH, bodies to stdout as lines,
 *	until it returns nothing.
 *   rawpg commit CONN K N [OUT]
 *	K clients (forked, a connection each), each inserting N messages,
 *	one row per transaction (a single INSERT, its off from msg_off).
 *	Each first inserts one warm-up row (not counted) and then waits
 *	for the others, so connecting is not timed.  Prints "US COUNT": US
 *	from the start to the last client's end, COUNT = K * N.  With OUT,
 *	appends the latency of each insert in microseconds, one a line.
 *   rawpg wake CONN N MIN_MS MAX_MS OUT [CLAIM_OUT]
 *	A LISTEN/NOTIFY round trip: a listener (forked, its own
 *	connection) LISTENs; the sender, N times after a random
 *	MIN_MS..MAX_MS, reads CLOCK_REALTIME and runs BEGIN, an INSERT of
 *	the message, pg_notify() with that time as payload, COMMIT.  The
 *	listener appends "now - payload" in microseconds to OUT as each
 *	notification arrives: the send to the consumer's wake-up.  With
 *	CLAIM_OUT it then also takes the message (DELETE ... RETURNING of
 *	the first row, one transaction) and appends the time from the send
 *	to that claim's return to CLAIM_OUT.
 *
 * Built by bench/pg.sh, into BUILD_DIR/bench/rawpg, with $(pkg-config
 * --cflags --libs libpq); not part of mq.  Exits 1 on any error.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#define BATCH		10000	/* BATCH_MAX of cmd/mq-send.c */
#define BODY_LEN	100
#define CHANNEL		"rawpg_wake"

static PGconn *conn;

static void die(const char *, ...)
    __attribute__((noreturn, format(printf, 1, 2)));
static void client(const char *, int, long long, int, int, const char *)
    __attribute__((noreturn));
static void listener(const char *, long long, int, const char *,
    const char *) __attribute__((noreturn));

static void
die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "rawpg: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (conn && PQerrorMessage(conn)[0])
		fprintf(stderr, ": %s", PQerrorMessage(conn));
	else
		fprintf(stderr, "\n");
	exit(1);
}

static long long
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static long long
real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void
connect_db(const char *info)
{
	conn = PQconnectdb(info);
	if (!conn || PQstatus(conn) != CONNECTION_OK)
		die("cannot connect");
}

/* Checks a result: a command or rows, else dies naming what. */
static PGresult *
ok(PGresult *r, const char *what)
{
	ExecStatusType st = PQresultStatus(r);

	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
		fprintf(stderr, "rawpg: %s: %s", what, PQresultErrorMessage(r));
		exit(1);
	}
	return r;
}

static void
exec(const char *sql)
{
	PQclear(ok(PQexec(conn, sql), sql));
}

static void
prepare(const char *name, const char *sql, int n)
{
	PQclear(ok(PQprepare(conn, name, sql, n, NULL), sql));
}

static void
init(void)
{
	exec("SET client_min_messages = warning");
	exec("DROP TABLE IF EXISTS msg");
	exec("DROP SEQUENCE IF EXISTS msg_off");
	exec("CREATE TABLE msg (topic bigint NOT NULL, off bigint NOT NULL, "
	    "ts bigint NOT NULL, due bigint NOT NULL, key text, "
	    "body bytea NOT NULL, PRIMARY KEY (topic, off))");
	exec("CREATE SEQUENCE msg_off");
}

static void
load(long long n)
{
	char sql[512];

	snprintf(sql, sizeof sql, "INSERT INTO msg (topic, off, ts, due, key, "
	    "body) SELECT 1, g, t, t, NULL, convert_to(repeat('abcdefghij', 9) "
	    "|| lpad(g::text, 10, '0'), 'UTF8') FROM generate_series(1, %lld) "
	    "AS g, (SELECT (extract(epoch FROM now()) * 1000)::bigint AS t) AS "
	    "n", n);
	exec(sql);
	snprintf(sql, sizeof sql, "SELECT setval('msg_off', %lld)", n);
	exec(sql);
}

/*
 * INSERT ... VALUES (1,$1,$2,$2,NULL,$3),... for rows rows: the
 * parameters take the columns' types.  A row is at most 17 bytes and 4
 * parameter numbers of up to 5 digits.
 */
static char *
insert_sql(int rows)
{
	char *sql = malloc(64 + (size_t)rows * 40), *p;
	int i;

	if (!sql)
		die("malloc");
	p = sql + sprintf(sql, "INSERT INTO msg (topic, off, ts, due, key, "
	    "body) VALUES ");
	for (i = 0; i < rows; i++)
		p += sprintf(p, "%s(1,$%d,$%d,$%d,NULL,$%d)", i ? "," : "",
		    3 * i + 1, 3 * i + 2, 3 * i + 2, 3 * i + 3);
	return sql;
}

static void
send_lines(void)
{
	static char off[BATCH][24], ts[BATCH][24];
	static const char *v[3 * BATCH];
	static int len[3 * BATCH], fmt[3 * BATCH];
	char *body[BATCH], *line = NULL, *sql;
	size_t cap = 0;
	ssize_t n;
	long long next = 1, t;
	int rows = 0, i, eof = 0;

	sql = insert_sql(BATCH);
	prepare("batch", sql, 0);
	free(sql);
	while (!eof) {
		if ((n = getline(&line, &cap, stdin)) < 0) {
			if (ferror(stdin))
				die("cannot read stdin");
			eof = 1;
		} else {
			if (n > 0 && line[n - 1] == '\n')
				n--;
			t = real_ns() / 1000000;
			snprintf(off[rows], sizeof off[rows], "%lld", next++);
			snprintf(ts[rows], sizeof ts[rows], "%lld", t);
			if (!(body[rows] = malloc(n ? n : 1)))
				die("malloc");
			memcpy(body[rows], line, n);
			v[3 * rows] = off[rows];
			v[3 * rows + 1] = ts[rows];
			v[3 * rows + 2] = body[rows];
			len[3 * rows] = len[3 * rows + 1] = 0;
			fmt[3 * rows] = fmt[3 * rows + 1] = 0;
			len[3 * rows + 2] = (int)n;
			fmt[3 * rows + 2] = 1;
			rows++;
		}
		if (rows == 0 || (rows < BATCH && !eof))
			continue;
		exec("BEGIN");
		if (rows == BATCH) {
			PQclear(ok(PQexecPrepared(conn, "batch", 3 * rows, v,
			    len, fmt, 0), "INSERT"));
		} else {
			sql = insert_sql(rows);
			PQclear(ok(PQexecParams(conn, sql, 3 * rows, NULL, v,
			    len, fmt, 0), "INSERT"));
			free(sql);
		}
		exec("COMMIT");
		for (i = 0; i < rows; i++)
			free(body[i]);
		rows = 0;
	}
	free(line);
}

static void
delete(int batch)
{
	char limit[24];
	const char *v[1] = { limit };
	PGresult *r;
	int i, n;

	snprintf(limit, sizeof limit, "%d", batch);
	prepare("take", "WITH c AS (SELECT off FROM msg WHERE topic = 1 "
	    "ORDER BY off LIMIT $1 FOR UPDATE SKIP LOCKED) DELETE FROM msg m "
	    "USING c WHERE m.topic = 1 AND m.off = c.off RETURNING m.off, "
	    "m.body", 1);
	do {
		r = ok(PQexecPrepared(conn, "take", 1, v, NULL, NULL, 1),
		    "DELETE");
		n = PQntuples(r);
		for (i = 0; i < n; i++) {
			fwrite(PQgetvalue(r, i, 1), 1, PQgetlength(r, i, 1),
			    stdout);
			putchar('\n');
		}
		PQclear(r);
		if (fflush(stdout) == EOF)
			die("cannot write");
	} while (n > 0);
}

/* One message, one transaction: the statement alone, in autocommit. */
static void
insert_one(char *body, long long seq)
{
	char ts[24];
	const char *v[2] = { ts, body };
	int len[2] = { 0, BODY_LEN }, fmt[2] = { 0, 1 };

	snprintf(body + BODY_LEN - 10, 11, "%010llu",
	    (unsigned long long)seq % 10000000000ULL);
	snprintf(ts, sizeof ts, "%lld", real_ns() / 1000000);
	PQclear(ok(PQexecPrepared(conn, "one", 2, v, len, fmt, 0), "INSERT"));
}

static void
client(const char *info, int k, long long n, int ready, int go,
    const char *path)
{
	char body[BODY_LEN + 1], c, *buf;
	long long i, t0, *lat;
	size_t len = 0;
	int fd = -1;

	memset(body, 'a' + k % 26, BODY_LEN);
	if (!(lat = malloc(n * sizeof *lat)))
		die("malloc");
	connect_db(info);
	prepare("one", "INSERT INTO msg (topic, off, ts, due, key, body) "
	    "VALUES (1, nextval('msg_off'), $1::bigint, $1::bigint, NULL, "
	    "$2::bytea)", 2);
	insert_one(body, 0);		/* warm-up */
	if (write(ready, "", 1) != 1)
		die("cannot write to the parent");
	while (read(go, &c, 1) < 0 && errno == EINTR)
		;
	for (i = 0; i < n; i++) {
		t0 = now_us();
		insert_one(body, i + 1);
		lat[i] = now_us() - t0;
	}
	PQfinish(conn);
	if (path) {
		if (!(buf = malloc(n * 24)))
			die("malloc");
		for (i = 0; i < n; i++)
			len += sprintf(buf + len, "%lld\n", lat[i]);
		/* one write with O_APPEND: the clients' lines do not mix */
		if ((fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644)) < 0 ||
		    write(fd, buf, len) != (ssize_t)len || close(fd) < 0)
			die("cannot write %s", path);
	}
	exit(0);
}

static void
commit(const char *info, int k, long long n, const char *path)
{
	int ready[2], go[2], i, st, failed = 0;
	long long t0;
	char c;

	if (pipe(ready) < 0 || pipe(go) < 0)
		die("pipe");
	for (i = 0; i < k; i++) {
		switch (fork()) {
		case -1:
			die("fork");
		case 0:
			close(ready[0]);
			close(go[1]);
			client(info, i, n, ready[1], go[0], path);
		}
	}
	close(ready[1]);
	close(go[0]);
	for (i = 0; i < k; i++)
		if (read(ready[0], &c, 1) != 1)
			die("a client failed before the start");
	t0 = now_us();
	close(go[1]);		/* go */
	for (i = 0; i < k; i++) {
		while (wait(&st) < 0)
			if (errno != EINTR)
				die("wait");
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			failed++;
	}
	t0 = now_us() - t0;
	if (failed)
		die("%d clients failed", failed);
	printf("%lld %lld\n", t0, (long long)k * n);
}

static void
pause_ms(long lo, long hi)
{
	struct timespec d;
	long us = lo * 1000 + random() % ((hi - lo) * 1000 + 1);

	d.tv_sec = us / 1000000;
	d.tv_nsec = us % 1000000 * 1000;
	while (nanosleep(&d, &d) != 0)
		;
}

static void
listener(const char *info, long long n, int ready, const char *path,
    const char *claim_path)
{
	FILE *out, *cout = NULL;
	struct pollfd p;
	PGnotify *nt;
	PGresult *r;
	long long got = 0, sent, t;
	pid_t parent = getppid();

	if (!(out = fopen(path, "a")))
		die("cannot open %s", path);
	if (claim_path && !(cout = fopen(claim_path, "a")))
		die("cannot open %s", claim_path);
	connect_db(info);
	exec("LISTEN " CHANNEL);
	if (claim_path)
		prepare("claim", "WITH c AS (SELECT off FROM msg WHERE "
		    "topic = 1 ORDER BY off LIMIT 1 FOR UPDATE SKIP LOCKED) "
		    "DELETE FROM msg m USING c WHERE m.topic = 1 AND "
		    "m.off = c.off RETURNING m.off, m.body", 0);
	if (write(ready, "", 1) != 1)
		die("cannot write to the parent");
	close(ready);
	while (got < n) {
		p.fd = PQsocket(conn);
		p.events = POLLIN;
		if (poll(&p, 1, 1000) < 0) {
			if (errno == EINTR)
				continue;
			die("poll");
		}
		if (getppid() != parent)
			die("the sender is gone");
		if (!PQconsumeInput(conn))
			die("cannot read");
		while (got < n && (nt = PQnotifies(conn))) {
			t = real_ns();
			sent = atoll(nt->extra);
			PQfreemem(nt);
			if (sent <= 0)
				die("a notification without a time");
			fprintf(out, "%lld\n", (t - sent) / 1000);
			got++;
			if (!cout)
				continue;
			r = ok(PQexecPrepared(conn, "claim", 0, NULL, NULL, NULL,
			    1), "DELETE");
			t = real_ns();
			if (PQntuples(r) != 1)
				die("the claim found %d messages, not 1",
				    PQntuples(r));
			PQclear(r);
			fprintf(cout, "%lld\n", (t - sent) / 1000);
		}
	}
	if (fclose(out) != 0 || (cout && fclose(cout) != 0))
		die("cannot write");
	PQfinish(conn);
	exit(0);
}

static void
wake(const char *info, long long n, long lo, long hi, const char *path,
    const char *claim_path)
{
	char when[24], body[BODY_LEN];
	const char *v[2] = { when, body };
	int len[2] = { 0, 0 }, fmt[2] = { 0, 1 };
	int ready[2], st;
	long long i;
	pid_t pid;
	char c;

	if (pipe(ready) < 0)
		die("pipe");
	if ((pid = fork()) < 0)
		die("fork");
	if (pid == 0) {
		close(ready[0]);
		listener(info, n, ready[1], path, claim_path);
	}
	close(ready[1]);
	connect_db(info);
	prepare("put", "INSERT INTO msg (topic, off, ts, due, key, body) "
	    "VALUES (1, nextval('msg_off'), $1::bigint / 1000000, "
	    "$1::bigint / 1000000, NULL, $2::bytea)", 2);
	prepare("notify", "SELECT pg_notify('" CHANNEL "', $1)", 1);
	if (read(ready[0], &c, 1) != 1)
		die("the listener failed");
	srandom((unsigned)(real_ns() ^ getpid()));
	for (i = 0; i < n; i++) {
		pause_ms(lo, hi);
		snprintf(when, sizeof when, "%lld", real_ns());
		len[1] = snprintf(body, sizeof body, "%s", when);
		exec("BEGIN");
		PQclear(ok(PQexecPrepared(conn, "put", 2, v, len, fmt, 0),
		    "INSERT"));
		PQclear(ok(PQexecPrepared(conn, "notify", 1, v, NULL, NULL, 0),
		    "NOTIFY"));
		exec("COMMIT");
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			die("waitpid");
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		die("the listener failed");
}

static void
usage(void)
{
	fprintf(stderr, "usage: rawpg init CONN\n"
	    "       rawpg load CONN N\n"
	    "       rawpg send CONN < lines\n"
	    "       rawpg delete CONN BATCH\n"
	    "       rawpg commit CONN K N [OUT]\n"
	    "       rawpg wake CONN N MIN_MS MAX_MS OUT [CLAIM_OUT]\n");
	exit(1);
}

static long long
num(const char *s, long long min)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < min)
		usage();
	return v;
}

int
main(int argc, char *argv[])
{
	const char *mode;

	if (argc < 3)
		usage();
	mode = argv[1];
	if (!strcmp(mode, "init") && argc == 3) {
		connect_db(argv[2]);
		init();
	} else if (!strcmp(mode, "load") && argc == 4) {
		connect_db(argv[2]);
		load(num(argv[3], 1));
	} else if (!strcmp(mode, "send") && argc == 3) {
		connect_db(argv[2]);
		send_lines();
	} else if (!strcmp(mode, "delete") && argc == 4) {
		connect_db(argv[2]);
		delete((int)num(argv[3], 1));
	} else if (!strcmp(mode, "commit") && (argc == 5 || argc == 6)) {
		commit(argv[2], (int)num(argv[3], 1), num(argv[4], 1),
		    argc == 6 ? argv[5] : NULL);
	} else if (!strcmp(mode, "wake") && (argc == 7 || argc == 8)) {
		if (num(argv[5], 0) < num(argv[4], 0))
			usage();
		wake(argv[2], num(argv[3], 1), (long)num(argv[4], 0),
		    (long)num(argv[5], 0), argv[6], argc == 8 ? argv[7] : NULL);
	} else {
		usage();
	}
	if (fflush(stdout) == EOF)
		die("cannot write");
	if (conn)
		PQfinish(conn);
	return 0;
}
