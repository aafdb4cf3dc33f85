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
 * lockspace), the topic and this boot (no slot outlives a reboot); that
 * text is written in the file too, and a file that says anything else is
 * not used.  Its flock is the combining
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
 *   died.  Its append may have been committed, or may still be, later:
 *   the server runs what a client sent before it died.  So each batch
 *   that carries others' messages writes, in its own transaction, its
 *   number in its session's row of table combined (token: the session's,
 *   random), and only if the row's number is lower, else it fails (and
 *   is rolled back).  The next holder settles a dead one's batch by
 *   writing that number there itself, on the same terms: if it can, the
 *   batch was not committed and never will be (its slots are READY
 *   again); if it cannot, the batch was committed, from the offset the
 *   row says: it flushes it and marks its slots DONE.  Before anything
 *   else, and nobody waits for the dead one's server process.
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
#define PC_KEEP_MS	86400000	/* rows of combined older go */

enum { PC_FREE, PC_FILLING, PC_READY, PC_TAKEN, PC_DONE, PC_REFUSED };

struct pc_slot {
	uint32_t	owner;		/* pid */
	uint32_t	len, haskey, idx;	/* idx: its place in the batch */
	int64_t		token, seq;	/* the taker's session (written
					   last: 0 until the rest is) and
					   batch */
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
	char		 what[PC_FOR];	/* what it is for: "" none yet */
	struct pc_file	*f;		/* NULL: none for this */
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

/* The directory mq-UID of TMPDIR, made if need be: its descriptor if it
   is the user's alone, else -1. */
static int
rundir(void)
{
	const char *tmp = getenv("TMPDIR");
	char path[PATH_MAX];
	struct stat st;
	int n, fd;

	if (!tmp || *tmp != '/')
		tmp = "/tmp";
	n = snprintf(path, sizeof path, "%s/mq-%u", tmp, (unsigned)geteuid());
	if (n < 0 || (size_t)n >= sizeof path ||
	    (mkdir(path, 0700) < 0 && errno != EEXIST) ||
	    (fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC)) < 0)
		return -1;
	if (fstat(fd, &st) < 0 || st.st_uid != geteuid() ||
	    (st.st_mode & 077)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Maps the file for what, made if need be; NULL if it cannot be used. */
static struct pc_file *
pc_map(const char *what)
{
	char name[40];
	struct pc_file *f;
	struct stat st;
	int fd, dir;

	if ((dir = rundir()) < 0)
		return NULL;
	snprintf(name, sizeof name, "pg-%016llx%016llx",
	    (unsigned long long)fnv(what, 14695981039346656037ULL),
	    (unsigned long long)fnv(what, 1099511628211ULL));
	fd = openat(dir, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
	    0600);
	close(dir);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
	    st.st_uid != geteuid() || (st.st_mode & 077) ||
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
	    strncmp(f->what, what, sizeof f->what)) {
		munmap(f, sizeof *f);
		close(fd);
		return NULL;
	}
	pc.fd = fd;
	return f;
}

/* The file for topic, mapped once for each in a row: 1 if there is one. */
static int
pc_attach(struct pgq *q, const char *topic)
{
	char what[PC_FOR], boot[64];
	int n;

	mq_boot_id(boot, sizeof boot);
	n = snprintf(what, sizeof what, "host=%s port=%s dbname=%s user=%s "
	    "lockspace=%lld topic=%s boot=%s", nz(PQhost(q->conn)),
	    nz(PQport(q->conn)), nz(PQdb(q->conn)), nz(PQuser(q->conn)),
	    (long long)q->lockspace, topic, boot);
	if (n < 0 || (size_t)n >= sizeof what)
		return 0;
	if (!strcmp(pc.what, what))
		return pc.f != NULL;
	if (pc.f) {
		munmap(pc.f, sizeof *pc.f);
		close(pc.fd);
		pc.fd = -1;
	}
	memcpy(pc.what, what, (size_t)n + 1);
	pc.f = pc_map(what);
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
		if ((st == PC_FILLING || st == PC_READY || st == PC_DONE ||
		    st == PC_REFUSED) && dead(o) && CAS(&s->owner, o, me())) {
			STORE(state_of(i), PC_FILLING);
			return i;
		}
	}
	return -1;
}

static void
slot_free(int i)
{
	struct pc_slot *s = &pc.f->slot[i];

	memset(s->body, 0, s->len <= PC_BODY ? s->len : PC_BODY);
	STORE(&s->owner, 0);
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
 * Holding the lock, before anything else: settles the batches of a holder
 * that died (the only TAKEN slots a holder sees).  0, or PG_RETRY.
 */
static int
recover(struct pgq *q)
{
	struct pc_slot *s, *t;
	PGresult *r;
	int64_t first = 0, topic = 0, token;
	int i, j, stored, done[PC_NSLOT] = { 0 }, any = 0;

	for (i = 0; i < PC_NSLOT; i++) {
		s = &pc.f->slot[i];
		if (LOAD(state_of(i)) != PC_TAKEN || done[i])
			continue;
		if (!(token = LOAD(&s->token))) {	/* taken by one that
					   died before its append was sent */
			STORE(state_of(i), PC_READY);
			continue;
		}
		/* the batch's number, unless its append wrote it */
		TRY(r, pg_q(q, "cannot append", "INSERT INTO combined (token, "
		    "seq, topic, first, ts) VALUES ($1, $2, 0, 0, $3) ON "
		    "CONFLICT (token) DO UPDATE SET seq = excluded.seq, topic = "
		    "0, first = 0, ts = excluded.ts WHERE combined.seq < "
		    "excluded.seq RETURNING 1", 3, pg_int(q, token),
		    pg_int(q, s->seq), pg_int(q, pg_now())));
		stored = PQntuples(r) == 0;
		PQclear(r);
		if (stored) {
			TRY(r, pg_q(q, "cannot append", "SELECT topic, first "
			    "FROM combined WHERE token = $1", 1,
			    pg_int(q, token)));
			topic = pg_get(r, 0, 0);
			first = pg_get(r, 0, 1);
			PQclear(r);
		}
		/* every slot of that batch (this one last: its token) */
		for (j = PC_NSLOT - 1; j >= i; j--) {
			t = &pc.f->slot[j];
			if (LOAD(state_of(j)) != PC_TAKEN ||
			    LOAD(&t->token) != token || t->seq != s->seq)
				continue;
			if (stored) {
				t->off = first + t->idx;
				done[j] = any = 1;
			} else {
				STORE(&t->token, 0);
				STORE(state_of(j), PC_READY);
			}
		}
	}
	if (!any)
		return 0;
	pg_flush(q, NULL);	/* what the dead one committed, on disk */
	for (i = 0; i < PC_NSLOT; i++)
		if (done[i])
			set_state(i, PC_DONE);
	pg_notify(q, topic);
	return 0;
}

/*
 * At the end of a session that appended others' messages: its row of
 * combined goes, and any a day old (of sessions that died).  Not waited
 * for, nor checked: a row left behind is only a row.
 */
void
pg_comb_close(struct pgq *q)
{
	const char *v[2];
	PGresult *r;

	if (!q->comb_token || PQstatus(q->conn) != CONNECTION_OK)
		return;
	v[0] = pg_int(q, q->comb_token);
	v[1] = pg_int(q, pg_now() - PC_KEEP_MS);
	q->trips++;
	r = PQexecParams(q->conn, "WITH d AS (DELETE FROM combined WHERE "
	    "token = $1 OR ts < $2) SELECT set_config('synchronous_commit', "
	    "'off', true)", 2, NULL, v, NULL, NULL, 0);
	PQclear(r);
}

/* A slot the holder may take: with key, or without one as key is NULL. */
static int
ours(struct pc_slot *s, const char *key)
{
	s->key[PC_KEY] = '\0';		/* whatever the file says */
	if (s->len > PC_BODY)
		return 0;
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
	int take[PC_NSLOT], nt = 0, i, rc;

	r[0] = *rec;
	q->comb_seq++;
	for (i = 0; i < PC_NSLOT; i++) {
		s = &pc.f->slot[i];
		if (LOAD(state_of(i)) != PC_READY ||
		    !move(i, PC_READY, PC_TAKEN))
			continue;
		/* another key's: for another; a dead owner's: for none */
		if (!ours(s, a->key) || dead(LOAD(&s->owner))) {
			STORE(state_of(i), PC_READY);
			continue;
		}
		/* a token once there is a slot: a session that never took
		   one has no row of combined to delete as it ends */
		while (!q->comb_token)
			q->comb_token = (int64_t)((uint64_t)mq_token() << 31 ^
			    mq_token()) & INT64_MAX;
		s->seq = q->comb_seq;
		s->idx = (uint32_t)(nt + 1);
		STORE(&s->token, q->comb_token);
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
		if (rc == 0) {
			pc.f->slot[take[i]].off = sent[i + 1].off;
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
	STORE(&s->token, 0);
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
			/* nobody appends: not taken, or its taker died;
			   ours back first, so that no error of recover's
			   leaves it to be sent after we said it failed */
			if (move(i, PC_READY, PC_FILLING)) {
				slot_free(i);
				while (recover(q) == PG_RETRY)
					;
				return lead(q, a, rec, out);
			}
			while (recover(q) == PG_RETRY)
				;
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
