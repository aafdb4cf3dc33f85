/*
 * fuzz_duration: mq_parse_duration and mq_format_duration (parse.c).
 *
 * - mq_parse_duration accepts exactly what an independent reading of the
 *   grammar accepts (NUMBER UNIT ... with units ms s m h d w, not followed
 *   by a letter; a bare number, only last, is seconds; the total at most
 *   INT64_MAX/4), with the same value, computed here in 128 bits.
 * - What mq_format_duration prints for any value the parser can return
 *   (0 to INT64_MAX/4), parsed again, gives that value back.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "mq.h"
#include "fuzzutil.h"

#define LIMIT	(INT64_MAX / 4)

static int
ref_duration(const char *s, int64_t *out)
{
	static const struct { const char *u; int64_t ms; } units[] = {
		{ "ms", 1 }, { "w", 604800000 }, { "d", 86400000 },
		{ "h", 3600000 }, { "m", 60000 }, { "s", 1000 },
	};
	__int128 total = 0, n, mul;
	size_t i, len;

	if (!*s)
		return -1;
	while (*s) {
		if (*s < '0' || *s > '9')
			return -1;
		for (n = 0; *s >= '0' && *s <= '9'; s++)
			if ((n = n * 10 + (*s - '0')) > (__int128)INT64_MAX)
				return -1;
		if (!*s) {
			mul = 1000;
		} else {
			for (mul = 0, i = 0; i < sizeof units / sizeof *units; i++) {
				len = strlen(units[i].u);
				if (!strncmp(s, units[i].u, len) &&
				    !isalpha((unsigned char)s[len])) {
					mul = units[i].ms;
					s += len;
					break;
				}
			}
			if (!mul)
				return -1;
		}
		if ((total += n * mul) > LIMIT)
			return -1;
	}
	*out = (int64_t)total;
	return 0;
}

static void
round_trip(int64_t ms)
{
	char buf[64];
	int64_t back = -1;

	mq_format_duration(ms, buf, sizeof buf);
	FZ_CHECK(mq_parse_duration(buf, &back) == 0 && back == ms,
	    "mq_format_duration(%lld) = \"%s\", parsed back as %lld",
	    (long long)ms, buf, (long long)back);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data;
	size_t n = size;
	char *s = fz_str(data, size);
	int64_t ms = -1, ref = -1;
	int rc, want;

	rc = mq_parse_duration(s, &ms);
	want = ref_duration(s, &ref);
	if (rc != want || (rc == 0 && ms != ref)) {
		fz_show("input", s, strlen(s));
		fz_fail("mq_parse_duration: %d (%lld), expected %d (%lld)",
		    rc, (long long)ms, want, (long long)ref);
	}
	if (rc == 0) {
		FZ_CHECK(ms >= 0 && ms <= LIMIT, "%lld out of range",
		    (long long)ms);
		round_trip(ms);
	}
	/* any value the parser can return, from the input's first bytes */
	round_trip((int64_t)(fz_u64(&p, &n) % ((uint64_t)LIMIT + 1)));
	free(s);
	return 0;
}
