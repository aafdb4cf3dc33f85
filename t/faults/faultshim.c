/*
 * faultshim.c: an LD_PRELOAD shim that makes one chosen file operation on
 * a database's files fail, for a harness that sweeps the failure over every
 * operation a program makes (t/049-faults.bats).
 *
 *   cc -shared -fPIC -O2 -Wall -Wextra -o faultshim.so faultshim.c -ldl
 *   MQ_FAULT_PREFIX=/dir/mq.db MQ_FAULT_AT=N MQ_FAULT_ERRNO=KIND \
 *       [MQ_FAULT_STICKY=1] [MQ_FAULT_LOG=FILE] \
 *       LD_PRELOAD=/path/faultshim.so PROGRAM ...
 *
 * Environment:
 *   MQ_FAULT_PREFIX  the database path (its directories need not exist
 *                    yet).  Files whose canonical path is this one, or
 *                    this one and a '-' and more (DB, DB-wal, DB-shm,
 *                    DB-journal, DB-mq), are watched.  Unset or empty:
 *                    the shim does nothing at all.
 *   MQ_FAULT_AT      N: the Nth counted call fails (1 is the first).  0 or
 *                    unset: nothing fails, the calls are only counted.
 *   MQ_FAULT_ERRNO   how it fails: ENOSPC (the default), EIO or EDQUOT:
 *                    the call returns -1 with that errno and does nothing;
 *                    or short: a write writes the first half of its bytes
 *                    (rounded down: a 1-byte write writes nothing) and
 *                    returns that count, and any other counted call fails
 *                    with ENOSPC, as it would on the disk that cut the
 *                    write short.
 *   MQ_FAULT_STICKY  1: every counted call after the Nth fails too (a full
 *                    disk stays full, a dead disk stays dead).  With short,
 *                    the Nth write is short and every call after it fails
 *                    with ENOSPC.
 *   MQ_FAULT_LOG     a file: one line is appended for every counted call,
 *                    as it returns:
 *                        N <TAB> FUNCTION <TAB> FILE <TAB> WHAT <TAB> RESULT
 *                    FILE: the last path component; WHAT: the open flags
 *                    in hex, BYTES@OFFSET for a write, the length for a
 *                    truncate; RESULT: ok, the count written, "FAULT
 *                    ENOSPC" (EIO, EDQUOT) for a failure made here,
 *                    "FAULT short N" for a write cut to N bytes, or "error
 *                    ENAME" for a real failure.  So the number of lines
 *                    is the number of calls counted, whether the program
 *                    exits, _exits or dies of a signal: the harness runs a
 *                    workload once with MQ_FAULT_AT=0 to learn the range
 *                    of N.
 *   MQ_FAULT_DIRS    1: fsync and fdatasync of the directories on the
 *                    way to the database (its own and every one above it)
 *                    are counted too, logged with the directory's last
 *                    component, and fail as the others do: to see that
 *                    new directory entries are synced.  Unset: not seen.
 *   MQ_FAULT_LOCKS   1: flock(2) on a watched file (the -mq file's
 *                    writer queue) is counted too, and fails as the
 *                    others do (with the kind's errno; short: ENOSPC).
 *                    Unset: not seen.
 *   MQ_FAULT_CHILDREN  1: leave the shim in LD_PRELOAD for child
 *                    processes.  By default the shim takes itself out of
 *                    LD_PRELOAD as it loads, so only the process started
 *                    with it is counted (not mq-recv's handlers).
 *
 * Counted calls, on a watched file only: open, open64, openat, openat64,
 * creat, creat64 and the fortified __open*_2 (with O_CREAT or not: the
 * path decides, before the call), write, writev, pwrite, pwrite64,
 * pwritev, pwritev64, pwritev2, fsync, fdatasync, ftruncate, ftruncate64.
 * SQLite (3.40 as built here) opens with open64, writes with pwrite64,
 * syncs with fdatasync and extends the -shm with one-byte pwrite64s; mq's
 * engine opens and ftruncates the -mq file itself and syncs the WAL
 * through SQLite's VFS, so all of that is seen.  Not counted: reads,
 * locks, stat, mmap (the -shm and -mq are written through mappings: those
 * stores cannot fail here), unlink, and syncs of directories (but see
 * MQ_FAULT_DIRS).
 *
 * Invariants:
 * - A call made to fail has no effect: an open creates nothing, a write
 *   writes nothing, a sync syncs nothing; a short write writes exactly the
 *   bytes it says, in place.  errno is touched only by a failure.
 * - Calls are counted in the order the process makes them, one counter
 *   per process (atomic: threads share it), so a program that does the
 *   same thing from the same files counts the same from run to run.
 * - fd -> watched is known for every descriptor made by the opens above,
 *   dup, dup2, dup3 and fcntl(F_DUPFD[_CLOEXEC]), and for those inherited
 *   across exec (looked up at load); a descriptor marked watched is
 *   checked again against the kernel's name for it (readlink of
 *   /proc/self/fd/N) before a call on it is counted, so one that was
 *   closed behind the shim's back and reused is not counted.
 * - The log is written with the real write(), on a descriptor moved to
 *   512 or above and never counted; a log line that cannot be written
 *   aborts the process (a log that lies would make the sweep lie).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define FDMAX	65536		/* descriptors above are not watched */
#define NIOV	64		/* a short writev keeps up to this many pieces */

enum kind { K_ENOSPC, K_EIO, K_EDQUOT, K_SHORT };
static const char *const kindname[] = { "ENOSPC", "EIO", "EDQUOT", "short" };

static int ready;		/* the environment was read: watching */
static char prefix[PATH_MAX];
static size_t prefixlen;
static const char *prefixbase;	/* its last component */
static unsigned long long fault_at;
static enum kind kind = K_ENOSPC;
static int sticky;
static int dirs;		/* MQ_FAULT_DIRS: directory syncs count */
static int locks;		/* MQ_FAULT_LOCKS: flock(2) counts */
static int logfd = -1;
static unsigned long long ncalls;	/* counted so far (atomic) */
static unsigned char watched[FDMAX];	/* fd -> 1: a watched file */

static void *
real(const char *name)
{
	void *p = dlsym(RTLD_NEXT, name);

	if (!p) {
		static const char m[] = "faultshim: a libc function is missing\n";

		/* not write(): that may be the one missing */
		(void)syscall(SYS_write, 2, m, sizeof m - 1);
		abort();
	}
	return p;
}

/* REAL(f): the next definition of f (libc's), looked up once. */
#define REAL(f) \
	static __typeof__(f) *real_##f; \
	if (!real_##f) \
		real_##f = (__typeof__(f) *)real(#f)

static void
die(const char *what)
{
	char m[512];
	int n = snprintf(m, sizeof m, "faultshim: %s\n", what);
	REAL(write);

	if (real_write(2, m, n > 0 && n < (int)sizeof m ? (size_t)n :
	    sizeof m - 1) < 0) {
		/* nothing more to say */
	}
	abort();
}

/* path is a watched file's (canonical) */
static int
under_prefix(const char *p)
{
	return prefixlen && !strncmp(p, prefix, prefixlen) &&
	    (p[prefixlen] == '\0' || p[prefixlen] == '-');
}

/* path is a directory the watched files are in, or one above it */
static int
above_prefix(const char *p)
{
	size_t n = strlen(p);

	if (!strcmp(p, "/"))
		return prefixlen > 0;
	return n < prefixlen && !strncmp(prefix, p, n) && prefix[n] == '/';
}

/* The kernel's name for fd, into buf (PATH_MAX): 0, or -1. */
static int
fdname(int fd, char *buf)
{
	char link[64];
	ssize_t n;

	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	n = readlink(link, buf, PATH_MAX - 1);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return 0;
}

static void
setw(int fd, int w)
{
	if (fd >= 0 && fd < FDMAX)
		__atomic_store_n(&watched[fd], (unsigned char)w,
		    __ATOMIC_RELAXED);
}

static int
is_marked(int fd)
{
	return ready && fd >= 0 && fd < FDMAX &&
	    __atomic_load_n(&watched[fd], __ATOMIC_RELAXED);
}

/* After fd was made: watch it if its file is a watched one. */
static void
track(int fd)
{
	char buf[PATH_MAX];
	int saved = errno;

	if (!ready || fd < 0)
		return;
	setw(fd, fdname(fd, buf) == 0 && under_prefix(buf));
	errno = saved;
}

/*
 * Is fd watched?  Its name into buf (PATH_MAX) when it is.  A mark left
 * on a descriptor that was closed where the shim could not see it (and
 * then reused) is dropped here.
 */
static int
is_watched(int fd, char *buf)
{
	int saved = errno, w = 0;

	if (is_marked(fd)) {
		w = fdname(fd, buf) == 0 && under_prefix(buf);
		if (!w)
			setw(fd, 0);
	}
	errno = saved;
	return w;
}

/* dir/base into out (PATH_MAX bytes); -1 when too long */
static int
join(char *out, const char *dir, const char *base)
{
	size_t d = strcmp(dir, "/") ? strlen(dir) : 0, b = strlen(base);

	if (d + 1 + b >= PATH_MAX)
		return -1;
	memcpy(out, dir, d);
	out[d] = '/';
	memcpy(out + d + 1, base, b + 1);
	return 0;
}

/*
 * realpath(path, out), but the last directories of path need not exist
 * yet (the program under test is to make them).
 */
static char *
resolve(const char *path, char *out)
{
	char head[PATH_MAX], dir[PATH_MAX], *slash;

	if (realpath(path, out))
		return out;
	if (errno != ENOENT || strlen(path) >= sizeof head)
		return NULL;
	strcpy(head, path);
	if (!(slash = strrchr(head, '/')))
		return realpath(".", dir) && join(out, dir, head) == 0 ?
		    out : NULL;
	*slash = '\0';
	if (!resolve(*head ? head : "/", dir) || join(out, dir, slash + 1) < 0)
		return NULL;
	return out;
}

/*
 * The canonical absolute path a path argument names (its directory
 * resolved; the last component need not exist) when that is a watched
 * file's, else NULL.  Cheap for other names: only a last component that
 * starts with the prefix's is resolved.
 */
static const char *
canon(int dirfd, const char *path, char *out)
{
	char full[PATH_MAX * 2], dir[PATH_MAX], *slash;
	const char *base;
	int saved = errno;

	if (!ready || !path)
		return NULL;
	base = strrchr(path, '/');
	base = base ? base + 1 : path;
	if (strncmp(base, prefixbase, strlen(prefixbase)))
		return NULL;
	if (path[0] == '/') {
		snprintf(full, sizeof full, "%s", path);
	} else if (dirfd == AT_FDCWD) {
		if (!getcwd(dir, sizeof dir))
			goto no;
		snprintf(full, sizeof full, "%s/%s", dir, path);
	} else {
		if (fdname(dirfd, dir) < 0)
			goto no;
		snprintf(full, sizeof full, "%s/%s", dir, path);
	}
	slash = strrchr(full, '/');
	*slash = '\0';
	if (!realpath(*full ? full : "/", dir) || join(out, dir, slash + 1) < 0)
		goto no;
	errno = saved;
	return under_prefix(out) ? out : NULL;
no:
	errno = saved;
	return NULL;
}

/* The number of this counted call; *fail: it is to fail. */
static unsigned long long
count(int *fail)
{
	unsigned long long n = __atomic_add_fetch(&ncalls, 1, __ATOMIC_SEQ_CST);

	*fail = fault_at && (n == fault_at || (sticky && n > fault_at));
	return n;
}

/* The errno a failing call n gets (a short write is not one of these). */
static int
fault_errno(void)
{
	switch (kind) {
	case K_EIO:
		return EIO;
	case K_EDQUOT:
		return EDQUOT;
	default:
		return ENOSPC;
	}
}

/* Is call n, a write, to be cut short (rather than fail)? */
static int
cut_short(unsigned long long n)
{
	return kind == K_SHORT && n == fault_at;
}

static void
logline(unsigned long long n, const char *fn, const char *path,
    const char *what, const char *result)
{
	char line[PATH_MAX + 256];
	const char *base;
	int len;
	ssize_t w;
	REAL(write);

	if (logfd < 0)
		return;
	base = strrchr(path, '/');
	base = base ? base + 1 : path;
	len = snprintf(line, sizeof line, "%llu\t%s\t%s\t%s\t%s\n", n, fn, base,
	    what, result);
	if (len < 0 || len >= (int)sizeof line)
		die("a log line is too long");
	do
		w = real_write(logfd, line, (size_t)len);
	while (w < 0 && errno == EINTR);
	if (w != len)
		die("cannot write MQ_FAULT_LOG");
}

/* The RESULT field for a call that returned r (errno: its error). */
static const char *
result(long long r, int injected, char *buf, size_t len)
{
	if (injected)	/* what the call got: short fails others with ENOSPC */
		snprintf(buf, len, "FAULT %s", kind == K_SHORT ? "ENOSPC" :
		    kindname[kind]);
	else if (r < 0)
		snprintf(buf, len, "error %s", strerrorname_np(errno) ?
		    strerrorname_np(errno) : "?");
	else
		snprintf(buf, len, "%lld", r);
	return buf;
}

/* --- loading ------------------------------------------------------- */

/* LD_PRELOAD without this library in it (it is loaded: that is enough). */
static void
unpreload(void)
{
	const char *lp = getenv("LD_PRELOAD");
	char me[PATH_MAX], it[PATH_MAX], *copy, *tok, *save = NULL, *out;
	Dl_info di;
	size_t n;

	if (!lp || !dladdr((void *)unpreload, &di) || !di.dli_fname ||
	    !realpath(di.dli_fname, me))
		return;
	n = strlen(lp);
	if (!(copy = strdup(lp)) || !(out = calloc(1, n + 1)))
		die("out of memory");
	for (tok = strtok_r(copy, " :", &save); tok;
	    tok = strtok_r(NULL, " :", &save)) {
		if (realpath(tok, it) && !strcmp(it, me))
			continue;
		if (*out)
			strcat(out, ":");
		strcat(out, tok);
	}
	if (*out)
		setenv("LD_PRELOAD", out, 1);
	else
		unsetenv("LD_PRELOAD");
	free(copy);
	free(out);
}

__attribute__((constructor)) static void
load(void)
{
	const char *pre = getenv("MQ_FAULT_PREFIX");
	const char *at = getenv("MQ_FAULT_AT");
	const char *k = getenv("MQ_FAULT_ERRNO");
	const char *st = getenv("MQ_FAULT_STICKY");
	const char *log = getenv("MQ_FAULT_LOG");
	const char *ch = getenv("MQ_FAULT_CHILDREN");
	const char *dr = getenv("MQ_FAULT_DIRS");
	const char *lk = getenv("MQ_FAULT_LOCKS");
	char dir[PATH_MAX], res[PATH_MAX], *slash, *end;
	unsigned i;
	DIR *d;
	struct dirent *e;
	int fd;
	REAL(open);
	REAL(fcntl);

	if (ready || !pre || !*pre)
		return;
	/* canonical, as the kernel names open files */
	snprintf(dir, sizeof dir, "%s", pre);
	slash = strrchr(dir, '/');
	if (slash) {
		*slash = '\0';
		if (!resolve(*dir ? dir : "/", res) ||
		    join(prefix, res, slash + 1) < 0)
			die("MQ_FAULT_PREFIX: its directory cannot be resolved");
	} else if (!realpath(".", res) || join(prefix, res, pre) < 0) {
		die("MQ_FAULT_PREFIX: the current directory cannot be resolved");
	}
	prefixlen = strlen(prefix);
	prefixbase = strrchr(prefix, '/') + 1;

	if (at && *at) {
		errno = 0;
		fault_at = strtoull(at, &end, 10);
		if (errno || *end || *at == '-')
			die("MQ_FAULT_AT: want a count (0: none)");
	}
	if (k && *k) {
		for (i = 0; i < sizeof kindname / sizeof *kindname; i++)
			if (!strcmp(k, kindname[i]))
				break;
		if (i == sizeof kindname / sizeof *kindname)
			die("MQ_FAULT_ERRNO: want ENOSPC, EIO, EDQUOT or short");
		kind = (enum kind)i;
	}
	sticky = st && !strcmp(st, "1");
	dirs = dr && !strcmp(dr, "1");
	locks = lk && !strcmp(lk, "1");
	if (log && *log) {
		fd = real_open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
		    0644);
		if (fd < 0)
			die("cannot open MQ_FAULT_LOG");
		/* out of the way of programs that expect low descriptors free */
		logfd = real_fcntl(fd, F_DUPFD_CLOEXEC, 512);
		if (logfd < 0)
			logfd = fd;
		else
			close(fd);
	}
	if (!ch || strcmp(ch, "1"))
		unpreload();
	ready = 1;

	/* descriptors inherited across exec */
	if ((d = opendir("/proc/self/fd"))) {
		int dfd = dirfd(d);

		while ((e = readdir(d))) {
			fd = atoi(e->d_name);
			if (e->d_name[0] != '.' && fd != dfd && fd != logfd)
				track(fd);
		}
		closedir(d);
	}
}

/* --- opening and closing ------------------------------------------- */

enum opener { OP_OPEN, OP_OPEN64, OP_OPENAT, OP_OPENAT64 };

static int
open_common(const char *fn, enum opener how, int dirfd, const char *path,
    int flags, mode_t m)
{
	char buf[PATH_MAX], what[32], res[64];
	const char *p = canon(how >= OP_OPENAT ? dirfd : AT_FDCWD, path, buf);
	unsigned long long n = 0;
	int fd, fail = 0, saved;
	REAL(open);
	REAL(open64);
	REAL(openat);
	REAL(openat64);

	if (p) {
		n = count(&fail);
		snprintf(what, sizeof what, "%#x", (unsigned)flags);
		if (fail) {
			logline(n, fn, p, what, result(-1, 1, res, sizeof res));
			errno = fault_errno();
			return -1;
		}
	}
	switch (how) {
	case OP_OPEN:
		fd = real_open(path, flags, m);
		break;
	case OP_OPEN64:
		fd = real_open64(path, flags, m);
		break;
	case OP_OPENAT:
		fd = real_openat(dirfd, path, flags, m);
		break;
	default:
		fd = real_openat64(dirfd, path, flags, m);
		break;
	}
	saved = errno;
	if (fd >= 0)
		track(fd);
	if (p)
		logline(n, fn, p, what, fd < 0 ? result(-1, 0, res, sizeof res) :
		    "ok");
	errno = saved;
	return fd;
}

static mode_t
mode_arg(int flags, va_list ap)
{
	if (flags & (O_CREAT | __O_TMPFILE))
		return (mode_t)va_arg(ap, int);
	return 0;
}

int
open(const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;

	va_start(ap, flags);
	m = mode_arg(flags, ap);
	va_end(ap);
	return open_common("open", OP_OPEN, AT_FDCWD, path, flags, m);
}

int
open64(const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;

	va_start(ap, flags);
	m = mode_arg(flags, ap);
	va_end(ap);
	return open_common("open64", OP_OPEN64, AT_FDCWD, path, flags, m);
}

int
openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;

	va_start(ap, flags);
	m = mode_arg(flags, ap);
	va_end(ap);
	return open_common("openat", OP_OPENAT, dirfd, path, flags, m);
}

int
openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;

	va_start(ap, flags);
	m = mode_arg(flags, ap);
	va_end(ap);
	return open_common("openat64", OP_OPENAT64, dirfd, path, flags, m);
}

/* fortified open() without a constant mode */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);

int
__open_2(const char *path, int flags)
{
	return open_common("open", OP_OPEN, AT_FDCWD, path, flags, 0);
}

int
__open64_2(const char *path, int flags)
{
	return open_common("open64", OP_OPEN64, AT_FDCWD, path, flags, 0);
}

int
__openat_2(int dirfd, const char *path, int flags)
{
	return open_common("openat", OP_OPENAT, dirfd, path, flags, 0);
}

int
__openat64_2(int dirfd, const char *path, int flags)
{
	return open_common("openat64", OP_OPENAT64, dirfd, path, flags, 0);
}

int
creat(const char *path, mode_t m)
{
	return open_common("creat", OP_OPEN, AT_FDCWD, path,
	    O_CREAT | O_WRONLY | O_TRUNC, m);
}

int
creat64(const char *path, mode_t m)
{
	return open_common("creat64", OP_OPEN64, AT_FDCWD, path,
	    O_CREAT | O_WRONLY | O_TRUNC, m);
}

/* A descriptor about to be replaced must not be the log's. */
static void
spare_log(int fd)
{
	REAL(fcntl);

	if (ready && logfd >= 0 && fd == logfd) {
		int n = real_fcntl(logfd, F_DUPFD_CLOEXEC, 512);

		if (n < 0)
			die("cannot move the log descriptor");
		logfd = n;
	}
}

int
close(int fd)
{
	REAL(close);

	if (ready && logfd >= 0 && fd == logfd)
		return 0;	/* a program closing every descriptor */
	setw(fd, 0);
	return real_close(fd);
}

int
dup(int fd)
{
	int n;
	REAL(dup);

	n = real_dup(fd);
	if (n >= 0)
		setw(n, is_marked(fd));
	return n;
}

int
dup2(int fd, int to)
{
	int n;
	REAL(dup2);

	spare_log(to);
	n = real_dup2(fd, to);
	if (n >= 0)
		setw(n, is_marked(fd));
	return n;
}

int
dup3(int fd, int to, int flags)
{
	int n;
	REAL(dup3);

	spare_log(to);
	n = real_dup3(fd, to, flags);
	if (n >= 0)
		setw(n, is_marked(fd));
	return n;
}

/* every fcntl argument is an int, a long or a pointer: pass a word on */
static int
fcntl_common(int (*f)(int, int, ...), int fd, int cmd, void *arg)
{
	int r = f(fd, cmd, arg);

	if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC))
		setw(r, is_marked(fd));
	return r;
}

int
fcntl(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;
	REAL(fcntl);

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	return fcntl_common(real_fcntl, fd, cmd, arg);
}

int
fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;
	REAL(fcntl64);

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	return fcntl_common(real_fcntl64, fd, cmd, arg);
}

/* --- writing, syncing, truncating ---------------------------------- */

/* One counted call under way. */
struct op {
	const char		*fn;
	char			name[PATH_MAX];	/* the file's */
	char			what[64];
	unsigned long long	n;
	int			fail;
	int			is_write;
	size_t			want;		/* a write's bytes */
};

/*
 * A counted call on a watched file begins (its name in o->name): -1 when
 * it is to fail (logged, errno set: return -1); 1 to go on.  For a write
 * (len not NULL), *len may come back halved: write only that much.
 */
static int
op_start(struct op *o, const char *fn, size_t *len, long long off,
    long long arg)
{
	char res[64];

	o->fn = fn;
	o->n = count(&o->fail);
	o->is_write = len != NULL;
	o->want = 0;
	if (len) {
		o->want = *len;
		snprintf(o->what, sizeof o->what, "%zu@%lld", *len, off);
	} else if (arg >= 0) {
		snprintf(o->what, sizeof o->what, "%lld", arg);
	} else {
		snprintf(o->what, sizeof o->what, "-");
	}
	if (!o->fail)
		return 1;
	if (len && cut_short(o->n)) {
		*len /= 2;
		return 1;
	}
	logline(o->n, fn, o->name, o->what, result(-1, 1, res, sizeof res));
	errno = fault_errno();
	return -1;
}

/*
 * Before a call on fd: 0 when fd is not watched (pass the call on as it
 * is); else as op_start.
 */
static int
op_begins(struct op *o, const char *fn, int fd, size_t *len, long long off,
    long long arg)
{
	if (!is_watched(fd, o->name))
		return 0;
	return op_start(o, fn, len, off, arg);
}

/* op_begins for a sync, which may be of a directory (MQ_FAULT_DIRS). */
static int
sync_begins(struct op *o, const char *fn, int fd)
{
	int saved = errno, w;

	if (is_watched(fd, o->name))
		return op_start(o, fn, NULL, 0, -1);
	w = dirs && ready && fdname(fd, o->name) == 0 && above_prefix(o->name);
	errno = saved;
	return w ? op_start(o, fn, NULL, 0, -1) : 0;
}

/* After the call, which returned r: logs it; returns r, errno kept. */
static long long
op_ends(struct op *o, long long r)
{
	char res[64];
	int saved = errno;

	if (o->fail)	/* a short write */
		snprintf(res, sizeof res, "FAULT short %lld", r);
	else if (r >= 0 && !o->is_write)
		snprintf(res, sizeof res, "ok");
	else
		result(r, 0, res, sizeof res);
	logline(o->n, o->fn, o->name, o->what, res);
	errno = saved;
	return r;
}

static size_t
iovlen(const struct iovec *iov, int cnt)
{
	size_t n = 0;
	int i;

	for (i = 0; i < cnt; i++)
		n += iov[i].iov_len;
	return n;
}

/* iov cut to its first len bytes, in out (NIOV entries): the count, or -1 */
static int
cut_iov(const struct iovec *iov, int cnt, size_t len, struct iovec *out)
{
	int i, k = 0;

	for (i = 0; i < cnt && len > 0; i++) {
		size_t l = iov[i].iov_len < len ? iov[i].iov_len : len;

		if (k == NIOV)
			return -1;
		out[k].iov_base = iov[i].iov_base;
		out[k++].iov_len = l;
		len -= l;
	}
	return k;
}

ssize_t
write(int fd, const void *buf, size_t len)
{
	struct op o;
	REAL(write);

	switch (op_begins(&o, "write", fd, &len, -1, 0)) {
	case 0:
		return real_write(fd, buf, len);
	case -1:
		return -1;
	}
	return op_ends(&o, len || !o.want ? real_write(fd, buf, len) : 0);
}

ssize_t
pwrite(int fd, const void *buf, size_t len, off_t off)
{
	struct op o;
	REAL(pwrite);

	switch (op_begins(&o, "pwrite", fd, &len, off, 0)) {
	case 0:
		return real_pwrite(fd, buf, len, off);
	case -1:
		return -1;
	}
	return op_ends(&o, len || !o.want ? real_pwrite(fd, buf, len, off) : 0);
}

ssize_t
pwrite64(int fd, const void *buf, size_t len, off64_t off)
{
	struct op o;
	REAL(pwrite64);

	switch (op_begins(&o, "pwrite64", fd, &len, off, 0)) {
	case 0:
		return real_pwrite64(fd, buf, len, off);
	case -1:
		return -1;
	}
	return op_ends(&o, len || !o.want ?
	    real_pwrite64(fd, buf, len, off) : 0);
}

/*
 * The vector writes: vcall makes the real call; a short one is given a
 * copy of the vector cut to the bytes it may write.
 */
enum vcall { V_WRITEV, V_PWRITEV, V_PWRITEV64, V_PWRITEV2 };

static ssize_t
vcall(enum vcall how, int fd, const struct iovec *iov, int cnt, off64_t off,
    int flags)
{
	REAL(writev);
	REAL(pwritev);
	REAL(pwritev64);
	REAL(pwritev2);

	switch (how) {
	case V_WRITEV:
		return real_writev(fd, iov, cnt);
	case V_PWRITEV:
		return real_pwritev(fd, iov, cnt, (off_t)off);
	case V_PWRITEV64:
		return real_pwritev64(fd, iov, cnt, off);
	default:
		return real_pwritev2(fd, iov, cnt, (off_t)off, flags);
	}
}

static ssize_t
vwrite(const char *fn, enum vcall how, int fd, const struct iovec *iov,
    int cnt, off64_t off, int flags)
{
	struct iovec v[NIOV];
	struct op o;
	size_t len = cnt > 0 ? iovlen(iov, cnt) : 0;
	int k;

	switch (op_begins(&o, fn, fd, &len, how == V_WRITEV ? -1 : off, 0)) {
	case 0:
		return vcall(how, fd, iov, cnt, off, flags);
	case -1:
		return -1;
	}
	if (len == o.want)
		return op_ends(&o, vcall(how, fd, iov, cnt, off, flags));
	if (len == 0)
		return op_ends(&o, 0);
	if ((k = cut_iov(iov, cnt, len, v)) < 0) {
		errno = EINVAL;		/* too many pieces to cut here */
		return op_ends(&o, -1);
	}
	return op_ends(&o, vcall(how, fd, v, k, off, flags));
}

ssize_t
writev(int fd, const struct iovec *iov, int cnt)
{
	return vwrite("writev", V_WRITEV, fd, iov, cnt, -1, 0);
}

ssize_t
pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	return vwrite("pwritev", V_PWRITEV, fd, iov, cnt, off, 0);
}

ssize_t
pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off)
{
	return vwrite("pwritev64", V_PWRITEV64, fd, iov, cnt, off, 0);
}

ssize_t
pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	return vwrite("pwritev2", V_PWRITEV2, fd, iov, cnt, off, flags);
}

int
fsync(int fd)
{
	struct op o;
	REAL(fsync);

	switch (sync_begins(&o, "fsync", fd)) {
	case 0:
		return real_fsync(fd);
	case -1:
		return -1;
	}
	return (int)op_ends(&o, real_fsync(fd));
}

int
fdatasync(int fd)
{
	struct op o;
	REAL(fdatasync);

	switch (sync_begins(&o, "fdatasync", fd)) {
	case 0:
		return real_fdatasync(fd);
	case -1:
		return -1;
	}
	return (int)op_ends(&o, real_fdatasync(fd));
}

int
flock(int fd, int op)
{
	struct op o;
	REAL(flock);

	if (!locks)
		return real_flock(fd, op);
	switch (op_begins(&o, "flock", fd, NULL, 0, op)) {
	case 0:
		return real_flock(fd, op);
	case -1:
		return -1;
	}
	return (int)op_ends(&o, real_flock(fd, op));
}

int
ftruncate(int fd, off_t len)
{
	struct op o;
	REAL(ftruncate);

	switch (op_begins(&o, "ftruncate", fd, NULL, 0, len)) {
	case 0:
		return real_ftruncate(fd, len);
	case -1:
		return -1;
	}
	return (int)op_ends(&o, real_ftruncate(fd, len));
}

int
ftruncate64(int fd, off64_t len)
{
	struct op o;
	REAL(ftruncate64);

	switch (op_begins(&o, "ftruncate64", fd, NULL, 0, len)) {
	case 0:
		return real_ftruncate64(fd, len);
	case -1:
		return -1;
	}
	return (int)op_ends(&o, real_ftruncate64(fd, len));
}
