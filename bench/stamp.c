/*
 * stamp.c: the handler of the latency benchmark.  Its first action is to
 * read CLOCK_REALTIME; then it reads the message body from stdin (a send
 * time in ns since the epoch, as written by ticker.c) and appends
 * "now - body" in microseconds as one line to OUT, in one write with
 * O_APPEND, so handlers running at once do not mix their lines.
 *
 * usage: stamp OUT < body
 *
 * Built by bench/run.sh; not part of mq.  Exits 1 on error, so the
 * delivery is retried and the benchmark sees a missing line.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int
main(int argc, char *argv[])
{
	struct timespec now;
	char body[64], line[64];
	long long sent, us;
	ssize_t n;
	int fd, len;

	clock_gettime(CLOCK_REALTIME, &now);
	if (argc != 2)
		return 1;
	if ((n = read(0, body, sizeof body - 1)) <= 0)
		return 1;
	body[n] = '\0';
	sent = atoll(body);
	if (sent <= 0)
		return 1;
	us = ((long long)now.tv_sec * 1000000000LL + now.tv_nsec - sent) / 1000;
	len = snprintf(line, sizeof line, "%lld\n", us);
	if ((fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT, 0644)) < 0 ||
	    write(fd, line, len) != len || close(fd) < 0)
		return 1;
	return 0;
}
