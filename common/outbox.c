/*
 * outbox.c: mq-send --from-outbox: moving an application's outbox (the
 * table mq_outbox in its own SQLite file: sqlite/appdb.c) into mq, once
 * or following it; and mq-topic outbox-init, which makes that table.
 *
 * A round reads a batch of rows (one short read of APPDB), has the
 * backend store them and raise the outbox's mark in one transaction of
 * mq's database (mq_outbox_move), and only then deletes the rows at or
 * below the mark from APPDB.  A mover killed between the two finds those
 * rows again when it starts, at or below the mark, and deletes them
 * unsent: nothing is lost, nothing stored twice, whatever the dedup
 * window.
 *
 * Following: the application is not mq and cannot wake the mover, so
 * the mover watches APPDB's files (inotify: the WAL, or the file in
 * rollback mode) and asks SQLite whether another connection committed
 * (PRAGMA data_version, on the connection it holds).  The write of a
 * commit's last frame comes just before the commit shows, so after an
 * event it looks again every few ms for a moment; with no event, once a
 * second.  An idle follower sleeps in poll(2).  A file moved to APPDB's
 * path (a restore, a deploy) is opened instead, as a restart would.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "mq.h"

#define BATCH		1000
#define BATCH_BYTES	(8 * 1048576)
#define LOOK_MS		1000	/* a follower's look with no event */
#define HOT_MS		200	/* looks after an event, every */
#define HOT_EVERY	5	/* ms */

static int wake[2] = { -1, -1 }, ino = -1;

static void
poke(void)
{
	(void)!write(wake[1], "", 1);
}

/* Watches APPDB's files; the -wal is there once the first read made it. */
static void
watch(const char *path)
{
	char wal[PATH_MAX + 8];

	if (ino < 0 && (ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0)
		return;		/* looks once a second instead */
	snprintf(wal, sizeof wal, "%s-wal", path);
	(void)inotify_add_watch(ino, path, IN_MODIFY);
	(void)inotify_add_watch(ino, wal, IN_MODIFY);
}

static void
drain(int fd)
{
	char buf[4096];

	while (fd >= 0 && read(fd, buf, sizeof buf) > 0)
		;
}

/* Until another connection committed to APPDB, a signal, or LOOK_MS. */
static void
await(struct mq_appdb *o)
{
	struct pollfd p[2] = { { wake[0], POLLIN, 0 }, { ino, POLLIN, 0 } };
	int64_t now, end = mq_now() + LOOK_MS, hot = 0;

	while (!mq_stop && !mq_appdb_changed(o) && (now = mq_now()) < end) {
		p[1].fd = ino;
		if (poll(p, 2, hot > now ? HOT_EVERY : (int)(end - now)) > 0 &&
		    p[1].revents)
			hot = mq_now() + HOT_MS;
		drain(wake[0]);
		drain(ino);
	}
}

static void
print(const struct mq_outbox *ob)
{
	size_t i;

	for (i = 0; i < ob->n; i++)
		if (ob->sent[i].off)
			printf("%lld\t%s\t%lld\n", (long long)ob->rows[i].id,
			    ob->rows[i].a.topic, (long long)ob->sent[i].off);
	fflush(stdout);
}

/*
 * One round: the last id read (0: none), and in *seq the largest id
 * APPDB had handed out then.  mq's database is opened (made) once there
 * are rows, and they are all fit to be messages.
 */
static int64_t
move(struct mq **q, const char *db, struct mq_appdb *o, const char *path,
    int quiet, int64_t *seq)
{
	struct mq_outbox ob = { .source = mq_appdb_source(o) };
	int64_t last;
	int n, rc;

	ob.rows = mq_array(NULL, BATCH, sizeof *ob.rows);
	n = mq_appdb_read(o, ob.rows, BATCH, BATCH_BYTES, &ob.seq);
	*seq = ob.seq;
	if (n == 0) {
		free(ob.rows);
		return 0;
	}
	ob.n = n;
	ob.sent = mq_array(NULL, n, sizeof *ob.sent);
	if (!*q)
		*q = mq_open(db, MQ_WRITE);
	/* a mover of the same outbox may have gone past what was read:
	   then APPDB's ids have caught up with the mark; else they went back */
	while ((rc = mq_outbox_move(*q, &ob)) == MQ_E_BEHIND)
		if ((ob.seq = mq_appdb_seq(o)) < ob.moved)
			mq_die(MQ_EX_DATAERR, "cannot move outbox %s: its ids "
			    "went back to %lld, below the %lld moved already "
			    "(a restored or new file? see mq-send(1))", path,
			    (long long)ob.seq, (long long)ob.moved);
	if (rc == MQ_E_TOOBIG)
		mq_die(MQ_EX_DATAERR, "cannot move outbox %s: row %lld: "
		    "message of %zu bytes refused: over the size limit of %lld "
		    "bytes of topic %s", path, (long long)ob.rows[ob.bad].id,
		    ob.rows[ob.bad].r.len, (long long)ob.max_size,
		    ob.rows[ob.bad].a.topic);
	if (!quiet)	/* moved, whatever becomes of the delete */
		print(&ob);
	mq_appdb_delete(o, ob.moved);
	last = ob.rows[n - 1].id;
	mq_outrows_free(ob.rows, n);
	free(ob.rows);
	free(ob.sent);
	return last;
}

/*
 * mq-send --from-outbox: moves what APPDB's outbox holds (its rows up to
 * the newest when it starts); with follow, goes on until SIGTERM or
 * SIGINT.  Returns the exit status.
 */
int
mq_outbox_send(const char *db, const char *path, int follow, int quiet)
{
	struct mq_appdb *o;
	struct mq *q = NULL;
	int64_t last, seq, first = -1;

	if (follow) {	/* before the open, which may wait for a lock */
		if (pipe2(wake, O_NONBLOCK | O_CLOEXEC) < 0)
			mq_die(MQ_EX_SOFTWARE, "cannot make a pipe:");
		mq_catch_stop();
		mq_on_signal(poke);
	}
	o = mq_appdb_open(path, 0, follow);
	while (!mq_stop) {
		mq_appdb_changed(o);	/* a commit from here on is seen */
		last = move(&q, db, o, path, quiet, &seq);
		if (first < 0) {
			first = seq;
			if (follow)
				watch(path);
		}
		if (last && last < (follow ? seq : first))
			continue;	/* more is there */
		if (!follow)
			break;
		await(o);
		if (mq_appdb_replaced(o)) {	/* the new file, as a restart */
			mq_appdb_close(o);
			o = mq_appdb_open(path, 0, 1);
			watch(path);
		}
	}
	mq_on_signal(NULL);
	mq_appdb_close(o);
	mq_close(q);
	return mq_finish();
}

/* mq-topic outbox-init: APPDB's outbox, made if it is not there. */
void
mq_outbox_init(const char *path)
{
	mq_appdb_close(mq_appdb_open(path, 1, 0));
}
