/*
 * prod.c: K long-lived producers, each a copy of COMMAND (normally
 * `mq-send TOPIC`) fed on a pipe: write one 100-byte line, wait for the
 * offset it prints, repeat.  One process drives them all with poll(2), so
 * the K producers run concurrently and each has one message in flight.
 *
 * Each producer first sends one warm-up message (not counted), so opening
 * the database is not timed; then the clock starts and each sends N
 * messages.  Prints on stdout
 *
 *	ELAPSED_US MESSAGES
 *
 * from the clock's start to the last offset read, and with OUT (not "-")
 * writes the latency of each message, line written to offset read, in
 * microseconds, one a line.  Checks that every offset read is a number
 * and none repeats, and that every producer exits 0 once its stdin is
 * closed.
 *
 * usage: prod K N OUT COMMAND [ARG ...]
 *
 * Built by bench/run.sh; not part of mq.  Exits 1 on any error.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LINE_LEN	100

extern char **environ;

struct producer {
	pid_t		pid;
	int		in, out;	/* its stdin (we write), stdout (we read) */
	long		sent, done;	/* messages written, offsets read */
	long long	t0;		/* when the message in flight was written */
	char		buf[64];
	size_t		len;
};

static void
die(const char *what)
{
	fprintf(stderr, "prod: %s: %s\n", what, strerror(errno));
	exit(1);
}

static long long
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void
start(struct producer *p, char **argv)
{
	posix_spawn_file_actions_t fa;
	int in[2], out[2], rc;

	if (pipe(in) < 0 || pipe(out) < 0)
		die("pipe");
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	posix_spawn_file_actions_addclose(&fa, in[1]);
	posix_spawn_file_actions_addclose(&fa, out[0]);
	if ((rc = posix_spawn(&p->pid, argv[0], &fa, NULL, argv,
	    environ)) != 0) {
		errno = rc;
		die(argv[0]);
	}
	posix_spawn_file_actions_destroy(&fa);
	close(in[0]);
	close(out[1]);
	p->in = in[1];
	p->out = out[0];
}

/* Writes message number seq of producer k: 90 letters and 10 digits. */
static void
send_line(struct producer *p, int k, long seq)
{
	char line[LINE_LEN + 2];

	memset(line, 'a' + k % 26, LINE_LEN - 10);
	snprintf(line + LINE_LEN - 10, 12, "%010lu\n",
	    (unsigned long)seq % 10000000000UL);
	p->t0 = now_us();
	if (write(p->in, line, LINE_LEN + 1) != LINE_LEN + 1)
		die("write to a producer");
	p->sent++;
}

static int
cmp(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return x < y ? -1 : x > y;
}

/*
 * Reads what producer i printed; returns its offset once it has printed
 * a whole line (one message in flight: one line at a time), else 0.
 */
static long long
read_offset(struct producer *p, int i)
{
	long long off;
	char *nl, *end;
	ssize_t r;

	r = read(p->out, p->buf + p->len, sizeof p->buf - 1 - p->len);
	if (r < 0 && errno == EINTR)
		return 0;
	if (r <= 0) {
		fprintf(stderr, "prod: producer %d ended after %ld offsets\n",
		    i, p->done);
		exit(1);
	}
	p->len += r;
	p->buf[p->len] = '\0';
	if (!(nl = strchr(p->buf, '\n')))
		return 0;
	*nl = '\0';
	off = strtoll(p->buf, &end, 10);
	if (end == p->buf || *end || off <= 0 || nl + 1 != p->buf + p->len) {
		fprintf(stderr, "prod: producer %d printed '%s', not one "
		    "offset\n", i, p->buf);
		exit(1);
	}
	p->len = 0;
	p->done++;
	return off;
}

int
main(int argc, char *argv[])
{
	struct producer *p;
	struct pollfd *pfd;
	long long *offs, *lat = NULL, t_start, noff = 0, nlat = 0, off, j;
	long n;
	int k, i, live, status, failed = 0;
	FILE *out = NULL;

	if (argc < 5 || (k = atoi(argv[1])) <= 0 || (n = atol(argv[2])) <= 0) {
		fprintf(stderr, "usage: prod K N OUT COMMAND [ARG ...]\n");
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	p = calloc(k, sizeof *p);
	pfd = calloc(k, sizeof *pfd);
	offs = calloc((size_t)k * (n + 1), sizeof *offs);
	if (!p || !pfd || !offs)
		die("calloc");
	if (strcmp(argv[3], "-") && (!(lat = calloc((size_t)k * n,
	    sizeof *lat)) || !(out = fopen(argv[3], "w"))))
		die(argv[3]);

	/* warm-up: every producer has opened the database */
	for (i = 0; i < k; i++) {
		start(&p[i], argv + 4);
		send_line(&p[i], i, 0);
	}
	for (i = 0; i < k; i++) {
		while (!(off = read_offset(&p[i], i)))
			;
		offs[noff++] = off;
	}

	t_start = now_us();
	for (i = 0; i < k; i++)
		send_line(&p[i], i, 1);
	for (live = k; live > 0; ) {
		for (i = 0; i < k; i++) {
			pfd[i].fd = p[i].done <= n ? p[i].out : -1;
			pfd[i].events = POLLIN;
		}
		if (poll(pfd, k, -1) < 0) {
			if (errno == EINTR)
				continue;
			die("poll");
		}
		for (i = 0; i < k; i++) {
			if (pfd[i].fd < 0 || !pfd[i].revents)
				continue;
			if (!(off = read_offset(&p[i], i)))
				continue;
			if (lat)
				lat[nlat++] = now_us() - p[i].t0;
			offs[noff++] = off;
			if (p[i].done <= n) {
				send_line(&p[i], i, p[i].done);
			} else {
				close(p[i].in);
				live--;
			}
		}
	}
	t_start = now_us() - t_start;

	for (i = 0; i < k; i++) {
		while (waitpid(p[i].pid, &status, 0) < 0)
			if (errno != EINTR)
				die("waitpid");
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed++;
		close(p[i].out);
	}
	if (failed) {
		fprintf(stderr, "prod: %d producers failed\n", failed);
		return 1;
	}
	if (out) {
		for (j = 0; j < nlat; j++)
			fprintf(out, "%lld\n", lat[j]);
		if (fclose(out) != 0)
			die(argv[3]);
	}
	qsort(offs, noff, sizeof *offs, cmp);
	for (j = 1; j < noff; j++)
		if (offs[j] == offs[j - 1]) {
			fprintf(stderr, "prod: offset %lld printed twice\n",
			    offs[j]);
			return 1;
		}
	printf("%lld %lld\n", t_start, (long long)k * n);
	return fflush(stdout) == 0 ? 0 : 1;
}
