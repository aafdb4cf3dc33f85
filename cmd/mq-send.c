/*
 * mq-send: append messages to a topic.
 *
 * Arguments are messages, all in one transaction.  Without them, stdin is
 * read as lines (or -0 NUL-terminated records, or --whole one message) and
 * committed in batches: a batch ends at BATCH_MAX messages, or when the
 * input has nothing more ready (after waiting --linger, default 0, for
 * more).  So a bulk load commits rarely and runs at SQLite's speed, while
 * a slow stream commits each line as soon as it arrives; under a fast
 * stream batches grow by themselves while a commit is under way.  Offsets
 * are printed only after their batch is committed.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mq.h"

#define BATCH_MAX	10000
#define BATCH_BYTES	(8 * 1048576)

static const char *dbpath, *key, *topic, *dedup, *outbox;
static char *headers;	/* -H: "NAME=VALUE\n" each */
static int quiet, unescape, delim = '\n', dedup_field, replace, follow;
static int64_t at = -1, delay = -1, linger, ttl;	/* -1, 0: not given */

struct batch {
	struct mq_rec	*rec;
	char		**id;	/* --dedup-field */
	struct mq_sent	*sent;
	size_t		 n, bytes;
};

static const char synopsis[] =
    "usage: mq-send [-0eq] [-d FILE] [-H NAME=VALUE ...] [-k KEY [--replace]]\n"
    "               [--whole] [--delay DUR | --at TIME]\n"
    "               [--dedup ID | --dedup-field N] [--linger DUR] [--ttl DUR]\n"
    "               TOPIC [MESSAGE ...]\n"
    "       mq-send [-fq] [-d FILE] --from-outbox APPDB\n";
static const char *const help[] = {
	"-0, --null",		"read NUL-terminated records, not lines",
	"--at TIME",		"deliver no earlier than TIME",
	"--dedup ID",		"drop the message if ID came within the window",
	"--dedup-field N",	"take each record's dedup id from tab field N",
	"--delay DUR",		"deliver no earlier than DUR from now",
	"-e, --escapes",	"decode C escapes in each message",
	"-f, --follow",		"with --from-outbox: keep moving new rows",
	"--from-outbox APPDB",	"move the rows of APPDB's outbox table into mq",
	"-H, --header NAME=VALUE", "give the messages header NAME",
	"-k, --key KEY",	"give the messages KEY",
	"--linger DUR",		"let a batch from stdin wait DUR for more",
	"-q, --quiet",		"print no offsets",
	"--replace",		"with -k: settle earlier ones of KEY not yet out",
	"--ttl DUR",		"no group hands it out DUR after it is sent",
	"--whole",		"read all of stdin as one message",
	NULL,
};

/* len 0: a record too long to hold */
static void
too_large(size_t len, int64_t max)
{
	char size[32] = "";

	if (len)
		snprintf(size, sizeof size, " of %zu bytes", len);
	mq_die(MQ_EX_DATAERR, "message%s refused: over the size limit of "
	    "%lld bytes of topic %s", size, (long long)max, topic);
}

/* Stores the batch in one transaction, then prints its offsets. */
static void
flush(struct mq *q, struct batch *b)
{
	struct mq_append a = { .topic = topic, .key = key, .delay = delay,
	    .at = at, .replace = replace, .ttl = ttl,
	    .headers = headers };	/* from the send */
	size_t i;

	if (b->n == 0)
		return;
	for (i = 0; i < b->n; i++)
		b->rec[i].dedup = dedup_field ? b->id[i] : dedup;
	if (mq_append(q, &a, b->rec, b->n, b->sent) == MQ_E_TOOBIG)
		too_large(b->rec[a.bad].len, a.max_size);
	for (i = 0; i < b->n; i++) {
		if (!quiet)
			printf("%lld\n", (long long)b->sent[i].off);
		free((void *)b->rec[i].body);
		if (b->id)
			free(b->id[i]);
	}
	fflush(stdout);
	b->n = b->bytes = 0;
}

static void
add(struct batch *b, char *body, size_t len)
{
	if (dedup_field && !(b->id[b->n] = mq_record_field(body, len,
	    dedup_field)))
		mq_die(MQ_EX_DATAERR, "message refused: no field %d to take "
		    "the dedup id from", dedup_field);
	if (dedup_field && !mq_valid_key(b->id[b->n], strlen(b->id[b->n])))
		mq_die(MQ_EX_DATAERR, "message refused: its dedup id (field "
		    "%d) is not 1-1024 bytes of UTF-8", dedup_field);
	b->rec[b->n].body = body;
	b->rec[b->n].len = len;
	b->n++;
	b->bytes += len;
}

static void
from_stdin(struct mq *q)
{
	struct mq_topic t;
	struct mq_input in;
	struct batch b;
	int64_t max = MQ_DEFAULT_MAX_SIZE, until = -1;
	size_t n, records = 0;
	char *p;
	int r;

	if (mq_topic_get(q, topic, &t))
		max = t.max_size;
	memset(&b, 0, sizeof b);
	b.rec = mq_array(NULL, BATCH_MAX, sizeof *b.rec);
	b.sent = mq_array(NULL, BATCH_MAX, sizeof *b.sent);
	if (dedup_field)
		b.id = mq_array(NULL, BATCH_MAX, sizeof *b.id);
	/* escapes take up to four bytes a byte: allow for them before decoding */
	mq_input_init(&in, 0, delim, unescape ? 4 * max : max);
	for (;;) {
		r = mq_input_next(&in, b.n ? until : -1, &p, &n);
		if (r == MQ_IN_EOF && delim < 0 && records == 0) {
			/* --whole: empty input is one empty message */
			r = MQ_IN_REC;
			p = "";
			n = 0;
		}
		if (r == MQ_IN_EOF)
			break;
		if (r == MQ_IN_TIMEOUT) {
			flush(q, &b);
			continue;
		}
		if (r == MQ_IN_LONG) {
			flush(q, &b);
			too_large(0, max);
		}
		if (b.n == 0)
			until = mq_now() + linger;
		records++;
		p = mq_record_decode(p, &n, unescape);
		if (n > (size_t)max) {
			flush(q, &b);
			too_large(n, max);
		}
		add(&b, p, n);
		if (b.n == BATCH_MAX || b.bytes >= BATCH_BYTES ||
		    (linger && mq_now() >= until))
			flush(q, &b);
	}
	flush(q, &b);
	mq_input_free(&in);
	free(b.id);
	free(b.rec);
	free(b.sent);
}

int
main(int argc, char *argv[])
{
	static const struct option opts[] = {
		{ "db", required_argument, NULL, 'd' },
		{ "key", required_argument, NULL, 'k' },
		{ "header", required_argument, NULL, 'H' },
		{ "null", no_argument, NULL, '0' },
		{ "whole", no_argument, NULL, 'W' },
		{ "escapes", no_argument, NULL, 'e' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "delay", required_argument, NULL, 'D' },
		{ "at", required_argument, NULL, 'a' },
		{ "linger", required_argument, NULL, 'L' },
		{ "dedup", required_argument, NULL, 'u' },
		{ "dedup-field", required_argument, NULL, 'U' },
		{ "replace", no_argument, NULL, 'r' },
		{ "ttl", required_argument, NULL, 't' },
		{ "from-outbox", required_argument, NULL, 'O' },
		{ "follow", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct mq *q;
	struct batch b;
	size_t n;
	char *p;
	int c, i, whole = 0;

	mq_begin(argv, synopsis, help);
	while ((c = getopt_long(argc, argv, "0d:efH:hk:qV", opts, NULL)) != -1) {
		switch (c) {
		case '0': delim = '\0'; break;
		case 'd': dbpath = optarg; break;
		case 'e': unescape = 1; break;
		case 'f': follow = 1; break;
		case 'H': mq_header_arg(&headers, optarg, 1); break;
		case 'k': key = mq_key_arg(optarg, "key"); break;
		case 'O': outbox = optarg; break;
		case 'q': quiet = 1; break;
		case 'r': replace = 1; break;
		case 'W': whole = 1; break;
		case 'D': delay = mq_duration_arg(optarg, "delay"); break;
		case 'a': at = mq_time_arg(optarg, "time"); break;
		case 'L': linger = mq_duration_arg(optarg, "linger"); break;
		case 't':
			if ((ttl = mq_duration_arg(optarg, "ttl")) < 1)
				mq_usage_err("invalid ttl: must be above zero");
			break;
		case 'u': dedup = mq_key_arg(optarg, "dedup id"); break;
		case 'U': dedup_field = (int)mq_num_arg(optarg, 1, 1000, "field");
			  break;
		case 'h': mq_help();
		case 'V': mq_version(); break;
		default: mq_usage();
		}
	}
	argc -= optind;
	argv += optind;
	if (outbox && (argc || key || headers || dedup || dedup_field || whole ||
	    replace || unescape || delay >= 0 || at >= 0 || linger || ttl ||
	    delim != '\n'))
		mq_usage_err("--from-outbox takes no TOPIC, MESSAGE or message "
		    "options: each row has its own");
	if (outbox)
		return mq_outbox_send(dbpath, outbox, follow, quiet);
	if (follow)
		mq_usage_err("-f follows an outbox: give --from-outbox APPDB");
	if (argc < 1)
		mq_usage_err("missing TOPIC");
	if (delay >= 0 && at >= 0)
		mq_usage_err("--delay and --at exclude each other");
	if (replace && !key)
		mq_usage_err("--replace needs -k KEY");
	topic = mq_name_arg(argv[0], "topic");
	if (whole)
		delim = -1;
	if (argc > 1 && (whole || delim != '\n'))
		mq_usage_err("-0 and --whole read stdin: give no "
		    "MESSAGE arguments");
	if (dedup && dedup_field)
		mq_usage_err("--dedup and --dedup-field exclude each other");
	if (dedup && argc != 2 && !whole)
		mq_usage_err("--dedup ID names one message: give one "
		    "MESSAGE or --whole (--dedup-field for a stream)");
	if (dedup_field && argc != 1)
		mq_usage_err("--dedup-field reads stdin: give no MESSAGE "
		    "arguments");
	if ((q = mq_open(dbpath, MQ_WRITE)) && argc == 1) {
		from_stdin(q);
	} else {
		memset(&b, 0, sizeof b);
		b.rec = mq_array(NULL, argc - 1, sizeof *b.rec);
		b.sent = mq_array(NULL, argc - 1, sizeof *b.sent);
		for (i = 1; i < argc; i++) {
			n = strlen(argv[i]);
			p = mq_record_decode(argv[i], &n, unescape);
			add(&b, p, n);
		}
		flush(q, &b);
		free(b.rec);
		free(b.sent);
	}
	mq_close(q);
	free(headers);
	return mq_finish();
}
