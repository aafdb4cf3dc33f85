/*
 * spawnlat.c: the cost of starting a handler, measured alone.  COUNT
 * times, after a random MIN_MS..MAX_MS sleep (the spacing of ticker.c),
 * reads CLOCK_REALTIME, writes it in ns as the body on a pipe, and starts
 * COMMAND with that pipe as its stdin, the way mq-recv's exec mode does
 * (posix_spawn, a process group of its own, the signals it resets),
 * then waits for it.  With bench/stamp.c as COMMAND, stamp's OUT gets
 * the time from the spawn to the handler's first instruction.
 *
 * usage: spawnlat COUNT MIN_MS MAX_MS COMMAND [ARG ...]
 *
 * Built by bench/run.sh; not part of mq.  Exits 1 on any error or when
 * COMMAND fails.
 */
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

int
main(int argc, char *argv[])
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	struct timespec ts, d;
	sigset_t def;
	long count, i, lo, hi, us;
	char body[32];
	int fd[2], rc, status, len;
	pid_t pid;

	if (argc < 5 || (count = atol(argv[1])) <= 0 ||
	    (lo = atol(argv[2])) < 0 || (hi = atol(argv[3])) < lo) {
		fprintf(stderr, "usage: spawnlat COUNT MIN_MS MAX_MS COMMAND "
		    "[ARG ...]\n");
		return 1;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	srandom((unsigned)(ts.tv_nsec ^ getpid()));
	/* the dispositions common/exec.c resets */
	sigemptyset(&def);
	sigaddset(&def, SIGTERM);
	sigaddset(&def, SIGINT);
	sigaddset(&def, SIGCHLD);
	sigaddset(&def, SIGPIPE);
	for (i = 0; i < count; i++) {
		us = lo * 1000 + random() % ((hi - lo) * 1000 + 1);
		d.tv_sec = us / 1000000;
		d.tv_nsec = us % 1000000 * 1000;
		while (nanosleep(&d, &d) != 0)
			;
		if (pipe(fd) < 0) {
			perror("spawnlat: pipe");
			return 1;
		}
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_adddup2(&fa, fd[0], 0);
		posix_spawn_file_actions_addclose(&fa, fd[1]);
		posix_spawnattr_init(&at);
		posix_spawnattr_setpgroup(&at, 0);
		posix_spawnattr_setsigdefault(&at, &def);
		posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP |
		    POSIX_SPAWN_SETSIGDEF);
		clock_gettime(CLOCK_REALTIME, &ts);
		len = snprintf(body, sizeof body, "%lld", (long long)ts.tv_sec *
		    1000000000LL + ts.tv_nsec);
		if (write(fd[1], body, len) != len) {
			perror("spawnlat: write");
			return 1;
		}
		rc = posix_spawn(&pid, argv[4], &fa, &at, argv + 4, environ);
		close(fd[0]);
		close(fd[1]);
		posix_spawn_file_actions_destroy(&fa);
		posix_spawnattr_destroy(&at);
		if (rc != 0) {
			fprintf(stderr, "spawnlat: cannot run %s: %s\n",
			    argv[4], strerror(rc));
			return 1;
		}
		if (waitpid(pid, &status, 0) < 0) {
			perror("spawnlat: waitpid");
			return 1;
		}
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "spawnlat: %s failed\n", argv[4]);
			return 1;
		}
	}
	return 0;
}
