/*
 * mq-recv: receive messages as a member of a consumer group, and print
 * them or run a command per message; from one topic, or from several
 * (priority lanes: strictly in the order given, or with --fair in turn).
 *
 * Printing: each message is leased to the receipt it is printed with; the
 * lease runs its full time whoever holds the receipt, so
 * `mq-recv t | handler | mq-ack` works.  Output happens only after the
 * claim is committed.  Exec mode (-- COMMAND) lives in common/exec.c.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mq.h"

static const char synopsis[] =
    "usage: mq-recv [-0Af] [-d FILE] [-g GROUP] [-n N] [-w DUR] "
    "[--lease DUR]\n"
    "               [--json | --format FMT] [--from latest] "
    "[--max-time DUR]\n"
    "               [--empty-ok] [--fair] TOPIC ...\n"
    "       mq-recv [-fv] [-d FILE] [-g GROUP] [-j N] [-n N] [-w DUR] "
    "[--lease DUR]\n"
    "               [--timeout DUR] [--max-time DUR] [--empty-ok] "
    "[--fair]\n"
    "               TOPIC ... -- COMMAND [ARG ...]\n";
static const char *const help[] = {
	"-0, --null",			"NUL-terminated output",
	"-A, --auto-ack",		"ack each message as it is printed",
	"--fair",			"take from the topics in turn, not in order",
	"-f, --follow",			"keep waiting for messages until a signal",
	"--format FMT",			"print each message as FMT",
	"--from earliest|latest",	"where a new group starts",
	"-g, --group GROUP",		"the consumer group (default: default)",
	"-j, --jobs N",			"run up to N commands at once",
	"--json",			"print JSON lines",
	"--lease DUR",			"lease the messages for DUR",
	"-n, --count N",		"receive up to N messages (0: all ready)",
	"--timeout DUR|none",		"stop a command that runs longer",
	"--max-time DUR",		"take no message after DUR",
	"--empty-ok",			"exit 0, not 1, when nothing came",
	"-v, --verbose",		"a line per message a command settled",
	"-w, --wait DUR",		"wait up to DUR for a message",
	NULL,
};

static struct mq_out o;
static struct mq *q;
static int out_error;	/* errno of the write that failed */

/*
 * Gives back what could not be written: with -A, the messages (their
 * auto-acks undone); else their leases, at once.
 */
static void
give_back(struct mq_follow *f, struct mq_msg *m, int n)
{
	struct mq_settle *s = mq_array(NULL, n, sizeof *s);
	int i;

	for (i = 0; i < n; i++) {
		memset(&s[i], 0, sizeof s[i]);
		s[i].reason = "output failed";
		if (f->c.autoack) {
			s[i].how = MQ_GIVEBACK;
			snprintf(s[i].r.topic, sizeof s[i].r.topic, "%s",
			    m[i].topic);
			snprintf(s[i].r.group, sizeof s[i].r.group, "%s",
			    f->c.group);
			s[i].r.off = m[i].off;
			s[i].r.attempt = m[i].attempt;
		} else {
			s[i].how = MQ_RELEASE;
			mq_parse_receipt(m[i].receipt, &s[i].r);
		}
	}
	mq_settle(q, s, n);
	free(s);
}

/*
 * Prints a claimed batch, a message at a time as far as the writes go:
 * what could not be written is given back, and the run ends.
 */
static int
print(struct mq_follow *f, struct mq_msg *m, int n)
{
	size_t len = 0, *end = mq_array(NULL, n, sizeof *end), done;
	char *buf = NULL;
	FILE *mf;
	int i, k;

	if (!(mf = open_memstream(&buf, &len)))
		mq_die(MQ_EX_SOFTWARE, "out of memory:");
	for (i = 0; i < n; i++) {
		mq_out_msg(mf, &o, &m[i]);
		fflush(mf);
		end[i] = len;
	}
	fclose(mf);
	done = mq_write(1, buf, len);
	out_error = done < len ? errno : 0;
	for (k = 0; k < n && end[k] <= done; k++)
		;
	if (k < n)
		give_back(f, m + k, n - k);
	for (i = 0; i < n; i++)
		mq_msg_free(&m[i]);
	free(buf);
	free(end);
	return k < n ? -1 : 0;
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
		{ "timeout", required_argument, NULL, 't' },
		{ "max-time", required_argument, NULL, 'T' },
		{ "empty-ok", no_argument, NULL, 'E' },
		{ "fair", no_argument, NULL, 'a' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *dbpath = NULL;
	struct mq_follow f;
	struct mq_claim *cl = &f.c;
	int64_t wait = 0, timeout = 0, max_time = 0;
	long limit = -1;
	int c, jobs = 1, status, empty_ok = 0;

	mq_begin(argv, synopsis, help);
	memset(&f, 0, sizeof f);
	cl->group = "default";
	o.mode = MQ_OUT_LINE;
	while ((c = getopt_long(argc, argv, "+0Ad:fg:hj:n:vVw:", opts,
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
				mq_usage_err("invalid lease: must be "
				    "above zero");
			break;
		case 't':	/* none: -1, no limit, not even the group's */
			if (!strcmp(optarg, "none"))
				timeout = -1;
			else if ((timeout = mq_duration_arg(optarg,
			    "timeout")) < 1)
				mq_usage_err("invalid timeout: must be above "
				    "zero");
			break;
		case 'T':
			if ((max_time = mq_duration_arg(optarg, "max-time")) < 1)
				mq_usage_err("invalid max-time: must be above "
				    "zero");
			break;
		case 'E': empty_ok = 1; break;
		case 'a': f.fair = 1; break;
		case 'v': f.verbose = 1; break;
		case 'J': o.mode = MQ_OUT_JSON; break;
		case 'F':
			if (mq_check_format(optarg) < 0)
				mq_usage_err("invalid format '%s': see "
				    "mq-recv(1) for the %% directives", optarg);
			o.mode = MQ_OUT_FORMAT;
			o.format = optarg;
			break;
		case 'r':
			if (!strcmp(optarg, "latest"))
				cl->latest = 1;
			else if (strcmp(optarg, "earliest"))
				mq_usage_err("invalid --from '%s': want "
				    "earliest or latest", optarg);
			break;
		case 'h': mq_help();
		case 'V': mq_version(); break;
		default: mq_usage();
		}
	}
	argc -= optind;
	argv += optind;
	if ((f.nlanes = mq_topics_arg(argc, argv)) < 1)
		mq_usage_err("missing TOPIC");
	if (limit < 0)
		limit = f.follow ? 0 : 1;	/* -f follows for ever unless -n */
	f.topics = (const char *const *)argv;
	o.topic = argv[0];
	o.group = cl->group;
	o.with_receipt = !cl->autoack;
	if (cl->autoack && o.mode == MQ_OUT_LINE)
		o.mode = MQ_OUT_BODY;
	argc -= f.nlanes;	/* "--" COMMAND ARG ... */
	if (argc == 1)
		mq_usage_err("no command after --");
	if (argc == 0 && (jobs > 1 || timeout || f.verbose))
		mq_usage_err("%s needs a command", timeout ? "--timeout" :
		    f.verbose ? "-v" : "-j");
	if (argc > 1 && cl->autoack)
		mq_usage_err("-A does not go with a command: the "
		    "command's exit status settles");

	q = mq_open(dbpath, MQ_WRITE);
	f.limit = limit;
	f.until = mq_now() + wait;
	f.stop_at = max_time ? mq_now() + max_time : 0;
	if (argc > 1) {
		status = mq_exec_run(q, &f, argv + f.nlanes + 1, jobs, timeout);
		mq_close(q);
		if (status == MQ_EX_NONE && empty_ok)
			status = 0;
		return status ? status : mq_finish();
	}
	/* listed by mq-lag --consumers; its leases stay the receipts' */
	f.member = f.follow;
	f.first = 1;
	f.got = print;
	c = mq_follow(q, &f);
	mq_close(q);
	if (c < 0) {	/* a pipe's reader that went away is no error */
		if (out_error != EPIPE) {
			errno = out_error;
			mq_warn("write error:");
		}
		return MQ_EX_IOERR;
	}
	if ((status = mq_finish()))
		return status;
	return f.taken || mq_stop || empty_ok ? 0 : MQ_EX_NONE;
}
