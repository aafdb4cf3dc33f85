/*
 * cli.c: what every program's main() would otherwise repeat: --help, the
 * synopsis after a usage error, -V, and the one line for a topic or group
 * that is not there.
 *
 * A program hands mq_begin its synopsis and its options, as pairs of
 * strings ("-n, --count N", "what it does"), ending in NULL; -d, -h and -V
 * are added here.  A mistake on the command line is one line saying what
 * is wrong (getopt's own for an unknown option), then the synopsis, 64;
 * a mistake in the environment (MQ_SYNC ...) is mq_die's one line.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "mq.h"

static const char *synopsis = "";
static const char *const *options;
static const char *const common[] = {
	"-d, --db FILE",	"the database: a file or a PostgreSQL URL",
	"-h, --help",		"print this help",
	"-V, --version",	"print the version",
	NULL,
};

/* Every program starts here; getopt's messages then name it as ours do. */
void
mq_begin(char **argv, const char *syn, const char *const *opts)
{
	mq_setprog(argv[0]);
	argv[0] = (char *)mq_prog;
	synopsis = syn;
	options = opts;
}

/* A long option alone is indented to line up with the long forms. */
static int
indent(const char *o)
{
	return strncmp(o, "--", 2) ? 0 : 4;
}

static int
widest(const char *const *o, int w)
{
	int n;

	for (; o && *o; o += 2)
		if ((n = indent(*o) + (int)strlen(*o)) > w)
			w = n;
	return w;
}

static void
list(const char *const *o, int w)
{
	for (; o && *o; o += 2)
		printf("  %*s%-*s  %s\n", indent(*o), "", w - indent(*o), o[0],
		    o[1]);
}

void
mq_help(void)
{
	int w = widest(common, widest(options, 0));

	printf("%s\n", synopsis);
	list(options, w);
	list(common, w);
	printf("See %s(1).\n", mq_prog);
	exit(mq_finish());
}

void
mq_usage(void)
{
	fputs(synopsis, stderr);
	exit(MQ_EX_USAGE);
}

void
mq_usage_err(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	mq_vwarn(fmt, ap);
	va_end(ap);
	mq_usage();
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
