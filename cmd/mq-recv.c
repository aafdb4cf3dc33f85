/*
 * mq-recv: receive messages as a member of a consumer group, and print
 * them or run a command per message.
 *
 * Printing: each message is leased to the receipt it is printed with; the
 * lease runs its full time whoever holds the receipt, so
 * `mq-recv t | handler | mq-ack` works.  Output happens only after the
 * claim is committed.  Exec mode (-- COMMAND) lives in common/exec.c.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mq.h"

static const char synopsis[] =
    "usage: mq-recv [-0Af] [-d FILE] [-g GROUP] [-n N] [-w DUR] "
    "[--lease DUR]\n"
    "               [--json | --format FMT] [--from latest] TOPIC\n"
    "       mq-recv [-f] [-d FILE] [-g GROUP] [-j N] [-n N] [-w DUR] "
    "[--lease DUR]\n"
    "               TOPIC -- COMMAND [ARG ...]\n";

static struct mq_out o;

/* Prints a claimed batch; a write error ends the run. */
static int
print(struct mq_follow *f, struct mq_msg *m, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		mq_out_msg(stdout, &o, &m[i]);
		mq_msg_free(&m[i]);
	}
	return fflush(stdout) == EOF ? -1 : 0;
}

int
main(int argc, char *argv[])
{
	static const struct option opts[] = {
		{ "db", required_argument, NULL, 'd' },
		{ "group", required_argument, NULL, 'g' },
		{ "count", required_argument, NULL, 'n' },
		{ "wait", required_argument, NULL, 'w' },
		{ "follow", no_argument, NULL, 'f' },
		{ "lease", required_argument, NULL, 'l' },
		{ "null", no_argument, NULL, '0' },
		{ "json", no_argument, NULL, 'J' },
		{ "format", required_argument, NULL, 'F' },
		{ "auto-ack", no_argument, NULL, 'A' },
		{ "jobs", required_argument, NULL, 'j' },
		{ "from", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *dbpath = NULL;
	struct mq_follow f;
	struct mq_claim *cl = &f.c;
	struct mq *q;
	int64_t wait = 0;
	long limit = -1;
	int c, jobs = 1, status;

	mq_setprog(argv[0]);
	memset(&f, 0, sizeof f);
	cl->group = "default";
	o.mode = MQ_OUT_LINE;
	while ((c = getopt_long(argc, argv, "+0Ad:fg:hj:n:Vw:", opts,
	    NULL)) != -1) {
		switch (c) {
		case '0': o.mode = MQ_OUT_NUL; break;
		case 'A': cl->autoack = 1; break;
		case 'd': dbpath = optarg; break;
		case 'f': f.follow = 1; break;
		case 'g': cl->group = mq_name_arg(optarg, "group"); break;
		case 'j': jobs = (int)mq_num_arg(optarg, 1, 1024, "job count");
			  break;
		case 'n': limit = (long)mq_num_arg(optarg, 0, 1000000000,
			      "count");
			  break;
		case 'w': wait = mq_duration_arg(optarg, "wait"); break;
		case 'l':
			cl->lease = mq_duration_arg(optarg, "lease");
			if (cl->lease < 1)
				mq_die(MQ_EX_USAGE, "invalid lease: must be "
				    "above zero");
			break;
		case 'J': o.mode = MQ_OUT_JSON; break;
		case 'F':
			if (mq_check_format(optarg) < 0)
				mq_die(MQ_EX_USAGE, "invalid format '%s': see "
				    "mq-recv(1) for the %% directives", optarg);
			o.mode = MQ_OUT_FORMAT;
			o.format = optarg;
			break;
		case 'r':
			if (!strcmp(optarg, "latest"))
				cl->latest = 1;
			else if (strcmp(optarg, "earliest"))
				mq_die(MQ_EX_USAGE, "invalid --from '%s': want "
				    "earliest or latest", optarg);
			break;
		case 'h': mq_usage(stdout, synopsis, 0);
		case 'V': mq_version(); break;
		default: mq_usage(stderr, synopsis, MQ_EX_USAGE);
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 1)
		mq_usage(stderr, synopsis, MQ_EX_USAGE);
	if (limit < 0)
		limit = f.follow ? 0 : 1;	/* -f follows for ever unless -n */
	cl->topic = o.topic = mq_name_arg(argv[0], "topic");
	o.group = cl->group;
	o.with_receipt = !cl->autoack;
	if (cl->autoack && o.mode == MQ_OUT_LINE)
		o.mode = MQ_OUT_BODY;
	if (argc > 1 && strcmp(argv[1], "--"))
		mq_die(MQ_EX_USAGE, "unexpected argument '%s' (a command goes "
		    "after --)", argv[1]);
	if (argc == 2)
		mq_die(MQ_EX_USAGE, "no command after --");
	if (argc == 1 && jobs > 1)
		mq_die(MQ_EX_USAGE, "-j needs a command");
	if (argc > 2 && cl->autoack)
		mq_die(MQ_EX_USAGE, "-A does not go with a command: the "
		    "command's exit status settles");

	q = mq_open(dbpath, MQ_WRITE);
	f.limit = limit;
	f.until = mq_now() + wait;
	if (argc > 2) {
		status = mq_exec_run(q, &f, argv + 2, jobs);
		mq_close(q);
		return status ? status : mq_finish();
	}
	/* listed by mq-lag --consumers; its leases stay the receipts' */
	f.member = f.follow;
	f.first = 1;
	f.got = print;
	c = mq_follow(q, &f);
	mq_close(q);
	if ((status = mq_finish()) || c < 0)
		return status ? status : MQ_EX_IOERR;
	return f.taken || mq_stop ? 0 : MQ_EX_NONE;
}
