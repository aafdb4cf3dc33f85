/*
 * replay.c: mq-replay's reading of the log, without a group: a range of
 * offsets, bounded by times, of one key, with given headers, up to a
 * count, or followed like tail -f.  Read-only: nothing is written.
 *
 * The key narrows what the backend reads (it has an index); headers are
 * matched here, on each message read, so a header filter reads the whole
 * range (and the count is of the messages that match).
 */
#include <stdlib.h>

#include "mq.h"

#define CHUNK	512

/* 0 when it printed some (or followed), MQ_EX_NONE when nothing matched. */
int
mq_replay(struct mq *q, const struct mq_replay *rp, const struct mq_out *o)
{
	struct mq_msg *m = mq_array(NULL, CHUNK, sizeof *m);
	struct mq_waiter *w = NULL;
	struct mq_read rd = rp->rd;
	long got = 0;
	int i, n, want;

	if (rp->since >= 0) {
		int64_t off = mq_offset_at(q, rd.topic, rp->since);

		mq_check((int)(off < 0 ? off : 0), rd.topic, NULL);
		if (off > rd.from)
			rd.from = off;
	}
	while (!mq_stop) {
		want = CHUNK;
		if (rp->limit && !rp->headers && rp->limit - got < want)
			want = (int)(rp->limit - got);
		if ((n = mq_read(q, &rd, m, want)) < 0) {
			if (got || w)
				break;	/* deleted under us */
			mq_check(n, rd.topic, NULL);
		}
		for (i = 0; i < n && !(rp->limit && got >= rp->limit); i++) {
			if (rp->until >= 0 && m[i].ts > rp->until) {
				rd.to = 0;	/* past the end: stop */
				break;
			}
			rd.from = m[i].off + 1;
			if (rp->headers && !mq_header_match(m[i].headers,
			    rp->headers))
				continue;
			mq_out_msg(stdout, o, &m[i]);
			got++;
		}
		for (i = 0; i < n; i++)
			mq_msg_free(&m[i]);
		if (fflush(stdout) == EOF || rd.to == 0 || rd.from > rd.to ||
		    (rp->limit && got >= rp->limit))
			break;
		if (n == want)
			continue;
		if (!rp->follow)
			break;
		if (!w) {	/* made before one more look: nothing is missed */
			w = mq_waiter_new(q, &rd.topic, 1);
			continue;
		}
		mq_wait(w, INT64_MAX, NULL);
	}
	mq_waiter_free(w);
	free(m);
	return got || rp->follow ? 0 : MQ_EX_NONE;
}
