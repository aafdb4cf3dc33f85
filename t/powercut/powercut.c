/*
 * powercut.c: reads a log made by pcshim.so and rebuilds the files a power
 * cut could have left at any point of it.
 *
 *   powercut dump LOG			every event, one a line
 *   powercut stats LOG			counts per file and of output
 *   powercut cuts [-k KINDS] LOG	cut points, one a line: CUT KIND
 *   powercut outputs LOG		output lines: EVENT PID TAG LINE
 *   powercut printed LOG CUT		the output lines printed before CUT
 *   powercut build [-nv] [-s SEED] [-x SUFFIX] LOG INITDIR CUT MODES OUTDIR
 *
 * A cut point CUT (0 to the number of events) is the moment after events
 * 0 .. CUT-1 of the log and before event CUT.  KINDS, comma-separated, name
 * which to list: before-sync (CUT = a sync's index: the most printed for
 * the same durable state), after-sync (the index + 1), output (just after
 * each output), end (after the last event); default before-sync,end.
 *
 * build writes, for each mode of MODES (comma-separated) into OUTDIR/MODE/,
 * the files a power cut at CUT could leave.  The files start as the copies
 * in INITDIR (made before recording began; a file is named by its last
 * path component); then each file event before CUT is applied in log
 * order:
 * - A write or truncate of a file that a sync of that file (or a sync of
 *   everything) made durable before CUT is applied: a sync covers every
 *   earlier write to the file by any process, since the page cache is
 *   shared.
 * - One not yet synced at CUT is, by mode: dropped: not applied; kept:
 *   applied (the state a crash of the processes alone leaves); torn: at
 *   random from SEED and CUT, applied whole, dropped, or in part: its
 *   first or second half, or a random set of its 512-byte sectors (torn
 *   only at sector boundaries of the file: a sector is written whole or
 *   not at all, the power-safe-overwrite model SQLite assumes by default);
 *   an unsynced truncate is applied or not.
 * - Creating a file (open with O_CREAT) and unlink are applied at once.
 * -n ignores every sync, as if the programs never synced: a check that
 * passes on such a rebuild cannot tell lost from kept (the harness's own
 * test that it can fail).  -v says on stderr what each mode kept.
 * Files ending in SUFFIX (default -shm and mq's -mq, repeatable) are never
 * written: a shared-memory file does not survive a power cut.  A writable shared
 * mapping of any other file fails the build: writes through it are not in
 * the log.
 *
 * Invariants: the log is read whole and checked (magic, sizes) before
 * anything is written; two files of the log with the same last component
 * are refused, as are modes other than the three.  Exit 0 done, 1 on an
 * error (one line on stderr), 2 on a usage error.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pclog.h"

#define SECTOR	512

struct ev {
	const struct pc_rec *r;
	const char *path, *tag;
	const unsigned char *data;
	int file;		/* index in files[], or -1 */
	uint64_t outlen;	/* PC_OUTPUT: bytes really written */
};

struct file {
	char *path;		/* as logged; NULL: only in INITDIR */
	char *base;
	int skip;		/* ends in an excluded suffix */
	long lastsync;		/* last sync before the cut, or -1 */
	unsigned char *b;	/* the image */
	size_t len, cap;
	int exists;
};

static const char *const tname[PC_NTYPES] = {
	"?", "write", "trunc", "sync", "syncall", "range", "unlink", "open",
	"mmap", "output", "outres",
};

static struct ev *evs;
static long nev;
static struct file *files;
static int nfiles;
static const char *suffix[16] = { "-shm", "-mq" };
static int nsuffix = 2, user_suffix, verbose, nosync;

static void
die(const char *fmt, ...)
{
	va_list ap;
	int e = errno;

	fputs("powercut: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (fmt[strlen(fmt) - 1] == ':')
		fprintf(stderr, " %s", strerror(e));
	fputc('\n', stderr);
	exit(1);
}

static void
usage(void)
{
	fputs("usage: powercut dump|stats LOG\n"
	    "       powercut cuts [-k KINDS] LOG\n"
	    "       powercut outputs LOG\n"
	    "       powercut printed LOG CUT\n"
	    "       powercut build [-nv] [-s SEED] [-x SUFFIX] LOG INITDIR CUT "
	    "MODES OUTDIR\n", stderr);
	exit(2);
}

static void *
xrealloc(void *p, size_t n)
{
	if (!(p = realloc(p, n ? n : 1)))
		die("out of memory");
	return p;
}

static char *
xstrndup(const char *s, size_t n)
{
	char *p = xrealloc(NULL, n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

/* a/b into out (n bytes) */
static void
pjoin(char *out, size_t n, const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);

	if (la + 1 + lb >= n)
		die("path too long: %s/%s", a, b);
	memcpy(out, a, la);
	out[la] = '/';
	memcpy(out + la + 1, b, lb + 1);
}

static const char *
basename_of(const char *p)
{
	const char *s = strrchr(p, '/');

	return s ? s + 1 : p;
}

static int
excluded(const char *base)
{
	size_t b = strlen(base), s;
	int i;

	for (i = 0; i < nsuffix; i++) {
		s = strlen(suffix[i]);
		if (b >= s && !strcmp(base + b - s, suffix[i]))
			return 1;
	}
	return 0;
}

static int
file_by_base(const char *base)
{
	int i;

	for (i = 0; i < nfiles; i++)
		if (!strcmp(files[i].base, base))
			return i;
	return -1;
}

static int
add_file(const char *path, const char *base)
{
	struct file *f;

	files = xrealloc(files, (nfiles + 1) * sizeof *files);
	f = &files[nfiles];
	memset(f, 0, sizeof *f);
	f->path = path ? xstrndup(path, strlen(path)) : NULL;
	f->base = xstrndup(base, strlen(base));
	f->skip = excluded(base);
	f->lastsync = -1;
	return nfiles++;
}

/* The file of a logged path, added on first sight. */
static int
file_of(const char *path)
{
	const char *base = basename_of(path);
	int i = file_by_base(base);

	if (i < 0)
		return add_file(path, base);
	if (!files[i].path)
		files[i].path = xstrndup(path, strlen(path));
	else if (strcmp(files[i].path, path))
		die("%s and %s have the same name: cannot rebuild both in one "
		    "directory", files[i].path, path);
	return i;
}

/* Reads and checks the whole log. */
static void
load(const char *log)
{
	unsigned char *buf = NULL;
	size_t cap = 0, len = 0, at;
	ssize_t n;
	long cap_ev = 0, i, j;
	int fd;

	if ((fd = open(log, O_RDONLY)) < 0)
		die("cannot open %s:", log);
	for (;;) {
		if (len == cap)
			buf = xrealloc(buf, cap = cap ? 2 * cap : 1 << 20);
		if ((n = read(fd, buf + len, cap - len)) < 0)
			die("cannot read %s:", log);
		if (n == 0)
			break;
		len += n;
	}
	close(fd);
	for (at = 0; at < len; ) {
		const struct pc_rec *r = (const void *)(buf + at);
		struct ev *e;
		char *p;

		if (len - at < sizeof *r || r->magic != PC_MAGIC ||
		    r->type == 0 || r->type >= PC_NTYPES || r->size % 8 ||
		    r->size > len - at || r->len > r->size ||
		    r->size != (sizeof *r + r->pathlen + r->taglen + r->len +
		    7) / 8 * 8)
			die("%s: bad or incomplete record at byte %zu (event %ld)",
			    log, at, nev);
		if (nev == cap_ev)
			evs = xrealloc(evs, (cap_ev = cap_ev ? 2 * cap_ev : 4096) *
			    sizeof *evs);
		e = &evs[nev++];
		p = (char *)(r + 1);
		e->r = r;
		e->path = r->pathlen ? xstrndup(p, r->pathlen) : NULL;
		e->tag = xstrndup(p + r->pathlen, r->taglen);
		e->data = (unsigned char *)p + r->pathlen + r->taglen;
		e->file = e->path ? file_of(e->path) : -1;
		e->outlen = r->len;
		at += r->size;	/* a multiple of 8: the next header is aligned */
	}
	/* short output writes: the bytes past what went out never did */
	for (i = 0; i < nev; i++) {
		if (evs[i].r->type != PC_OUTRES)
			continue;
		for (j = i - 1; j >= 0; j--)
			if (evs[j].r->type == PC_OUTPUT &&
			    evs[j].r->pid == evs[i].r->pid) {
				if ((uint64_t)evs[i].r->off < evs[j].outlen)
					evs[j].outlen = evs[i].r->off;
				break;
			}
	}
}

static long
cut_arg(const char *s)
{
	char *end;
	long c;

	errno = 0;
	c = strtol(s, &end, 10);
	if (errno || *end || end == s || c < 0 || c > nev)
		die("invalid cut point '%s': want 0 to %ld", s, nev);
	return c;
}

static void
cmd_dump(void)
{
	long i;

	for (i = 0; i < nev; i++) {
		const struct pc_rec *r = evs[i].r;

		printf("%ld\t%" PRIu64 ".%09" PRIu64 "\t%d\t%s\t%s\t%s\toff=%"
		    PRId64 "\tlen=%" PRIu64 "\n", i, r->ns / 1000000000u,
		    r->ns % 1000000000u, r->pid, *evs[i].tag ? evs[i].tag : "-",
		    tname[r->type], evs[i].path ? evs[i].path : "-", r->off,
		    r->len);
	}
}

static void
cmd_stats(void)
{
	long *cnt = xrealloc(NULL, (size_t)nfiles * PC_NTYPES * sizeof *cnt);
	long out = 0, outres = 0, syncall = 0, i;
	uint64_t *bytes = xrealloc(NULL, (size_t)nfiles * sizeof *bytes);
	int f, t;

	memset(cnt, 0, (size_t)nfiles * PC_NTYPES * sizeof *cnt);
	memset(bytes, 0, (size_t)nfiles * sizeof *bytes);
	for (i = 0; i < nev; i++) {
		t = evs[i].r->type;
		if (t == PC_OUTPUT)
			out++;
		else if (t == PC_OUTRES)
			outres++;
		else if (t == PC_SYNCALL)
			syncall++;
		if ((f = evs[i].file) < 0)
			continue;
		cnt[f * PC_NTYPES + t]++;
		if (t == PC_WRITE)
			bytes[f] += evs[i].r->len;
	}
	printf("events %ld outputs %ld short-outputs %ld syncall %ld\n", nev,
	    out, outres, syncall);
	for (f = 0; f < nfiles; f++) {
		if (!files[f].path)
			continue;
		printf("%s", files[f].base);
		for (t = 1; t < PC_NTYPES; t++)
			if (t != PC_OUTPUT && t != PC_OUTRES && t != PC_SYNCALL)
				printf(" %s %ld", tname[t], cnt[f * PC_NTYPES + t]);
		printf(" bytes %" PRIu64 "\n", bytes[f]);
	}
	free(cnt);
	free(bytes);
}

static int
want_kind(const char *kinds, const char *k)
{
	size_t n = strlen(k);
	const char *p;

	for (p = kinds; (p = strstr(p, k)); p += n)
		if ((p == kinds || p[-1] == ',') && (p[n] == ',' || !p[n]))
			return 1;
	return 0;
}

static void
cmd_cuts(const char *kinds)
{
	static const char *known[] = { "before-sync", "after-sync", "output",
	    "end" };
	const char **kind = xrealloc(NULL, (size_t)(nev + 1) * sizeof *kind);
	const char *p;
	long i;
	size_t k;

	for (p = kinds; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] != 0)) {
		for (k = 0; k < sizeof known / sizeof *known; k++)
			if (strcspn(p, ",") == strlen(known[k]) &&
			    !strncmp(p, known[k], strlen(known[k])))
				break;
		if (k == sizeof known / sizeof *known)
			die("unknown kind of cut point in '%s': want before-sync, "
			    "after-sync, output or end", kinds);
	}
	memset(kind, 0, (size_t)(nev + 1) * sizeof *kind);
	for (i = 0; i < nev; i++) {
		int t = evs[i].r->type, sync = t == PC_SYNC || t == PC_SYNCALL;

		if (sync && want_kind(kinds, "before-sync") && !kind[i])
			kind[i] = "before-sync";
		if (sync && want_kind(kinds, "after-sync") && !kind[i + 1])
			kind[i + 1] = "after-sync";
		if (t == PC_OUTPUT && want_kind(kinds, "output") && !kind[i + 1])
			kind[i + 1] = "output";
	}
	if (want_kind(kinds, "end") && !kind[nev])
		kind[nev] = "end";
	for (i = 0; i <= nev; i++)
		if (kind[i])
			printf("%ld\t%s\n", i, kind[i]);
	free(kind);
}

/*
 * Calls fn for every output line, at the event that wrote its last byte
 * (a line the process never ended counts at its last byte too).
 */
static void
each_line(void (*fn)(long ev, const struct ev *e, const char *line,
    size_t n, void *arg), void *arg)
{
	struct pend { int32_t pid; char *b; size_t n, cap; long ev; } *pd = NULL;
	long npd = 0, i, j;
	uint64_t k;

	for (i = 0; i < nev; i++) {
		const struct ev *e = &evs[i];
		struct pend *p = NULL;

		if (e->r->type != PC_OUTPUT)
			continue;
		for (j = 0; j < npd && !p; j++)
			if (pd[j].pid == e->r->pid)
				p = &pd[j];
		if (!p) {
			pd = xrealloc(pd, (npd + 1) * sizeof *pd);
			p = &pd[npd++];
			memset(p, 0, sizeof *p);
			p->pid = e->r->pid;
		}
		for (k = 0; k < e->outlen; k++) {
			if (p->n == p->cap)
				p->b = xrealloc(p->b, p->cap = p->cap ? 2 * p->cap :
				    256);
			if (e->data[k] == '\n') {
				fn(i, e, p->b, p->n, arg);
				p->n = 0;
			} else {
				p->b[p->n++] = e->data[k];
			}
		}
		p->ev = i;
	}
	for (j = 0; j < npd; j++) {
		if (pd[j].n)
			fn(pd[j].ev, &evs[pd[j].ev], pd[j].b, pd[j].n, arg);
		free(pd[j].b);
	}
	free(pd);
}

static void
print_line(long ev, const struct ev *e, const char *line, size_t n, void *arg)
{
	long cut = arg ? *(long *)arg : -1;

	if (cut >= 0 && ev >= cut)
		return;
	printf("%ld\t%d\t%s\t%.*s\n", ev, e->r->pid, *e->tag ? e->tag : "-",
	    (int)n, line);
}

/* --- rebuilding ---------------------------------------------------- */

static uint64_t rng;

static uint64_t
rnd(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15u);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

static void
img_size(struct file *f, size_t n)
{
	if (n > f->cap) {
		size_t c = f->cap ? f->cap : 65536;

		while (c < n)
			c *= 2;
		f->b = xrealloc(f->b, c);
		f->cap = c;
	}
	if (n > f->len)
		memset(f->b + f->len, 0, n - f->len);
	f->len = n;
}

static void
img_write(struct file *f, uint64_t off, const unsigned char *p, uint64_t n)
{
	if (!n)
		return;
	f->exists = 1;
	if (off + n > f->len)
		img_size(f, off + n);
	memcpy(f->b + off, p, n);
}

static void
img_load(struct file *f, const char *dir)
{
	char path[4096];
	struct stat st;
	ssize_t n;
	size_t at = 0;
	int fd;

	f->len = 0;
	f->exists = 0;
	pjoin(path, sizeof path, dir, f->base);
	if ((fd = open(path, O_RDONLY)) < 0) {
		if (errno == ENOENT)
			return;
		die("cannot open %s:", path);
	}
	if (fstat(fd, &st) < 0)
		die("cannot stat %s:", path);
	img_size(f, st.st_size);
	while (at < f->len) {
		if ((n = read(fd, f->b + at, f->len - at)) <= 0)
			die("cannot read %s:", path);
		at += n;
	}
	close(fd);
	f->exists = 1;
}

static void
img_save(const struct file *f, const char *dir)
{
	char path[4096];
	size_t at = 0;
	ssize_t n;
	int fd;

	pjoin(path, sizeof path, dir, f->base);
	if (unlink(path) < 0 && errno != ENOENT)
		die("cannot remove %s:", path);
	if (!f->exists || f->skip)
		return;
	if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0)
		die("cannot create %s:", path);
	while (at < f->len) {
		if ((n = write(fd, f->b + at, f->len - at)) <= 0)
			die("cannot write %s:", path);
		at += n;
	}
	if (close(fd) < 0)
		die("cannot write %s:", path);
}

/* Applies the part of a write a torn cut keeps, at sector boundaries. */
static void
torn_write(struct file *f, const struct ev *e, long i)
{
	uint64_t off = (uint64_t)e->r->off, n = e->r->len, end = off + n;
	uint64_t half = (off + n / 2) / SECTOR * SECTOR, s, t;
	int how = (int)(rnd() % 5);
	static const char *const what[] = { "dropped", "kept", "first half",
	    "second half", "some sectors" };

	if (half < off)
		half = off;
	if (verbose)
		fprintf(stderr, "event %ld: %s %s off %" PRIu64 " len %" PRIu64
		    ": %s\n", i, tname[e->r->type], f->base, off, n, what[how]);
	switch (how) {
	case 0:
		break;
	case 1:
		img_write(f, off, e->data, n);
		break;
	case 2:
		img_write(f, off, e->data, half - off);
		break;
	case 3:
		img_write(f, half, e->data + (half - off), end - half);
		break;
	default:
		for (s = off; s < end; s = t) {
			t = (s / SECTOR + 1) * SECTOR;
			if (t > end)
				t = end;
			if (rnd() & 1)
				img_write(f, s, e->data + (s - off), t - s);
		}
	}
}

enum { DROPPED, KEPT, TORN };

static void
rebuild(const char *init, long cut, int mode, uint64_t seed)
{
	long i;
	int k;

	rng = seed ^ ((uint64_t)cut * 0xd1b54a32d192ed03u) ^ (uint64_t)mode;
	for (k = 0; k < nfiles; k++)
		img_load(&files[k], init);
	for (i = 0; i < cut; i++) {
		const struct ev *e = &evs[i];
		struct file *f;
		int durable;

		if (e->file < 0)
			continue;
		f = &files[e->file];
		durable = i < f->lastsync;
		switch (e->r->type) {
		case PC_OPEN:
			if ((e->r->off & O_CREAT) && !f->exists) {
				f->exists = 1;
				f->len = 0;
			}
			break;
		case PC_UNLINK:
			f->exists = 0;
			f->len = 0;
			break;
		case PC_MMAP:
			if (!f->skip)
				die("event %ld: a writable shared mapping of %s: "
				    "writes through it are not in the log", i,
				    f->path);
			break;
		case PC_WRITE:
			if (durable || mode == KEPT)
				img_write(f, e->r->off, e->data, e->r->len);
			else if (mode == TORN)
				torn_write(f, e, i);
			break;
		case PC_TRUNC:
			if (durable || mode == KEPT || (mode == TORN &&
			    (rnd() & 1))) {
				f->exists = 1;
				img_size(f, e->r->off);
			}
			break;
		}
	}
}

static void
cmd_build(const char *init, long cut, const char *modes,
    const char *out, uint64_t seed)
{
	static const char *const mname[] = { "dropped", "kept", "torn" };
	char dir[4096];
	const char *p;
	DIR *d;
	struct dirent *de;
	long i;
	int m, k;

	/* files only in INITDIR are copied through */
	if (!(d = opendir(init)))
		die("cannot open %s:", init);
	while ((de = readdir(d))) {
		struct stat st;

		pjoin(dir, sizeof dir, init, de->d_name);
		if (stat(dir, &st) == 0 && S_ISREG(st.st_mode) &&
		    file_by_base(de->d_name) < 0)
			add_file(NULL, de->d_name);
	}
	closedir(d);
	for (i = 0; i < cut && !nosync; i++) {
		int t = evs[i].r->type;

		if (t == PC_SYNCALL)
			for (k = 0; k < nfiles; k++)
				files[k].lastsync = i;
		else if (t == PC_SYNC)
			files[evs[i].file].lastsync = i;
	}
	if (mkdir(out, 0755) < 0 && errno != EEXIST)
		die("cannot create %s:", out);
	for (p = modes; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] != 0)) {
		size_t n = strcspn(p, ",");

		for (m = 0; m < 3; m++)
			if (n == strlen(mname[m]) && !strncmp(p, mname[m], n))
				break;
		if (m == 3)
			die("unknown mode in '%s': want dropped, kept or torn",
			    modes);
		pjoin(dir, sizeof dir, out, mname[m]);
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			die("cannot create %s:", dir);
		if (verbose)
			fprintf(stderr, "cut %ld, mode %s:\n", cut, mname[m]);
		rebuild(init, cut, m, seed);
		for (k = 0; k < nfiles; k++)
			img_save(&files[k], dir);
	}
}

int
main(int argc, char *argv[])
{
	const char *kinds = "before-sync,end", *cmd;
	uint64_t seed = 1;
	char *end;
	int c;

	if (argc < 2)
		usage();
	cmd = argv[1];
	argc--;
	argv++;
	while ((c = getopt(argc, argv, "k:ns:vx:")) != -1) {
		switch (c) {
		case 'k': kinds = optarg; break;
		case 'n': nosync = 1; break;
		case 's':
			errno = 0;
			seed = strtoull(optarg, &end, 0);
			if (errno || *end || end == optarg)
				die("invalid seed '%s'", optarg);
			break;
		case 'v': verbose = 1; break;
		case 'x':
			if (!user_suffix)
				nsuffix = 0;
			user_suffix = 1;
			if (nsuffix == 16)
				die("too many -x");
			suffix[nsuffix++] = optarg;
			break;
		default: usage();
		}
	}
	argv += optind;
	argc -= optind;
	if (!strcmp(cmd, "build") && argc == 5) {
		load(argv[0]);
		cmd_build(argv[1], cut_arg(argv[2]), argv[3], argv[4], seed);
	} else if (!strcmp(cmd, "printed") && argc == 2) {
		long cut;

		load(argv[0]);
		cut = cut_arg(argv[1]);
		each_line(print_line, &cut);
	} else if (argc == 1 && (!strcmp(cmd, "dump") ||
	    !strcmp(cmd, "stats") || !strcmp(cmd, "cuts") ||
	    !strcmp(cmd, "outputs"))) {
		load(argv[0]);
		if (!strcmp(cmd, "dump"))
			cmd_dump();
		else if (!strcmp(cmd, "stats"))
			cmd_stats();
		else if (!strcmp(cmd, "cuts"))
			cmd_cuts(kinds);
		else
			each_line(print_line, NULL);
	} else {
		usage();
	}
	if (fflush(stdout) == EOF || ferror(stdout))
		die("cannot write output:");
	return 0;
}
