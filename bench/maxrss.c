/*
 * maxrss.c: runs COMMAND with this process's stdin, stdout and stderr,
 * waits for it with wait4(2), and writes to OUT
 *
 *	MAXRSS_KB WALL_US
 *
 * its peak resident set size (ru_maxrss, kilobytes) and its wall time
 * (CLOCK_MONOTONIC around spawn and wait).  Needs nothing installed:
 * GNU time may be missing on a fresh machine.
 *
 * usage: maxrss OUT COMMAND [ARG ...]
 *
 * Built by bench/run.sh; not part of mq.  Exits with COMMAND's status
 * (128+N for signal N), or 1 if it cannot run it or write OUT.
 */
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

static long long
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int
main(int argc, char *argv[])
{
	struct rusage ru;
	long long t0;
	FILE *out;
	pid_t pid;
	int rc, status;

	if (argc < 3) {
		fprintf(stderr, "usage: maxrss OUT COMMAND [ARG ...]\n");
		return 1;
	}
	t0 = now_us();
	if ((rc = posix_spawnp(&pid, argv[2], NULL, NULL, argv + 2,
	    environ)) != 0) {
		fprintf(stderr, "maxrss: cannot run %s: %s\n", argv[2],
		    strerror(rc));
		return 1;
	}
	if (wait4(pid, &status, 0, &ru) < 0) {
		perror("maxrss: wait4");
		return 1;
	}
	t0 = now_us() - t0;
	if (!(out = fopen(argv[1], "w")) ||
	    fprintf(out, "%ld %lld\n", ru.ru_maxrss, t0) < 0 ||
	    fclose(out) != 0) {
		perror(argv[1]);
		return 1;
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
