/*
 * err.c: errors, exit statuses and memory.
 *
 * Every error is one line on stderr, "prog: what went wrong: why", and one
 * exit status from the table in mq.h.  A message ending in ':' gets
 * strerror(errno) appended, as sbase's eprintf does.  Running out of memory
 * is reported as an internal error (70).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mq.h"

const char *mq_prog = "mq";

/*
 * Every program starts here.  A write to a closed pipe or past a file
 * size limit then fails with EPIPE or EFBIG instead of killing the
 * program, so it can give back what it could not write and say so.
 */
void
mq_setprog(const char *argv0)
{
	const char *p;

	signal(SIGPIPE, SIG_IGN);
	signal(SIGXFSZ, SIG_IGN);
	if (argv0 && *argv0) {
		p = strrchr(argv0, '/');
		mq_prog = p ? p + 1 : argv0;
	}
}

void
mq_vwarn(const char *fmt, va_list ap)
{
	int saved = errno;
	size_t n = strlen(fmt);

	fflush(stdout);
	fprintf(stderr, "%s: ", mq_prog);
	vfprintf(stderr, fmt, ap);
	if (n > 0 && fmt[n - 1] == ':')
		fprintf(stderr, " %s", strerror(saved));
	fputc('\n', stderr);
}

void
mq_warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	mq_vwarn(fmt, ap);
	va_end(ap);
}

void
mq_die(int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	mq_vwarn(fmt, ap);
	va_end(ap);
	exit(status);
}

void *
mq_alloc(size_t n)
{
	void *p = calloc(1, n ? n : 1);

	if (!p)
		mq_die(MQ_EX_SOFTWARE, "out of memory:");
	return p;
}

void *
mq_array(void *p, size_t n, size_t size)
{
	void *q = reallocarray(p, n ? n : 1, size);

	if (!q)
		mq_die(MQ_EX_SOFTWARE, "out of memory:");
	return q;
}

char *
mq_memdup(const void *p, size_t n)
{
	char *s = mq_alloc(n + 1);

	if (n)
		memcpy(s, p, n);
	s[n] = '\0';
	return s;
}

char *
mq_strdup(const char *s)
{
	return mq_memdup(s, strlen(s));
}

/*
 * Flushes and closes stdout, and turns a write error (a closed pipe, a
 * full disk, a file size limit) into 74: quietly for a closed pipe, as a
 * reader like head(1) expects.  Programs return this from main.
 */
/* A pipe on stdout with no reader left (errno may be long gone). */
static int
reader_gone(void)
{
	struct pollfd p = { .fd = STDOUT_FILENO, .events = 0 };

	return poll(&p, 1, 0) == 1 && (p.revents & POLLERR);
}

int
mq_finish(void)
{
	int bad = fflush(stdout) == EOF || ferror(stdout);
	int gone = bad && (errno == EPIPE || reader_gone());

	bad |= fclose(stdout) == EOF;
	if (!bad)
		return 0;
	/* errno is the failed write's only while nothing came between
	   (closing a PostgreSQL connection clears it): no "Success" */
	if (!gone && errno != EPIPE)
		mq_warn(errno ? "write error:" : "write error");
	return MQ_EX_IOERR;
}

/*
 * Writes all of buf to fd, a piece at a time as the descriptor takes it;
 * returns how much was written (less than len after an error, in errno).
 */
size_t
mq_write(int fd, const void *buf, size_t len)
{
	size_t done = 0;
	ssize_t w;

	while (done < len) {
		if ((w = write(fd, (const char *)buf + done, len - done)) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		done += (size_t)w;
	}
	return done;
}
