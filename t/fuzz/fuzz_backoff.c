/*
 * fuzz_backoff: mq_parse_backoff (parse.c) and the rules that use it,
 * mq_backoff, mq_rule_fail and mq_rule_expired (policy.c).
 *
 * Input: the schedule, then optionally a NUL and bytes for the rules'
 * numbers (attempt, max_attempts, delay).
 *
 * - mq_parse_backoff accepts exactly 1-100 durations separated by runs of
 *   spaces, commas and tabs, each as mq_parse_duration reads it, and
 *   returns them in order; with NULL outputs it says the same (and, like
 *   every path here, leaks nothing: LeakSanitizer checks each input).
 * - mq_backoff gives step min(attempt, n) (attempt < 1 counts as 1), or
 *   10 s for a schedule it cannot read.
 * - mq_rule_fail: at max_attempts the delivery is dead, due now, with a
 *   reason that says so; before, it waits the delay asked or the backoff
 *   step, with the reason given.  mq_rule_expired: dead exactly at
 *   max_attempts.  Reasons always end within their buffer.
 */
#include <stdlib.h>
#include <string.h>

#include "mq.h"
#include "fuzzutil.h"

#define NOW	INT64_C(1795255200000)

/* The schedule split by hand: 0 and the steps, or -1. */
static int
ref_backoff(const char *s, int64_t *steps, int *n)
{
	char *tok;
	size_t len;
	int rc;

	*n = 0;
	for (;;) {
		s += strspn(s, " ,\t");
		if (!*s)
			break;
		len = strcspn(s, " ,\t");
		if (*n >= 100)
			return -1;
		tok = fz_str(s, len);
		rc = mq_parse_duration(tok, &steps[*n]);
		free(tok);
		if (rc < 0)
			return -1;
		(*n)++;
		s += len;
	}
	return *n ? 0 : -1;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fz_str(data, size);
	size_t sl = strlen(s), n = sl < size ? size - sl - 1 : 0;
	const uint8_t *p = data + size - n;
	int64_t want[101], *steps = NULL, d, delay;
	int rc, ref, k = -1, nref, i, attempt, tries[8];
	struct mq_group g;
	struct mq_verdict v;
	char *why;

	rc = mq_parse_backoff(s, &steps, &k);
	ref = ref_backoff(s, want, &nref);
	if (rc != ref || (rc == 0 && (k != nref ||
	    memcmp(steps, want, k * sizeof *steps)))) {
		fz_show("schedule", s, sl);
		fz_fail("mq_parse_backoff: %d (%d steps), expected %d (%d)",
		    rc, k, ref, nref);
	}
	FZ_CHECK(mq_parse_backoff(s, NULL, NULL) == rc, "NULL outputs differ");

	/* attempts around the ends of the schedule, and one from the input */
	tries[0] = -1;
	tries[1] = 0;
	tries[2] = 1;
	tries[3] = 2;
	tries[4] = nref;
	tries[5] = nref + 1;
	tries[6] = 1000000;
	tries[7] = (int)(fz_u32(&p, &n) % 200);
	for (i = 0; i < 8; i++) {
		attempt = tries[i] < 1 ? 1 : tries[i];
		d = ref < 0 ? 10000 : want[(attempt < nref ? attempt : nref) - 1];
		FZ_CHECK(mq_backoff(s, tries[i]) == d, "mq_backoff(\"%s\", %d) "
		    "= %lld, expected %lld", s, tries[i],
		    (long long)mq_backoff(s, tries[i]), (long long)d);
	}

	/* the rules, with this schedule as the group's */
	memset(&g, 0, sizeof g);
	snprintf(g.backoff, sizeof g.backoff, "%s", s);
	g.max_attempts = 1 + (int)(fz_u32(&p, &n) % 1000);
	attempt = 1 + (int)(fz_u32(&p, &n) % 1001);
	delay = fz_u64(&p, &n) % 2 ? -1 :
	    (int64_t)(fz_u64(&p, &n) % ((uint64_t)INT64_MAX / 4));
	why = n ? fz_str(p, n) : NULL;
	mq_rule_fail(&g, attempt, NOW, delay, why, &v);
	FZ_CHECK(memchr(v.reason, '\0', sizeof v.reason), "reason not ended");
	if (attempt >= g.max_attempts) {
		FZ_CHECK(v.state == MQ_DEAD && v.due == NOW &&
		    !strncmp(v.reason, "attempts exhausted (", 20),
		    "attempt %d of %d: state %d due %lld reason \"%s\"",
		    attempt, g.max_attempts, v.state, (long long)v.due,
		    v.reason);
	} else {
		d = delay >= 0 ? delay : mq_backoff(g.backoff, attempt);
		FZ_CHECK(v.state == MQ_WAITING && v.due == NOW + d &&
		    (why ? !strncmp(v.reason, why, sizeof v.reason - 1) :
		    !v.reason[0]), "attempt %d of %d, delay %lld: state %d "
		    "due %lld reason \"%s\"", attempt, g.max_attempts,
		    (long long)delay, v.state, (long long)v.due, v.reason);
	}
	i = mq_rule_expired(&g, attempt, attempt, &v);
	FZ_CHECK(i == (attempt >= g.max_attempts) &&
	    v.state == (i ? MQ_DEAD : MQ_WAITING) &&
	    memchr(v.reason, '\0', sizeof v.reason), "mq_rule_expired: %d", i);

	free(why);
	free(steps);
	free(s);
	return 0;
}
