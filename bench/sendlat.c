/*
 * sendlat.c: a producer that measures what it sees.  Every INTERVAL_MS it
 * runs COMMAND (normally mq-send) once, with the message number as its last
 * argument, waits for it, and writes one line per run to OUT:
 *
 *	START_NS END_NS STATUS
 *
 * START_NS and END_NS are CLOCK_REALTIME ns since the epoch taken just
 * before the fork and just after waitpid returns, so END - START is the
 * latency a producer that runs one mq-send per message sees (fork and exec
 * included).  STATUS is the exit status (128+N for signal N).  Sends are
 * not pipelined: when one takes longer than the interval, the next starts
 * right after it, and the schedule restarts from there (no burst to catch
 * up).  Stops after the current send on SIGTERM or SIGINT.
 *
 * usage: sendlat INTERVAL_MS OUT COMMAND [ARG ...]
 *
 * Built by bench/run.sh; not part of mq.  Exits 1 on a setup error.
 */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static volatile sig_atomic_t stop;

static void
on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static long long
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int
main(int argc, char *argv[])
{
	struct sigaction sa;
	struct timespec next;
	char **args, num[32];
	long long interval, t0, t1, seq = 0;
	FILE *out;
	pid_t pid;
	int i, status, rc;

	if (argc < 4 || (interval = atoll(argv[1])) <= 0) {
		fprintf(stderr, "usage: sendlat INTERVAL_MS OUT COMMAND "
		    "[ARG ...]\n");
		return 1;
	}
	if (!(out = fopen(argv[2], "w"))) {
		fprintf(stderr, "sendlat: %s: %s\n", argv[2], strerror(errno));
		return 1;
	}
	if (!(args = calloc(argc - 1, sizeof *args)))
		return 1;
	for (i = 3; i < argc; i++)
		args[i - 3] = argv[i];
	args[argc - 3] = num;
	args[argc - 2] = NULL;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	clock_gettime(CLOCK_MONOTONIC, &next);
	while (!stop) {
		snprintf(num, sizeof num, "%lld", ++seq);
		t0 = now_ns();
		if ((rc = posix_spawn(&pid, args[0], NULL, NULL, args,
		    environ)) != 0) {
			fprintf(stderr, "sendlat: cannot run %s: %s\n", args[0],
			    strerror(rc));
			return 1;
		}
		while (waitpid(pid, &status, 0) < 0)
			if (errno != EINTR) {
				perror("sendlat: waitpid");
				return 1;
			}
		t1 = now_ns();
		fprintf(out, "%lld %lld %d\n", t0, t1, WIFEXITED(status) ?
		    WEXITSTATUS(status) : 128 + WTERMSIG(status));
		fflush(out);
		/* the next tick, or now if this send overran it */
		next.tv_nsec += interval * 1000000;
		while (next.tv_nsec >= 1000000000) {
			next.tv_nsec -= 1000000000;
			next.tv_sec++;
		}
		{
			struct timespec m;

			clock_gettime(CLOCK_MONOTONIC, &m);
			if (m.tv_sec > next.tv_sec || (m.tv_sec == next.tv_sec &&
			    m.tv_nsec > next.tv_nsec))
				next = m;
		}
		while (!stop && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME,
		    &next, NULL) == EINTR)
			;
	}
	return fclose(out) == 0 ? 0 : 1;
}
