/*
 * outstamp.c: the reading end of a consumer's output.  Reads lines from
 * stdin; the last tab-separated field of each (the body of an mq-recv
 * line, RECEIPT<TAB>BODY, or the whole line with -A) is a send time in ns
 * since the epoch, as ticker.c writes it.  Appends "now - sent" in
 * microseconds, one a line, to OUT, now being CLOCK_REALTIME read when
 * the read(2) that brought the line returned: the time from the
 * producer's write to the consumer's output.  Stops after COUNT lines or
 * at end of input.
 *
 * usage: outstamp COUNT OUT < lines
 *
 * Built by bench/run.sh; not part of mq.  Exits 1 on error or on a line
 * that holds no time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int
main(int argc, char *argv[])
{
	struct timespec now;
	char buf[65536], *p, *nl, *f, *end;
	long long sent, t;
	long count, got = 0;
	size_t len = 0;
	ssize_t n;
	FILE *out;

	if (argc != 3 || (count = atol(argv[1])) <= 0) {
		fprintf(stderr, "usage: outstamp COUNT OUT < lines\n");
		return 1;
	}
	if (!(out = fopen(argv[2], "a"))) {
		perror(argv[2]);
		return 1;
	}
	while (got < count && (n = read(0, buf + len, sizeof buf - 1 - len)) >
	    0) {
		clock_gettime(CLOCK_REALTIME, &now);
		t = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
		len += n;
		buf[len] = '\0';
		for (p = buf; got < count && (nl = strchr(p, '\n')); p = nl + 1) {
			*nl = '\0';
			f = strrchr(p, '\t');
			f = f ? f + 1 : p;
			sent = strtoll(f, &end, 10);
			if (end == f || *end || sent <= 0) {
				fprintf(stderr, "outstamp: no time in '%s'\n", p);
				return 1;
			}
			fprintf(out, "%lld\n", (t - sent) / 1000);
			got++;
		}
		len -= p - buf;
		memmove(buf, p, len);
		if (len == sizeof buf - 1) {
			fprintf(stderr, "outstamp: line too long\n");
			return 1;
		}
		fflush(out);
	}
	return fclose(out) == 0 ? 0 : 1;
}
