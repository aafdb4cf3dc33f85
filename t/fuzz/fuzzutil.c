/*
 * fuzzutil.c: the independent checks the fuzz targets compare mq with
 * (see fuzzutil.h).  Strict on purpose: a JSON string must be what RFC
 * 8259 allows, base64 what RFC 4648 allows with padding and zero pad bits.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "mq.h"
#include "fuzzutil.h"

/*
 * parse.c's *_arg wrappers end the program through cli.c, which is not
 * built here (it wants the rest of the program and the database behind
 * it); the parsers under test return their errors instead.  Reaching it
 * is a target's bug.
 */
void
mq_usage_err(const char *fmt, ...)
{
	fz_fail("mq_usage_err reached: \"%s\"", fmt);
}

void
fz_fail(const char *fmt, ...)
{
	va_list ap;

	fputs("INVARIANT: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

void
fz_show(const char *label, const void *v, size_t n)
{
	const unsigned char *p = v;
	size_t i;

	fprintf(stderr, "%s (%zu bytes): \"", label, n);
	for (i = 0; i < n; i++) {
		if (p[i] == '\\' || p[i] == '"')
			fprintf(stderr, "\\%c", p[i]);
		else if (p[i] >= 0x20 && p[i] < 0x7f)
			fputc(p[i], stderr);
		else
			fprintf(stderr, "\\x%02x", p[i]);
	}
	fputs("\"\n", stderr);
}

char *
fz_str(const void *p, size_t n)
{
	char *s = malloc(n + 1);

	if (!s)
		abort();
	if (n)
		memcpy(s, p, n);
	s[n] = '\0';
	return s;
}

FILE *
fz_open(struct fz_cap *c)
{
	c->p = NULL;
	c->n = 0;
	if (!(c->f = open_memstream(&c->p, &c->n)))
		abort();
	return c->f;
}

void
fz_close(struct fz_cap *c)
{
	if (fclose(c->f) != 0)
		abort();
	c->f = NULL;
}

uint64_t
fz_u64(const uint8_t **p, size_t *n)
{
	uint64_t v = 0;
	int i;

	for (i = 0; i < 8 && *n; i++, (*p)++, (*n)--)
		v |= (uint64_t)**p << (8 * i);
	return v;
}

uint32_t
fz_u32(const uint8_t **p, size_t *n)
{
	uint32_t v = 0;
	int i;

	for (i = 0; i < 4 && *n; i++, (*p)++, (*n)--)
		v |= (uint32_t)**p << (8 * i);
	return v;
}

/* Length of the well-formed UTF-8 sequence at p (Unicode table 3-7), or 0. */
static size_t
utf8_seq(const unsigned char *p, size_t n)
{
	unsigned char c = p[0], lo = 0x80, hi = 0xbf;
	size_t len, i;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4;
	else
		return 0;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (n < len || p[1] < lo || p[1] > hi)
		return 0;
	for (i = 2; i < len; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	return len;
}

int
fz_utf8_ok(const unsigned char *p, size_t n)
{
	size_t i = 0, k;

	while (i < n) {
		if (!(k = utf8_seq(p + i, n - i)))
			return 0;
		i += k;
	}
	return 1;
}

static int
hex4(const char *p, size_t n, unsigned *v)
{
	size_t i;
	int d;

	if (n < 4)
		return -1;
	for (*v = 0, i = 0; i < 4; i++) {
		if (p[i] >= '0' && p[i] <= '9')
			d = p[i] - '0';
		else if (p[i] >= 'a' && p[i] <= 'f')
			d = p[i] - 'a' + 10;
		else if (p[i] >= 'A' && p[i] <= 'F')
			d = p[i] - 'A' + 10;
		else
			return -1;
		*v = *v << 4 | (unsigned)d;
	}
	return 0;
}

static size_t
put_utf8(unsigned char *o, unsigned cp)
{
	if (cp < 0x80) {
		o[0] = (unsigned char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (unsigned char)(0xc0 | cp >> 6);
		o[1] = (unsigned char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (unsigned char)(0xe0 | cp >> 12);
		o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
		o[2] = (unsigned char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (unsigned char)(0xf0 | cp >> 18);
	o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
	o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
	o[3] = (unsigned char)(0x80 | (cp & 0x3f));
	return 4;
}

int
fz_json_string(const char *p, size_t n, int strict, size_t *used,
    unsigned char **out, size_t *outlen)
{
	const unsigned char *u = (const unsigned char *)p;
	unsigned char *o;
	size_t i = 1, w = 0, k;
	unsigned cp, lo;

	if (n < 2 || p[0] != '"')
		return -1;
	/* decoding never grows: \uXXXX is 6 bytes for at most 3, a pair 12 for 4 */
	if (!(o = malloc(n)))
		abort();
	for (;;) {
		if (i >= n)
			goto bad;
		if (u[i] == '"')
			break;
		if (u[i] < 0x20)
			goto bad;
		if (u[i] != '\\') {
			k = 1;
			if (strict && !(k = utf8_seq(u + i, n - i)))
				goto bad;
			memcpy(o + w, u + i, k);
			w += k;
			i += k;
			continue;
		}
		if (++i >= n)
			goto bad;
		switch (p[i++]) {
		case '"': o[w++] = '"'; break;
		case '\\': o[w++] = '\\'; break;
		case '/': o[w++] = '/'; break;
		case 'b': o[w++] = '\b'; break;
		case 'f': o[w++] = '\f'; break;
		case 'n': o[w++] = '\n'; break;
		case 'r': o[w++] = '\r'; break;
		case 't': o[w++] = '\t'; break;
		case 'u':
			if (hex4(p + i, n - i, &cp) < 0)
				goto bad;
			i += 4;
			if (cp >= 0xdc00 && cp <= 0xdfff)
				goto bad;
			if (cp >= 0xd800 && cp <= 0xdbff) {
				if (n - i < 6 || p[i] != '\\' || p[i + 1] != 'u' ||
				    hex4(p + i + 2, n - i - 2, &lo) < 0 ||
				    lo < 0xdc00 || lo > 0xdfff)
					goto bad;
				i += 6;
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			}
			w += put_utf8(o + w, cp);
			break;
		default:
			goto bad;
		}
	}
	*used = i + 1;
	if (out) {
		*out = o;
		*outlen = w;
	} else {
		free(o);
	}
	return 0;
bad:
	free(o);
	return -1;
}

static size_t
ws(const char *p, size_t n, size_t i)
{
	while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' ||
	    p[i] == '\r'))
		i++;
	return i;
}

static int
digits(const char *p, size_t n, size_t *i)
{
	size_t s = *i;

	while (*i < n && p[*i] >= '0' && p[*i] <= '9')
		(*i)++;
	return *i > s ? 0 : -1;
}

static int
number(const char *p, size_t n, size_t *used)
{
	size_t i = 0;

	if (i < n && p[i] == '-')
		i++;
	if (i < n && p[i] == '0')
		i++;
	else if (i >= n || p[i] < '1' || p[i] > '9' || digits(p, n, &i) < 0)
		return -1;
	if (i < n && p[i] == '.') {
		i++;
		if (digits(p, n, &i) < 0)
			return -1;
	}
	if (i < n && (p[i] == 'e' || p[i] == 'E')) {
		i++;
		if (i < n && (p[i] == '+' || p[i] == '-'))
			i++;
		if (digits(p, n, &i) < 0)
			return -1;
	}
	*used = i;
	return 0;
}

static int
value(const char *p, size_t n, size_t *used, int depth)
{
	static const char *const words[] = { "true", "false", "null" };
	size_t i = 0, k, w;
	char close;

	if (depth > 64 || n == 0)
		return -1;
	switch (p[0]) {
	case '"':
		return fz_json_string(p, n, 1, used, NULL, NULL);
	case '{':
	case '[':
		close = p[0] == '{' ? '}' : ']';
		i = ws(p, n, 1);
		if (i < n && p[i] == close) {
			*used = i + 1;
			return 0;
		}
		for (;;) {
			if (close == '}') {
				if (i >= n || fz_json_string(p + i, n - i, 1, &k,
				    NULL, NULL) < 0)
					return -1;
				i = ws(p, n, i + k);
				if (i >= n || p[i] != ':')
					return -1;
				i = ws(p, n, i + 1);
			}
			if (i >= n || value(p + i, n - i, &k, depth + 1) < 0)
				return -1;
			i = ws(p, n, i + k);
			if (i < n && p[i] == ',') {
				i = ws(p, n, i + 1);
				continue;
			}
			if (i < n && p[i] == close) {
				*used = i + 1;
				return 0;
			}
			return -1;
		}
	default:
		for (w = 0; w < 3; w++) {
			k = strlen(words[w]);
			if (n >= k && !memcmp(p, words[w], k)) {
				*used = k;
				return 0;
			}
		}
		return number(p, n, used);
	}
}

int
fz_json_value(const char *p, size_t n, size_t *used)
{
	size_t i = ws(p, n, 0), k;

	if (value(p + i, n - i, &k, 0) < 0)
		return -1;
	*used = i + k;
	return 0;
}

int
fz_json_get(const char *p, size_t n, const char *key, const char **v,
    size_t *vlen)
{
	unsigned char *name;
	size_t i = ws(p, n, 0), k, len;
	int found;

	if (i >= n || p[i] != '{')
		return -1;
	i = ws(p, n, i + 1);
	while (i < n && p[i] == '"') {
		if (fz_json_string(p + i, n - i, 0, &k, &name, &len) < 0)
			return -1;
		found = len == strlen(key) && !memcmp(name, key, len);
		free(name);
		i = ws(p, n, i + k);
		if (i >= n || p[i] != ':')
			return -1;
		i = ws(p, n, i + 1);
		if (fz_json_value(p + i, n - i, &k) < 0)
			return -1;
		if (found) {
			*v = p + i;
			*vlen = k;
			return 0;
		}
		i = ws(p, n, i + k);
		if (i < n && p[i] == ',')
			i = ws(p, n, i + 1);
	}
	return -1;
}

static int
b64val(int c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

int
fz_base64_decode(const char *p, size_t n, unsigned char **out, size_t *outlen)
{
	unsigned char *o;
	size_t i, w = 0, pad;
	unsigned v;
	int d, k;

	if (n % 4)
		return -1;
	if (!(o = malloc(n / 4 * 3 + 1)))
		abort();
	for (i = 0; i < n; i += 4) {
		pad = 0;
		if (i + 4 == n)
			pad = p[n - 1] == '=' ? p[n - 2] == '=' ? 2 : 1 : 0;
		for (v = 0, k = 0; k < 4; k++) {
			if (k >= 4 - (int)pad) {
				v <<= 6;
				continue;
			}
			if ((d = b64val((unsigned char)p[i + k])) < 0)
				goto bad;
			v = v << 6 | (unsigned)d;
		}
		o[w++] = (unsigned char)(v >> 16);
		if (pad < 2)
			o[w++] = (unsigned char)(v >> 8);
		if (pad < 1)
			o[w++] = (unsigned char)v;
		/* the bits padding leaves over must be zero */
		if ((pad == 1 && (v & 0xff)) || (pad == 2 && (v & 0xffff)))
			goto bad;
	}
	*out = o;
	*outlen = w;
	return 0;
bad:
	free(o);
	return -1;
}
