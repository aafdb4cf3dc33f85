/*
 * besttime.c: runs COMMAND RUNS times, one after the other, its stdout to
 * /dev/null, and prints in microseconds the best wall time (CLOCK_MONOTONIC
 * around fork and wait), the best CPU time (user + system, from wait4's
 * rusage: less disturbed by other load than the wall time) and the wall
 * time of each run:
 *
 *	BEST_WALL_US BEST_CPU_US RUN1_US RUN2_US ...
 *
 * usage: besttime RUNS COMMAND [ARG ...]
 *
 * Built by bench/run.sh; not part of mq.  Exits 1 if a run fails (exit
 * status other than 0), naming it on stderr.
 */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
	posix_spawn_file_actions_t fa;
	struct rusage ru;
	long long *us, best = -1, cpu, best_cpu = -1, t0;
	int runs, i, rc, status;
	pid_t pid;

	if (argc < 3 || (runs = atoi(argv[1])) <= 0) {
		fprintf(stderr, "usage: besttime RUNS COMMAND [ARG ...]\n");
		return 1;
	}
	if (!(us = calloc(runs, sizeof *us)))
		return 1;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	for (i = 0; i < runs; i++) {
		t0 = now_us();
		if ((rc = posix_spawnp(&pid, argv[2], &fa, NULL, argv + 2,
		    environ)) != 0) {
			fprintf(stderr, "besttime: cannot run %s: %s\n", argv[2],
			    strerror(rc));
			return 1;
		}
		if (wait4(pid, &status, 0, &ru) < 0) {
			perror("besttime: wait4");
			return 1;
		}
		us[i] = now_us() - t0;
		cpu = (long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) *
		    1000000 + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
		if (best_cpu < 0 || cpu < best_cpu)
			best_cpu = cpu;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "besttime: %s failed (status %d)\n",
			    argv[2], WIFEXITED(status) ? WEXITSTATUS(status) :
			    128 + WTERMSIG(status));
			return 1;
		}
		if (best < 0 || us[i] < best)
			best = us[i];
	}
	printf("%lld %lld", best, best_cpu);
	for (i = 0; i < runs; i++)
		printf(" %lld", us[i]);
	printf("\n");
	return fflush(stdout) == 0 ? 0 : 1;
}
