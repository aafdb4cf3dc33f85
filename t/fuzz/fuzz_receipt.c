/*
 * fuzz_receipt: mq_parse_receipt and mq_format_receipt (parse.c).
 *
 * - Any string: when mq_parse_receipt accepts it, it is
 *   TOPIC:GROUP:OFFSET:ATTEMPT:TOKEN as mq-ack(1) documents it: two
 *   valid names, OFFSET >= 1 and ATTEMPT 1-1000000 in decimal digits,
 *   TOKEN exactly eight hex digits; the fields it returns are those; and
 *   mq_format_receipt of them, parsed again, gives the same fields in
 *   fewer than MQ_RECEIPT_MAX bytes.
 * - Fields built from the input (any valid names up to 128 bytes, any
 *   offset >= 1, attempt 1-1000000, token), formatted then parsed, come
 *   back the same: every receipt mq-recv prints, mq-ack reads.
 */
#include <stdlib.h>
#include <string.h>

#include "mq.h"
#include "fuzzutil.h"

/* the last two cannot start a name */
static const char namechars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-";

static int
same(const struct mq_receipt *a, const struct mq_receipt *b)
{
	return !strcmp(a->topic, b->topic) && !strcmp(a->group, b->group) &&
	    a->off == b->off && a->attempt == b->attempt &&
	    a->token == b->token;
}

static void
show(const char *label, const struct mq_receipt *r)
{
	fprintf(stderr, "%s: topic \"%s\" group \"%s\" off %lld attempt %d "
	    "token %08x\n", label, r->topic, r->group, (long long)r->off,
	    r->attempt, (unsigned)r->token);
}

static void
round_trip(const struct mq_receipt *r)
{
	struct mq_receipt back;
	char buf[MQ_RECEIPT_MAX];

	memset(&back, 0, sizeof back);
	mq_format_receipt(buf, sizeof buf, r->topic, r->group, r->off,
	    r->attempt, r->token);
	if (strlen(buf) >= sizeof buf - 1 || mq_parse_receipt(buf, &back) < 0 ||
	    !same(r, &back)) {
		show("fields", r);
		show("parsed", &back);
		fz_fail("mq_format_receipt gave \"%s\"", buf);
	}
}

/* Digits only, at least one; the value (saturated) in *v. */
static const char *
decimal(const char *s, unsigned long long *v)
{
	if (*s < '0' || *s > '9')
		return NULL;
	for (*v = 0; *s >= '0' && *s <= '9'; s++)
		*v = *v > 1000000000000000000ULL ? ~0ULL : *v * 10 + (*s - '0');
	return s;
}

/* The documented grammar of an accepted receipt, and its fields. */
static void
check_accepted(const char *s, const struct mq_receipt *r)
{
	const char *c1 = strchr(s, ':'), *c2, *e;
	unsigned long long off, att;
	size_t i;

	FZ_CHECK(c1 && (size_t)(c1 - s) == strlen(r->topic) &&
	    !memcmp(s, r->topic, c1 - s) && mq_valid_name(r->topic),
	    "topic \"%s\" from \"%s\"", r->topic, s);
	c2 = strchr(c1 + 1, ':');
	FZ_CHECK(c2 && (size_t)(c2 - c1 - 1) == strlen(r->group) &&
	    !memcmp(c1 + 1, r->group, c2 - c1 - 1) && mq_valid_name(r->group),
	    "group \"%s\" from \"%s\"", r->group, s);
	e = decimal(c2 + 1, &off);
	FZ_CHECK(e && *e == ':' && off >= 1 && off <= INT64_MAX &&
	    (int64_t)off == r->off, "offset %lld from \"%s\"",
	    (long long)r->off, s);
	e = decimal(e + 1, &att);
	FZ_CHECK(e && *e == ':' && att >= 1 && att <= 1000000 &&
	    (int)att == r->attempt, "attempt %d from \"%s\"", r->attempt, s);
	e++;
	FZ_CHECK(strlen(e) == 8, "token \"%s\" from \"%s\"", e, s);
	for (i = 0; i < 8; i++)
		FZ_CHECK(strchr("0123456789abcdefABCDEF", e[i]),
		    "token \"%s\" is not eight hex digits (receipt \"%s\", "
		    "token %08x)", e, s, (unsigned)r->token);
	FZ_CHECK(strtoul(e, NULL, 16) == r->token, "token %08x from \"%s\"",
	    (unsigned)r->token, s);
}

static void
name(char *out, const uint8_t **p, size_t *n, const uint8_t *all, size_t size)
{
	size_t len = 1 + (*n ? **p : 0) % MQ_NAME_MAX, i;

	if (*n) {
		(*p)++;
		(*n)--;
	}
	for (i = 0; i < len; i++)
		out[i] = namechars[(size ? all[i % size] + i : i) %
		    (sizeof namechars - 1 - (i == 0 ? 2 : 0))];
	out[len] = '\0';
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data;
	size_t n = size;
	struct mq_receipt r;
	char *s = fz_str(data, size);

	memset(&r, 0, sizeof r);
	if (mq_parse_receipt(s, &r) == 0) {
		check_accepted(s, &r);
		round_trip(&r);
	}
	free(s);

	memset(&r, 0, sizeof r);
	r.off = 1 + (int64_t)(fz_u64(&p, &n) % (uint64_t)INT64_MAX);
	r.attempt = 1 + (int)(fz_u32(&p, &n) % 1000000);
	r.token = fz_u32(&p, &n);
	name(r.topic, &p, &n, data, size);
	name(r.group, &p, &n, p, n);
	round_trip(&r);
	return 0;
}
