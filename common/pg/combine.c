/*
 * combine.c: producers on one host share append transactions.
 *
 * On PostgreSQL a message sent alone costs three transactions (the
 * append, its flush, its NOTIFY: deliver.c, pg.c), and eight producers
 * each sending one message at a time spend most of two CPUs on them.  So
 * producers of one host that send to the same topic of the same database
 * combine, as the SQLite engine's do (../sqlite/combine.c): an mq-send
 * that finds another appending leaves its message in a slot of a file
 * they share, and the one appending takes every waiting slot into its
 * next append, one transaction for all, one flush, one NOTIFY.
 *
 * The file: TMPDIR (else /tmp), directory mq-UID (made with mode 0700,
 * used only when it is the user's and nobody else may enter it), file
 * pg-HASH, named by what it is for: the server as the connection reached
 * it (host, port), the database, the user, the installation (its
 * lockspace) and the topic; that text is written in the file too, and a
 * file that says anything else is not used.  Its flock is the combining
 * lock: the holder appends.  Whatever cannot be used (no such directory,
 * someone else's) only means no combining.
 *
 * Only what needs nothing but a body and a key goes into a slot: one
 * message, no dedup id, no delay, no headers, no time to live, not
 * --replace, not MQ_SYNC=normal.  The holder takes the slots with its own
 * key (or none, as its own).
 *
 * A slot's life, as on SQLite: FREE, FILLING (its owner writes it),
 * READY, TAKEN by the holder (with its session's token, the batch's
 * number and the slot's place in it), then DONE once the batch is
 * flushed (the offset in it), or REFUSED (the append was refused: no such
 * topic, too big; the owner sends it the ordinary way, which says why),
 * or READY again; FREE once the owner has read it.  Rules:
 * - The holder keeps the lock until it has settled every slot it took,
 *   so a TAKEN slot that the next holder sees was taken by one that
 *   died.  Its transaction may have been committed, or may still commit
 *   on the server after its client is gone: the next holder waits until
 *   the dead one's server process has ended (pg_stat_activity, by pid
 *   and start), then reads table combined, which the append writes in
 *   its own transaction: the token's batch number there says whether
 *   the batch was committed, and its first offset.  It flushes what was,
 *   and gives the rest back (READY) before it appends anything.
 * - An owner sleeps with a short limit and, whenever it wakes with its
 *   slot not settled, tries the lock: getting it means nobody appends,
 *   so it settles dead takers' slots and takes its own back to append
 *   it itself.  A holder that lets go wakes the owners of READY slots.
 *   An owner that waited longer than the busy timeout takes its slot
 *   back from READY and goes the ordinary way.
 * - A slot whose owner died is reused by the next owner that needs one.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../atomic.h"
#include "pg.h"

#define PC_MAGIC	0x6d712d70U	/* "mq-p" */
#define PC_VERSION	1
#define PC_NSLOT	32
#define PC_KEY		1024		/* the longest key mq-send takes */
#define PC_BODY		4000		/* longer ones go the ordinary way */
#define PC_FOR		1024		/* the file's text of what it is for */
#define PC_LOOK_MS	20		/* an owner's sleep before it looks */
#define PC_GONE_MS	5		/* between looks for a dead session */
#define PC_KEEP_MS	86400000	/* rows of combined older go */

enum { PC_FREE, PC_FILLING, PC_READY, PC_TAKEN, PC_DONE, PC_REFUSED };

struct pc_slot {
	uint32_t	owner;		/* pid */
	uint32_t	len, haskey, idx;	/* idx: its place in the batch */
	int64_t		token, seq;	/* the taker's session, batch */
	int64_t		bpid, bstart;	/* the taker's server process */
	int64_t		off;
	char		key[PC_KEY + 1];
	char		body[PC_BODY];
};

/* The slots' states apart, as in ../sqlite/shm.h: a look at all is short. */
struct pc_file {
	uint32_t	magic, version;
	char		what[PC_FOR];
	struct {
		uint32_t	state;	/* PC_* */
		uint32_t	wake;	/* futex: bumped when state changes */
	}		word[PC_NSLOT];
	struct pc_slot	slot[PC_NSLOT];
};
/* where t/100-pg.bats reads them */
_Static_assert(offsetof(struct pc_file, word) == 1032, "states moved");

/* This process's file, of the last topic it sent to. */
static struct {
	char		 topic[MQ_NAME_MAX + 1];
	struct pc_file	*f;		/* NULL: none for this topic */
	int		 fd;
} pc = { .fd = -1 };

static uint32_t
me(void)
{
	return (uint32_t)mq_pid();
}

static int
dead(uint32_t pid)
{
	return pid && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

static uint32_t *
state_of(int i)
{
	return &pc.f->word[i].state;
}

static void
wake(int i)
{
	ADD(&pc.f->word[i].wake, 1);
	mq_futex_wake(&pc.f->word[i].wake);
}

/* Sets a slot's state and wakes its owner. */
static void
set_state(int i, uint32_t st)
{
	STORE(state_of(i), st);
	wake(i);
}

static int
move(int i, uint32_t from, uint32_t to)
{
	return CAS(state_of(i), from, to);
}

/* 64 bits of FNV-1a of s, from basis h */
static uint64_t
fnv(const char *s, uint64_t h)
{
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

static const char *
nz(const char *s)
{
	return s ? s : "";
}

/* The directory mq-UID of TMPDIR, made if need be: 0 if it is usable. */
static int
rundir(char *buf, size_t len)
{
	const char *tmp = getenv("TMPDIR");
	struct stat st;
	int n;

	if (!tmp || *tmp != '/')
		tmp = "/tmp";
	n = snprintf(buf, len, "%s/mq-%u", tmp, (unsigned)geteuid());
	if (n < 0 || (size_t)n >= len)
		return -1;
	if (mkdir(buf, 0700) < 0 && errno != EEXIST)
		return -1;
	if (lstat(buf, &st) < 0 || !S_ISDIR(st.st_mode) ||
	    st.st_uid != geteuid() || (st.st_mode & 077))
		return -1;
	return 0;
}

/* Maps the file for topic, made if need be; NULL if it cannot be used. */
static struct pc_file *
pc_map(struct pgq *q, const char *topic)
{
	char what[PC_FOR], path[PATH_MAX];
	struct pc_file *f;
	struct stat st;
	size_t dl;
	int n, fd;

	n = snprintf(what, sizeof what, "host=%s port=%s dbname=%s user=%s "
	    "lockspace=%lld topic=%s", nz(PQhost(q->conn)),
	    nz(PQport(q->conn)), nz(PQdb(q->conn)), nz(PQuser(q->conn)),
	    (long long)q->lockspace, topic);
	if (n < 0 || (size_t)n >= sizeof what || rundir(path, sizeof path) < 0)
		return NULL;
	dl = strlen(path);
	n = snprintf(path + dl, sizeof path - dl, "/pg-%016llx%016llx",
	    (unsigned long long)fnv(what, 14695981039346656037ULL),
	    (unsigned long long)fnv(what, 1099511628211ULL));
	if (n < 0 || (size_t)n >= sizeof path - dl)
		return NULL;
	if ((fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
	    0600)) < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || st.st_uid != geteuid() ||
	    (st.st_size < (off_t)sizeof *f &&
	    ftruncate(fd, (off_t)sizeof *f) < 0) ||
	    (f = mmap(NULL, sizeof *f, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
	    0)) == MAP_FAILED) {
		close(fd);
		return NULL;
	}
	if (LOAD(&f->magic) != PC_MAGIC && flock(fd, LOCK_EX) == 0) {
		if (LOAD(&f->magic) != PC_MAGIC) {	/* new: ours to write */
			memcpy(f->what, what, strlen(what) + 1);
			f->version = PC_VERSION;
			STORE(&f->magic, PC_MAGIC);
		}
		flock(fd, LOCK_UN);
	}
	if (LOAD(&f->magic) != PC_MAGIC || f->version != PC_VERSION ||
	    strncmp(f->what, what, sizeof what)) {
		munmap(f, sizeof *f);
		close(fd);
		return NULL;
	}
	pc.fd = fd;
	return f;
}

/* The file for topic, mapped once per topic in a row: 1 if there is one. */
static int
pc_attach(struct pgq *q, const char *topic)
{
	if (pc.topic[0] && !strcmp(pc.topic, topic))
		return pc.f != NULL;
	if (pc.f) {
		munmap(pc.f, sizeof *pc.f);
		close(pc.fd);
		pc.fd = -1;
	}
	snprintf(pc.topic, sizeof pc.topic, "%s", topic);
	pc.f = pc_map(q, topic);
	return pc.f != NULL;
}

/* A free slot, or one whose owner died, now FILLING and ours; or -1. */
static int
slot_get(void)
{
	struct pc_slot *s;
	uint32_t st, o;
	int i;

	for (i = 0; i < PC_NSLOT; i++)
		if (LOAD(state_of(i)) == PC_FREE &&
		    move(i, PC_FREE, PC_FILLING)) {
			STORE(&pc.f->slot[i].owner, me());
			return i;
		}
	for (i = 0; i < PC_NSLOT; i++) {
		s = &pc.f->slot[i];
		st = LOAD(state_of(i));
		o = LOAD(&s->owner);
		if ((st == PC_FILLING || st == PC_DONE || st == PC_REFUSED) &&
		    dead(o) && CAS(&s->owner, o, me())) {
			STORE(state_of(i), PC_FILLING);
			return i;
		}
	}
	return -1;
}

static void
slot_free(int i)
{
	STORE(&pc.f->slot[i].owner, 0);
	STORE(state_of(i), PC_FREE);
}

/* Letting go of the lock: the owners of slots nobody took look again. */
static void
pc_leave(void)
{
	int i;

	flock(pc.fd, LOCK_UN);
	for (i = 0; i < PC_NSLOT; i++)
		if (LOAD(state_of(i)) == PC_READY)
			wake(i);
}

/*
 * This session's token, server process and its start, for the slots it
 * takes; asked once (and rows of combined a day old deleted, whoever's
 * they were).  0, or PG_RETRY.
 */
static int
session(struct pgq *q)
{
	PGresult *r;

	if (q->comb_token)
		return 0;
	TRY(r, pg_q(q, "cannot append", "WITH d AS (DELETE FROM combined "
	    "WHERE ts < $1) SELECT pid, (extract(epoch FROM backend_start) * "
	    "1000000)::bigint FROM pg_stat_activity WHERE pid = "
	    "pg_backend_pid()", 1, pg_int(q, pg_now() - PC_KEEP_MS)));
	if (PQntuples(r) == 1) {
		q->comb_bpid = pg_get(r, 0, 0);
		q->comb_bstart = pg_get(r, 0, 1);
		while (!q->comb_token)
			q->comb_token = (int64_t)((uint64_t)mq_token() << 31 ^
			    mq_token()) & INT64_MAX;
	}
	PQclear(r);
	return q->comb_token ? 0 : -1;
}

/*
 * Waits until a dead producer's server process has ended (its last
 * transaction is then committed or not, for good).  0, or PG_RETRY.
 */
static int
gone(struct pgq *q, int64_t bpid, int64_t bstart)
{
	PGresult *r;
	int64_t start = mq_now(), n;

	for (;;) {
		TRY(r, pg_q(q, "cannot read sessions", "SELECT count(*) FROM "
		    "pg_stat_activity WHERE pid = $1 AND (extract(epoch FROM "
		    "backend_start) * 1000000)::bigint = $2", 2,
		    pg_int(q, bpid), pg_int(q, bstart)));
		n = pg_get(r, 0, 0);
		PQclear(r);
		if (!n)
			return 0;
		if (mq_now() - start > q->busy + 10000)
			mq_die(MQ_EX_TEMPFAIL, "cannot append: the session of "
			    "a producer that died (server process %lld) is "
			    "still open", (long long)bpid);
		usleep(PC_GONE_MS * 1000);
	}
}

/*
 * Holding the lock, before anything else: settles the slots of a holder
 * that died (the only TAKEN ones a holder sees).  0, or PG_RETRY.
 */
static int
recover(struct pgq *q)
{
	struct pc_slot *s, *t;
	PGresult *r;
	int64_t first = 0, topic = 0;
	int i, j, stored, done[PC_NSLOT] = { 0 }, any = 0;

	for (i = 0; i < PC_NSLOT; i++) {
		s = &pc.f->slot[i];
		if (LOAD(state_of(i)) != PC_TAKEN || done[i])
			continue;
		if (!s->token) {	/* taken by one that died before its
					   append was sent */
			STORE(state_of(i), PC_READY);
			continue;
		}
		if (gone(q, s->bpid, s->bstart) == PG_RETRY)
			return PG_RETRY;
		TRY(r, pg_q(q, "cannot append", "SELECT seq, topic, first "
		    "FROM combined WHERE token = $1", 1, pg_int(q, s->token)));
		stored = PQntuples(r) == 1 && pg_get(r, 0, 0) >= s->seq;
		if (stored) {
			topic = pg_get(r, 0, 1);
			first = pg_get(r, 0, 2);
		}
		PQclear(r);
		/* every slot of that batch */
		for (j = PC_NSLOT - 1; j >= i; j--) {
			t = &pc.f->slot[j];
			if (LOAD(state_of(j)) != PC_TAKEN ||
			    t->token != s->token || t->seq != s->seq)
				continue;
			if (stored) {
				t->off = first + t->idx;
				done[j] = any = 1;
			} else {
				t->token = 0;
				STORE(state_of(j), PC_READY);
			}
		}
	}
	if (!any)
		return 0;
	pg_flush(q, NULL);	/* what the dead one committed, on disk */
	for (i = 0; i < PC_NSLOT; i++)
		if (done[i]) {
			pc.f->slot[i].token = 0;
			set_state(i, PC_DONE);
		}
	pg_notify(q, topic);
	return 0;
}

/* A slot the holder may take: with key, or without one as key is NULL. */
static int
ours(const struct pc_slot *s, const char *key)
{
	return key ? s->haskey && !strcmp(s->key, key) : !s->haskey;
}

/*
 * Holding the lock: appends rec (one message) with every READY slot of
 * the same key, then settles them and lets go of the lock.  0 when done,
 * 1 when the caller must append rec the ordinary way (the append was
 * refused: it says why).
 */
static int
lead(struct pgq *q, struct mq_append *a, const struct mq_rec *rec,
    struct mq_sent *out)
{
	struct mq_rec r[PC_NSLOT + 1];
	struct mq_sent sent[PC_NSLOT + 1];
	struct pc_slot *s;
	int take[PC_NSLOT], nt = 0, i, rc, want = 0;

	/* the session is asked for once there is something to take */
	for (i = 0; i < PC_NSLOT && !want; i++)
		want = LOAD(state_of(i)) == PC_READY &&
		    ours(&pc.f->slot[i], a->key);
	while (want && (rc = session(q)) == PG_RETRY)
		;
	r[0] = *rec;
	q->comb_seq++;
	for (i = 0; want && q->comb_token && i < PC_NSLOT; i++) {
		s = &pc.f->slot[i];
		if (LOAD(state_of(i)) != PC_READY ||
		    !move(i, PC_READY, PC_TAKEN))
			continue;
		if (!ours(s, a->key)) {	/* another key's: for another */
			STORE(state_of(i), PC_READY);
			continue;
		}
		s->token = q->comb_token;
		s->seq = q->comb_seq;
		s->bpid = q->comb_bpid;
		s->bstart = q->comb_bstart;
		s->idx = (uint32_t)(nt + 1);
		r[nt + 1].body = s->body;
		r[nt + 1].len = s->len;
		r[nt + 1].dedup = NULL;
		take[nt++] = i;
	}
	q->comb_batch = nt > 0;
	while ((rc = pg_append_fast(q, a, r, (size_t)nt + 1, sent)) ==
	    PG_RETRY)
		;
	q->comb_batch = 0;
	for (i = 0; i < nt; i++) {
		s = &pc.f->slot[take[i]];
		s->token = 0;
		if (rc == 0) {
			s->off = sent[i + 1].off;
			set_state(take[i], PC_DONE);
		} else
			set_state(take[i], PC_REFUSED);
	}
	pc_leave();
	if (rc == 0)
		*out = sent[0];
	return rc;
}

/*
 * Appends one message with others of this host, if it can: 0 when it is
 * stored and durable (out filled in), 1 when the caller must append it
 * the ordinary way.
 */
int
pg_comb_append(struct pgq *q, struct mq_append *a, const struct mq_rec *rec,
    size_t n, struct mq_sent *out)
{
	struct pc_slot *s;
	uint32_t w, st;
	int64_t start;
	size_t klen = a->key ? strlen(a->key) : 0;
	int i;

	if (n != 1 || q->async || a->replace || rec->dedup || a->delay >= 0 ||
	    a->at >= 0 || a->ttl || a->headers || rec->len > PC_BODY ||
	    klen > PC_KEY || !pc_attach(q, a->topic))
		return 1;
	if (flock(pc.fd, LOCK_EX | LOCK_NB) == 0) {
		while (recover(q) == PG_RETRY)
			;
		return lead(q, a, rec, out);
	}
	if (errno != EWOULDBLOCK || (i = slot_get()) < 0)
		return 1;
	s = &pc.f->slot[i];
	s->haskey = a->key != NULL;
	if (a->key)
		memcpy(s->key, a->key, klen + 1);
	s->len = (uint32_t)rec->len;
	if (rec->len)
		memcpy(s->body, rec->body, rec->len);
	s->token = 0;
	STORE(state_of(i), PC_READY);
	start = mq_now();
	for (;;) {
		w = LOAD(&pc.f->word[i].wake);
		st = LOAD(state_of(i));
		if (st == PC_DONE) {
			out->off = s->off;
			out->dup = 0;
			slot_free(i);
			return 0;
		}
		if (st == PC_REFUSED) {
			slot_free(i);
			return 1;
		}
		if (flock(pc.fd, LOCK_EX | LOCK_NB) == 0) {
			/* nobody appends: not taken, or its taker died */
			while (recover(q) == PG_RETRY)
				;
			if (move(i, PC_READY, PC_FILLING)) {
				slot_free(i);
				return lead(q, a, rec, out);
			}
			pc_leave();
			continue;
		}
		if (mq_now() - start >= q->busy &&
		    move(i, PC_READY, PC_FILLING)) {
			slot_free(i);
			return 1;
		}
		mq_futex_wait(&pc.f->word[i].wake, w, PC_LOOK_MS);
	}
}
