/*
 * fuzz_input: mq_input_next (input.c), how mq-send and mq-ack split their
 * standard input into records (lines, -0 NUL-terminated, or --whole).
 *
 * Input: a mode byte (delimiter, deadline, limit), the size limit, four
 * packet sizes, then the bytes to read.  They reach mq_input_next through
 * a SOCK_SEQPACKET socket, one read per packet, so records arrive split
 * across reads the way a pipe can deliver them.
 *
 * - The records returned are exactly the input split at the delimiter
 *   (the last one may lack it; --whole: the input is one record, none if
 *   empty), each one over the limit reported once as MQ_IN_LONG instead;
 *   then MQ_IN_EOF, again on every later call.
 * - With a deadline already past but all input ready, no MQ_IN_TIMEOUT.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mq.h"
#include "fuzzutil.h"

#define MAXDATA	60000		/* what the socket holds unread */
#define MAXPKT	200

static const char *const what[] = { "REC", "EOF", "TIMEOUT", "LONG" };

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int delims[] = { '\n', '\0', -1, '\n' };
	const uint8_t *p = data, *rec, *end, *e;
	size_t n = size, max, i, len, sz[4], off, k;
	struct mq_input in;
	int mode, delim, fd[2], rc, want, npkt;
	int64_t until;
	char *got;

	if (n < 6)
		return 0;
	mode = *p++;
	max = mode & 8 ? 1 << 20 : *p;
	p++;
	for (i = 0; i < 4; i++)
		sz[i] = 1 + *p++ % 64;
	n -= 6;
	if (n > MAXDATA)
		n = MAXDATA;
	delim = delims[mode & 3];
	until = mode & 4 ? 0 : -1;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fd) < 0)
		abort();
	for (off = 0, npkt = 0; off < n; off += k, npkt++) {
		k = npkt == MAXPKT - 1 ? n - off : sz[npkt % 4];
		if (k > n - off)
			k = n - off;
		if (write(fd[1], p + off, k) != (ssize_t)k)
			abort();
	}
	close(fd[1]);

	mq_input_init(&in, fd[0], delim, max);
	rec = p;
	e = p + n;
	for (;;) {
		/* the next record, as the input splits */
		if (rec >= e) {
			want = MQ_IN_EOF;
			end = e;
		} else {
			end = delim >= 0 ? memchr(rec, delim, e - rec) : NULL;
			if (!end)
				end = e;
			want = (size_t)(end - rec) > max ? MQ_IN_LONG : MQ_IN_REC;
		}
		got = NULL;
		len = 0;
		rc = mq_input_next(&in, until, &got, &len);
		if (rc != want || (rc == MQ_IN_REC && (len != (size_t)(end - rec) ||
		    memcmp(got, rec, len)))) {
			fz_show("record", rec, end - rec);
			if (rc == MQ_IN_REC)
				fz_show("returned", got, len);
			fz_fail("at byte %zu of %zu (delim %d, max %zu): %s, "
			    "expected %s", (size_t)(rec - p), n, delim, max,
			    rc >= 0 && rc < 4 ? what[rc] : "?", what[want]);
		}
		if (rc == MQ_IN_EOF)
			break;
		rec = end < e ? end + 1 : e;
	}
	rc = mq_input_next(&in, until, &got, &len);
	FZ_CHECK(rc == MQ_IN_EOF, "after EOF: %d", rc);
	mq_input_free(&in);
	close(fd[0]);
	return 0;
}
