/*
 * parse.c: durations, times, names, numbers, backoff lists and receipts.
 *
 * Parsers return 0 or -1 and never print; the *_arg wrappers are for
 * command-line operands and die with a usage (64) or data (65) status.
 * Durations and times are int64 milliseconds; a time is since the epoch.
 *
 * A receipt is one shell-safe word, TOPIC:GROUP:OFFSET:ATTEMPT:TOKEN, with
 * TOKEN eight hex digits drawn at delivery.  Names cannot hold ':', so the
 * word splits without ambiguity.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <libutil.h>

#include "mq.h"

int64_t
mq_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Digits only, no sign, no overflow. */
static int
digits(const char **sp, int64_t *v)
{
	const char *s = *sp;
	int64_t n = 0;

	if (!isdigit((unsigned char)*s))
		return -1;
	for (; isdigit((unsigned char)*s); s++) {
		if (n > (INT64_MAX - (*s - '0')) / 10)
			return -1;
		n = n * 10 + (*s - '0');
	}
	*sp = s;
	*v = n;
	return 0;
}

/*
 * "250ms", "30s", "5m", "2h", "7d", "1w", "1h30m"; a bare number is
 * seconds.
 */
int
mq_parse_duration(const char *s, int64_t *ms)
{
	static const struct { const char *u; int64_t ms; } units[] = {
		{ "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 },
		{ "d", 86400000 }, { "w", 604800000 },
	};
	int64_t total = 0, n, mul;
	size_t i, len;

	if (!*s)
		return -1;
	while (*s) {
		if (digits(&s, &n) < 0)
			return -1;
		mul = 1000;
		if (*s) {
			mul = 0;
			for (i = 0; i < sizeof units / sizeof *units; i++) {
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
		if (n > (INT64_MAX / 4 - total) / mul)
			return -1;
		total += n * mul;
	}
	*ms = total;
	return 0;
}

void
mq_format_duration(int64_t ms, char *buf, size_t len)
{
	if (ms % 86400000 == 0 && ms >= 86400000)
		snprintf(buf, len, "%" PRId64 "d", ms / 86400000);
	else if (ms % 3600000 == 0 && ms >= 3600000)
		snprintf(buf, len, "%" PRId64 "h", ms / 3600000);
	else if (ms % 60000 == 0 && ms >= 60000)
		snprintf(buf, len, "%" PRId64 "m", ms / 60000);
	else if (ms % 1000 == 0)
		snprintf(buf, len, "%" PRId64 "s", ms / 1000);
	else
		snprintf(buf, len, "%" PRId64 "ms", ms);
}

/*
 * ISO 8601 ("2026-11-21T10:00:00Z", "2026-11-21 10:00:00.250+01:00",
 * "2026-11-21", local time without a zone), "@EPOCH" (seconds), a
 * duration meaning that long before now, or a word: "now", "today" and
 * "yesterday" (00:00 local time of that day; mktime() finds it across a
 * change of daylight saving time).
 */
int
mq_parse_time(const char *s, int64_t now, int64_t *ms)
{
	static const char *forms[] = {
		"%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S",
		"%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%d",
	};
	struct tm tm;
	const char *p = NULL;
	int64_t v, frac = 0, off = 0;
	time_t t;
	size_t i;
	int zone = 0, ndig;

	if (!strcmp(s, "now")) {
		*ms = now;
		return 0;
	}
	if (!strcmp(s, "today") || !strcmp(s, "yesterday")) {
		t = (time_t)(now / 1000);
		if (!localtime_r(&t, &tm))
			return -1;
		tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
		tm.tm_mday -= *s == 'y';
		tm.tm_isdst = -1;
		if ((t = mktime(&tm)) == (time_t)-1)
			return -1;
		*ms = (int64_t)t * 1000;
		return 0;
	}
	if (*s == '@') {
		s++;
		if (digits(&s, &v) < 0 || *s || v > INT64_MAX / 1000)
			return -1;
		*ms = v * 1000;
		return 0;
	}
	if (!mq_parse_duration(s, &v)) {
		*ms = now - v;
		return 0;
	}
	for (i = 0; i < sizeof forms / sizeof *forms; i++) {
		memset(&tm, 0, sizeof tm);
		if ((p = strptime(s, forms[i], &tm)))
			break;
	}
	if (!p)
		return -1;
	if (*p == '.' || *p == ',') {
		p++;
		for (ndig = 0; isdigit((unsigned char)*p); p++, ndig++)
			if (ndig < 3)
				frac = frac * 10 + (*p - '0');
		if (ndig == 0)
			return -1;
		for (; ndig < 3; ndig++)
			frac *= 10;
	}
	if (*p == 'Z' || *p == 'z') {
		zone = 1;
		p++;
	} else if (*p == '+' || *p == '-') {
		int sign = *p == '-' ? -1 : 1, hh, mm = 0;

		p++;
		if (!isdigit((unsigned char)p[0]) || !isdigit((unsigned char)p[1]))
			return -1;
		hh = (p[0] - '0') * 10 + (p[1] - '0');
		p += 2;
		if (*p == ':')
			p++;
		if (isdigit((unsigned char)p[0]) && isdigit((unsigned char)p[1])) {
			mm = (p[0] - '0') * 10 + (p[1] - '0');
			p += 2;
		}
		if (hh > 23 || mm > 59)
			return -1;
		zone = 1;
		off = sign * (hh * 3600 + mm * 60);
	}
	if (*p)
		return -1;
	errno = 0;	/* -1 is a time too (1969-12-31T23:59:59Z) */
	if (zone) {
		t = timegm(&tm);
		t -= off;
	} else {
		tm.tm_isdst = -1;
		t = mktime(&tm);
	}
	if (t == (time_t)-1 && errno == EOVERFLOW)
		return -1;
	*ms = (int64_t)t * 1000 + frac;
	return 0;
}

/* 1-128 of [A-Za-z0-9._-], not starting with '-' or '.'. */
int
mq_valid_name(const char *s)
{
	size_t n;

	if (!*s || *s == '-' || *s == '.')
		return 0;
	for (n = 0; s[n]; n++)
		if (n >= MQ_NAME_MAX || !(isalnum((unsigned char)s[n]) ||
		    s[n] == '.' || s[n] == '_' || s[n] == '-'))
			return 0;
	return 1;
}

const char *
mq_name_arg(const char *s, const char *what)
{
	if (!mq_valid_name(s))
		mq_usage_err("invalid %s name '%.*s': use 1-%d of "
		    "A-Z a-z 0-9 . _ -, not starting with - or .", what,
		    MQ_NAME_MAX + 8, s, MQ_NAME_MAX);
	return s;
}

/* A key or a dedup id: 1-1024 bytes of UTF-8, no NUL. */
int
mq_valid_key(const void *p, size_t n)
{
	return n >= 1 && n <= 1024 && !memchr(p, '\0', n) &&
	    mq_utf8_valid(p, n);
}

const char *
mq_key_arg(const char *s, const char *what)
{
	if (!mq_valid_key(s, strlen(s)))
		mq_usage_err("invalid %s: want 1-1024 bytes of UTF-8", what);
	return s;
}

/*
 * The topics that begin argv, up to a "--" or the end (mq-recv's lanes):
 * how many; each a valid name, none twice, at most MQ_LANES_MAX.
 */
int
mq_topics_arg(int argc, char **argv)
{
	int n, i;

	for (n = 0; n < argc && strcmp(argv[n], "--"); n++) {
		mq_name_arg(argv[n], "topic");
		for (i = 0; i < n; i++)
			if (!strcmp(argv[i], argv[n]))
				mq_usage_err("topic %s given twice", argv[n]);
	}
	if (n > MQ_LANES_MAX)
		mq_usage_err("too many topics: %d, at most %d", n,
		    MQ_LANES_MAX);
	return n;
}

int64_t
mq_duration_arg(const char *s, const char *what)
{
	int64_t ms;

	if (mq_parse_duration(s, &ms) < 0)
		mq_usage_err("invalid %s '%s': want a duration such as "
		    "250ms, 30s, 5m, 2h or 7d", what, s);
	return ms;
}

int64_t
mq_time_arg(const char *s, const char *what)
{
	int64_t ms;

	if (mq_parse_time(s, mq_now(), &ms) < 0)
		mq_die(MQ_EX_DATAERR, "invalid %s '%s': want ISO 8601 "
		    "(2026-11-21T10:00:00Z), @EPOCH, a duration ago, now, today "
		    "or yesterday", what, s);
	return ms;
}

long long
mq_num_arg(const char *s, long long min, long long max, const char *what)
{
	const char *errstr;
	long long n;

	n = strtonum(s, min, max, &errstr);
	if (errstr)
		mq_usage_err("invalid %s '%s': want a number from %lld to "
		    "%lld", what, s, min, max);
	return n;
}

/* A backoff schedule: durations separated by spaces or commas. */
int
mq_parse_backoff(const char *s, int64_t **steps, int *n)
{
	char *copy = mq_strdup(s), *tok, *save = NULL;
	int64_t *v = NULL;
	int k = 0;

	for (tok = strtok_r(copy, " ,\t", &save); tok;
	    tok = strtok_r(NULL, " ,\t", &save)) {
		v = mq_array(v, k + 1, sizeof *v);
		if (mq_parse_duration(tok, &v[k]) < 0 || k >= 100) {
			free(v);
			free(copy);
			return -1;
		}
		k++;
	}
	free(copy);
	if (k == 0) {
		free(v);
		return -1;
	}
	if (steps)
		*steps = v;
	else
		free(v);
	if (n)
		*n = k;
	return 0;
}

void
mq_format_receipt(char *buf, size_t len, const char *topic, const char *group,
    int64_t off, int attempt, uint32_t token)
{
	snprintf(buf, len, "%s:%s:%" PRId64 ":%d:%08" PRIx32, topic, group,
	    off, attempt, token);
}

static int
field(const char **sp, char *out)
{
	const char *s = *sp, *e = strchr(s, ':');

	if (!e || e - s > MQ_NAME_MAX)
		return -1;
	memcpy(out, s, e - s);
	out[e - s] = '\0';
	*sp = e + 1;
	return mq_valid_name(out) ? 0 : -1;
}

int
mq_parse_receipt(const char *s, struct mq_receipt *r)
{
	int64_t v;
	char *end;
	unsigned long tok;

	if (field(&s, r->topic) < 0 || field(&s, r->group) < 0)
		return -1;
	if (digits(&s, &r->off) < 0 || r->off < 1 || *s++ != ':')
		return -1;
	if (digits(&s, &v) < 0 || v < 1 || v > 1000000 || *s++ != ':')
		return -1;
	r->attempt = (int)v;
	if (strlen(s) != 8 || strspn(s, "0123456789abcdefABCDEF") != 8)
		return -1;	/* (strtoul would take "0x", spaces, a sign) */
	errno = 0;
	tok = strtoul(s, &end, 16);
	if (*end || errno)
		return -1;
	r->token = (uint32_t)tok;
	return 0;
}

/*
 * Until when a pause lasts: "forever", a duration from now (1h), or a
 * time as --until takes it.
 */
int64_t
mq_pause_arg(const char *s)
{
	int64_t d, now = mq_now();

	if (!strcmp(s, "forever"))
		return INT64_MAX;
	if (mq_parse_duration(s, &d) == 0)
		return now + d;
	if (mq_parse_time(s, now, &d) < 0)
		mq_die(MQ_EX_DATAERR, "invalid pause end '%s': want forever, a "
		    "duration from now (2h) or a time (ISO 8601, @EPOCH)", s);
	if (d <= now)
		mq_die(MQ_EX_DATAERR, "invalid pause end '%s': it is past", s);
	return d;
}

/*
 * mq-topic group --idempotent-by: dedup, key, field:N (1 to 1000) or
 * none ("").  Dies 64 on anything else.
 */
const char *
mq_idem_arg(const char *s)
{
	char *end;
	long n;

	if (!strcmp(s, "none"))
		return "";
	if (!strcmp(s, "dedup") || !strcmp(s, "key"))
		return s;
	if (!strncmp(s, "field:", 6) && s[6] >= '1' && s[6] <= '9') {
		n = strtol(s + 6, &end, 10);
		if (!*end && n <= 1000)
			return s;
	}
	mq_usage_err("invalid --idempotent-by '%s': want dedup, key, "
	    "field:N (1 to 1000) or none", s);
	return NULL;
}

/*
 * mq-topic group --rate N/DUR (DUR's number may go: 10/s) or none (0, 0).
 * Dies 64 on anything else.
 */
void
mq_rate_arg(const char *s, int64_t *n, int64_t *ms)
{
	char dur[32], *end;
	const char *slash = strchr(s, '/');

	*n = *ms = 0;
	if (!strcmp(s, "none"))
		return;
	if (slash && slash > s && slash[1] && *s >= '0' && *s <= '9' &&
	    strlen(slash + 1) < sizeof dur - 1) {
		*n = strtoll(s, &end, 10);
		snprintf(dur, sizeof dur, "%s%s", slash[1] >= '0' &&
		    slash[1] <= '9' ? "" : "1", slash + 1);
		if (end == slash && *n >= 1 && *n <= 1000000 &&
		    mq_parse_duration(dur, ms) == 0 && *ms >= 1 &&
		    *ms <= 366LL * 86400000)
			return;
	}
	mq_usage_err("invalid --rate '%s': want N/DUR (10/1s, 100/m: N from "
	    "1 to 1000000, DUR up to a year) or none", s);
}

/* mq-topic create and set: key=value settings; dies 64 on a bad one. */
void
mq_topic_settings(struct mq_topic_conf *c, int argc, char **argv)
{
	uint64_t n;
	char key[32], *v;
	int i;

	c->retention = c->dedup_window = c->max_size = MQ_KEEP;
	c->paused_until = c->ttl = MQ_KEEP;
	for (i = 0; i < argc; i++) {
		if (!(v = strchr(argv[i], '=')))
			mq_usage_err("invalid setting '%s': want "
			    "key=value", argv[i]);
		snprintf(key, sizeof key, "%.*s", (int)(v - argv[i]), argv[i]);
		v++;
		if (!strcmp(key, "retention")) {
			c->retention = !strcmp(v, "none") ? -1 :
			    mq_duration_arg(v, "retention");
		} else if (!strcmp(key, "dedup-window")) {
			c->dedup_window = mq_duration_arg(v, "dedup window");
		} else if (!strcmp(key, "max-size")) {
			if (expand_number(v, &n) < 0 || n < 1 ||
			    n > MQ_SIZE_LIMIT)
				mq_usage_err("invalid max-size '%s': want "
				    "1 to %d bytes (k, m suffixes work)", v,
				    MQ_SIZE_LIMIT);
			c->max_size = (int64_t)n;
		} else if (!strcmp(key, "paused")) {
			c->paused_until = !strcmp(v, "no") ? 0 :
			    mq_pause_arg(v);
		} else if (!strcmp(key, "ttl")) {
			if (strcmp(v, "none") && (c->ttl = mq_duration_arg(v,
			    "ttl")) < 1)
				mq_usage_err("invalid ttl: must be above zero");
			if (!strcmp(v, "none"))
				c->ttl = 0;
		} else {
			mq_usage_err("unknown setting '%s': want retention, "
			    "dedup-window, max-size, paused or ttl", key);
		}
	}
}

