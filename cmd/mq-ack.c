/*
 * mq-ack: settle deliveries by receipt: ack (default), fail for a retry,
 * dead-letter, or extend the lease.
 *
 * Receipts come from the arguments, or from the first field of each stdin
 * line, so `mq-recv t | handler | mq-ack` works; stdin is settled in
 * batches cut by count and a short linger, like mq-send's.  A batch is
 * checked whole before it is applied: a malformed receipt exits 65 with
 * that batch unapplied.  Stale and unknown receipts change nothing, are
 * named on stderr, and make the status 1; the others are applied.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mq.h"

#define BATCH_MAX	1000

static struct mq_settle how;	/* the outcome for every receipt */
static int status;

static const char synopsis[] =
    "usage: mq-ack [-d FILE] [RECEIPT ...]\n"
    "       mq-ack [-d FILE] --fail [--delay DUR] [--reason TEXT] "
    "[RECEIPT ...]\n"
    "       mq-ack [-d FILE] --dead [--reason TEXT] [RECEIPT ...]\n"
    "       mq-ack [-d FILE] --extend DUR [RECEIPT ...]\n";
static const char *const help[] = {
	"--dead",		"make the messages dead letters now",
	"--delay DUR",		"with --fail: deliver again after DUR",
	"--extend DUR",		"extend the lease to DUR from now",
	"--fail",		"the delivery failed: deliver it again later",
	"--reason TEXT",	"with --fail or --dead: why",
	NULL,
};

/* Settles a batch in one transaction; then says what did not apply. */
static void
apply(struct mq *q, struct mq_settle *s, char **text, size_t n)
{
	size_t i;

	mq_settle(q, s, n);
	for (i = 0; i < n; i++) {
		if (s[i].result == MQ_STALE || s[i].result == MQ_UNKNOWN) {
			status = MQ_EX_NONE;
			mq_warn("%s receipt %s: nothing changed",
			    s[i].result == MQ_STALE ? "stale" : "unknown",
			    text[i]);
		} else if (s[i].result == MQ_WENT_DEAD) {
			mq_warn("%s: attempts exhausted: now a dead letter",
			    text[i]);
		}
		free(text[i]);
	}
}

static void
parse(const char *s, struct mq_settle *st)
{
	*st = how;
	if (mq_parse_receipt(s, &st->r) < 0)
		mq_die(MQ_EX_DATAERR, "malformed receipt '%.*s': want "
		    "TOPIC:GROUP:OFFSET:ATTEMPT:TOKEN as mq-recv prints it",
		    300, s);
}

static void
from_stdin(struct mq *q)
{
	struct mq_settle *r = mq_array(NULL, BATCH_MAX, sizeof *r);
	char **text = mq_array(NULL, BATCH_MAX, sizeof *text);
	struct mq_input in;
	int64_t until = -1;
	size_t n = 0, len, f;
	char *p;
	int rc;

	mq_input_init(&in, 0, '\n', 65536);
	for (;;) {
		rc = mq_input_next(&in, n ? until : -1, &p, &len);
		if (rc == MQ_IN_EOF)
			break;
		if (rc == MQ_IN_TIMEOUT || rc == MQ_IN_LONG) {
			if (rc == MQ_IN_LONG)
				mq_die(MQ_EX_DATAERR, "malformed receipt: "
				    "line too long");
			apply(q, r, text, n);
			n = 0;
			continue;
		}
		f = 0;
		while (f < len && (p[f] == ' ' || p[f] == '\t'))
			f++;
		p += f;
		len -= f;
		for (f = 0; f < len && p[f] != ' ' && p[f] != '\t' &&
		    p[f] != '\r'; f++)
			;
		if (f == 0)
			continue;	/* blank line */
		if (n == 0)
			until = mq_now() + 10;
		text[n] = mq_memdup(p, f);
		parse(text[n], &r[n]);
		n++;
		if (n == BATCH_MAX || mq_now() >= until) {
			apply(q, r, text, n);
			n = 0;
		}
	}
	apply(q, r, text, n);
	mq_input_free(&in);
	free(r);
	free(text);
}

int
main(int argc, char *argv[])
{
	static const struct option opts[] = {
		{ "db", required_argument, NULL, 'd' },
		{ "fail", no_argument, NULL, 'F' },
		{ "dead", no_argument, NULL, 'D' },
		{ "extend", required_argument, NULL, 'E' },
		{ "delay", required_argument, NULL, 'y' },
		{ "reason", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *dbpath = NULL;
	struct mq_settle *r;
	char **text;
	struct mq *q;
	int c, i, modes = 0, delay = 0;

	mq_begin(argv, synopsis, help);
	how.how = MQ_ACK;
	how.delay = -1;
	while ((c = getopt_long(argc, argv, "d:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dbpath = optarg; break;
		case 'F': how.how = MQ_FAIL; modes++; break;
		case 'D': how.how = MQ_DEAD_LETTER; modes++; break;
		case 'E':
			how.how = MQ_EXTEND;
			how.extend = mq_duration_arg(optarg, "lease extension");
			modes++;
			break;
		case 'y':
			how.delay = mq_duration_arg(optarg, "delay");
			delay = 1;
			break;
		case 'r':
			if (strlen(optarg) > 1000)
				mq_usage_err("reason too long: at most "
				    "1000 bytes");
			if (!mq_utf8_valid((unsigned char *)optarg,
			    strlen(optarg)))	/* PostgreSQL refuses it */
				mq_usage_err("invalid reason: want UTF-8");
			how.reason = optarg;
			break;
		case 'h': mq_help();
		case 'V': mq_version(); break;
		default: mq_usage();
		}
	}
	argc -= optind;
	argv += optind;
	if (modes > 1)
		mq_usage_err("--fail, --dead and --extend exclude each "
		    "other");
	if (delay && how.how != MQ_FAIL)
		mq_usage_err("--delay goes with --fail");
	if (how.reason && how.how != MQ_FAIL && how.how != MQ_DEAD_LETTER)
		mq_usage_err("--reason goes with --fail or --dead");

	/* check every argument before touching the database */
	r = mq_array(NULL, argc, sizeof *r);
	text = mq_array(NULL, argc, sizeof *text);
	for (i = 0; i < argc; i++) {
		parse(argv[i], &r[i]);
		text[i] = mq_strdup(argv[i]);
	}
	q = mq_open(dbpath, MQ_UPDATE);
	if (argc)
		apply(q, r, text, argc);
	else
		from_stdin(q);
	mq_close(q);
	free(r);
	free(text);
	c = mq_finish();
	return c ? c : status;
}
