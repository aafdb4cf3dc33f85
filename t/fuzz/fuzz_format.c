/*
 * fuzz_format: mq_check_format and mq_out_msg (out.c), how mq-recv and
 * mq-replay print a message in each of their output modes.
 *
 * Input: the --format string, then optionally a NUL and bytes for the
 * message: offset, time, due, attempt, token, flags, then the key up to
 * the next NUL (1-1024 bytes, as mq-send -k allows), the headers up to
 * the next NUL (lines NAME=VALUE; those mq-send -H would refuse are left
 * out) and the body (any bytes).
 *
 * - mq_check_format accepts exactly strings whose every % is followed by
 *   one of o r k a t e T g s b B H %, or by h{NAME} with NAME a valid
 *   name, and every backslash by n t 0 \.
 * - An accepted format prints exactly what mq-recv(1) documents, expanded
 *   here directive by directive; a refused one is never printed (callers
 *   exit first).
 * - The line modes print one line: [RECEIPT or OFFSET TAB] escaped body
 *   NL, which mq_unescape (and mq_parse_receipt) read back; -0 prints the
 *   raw body and a NUL; --json prints one valid JSON object on one line
 *   whose fields (topic, group, offset, receipt, attempt, time, epoch_ms,
 *   due_ms, key, size, body/base64) decode to the message's.
 */
#include <stdlib.h>
#include <string.h>

#include "mq.h"
#include "fuzzutil.h"

static const char topic[] = "orders", group[] = "billing";

/* %h{NAME} at f (the h): the name's length, or 0 when it is not one. */
static size_t
ref_hname(const char *f)
{
	char name[MQ_NAME_MAX + 1];
	size_t n = 0;

	if (f[1] != '{')
		return 0;
	for (f += 2; f[n] && f[n] != '}'; n++)
		if (n >= MQ_NAME_MAX)
			return 0;
		else
			name[n] = f[n];
	name[n] = '\0';
	return f[n] == '}' && mq_valid_name(name) ? n : 0;
}

static int
ref_check(const char *f)
{
	size_t n;

	for (; *f; f++) {
		if (*f == '%') {
			if (!f[1] || !strchr("orkateTgsbBhH%", f[1]))
				return -1;
			f++;
			if (*f == 'h' && !(n = ref_hname(f)))
				return -1;
			if (*f == 'h')
				f += n + 2;
		} else if (*f == '\\') {
			if (!f[1] || !strchr("nt0\\", f[1]))
				return -1;
			f++;
		}
	}
	return 0;
}

/*
 * Header NAME (n bytes) of hs as %h prints it, or with NULL, every one
 * as %H does.
 */
static void
ref_header(FILE *f, const char *hs, const char *name, size_t n)
{
	const char *eq, *nl;
	int k = 0;

	for (; hs && (eq = strchr(hs, '=')) && (nl = strchr(eq, '\n'));
	    hs = nl + 1) {
		if (!name) {
			if (k++)
				putc('\t', f);
			mq_escape(f, (const unsigned char *)hs, nl - hs);
		} else if ((size_t)(eq - hs) == n && !memcmp(hs, name, n)) {
			mq_escape(f, (const unsigned char *)eq + 1, nl - eq - 1);
			return;
		}
	}
}

/* The format expanded as documented. */
static void
ref_format(FILE *f, const char *fmt, const struct mq_out *o,
    const struct mq_msg *m)
{
	char ts[64];
	size_t n;

	for (; *fmt; fmt++) {
		if (*fmt == '\\') {
			switch (*++fmt) {
			case 'n': putc('\n', f); break;
			case 't': putc('\t', f); break;
			case '0': putc('\0', f); break;
			default: putc('\\', f);
			}
			continue;
		}
		if (*fmt != '%') {
			putc(*fmt, f);
			continue;
		}
		switch (*++fmt) {
		case 'o': fprintf(f, "%lld", (long long)m->off); break;
		case 'r': fputs(m->receipt, f); break;
		case 'k':
			if (m->key)
				mq_escape(f, (unsigned char *)m->key,
				    strlen(m->key));
			break;
		case 'a': fprintf(f, "%d", m->attempt); break;
		case 't':
			mq_rfc3339(m->ts, ts, sizeof ts);
			fputs(ts, f);
			break;
		case 'e': fprintf(f, "%lld", (long long)(m->ts / 1000)); break;
		case 'T': fputs(o->topic, f); break;
		case 'g': fputs(o->group ? o->group : "", f); break;
		case 's': fprintf(f, "%zu", m->len); break;
		case 'b': mq_escape(f, m->body, m->len); break;
		case 'B': fwrite(m->body, 1, m->len, f); break;
		case 'h':
			n = ref_hname(fmt);
			ref_header(f, m->headers, fmt + 2, n);
			fmt += n + 2;
			break;
		case 'H': ref_header(f, m->headers, NULL, 0); break;
		case '%': putc('%', f); break;
		}
	}
}

/*
 * The headers of the lines of p (n bytes) that mq-send -H takes: a valid
 * name not seen before, a value of at most 1024 bytes of UTF-8 without
 * control characters; NULL when none is.
 */
static char *
make_headers(const char *p, size_t n)
{
	char *hs = NULL, name[MQ_NAME_MAX + 1];
	const char *e = p + n, *nl, *eq;
	size_t len = 0, nn, vn, i;
	int ok;

	for (; p < e; p = nl + 1) {
		if (!(nl = memchr(p, '\n', e - p)))
			nl = e;
		if (!(eq = memchr(p, '=', nl - p)) || (nn = eq - p) >
		    MQ_NAME_MAX)
			continue;
		memcpy(name, p, nn);
		name[nn] = '\0';
		vn = nl - eq - 1;
		ok = mq_valid_name(name) && vn <= 1024 &&
		    mq_utf8_valid((const unsigned char *)eq + 1, vn);
		for (i = 0; ok && i < vn; i++)
			ok = (unsigned char)eq[1 + i] >= 0x20 && eq[1 + i] != 0x7f;
		for (i = 0; ok && hs && i < len; i += strcspn(hs + i, "\n") + 1)
			ok = !(strncmp(hs + i, name, nn) == 0 && hs[i + nn] == '=');
		if (!ok)
			continue;
		hs = realloc(hs, len + nn + vn + 3);
		FZ_CHECK(hs, "out of memory");
		memcpy(hs + len, p, nn + 1 + vn);
		len += nn + 1 + vn;
		hs[len++] = '\n';
		hs[len] = '\0';
	}
	return hs;
}

static void
out(struct fz_cap *c, const struct mq_out *o, const struct mq_msg *m)
{
	mq_out_msg(fz_open(c), o, m);
	fz_close(c);
}

/* The line modes: [prefix TAB] escaped body NL. */
static void
check_line(const struct mq_out *o, const struct mq_msg *m)
{
	struct fz_cap c;
	struct mq_receipt r;
	char *body = NULL, *tab;
	char num[32];
	size_t len;

	out(&c, o, m);
	FZ_CHECK(c.n > 0 && c.p[c.n - 1] == '\n' &&
	    memchr(c.p, '\n', c.n) == c.p + c.n - 1 && !memchr(c.p, '\0', c.n),
	    "mode %d: not one line", o->mode);
	c.p[c.n - 1] = '\0';
	body = c.p;
	if (o->mode == MQ_OUT_LINE && o->with_receipt) {
		FZ_CHECK((tab = strchr(c.p, '\t')), "no tab after the receipt");
		*tab = '\0';
		body = tab + 1;
		if (m->receipt[0]) {
			FZ_CHECK(!strcmp(c.p, m->receipt) &&
			    mq_parse_receipt(c.p, &r) == 0 && r.off == m->off &&
			    r.attempt == m->attempt && r.token == m->token,
			    "receipt \"%s\" printed as \"%s\"", m->receipt, c.p);
		} else {
			snprintf(num, sizeof num, "%lld", (long long)m->off);
			FZ_CHECK(!strcmp(c.p, num), "offset printed as \"%s\"",
			    c.p);
		}
	}
	len = mq_unescape(body);
	if (len != m->len || memcmp(body, m->body, len)) {
		fz_show("body", m->body, m->len);
		fz_fail("mode %d: the printed body does not unescape to it",
		    o->mode);
	}
	free(c.p);
}

static void
check_nul(const struct mq_out *o, const struct mq_msg *m)
{
	struct fz_cap c, want;
	FILE *f = fz_open(&want);

	if (o->with_receipt) {
		if (m->receipt[0])
			fputs(m->receipt, f);
		else
			fprintf(f, "%lld", (long long)m->off);
		putc('\t', f);
	}
	fwrite(m->body, 1, m->len, f);
	putc('\0', f);
	fz_close(&want);
	out(&c, o, m);
	FZ_CHECK(c.n == want.n && !memcmp(c.p, want.p, c.n),
	    "-0 output differs");
	free(c.p);
	free(want.p);
}

static long long
json_num(const char *p, size_t n, const char *key)
{
	const char *v;
	char *s, *end;
	size_t len;
	long long x;

	FZ_CHECK(fz_json_get(p, n, key, &v, &len) == 0, "no \"%s\"", key);
	s = fz_str(v, len);
	x = strtoll(s, &end, 10);
	FZ_CHECK(*s && !*end, "\"%s\": %s", key, s);
	free(s);
	return x;
}

/* Member key is a string that decodes to p, n. */
static void
json_is(const char *j, size_t jn, const char *key, const void *p, size_t n)
{
	const char *v;
	unsigned char *dec;
	size_t len, used, dlen;

	FZ_CHECK(fz_json_get(j, jn, key, &v, &len) == 0, "no \"%s\"", key);
	if (fz_json_string(v, len, 1, &used, &dec, &dlen) < 0 || used != len ||
	    dlen != n || memcmp(dec, p, n)) {
		fz_show("want", p, n);
		fz_show("JSON", v, len);
		fz_fail("\"%s\" differs", key);
	}
	free(dec);
}

/* The "headers" object j (jn bytes): the members of hs, in its order. */
static void
check_headers(const char *j, size_t jn, const char *hs)
{
	const char *eq, *nl, *v, *at = NULL;
	char *name;
	size_t len, used;

	FZ_CHECK(j[0] == '{' && fz_json_value(j, jn, &used) == 0 && used == jn,
	    "\"headers\" not an object");
	for (; (eq = strchr(hs, '=')) && (nl = strchr(eq, '\n')); hs = nl + 1) {
		name = fz_str(hs, eq - hs);
		json_is(j, jn, name, eq + 1, nl - eq - 1);
		FZ_CHECK(fz_json_get(j, jn, name, &v, &len) == 0 &&
		    (!at || v > at), "header %s out of order", name);
		at = v;
		free(name);
	}
}

static void
check_json(const struct mq_out *o, const struct mq_msg *m)
{
	static const char *const order[] = { "topic", "group", "offset",
	    "receipt", "attempt", "time", "epoch_ms", "due_ms", "key",
	    "headers", "size", "body", "base64" };
	struct fz_cap c;
	const char *v, *at = NULL;
	unsigned char *dec = NULL;
	char ts[64];
	size_t used, len, i, dlen = 0;
	int utf8 = fz_utf8_ok(m->body, m->len);

	out(&c, o, m);
	FZ_CHECK(c.n > 0 && c.p[c.n - 1] == '\n' &&
	    memchr(c.p, '\n', c.n) == c.p + c.n - 1, "--json: not one line");
	if (fz_json_value(c.p, c.n - 1, &used) < 0 || used != c.n - 1 ||
	    c.p[0] != '{') {
		if (m->key)
			fz_show("key", m->key, strlen(m->key));
		fz_show("body", m->body, m->len);
		fz_show("output", c.p, c.n);
		fz_fail("--json: not a valid JSON object");
	}
	json_is(c.p, c.n, "topic", o->topic, strlen(o->topic));
	FZ_CHECK(!o->group == !!fz_json_get(c.p, c.n, "group", &v, &len),
	    "\"group\" present: %d", !!o->group);
	if (o->group)
		json_is(c.p, c.n, "group", o->group, strlen(o->group));
	FZ_CHECK(json_num(c.p, c.n, "offset") == m->off, "offset");
	FZ_CHECK(!m->receipt[0] == !!fz_json_get(c.p, c.n, "receipt", &v,
	    &len), "\"receipt\" present: %d", !!m->receipt[0]);
	if (m->receipt[0]) {
		json_is(c.p, c.n, "receipt", m->receipt, strlen(m->receipt));
		FZ_CHECK(json_num(c.p, c.n, "attempt") == m->attempt, "attempt");
	}
	mq_rfc3339(m->ts, ts, sizeof ts);
	json_is(c.p, c.n, "time", ts, strlen(ts));
	FZ_CHECK(json_num(c.p, c.n, "epoch_ms") == m->ts, "epoch_ms");
	FZ_CHECK((m->due > m->ts) == !fz_json_get(c.p, c.n, "due_ms", &v,
	    &len), "\"due_ms\" present: %d", m->due > m->ts);
	if (m->due > m->ts)
		FZ_CHECK(json_num(c.p, c.n, "due_ms") == m->due, "due_ms");
	if (m->key) {
		json_is(c.p, c.n, "key", m->key, strlen(m->key));
	} else {
		FZ_CHECK(fz_json_get(c.p, c.n, "key", &v, &len) == 0 &&
		    len == 4 && !memcmp(v, "null", 4), "key not null");
	}
	FZ_CHECK(!m->headers == !!fz_json_get(c.p, c.n, "headers", &v, &len),
	    "\"headers\" present: %d", !!m->headers);
	if (m->headers)
		check_headers(v, len, m->headers);
	FZ_CHECK(json_num(c.p, c.n, "size") == (long long)m->len, "size");
	FZ_CHECK(utf8 == !!fz_json_get(c.p, c.n, "base64", &v, &len),
	    "\"base64\" present: %d", !utf8);
	if (utf8) {
		json_is(c.p, c.n, "body", m->body, m->len);
	} else {
		FZ_CHECK(len == 4 && !memcmp(v, "true", 4), "base64 not true");
		FZ_CHECK(fz_json_get(c.p, c.n, "body", &v, &len) == 0 &&
		    len >= 2 && fz_base64_decode(v + 1, len - 2, &dec, &dlen) == 0,
		    "body not base64");
		FZ_CHECK(dlen == m->len && !memcmp(dec, m->body, dlen),
		    "base64 body differs");
		free(dec);
	}
	/* the documented order: each field present after the one before */
	for (i = 0; i < sizeof order / sizeof *order; i++) {
		if (fz_json_get(c.p, c.n, order[i], &v, &len) < 0)
			continue;
		FZ_CHECK(!at || v > at, "\"%s\" out of order", order[i]);
		at = v;
	}
	free(c.p);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *fmt = fz_str(data, size), *key = NULL;
	size_t fl = strlen(fmt), n = fl < size ? size - fl - 1 : 0, kl, hl;
	const uint8_t *p = data + size - n;
	struct fz_cap c, want;
	struct mq_out o;
	struct mq_msg m;
	unsigned flags;
	int rc, ref, mode;

	memset(&m, 0, sizeof m);
	m.off = 1 + (int64_t)(fz_u64(&p, &n) % (uint64_t)INT64_MAX);
	m.ts = (int64_t)fz_u64(&p, &n);
	m.due = (int64_t)fz_u64(&p, &n);
	m.attempt = 1 + (int)(fz_u32(&p, &n) % 1000000);
	m.token = fz_u32(&p, &n);
	flags = n ? *p : 0;
	if (n) {
		p++;
		n--;
	}
	if (flags & 1) {
		kl = strnlen((const char *)p, n);
		/* keys are UTF-8: mq-send refuses others */
		if (kl > 0 && mq_utf8_valid(p, kl > 1024 ? 1024 : kl))
			key = fz_str(p, kl > 1024 ? 1024 : kl);
		p += kl < n ? kl + 1 : kl;
		n -= kl < n ? kl + 1 : kl;
	}
	m.key = key;
	if (flags & 8) {
		hl = strnlen((const char *)p, n);
		m.headers = make_headers((const char *)p, hl);
		p += hl < n ? hl + 1 : hl;
		n -= hl < n ? hl + 1 : hl;
	}
	m.body = (unsigned char *)fz_str(p, n);
	m.len = n;
	memset(&o, 0, sizeof o);
	o.topic = topic;
	o.group = flags & 2 ? group : NULL;
	if (flags & 4)
		mq_format_receipt(m.receipt, sizeof m.receipt, topic, group,
		    m.off, m.attempt, m.token);

	rc = mq_check_format(fmt);
	ref = ref_check(fmt);
	if (rc != ref) {
		fz_show("format", fmt, fl);
		fz_fail("mq_check_format: %d, expected %d", rc, ref);
	}
	if (rc == 0) {
		o.mode = MQ_OUT_FORMAT;
		o.format = fmt;
		out(&c, &o, &m);
		ref_format(fz_open(&want), fmt, &o, &m);
		fz_close(&want);
		if (c.n != want.n || memcmp(c.p, want.p, c.n)) {
			fz_show("format", fmt, fl);
			fz_show("printed", c.p, c.n);
			fz_show("expected", want.p, want.n);
			fz_fail("--format output differs");
		}
		free(c.p);
		free(want.p);
	}

	o.format = NULL;
	for (mode = 0; mode < 2; mode++) {
		o.with_receipt = mode;
		o.mode = MQ_OUT_LINE;
		check_line(&o, &m);
		o.mode = MQ_OUT_NUL;
		check_nul(&o, &m);
	}
	o.mode = MQ_OUT_BODY;
	check_line(&o, &m);
	o.mode = MQ_OUT_JSON;
	check_json(&o, &m);

	free(key);
	free(m.headers);
	free(m.body);
	free(fmt);
	return 0;
}
