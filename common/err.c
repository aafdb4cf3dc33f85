/*
 * err.c: errors, exit statuses and memory.
 *
 * Every error is one line on stderr, "prog: what went wrong: why", and one
 * exit status from the table in mq.h.  A message ending in ':' gets
 * strerror(errno) appended, as sbase's eprintf does.  Running out of memory
 * is reported as an internal error (70).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "mq.h"

const char *mq_prog = "mq";

void
mq_setprog(const char *argv0)
{
	const char *p;

	if (argv0 && *argv0) {
		p = strrchr(argv0, '/');
		mq_prog = p ? p + 1 : argv0;
	}
}

static void
vwarn(const char *fmt, va_list ap)
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
	vwarn(fmt, ap);
	va_end(ap);
}

void
mq_die(int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vwarn(fmt, ap);
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
 * Flush stdout and turn a write error (closed pipe, full disk) into a
 * status.  Programs return this from main.
 */
int
mq_finish(void)
{
	if (fflush(stdout) == EOF || ferror(stdout)) {
		if (errno == EPIPE)
			return MQ_EX_IOERR;
		mq_warn("write error:");
		return MQ_EX_IOERR;
	}
	return 0;
}
