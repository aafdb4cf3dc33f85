/*
 * fuzz_time: mq_parse_time (parse.c), and mq_rfc3339 (out.c) read back.
 *
 * - "@N" is accepted exactly when N is all digits and N*1000 fits, as N
 *   seconds; anything mq_parse_duration takes means that long before now.
 * - A well-formed ISO 8601 time (YYYY-MM-DD, then optionally T or space
 *   and HH:MM[:SS[.fff]], then optionally Z or +-HH[[:]MM], every field
 *   in range, the day in its month) is accepted; with a zone, as the
 *   millisecond computed here without libc (days from the civil date).
 * - Other input (through strptime, timegm and mktime in a zone with
 *   summer time) never crashes or overflows, and an accepted time from
 *   1970 to 9999, printed by mq_rfc3339, parses back to itself.
 * - mq_rfc3339 then mq_parse_time gives back every millisecond from 1970
 *   to 9999-12-31T23:59:59.999Z.  Times before 1970 are fuzz_rfc3339's
 *   (kept apart so a fault there does not stop this target).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mq.h"
#include "fuzzutil.h"

#define NOW	INT64_C(1795255200000)		/* 2026-11-21T10:00:00Z */
#define MAX_MS	INT64_C(253402300799999)	/* 9999-12-31T23:59:59.999Z */

int	LLVMFuzzerInitialize(int *argc, char ***argv);

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	/* a zone with summer time, without needing tzdata */
	setenv("TZ", "CET-1CEST,M3.5.0,M10.5.0/3", 1);
	tzset();
	return 0;
}

/* YYYY-MM-DDTHH:MM:SS.mmmZ */
static int
rfc3339_shape(const char *s)
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

static void
round_trip(int64_t ms, const char *why)
{
	char buf[64];
	int64_t back = 0;
	int rc;

	mq_rfc3339(ms, buf, sizeof buf);
	FZ_CHECK(rfc3339_shape(buf), "mq_rfc3339(%lld) = \"%s\" (%s)",
	    (long long)ms, buf, why);
	rc = mq_parse_time(buf, NOW, &back);
	FZ_CHECK(rc == 0 && back == ms, "mq_rfc3339(%lld) = \"%s\", "
	    "mq_parse_time: %d (%lld) (%s)", (long long)ms, buf, rc,
	    (long long)back, why);
}

static int
num(const char **s, int n, int *v)
{
	for (*v = 0; n--; (*s)++) {
		if (**s < '0' || **s > '9')
			return -1;
		*v = *v * 10 + (**s - '0');
	}
	return 0;
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

/*
 * A well-formed ISO 8601 time: 1 and, with a zone (*zoned), its
 * millisecond; 0 for anything else.
 */
static int
strict_iso(const char *s, int64_t *ms, int *zoned)
{
	static const int mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31,
	    30, 31 };
	int y, mo, d, h = 0, mi = 0, sec = 0, frac = 0, k, oh, om = 0, sign;
	int64_t off = 0;

	if (num(&s, 4, &y) || *s++ != '-' || num(&s, 2, &mo) || *s++ != '-' ||
	    num(&s, 2, &d) || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] +
	    (mo == 2 && y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)))
		return 0;
	if (*s == 'T' || *s == ' ') {
		s++;
		if (num(&s, 2, &h) || *s++ != ':' || num(&s, 2, &mi) ||
		    h > 23 || mi > 59)
			return 0;
		if (*s == ':') {
			s++;
			if (num(&s, 2, &sec) || sec > 59)
				return 0;
			if (*s == '.' || *s == ',') {
				if (s[1] < '0' || s[1] > '9')
					return 0;
				for (s++, k = 0; *s >= '0' && *s <= '9'; s++, k++)
					if (k < 3)
						frac = frac * 10 + (*s - '0');
				for (; k < 3; k++)
					frac *= 10;
			}
		}
	}
	*zoned = 1;
	if (*s == 'Z' || *s == 'z') {
		s++;
	} else if (*s == '+' || *s == '-') {
		sign = *s++ == '-' ? -1 : 1;
		if (num(&s, 2, &oh) || oh > 23)
			return 0;
		if (*s == ':' || (*s >= '0' && *s <= '9')) {
			if (*s == ':')
				s++;
			if (num(&s, 2, &om) || om > 59)
				return 0;
		}
		off = sign * (oh * 3600 + om * 60);
	} else {
		*zoned = 0;
	}
	if (*s)
		return 0;
	*ms = (((days_from_civil(y, mo, d) * 24 + h) * 60 + mi) * 60 + sec -
	    off) * 1000 + frac;
	return 1;
}

/* "@N": digits only, N * 1000 within int64. */
static int
ref_epoch(const char *s, int64_t *ms)
{
	__int128 v = 0;

	if (!*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		if ((v = v * 10 + (*s - '0')) > INT64_MAX / 1000)
			return -1;
	}
	*ms = (int64_t)v * 1000;
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data;
	size_t n = size;
	char *s = fz_str(data, size);
	int64_t ms = 0, want = 0, d;
	int rc, ref, zoned;

	rc = mq_parse_time(s, NOW, &ms);
	if (s[0] == '@') {
		ref = ref_epoch(s + 1, &want);
		if (rc != ref || (rc == 0 && ms != want)) {
			fz_show("input", s, strlen(s));
			fz_fail("mq_parse_time: %d (%lld), expected %d (%lld)",
			    rc, (long long)ms, ref, (long long)want);
		}
	} else if (mq_parse_duration(s, &d) == 0) {
		FZ_CHECK(rc == 0 && ms == NOW - d, "a duration %lld ago: %d (%lld)",
		    (long long)d, rc, (long long)ms);
	} else {
		if (strict_iso(s, &want, &zoned) && (rc != 0 ||
		    (zoned && ms != want))) {
			fz_show("input", s, strlen(s));
			if (zoned)
				fz_fail("well-formed ISO 8601: mq_parse_time %d "
				    "(%lld), expected 0 (%lld)", rc,
				    (long long)ms, (long long)want);
			fz_fail("well-formed local time refused");
		}
		if (rc == 0 && ms >= 0 && ms <= MAX_MS)
			round_trip(ms, s);
	}
	/* any time from 1970 to 9999, from the input's first bytes */
	round_trip((int64_t)(fz_u64(&p, &n) % (uint64_t)(MAX_MS + 1)),
	    "from bytes");
	free(s);
	return 0;
}
