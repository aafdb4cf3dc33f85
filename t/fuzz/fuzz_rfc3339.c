/*
 * fuzz_rfc3339: mq_rfc3339 (out.c), for every time mq_parse_time can
 * return, before 1970 too (mq-send --at takes such times).
 *
 * - The output has RFC 3339's shape, YYYY-MM-DDTHH:MM:SS.mmmZ.
 * - Its fields, read back here with a calendar computation of our own
 *   (days from the civil date, no libc), give the same millisecond.
 * - mq_parse_time reads it back to the same millisecond.
 * - Any int64 at all fits the 40 bytes the callers give it.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "mq.h"
#include "fuzzutil.h"

#define MIN_MS	INT64_C(-62167219200000)	/* 0000-01-01T00:00:00Z */
#define MAX_MS	INT64_C(253402300799999)	/* 9999-12-31T23:59:59.999Z */

/* YYYY-MM-DDTHH:MM:SS.mmmZ */
static int
shape(const char *s)
{
	static const char pat[] = "dddd-dd-ddTdd:dd:dd.dddZ";
	size_t i;

	if (strlen(s) != sizeof pat - 1)
		return 0;
	for (i = 0; pat[i]; i++)
		if (pat[i] == 'd' ? !isdigit((unsigned char)s[i]) : s[i] != pat[i])
			return 0;
	return 1;
}

static int64_t
num(const char *s, int n)
{
	int64_t v = 0;

	while (n--)
		v = v * 10 + (*s++ - '0');
	return v;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant). */
static int64_t
days_from_civil(int64_t y, int64_t m, int64_t d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data;
	size_t n = size;
	uint64_t raw = fz_u64(&p, &n);
	int64_t ms, back = 0, mine;
	char buf[40];
	int rc;

	/* anything: no overflow, no truncation */
	mq_rfc3339((int64_t)raw, buf, sizeof buf);
	FZ_CHECK(strlen(buf) < sizeof buf - 1 && buf[strlen(buf) - 1] == 'Z',
	    "mq_rfc3339(%lld) = \"%s\"", (long long)raw, buf);

	ms = MIN_MS + (int64_t)(raw % (uint64_t)(MAX_MS - MIN_MS + 1));
	mq_rfc3339(ms, buf, sizeof buf);
	FZ_CHECK(shape(buf), "mq_rfc3339(%lld) = \"%s\"", (long long)ms, buf);
	mine = ((days_from_civil(num(buf, 4), num(buf + 5, 2),
	    num(buf + 8, 2)) * 24 + num(buf + 11, 2)) * 60 +
	    num(buf + 14, 2)) * 60 + num(buf + 17, 2);
	mine = mine * 1000 + num(buf + 20, 3);
	FZ_CHECK(mine == ms, "mq_rfc3339(%lld) = \"%s\", which is %lld",
	    (long long)ms, buf, (long long)mine);
	rc = mq_parse_time(buf, 0, &back);
	FZ_CHECK(rc == 0 && back == ms, "mq_rfc3339(%lld) = \"%s\", "
	    "mq_parse_time: %d (%lld)", (long long)ms, buf, rc,
	    (long long)back);
	return 0;
}
