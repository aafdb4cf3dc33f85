/*
 * mq-replay: read the log, move a group's position, redrive dead letters,
 * trace one message.
 *
 * Without -g it only reads: a range of the log, or -f to follow it like
 * tail -f, printing offsets so a script can resume.  With -g it moves the
 * group (one transaction) or redrives its dead letters; --dry-run says
 * what would change and changes nothing.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "mq.h"

#define OFFSET(s)	mq_num_arg(s, 1, INT64_MAX, "offset")

enum { READ, MOVE, DEAD, TRACE };

static const char *dbpath, *group, *key;
static char *headers;	/* -H: "NAME=VALUE\n" each */
static int64_t from = 0, to = INT64_MAX, since = -1, until = -1, shift;
static int64_t *offsets, trace_off;
static int noffsets, follow, dry, where;	/* where: 1 earliest, 2 latest */
static long limit;

static const char synopsis[] =
    "usage: mq-replay [-0f] [-d FILE] [--from-offset N] [--to-offset N]\n"
    "                 [--since TIME] [--until TIME] [-k KEY] [-H NAME=VALUE ...]\n"
    "                 [-n N] [--json | --format FMT] TOPIC\n"
    "       mq-replay -g GROUP [--dry-run] [--from-offset N | --since TIME |\n"
    "                 --shift N | --earliest | --latest] TOPIC\n"
    "       mq-replay -g GROUP [--dry-run] --dead [--offset N ...] TOPIC\n"
    "       mq-replay --trace OFFSET TOPIC\n";
static const char *const help[] = {
	"-0, --null",		"NUL-terminated output",
	"--dead",		"redrive the group's dead letters",
	"--dry-run",		"with -g: say what would change",
	"--earliest",		"move the group to the oldest message",
	"-f, --follow",		"keep printing new messages",
	"--format FMT",		"print each message as FMT",
	"--from-offset N",	"read (or move the group) from offset N",
	"-g, --group GROUP",	"move, or redrive the dead letters of, GROUP",
	"-H, --header NAME=VALUE", "read only messages with this header",
	"--json",		"print JSON lines",
	"-k, --key KEY",	"read only messages with KEY",
	"--latest",		"move the group past the last message",
	"-n, --count N",	"print at most N messages",
	"--offset N",		"with --dead: only the one at offset N",
	"--shift N",		"move the group by N messages",
	"--since TIME",		"read from the first message sent at TIME",
	"--to-offset N",	"read up to offset N",
	"--trace OFFSET",	"trace the message at OFFSET",
	"--until TIME",		"read up to the last message sent at TIME",
	NULL,
};

static int
move(struct mq *q, const char *name)
{
	struct mq_move m;
	struct mq_moved r;
	const char *w = dry ? "would be " : "";

	memset(&m, 0, sizeof m);
	m.dry = dry;
	if (where == 1)
		m.to = MQ_TO_EARLIEST;
	else if (where == 2)
		m.to = MQ_TO_LATEST;
	else if (since >= 0) {
		m.to = MQ_TO_TIME;
		m.arg = since;
	} else if (from) {
		m.to = MQ_TO_OFFSET;
		m.arg = from;
	} else {
		m.to = MQ_TO_SHIFT;
		m.arg = shift;
	}
	mq_check(mq_move(q, name, group, &m, &r), name, group);
	if (r.unchanged) {
		printf("%s/%s: position %lld: unchanged\n", name, group,
		    (long long)r.to);
		return 0;
	}
	printf("%s/%s: %sposition %lld -> %lld: %lld %s %s again, %lld %sskipped, "
	    "%lld unsettled %s %sdropped\n", name, group, dry ? "would move " :
	    "", (long long)r.from, (long long)r.to, (long long)r.again,
	    mq_plural(r.again, "message", "messages"), dry ? "would come" :
	    mq_plural(r.again, "comes", "come"), (long long)r.skipped, w,
	    (long long)r.dropped, mq_plural(r.dropped, "delivery",
	    "deliveries"), w);
	return 0;
}

static int
redrive(struct mq *q, const char *name)
{
	int *found = mq_array(NULL, noffsets, sizeof *found);
	int64_t n;
	int i, status = 0;

	mq_check(mq_redrive(q, name, group, offsets, found, noffsets, dry, &n),
	    name, group);
	for (i = 0; i < noffsets; i++)	/* a dry run warns as the real one */
		if (!found[i]) {
			mq_warn("offset %lld is not a dead letter of %s/%s",
			    (long long)offsets[i], name, group);
			status = MQ_EX_NONE;
		}
	free(found);
	printf("%s/%s: %s%lld %s%s\n", name, group, dry ? "would redrive " : "",
	    (long long)n, mq_plural(n, "dead letter", "dead letters"),
	    dry ? "" : " redriven");
	return n ? status : MQ_EX_NONE;
}

static int
trace(struct mq *q, const char *name)
{
	struct mq_trace tr;
	int rc;

	if ((rc = mq_trace(q, name, trace_off, &tr)) == MQ_E_NOMSG)
		mq_die(MQ_EX_NOINPUT, "no message at offset %lld of %s",
		    (long long)trace_off, name);
	mq_check(rc, name, NULL);
	mq_out_trace(stdout, name, &tr);
	mq_trace_free(&tr);
	return 0;
}

int
main(int argc, char *argv[])
{
	static const struct option opts[] = {
		{ "db", required_argument, NULL, 'd' },
		{ "group", required_argument, NULL, 'g' },
		{ "from-offset", required_argument, NULL, 'F' },
		{ "to-offset", required_argument, NULL, 'T' },
		{ "since", required_argument, NULL, 'S' },
		{ "until", required_argument, NULL, 'U' },
		{ "key", required_argument, NULL, 'k' },
		{ "header", required_argument, NULL, 'H' },
		{ "count", required_argument, NULL, 'n' },
		{ "follow", no_argument, NULL, 'f' },
		{ "null", no_argument, NULL, '0' },
		{ "json", no_argument, NULL, 'J' },
		{ "format", required_argument, NULL, 'o' },
		{ "earliest", no_argument, NULL, 'E' },
		{ "latest", no_argument, NULL, 'L' },
		{ "shift", required_argument, NULL, 's' },
		{ "dead", no_argument, NULL, 'D' },
		{ "offset", required_argument, NULL, 'O' },
		{ "dry-run", no_argument, NULL, 'N' },
		{ "trace", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct mq_replay rp;
	struct mq_out o;
	struct mq *q;
	const char *name;
	int c, mode = READ, moves = 0, status;

	mq_begin(argv, synopsis, help);
	memset(&o, 0, sizeof o);
	o.mode = MQ_OUT_LINE;
	o.with_receipt = 1;	/* no receipt here: the offset stands in */
	while ((c = getopt_long(argc, argv, "0d:fg:H:hk:n:V", opts, NULL)) != -1) {
		switch (c) {
		case '0': o.mode = MQ_OUT_NUL; break;
		case 'd': dbpath = optarg; break;
		case 'f': follow = 1; break;
		case 'g': group = mq_name_arg(optarg, "group"); break;
		case 'k': key = mq_key_arg(optarg, "key"); break;
		case 'H': mq_header_arg(&headers, optarg, 0); break;
		case 'n': limit = (long)mq_num_arg(optarg, 0, 1000000000,
			      "count");
			  break;
		case 'F': from = OFFSET(optarg); moves++; break;
		case 'T': to = OFFSET(optarg); break;
		case 'S': since = mq_time_arg(optarg, "time"); moves++; break;
		case 'U': until = mq_time_arg(optarg, "time"); break;
		case 'J': o.mode = MQ_OUT_JSON; break;
		case 'o':
			if (mq_check_format(optarg) < 0)
				mq_usage_err("invalid format '%s': see "
				    "mq-replay(1) for the %% directives", optarg);
			o.mode = MQ_OUT_FORMAT;
			o.format = optarg;
			break;
		case 'E': where = 1; moves++; break;
		case 'L': where = 2; moves++; break;
		case 's': shift = mq_num_arg(optarg, -INT64_MAX / 2,
			      INT64_MAX / 2, "shift");
			  moves++;
			  break;
		case 'D': mode = DEAD; break;
		case 'O':
			offsets = mq_array(offsets, noffsets + 1, sizeof *offsets);
			offsets[noffsets++] = OFFSET(optarg);
			break;
		case 'N': dry = 1; break;
		case 't': trace_off = OFFSET(optarg); mode = TRACE; break;
		case 'h': mq_help();
		case 'V': mq_version(); break;
		default: mq_usage();
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 1)
		mq_usage_err("missing TOPIC");
	if (argc > 1)
		mq_usage_err("unexpected argument '%s'", argv[1]);
	name = o.topic = mq_name_arg(argv[0], "topic");
	if (mode == READ && group) {
		mode = MOVE;
		if (moves != 1)
			mq_usage_err("moving a group takes one of "
			    "--from-offset, --since, --shift, --earliest, "
			    "--latest");
	}
	if (mode == DEAD && !group)
		mq_usage_err("--dead needs -g GROUP");
	if (noffsets && mode != DEAD)
		mq_usage_err("--offset goes with --dead");
	if (dry && mode != MOVE && mode != DEAD)
		mq_usage_err("--dry-run goes with -g");
	if (mode == READ && (where || shift))
		mq_usage_err("--earliest, --latest and --shift need -g");
	if (headers && mode != READ)
		mq_usage_err("-H goes with reading the log, not with -g or "
		    "--trace");
	rp = (struct mq_replay){ { name, key, from, to }, since, until,
	    headers, limit, follow };

	q = mq_open(dbpath, mode == READ || mode == TRACE || dry ?
	    MQ_READ : MQ_UPDATE);
	mq_catch_stop();
	switch (mode) {
	case READ: status = mq_replay(q, &rp, &o); break;
	case MOVE: status = move(q, name); break;
	case DEAD: status = redrive(q, name); break;
	default: status = trace(q, name); break;
	}
	mq_close(q);
	free(offsets);
	free(headers);
	c = mq_finish();
	return c ? c : status;
}
