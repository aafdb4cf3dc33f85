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

#define CHUNK	256

static void
usage(FILE *f, int status)
{
	fprintf(f, "usage: mq-recv [-0Af] [-d FILE] [-g GROUP] [-n N] [-w DUR] "
	    "[--lease DUR]\n"
	    "               [--json | --format FMT] [--from latest] TOPIC\n"
	    "       mq-recv [-f] [-d FILE] [-g GROUP] [-j N] [-n N] [-w DUR] "
	    "[--lease DUR]\n"
	    "               TOPIC -- COMMAND [ARG ...]\n");
	exit(status);
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
	struct mq_claim cl;
	struct mq_exec x;
	struct mq_out o;
	struct mq_msg *msgs;
	struct mq_waiter *w = NULL;
	struct mq *q;
	int64_t wait = 0, next_due, until, now, member = 0, beat;
	long limit = -1, got = 0;
	int c, i, k, jobs = 1, follow = 0, want, status;

	mq_setprog(argv[0]);
	memset(&cl, 0, sizeof cl);
	memset(&o, 0, sizeof o);
	cl.group = "default";
	o.mode = MQ_OUT_LINE;
	while ((c = getopt_long(argc, argv, "+0Ad:fg:hj:n:Vw:", opts,
	    NULL)) != -1) {
		switch (c) {
		case '0': o.mode = MQ_OUT_NUL; break;
		case 'A': cl.autoack = 1; break;
		case 'd': dbpath = optarg; break;
		case 'f': follow = 1; break;
		case 'g': cl.group = mq_name_arg(optarg, "group"); break;
		case 'j': jobs = (int)mq_num_arg(optarg, 1, 1024, "job count");
			  break;
		case 'n': limit = (long)mq_num_arg(optarg, 0, 1000000000,
			      "count");
			  break;
		case 'w': wait = mq_duration_arg(optarg, "wait"); break;
		case 'l':
			cl.lease = mq_duration_arg(optarg, "lease");
			if (cl.lease < 1)
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
				cl.latest = 1;
			else if (strcmp(optarg, "earliest"))
				mq_die(MQ_EX_USAGE, "invalid --from '%s': want "
				    "earliest or latest", optarg);
			break;
		case 'h': usage(stdout, 0); break;
		case 'V': mq_version(); break;
		default: usage(stderr, MQ_EX_USAGE);
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 1)
		usage(stderr, MQ_EX_USAGE);
	if (limit < 0)
		limit = follow ? 0 : 1;	/* -f follows for ever unless -n */
	cl.topic = o.topic = mq_name_arg(argv[0], "topic");
	o.group = cl.group;
	o.with_receipt = !cl.autoack;
	if (cl.autoack && o.mode == MQ_OUT_LINE)
		o.mode = MQ_OUT_BODY;
	if (argc > 1 && strcmp(argv[1], "--"))
		mq_die(MQ_EX_USAGE, "unexpected argument '%s' (a command goes "
		    "after --)", argv[1]);
	if (argc == 2)
		mq_die(MQ_EX_USAGE, "no command after --");
	if (argc == 1 && jobs > 1)
		mq_die(MQ_EX_USAGE, "-j needs a command");
	if (argc > 2 && cl.autoack)
		mq_die(MQ_EX_USAGE, "-A does not go with a command: the "
		    "command's exit status settles");

	q = mq_open(dbpath, MQ_WRITE);
	until = mq_now() + wait;
	if (argc > 2) {
		memset(&x, 0, sizeof x);
		x.argv = argv + 2;
		x.jobs = jobs;
		x.limit = limit;
		x.follow = follow;
		x.until = until;
		status = mq_exec_run(q, &cl, &x);
		mq_close(q);
		return status ? status : mq_finish();
	}

	mq_catch_stop();
	msgs = mq_array(NULL, CHUNK, sizeof *msgs);
	if (follow || wait)
		w = mq_waiter_new(q);
	if (follow)	/* listed by mq-lag --consumers; its leases stay the receipts' */
		member = mq_consumer_join(q, cl.topic, cl.group, cl.latest,
		    NULL);
	beat = mq_now() + 10000;
	while (!mq_stop) {
		want = CHUNK;
		if (limit && limit - got < want)
			want = (int)(limit - got);
		k = mq_claim(q, &cl, msgs, want, &next_due);
		for (i = 0; i < k; i++) {
			mq_out_msg(stdout, &o, &msgs[i]);
			mq_msg_free(&msgs[i]);
		}
		if (k && fflush(stdout) == EOF)
			break;
		got += k;
		if (limit && got >= limit)
			break;
		if (k == want)
			continue;
		/* nothing more now: wait, or stop */
		now = mq_now();
		if (got && !follow)
			break;
		if (!follow && now >= until)
			break;
		if (!follow && next_due > until)
			next_due = until;
		if (next_due > now + 1000)
			next_due = now + 1000;	/* look for dead consumers */
		if (member && now >= beat) {
			mq_consumer_heartbeat(q, member, 0);
			beat = now + 10000;
		}
		mq_wait(w, next_due, mq_stop_fd());
	}
	if (member)
		mq_consumer_leave(q, member);
	mq_waiter_free(w);
	free(msgs);
	mq_close(q);
	status = mq_finish();
	if (status)
		return status;
	return got || mq_stop ? 0 : MQ_EX_NONE;
}
