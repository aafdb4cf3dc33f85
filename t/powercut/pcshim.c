/*
 * pcshim.c: an LD_PRELOAD shim that records, for a power-cut harness,
 * what a process does to some files and what it prints.
 *
 *   cc -shared -fPIC -o pcshim.so pcshim.c -ldl
 *   POWERCUT_LOG=LOG POWERCUT_PREFIX=/dir/mq.db [POWERCUT_TAG=WORD] \
 *       LD_PRELOAD=./pcshim.so PROGRAM ...
 *
 * Files whose canonical path starts with $POWERCUT_PREFIX (for a database
 * /dir/mq.db: mq.db, mq.db-wal, mq.db-shm, mq.db-journal) are tracked: every
 * write to them with its offset and data, truncation, fsync and fdatasync,
 * unlink, open, and writable shared mapping is appended to $POWERCUT_LOG,
 * one record per event in the format of pclog.h.  So is every write to
 * standard output (fd 1), as an output event.  Nothing is recorded when
 * $POWERCUT_LOG is unset; the shim then only passes calls through.
 *
 * Invariants:
 * - Each record is one writev(2) on the log, opened with O_APPEND: records
 *   of concurrent processes never interleave, and their order in the file
 *   is one global order (a short write of the log aborts the process
 *   rather than leave a log that lies).
 * - The log order is causal: a write or truncate is logged after it
 *   returned, a sync before it starts, an output before its bytes are
 *   written.  So a write logged before a sync was complete when that sync
 *   began (the sync covers it), an output is never logged later than a
 *   reader could see it, and whatever a process did or learnt before it
 *   printed (its own sync, or another's it waited for) is logged before
 *   the output.  A write to a file opened O_SYNC or O_DSYNC (or with
 *   RWF_DSYNC) is followed by a sync record.  A sync that fails is still
 *   logged as one: programs that print after a failed sync are not caught.
 * - fd -> path is known for every descriptor made by open, open64, openat,
 *   openat64, creat, dup, dup2, dup3 and fcntl(F_DUPFD[_CLOEXEC]), and for
 *   those inherited across exec (read from /proc/self/fd at load).  The path
 *   is the kernel's (readlink of /proc/self/fd/N): canonical and absolute.
 * - glibc's stdio writes stdout through an internal write() that no shim
 *   can interpose, so at load stdout is replaced by a fopencookie stream
 *   whose writes go through write(1, ...) here; fileno() of it is 1.
 *   Programs that write fd 1 directly are seen too.
 *
 * Not seen: writes through stdio FILEs other than stdout, through
 * mappings (recorded as PC_MMAP so the reader can refuse), io_uring, or
 * by processes started without the shim; directory syncs (creating and
 * unlinking files is taken as durable at once).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "pclog.h"

#define FDMAX	65536		/* descriptors above are not tracked */
#define NPATHS	256		/* distinct tracked paths per process */
#define NIOV	64		/* data iovecs passed to the log as they are */

static int state;		/* 0: not loaded, 1: loading, 2: recording */
static int logfd = -1;
static char prefix[PATH_MAX];
static size_t prefixlen;
static const char *prefixbase;	/* its last component */
static char tag[256];
static size_t taglen;
static FILE *out_cookie;

/* fd -> interned path (NULL: not tracked); read and set atomically */
static const char *fdpath[FDMAX];
static char *paths[NPATHS];
static int npaths;
static pthread_mutex_t pathmu = PTHREAD_MUTEX_INITIALIZER;

static void *
real(const char *name)
{
	void *p = dlsym(RTLD_NEXT, name);

	if (!p) {
		static const char m[] = "pcshim: a libc function is missing\n";

		if (write(2, m, sizeof m - 1) < 0) {
			/* nothing more to say */
		}
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
	char m[256];
	int n = snprintf(m, sizeof m, "pcshim: %s: %s: the log would be "
	    "incomplete\n", what, strerror(errno));
	REAL(write);

	if (real_write(2, m, n > 0 && n < (int)sizeof m ? (size_t)n :
	    sizeof m - 1) < 0) {
		/* nothing more to say */
	}
	abort();
}

static const char *
getfd(int fd)
{
	if (!state || fd < 0 || fd >= FDMAX)
		return NULL;
	return __atomic_load_n(&fdpath[fd], __ATOMIC_ACQUIRE);
}

static void
setfd(int fd, const char *p)
{
	if (fd >= 0 && fd < FDMAX)
		__atomic_store_n(&fdpath[fd], p, __ATOMIC_RELEASE);
}

static const char *
intern(const char *p)
{
	const char *r = NULL;
	int i;

	pthread_mutex_lock(&pathmu);
	for (i = 0; i < npaths && !r; i++)
		if (!strcmp(paths[i], p))
			r = paths[i];
	if (!r && npaths < NPATHS && (paths[npaths] = strdup(p)))
		r = paths[npaths++];
	pthread_mutex_unlock(&pathmu);
	if (!r) {
		errno = ENOMEM;
		die("too many tracked paths");
	}
	return r;
}

static int
under_prefix(const char *p)
{
	return prefixlen && !strncmp(p, prefix, prefixlen);
}

/*
 * Appends one record.  data: iovecs holding len bytes in all (the caller
 * trims them to what was really written).
 */
static void
emit(int type, const char *path, int64_t off, const struct iovec *data,
    int ndata, uint64_t len)
{
	static const char zeros[8];
	struct iovec v[4 + NIOV];
	struct pc_rec r;
	struct timespec ts;
	char *flat = NULL;
	size_t total, pl = path ? strlen(path) : 0;
	ssize_t w;
	int i, n = 0, saved = errno;
	REAL(writev);

	if (state != 2 || logfd < 0)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	memset(&r, 0, sizeof r);
	r.magic = PC_MAGIC;
	r.type = type;
	r.off = off;
	r.len = len;
	r.ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	r.pid = getpid();
	r.pathlen = pl;
	r.taglen = taglen;
	total = sizeof r + pl + taglen + len;
	total = (total + 7) / 8 * 8;	/* keeps every header aligned */
	r.size = total;
	v[n].iov_base = &r;
	v[n++].iov_len = sizeof r;
	if (pl) {
		v[n].iov_base = (void *)path;
		v[n++].iov_len = pl;
	}
	if (taglen) {
		v[n].iov_base = tag;
		v[n++].iov_len = taglen;
	}
	if (ndata > NIOV) {
		size_t at = 0;

		if (!(flat = malloc(len ? len : 1)))
			die("cannot log");
		for (i = 0; i < ndata; i++) {
			memcpy(flat + at, data[i].iov_base, data[i].iov_len);
			at += data[i].iov_len;
		}
		v[n].iov_base = flat;
		v[n++].iov_len = len;
	} else {
		for (i = 0; i < ndata; i++)
			if (data[i].iov_len)
				v[n++] = data[i];
	}
	if (total > sizeof r + pl + taglen + len) {
		v[n].iov_base = (void *)zeros;
		v[n++].iov_len = total - (sizeof r + pl + taglen + len);
	}
	do
		w = real_writev(logfd, v, n);
	while (w < 0 && errno == EINTR);
	if (w != (ssize_t)total)
		die(w < 0 ? "cannot write the log" : "short write of the log");
	free(flat);
	errno = saved;
}

/*
 * Trims iov (cnt entries) to its first n bytes, into out (at most NIOV
 * entries, else a flat copy is made by emit): returns the count.
 */
static int
trim(const struct iovec *iov, int cnt, size_t n, struct iovec *out, int max)
{
	int i, k = 0;

	for (i = 0; i < cnt && n > 0; i++) {
		size_t l = iov[i].iov_len < n ? iov[i].iov_len : n;

		if (k == max)
			return -1;
		out[k].iov_base = iov[i].iov_base;
		out[k++].iov_len = l;
		n -= l;
	}
	return k;
}

static void
emit_iov(int type, const char *path, int64_t off, const struct iovec *iov,
    int cnt, size_t n)
{
	struct iovec t[NIOV];
	int k = trim(iov, cnt, n, t, NIOV);

	if (k >= 0) {
		emit(type, path, off, t, k, n);
	} else {
		/* many pieces: emit copies them; only whole ones are given */
		struct iovec *u = malloc((size_t)cnt * sizeof *u);

		if (!u)
			die("cannot log");
		k = trim(iov, cnt, n, u, cnt);
		emit(type, path, off, u, k, n);
		free(u);
	}
}

/* After an open made fd: track it if its file is under the prefix. */
static const char *
track(int fd)
{
	char link[64], buf[PATH_MAX];
	ssize_t n;
	const char *p = NULL;
	int saved = errno;

	if (fd < 0 || state != 2)
		return NULL;
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	n = readlink(link, buf, sizeof buf - 1);
	if (n > 0) {
		buf[n] = '\0';
		if (under_prefix(buf))
			p = intern(buf);
	}
	setfd(fd, p);
	errno = saved;
	return p;
}

static void
opened(int fd, int flags)
{
	const char *p = track(fd);

	if (p) {
		emit(PC_OPEN, p, flags, NULL, 0, 0);
		if (flags & O_TRUNC)
			emit(PC_TRUNC, p, 0, NULL, 0, 0);
	}
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
 * The canonical absolute path a path argument names (its directory
 * resolved; the last component need not exist), or NULL when it cannot be
 * under the prefix.  Cheap for other names: only a last component that
 * starts like the prefix's is resolved.
 */
static char *
canon(int dirfd, const char *path, char *out)
{
	char full[PATH_MAX * 2], dir[PATH_MAX], *slash;
	const char *base;

	if (state != 2 || !prefixlen || !path)
		return NULL;
	base = strrchr(path, '/');
	base = base ? base + 1 : path;
	if (strncmp(base, prefixbase, strlen(prefixbase)) &&
	    strncmp(prefixbase, base, strlen(base)))
		return NULL;
	if (path[0] == '/') {
		snprintf(full, sizeof full, "%s", path);
	} else if (dirfd == AT_FDCWD) {
		if (!getcwd(dir, sizeof dir))
			return NULL;
		snprintf(full, sizeof full, "%s/%s", dir, path);
	} else {
		char link[64];
		ssize_t n;

		snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
		if ((n = readlink(link, dir, sizeof dir - 1)) <= 0)
			return NULL;
		dir[n] = '\0';
		snprintf(full, sizeof full, "%s/%s", dir, path);
	}
	slash = strrchr(full, '/');
	*slash = '\0';
	if (!realpath(*full ? full : "/", dir))
		return NULL;
	if (join(out, dir, slash + 1) < 0)
		return NULL;
	return under_prefix(out) ? out : NULL;
}

/* --- standard output ------------------------------------------------ */

static ssize_t
cookie_write(void *c, const char *buf, size_t n)
{
	size_t done = 0;
	ssize_t w;

	(void)c;
	while (done < n) {
		w = write(1, buf + done, n - done);	/* ours, below */
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		done += w;
	}
	return done;	/* fopencookie: short (0) on error, errno set */
}

static int
cookie_close(void *c)
{
	(void)c;
	return close(1);
}

/* before a write to fd 1 */
static void
output(const struct iovec *iov, int cnt, size_t n)
{
	emit_iov(PC_OUTPUT, NULL, 0, iov, cnt, n);
}

/* after it: a write that fell short says how much went out */
static void
output_result(ssize_t w, size_t n)
{
	if (w < 0 || (size_t)w != n)
		emit(PC_OUTRES, NULL, w < 0 ? 0 : w, NULL, 0, 0);
}

/* --- loading ------------------------------------------------------- */

__attribute__((constructor)) static void
load(void)
{
	const char *log = getenv("POWERCUT_LOG");
	const char *pre = getenv("POWERCUT_PREFIX");
	const char *t = getenv("POWERCUT_TAG");
	char dir[PATH_MAX], res[PATH_MAX], *slash;
	DIR *d;
	struct dirent *e;
	int fd;
	REAL(open);
	REAL(fcntl);

	if (state || !log || !*log)
		return;
	state = 1;
	if (pre && *pre) {
		/* canonical, as the kernel names open files */
		snprintf(dir, sizeof dir, "%s", pre);
		slash = strrchr(dir, '/');
		if (slash) {
			*slash = '\0';
			if (!realpath(*dir ? dir : "/", res) ||
			    join(prefix, res, slash + 1) < 0)
				snprintf(prefix, sizeof prefix, "%s", pre);
		} else if (!realpath(".", res) || join(prefix, res, pre) < 0) {
			snprintf(prefix, sizeof prefix, "%s", pre);
		}
		prefixlen = strlen(prefix);
		prefixbase = strrchr(prefix, '/') ? strrchr(prefix, '/') + 1 :
		    prefix;
	}
	if (t) {
		snprintf(tag, sizeof tag, "%s", t);
		taglen = strlen(tag);
	}
	fd = real_open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		die("cannot open POWERCUT_LOG");
	/* out of the way of programs that expect low descriptors free */
	logfd = real_fcntl(fd, F_DUPFD_CLOEXEC, 512);
	if (logfd < 0)
		logfd = fd;
	else
		close(fd);
	state = 2;

	/* descriptors inherited across exec */
	if ((d = opendir("/proc/self/fd"))) {
		int dfd = dirfd(d);

		while ((e = readdir(d)))
			if (e->d_name[0] != '.' && atoi(e->d_name) != dfd &&
			    atoi(e->d_name) != logfd)
				track(atoi(e->d_name));
		closedir(d);
	}

	if (real_fcntl(1, F_GETFD) >= 0) {
		cookie_io_functions_t io = {
			.read = NULL, .write = cookie_write,
			.seek = NULL, .close = cookie_close,
		};

		if ((out_cookie = fopencookie(NULL, "w", io))) {
			setvbuf(out_cookie, NULL, isatty(1) ? _IOLBF : _IOFBF,
			    BUFSIZ);
			stdout = out_cookie;
		}
	}
}

int
fileno(FILE *f)
{
	REAL(fileno);

	if (f && f == out_cookie)
		return 1;
	return real_fileno(f);
}

int
fileno_unlocked(FILE *f)
{
	REAL(fileno_unlocked);

	if (f && f == out_cookie)
		return 1;
	return real_fileno_unlocked(f);
}

/* --- opening and closing ------------------------------------------- */

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
	int fd;
	REAL(open);

	va_start(ap, flags);
	m = mode_arg(flags, ap);
	va_end(ap);
	fd = real_open(path, flags, m);
	opened(fd, flags);
	return fd;
}

int
open64(const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;
	int fd;
	REAL(open64);

	va_start(ap, flags);
	m = mode_arg(flags, ap);
	va_end(ap);
	fd = real_open64(path, flags, m);
	opened(fd, flags);
	return fd;
}

int
openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;
	int fd;
	REAL(openat);

	va_start(ap, flags);
	m = mode_arg(flags, ap);
	va_end(ap);
	fd = real_openat(dirfd, path, flags, m);
	opened(fd, flags);
	return fd;
}

int
openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;
	int fd;
	REAL(openat64);

	va_start(ap, flags);
	m = mode_arg(flags, ap);
	va_end(ap);
	fd = real_openat64(dirfd, path, flags, m);
	opened(fd, flags);
	return fd;
}

/* fortified open() without a constant mode */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);

int
__open_2(const char *path, int flags)
{
	return open(path, flags);
}

int
__open64_2(const char *path, int flags)
{
	return open64(path, flags);
}

int
__openat_2(int dirfd, const char *path, int flags)
{
	return openat(dirfd, path, flags);
}

int
__openat64_2(int dirfd, const char *path, int flags)
{
	return openat64(dirfd, path, flags);
}

int
creat(const char *path, mode_t m)
{
	return open(path, O_CREAT | O_WRONLY | O_TRUNC, m);
}

int
creat64(const char *path, mode_t m)
{
	return open64(path, O_CREAT | O_WRONLY | O_TRUNC, m);
}

/* A descriptor about to be replaced must not be the log's. */
static void
spare_log(int fd)
{
	REAL(fcntl);

	if (state == 2 && fd == logfd) {
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

	if (state == 2 && fd == logfd)
		return 0;	/* a program closing every descriptor */
	setfd(fd, NULL);
	return real_close(fd);
}

int
dup(int fd)
{
	int n;
	REAL(dup);

	n = real_dup(fd);
	if (n >= 0)
		setfd(n, getfd(fd));
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
		setfd(n, getfd(fd));
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
		setfd(n, getfd(fd));
	return n;
}

/* every fcntl argument is an int, a long or a pointer: pass a word on */
static int
fcntl_common(int (*f)(int, int, ...), int fd, int cmd, void *arg)
{
	int r = f(fd, cmd, arg);

	if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC))
		setfd(r, getfd(fd));
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

/* --- writing ------------------------------------------------------- */

/*
 * After a write of w bytes to fd: log it if fd is tracked.  A write that
 * was durable when it returned (O_SYNC, O_DSYNC, RWF_[D]SYNC in rwf) is
 * followed by a sync record.
 */
static void
wrote_at(int fd, const char *p, const struct iovec *iov, int cnt, ssize_t w,
    off_t at, int rwf)
{
	int fl;

	if (p && w > 0) {
		if (at < 0)	/* write(): where the file position left it */
			at = lseek(fd, 0, SEEK_CUR) - w;
		emit_iov(PC_WRITE, p, at, iov, cnt, w);
		fl = fcntl(fd, F_GETFL);
		if ((fl >= 0 && (fl & (O_SYNC | O_DSYNC))) ||
		    (rwf & (RWF_SYNC | RWF_DSYNC)))
			emit(PC_SYNC, p, 2, NULL, 0, 0);
	}
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

ssize_t
write(int fd, const void *buf, size_t n)
{
	struct iovec v = { (void *)buf, n };
	const char *p = getfd(fd);
	ssize_t w;
	int saved;
	REAL(write);

	if (fd == 1 && state == 2)
		output(&v, 1, n);
	w = real_write(fd, buf, n);
	saved = errno;
	if (fd == 1 && state == 2)
		output_result(w, n);
	wrote_at(fd, p, &v, 1, w, -1, 0);
	errno = saved;
	return w;
}

ssize_t
writev(int fd, const struct iovec *iov, int cnt)
{
	const char *p = getfd(fd);
	size_t n = iovlen(iov, cnt > 0 ? cnt : 0);
	ssize_t w;
	int saved;
	REAL(writev);

	if (fd == 1 && state == 2)
		output(iov, cnt, n);
	w = real_writev(fd, iov, cnt);
	saved = errno;
	if (fd == 1 && state == 2)
		output_result(w, n);
	wrote_at(fd, p, iov, cnt, w, -1, 0);
	errno = saved;
	return w;
}

ssize_t
pwrite(int fd, const void *buf, size_t n, off_t off)
{
	struct iovec v = { (void *)buf, n };
	ssize_t w;
	int saved;
	REAL(pwrite);

	w = real_pwrite(fd, buf, n, off);
	saved = errno;
	wrote_at(fd, getfd(fd), &v, 1, w, off, 0);
	errno = saved;
	return w;
}

ssize_t
pwrite64(int fd, const void *buf, size_t n, off64_t off)
{
	struct iovec v = { (void *)buf, n };
	ssize_t w;
	int saved;
	REAL(pwrite64);

	w = real_pwrite64(fd, buf, n, off);
	saved = errno;
	wrote_at(fd, getfd(fd), &v, 1, w, off, 0);
	errno = saved;
	return w;
}

ssize_t
pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	ssize_t w;
	int saved;
	REAL(pwritev);

	w = real_pwritev(fd, iov, cnt, off);
	saved = errno;
	wrote_at(fd, getfd(fd), iov, cnt, w, off, 0);
	errno = saved;
	return w;
}

ssize_t
pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off)
{
	ssize_t w;
	int saved;
	REAL(pwritev64);

	w = real_pwritev64(fd, iov, cnt, off);
	saved = errno;
	wrote_at(fd, getfd(fd), iov, cnt, w, off, 0);
	errno = saved;
	return w;
}

ssize_t
pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	size_t n = iovlen(iov, cnt > 0 ? cnt : 0);
	ssize_t w;
	int saved;
	REAL(pwritev2);

	if (fd == 1 && off == -1 && state == 2)
		output(iov, cnt, n);
	w = real_pwritev2(fd, iov, cnt, off, flags);
	saved = errno;
	if (fd == 1 && off == -1 && state == 2)
		output_result(w, n);
	wrote_at(fd, getfd(fd), iov, cnt, w, off, flags);
	errno = saved;
	return w;
}

int
ftruncate(int fd, off_t len)
{
	int r, saved;
	REAL(ftruncate);

	r = real_ftruncate(fd, len);
	saved = errno;
	if (r == 0 && getfd(fd))
		emit(PC_TRUNC, getfd(fd), len, NULL, 0, 0);
	errno = saved;
	return r;
}

int
ftruncate64(int fd, off64_t len)
{
	int r, saved;
	REAL(ftruncate64);

	r = real_ftruncate64(fd, len);
	saved = errno;
	if (r == 0 && getfd(fd))
		emit(PC_TRUNC, getfd(fd), len, NULL, 0, 0);
	errno = saved;
	return r;
}

int
truncate(const char *path, off_t len)
{
	char buf[PATH_MAX], *p = canon(AT_FDCWD, path, buf);
	int r, saved;
	REAL(truncate);

	r = real_truncate(path, len);
	saved = errno;
	if (r == 0 && p)
		emit(PC_TRUNC, intern(p), len, NULL, 0, 0);
	errno = saved;
	return r;
}

void *
mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	void *r;
	REAL(mmap);

	r = real_mmap(addr, len, prot, flags, fd, off);
	if (r != MAP_FAILED && (prot & PROT_WRITE) && (flags & MAP_SHARED) &&
	    getfd(fd))
		emit(PC_MMAP, getfd(fd), off, NULL, 0, 0);
	return r;
}

void *
mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
	void *r;
	REAL(mmap64);

	r = real_mmap64(addr, len, prot, flags, fd, off);
	if (r != MAP_FAILED && (prot & PROT_WRITE) && (flags & MAP_SHARED) &&
	    getfd(fd))
		emit(PC_MMAP, getfd(fd), off, NULL, 0, 0);
	return r;
}

/* --- syncing and unlinking ----------------------------------------- */

int
fsync(int fd)
{
	REAL(fsync);

	if (getfd(fd))
		emit(PC_SYNC, getfd(fd), 0, NULL, 0, 0);
	return real_fsync(fd);
}

int
fdatasync(int fd)
{
	REAL(fdatasync);

	if (getfd(fd))
		emit(PC_SYNC, getfd(fd), 1, NULL, 0, 0);
	return real_fdatasync(fd);
}

int
sync_file_range(int fd, off64_t off, off64_t n, unsigned int flags)
{
	REAL(sync_file_range);

	if (getfd(fd))
		emit(PC_RANGE, getfd(fd), off, NULL, 0, 0);
	return real_sync_file_range(fd, off, n, flags);
}

void
sync(void)
{
	REAL(sync);

	emit(PC_SYNCALL, NULL, 0, NULL, 0, 0);
	real_sync();
}

int
syncfs(int fd)
{
	REAL(syncfs);

	emit(PC_SYNCALL, NULL, 1, NULL, 0, 0);
	return real_syncfs(fd);
}

int
unlink(const char *path)
{
	char buf[PATH_MAX], *p = canon(AT_FDCWD, path, buf);
	int r, saved;
	REAL(unlink);

	r = real_unlink(path);
	saved = errno;
	if (r == 0 && p)
		emit(PC_UNLINK, intern(p), 0, NULL, 0, 0);
	errno = saved;
	return r;
}

int
unlinkat(int dirfd, const char *path, int flags)
{
	char buf[PATH_MAX], *p = NULL;
	int r, saved;
	REAL(unlinkat);

	if (!(flags & AT_REMOVEDIR))
		p = canon(dirfd, path, buf);
	r = real_unlinkat(dirfd, path, flags);
	saved = errno;
	if (r == 0 && p)
		emit(PC_UNLINK, intern(p), 0, NULL, 0, 0);
	errno = saved;
	return r;
}

