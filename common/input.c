/*
 * input.c: reading records (lines, NUL-terminated, or the whole input)
 * from a descriptor, with a deadline, so a batching writer can commit what
 * it has when the input goes quiet instead of when the next record comes.
 *
 * The buffer grows to hold one record of up to `max` bytes; a longer record
 * is reported (MQ_IN_LONG) without being read into memory whole.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mq.h"

#define CHUNK	65536

void
mq_input_init(struct mq_input *in, int fd, int delim, size_t max)
{
	memset(in, 0, sizeof *in);
	in->fd = fd;
	in->delim = delim;
	in->max = max;
}

void
mq_input_free(struct mq_input *in)
{
	free(in->buf);
	in->buf = NULL;
}

/* Reads more; returns bytes read, 0 at EOF. */
static ssize_t
fill(struct mq_input *in)
{
	ssize_t r;

	if (in->start > 0) {
		memmove(in->buf, in->buf + in->start, in->len - in->start);
		in->len -= in->start;
		in->start = 0;
	}
	if (in->cap - in->len < CHUNK) {
		in->cap = in->len + 2 * CHUNK;
		in->buf = mq_array(in->buf, in->cap, 1);
	}
	do
		r = read(in->fd, in->buf + in->len, in->cap - in->len);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		mq_die(MQ_EX_IOERR, "cannot read input:");
	in->len += r;
	return r;
}

/*
 * Next record, without its terminator: MQ_IN_REC with *p, *n valid until
 * the next call; MQ_IN_EOF; MQ_IN_TIMEOUT when no complete record is
 * buffered and none arrived by `until` (ms since the epoch; -1: no limit);
 * MQ_IN_LONG when the record exceeds max (it is skipped).
 */
int
mq_input_next(struct mq_input *in, int64_t until, char **p, size_t *n)
{
	char *rec, *end;
	size_t avail;
	int64_t now;
	struct pollfd pfd;
	int rc;

	for (;;) {
		rec = in->buf ? in->buf + in->start : NULL;	/* none read yet */
		avail = in->len - in->start;
		if (in->skipping) {
			end = in->delim >= 0 && avail ?
			    memchr(rec, in->delim, avail) : NULL;
			if (end) {
				in->start += end - rec + 1;
				in->skipping = 0;
				continue;
			}
			in->start = in->len;
			if (in->eof)
				return MQ_IN_EOF;
		} else if (in->delim >= 0 && avail &&
		    (end = memchr(rec, in->delim, avail))) {
			*p = rec;
			*n = end - rec;
			in->start += *n + 1;
			if (*n > in->max)
				return MQ_IN_LONG;
			return MQ_IN_REC;
		} else if (avail > in->max) {
			/* longer than allowed: drop it up to its end */
			in->skipping = 1;
			in->start = in->len;
			return MQ_IN_LONG;
		} else if (in->eof) {
			if (avail == 0)
				return MQ_IN_EOF;
			/* last record without a terminator */
			*p = rec;
			*n = avail;
			in->start = in->len;
			return MQ_IN_REC;
		}
		if (until >= 0) {
			/* a deadline already past still takes what is ready */
			now = mq_now();
			pfd.fd = in->fd;
			pfd.events = POLLIN;
			do
				rc = poll(&pfd, 1, now >= until ? 0 :
				    (int)(until - now));
			while (rc < 0 && errno == EINTR);
			if (rc == 0)
				return MQ_IN_TIMEOUT;
		}
		if (fill(in) == 0)
			in->eof = 1;
	}
}

/*
 * A record as mq-send stores it: a copy, with C escapes decoded when
 * unescape (refusing a raw NUL or a malformed escape: 65).  *n: its length.
 */
char *
mq_record_decode(const char *p, size_t *n, int unescape)
{
	char *s = mq_memdup(p, *n);

	if (unescape) {
		if (memchr(s, '\0', *n))	/* escaped text has none */
			mq_die(MQ_EX_DATAERR, "message refused: a raw NUL byte "
			    "in escaped input (write it \\0)");
		if ((*n = mq_unescape(s)) == (size_t)-1)
			mq_die(MQ_EX_DATAERR, "message refused: invalid escape "
			    "sequence");
	}
	return s;
}

/* Field k (from 1) of a record of tab-separated fields; NULL: none, or
   empty. */
char *
mq_record_field(const char *p, size_t n, int k)
{
	const char *e = p + n, *f;
	int i;

	for (i = 1; i < k && p < e; i++)
		p = (f = memchr(p, '\t', e - p)) ? f + 1 : e;
	f = p < e ? memchr(p, '\t', e - p) : NULL;
	if (p >= e || (f ? f : e) == p)
		return NULL;
	return mq_memdup(p, (f ? f : e) - p);
}
