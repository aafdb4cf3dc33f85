/*
 * engine.c: the -mq file beside the database, mapped into every mq
 * process that opens it, and what it is for:
 *
 * 1. A writer queue.  A write transaction takes an flock(2) on the file
 *    before BEGIN IMMEDIATE and lets go after COMMIT, so a waiting writer
 *    is woken the moment the lock is free instead of sleeping in a busy
 *    handler.  (flock, not fcntl: fcntl locks are per process and SQLite
 *    owns the database's; never open or close the database file itself.)
 *
 * 2. Group commit.  Commits run with synchronous=NORMAL: the WAL is
 *    written under the lock but not synced.  After letting go of the lock
 *    a writer waits until its commit is on disk: one process at a time
 *    (the leader) syncs the WAL for every commit finished before its sync
 *    began, the others sleep on a futex until it is done.  Invariants:
 *    - writing is bumped just before a durable COMMIT, written just
 *      after, both inside the queue, so every commit numbered <= written
 *      has its frames in the WAL (lazy commits, claims, are not numbered:
 *      nobody waits for them, and a later sync covers them anyway);
 *    - a leader reads written, then syncs, then raises synced to what it
 *      read: synced never covers a commit whose frames came after the
 *      sync began;
 *    - a sync of the WAL file covers every write to it before the sync,
 *      by any process (they share the page cache); a checkpoint syncs the
 *      WAL before copying it, so frames a restarted WAL overwrote were
 *      synced into the database first.
 *    A reader (a claim, a read of the log) may see a commit whose writer
 *    has not synced yet.  Before it shows anything it waits for
 *    synced >= writing as it was after its read, or syncs itself: so
 *    nothing is printed that a power cut could take back.
 *    A leader that dies leaves its pid behind; waiters look every 100ms
 *    and take over from a dead one (two syncs at once are harmless).
 *
 * 3. Wake-ups per topic.  Each topic has a slot (its id modulo NSLOT) with
 *    a sequence number and a count of sleepers.  A writer bumps the slots
 *    of the topics it changed once it has committed (before its sync:
 *    what a follower then reads it shows only once it is durable, see 2),
 *    and wakes their sleepers (FUTEX_WAKE, when the slot counts any: a
 *    killed sleeper leaves the count one too high, which only costs a
 *    wake-up call).  A follower reads the number before it looks at the
 *    database and sleeps only while it is unchanged, so no wake is lost
 *    and a quiet topic costs its followers nothing.
 *
 * The file holds no data: deleting it while no mq program runs loses
 * nothing.  All zeroes is a valid state, so concurrent creators need no
 * lock.  Without the file (a directory we may not write to) writers fall
 * back to synchronous=FULL and waiters to polling.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "sq.h"
#include "shm.h"

#define CKPT_FRAMES	1000
#define RO_LOOK_MS	50	/* a sleeper that cannot count itself */

void
sq_max_store(uint64_t *p, uint64_t v)
{
	uint64_t old = LOAD(p);

	while (old < v && !CAS(p, old, v))
		;
}

void
sq_engine_open(struct sq *q)
{
	size_t n = strlen(q->base.path);
	char *path = mq_alloc(n + 4);
	struct sq_shm *m;
	struct stat st;
	uint32_t zero = 0;
	mode_t mode = 0644;
	uid_t uid = geteuid();
	gid_t gid = getegid();
	int fd;

	snprintf(path, n + 4, "%s-mq", q->base.path);
	if (stat(q->base.path, &st) == 0) {
		mode = st.st_mode & 0666;
		uid = st.st_uid;
		gid = st.st_gid;
	}
	q->shm_rw = 1;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0) {
		q->shm_rw = 0;
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	}
	free(path);
	if (fd < 0)
		goto none;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		goto close;
	/* like SQLite's -wal and -shm: the database's bits and owner */
	if (q->shm_rw && st.st_uid == geteuid() && (st.st_mode & 0777) != mode)
		(void)fchmod(fd, mode);
	if (q->shm_rw && geteuid() == 0 && (st.st_uid != uid || st.st_gid != gid))
		(void)fchown(fd, uid, gid);
	else if (q->shm_rw && st.st_uid == geteuid() && st.st_gid != gid)
		(void)fchown(fd, (uid_t)-1, gid);	/* if a member */
	/* an older mq's file is shorter (it ends at slot[]): a writer makes
	   it longer; a reader maps what is there, and never looks past
	   slot[] */
	q->shm_len = sizeof *m;
	if ((size_t)st.st_size < sizeof *m) {
		if (!q->shm_rw)
			q->shm_len = (size_t)st.st_size;
		else if (ftruncate(fd, sizeof *m) < 0)
			goto close;
	}
	if (q->shm_len < offsetof(struct sq_shm, comb_word))
		goto close;
	m = mmap(NULL, q->shm_len, PROT_READ | (q->shm_rw ? PROT_WRITE : 0),
	    MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		goto close;
	if (LOAD(&m->magic) == 0 && q->shm_rw) {
		STORE(&m->version, SHM_VERSION);
		CAS(&m->magic, zero, SHM_MAGIC);
	}
	if (LOAD(&m->magic) != SHM_MAGIC || LOAD(&m->version) != SHM_VERSION) {
		munmap(m, q->shm_len);
		goto close;
	}
	q->shm = m;
	q->shmfd = fd;
	if (!q->shm_rw && q->mode != MQ_READ && q->sync == SQ_GROUP)
		q->sync = SQ_FULL;	/* we cannot take part: sync alone */
	return;
close:
	close(fd);
none:
	q->shm_rw = 0;
	if (q->sync == SQ_GROUP)
		q->sync = SQ_FULL;
}

void
sq_engine_close(struct sq *q)
{
	if (q->shm)
		munmap(q->shm, q->shm_len);
	if (q->shmfd >= 0)
		close(q->shmfd);
	q->shm = NULL;
	q->shmfd = -1;
}

static void
on_alarm(int sig)
{
	(void)sig;
}

/*
 * Joins the writer queue.  Blocked, it is woken by the kernel when the
 * lock is free; a repeating timer interrupts the wait now and then so the
 * busy timeout holds (and a timer that fired before the wait began only
 * delays it by one period).
 */
void
sq_queue_enter(struct sq *q)
{
	static int handler;
	struct itimerval it, off;
	struct sigaction sa;
	int64_t start;

	if (q->shmfd < 0 || q->queued) {
		q->queue_since = 0;
		return;
	}
	if (flock(q->shmfd, LOCK_EX | LOCK_NB) == 0) {
		q->queued = 1;
		q->queue_since = 0;
		return;
	}
	if (errno != EWOULDBLOCK)
		mq_die(MQ_EX_IOERR, "cannot lock %s-mq:", q->base.path);
	if (!handler) {
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_alarm;	/* no SA_RESTART: flock returns */
		sigemptyset(&sa.sa_mask);
		sigaction(SIGALRM, &sa, NULL);
		handler = 1;
	}
	memset(&it, 0, sizeof it);
	memset(&off, 0, sizeof off);
	it.it_value.tv_usec = it.it_interval.tv_usec = 50000;
	setitimer(ITIMER_REAL, &it, NULL);
	start = q->queue_since ? q->queue_since : mq_now();
	while (flock(q->shmfd, LOCK_EX) < 0) {
		if (errno != EINTR)
			mq_die(MQ_EX_IOERR, "cannot lock %s-mq:", q->base.path);
		if (mq_now() - start >= q->busy_ms) {
			setitimer(ITIMER_REAL, &off, NULL);
			mq_die(MQ_EX_TEMPFAIL, "cannot start write: %s: database "
			    "is busy (locked by another process); try again",
			    q->base.path);
		}
	}
	setitimer(ITIMER_REAL, &off, NULL);
	q->queued = 1;
	q->queue_since = 0;
}

void
sq_queue_leave(struct sq *q)
{
	if (q->queued) {
		flock(q->shmfd, LOCK_UN);
		q->queued = 0;
		sq_comb_left(q);
	}
}

/* The number of the commit about to be made (0: not counted). */
uint64_t
sq_commit_begins(struct sq *q)
{
	return q->shm_rw ? ADD(&q->shm->writing, 1) : 0;
}

void
sq_commit_done(struct sq *q, uint64_t seq)
{
	if (seq)
		sq_max_store(&q->shm->written, seq);
}

_Static_assert(offsetof(struct sq_shm, joins) == 20, "joins moved");

/*
 * Joins so far: a reaper that saw the same number before its last read
 * of a group's consumers knows the list it read is whole (deliver.c).
 */
uint32_t
sq_joins(struct sq *q)
{
	return q->shm ? LOAD(&q->shm->joins) : 0;
}

void
sq_joined(struct sq *q)
{
	if (q->shm_rw)
		ADD(&q->shm->joins, 1);
}

/* The commits a read that ends now may have seen. */
uint64_t
sq_commits_seen(struct sq *q)
{
	return q->shm ? LOAD(&q->shm->writing) : 0;
}

/*
 * Syncs the WAL, covering commits up to upto.  A failed sync loses what
 * it was to make durable: the error is marked in the -mq file, so every
 * writer waiting on those commits fails too (after an error Linux may
 * let a second sync succeed without the data).
 */
static void
sync_wal(struct sq *q, uint64_t upto)
{
	sqlite3_file *f = NULL;
	int rc;

	if (sqlite3_file_control(q->db, "main", SQLITE_FCNTL_JOURNAL_POINTER,
	    &f) == SQLITE_OK && f && f->pMethods)
		rc = f->pMethods->xSync(f, SQLITE_SYNC_NORMAL);
	else	/* no WAL open here: a checkpoint syncs it */
		rc = sqlite3_wal_checkpoint_v2(q->db, "main",
		    SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
	if (rc != SQLITE_OK && (rc & 0xff) != SQLITE_BUSY) {
		if (q->shm_rw && upto) {
			sq_max_store(&q->shm->failed, upto);
			ADD(&q->shm->sync_word, 1);
			mq_futex_wake(&q->shm->sync_word);
		}
		mq_die(MQ_EX_IOERR, "cannot sync %s-wal: %s", q->base.path,
		    sqlite3_errstr(rc));
	}
	if (q->shm_rw)
		ADD(&q->shm->syncs, 1);
}

/*
 * The leader's sync, covering every commit written when it began; then
 * every waiter looks again.  It clears its own mark only: a leader taken
 * over as dead or hung may come back, and must not clear its
 * successor's.
 */
static uint64_t
lead_sync(struct sq *q, uint32_t me)
{
	struct sq_shm *m = q->shm;
	uint64_t t = LOAD(&m->written);

	sync_wal(q, t);
	sq_max_store(&m->synced, t);
	CAS(&m->leader, me, 0);
	ADD(&m->sync_word, 1);
	if (LOAD(&m->sync_waiters))
		mq_futex_wake(&m->sync_word);
	return t;
}

/*
 * Returns once every commit numbered up to target is on disk.  A reader
 * (target: the commits it may have seen) is also done after a sync of its
 * own, begun after its read; a writer (target: its own commit) needs
 * synced to pass it.
 *
 * One leader syncs at a time, for every commit written when it began;
 * the others sleep until a sync ends, and look again.  Each looks every
 * 100 ms too: with no leader it tries to become it; a leader that died,
 * or has synced for 2 s, is taken over by one of them (a CAS from its
 * pid), so that two never sync in its place at once.
 */
void
sq_durable(struct sq *q, uint64_t target, int reader)
{
	static uint32_t me;
	struct sq_shm *m = q->shm;
	uint32_t none, w, ld;
	uint64_t t;
	int64_t since = 0;
	int l;

	if (q->sync != SQ_GROUP || !m || target == 0)
		return;
	if (!q->shm_rw) {	/* mapped read-only: no leader, sync alone */
		if (LOAD(&m->synced) < target)
			sync_wal(q, 0);
		return;
	}
	if (!me)
		me = (uint32_t)getpid();
	for (;;) {
		if (LOAD(&m->failed) >= target && reader) {
			sync_wal(q, 0);	/* what it read: made durable again */
			return;
		}
		if (LOAD(&m->failed) >= target)
			mq_die(MQ_EX_IOERR, "cannot sync %s-wal: another "
			    "process's sync of it failed", q->base.path);
		if (LOAD(&m->synced) >= target)
			return;
		w = LOAD(&m->sync_word);
		if (LOAD(&m->synced) >= target)
			return;
		none = 0;
		if (CAS(&m->leader, none, me)) {
			t = lead_sync(q, me);
			if (t >= target || reader)
				return;
			continue;
		}
		ADD(&m->sync_waiters, 1);
		l = mq_futex_wait(&m->sync_word, w, 100) < 0 && errno == ETIMEDOUT;
		ADD(&m->sync_waiters, -1);
		if (l) {
			/* no sync finished in 100ms: is the leader still there? */
			ld = LOAD(&m->leader);
			if (!since)
				since = mq_now();
			if (ld && ((kill((pid_t)ld, 0) < 0 && errno == ESRCH) ||
			    mq_now() - since > 2000) && CAS(&m->leader, ld, me)) {
				since = 0;
				t = lead_sync(q, me);
				if (t >= target || reader)
					return;
			}
		}
	}
}

/*
 * After a commit that left `frames` frames in the WAL: a passive
 * checkpoint when the WAL has grown by CKPT_FRAMES since one last began,
 * by one process (SQLite's own rule checkpoints after every commit once
 * the WAL is past the mark, which under steady writes it stays: every
 * writer then pays two more syncs).
 */
void
sq_checkpoint(struct sq *q, int frames)
{
	uint32_t cur, f = (uint32_t)frames;

	if (frames <= 0)	/* wrote nothing */
		return;
	if (q->shm_rw) {
		/*
		 * Fewer frames than at the last checkpoint: the WAL started
		 * over.  The first commit of the new WAL says so (every write
		 * passes here), lest the count grow past the old mark and the
		 * WAL to twice its size before the next checkpoint.
		 */
		cur = LOAD(&q->shm->ckpt_at);
		if (f < cur && CAS(&q->shm->ckpt_at, cur, 0))
			cur = 0;
		if (f < cur + CKPT_FRAMES || !CAS(&q->shm->ckpt_at, cur, f))
			return;
	} else if (frames < CKPT_FRAMES)
		return;
	sqlite3_wal_checkpoint_v2(q->db, "main", SQLITE_CHECKPOINT_PASSIVE,
	    NULL, NULL);
}

#define CLOSE_FRAMES	64

/*
 * Before a program that wrote closes the database, with CLOSE_FRAMES
 * frames or more in the WAL: if it is the last connection to close
 * (SQLite looks: it takes the database's exclusive lock, and skips all
 * this when another connection holds any), SQLite checkpoints the WAL as
 * it closes and cuts it to nothing, keeping the file.  The periodic
 * checkpoints never empty the WAL: the next writer starts it over from
 * the top, but only if the WAL index (the -shm) still says that all of
 * it was checkpointed.  Programs that each run alone, one after another
 * (a shell loop of mq-send), find no index: SQLite rebuilds it by
 * reading the whole WAL, and counts none of it as checkpointed, so the
 * WAL was never started over, and grew by 9 MB a thousand sends, each
 * send slower than the last.  An empty WAL has nothing to read.  (Below
 * CLOSE_FRAMES, or when others are open, closing costs no sync, as
 * before; truncating at every periodic checkpoint instead cost a lone
 * producer a third of its rate, 5.4k against 8.0k msg/s: its syncs then
 * also write the size of a file that grows again, most likely.)
 */
void
sq_wal_close(struct sq *q)
{
	int on = 1;

	if (q->wal_left < CLOSE_FRAMES)
		return;
	sqlite3_file_control(q->db, "main", SQLITE_FCNTL_PERSIST_WAL, &on);
	sqlite3_exec(q->db, "PRAGMA journal_size_limit = 0", NULL, NULL, NULL);
	sqlite3_db_config(q->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, NULL);
}

static uint32_t *
slot_of(struct sq *q, int64_t topic, uint32_t **waiters)
{
	size_t i = (size_t)((uint64_t)topic % NSLOT);

	if (waiters)
		*waiters = &q->shm->slot[i].waiters;
	return &q->shm->slot[i].seq;
}

/*
 * The followers of topic may have something to do: wake them, if any is
 * asleep (a follower that may only read the file cannot say it is; it
 * looks every 50ms instead: wait.c).
 */
void
sq_wake(struct sq *q, int64_t topic)
{
	uint32_t *seq, *waiters;

	if (!q->shm_rw)
		return;
	seq = slot_of(q, topic, &waiters);
	ADD(seq, 1);
	if (LOAD(waiters))
		mq_futex_wake(seq);
}

/* The word a follower of topic sleeps on; NULL without the -mq file. */
uint32_t *
sq_slot(struct sq *q, int64_t topic)
{
	return q->shm ? slot_of(q, topic, NULL) : NULL;
}

/*
 * Several futexes in one sleep (Linux 5.16 on): a waker of any of them
 * ends it.  -1 with ENOSYS before that kernel.
 */
static int
futex_waitv(uint32_t *const *w, const uint32_t *val, int n, int64_t ms)
{
#if defined(SYS_futex_waitv) && defined(FUTEX_32)
	struct futex_waitv v[MQ_LANES_MAX];
	struct timespec ts;
	int i;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	if ((ts.tv_nsec += ms % 1000 * 1000000) >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	memset(v, 0, sizeof v);
	for (i = 0; i < n; i++) {
		v[i].val = val[i];
		v[i].uaddr = (uintptr_t)w[i];
		v[i].flags = FUTEX_32;	/* shared: the file is mapped by many */
	}
	return (int)syscall(SYS_futex_waitv, v, n, 0, &ts, CLOCK_MONOTONIC);
#else
	(void)w, (void)val, (void)n, (void)ms;
	errno = ENOSYS;
	return -1;
#endif
}

/*
 * Sleeps while each *slot[i] == seen[i] (the slots of n topics), at most
 * ms; a signal ends it early.  It counts itself among each slot's
 * sleepers, so writers wake it; returns 0 when it could not (the file is
 * read-only here): then it sleeps only a short while.  Without
 * FUTEX_WAITV it sleeps on the first slot only, for at most RO_LOOK_MS,
 * and the caller looks at them all.
 */
int
sq_slot_wait(struct sq *q, int n, const int64_t *topic, uint32_t *const *slot,
    const uint32_t *seen, int64_t ms)
{
	uint32_t *waiters;
	int i;

	if (!q->shm_rw && ms > RO_LOOK_MS)
		ms = RO_LOOK_MS;	/* nobody knows to wake it */
	for (i = 0; i < n && q->shm_rw; i++) {
		slot_of(q, topic[i], &waiters);
		ADD(waiters, 1);
	}
	if (n == 1 || (futex_waitv(slot, seen, n, ms) < 0 && errno == ENOSYS))
		mq_futex_wait(slot[0], seen[0], n == 1 || ms < RO_LOOK_MS ?
		    ms : RO_LOOK_MS);
	for (i = 0; i < n && q->shm_rw; i++) {
		slot_of(q, topic[i], &waiters);
		ADD(waiters, -1);
	}
	return q->shm_rw;
}
