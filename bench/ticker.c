/*
 * ticker.c: a producer's clock.  Writes COUNT lines to stdout, each the
 * CLOCK_REALTIME time in ns since the epoch, taken right before the line
 * is written and flushed; sleeps a random MIN_MS..MAX_MS (uniform, in
 * microseconds) before each line.  Piped into one long-running mq-send,
 * each line becomes a message that carries its own send time.
 *
 * usage: ticker COUNT MIN_MS MAX_MS
 *
 * Built by bench/run.sh; not part of mq.  Exits 1 on error (a closed
 * pipe included).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int
main(int argc, char *argv[])
{
	struct timespec ts, d;
	long count, i, lo, hi, us;

	if (argc != 4 || (count = atol(argv[1])) <= 0 ||
	    (lo = atol(argv[2])) < 0 || (hi = atol(argv[3])) < lo) {
		fprintf(stderr, "usage: ticker COUNT MIN_MS MAX_MS\n");
		return 1;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	srandom((unsigned)(ts.tv_nsec ^ getpid()));
	for (i = 0; i < count; i++) {
		us = lo * 1000 + random() % ((hi - lo) * 1000 + 1);
		d.tv_sec = us / 1000000;
		d.tv_nsec = us % 1000000 * 1000;
		while (nanosleep(&d, &d) != 0)
			;
		clock_gettime(CLOCK_REALTIME, &ts);
		if (printf("%lld\n", (long long)ts.tv_sec * 1000000000LL +
		    ts.tv_nsec) < 0 || fflush(stdout) == EOF) {
			perror("ticker: write");
			return 1;
		}
	}
	return 0;
}
