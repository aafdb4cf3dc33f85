/*
 * out.c: how messages are written: C-style escapes that keep any body on
 * one line, NUL-terminated records, JSON lines, % format strings.
 *
 * The escape is the inverse of mq_unescape: printable ASCII
 * and valid UTF-8 pass through, backslash is doubled, \t \n \r \0 and the
 * other control or invalid bytes become C escapes (\ooo octal), so
 * `mq-send -e` stores exactly the bytes `mq-recv` printed.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mq.h"

/* Length of the valid UTF-8 sequence at p (no overlongs, surrogates), or 0. */
size_t
mq_utf8_len(const unsigned char *p, size_t n)
{
	unsigned c = p[0];
	size_t len, i;
	unsigned cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2, cp = c & 0x1f;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3, cp = c & 0x0f;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4, cp = c & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return len;
}

int
mq_utf8_valid(const unsigned char *p, size_t n)
{
	size_t i = 0, k;

	while (i < n) {
		if (!(k = mq_utf8_len(p + i, n - i)))
			return 0;
		i += k;
	}
	return 1;
}

/*
 * The length of the run at p that goes out as it is: printable ASCII but
 * the backslash and quote (0: none), and whole UTF-8 characters.  Written
 * a run at a time: putc takes the stream's lock at each call.
 */
static size_t
as_is(const unsigned char *p, size_t n, int quote)
{
	size_t i = 0, k;

	while (i < n)
		if (p[i] >= 0x80) {
			if ((k = mq_utf8_len(p + i, n - i)) < 2)
				break;
			i += k;
		} else if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\' &&
		    p[i] != quote)
			i++;
		else
			break;
	return i;
}

void
mq_escape(FILE *f, const unsigned char *p, size_t n)
{
	size_t i = 0, k;

	while (i < n) {
		if ((k = as_is(p + i, n - i, 0))) {
			fwrite(p + i, 1, k, f);
			i += k;
			continue;
		}
		switch (p[i]) {
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\t': fputs("\\t", f); break;
		case '\r': fputs("\\r", f); break;
		default: fprintf(f, "\\%03o", p[i]);
		}
		i++;
	}
}

/*
 * What p holds, escaped as mq-replay prints bodies, cut to max bytes
 * (whole characters, and "..." when it goes on): for a line of a table
 * or of an error.
 */
void
mq_preview(const unsigned char *p, size_t n, size_t max, char *buf, size_t len)
{
	char *e = NULL;
	size_t elen = 0, k;
	FILE *f = open_memstream(&e, &elen);

	if (!f)
		mq_die(MQ_EX_SOFTWARE, "out of memory");
	mq_escape(f, p, n < 4 * max ? n : 4 * max);
	fclose(f);
	k = elen;
	if (k > max) {		/* whole characters, and say it goes on */
		k = max - 3;
		while (k > 0 && (e[k] & 0xc0) == 0x80)
			k--;
	}
	snprintf(buf, len, "%.*s%s", (int)k, e, k < elen ? "..." : "");
	free(e);
}

static int
hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * Decodes C escapes in place: \\ \n \t \r \0 \a \b \f \v \e, \ooo
 * (octal, at most 255) and \xHH.  Returns the new length, or (size_t)-1
 * for a malformed escape.  Not strunvis(3): it takes a dangling backslash
 * or an unknown escape silently, and bad input must be refused, not
 * stored altered.
 */
size_t
mq_unescape(char *s)
{
	static const char from[] = "\\ntr0abfve", to[] = "\\\n\t\r\0\a\b\f\v\033";
	char *r = s, *w = s;
	const char *k;
	int v, d, i;

	while (*r) {
		if (*r != '\\') {
			*w++ = *r++;
			continue;
		}
		r++;
		if (*r >= '0' && *r <= '7') {
			for (v = 0, i = 0; i < 3 && *r >= '0' && *r <= '7'; i++)
				v = v * 8 + (*r++ - '0');
			if (v > 255)
				return (size_t)-1;
			*w++ = (char)v;
		} else if (*r == 'x') {
			r++;
			for (v = 0, i = 0; i < 2 && (d = hexval(*r)) >= 0; i++, r++)
				v = v * 16 + d;
			if (i == 0)
				return (size_t)-1;
			*w++ = (char)v;
		} else if (*r && (k = strchr(from, *r))) {
			*w++ = to[k - from];
			r++;
		} else {
			return (size_t)-1;
		}
	}
	return (size_t)(w - s);
}

void
mq_json_str(FILE *f, const unsigned char *p, size_t n)
{
	size_t i = 0, k;
	unsigned c;

	putc('"', f);
	while (i < n) {
		if ((k = as_is(p + i, n - i, '"'))) {
			fwrite(p + i, 1, k, f);
			i += k;
			continue;
		}
		c = p[i++];
		if (c >= 0x80)	/* not a whole UTF-8 sequence */
			fputs("\\ufffd", f);
		else if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c == '\r')
			fputs("\\r", f);
		else
			fprintf(f, "\\u%04x", c);
	}
	putc('"', f);
}

void
mq_base64(FILE *f, const unsigned char *p, size_t n)
{
	static const char b64[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t i;
	unsigned v;

	for (i = 0; i + 2 < n; i += 3) {
		v = p[i] << 16 | p[i + 1] << 8 | p[i + 2];
		putc(b64[v >> 18], f);
		putc(b64[v >> 12 & 63], f);
		putc(b64[v >> 6 & 63], f);
		putc(b64[v & 63], f);
	}
	if (n - i == 1) {
		v = p[i] << 16;
		fprintf(f, "%c%c==", b64[v >> 18], b64[v >> 12 & 63]);
	} else if (n - i == 2) {
		v = p[i] << 16 | p[i + 1] << 8;
		fprintf(f, "%c%c%c=", b64[v >> 18], b64[v >> 12 & 63],
		    b64[v >> 6 & 63]);
	}
}

void
mq_rfc3339(int64_t ms, char *buf, size_t len)
{
	int64_t frac = ms % 1000;
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	if (frac < 0) {	/* before 1970: the second before, and what is left */
		frac += 1000;
		t--;
	}
	/* not strftime: it reads the time zone, which UTC does not need */
	gmtime_r(&t, &tm);
	snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
	    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
	    tm.tm_sec, (int)frac);
}

/* ,"headers":{"NAME":"VALUE",...} in the order sent */
void
mq_json_headers(FILE *f, const char *hs)
{
	struct mq_header h;
	int n = 0;

	fputs(",\"headers\":{", f);
	while (mq_header_next(&hs, &h)) {
		if (n++)
			putc(',', f);
		mq_json_str(f, (const unsigned char *)h.name, h.nlen);
		putc(':', f);
		mq_json_str(f, (const unsigned char *)h.value, h.vlen);
	}
	putc('}', f);
}

static void
json_msg(FILE *f, const struct mq_out *o, const struct mq_msg *m)
{
	const char *topic = m->topic ? m->topic : o->topic;
	char ts[40];

	mq_rfc3339(m->ts, ts, sizeof ts);
	fputs("{\"topic\":", f);
	mq_json_str(f, (const unsigned char *)topic, strlen(topic));
	if (o->group) {
		fputs(",\"group\":", f);
		mq_json_str(f, (const unsigned char *)o->group, strlen(o->group));
	}
	fprintf(f, ",\"offset\":%lld", (long long)m->off);
	if (m->receipt[0])
		fprintf(f, ",\"receipt\":\"%s\",\"attempt\":%d", m->receipt,
		    m->attempt);
	fprintf(f, ",\"time\":\"%s\",\"epoch_ms\":%lld", ts, (long long)m->ts);
	if (m->due > m->ts)
		fprintf(f, ",\"due_ms\":%lld", (long long)m->due);
	fputs(",\"key\":", f);
	if (m->key)
		mq_json_str(f, (const unsigned char *)m->key, strlen(m->key));
	else
		fputs("null", f);
	if (m->headers)
		mq_json_headers(f, m->headers);
	fprintf(f, ",\"size\":%zu", m->len);
	if (mq_utf8_valid(m->body, m->len)) {
		fputs(",\"body\":", f);
		mq_json_str(f, m->body, m->len);
	} else {
		fputs(",\"body\":\"", f);
		mq_base64(f, m->body, m->len);
		fputs("\",\"base64\":true", f);
	}
	fputs("}\n", f);
}

/*
 * Format directives: %o offset, %r receipt, %k key, %a attempt, %t time
 * (RFC 3339), %e time (epoch seconds), %T topic, %g group, %s size,
 * %b body escaped, %B body raw, %h{NAME} header NAME's value escaped
 * (nothing when it has none), %H every header as NAME=VALUE escaped, a
 * tab between two, %% a percent sign; \n \t \0 \\ escapes.
 */
static const char directives[] = "orkateTgsbBhH%";

/* The name of %h{NAME} at p (after the h): its length, or 0 if bad. */
static size_t
header_dir(const char *p, char *name)
{
	const char *e;
	size_t n;

	if (*p != '{' || !(e = strchr(p + 1, '}')) ||
	    (n = (size_t)(e - p - 1)) > MQ_NAME_MAX)
		return 0;
	memcpy(name, p + 1, n);
	name[n] = '\0';
	return mq_valid_name(name) ? n : 0;
}

int
mq_check_format(const char *fmt)
{
	char name[MQ_NAME_MAX + 1];
	size_t n;

	for (; *fmt; fmt++) {
		if (*fmt == '%') {
			if (!fmt[1] || !strchr(directives, *++fmt))
				return -1;
			if (*fmt == 'h') {
				if (!(n = header_dir(fmt + 1, name)))
					return -1;
				fmt += n + 2;	/* at the } */
			}
		} else if (*fmt == '\\' && (!fmt[1] ||
		    !strchr("nt0\\", *++fmt)))
			return -1;
	}
	return 0;
}

static void
format_headers(FILE *f, const char *hs)
{
	struct mq_header h;
	int n = 0;

	while (mq_header_next(&hs, &h)) {
		if (n++)
			putc('\t', f);
		mq_escape(f, (const unsigned char *)h.name, h.nlen + 1 +
		    h.vlen);	/* NAME=VALUE */
	}
}

static void
format_msg(FILE *f, const struct mq_out *o, const struct mq_msg *m)
{
	char ts[40], name[MQ_NAME_MAX + 1];
	const char *p, *v;
	size_t n, len;

	for (p = o->format; *p; p++) {
		if (*p == '\\') {
			p++;
			putc(*p == 'n' ? '\n' : *p == 't' ? '\t' :
			    *p == '0' ? '\0' : '\\', f);
			continue;
		}
		if (*p != '%') {
			putc(*p, f);
			continue;
		}
		switch (*++p) {
		case 'o': fprintf(f, "%lld", (long long)m->off); break;
		case 'r': fputs(m->receipt, f); break;
		case 'k': if (m->key) mq_escape(f, (const unsigned char *)m->key,
			      strlen(m->key));
			  break;
		case 'a': fprintf(f, "%d", m->attempt); break;
		case 't': mq_rfc3339(m->ts, ts, sizeof ts); fputs(ts, f); break;
		case 'e': fprintf(f, "%lld", (long long)(m->ts / 1000)); break;
		case 'T': fputs(m->topic ? m->topic : o->topic, f); break;
		case 'g': fputs(o->group ? o->group : "", f); break;
		case 's': fprintf(f, "%zu", m->len); break;
		case 'b': mq_escape(f, m->body, m->len); break;
		case 'B': fwrite(m->body, 1, m->len, f); break;
		case 'h':	/* %h{NAME}, checked by mq_check_format */
			n = header_dir(p + 1, name);
			if ((v = mq_header_get(m->headers, name, n, &len)))
				mq_escape(f, (const unsigned char *)v, len);
			p += n + 2;
			break;
		case 'H': format_headers(f, m->headers); break;
		case '%': putc('%', f); break;
		}
	}
}

void
mq_out_msg(FILE *f, const struct mq_out *o, const struct mq_msg *m)
{
	switch (o->mode) {
	case MQ_OUT_JSON:
		json_msg(f, o, m);
		break;
	case MQ_OUT_FORMAT:
		format_msg(f, o, m);
		break;
	case MQ_OUT_NUL:
		if (o->with_receipt) {
			if (m->receipt[0])
				fputs(m->receipt, f);
			else
				fprintf(f, "%lld", (long long)m->off);
			putc('\t', f);
		}
		fwrite(m->body, 1, m->len, f);
		putc('\0', f);
		break;
	case MQ_OUT_BODY:
		mq_escape(f, m->body, m->len);
		putc('\n', f);
		break;
	default:
		if (o->with_receipt) {
			if (m->receipt[0])
				fputs(m->receipt, f);
			else
				fprintf(f, "%lld", (long long)m->off);
			putc('\t', f);
		}
		mq_escape(f, m->body, m->len);
		putc('\n', f);
	}
}

static void
trace_group(FILE *f, const struct mq_trace_group *g)
{
	char ts[40];
	int i;

	fprintf(f, "group %s: ", g->name);
	mq_rfc3339(g->due, ts, sizeof ts);
	switch (g->state) {
	case MQ_LEASED:
		fprintf(f, "in flight, attempt %d, lease until %s\n",
		    g->attempt, ts);
		break;
	case MQ_WAITING:
		fprintf(f, "waiting, attempt %d done, due %s\n", g->attempt,
		    ts);
		break;
	case MQ_DEAD:
		fprintf(f, "dead letter after %d attempts\n", g->attempt);
		break;
	case MQ_DONE:
		fprintf(f, "settled\n");
		break;
	default:
		fprintf(f, "not delivered yet\n");
	}
	for (i = 0; i < g->nev; i++) {
		const struct mq_event *e = &g->ev[i];

		mq_rfc3339(e->ts, ts, sizeof ts);
		fprintf(f, "  %s  attempt %d  %-9s  %s:%lld", ts,
		    e->attempt, e->event, e->host, (long long)e->pid);
		if (e->reason) {	/* one line: a handler's stderr escaped */
			fputs("  ", f);
			mq_escape(f, (const unsigned char *)e->reason,
			    strlen(e->reason));
		}
		putc('\n', f);
	}
}

/* One line "header NAME=VALUE" for each. */
static void
trace_headers(FILE *f, const char *hs)
{
	struct mq_header h;

	while (mq_header_next(&hs, &h)) {
		fputs("header ", f);
		mq_escape(f, (const unsigned char *)h.name, h.nlen + 1 +
		    h.vlen);
		putc('\n', f);
	}
}

/* What mq-replay --trace prints: the message, then each group's story. */
void
mq_out_trace(FILE *f, const char *topic, const struct mq_trace *tr)
{
	const struct mq_msg *m = &tr->m;
	char ts[40];
	int i;

	mq_rfc3339(m->ts, ts, sizeof ts);
	fprintf(f, "topic %s\noffset %lld\ntime %s\n", topic,
	    (long long)m->off, ts);
	if (m->due > m->ts) {
		mq_rfc3339(m->due, ts, sizeof ts);
		fprintf(f, "due %s\n", ts);
	}
	fprintf(f, "key ");
	if (m->key)
		mq_escape(f, (unsigned char *)m->key, strlen(m->key));
	putc('\n', f);
	trace_headers(f, m->headers);
	fprintf(f, "size %zu\nbody ", m->len);
	mq_escape(f, m->body, m->len);
	fputc('\n', f);
	for (i = 0; i < tr->n; i++)
		trace_group(f, &tr->g[i]);
}

/* Freeing what the storage interface returns. */

void
mq_msg_free(struct mq_msg *m)
{
	free(m->key);
	free(m->headers);
	free(m->body);
	m->key = NULL;
	m->headers = NULL;
	m->body = NULL;
}

void
mq_trace_free(struct mq_trace *tr)
{
	int i, k;

	mq_msg_free(&tr->m);
	for (i = 0; i < tr->n; i++) {
		for (k = 0; k < tr->g[i].nev; k++) {
			free(tr->g[i].ev[k].event);
			free(tr->g[i].ev[k].host);
			free(tr->g[i].ev[k].reason);
		}
		free(tr->g[i].ev);
	}
	free(tr->g);
	memset(tr, 0, sizeof *tr);
}
