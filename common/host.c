/*
 * host.c: who and where this process is, and whether another process of
 * this host still runs.  A consumer is known by host name, boot id, pid
 * and the pid's start time, so neither a reboot nor a reused pid makes a
 * dead consumer look alive.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mq.h"

const char *
mq_hostname(void)
{
	static char host[256];

	if (!host[0] && (gethostname(host, sizeof host - 1) < 0 || !host[0]))
		strcpy(host, "localhost");
	return host;
}

void
mq_boot_id(char *buf, size_t len)
{
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

	buf[0] = '\0';
	if (f) {
		if (fgets(buf, (int)len, f))
			buf[strcspn(buf, "\n")] = '\0';
		fclose(f);
	}
}

/* Start time of a process in clock ticks since boot; -1 if unknown. */
int64_t
mq_proc_start(int pid)
{
	char path[64], buf[1024], *p;
	long long v = -1;
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
	if (!(p = strrchr(buf, ')')))
		return -1;
	for (i = 2; i < 22 && p; i++)
		p = strchr(p + 1, ' ');
	if (p)
		v = strtoll(p + 1, NULL, 10);
	return v;
}

/* A consumer of this host is gone: its host rebooted, or its pid is
 * gone or now names a process started at another time. */
int
mq_consumer_gone(const struct mq_consumer *c, const char *boot)
{
	if (c->pid == getpid())
		return 0;
	if (strcmp(c->boot, boot))
		return 1;
	if (kill((pid_t)c->pid, 0) < 0 && errno == ESRCH)
		return 1;
	if (c->start >= 0 && mq_proc_start((int)c->pid) != c->start)
		return 1;
	return 0;
}
