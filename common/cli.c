/*
 * cli.c: what every program's main() would otherwise repeat: the
 * synopsis for -h and usage errors, -V, and the one line for a topic or
 * group that is not there.
 */
#include <stdlib.h>

#include "mq.h"

/* stdout and 0 for --help; stderr and 64 for a usage error. */
void
mq_usage(FILE *f, const char *synopsis, int status)
{
	fputs(synopsis, f);
	if (f == stdout)
		exit(mq_finish());
	exit(status);
}

void
mq_version(void)
{
	printf("%s %s (schema %d)\n", mq_prog, MQ_VERSION, mq_schema_version());
	exit(mq_finish());
}

void
mq_no_topic(const char *topic)
{
	mq_die(MQ_EX_NOINPUT, "no such topic: %s", topic);
}

void
mq_no_group(const char *topic, const char *group)
{
	mq_die(MQ_EX_NOINPUT, "no such group: %s/%s", topic, group);
}

/* Ends the program for a result that names a missing topic or group. */
void
mq_check(int rc, const char *topic, const char *group)
{
	if (rc == MQ_E_NOTOPIC)
		mq_no_topic(topic);
	if (rc == MQ_E_NOGROUP)
		mq_no_group(topic, group);
}
