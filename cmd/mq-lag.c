/*
 * mq-lag: how far behind each consumer group is.  A table for people,
 * JSON lines, or Prometheus text; thresholds with exit status 1 for cron;
 * --watch redraws like top with rates in and out.
 *
 * Read-only: it opens the database read-only, reads one snapshot per
 * frame, and takes no write lock.  Its cost follows the number of topics,
 * groups and unsettled deliveries, not the number of messages: see
 * sq_stats in common/sqlite/topic.c.
 */
#include <getopt.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "mq.h"

static struct mq_lag lag;
static int wide;

static const char synopsis[] =
    "usage: mq-lag [-q] [-d FILE] [--json | --prometheus] "
    "[--topics | --consumers]\n"
    "              [--max-lag [[TOPIC/]GROUP=]N] [--max-age "
    "[[TOPIC/]GROUP=]DUR]\n"
    "              [--max-dead [[TOPIC/]GROUP=]N] [--max-expired "
    "[[TOPIC/]GROUP=]N]\n"
    "              [--max-idle [[TOPIC/]GROUP=]DUR] [--max-silence "
    "[TOPIC=]DUR]\n"
    "              [--wide] [--watch [DUR]] [TOPIC [GROUP]]\n"
    "       mq-lag [-d FILE] --messages [--state STATE[,...]] [-k KEY] "
    "[-n N]\n"
    "              [--from-offset N] [--to-offset N] [--json] TOPIC "
    "GROUP\n";
static const char *const help[] = {
	"--consumers",				"list the registered consumers",
	"--from-offset N",			"--messages from offset N on",
	"--json",				"print JSON",
	"-k, --key KEY",			"--messages sent with KEY",
	"--max-age [[TOPIC/]GROUP=]DUR",	"limit the oldest message's age",
	"--max-dead [[TOPIC/]GROUP=]N",		"limit the dead letters",
	"--max-expired [[TOPIC/]GROUP=]N",	"limit the expired leases",
	"--max-idle [[TOPIC/]GROUP=]DUR",	"limit a backlog's time since a "
						"settle",
	"--max-lag [[TOPIC/]GROUP=]N",		"limit the lag",
	"--max-silence [TOPIC=]DUR",		"limit the time since a send",
	"--messages",				"list a group's messages by state",
	"-n N",					"at most N --messages",
	"--prometheus",				"print Prometheus metrics",
	"-q, --quiet",				"print only the breaches",
	"--state STATE[,...]",			"--messages in these states",
	"--to-offset N",			"--messages up to offset N",
	"--topics",				"one row per topic",
	"--watch[=DUR]",			"redraw the table every DUR (2s)",
	"--wide",				"every column, even if all 0",
	NULL,
};

static struct termios saved_tty;
static int tty_raw;

static void
restore_tty(void)
{
	if (tty_raw) {
		tcsetattr(0, TCSANOW, &saved_tty);
		fputs("\033[?25h\033[?1049l", stdout);	/* cursor, main screen */
		fflush(stdout);
		tty_raw = 0;
	}
}

/* Redraws every `every` ms with rates since the last frame; q quits. */
static void
watch(struct mq *q, int64_t every)
{
	struct termios raw;
	struct pollfd pfd[1];
	struct mq_lag_row *prev = NULL;
	int nprev = 0, i, k;
	int64_t then = 0;
	char c, ts[40];

	if (isatty(0) && tcgetattr(0, &saved_tty) == 0) {
		raw = saved_tty;
		raw.c_lflag &= ~(ICANON | ECHO);
		raw.c_cc[VMIN] = 1;
		raw.c_cc[VTIME] = 0;
		tcsetattr(0, TCSANOW, &raw);
		tty_raw = 1;
		atexit(restore_tty);
		fputs("\033[?1049h\033[?25l", stdout);
	}
	while (!mq_stop) {
		mq_lag_collect(q, &lag);
		for (i = 0; i < lag.n && then; i++)
			for (k = 0; k < nprev; k++) {
				double dt = (lag.now - then) / 1e3;

				if (strcmp(lag.rows[i].t.name, prev[k].t.name) ||
				    strcmp(lag.rows[i].g.name, prev[k].g.name) || dt <= 0)
					continue;
				lag.rows[i].in = (lag.rows[i].t.next_off -
				    prev[k].t.next_off) / dt;
				lag.rows[i].out = (lag.rows[i].g.settled -
				    prev[k].g.settled) / dt;
			}
		mq_rfc3339(lag.now, ts, sizeof ts);
		printf("\033[H\033[2J%s  %s  (every %llds; q quits)\n\n",
		    mq_path(q), ts, (long long)(every / 1000));
		mq_lag_table(stdout, &lag, MQ_LAG_WATCH | wide);
		if (fflush(stdout) == EOF)
			break;		/* the reader went away: mq_finish says */
		free(prev);
		prev = mq_array(NULL, lag.n, sizeof *prev);
		memcpy(prev, lag.rows, lag.n * sizeof *lag.rows);
		nprev = lag.n;
		then = lag.now;
		pfd[0].fd = tty_raw ? 0 : -1;
		pfd[0].events = POLLIN;
		/* a signal ends the poll early: no SA_RESTART (sig.c) */
		if (poll(pfd, 1, (int)every) > 0 && (pfd[0].revents & POLLIN) &&
		    read(0, &c, 1) == 1 && (c == 'q' || c == 'Q'))
			break;
	}
	free(prev);
	restore_tty();
}

int
main(int argc, char *argv[])
{
	static const struct option opts[] = {
		{ "db", required_argument, NULL, 'd' },
		{ "json", no_argument, NULL, 'J' },
		{ "prometheus", no_argument, NULL, 'P' },
		{ "topics", no_argument, NULL, 'T' },
		{ "consumers", no_argument, NULL, 'C' },
		{ "max-lag", required_argument, NULL, 'l' },
		{ "max-age", required_argument, NULL, 'a' },
		{ "max-dead", required_argument, NULL, 'x' },
		{ "max-expired", required_argument, NULL, 'e' },
		{ "max-silence", required_argument, NULL, 'S' },
		{ "max-idle", required_argument, NULL, 'I' },
		{ "watch", optional_argument, NULL, 'w' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "wide", no_argument, NULL, 'W' },
		{ "messages", no_argument, NULL, 'm' },
		{ "state", required_argument, NULL, 's' },
		{ "key", required_argument, NULL, 'k' },
		{ "from-offset", required_argument, NULL, 'F' },
		{ "to-offset", required_argument, NULL, 'O' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *dbpath = NULL;
	struct mq *q;
	struct mq_list list = { NULL, NULL, NULL, 1, INT64_MAX, 0, 0 };
	int64_t every = -1, d;
	long limit = 0;
	int c, mode = 0, view = 0, quiet = 0, breaches = 0, items = 0;

	mq_begin(argv, synopsis, help);
	while ((c = getopt_long(argc, argv, "d:hk:n:qV", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dbpath = optarg; break;
		case 'J': mode = 'J'; break;
		case 'P': mode = 'P'; break;
		case 'T': view = 'T'; break;
		case 'C': view = 'C'; break;
		case 'l': mq_lag_limit(MQ_LIM_LAG, optarg); break;
		case 'a': mq_lag_limit(MQ_LIM_AGE, optarg); break;
		case 'x': mq_lag_limit(MQ_LIM_DEAD, optarg); break;
		case 'e': mq_lag_limit(MQ_LIM_EXPIRED, optarg); break;
		case 'S': mq_lag_limit(MQ_LIM_SILENCE, optarg); break;
		case 'I': mq_lag_limit(MQ_LIM_IDLE, optarg); break;
		case 'w':
			every = 2000;
			if (optarg)
				every = mq_duration_arg(optarg, "interval");
			else if (optind < argc &&
			    mq_parse_duration(argv[optind], &d) == 0)
				every = d, optind++;	/* --watch 5s */
			if (every < 100)
				mq_usage_err("invalid interval: at least "
				    "100ms");
			break;
		case 'q': quiet = 1; break;
		case 'W': wide = MQ_LAG_WIDE; break;
		case 'm': items = 1; break;
		case 's': list.states = mq_item_states(optarg); break;
		case 'k': list.key = mq_key_arg(optarg, "key"); break;
		case 'n': limit = (long)mq_num_arg(optarg, 1, 1000000000,
			      "count");
			  break;
		case 'F': list.from = mq_num_arg(optarg, 1, INT64_MAX, "offset");
			  break;
		case 'O': list.to = mq_num_arg(optarg, 1, INT64_MAX, "offset");
			  break;
		case 'h': mq_help();
		case 'V': mq_version(); break;
		default: mq_usage();
		}
	}
	argc -= optind;
	argv += optind;
	if (argc > 2)
		mq_usage_err("unexpected argument '%s'", argv[2]);
	if (argc > 0)
		lag.topic = mq_name_arg(argv[0], "topic");
	if (argc > 1)
		lag.group = mq_name_arg(argv[1], "group");
	if (items) {	/* a group's messages: list.c */
		if (mode == 'P' || view || quiet || wide || every >= 0 ||
		    mq_lag_limits())
			mq_usage_err("--messages goes with no other view, "
			    "threshold or -q");
		if (argc != 2)
			mq_usage_err("--messages wants TOPIC and GROUP");
		list.topic = lag.topic;
		list.group = lag.group;
		q = mq_open(dbpath, MQ_READ);
		mq_catch_stop();
		mq_list_print(stdout, q, &list, limit, mode == 'J');
		mq_close(q);
		return mq_finish();
	}
	if (list.states || list.key || limit || list.from != 1 ||
	    list.to != INT64_MAX)
		mq_usage_err("--state, -k, -n, --from-offset and "
		    "--to-offset go with --messages");
	if (every >= 0 && (mode || view))
		mq_usage_err("--watch draws a table: no --json, "
		    "--prometheus, --topics or --consumers");
	if (wide && (mode || view))
		mq_usage_err("--wide widens the table: not with --json, "
		    "--prometheus, --topics or --consumers");
	if (mq_lag_limits() && view)
		mq_usage_err("thresholds apply to groups: not with "
		    "--topics or --consumers");
	if (mode == 'P' && view)
		mq_usage_err("--prometheus goes without --topics and "
		    "--consumers");

	q = mq_open(dbpath, MQ_READ);
	mq_catch_stop();
	/* a missing name is said before --watch takes the screen */
	mq_lag_collect(q, &lag);
	mq_lag_limits_known(&lag);
	if (every >= 0) {
		watch(q, every);
		mq_close(q);
		return mq_finish();
	}
	if (!quiet) {
		if (view == 'T')
			mq_lag_topics(stdout, &lag, mode == 'J');
		else if (view == 'C')
			mq_lag_consumers(stdout, q, &lag, mode == 'J');
		else if (mode == 'J')
			mq_lag_json(stdout, &lag);
		else if (mode == 'P')
			mq_lag_prometheus(stdout, &lag);
		else
			mq_lag_table(stdout, &lag, wide);
	}
	/* machine formats stay parseable: breaches go to stderr then */
	if (mq_lag_limits())
		breaches = mq_lag_check(mode && !quiet ? stderr : stdout, &lag);
	mq_close(q);
	c = mq_finish();
	return c ? c : breaches ? MQ_EX_NONE : 0;
}
