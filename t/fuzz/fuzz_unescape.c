/*
 * fuzz_unescape: mq_escape and mq_unescape (out.c), the pair that lets
 * `mq-recv | mq-send -e` store a body again byte for byte.
 *
 * - Any bytes: mq_escape's output is one line of valid UTF-8 without
 *   control bytes (no NUL, newline, CR, DEL), and is the input unchanged
 *   when the input is valid UTF-8 without control bytes or backslashes;
 *   mq_unescape of it gives back exactly the input bytes.
 * - Any string: mq_unescape never reads or writes out of bounds, and
 *   accepts and decodes exactly as mq-send(1) documents the escapes
 *   (\\ \n \t \r \0 \a \b \f \v \e, \ooo one to three octal digits up to
 *   377, \xHH one or two hex digits; anything else refused), checked
 *   against a decoder written here.
 */
#include <stdlib.h>
#include <string.h>

#include "mq.h"
#include "fuzzutil.h"

static int
hexdig(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* The documented decoding: 0 and the bytes in out (*len), or -1. */
static int
ref_unescape(const char *s, char *out, size_t *len)
{
	static const char from[] = "\\ntrabfve", to[] = "\\\n\t\r\a\b\f\v\033";
	const char *k;
	size_t w = 0;
	int v, i;

	while (*s) {
		if (*s != '\\') {
			out[w++] = *s++;
			continue;
		}
		s++;
		if (*s >= '0' && *s <= '7') {
			for (v = 0, i = 0; i < 3 && *s >= '0' && *s <= '7'; i++)
				v = v * 8 + *s++ - '0';
			if (v > 0377)
				return -1;
			out[w++] = (char)v;
		} else if (*s == 'x' && hexdig(s[1]) >= 0) {
			v = hexdig(s[1]);
			s += 2;
			if (hexdig(*s) >= 0)
				v = v * 16 + hexdig(*s++);
			out[w++] = (char)v;
		} else if (*s && (k = strchr(from, *s))) {
			out[w++] = to[k - from];
			s++;
		} else {
			return -1;
		}
	}
	*len = w;
	return 0;
}

static int
plain(const uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i] < 0x20 || p[i] == 0x7f || p[i] == '\\')
			return 0;
	return fz_utf8_ok(p, n);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_cap c;
	char *s, *ref;
	size_t i, len, rlen = 0;
	int rc;

	/* escape, then unescape: the same bytes */
	mq_escape(fz_open(&c), data, size);
	fz_close(&c);
	for (i = 0; i < c.n; i++)
		if ((unsigned char)c.p[i] < 0x20 || c.p[i] == 0x7f) {
			fz_show("input", data, size);
			fz_show("escaped", c.p, c.n);
			fz_fail("a control byte at %zu of the escaped form", i);
		}
	FZ_CHECK(fz_utf8_ok((unsigned char *)c.p, c.n),
	    "escaped form not UTF-8");
	FZ_CHECK(!plain(data, size) || (c.n == size &&
	    !memcmp(c.p, data, size)), "plain text changed by mq_escape");
	len = mq_unescape(c.p);
	if (len != size || memcmp(c.p, data, size)) {
		fz_show("input", data, size);
		fz_show("unescaped", c.p, len == (size_t)-1 ? 0 : len);
		fz_fail("mq_unescape(mq_escape(x)) != x (length %zd)",
		    (ssize_t)len);
	}
	free(c.p);

	/* any string: as documented */
	s = fz_str(data, size);
	ref = malloc(strlen(s) + 1);
	rc = ref_unescape(s, ref, &rlen);
	len = mq_unescape(s);
	if ((rc < 0) != (len == (size_t)-1) || (rc == 0 && (len != rlen ||
	    memcmp(s, ref, len)))) {
		fz_show("input", data, size);
		if (rc == 0)
			fz_show("expected", ref, rlen);
		if (len != (size_t)-1)
			fz_show("mq_unescape", s, len);
		fz_fail("mq_unescape: %zd, expected %s", (ssize_t)len,
		    rc < 0 ? "refusal" : "the bytes above");
	}
	free(ref);
	free(s);
	return 0;
}
