/*
 * pg.c: the PostgreSQL backend's front door: connecting (with TCP
 * keepalives, so a vanished host is noticed), creating and checking the
 * schema, running statements, transactions, errors and their exit
 * statuses, and the table of operations.
 *
 * Invariants:
 * - One connection per program, in autocommit between operations; each
 *   operation is BEGIN ... COMMIT.  Exit 0 after a write means the server
 *   committed it (as durable as its synchronous_commit makes it).
 * - The schema lives in mq_meta's version; a database (or schema, by
 *   search_path) that holds other tables and no mq_meta is not mq's and
 *   is refused before anything is written.
 * - A password is never printed: what errors and listings show is the
 *   connection string with it masked.
 * - Errors: cannot connect, server starting or stopping, lock timeout ->
 *   75; permission -> 77; bad data -> 65; no space, I/O -> 74; a deadlock
 *   or serialization failure returns NULL from pg_run (rolled back), and
 *   the operation starts over.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pg.h"
#include "pgschema.h"	/* pg_schema_sql[], PG_SCHEMA_VERSION: made from schema.sql */

static void pg_close(struct mq *);
static void notice(void *, const PGresult *);

static const struct mq_backend pg_backend = {
	.name = "postgresql",
	.idle_ms = 5000,
	.close = pg_close,
	.topic_get = pg_topic_get,
	.topic_list = pg_topic_list,
	.topic_create = pg_topic_create,
	.topic_conf = pg_topic_conf,
	.topic_delete = pg_topic_delete,
	.group_get = pg_group_get,
	.group_conf = pg_group_conf,
	.group_delete = pg_group_delete,
	.snapshot = pg_snapshot,
	.append = pg_append,
	.outbox = pg_outbox,
	.claim = pg_claim,
	.settle = pg_settle,
	.read = pg_read,
	.offset_at = pg_offset_at,
	.move = pg_move,
	.redrive = pg_redrive,
	.mark = pg_mark,
	.trace = pg_trace,
	.list = pg_list,
	.purge = pg_purge,
	.vacuum = pg_vacuum,
	.join = pg_join,
	.beat = pg_beat,
	.leave = pg_leave,
	.consumers = pg_consumers,
	.reap = pg_reap,
	.waiter = pg_waiter,
	.wait = pg_wait,
	.waiter_free = pg_waiter_free,
};

int64_t
pg_now(void)
{
	return mq_now();
}

/*
 * The connection string with any password masked: in a URL the part
 * after user: and before @, and a password= parameter or keyword.
 */
static char *
mask(const char *conn)
{
	char *s = mq_strdup(conn), *p, *q, *at, *e;
	int uri = strstr(s, "://") != NULL;

	if ((p = strstr(s, "://")) && (at = strchr(p + 3, '@')) &&
	    (q = memchr(p + 3, ':', at - (p + 3))) && q + 1 < at) {
		memmove(q + 4, at, strlen(at) + 1);
		memcpy(q + 1, "***", 3);
	}
	for (p = s; (p = strstr(p, "password")); p += 8) {
		q = p + 8;
		while (*q == ' ')
			q++;
		if (*q != '=' || (p > s && (isalnum((unsigned char)p[-1]) ||
		    p[-1] == '_') && !(p - s >= 3 && !strncmp(p - 3, "ssl", 3))))
			continue;
		q++;
		while (*q == ' ')
			q++;
		e = q;
		if (*e == '\'')
			for (e++; *e && *e != '\''; e++)
				e += *e == '\\' && e[1];
		if (*e == '\'')
			e++;
		else if (uri)
			e += strcspn(e, "&");
		else
			for (; *e && *e != ' '; e++)	/* \ escapes a space */
				e += *e == '\\' && e[1];
		if (e > q) {
			memmove(q + 3, e, strlen(e) + 1);
			memcpy(q, "***", 3);
		}
	}
	return s;
}

/* The first line of a server or libpq message, without its prefix. */
static const char *
first_line(const char *msg, char *buf, size_t len)
{
	size_t n;

	if (!msg || !*msg)
		msg = "unknown error";
	if (!strncmp(msg, "ERROR:  ", 8))
		msg += 8;
	else if (!strncmp(msg, "FATAL:  ", 8))
		msg += 8;
	n = strcspn(msg, "\n");
	snprintf(buf, len, "%.*s", (int)n, msg);
	return buf;
}

static int
status_of(const char *state, int conn_ok)
{
	if (!conn_ok || !state)
		return MQ_EX_TEMPFAIL;	/* the connection broke: try again */
	if (!strncmp(state, "08", 2) || !strcmp(state, "57P01") ||
	    !strcmp(state, "57P02") || !strcmp(state, "57P03") ||
	    !strcmp(state, "55P03") || !strcmp(state, "57014") ||
	    !strncmp(state, "53300", 5) || !strcmp(state, "25006"))
		return MQ_EX_TEMPFAIL;	/* try again */
	if (!strcmp(state, "42501") || !strncmp(state, "28", 2))
		return MQ_EX_NOPERM;
	if (!strncmp(state, "22", 2) || !strncmp(state, "23", 2))
		return MQ_EX_DATAERR;
	if (!strncmp(state, "53", 2) || !strncmp(state, "58", 2) ||
	    !strncmp(state, "XX", 2))
		return MQ_EX_IOERR;
	if (!strcmp(state, "3D000") || !strcmp(state, "3F000"))
		return MQ_EX_NOINPUT;	/* no such database or schema */
	return MQ_EX_SOFTWARE;
}

void
pg_die(struct pgq *q, PGresult *r, const char *what)
{
	const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	char buf[512];

	first_line(r ? PQresultErrorMessage(r) : PQerrorMessage(q->conn), buf,
	    sizeof buf);
	/* mq(7): the one case where 75 does not mean "nothing was done" */
	if (PQstatus(q->conn) != CONNECTION_OK && q->committing)
		what = "connection lost while committing, so it may or may "
		    "not have been done";
	mq_die(status_of(state, PQstatus(q->conn) == CONNECTION_OK),
	    "%s: %s: %s", what, q->shown, buf);
}

/* A decimal string for a parameter; 16 live at once. */
const char *
pg_int(struct pgq *q, int64_t v)
{
	char *b = q->num[q->nnum++ % 16];

	snprintf(b, sizeof q->num[0], "%lld", (long long)v);
	return b;
}

/*
 * Text as PostgreSQL's text columns can keep it (they take UTF-8 only):
 * s itself when it is UTF-8 and does not start with the mark; else the
 * mark and s's bytes in hex, one for one, so that two texts are the same
 * exactly when their forms are (mq(5): a business id; an outbox's source
 * and its rows' own dedup ids).  SQLite keeps the bytes.  Takes s (from
 * malloc) and returns it or its form.
 */
#define TEXT_MARK	"\xef\xbf\xbf"	/* U+FFFF, not a character */

char *
pg_text_form(char *s)
{
	size_t n, i;
	char *h;

	if (!s)
		return NULL;
	n = strlen(s);
	if (mq_utf8_valid((const unsigned char *)s, n) &&
	    strncmp(s, TEXT_MARK, sizeof TEXT_MARK - 1))
		return s;
	h = mq_alloc(sizeof TEXT_MARK + 2 * n);
	memcpy(h, TEXT_MARK, sizeof TEXT_MARK - 1);
	for (i = 0; i < n; i++)
		snprintf(h + sizeof TEXT_MARK - 1 + 2 * i, 3, "%02x",
		    (unsigned char)s[i]);
	free(s);
	return h;
}

/*
 * Waits until the server's WAL is flushed up to $1 (NULL: all it holds
 * now), as its synchronous_commit makes a commit wait: when it is not
 * yet, one transactional WAL record (a logical message) whose commit
 * waits for the flush.  Nothing is written when the flush is there
 * already, or on a standby.
 */
#define FLUSH_SQL	"SELECT CASE WHEN pg_is_in_recovery() THEN NULL " \
	"WHEN pg_current_wal_flush_lsn() >= coalesce($1::pg_lsn, " \
	"pg_current_wal_insert_lsn()) THEN NULL ELSE " \
	"pg_logical_emit_message(true, 'mq', '') END"
/*
 * Tells the waiters of topic $2 ($1: the channels' prefix), in a
 * transaction after the flush's: a NOTIFY holds the database's lock of
 * notifying transactions until its commit ends, and so would make
 * concurrent writers take turns at the flush.  Its payload is the end of
 * the session's last append to the topic, flushed now (mq.end, "TOPIC
 * END", set by the append; an append that failed left the one before,
 * flushed before): every offset below it is durable, since a topic's
 * appends commit in the order of their offsets (deliver.c), so their
 * commits are in the WAL before it.  A claim that hands out only offsets
 * below it need not flush (claim in deliver.c); a waiter keeps the
 * highest it heard (wait.c).  None when this session's commits do not
 * wait for the flush (synchronous_commit off: its flush waited for
 * nothing).  A NOTIFY that fails after the write's commit (the server's
 * queue full) is a warning: the write is done, and the waiters' looks
 * of every few seconds find it.
 */
#define NOTIFY_SQL "SELECT pg_notify($1::text || id, CASE WHEN " \
	"split_part(current_setting('mq.end', true), ' ', 1) = id::text " \
	"AND current_setting('synchronous_commit') <> 'off' " \
	"THEN split_part(current_setting('mq.end', true), ' ', 2) ELSE '' " \
	"END) FROM topic WHERE name = $2"
#define NOTIFY_ALL_SQL "SELECT pg_notify(c, '') FROM unnest($1::text[]) c"

static int
retryable(PGresult *r)
{
	const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);

	return state && (!strcmp(state, "40001") || !strcmp(state, "40P01"));
}

static void pipe_part(struct pgq *, PGresult **, PGresult **);
static void notify_failed(struct pgq *, PGresult *);
static PGresult *piped(struct pgq *, const char *, const char *, int, int,
    const char *const *, const int *, const int *, const char *);

/* A statement's result: r; NULL to start over (rolled back); or the end. */
static PGresult *
outcome(struct pgq *q, PGresult *r, const char *what)
{
	ExecStatusType st = PQresultStatus(r);

	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
		return r;
	if (retryable(r)) {
		PQclear(r);
		pg_rollback(q);
		return NULL;
	}
	pg_die(q, r, what);
}

/*
 * Runs one statement; dies on an error, except a deadlock or
 * serialization failure: then it rolls back and returns NULL, and the
 * operation starts over.  len/fmt may be NULL (all text).
 */
PGresult *
pg_run(struct pgq *q, const char *sql, int n, const char *const *v,
    const int *len, const int *fmt, const char *what)
{
	q->trips++;
	return outcome(q, q->begin ? piped(q, sql, NULL, 0, n, v, len, fmt,
	    what) : PQexecParams(q->conn, sql, n, NULL, v, len, fmt, 0), what);
}

/*
 * Prepared statements.  A hot statement (its text a string literal, so
 * that its address names it) is prepared once a session (pg_session
 * forgets them all, as a new session has none), in the same round trip
 * as its first run, and from then on only executed: the server does not
 * parse it again, nor plan it again: the session's plan_cache_mode is
 * force_generic_plan (pg_session).  Planning each run for its values cost
 * more than most runs (an append: 0.35 ms against 0.15-0.19 ms, pgbench
 * -M prepared; a claim of one message, a millisecond), and a plan may be
 * made while a table is empty: so the hot statements are written so that
 * the one plan holds whatever the sizes and statistics, by key, a range
 * of a key in its index's order with a LIMIT, each lookup by key of one
 * row per row of another LATERAL (or EXISTS) and fenced by OFFSET 0,
 * deletes by the key with an array of its values (off = ANY(...)), with
 * their other conditions in the DELETE itself, which a row changed
 * meanwhile is checked against again (not by ctid), a condition on
 * a partial index's column written so that the index cannot serve it
 * (state + 0) where the key should: a join the planner
 * was free to make read all of a group's deliveries once for each message
 * a claim handed out (90 ms a claim with a few thousand in flight).  Seq
 * scans are off for the session, since an empty table's looks cheapest,
 * and JIT too, which a plan whose cost counts them as off would set off
 * (300 ms a look for dead consumers).  Names carry the session's random
 * tag, so that a session a pooler hands on with another client's
 * statements still in it is no trouble.  Returns 0 when it is prepared
 * already, 1 when it is to be now, -1 to run it plain; its name in name.
 */
static int
prepared(struct pgq *q, const char *sql, char *name, size_t len)
{
	int i, new = 0;

	for (i = 0; i < q->nprep && q->prep[i].sql != sql; i++)
		;
	if (i == q->nprep) {
		if (i == PG_NPREP)
			return -1;
		q->prep[i].sql = sql;
		q->prep[i].id = ++q->prep_seq;
		q->nprep++;
		new = 1;
	}
	snprintf(name, len, "mq_%08x_%d", q->prep_tag, q->prep[i].id);
	return new;
}

/*
 * After an error in a pipeline whose statement number at (from 0) was a
 * Prepare: if it did not go through, it is prepared again (under a new
 * name) when next run.  One that went through stays, and is used.
 */
static void
unprepare(struct pgq *q, const char *sql, int at)
{
	int i;

	if (q->pipe_oks > at)
		return;
	for (i = 0; i < q->nprep; i++)
		if (q->prep[i].sql == sql) {
			q->prep[i] = q->prep[--q->nprep];
			return;
		}
}

/*
 * One statement in a pipeline, one round trip: with the BEGIN of its
 * write transaction when that is not sent yet (and the commit that does
 * not wait for the flush: see pg_begin), and with its Prepare when prep
 * (name: a prepared statement's, else NULL).  Its result, or the first
 * error.
 */
static PGresult *
piped(struct pgq *q, const char *sql, const char *name, int prep, int n,
    const char *const *v, const int *len, const int *fmt, const char *what)
{
	PGresult *r = NULL, *err = NULL;
	int begin = q->begin, at = !begin ? 0 : q->async ? 1 : 2;

	q->begin = 0;
	if (!PQenterPipelineMode(q->conn) || (begin &&
	    !PQsendQueryParams(q->conn, "BEGIN", 0, NULL, NULL, NULL, NULL,
	    0)) || (begin && !q->async && !PQsendQueryParams(q->conn, "SELECT "
	    "set_config('synchronous_commit', 'off', true)", 0, NULL, NULL,
	    NULL, NULL, 0)) || (prep &&
	    !PQsendPrepare(q->conn, name, sql, n, NULL)) || !(name ?
	    PQsendQueryPrepared(q->conn, name, n, v, len, fmt, 0) :
	    PQsendQueryParams(q->conn, sql, n, NULL, v, len, fmt, 0)) ||
	    !PQpipelineSync(q->conn))
		pg_die(q, NULL, what);
	pipe_part(q, &r, &err);
	PQexitPipelineMode(q->conn);
	if (!err)
		return r;
	PQclear(r);
	if (prep)
		unprepare(q, sql, at);	/* at: the Prepare's place */
	return err;
}

/* pg_run of a prepared statement (see prepared): one round trip. */
PGresult *
pg_runc(struct pgq *q, const char *sql, int n, const char *const *v,
    const int *len, const int *fmt, const char *what)
{
	char name[32];
	int prep = prepared(q, sql, name, sizeof name);

	if (prep < 0)
		return pg_run(q, sql, n, v, len, fmt, what);
	q->trips++;
	return outcome(q, piped(q, sql, name, prep, n, v, len, fmt, what),
	    what);
}

/*
 * Queues a prepared statement with n text parameters (NULL for SQL NULL)
 * on the pipeline p, which starts the write's transaction if that is not
 * started yet (see piped).  Nothing is read until pg_pipe_run.
 */
void
pg_pipe_q(struct pgq *q, struct pg_pipe *p, const char *what,
    const char *sql, int n, ...)
{
	const char *v[32];
	char name[32];
	va_list ap;
	int i, prep;

	if (p->n == PG_PIPE_MAX)
		mq_die(MQ_EX_SOFTWARE, "%s: pipeline full", what);
	va_start(ap, n);
	for (i = 0; i < n && i < 32; i++)
		v[i] = va_arg(ap, const char *);
	va_end(ap);
	if (p->n == 0 && p->skip == 0) {
		if (!PQenterPipelineMode(q->conn))
			pg_die(q, NULL, what);
		if (q->begin) {
			q->begin = 0;
			if (!PQsendQueryParams(q->conn, "BEGIN", 0, NULL, NULL,
			    NULL, NULL, 0) || (!q->async &&
			    !PQsendQueryParams(q->conn, "SELECT set_config("
			    "'synchronous_commit', 'off', true)", 0, NULL, NULL,
			    NULL, NULL, 0)))
				pg_die(q, NULL, what);
			p->skip = q->async ? 1 : 2;
		} else
			p->skip = -1;	/* none, but started */
	}
	prep = prepared(q, sql, name, sizeof name);
	if ((prep > 0 && !PQsendPrepare(q->conn, name, sql, n, NULL)) ||
	    !(prep >= 0 ? PQsendQueryPrepared(q->conn, name, n, v, NULL,
	    NULL, 0) : PQsendQueryParams(q->conn, sql, n, NULL, v, NULL, NULL,
	    0)))
		pg_die(q, NULL, what);
	p->sql[p->n] = sql;
	p->prep[p->n] = prep > 0;
	p->what[p->n++] = what;
}

/*
 * Sends p's statements' sync and reads their results into r[0..n-1]: 0;
 * or, after a deadlock or serialization failure, PG_RETRY, rolled back;
 * any other error ends the program.  p is empty again after.
 */
int
pg_pipe_run(struct pgq *q, struct pg_pipe *p, PGresult **r)
{
	/* the results to come, in order: the BEGIN's, then each
	   statement's Prepare (when sent, -2 - j) and its own (j) */
	int of[2 + 2 * PG_PIPE_MAX], items = 0, item = 0, nulls = 0, bad = -1;
	const char *what = p->n ? p->what[0] : "cannot run statements";
	PGresult *x, *err = NULL;
	int i;

	for (i = 0; i < p->skip; i++)
		of[items++] = -1;
	for (i = 0; i < p->n; i++) {
		if (p->prep[i])
			of[items++] = -2 - i;
		of[items++] = i;
		r[i] = NULL;
	}
	if (!PQpipelineSync(q->conn))
		pg_die(q, NULL, what);
	q->trips++;
	/* each statement's results end with a NULL; the sync's do not */
	while (nulls < 2) {
		if (!(x = PQgetResult(q->conn))) {
			nulls++;
			continue;
		}
		nulls = 0;
		if (PQresultStatus(x) == PGRES_PIPELINE_SYNC) {
			PQclear(x);
			break;
		}
		if (PQresultStatus(x) != PGRES_TUPLES_OK &&
		    PQresultStatus(x) != PGRES_COMMAND_OK) {
			if (bad < 0)
				bad = item;
			if (!err && PQresultStatus(x) != PGRES_PIPELINE_ABORTED)
				err = x;
			else
				PQclear(x);
		} else if (item < items && of[item] >= 0)
			r[of[item]] = x;
		else
			PQclear(x);
		item++;
	}
	if (nulls >= 2 && !err)	/* no sync came: the connection is gone */
		err = PQmakeEmptyPGresult(q->conn, PGRES_FATAL_ERROR);
	PQexitPipelineMode(q->conn);
	if (bad >= 0 && bad < items && of[bad] != -1)	/* what failed */
		what = p->what[of[bad] >= 0 ? of[bad] : -2 - of[bad]];
	if (err && bad >= 0 && bad < items && p->late &&
	    of[bad] == p->late - 1) {	/* the write is committed */
		notify_failed(q, err);
		err = NULL;
	}
	if (err) {
		/* a Prepare that did not go through is made again */
		for (i = 0; i < items; i++)
			if (of[i] < -1 && (bad < 0 || i >= bad)) {
				q->pipe_oks = 0;
				unprepare(q, p->sql[-2 - of[i]], 0);
			}
		for (i = 0; i < p->n; i++) {
			PQclear(r[i]);
			r[i] = NULL;
		}
		memset(p, 0, sizeof *p);
		if (PQstatus(q->conn) == CONNECTION_OK && retryable(err)) {
			PQclear(err);
			q->committing = 0;
			pg_rollback(q);
			return PG_RETRY;
		}
		pg_die(q, err, what);
	}
	memset(p, 0, sizeof *p);
	return 0;
}

/*
 * Queues the commit of the write on p, and for flush (unless MQ_SYNC is
 * normal) the wait for the WAL's flush up to lsn (NULL: all it holds):
 * up to PG_PIPE_COMMIT statements.  After pg_pipe_run, pg_pipe_done.
 */
void
pg_pipe_commit(struct pgq *q, struct pg_pipe *p, int flush, const char *lsn)
{
	struct pg_arr a = { 0 };
	char chan[64];
	int i;

	pg_pipe_q(q, p, "cannot commit", "COMMIT", 0);
	if (flush && !q->async && q->nnotify) {	/* see commit_sql */
		pg_pipe_q(q, p, "cannot commit", "BEGIN", 0);
		pg_pipe_q(q, p, "cannot commit", FLUSH_SQL, 1, lsn);
		pg_pipe_q(q, p, "cannot commit", "COMMIT", 0);
		q->flushes++;
	} else if (flush && !q->async) {
		pg_pipe_q(q, p, "cannot commit", FLUSH_SQL, 1, lsn);
		q->flushes++;
	}
	for (i = 0; i < q->nnotify; i++) {
		pg_channel(q, q->notify[i], chan, sizeof chan);
		pg_arr_str(&a, chan);
	}
	if (q->nnotify) {
		pg_pipe_q(q, p, "cannot notify", NOTIFY_ALL_SQL, 1,
		    pg_arr_end(&a));
		p->late = p->n;
	}
	pg_arr_free(&a);
	q->nnotify = 0;
	q->committing = 1;
}

void
pg_pipe_done(struct pgq *q)
{
	q->committing = 0;
	q->in_tx = 0;
}

/*
 * pg_run (prep: pg_runc) with n text parameters, NULL for SQL NULL: pg_q
 * and pg_qc (pg.h).
 */
PGresult *
pg_qx(struct pgq *q, int prep, const char *what, const char *sql, int n,
    ...)
{
	const char *v[32];
	va_list ap;
	int i;

	va_start(ap, n);
	for (i = 0; i < n && i < 32; i++)
		v[i] = va_arg(ap, const char *);
	va_end(ap);
	return prep ? pg_runc(q, sql, n, v, NULL, NULL, what) :
	    pg_run(q, sql, n, v, NULL, NULL, what);
}

int64_t
pg_get(PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col) ? 0 :
	    strtoll(PQgetvalue(r, row, col), NULL, 10);
}

int
pg_null(PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col);
}

char *
pg_str(PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col) ? NULL :
	    mq_memdup(PQgetvalue(r, row, col), PQgetlength(r, row, col));
}

void
pg_copy(PGresult *r, int row, int col, char *buf, size_t len)
{
	snprintf(buf, len, "%s", PQgetisnull(r, row, col) ? "" :
	    PQgetvalue(r, row, col));
}

/* A bytea column of a text-format result, decoded. */
unsigned char *
pg_bytes(PGresult *r, int row, int col, size_t *len)
{
	unsigned char *raw, *out;

	raw = PQunescapeBytea((const unsigned char *)PQgetvalue(r, row, col),
	    len);
	if (!raw)
		mq_die(MQ_EX_SOFTWARE, "out of memory");
	out = (unsigned char *)mq_memdup(raw, *len);
	PQfreemem(raw);
	return out;
}

/*
 * A write transaction commits without waiting for the server's flush
 * (synchronous_commit off for it alone), so the rows it locked (a topic's
 * next_off, a group's row) are free for the next writer at once; then,
 * for a write that must be durable, pg_flush waits for the flush outside
 * any lock, and flushes that run at once share one sync of the WAL (the
 * server's group commit), as SQLite's commits do in the queue of
 * engine.c.  Readers may see such a commit before it is on disk: what
 * they show, they flush first.  Its waiters are told (NOTIFY) in the
 * flush's transaction, so they wake when there is something they may
 * show, as on SQLite; with MQ_SYNC=normal, at the commit.
 */
int
pg_begin(struct pgq *q)
{
	q->in_tx = 1;
	q->begin = 1;	/* sent with the first statement: see pg_run */
	return 0;
}

void
pg_flush(struct pgq *q, const char *lsn)
{
	PGresult *r;

	if (q->async)
		return;
	q->committing = 1;
	q->flushes++;
	while (!(r = pg_q(q, "cannot commit", FLUSH_SQL, 1, lsn)))
		;
	q->committing = 0;
	PQclear(r);
}

/*
 * The results of one part of a pipeline, up to its sync: the last
 * statement's is kept in *keep, the first error in *err (a lost
 * connection is one); q->pipe_oks counts the statements that went
 * through (from the first on: after an error, none does).
 */
static void
pipe_part(struct pgq *q, PGresult **keep, PGresult **err)
{
	PGresult *r;
	int nulls = 0;

	q->pipe_oks = 0;
	while (nulls < 2) {
		if (!(r = PQgetResult(q->conn))) {
			nulls++;	/* the end of a statement's results */
			continue;
		}
		nulls = 0;
		switch (PQresultStatus(r)) {
		case PGRES_PIPELINE_SYNC:
			PQclear(r);
			return;
		case PGRES_TUPLES_OK:
		case PGRES_COMMAND_OK:
			PQclear(*keep);		/* the last statement's */
			*keep = r;
			q->pipe_oks++;
			continue;
		case PGRES_PIPELINE_ABORTED:
			break;
		default:
			if (!*err) {
				*err = r;
				continue;
			}
		}
		PQclear(r);
	}
	if (!*err)	/* no sync came: the connection is gone */
		*err = PQmakeEmptyPGresult(q->conn, PGRES_FATAL_ERROR);
}

/* A NOTIFY after the commit failed: see NOTIFY_SQL. */
static void
notify_failed(struct pgq *q, PGresult *err)
{
	char buf[512];

	if (PQstatus(q->conn) != CONNECTION_OK)
		pg_die(q, err, "cannot notify");	/* the next would fail */
	first_line(PQresultErrorMessage(err), buf, sizeof buf);
	mq_warn("cannot notify waiters (they look again within seconds): "
	    "%s: %s", q->shown, buf);
	PQclear(err);
}

/*
 * pg_run of a statement that commits as it ends (autocommit), and then,
 * in the same round trip (a pipeline), pg_flush, and once that is done
 * the NOTIFY of topic's waiters (NOTIFY_SQL).  NULL: start over, as for
 * pg_run; the flush runs only after the statement succeeded.
 *
 * The statements are prepared (see prepared), in the same round trip.
 */
PGresult *
pg_run_flush(struct pgq *q, const char *sql, int n, const char *const *v,
    const int *len, const int *fmt, const char *topic, const char *what)
{
	PGresult *r = NULL, *flushed = NULL, *err = NULL;
	const char *fv[1] = { NULL }, *nv[2] = { NULL, topic };
	char name[32], fname[32], nname[32], chan[64];
	int prep, fprep, nprep;

	if (q->async || (prep = prepared(q, sql, name, sizeof name)) < 0 ||
	    (fprep = prepared(q, FLUSH_SQL, fname, sizeof fname)) < 0 ||
	    (nprep = prepared(q, NOTIFY_SQL, nname, sizeof nname)) < 0)
		return pg_run(q, sql, n, v, len, fmt, what);
	pg_channel(q, 0, chan, sizeof chan);
	chan[strlen(chan) - 1] = '\0';		/* mq_<lockspace>_ */
	nv[0] = chan;
	q->committing = 1;
	if (!PQenterPipelineMode(q->conn) || (prep &&
	    !PQsendPrepare(q->conn, name, sql, n, NULL)) ||
	    !PQsendQueryPrepared(q->conn, name, n, v, len, fmt, 0) ||
	    !PQpipelineSync(q->conn) || (fprep &&
	    !PQsendPrepare(q->conn, fname, FLUSH_SQL, 1, NULL)) ||
	    !PQsendQueryPrepared(q->conn, fname, 1, fv, NULL, NULL, 0) ||
	    !PQpipelineSync(q->conn) || (nprep &&
	    !PQsendPrepare(q->conn, nname, NOTIFY_SQL, 2, NULL)) ||
	    !PQsendQueryPrepared(q->conn, nname, 2, nv, NULL, NULL, 0) ||
	    !PQpipelineSync(q->conn))
		pg_die(q, NULL, what);
	q->trips++;
	q->flushes++;
	pipe_part(q, &r, &err);
	if (err) {		/* the statement failed: no flush to wait for */
		if (prep)
			unprepare(q, sql, 0);
		PQclear(r);
		r = NULL;
		pipe_part(q, &r, &flushed);
		if (fprep)
			unprepare(q, FLUSH_SQL, 0);
		PQclear(r);
		PQclear(flushed);
		r = flushed = NULL;
		pipe_part(q, &r, &flushed);
		if (nprep)
			unprepare(q, NOTIFY_SQL, 0);
		PQclear(r);
		PQclear(flushed);
		PQexitPipelineMode(q->conn);
		if (PQstatus(q->conn) == CONNECTION_OK && retryable(err)) {
			q->committing = 0;
			PQclear(err);
			return NULL;
		}
		pg_die(q, err, what);
	}
	pipe_part(q, &flushed, &err);
	q->committing = 0;
	if (err) {
		PQexitPipelineMode(q->conn);
		pg_die(q, err, "cannot commit");
	}
	PQclear(flushed);
	flushed = NULL;
	pipe_part(q, &flushed, &err);
	PQexitPipelineMode(q->conn);
	if (err)
		notify_failed(q, err);
	PQclear(flushed);
	return r;
}

static int
commit(struct pgq *q, int flush)
{
	struct pg_pipe p;
	PGresult *r[PG_PIPE_MAX];
	int i, n;

	if (q->begin) {		/* nothing was done */
		q->begin = q->in_tx = 0;
		q->nnotify = 0;
		return 0;
	}
	/* the flush in the same round trip, a transaction of its own, and
	   the NOTIFYs after it */
	memset(&p, 0, sizeof p);
	pg_pipe_commit(q, &p, flush, NULL);
	n = p.n;
	if (pg_pipe_run(q, &p, r) < 0)
		return PG_RETRY;	/* rolled back */
	pg_pipe_done(q);
	for (i = 0; i < n; i++)
		PQclear(r[i]);
	return 0;
}

/* Commits, and for a write returns once it is durable. */
int
pg_commit(struct pgq *q)
{
	return commit(q, q->in_tx == 1);
}

/*
 * Commits a write that need not be durable itself (a claim), and makes
 * durable what it read if it shows anything.
 */
int
pg_commit_seen(struct pgq *q, int shows)
{
	return commit(q, shows);
}

/* A read-only transaction that sees one snapshot throughout. */
int
pg_begin_read(struct pgq *q)
{
	PGresult *r = pg_q(q, "cannot start transaction", "BEGIN ISOLATION "
	    "LEVEL REPEATABLE READ READ ONLY", 0);

	if (!r)
		return PG_RETRY;
	PQclear(r);
	q->in_tx = 2;
	return 0;
}

void
pg_rollback(struct pgq *q)
{
	if (q->in_tx && !q->begin)
		PQclear(PQexec(q->conn, "ROLLBACK"));
	q->in_tx = q->begin = 0;
	q->nnotify = 0;
}

void
pg_channel(struct pgq *q, int64_t topic, char *buf, size_t len)
{
	/* channels are the database's: the lockspace keeps schemas apart */
	snprintf(buf, len, "mq_%u_%lld", (unsigned)q->lockspace,
	    (long long)topic);
}

/*
 * Tells the topic's waiters: a write's, after its commit, and once it is
 * flushed when it waits for that (commit_sql); NOTIFY at once when no
 * write is under way.
 */
void
pg_notify(struct pgq *q, int64_t topic)
{
	char sql[64];
	PGresult *r;
	int i;

	if (q->in_tx == 1) {
		for (i = 0; i < q->nnotify && q->notify[i] != topic; i++)
			;
		if (i == q->nnotify) {
			q->notify = mq_array(q->notify, i + 1,
			    sizeof *q->notify);
			q->notify[q->nnotify++] = topic;
		}
		return;
	}
	pg_channel(q, topic, sql + 7, sizeof sql - 7);
	memcpy(sql, "NOTIFY ", 7);
	if ((r = pg_q(q, "cannot notify", sql, 0)))
		PQclear(r);
}

/*
 * Upgrade steps: migrations[v - 1] takes a version v schema to v + 1.  A
 * step may not be edited once released; add a new one.
 */
static const char *migrations[] = {
	/*
	 * 1 -> 2: when each group last settled, kept by the statements that
	 * add to settled; until then, the history's last ack says
	 */
	"ALTER TABLE grp ADD COLUMN settled_ts bigint; "
	"UPDATE grp SET settled_ts = (SELECT max(ts) FROM history h "
	"WHERE h.grp = grp.id AND h.event = 'acked')",
	/* 2 -> 3: pausing a topic or a group */
	"ALTER TABLE topic ADD COLUMN paused_until bigint; "
	"ALTER TABLE grp ADD COLUMN paused_until bigint",
	/* 3 -> 4: a time limit for a group's handlers */
	"ALTER TABLE grp ADD COLUMN timeout bigint",
	/* 4 -> 5: mq-topic cancel */
	"ALTER TABLE grp ADD COLUMN cancelled bigint NOT NULL DEFAULT 0",
	/* 5 -> 6: a time to live */
	"ALTER TABLE topic ADD COLUMN ttl bigint; "
	"ALTER TABLE msg ADD COLUMN expires bigint; "
	"ALTER TABLE grp ADD COLUMN lapsed bigint NOT NULL DEFAULT 0",
	/* 6 -> 7: message headers; how far each outbox has been moved,
	   send() (send.sql); idempotent consumption; rate and per-key
	   limits */
	"ALTER TABLE msg ADD COLUMN headers text; "
	"CREATE TABLE outbox (source text PRIMARY KEY, moved bigint NOT NULL, "
	"rows bigint NOT NULL DEFAULT 0, ts bigint NOT NULL); "
	"ALTER TABLE msg ADD COLUMN dedup text; "
	"ALTER TABLE grp ADD COLUMN idem text; "
	"ALTER TABLE grp ADD COLUMN idem_window bigint NOT NULL "
	"DEFAULT 86400000; "
	"ALTER TABLE grp ADD COLUMN duplicates bigint NOT NULL DEFAULT 0; "
	"ALTER TABLE grp ADD COLUMN rate_n bigint; "
	"ALTER TABLE grp ADD COLUMN rate_ms bigint; "
	"ALTER TABLE grp ADD COLUMN rate_tat bigint NOT NULL DEFAULT 0; "
	"ALTER TABLE grp ADD COLUMN per_key integer NOT NULL DEFAULT 0; "
	"ALTER TABLE delivery ADD COLUMN bid text; "
	"CREATE INDEX delivery_bid ON delivery (grp, bid) "
	"WHERE bid IS NOT NULL; "
	"CREATE TABLE consumed (grp bigint NOT NULL, bid text NOT NULL, "
	"off bigint NOT NULL, ts bigint NOT NULL, PRIMARY KEY (grp, bid))",
	/* 7 -> 8: runs of leases (lease.sql) */
	pg_lease_sql,
	/* 8 -> 9: batches appended for other producers (combine.c) */
	"CREATE TABLE combined (token bigint PRIMARY KEY, seq bigint NOT NULL, "
	"topic bigint NOT NULL, first bigint NOT NULL, ts bigint NOT NULL)",
};
_Static_assert(sizeof migrations / sizeof *migrations ==
    PG_SCHEMA_VERSION - 1, "one migration step per schema version");

/* Makes (or remakes) send() of send.sql, in the transaction under way. */
static void
send_fn(struct pgq *q, const char *what)
{
	PGresult *r = PQexec(q->conn, pg_send_sql);

	if (PQresultStatus(r) != PGRES_COMMAND_OK)
		pg_die(q, r, what);
	PQclear(r);
}

/*
 * Brings an older schema up to date, in one transaction under the lock
 * that creation takes, looking at the version again under it: by whoever
 * opens it first, reader or writer (as on SQLite).
 */
static void
migrate(struct pgq *q)
{
	PGresult *r;
	int64_t v;
	int i;

	for (;;) {
		pg_begin(q);
		if (!(r = pg_q(q, "cannot lock the schema",
		    "SELECT pg_advisory_xact_lock(hashtext('mq schema ' "
		    "|| coalesce(current_schema(), '')))", 0)))
			continue;
		PQclear(r);
		if (!(r = pg_q(q, "cannot read the schema", "SELECT value "
		    "FROM mq_meta WHERE key = 'version'", 0)))
			continue;
		v = pg_get(r, 0, 0);
		PQclear(r);
		for (i = (int)v; i < PG_SCHEMA_VERSION; i++) {
			r = PQexec(q->conn, migrations[i - 1]);
			if (PQresultStatus(r) != PGRES_COMMAND_OK)
				pg_die(q, r, "cannot migrate schema");
			PQclear(r);
		}
		if (v < PG_SCHEMA_VERSION)	/* send() as this version has it */
			send_fn(q, "cannot migrate schema");
		if (!(r = pg_q(q, "cannot migrate schema", "UPDATE mq_meta "
		    "SET value = $1 WHERE key = 'version'", 1,
		    pg_int(q, PG_SCHEMA_VERSION))))
			continue;
		PQclear(r);
		if (pg_commit(q) != PG_RETRY)
			return;
	}
}

/*
 * The schema: created by the first writer, under a transaction-level
 * advisory lock so concurrent first writers create it once; checked by
 * everyone.
 */
static void
schema(struct pgq *q)
{
	PGresult *r;
	int64_t v = 0, others;
	int locked = 0;

	/* one look, without a transaction; a writer that must create it
	   looks again under the lock */
	for (;;) {
		r = pg_q(q, "cannot read the schema",
		    "SELECT to_regclass('mq_meta') IS NOT NULL, "
		    "(SELECT count(*) FROM pg_tables WHERE schemaname = "
		    "current_schema()), current_schema() IS NULL, "
		    "(SELECT string_agg(nspname, ', ') FROM pg_namespace WHERE "
		    "nspname = ANY (string_to_array(replace(current_setting("
		    "'search_path'), ' ', ''), ',')) AND NOT "
		    "has_schema_privilege(oid, 'USAGE')), "
		    "current_setting('search_path')", 0);
		if (!r) {
			locked = 0;
			continue;
		}
		v = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
		others = pg_get(r, 0, 1);
		if (!v && !pg_null(r, 0, 3))	/* there, but not for us */
			mq_die(MQ_EX_NOPERM, "cannot open database %s: "
			    "permission denied for schema %s", q->shown,
			    PQgetvalue(r, 0, 3));
		if (!v && !strcmp(PQgetvalue(r, 0, 2), "t"))
			mq_die(MQ_EX_NOINPUT, "cannot open database %s: no "
			    "schema of its search_path (%s) exists", q->shown,
			    PQgetvalue(r, 0, 4));
		PQclear(r);
		if (v || others > 0 || locked || q->mode != MQ_WRITE)
			break;
		if (pg_begin(q))
			continue;
		if (!(r = pg_q(q, "cannot lock the schema",
		    "SELECT pg_advisory_xact_lock(hashtext('mq schema ' "
		    "|| coalesce(current_schema(), '')))", 0)))
			continue;
		PQclear(r);
		locked = 1;
	}
	if (!v && others > 0)
		mq_die(MQ_EX_DATAERR, "cannot open database %s: not an mq "
		    "database (it has other tables and no mq_meta)", q->shown);
	if (!v && q->mode != MQ_WRITE)
		mq_die(MQ_EX_NOINPUT, "database %s has no mq schema yet",
		    q->shown);
	if (!v) {
		r = PQexec(q->conn, pg_schema_sql);	/* many statements */
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			pg_die(q, r, "cannot create schema");
		PQclear(r);
		r = PQexec(q->conn, pg_lease_sql);
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			pg_die(q, r, "cannot create schema");
		PQclear(r);
		send_fn(q, "cannot create schema");
		r = pg_q(q, "cannot create schema", "INSERT INTO mq_meta "
		    "(key, value) VALUES ('app', 'mq'), ('version', $1), "
		    "('lockspace', $2)", 2, pg_int(q, PG_SCHEMA_VERSION),
		    pg_int(q, arc4random_uniform(INT32_MAX) + 1));
		PQclear(r);
	}
	r = pg_q(q, "cannot read the schema", "SELECT (SELECT value FROM "
	    "mq_meta WHERE key = 'version'), (SELECT value FROM mq_meta WHERE "
	    "key = 'lockspace')", 0);
	v = pg_get(r, 0, 0);
	q->lockspace = pg_get(r, 0, 1);
	PQclear(r);
	if (v > PG_SCHEMA_VERSION)
		mq_die(MQ_EX_DATAERR, "cannot open database %s: schema version "
		    "%lld is newer than this mq (%d); upgrade mq", q->shown,
		    (long long)v, PG_SCHEMA_VERSION);
	if (v < 1)
		mq_die(MQ_EX_DATAERR, "cannot open database %s: not an mq "
		    "database (mq_meta without a version)", q->shown);
	if (q->in_tx && pg_commit(q) == PG_RETRY)
		schema(q);
	else if (v < PG_SCHEMA_VERSION)
		migrate(q);
}

/*
 * The session's settings, in one round trip: a lock waited for longer
 * than MQ_BUSY_TIMEOUT is 75 (55P03); the server probes an idle client
 * after 10s, every 5s, 3 times, so a vanished host's session (and its
 * consumers' advisory locks) ends within 25s (tcp_user_timeout bounds it
 * while the server is sending).
 */
void
pg_session(struct pgq *q)
{
	char sql[400];
	PGresult *r;

	snprintf(sql, sizeof sql, "SET lock_timeout = %lld; "
	    "SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; "
	    "SET tcp_keepalives_count = 3; SET tcp_user_timeout = 25000%s%s",
	    (long long)q->busy, q->async ? "; SET synchronous_commit = off" :
	    "", PQserverVersion(q->conn) >= 120000 ?
	    "; SET plan_cache_mode = force_generic_plan; "
	    "SET enable_seqscan = off; SET jit = off" : "");
	r = PQexec(q->conn, sql);
	q->trips++;
	if (PQresultStatus(r) != PGRES_COMMAND_OK)
		pg_die(q, r, "cannot set up the connection");
	PQclear(r);
	/* a new session has nothing prepared; names that no other client of
	   a pooled server session used */
	q->nprep = 0;
	q->prep_tag = arc4random();
	/* what the last server said was flushed: this one may be another
	   (a standby promoted, of a connection string of several hosts) */
	q->ndurable = 0;
}

struct mq *
mq_pg_open(const char *conn, int mode)
{
	static const char *keys[] = { "keepalives", "keepalives_idle",
	    "keepalives_interval", "keepalives_count", "connect_timeout",
	    "application_name", "dbname", NULL };
	const char *vals[8] = { "1", "10", "5", "3", "10", NULL, conn, NULL };
	struct pgq *q = mq_alloc(sizeof *q);
	const char *sync = getenv("MQ_SYNC");
	char buf[512];
	int64_t busy = mq_busy_timeout();

	if (sync && *sync && strcmp(sync, "full") && strcmp(sync, "normal"))
		mq_die(MQ_EX_USAGE, "invalid MQ_SYNC '%s': want full or normal",
		    sync);
	q->base.be = &pg_backend;
	q->base.path = q->shown = mask(conn);	/* what mq_path shows */
	q->mode = mode;	/* MQ_UPDATE: writes, but makes no schema */
	vals[5] = mq_prog;
	q->conn = PQconnectdbParams(keys, vals, 1);
	if (!q->conn)
		mq_die(MQ_EX_SOFTWARE, "out of memory");
	if (PQstatus(q->conn) != CONNECTION_OK) {
		first_line(PQerrorMessage(q->conn), buf, sizeof buf);
		if (strstr(buf, "percent-encoded"))	/* it quotes the text */
			mq_die(MQ_EX_USAGE, "cannot connect to %s: invalid "
			    "percent-encoding in the connection string",
			    q->shown);
		if (strstr(buf, "invalid URI") || strstr(buf, "invalid "
		    "connection option") || strstr(buf, "missing \"=\"") ||
		    strstr(buf, "unterminated quoted string") ||
		    strstr(buf, "invalid sslmode") || strstr(buf, "invalid "
		    "integer value"))
			mq_die(MQ_EX_USAGE, "cannot connect to %s: %s",
			    q->shown, buf);
		/* a refusal is 77, a missing database 66; else try again */
		mq_die(PQconnectionNeedsPassword(q->conn) ||
		    strstr(buf, "authentication failed") ||
		    strstr(buf, "permission denied") ||
		    strstr(buf, "pg_hba.conf") ||
		    (strstr(buf, "role \"") && strstr(buf, "does not exist")) ?
		    MQ_EX_NOPERM : strstr(buf, "does not exist") ?
		    MQ_EX_NOINPUT : MQ_EX_TEMPFAIL, "cannot connect to %s: %s",
		    q->shown, buf);
	}
	PQsetNoticeReceiver(q->conn, notice, NULL);
	q->busy = busy > 0 ? busy : 1;
	q->async = sync && !strcmp(sync, "normal");
	pg_session(q);
	schema(q);
	return &q->base;
}

/*
 * The server's warnings (such as "terminating connection due to
 * administrator command" before a restart) in mq's form, one line; its
 * notices (such as "already exists, skipping") are nobody's business.
 */
static void
notice(void *arg, const PGresult *r)
{
	const char *sev = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);
	const char *msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);

	(void)arg;
	if (sev && msg && strcmp(sev, "NOTICE") && strcmp(sev, "DEBUG") &&
	    strcmp(sev, "LOG") && strcmp(sev, "INFO"))
		fprintf(stderr, "%s: server: %s\n", getprogname(), msg);
}

static void
pg_close(struct mq *mq)
{
	struct pgq *q = PGQ(mq);
	int e = errno;		/* a failed write's, for mq_finish */

	pg_comb_close(q);
	if (getenv("MQ_PG_TRIPS")) {	/* mq(7): counted for make bench */
		fprintf(stderr, "%s: %lld round trips\n", getprogname(),
		    (long long)q->trips);
		fprintf(stderr, "%s: %lld flushes asked\n", getprogname(),
		    (long long)q->flushes);
	}
	PQfinish(q->conn);
	free(q->shown);
	free(q->notify);
	free(q);
	errno = e;
}

int
mq_pg_schema_version(void)
{
	return PG_SCHEMA_VERSION;
}
