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

#define CHUNK		2000
#define PAUSE_US	2000	/* between chunks */

static const char *dbpath, *group;
static int64_t older = -1, before = -1;
static int force, dead, vacuum, dry, quiet, status;

static void
usage(FILE *f, int st)
{
	fprintf(f, "usage: mq-purge [-nq] [-d FILE] [--older-than DUR | "
	    "--before-offset N] [--force]\n"
	    "                [--dead [-g GROUP]] [--vacuum] [TOPIC]\n");
	exit(st);
}

static void
progress(const char *name, int64_t total, int64_t *shown)
{
	if (isatty(2) && !quiet && mq_now() - *shown >= 1000) {
		*shown = mq_now();
		fprintf(stderr, "\r%s: %lld deleted...", name, (long long)total);
	}
}

/*
 * Below `all` every message goes (retention, or --force); from there to
 * `settled` the ones no group holds.  Chunk by chunk, each its own short
 * transaction; the groups' positions are read again under each chunk's
 * lock, so a group rewound meanwhile is respected.
 */
static void
purge_topic(struct mq *q, const char *name)
{
	struct mq_topic t;
	struct mq_group g;
	int64_t all = 0, settled, lo, hi, mid, n, bytes, total = 0, totbytes = 0;
	int64_t dropped = 0, now = mq_now(), shown, skip = 0, held;
	int64_t line = INT64_MAX;	/* with --older-than/--before-offset */
	int fixed = older >= 0 || before >= 0, may;
	char buf[16];

	shown = now;
	if (dry)
		mq_begin_read(q);
	else
		mq_begin(q);
	if (!mq_topic_get(q, name, &t))
		mq_die(MQ_EX_NOINPUT, "no such topic: %s", name);
	if (dead) {
		if (group && !mq_group_get(q, &t, group, &g))
			mq_die(MQ_EX_NOINPUT, "no such group: %s/%s", name,
			    group);
		dropped = mq_store_drop_dead(q, &t, group ? &g : NULL, dry);
		skip = dry ? (group ? g.id : -1) : 0;
	}
	if (!fixed)
		mq_store_dedup_expire(q, &t, now, dry);
	lo = mq_store_first_off(q, &t);
	settled = mq_store_handed_out(q, &t);
	if (before >= 0)
		all = before;
	else if (older >= 0)
		all = mq_store_offset_at(q, &t, now - older);
	else if (t.retention >= 0)
		all = mq_store_offset_at(q, &t, now - t.retention);
	if (all > t.next_off)
		all = t.next_off;
	may = force || settled == 0;	/* no group: nobody loses anything */
	if (fixed) {
		/* only what is below the line, and all of it or nothing */
		settled = all < settled ? all : settled;
		mq_store_range_size(q, &t, lo, all, 0, 0, &n, &bytes);
		mq_store_range_size(q, &t, lo, settled, 1, skip, &held, &bytes);
		held = n - held;
		if (held > 0 && !may) {
			mq_warn("%s: would delete %lld messages that not every "
			    "group has settled; use --force", name,
			    (long long)held);
			status = MQ_EX_NONE;
			mq_rollback(q);
			return;
		}
		line = all;
		if (!may)
			all = 0;	/* everything below is settled anyway */
	}
	if (dry) {
		if (lo) {
			mid = all > lo ? all : lo;
			mq_store_range_size(q, &t, lo, mid, 0, 0, &total,
			    &totbytes);
			mq_store_range_size(q, &t, mid, settled, 1, skip, &n,
			    &bytes);
			total += n;
			totbytes += bytes;
		}
		mq_rollback(q);
	} else {
		mq_commit(q);
		while (lo && (lo < all || lo < settled)) {
			mq_begin(q);
			if (!mq_topic_get(q, name, &t)) {
				mq_rollback(q);
				break;
			}
			hi = lo + CHUNK;
			if (lo < all) {
				hi = hi < all ? hi : all;
				mq_store_purge_range(q, &t, lo, hi, 0, &n, &bytes);
			} else {
				settled = mq_store_handed_out(q, &t);
				if (settled > line)
					settled = line;
				hi = hi < settled ? hi : settled;
				if (hi <= lo) {
					mq_rollback(q);
					break;
				}
				mq_store_purge_range(q, &t, lo, hi, 1, &n, &bytes);
			}
			mq_commit(q);
			total += n;
			totbytes += bytes;
			lo = hi;
			progress(name, total, &shown);
			/*
			 * Let waiting writers in: they retry every 0.2-2ms
			 * (db.c) and would rarely find the lock free in the
			 * microseconds before the next chunk takes it again.
			 */
			usleep(PAUSE_US);
		}
		if (shown != now)
			fputc('\n', stderr);
	}
	if (!quiet && (total || dropped)) {
		mq_human_size(totbytes, buf, sizeof buf);
		printf("%s: %s %lld messages (%s)", name,
		    dry ? "would delete" : "deleted", (long long)total, buf);
		if (dead)
			printf(", %lld dead letters", (long long)dropped);
		putchar('\n');
	}
}

static void
add_name(const struct mq_topic *t, void *arg)
{
	char ***names = arg;
	size_t n = 0;

	while ((*names)[n])
		n++;
	*names = mq_array(*names, n + 2, sizeof **names);
	(*names)[n] = mq_strdup(t->name);
	(*names)[n + 1] = NULL;
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
	struct mq *q;
	char **names;
	int c, i;

	mq_setprog(argv[0]);
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
		case 'h': usage(stdout, 0); break;
		case 'V': mq_version(); break;
		default: usage(stderr, MQ_EX_USAGE);
		}
	}
	argc -= optind;
	argv += optind;
	if (argc > 1)
		usage(stderr, MQ_EX_USAGE);
	if (older >= 0 && before >= 0)
		mq_die(MQ_EX_USAGE, "--older-than and --before-offset exclude "
		    "each other");
	if (group && !dead)
		mq_die(MQ_EX_USAGE, "-g goes with --dead");
	if (group && !argc)
		mq_die(MQ_EX_USAGE, "-g needs a TOPIC");
	if (argc)
		mq_name_arg(argv[0], "topic");

	q = mq_open(dbpath, dry ? MQ_READ : MQ_UPDATE);
	names = mq_array(NULL, 1, sizeof *names);
	names[0] = NULL;
	if (argc) {
		add_name(&(struct mq_topic){ .name = "" }, &names);
		free(names[0]);
		names[0] = mq_strdup(argv[0]);
	} else {
		mq_topic_each(q, add_name, &names);
	}
	for (i = 0; names[i]; i++) {
		purge_topic(q, names[i]);
		free(names[i]);
	}
	free(names);
	if (vacuum && !dry)
		mq_store_vacuum(q);
	mq_close(q);
	c = mq_finish();
	return c ? c : status;
}
