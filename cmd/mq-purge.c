/*
 * mq-purge: retention.  Deletes what every group has settled and what is
 * past the topic's retention; with --older-than or --before-offset, what
 * is older than that (--force when some group has not settled it); drops
 * dead letters; reclaims disk.
 *
 * Deletes in short transactions of CHUNK offsets, so producers and
 * consumers keep running during a purge of millions.  In the default mode
 * the settled boundary is read again under each chunk's lock, so a group
 * rewound meanwhile is respected.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mq.h"

#define PAUSE_US	2000	/* between chunks */

static const char *dbpath, *group;
static int64_t older = -1, before = -1;
static int force, dead, vacuum, dry, quiet, status;

static const char synopsis[] =
    "usage: mq-purge [-nq] [-d FILE] [--older-than DUR | "
    "--before-offset N] [--force]\n"
    "                [--dead [-g GROUP]] [--vacuum] [TOPIC]\n";
static const char *const help[] = {
	"--before-offset N",	"delete the messages below offset N",
	"--dead",		"also drop dead letters",
	"-f, --force",		"delete messages not every group settled",
	"-g, --group GROUP",	"with --dead: only GROUP's",
	"-n, --dry-run",	"count, delete nothing",
	"--older-than DUR",	"delete the messages sent over DUR ago",
	"-q, --quiet",		"print nothing but errors and warnings",
	"--vacuum",		"give the free space back to the system",
	NULL,
};

static void
progress(const char *name, int64_t total, int64_t *shown)
{
	if (isatty(2) && !quiet && mq_now() - *shown >= 1000) {
		*shown = mq_now();
		fprintf(stderr, "\r%s: %lld deleted...", name, (long long)total);
	}
}

/*
 * The plan (one transaction), then chunk after chunk, each its own short
 * transaction, with a pause between them.
 */
static void
purge_topic(struct mq *q, const char *name)
{
	struct mq_purge p;
	int64_t start = mq_now(), shown = start;
	char buf[16];
	int rc;

	memset(&p, 0, sizeof p);
	p.older = older;
	p.before = before;
	p.force = force;
	p.dead = dead;
	p.dry = dry;
	p.group = group;
	rc = mq_purge(q, name, &p);
	if (rc == MQ_E_HELD) {
		mq_warn("%s: would delete %lld %s that not every group has "
		    "settled; use --force", name, (long long)p.held,
		    mq_plural(p.held, "message", "messages"));
		status = MQ_EX_NONE;
		return;
	}
	mq_check(rc, name, group);
	while (rc > 0) {
		/*
		 * Let waiting writers in: they queue for the lock and would
		 * rarely find it free in the microseconds before the next
		 * chunk takes it again.
		 */
		usleep(PAUSE_US);
		rc = mq_purge(q, name, &p);
		progress(name, p.deleted, &shown);
	}
	if (shown != start)
		fputc('\n', stderr);
	if (!quiet && (p.deleted || p.dropped)) {
		mq_human_size(p.bytes, buf, sizeof buf);
		printf("%s: %s %lld %s (%s)", name, dry ? "would delete" :
		    "deleted", (long long)p.deleted,
		    mq_plural(p.deleted, "message", "messages"), buf);
		if (dead)
			printf(", %lld %s", (long long)p.dropped,
			    mq_plural(p.dropped, "dead letter", "dead letters"));
		putchar('\n');
	}
}

int
main(int argc, char *argv[])
{
	static const struct option opts[] = {
		{ "db", required_argument, NULL, 'd' },
		{ "older-than", required_argument, NULL, 'o' },
		{ "before-offset", required_argument, NULL, 'b' },
		{ "force", no_argument, NULL, 'f' },
		{ "dead", no_argument, NULL, 'D' },
		{ "group", required_argument, NULL, 'g' },
		{ "vacuum", no_argument, NULL, 'v' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct mq_topic *t;
	struct mq *q;
	int c, i, n;

	mq_begin(argv, synopsis, help);
	while ((c = getopt_long(argc, argv, "d:fg:hnqV", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dbpath = optarg; break;
		case 'o': older = mq_duration_arg(optarg, "age"); break;
		case 'b': before = mq_num_arg(optarg, 1, INT64_MAX, "offset");
			  break;
		case 'f': force = 1; break;
		case 'D': dead = 1; break;
		case 'g': group = mq_name_arg(optarg, "group"); break;
		case 'v': vacuum = 1; break;
		case 'n': dry = 1; break;
		case 'q': quiet = 1; break;
		case 'h': mq_help();
		case 'V': mq_version(); break;
		default: mq_usage();
		}
	}
	argc -= optind;
	argv += optind;
	if (argc > 1)
		mq_usage_err("unexpected argument '%s'", argv[1]);
	if (older >= 0 && before >= 0)
		mq_usage_err("--older-than and --before-offset exclude "
		    "each other");
	if (group && !dead)
		mq_usage_err("-g goes with --dead");
	if (group && !argc)
		mq_usage_err("-g needs a TOPIC");
	if (argc)
		mq_name_arg(argv[0], "topic");

	q = mq_open(dbpath, dry ? MQ_READ : MQ_UPDATE);
	if (argc) {
		purge_topic(q, argv[0]);
	} else {
		n = mq_topic_list(q, &t);
		for (i = 0; i < n; i++)
			purge_topic(q, t[i].name);
		free(t);
	}
	if (vacuum && !dry)
		mq_vacuum(q);
	mq_close(q);
	c = mq_finish();
	return c ? c : status;
}
