/*
 * host.c: who and where this process is, and whether another process of
 * this host still runs.  A consumer is known by host name, boot id, pid
 * and the pid's start time, so neither a reboot nor a reused pid makes a
 * dead consumer look alive.  And how its processes wake each other: a
 * futex in a file they all map (atomic.h).
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "atomic.h"
#include "mq.h"

const char *
mq_hostname(void)
{
	static char host[256];

	if (!host[0] && (gethostname(host, sizeof host - 1) < 0 || !host[0]))
		strcpy(host, "localhost");
	return host;
}

/* This boot's id, read once: an idle follower asks every second. */
void
mq_boot_id(char *buf, size_t len)
{
	static char id[64];
	static int read;
	FILE *f;

	if (!read && (f = fopen("/proc/sys/kernel/random/boot_id", "re"))) {
		if (fgets(id, sizeof id, f))
			id[strcspn(id, "\n")] = '\0';
		fclose(f);
	}
	read = 1;
	snprintf(buf, len, "%s", id);
}

/*
 * Fields of /proc/PID/stat: the state letter, the parent (when ppid is
 * not NULL), the process group and the start time in clock ticks since
 * boot.  Returns -1 for no such process.
 */
static int
proc_stat(int pid, char *state, int64_t *ppid, int64_t *pgrp, int64_t *start)
{
	char path[64], buf[1024], *p;
	size_t n;
	FILE *f;
	int i;

	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	if (!(f = fopen(path, "re")))
		return -1;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* field 2 is "(comm)" and may hold spaces; count from its end */
	if (!(p = strrchr(buf, ')')) || p[1] != ' ')
		return -1;
	*state = p[2];
	for (i = 2; i < 22 && p; i++) {
		p = strchr(p + 1, ' ');
		if (p && i == 3 && ppid)
			*ppid = strtoll(p + 1, NULL, 10);
		if (p && i == 4)
			*pgrp = strtoll(p + 1, NULL, 10);
	}
	*start = p ? strtoll(p + 1, NULL, 10) : -1;
	return 0;
}

/* Start time of a process in clock ticks since boot; -1 if unknown. */
int64_t
mq_proc_start(int pid)
{
	int64_t pgrp, start;
	char state;

	return proc_stat(pid, &state, NULL, &pgrp, &start) < 0 ? -1 : start;
}

/*
 * root and its descendants, from one read of /proc, each with its start
 * time (so that a signal sent later can skip a pid used again); the
 * count.  Descendants that left for init are not found.
 */
int
mq_proc_tree(int root, struct mq_proc **out)
{
	struct mq_proc *all = NULL, *t;
	struct dirent *e;
	int64_t *parent = NULL, pgrp;
	int n = 0, nt = 0, i, k, grew;
	DIR *d;
	char state;

	if ((d = opendir("/proc"))) {
		while ((e = readdir(d)))
			if (atoi(e->d_name) > 0) {
				all = mq_array(all, n + 1, sizeof *all);
				parent = mq_array(parent, n + 1,
				    sizeof *parent);
				all[n].pid = atoi(e->d_name);
				if (proc_stat(all[n].pid, &state, &parent[n],
				    &pgrp, &all[n].start) == 0)
					n++;
			}
		closedir(d);
	}
	t = mq_array(NULL, n + 1, sizeof *t);
	t[nt].pid = root;
	t[nt++].start = mq_proc_start(root);
	for (grew = 1; grew; )
		for (grew = i = 0; i < n; i++) {
			for (k = 0; k < nt && t[k].pid != parent[i]; k++)
				;
			if (k == nt || all[i].pid == root)
				continue;
			for (k = 0; k < nt && t[k].pid != all[i].pid; k++)
				;
			if (k < nt)
				continue;
			t[nt++] = all[i];
			grew = 1;
		}
	free(all);
	free(parent);
	*out = t;
	return nt;
}

/* Signals those of the tree (mq_proc_tree) that are still who they were. */
void
mq_proc_kill(const struct mq_proc *t, int n, int sig)
{
	int i;

	for (i = 0; i < n; i++)
		if (mq_proc_start(t[i].pid) == t[i].start)
			kill((pid_t)t[i].pid, sig);
}

/*
 * Whether a process group has a member that is not a zombie (where the
 * first process does not reap orphans, as in some containers, a killed
 * group stays as zombies: they run nothing).
 */
static int
group_runs(int64_t pgid)
{
	struct dirent *e;
	int64_t pgrp, start;
	DIR *d;
	char state;
	int runs = 0;

	if (kill(-(pid_t)pgid, 0) < 0 && errno == ESRCH)
		return 0;
	if (!(d = opendir("/proc")))
		return 1;
	while (!runs && (e = readdir(d)))
		if (e->d_name[0] >= '1' && e->d_name[0] <= '9' &&
		    proc_stat(atoi(e->d_name), &state, NULL, &pgrp, &start) == 0)
			runs = pgrp == pgid && state != 'Z' && state != 'X';
	closedir(d);
	return runs;
}

static int
alive(int64_t pid, int64_t start)
{
	int64_t pgrp, now;
	char state;

	if (proc_stat((int)pid, &state, NULL, &pgrp, &now) < 0 || state == 'Z' ||
	    state == 'X')
		return 0;
	return start < 0 || now == start;
}

/*
 * What is left of a dead consumer's handler group: its anchor died with
 * the consumer, the handlers too (PR_SET_PDEATHSIG, exec.c), but what
 * they started may run on.  The group's id cannot be taken by another
 * process while any member lives, so members are ours, unless a process
 * now has that id as its pid (started at another time than our anchor):
 * then the group is another's, and ours is empty.  Kills ours and waits
 * (a while) for it to go; returns whether it is gone.
 */
static int
group_gone(const struct mq_consumer *c)
{
	int64_t start = mq_proc_start((int)c->pgid);
	int i;

	if (c->pgid <= 0)
		return 1;
	if (start >= 0 && start != c->pgstart)
		return 1;	/* the id is another's now: ours is empty */
	for (i = 0; i < 100; i++) {
		if (!group_runs(c->pgid))
			return 1;
		kill(-(pid_t)c->pgid, SIGKILL);
		usleep(10000);
	}
	return 0;
}

/*
 * A consumer of this host has ended: its host rebooted, or its pid is
 * gone or now names a process started at another time.  Only asks.
 */
int
mq_consumer_ended(const struct mq_consumer *c, const char *boot)
{
	if (c->pid == getpid())
		return 0;
	return strcmp(c->boot, boot) || !alive(c->pid, c->start);
}

/*
 * A consumer of this host is gone: it ended, and nothing of its handlers
 * runs any more (what did is killed here).  For a row just read: a row
 * that is no longer there may name a group that is another's by now.
 */
int
mq_consumer_gone(const struct mq_consumer *c, const char *boot)
{
	if (!mq_consumer_ended(c, boot))
		return 0;
	if (strcmp(c->boot, boot))
		return 1;	/* another boot: nothing of it runs */
	return group_gone(c);
}

/* This process's id, asked once. */
int64_t
mq_pid(void)
{
	static int64_t pid;

	if (!pid)
		pid = getpid();
	return pid;
}

/*
 * A delivery's token: random, so that a receipt of an earlier attempt
 * never matches.  Drawn 64 at a time: libbsd's arc4random asks getpid()
 * at every call, a system call per message handed out.  No two
 * processes share the buffer: a handler is exec'd, and the one child mq
 * forks (the handler group's anchor, exec.c) only waits.
 */
uint32_t
mq_token(void)
{
	static uint32_t buf[64];
	static size_t left;

	if (!left) {
		arc4random_buf(buf, sizeof buf);
		left = sizeof buf / sizeof *buf;
	}
	return buf[--left];
}

/* Orders history rows of one millisecond; unique to this process. */
int64_t
mq_history_n(void)
{
	static int64_t count;

	return mq_pid() << 32 | ++count;
}

/* MQ_BUSY_TIMEOUT in ms: how long a writer waits for another (5s). */
int64_t
mq_busy_timeout(void)
{
	const char *env = getenv("MQ_BUSY_TIMEOUT");
	int64_t ms = 5000;

	if (env && *env && mq_parse_duration(env, &ms) < 0)
		mq_die(MQ_EX_USAGE, "invalid MQ_BUSY_TIMEOUT '%s': want a "
		    "duration such as 5s", env);
	return ms;
}

int
mq_futex_wait(uint32_t *w, uint32_t val, int64_t ms)
{
	struct timespec ts;

	ts.tv_sec = ms / 1000;
	ts.tv_nsec = ms % 1000 * 1000000;
	return (int)syscall(SYS_futex, w, FUTEX_WAIT, val, &ts, NULL, 0);
}

void
mq_futex_wake(uint32_t *w)
{
	syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}
