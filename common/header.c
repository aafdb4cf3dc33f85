/*
 * header.c: message headers, NAME=VALUE pairs that a send gives its
 * messages (mq-send -H) and that go wherever a message is read.
 *
 * A message's headers are one string, "NAME=VALUE\n" for each in the
 * order given, NULL for none; the database holds that same string.  It is
 * unambiguous: a NAME follows the topic-name rule (no '=', no newline)
 * and a VALUE is UTF-8 without control characters (no newline), so
 * "NAME=VALUE\n" at the start or after a newline is one header, whatever
 * the value holds.  A NAME appears once.  In exec mode a header is the
 * variable MQ_H_ and its name in upper case with '-' and '.' as '_'; two
 * names that would be one variable (a-b and A.B) are refused together,
 * so a handler sees every header its message has.
 */
#include <ctype.h>
#include <string.h>

#include "mq.h"

/* The environment variable of header name (n bytes): buf holds
   MQ_HENV_MAX bytes. */
void
mq_header_env(char *buf, const char *name, size_t n)
{
	size_t i;

	memcpy(buf, "MQ_H_", 5);
	for (i = 0; i < n && i < MQ_NAME_MAX; i++)
		buf[5 + i] = name[i] == '-' || name[i] == '.' ? '_' :
		    (char)toupper((unsigned char)name[i]);
	buf[5 + i] = '\0';
}

/*
 * The next header at *p: its name and value (not NUL-terminated) and
 * their lengths; 0 at the end.
 */
int
mq_header_next(const char **p, struct mq_header *h)
{
	const char *s = *p, *eq, *nl;

	if (!s || !*s || !(eq = strchr(s, '=')) || !(nl = strchr(eq, '\n')))
		return 0;
	h->name = s;
	h->nlen = (size_t)(eq - s);
	h->value = eq + 1;
	h->vlen = (size_t)(nl - eq - 1);
	*p = nl + 1;
	return 1;
}

/* The value of header name in hs (its length in *len), or NULL. */
const char *
mq_header_get(const char *hs, const char *name, size_t n, size_t *len)
{
	struct mq_header h;

	while (mq_header_next(&hs, &h))
		if (h.nlen == n && !memcmp(h.name, name, n)) {
			*len = h.vlen;
			return h.value;
		}
	return NULL;
}

/* Every header of want is one of hs, with the same value. */
int
mq_header_match(const char *hs, const char *want)
{
	struct mq_header w;
	const char *v;
	size_t len;

	while (mq_header_next(&want, &w))
		if (!(v = mq_header_get(hs, w.name, w.nlen, &len)) ||
		    len != w.vlen || memcmp(v, w.value, len))
			return 0;
	return 1;
}

/* Printable ASCII: an argument that may be echoed in an error's line. */
static int
plain(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f)
			return 0;
	return 1;
}

static int
value_ok(const char *v, size_t n)
{
	size_t i;

	if (n > MQ_HVALUE_MAX || !mq_utf8_valid((const unsigned char *)v, n))
		return 0;
	for (i = 0; i < n; i++)
		if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f)
			return 0;
	return 1;
}

/*
 * Adds the header of an argument NAME=VALUE to *hs (a string of them,
 * NULL at first); a usage error (64) when it is not one, when NAME came
 * already, or (send) when another name is its environment variable too.
 */
void
mq_header_arg(char **hs, const char *arg, int send)
{
	char name[MQ_NAME_MAX + 1], env[MQ_HENV_MAX], other[MQ_HENV_MAX];
	char shown[MQ_NAME_MAX + 12] = "";
	const char *eq = strchr(arg, '='), *p = *hs;
	struct mq_header h;
	size_t n, old = *hs ? strlen(*hs) : 0, vlen;
	int count = 0;

	/* what the error shows of it: the name, if short and printable */
	n = eq ? (size_t)(eq - arg) : strlen(arg);
	if (n <= MQ_NAME_MAX + 8 && plain(arg, n))
		snprintf(shown, sizeof shown, " '%.*s'", (int)n, arg);
	if (!eq)
		mq_usage_err("invalid header%s: want NAME=VALUE", shown);
	if (n > MQ_NAME_MAX || (memcpy(name, arg, n), name[n] = '\0',
	    !mq_valid_name(name)))
		mq_usage_err("invalid header name%s: use 1-%d of "
		    "A-Z a-z 0-9 . _ -, not starting with - or .", shown,
		    MQ_NAME_MAX);
	vlen = strlen(eq + 1);
	if (!value_ok(eq + 1, vlen))
		mq_usage_err("invalid value of header %s: want up to %d bytes "
		    "of UTF-8 without control characters", name,
		    MQ_HVALUE_MAX);
	mq_header_env(env, name, n);
	while (mq_header_next(&p, &h)) {
		count++;
		if (h.nlen == n && !memcmp(h.name, name, n))
			mq_usage_err("header %s given twice", name);
		mq_header_env(other, h.name, h.nlen);
		if (send && !strcmp(env, other))
			mq_usage_err("headers %.*s and %s would be one "
			    "variable, %s, in exec mode", (int)h.nlen, h.name,
			    name, env);
	}
	if (count >= MQ_HEADERS_MAX)
		mq_usage_err("too many headers: at most %d", MQ_HEADERS_MAX);
	*hs = mq_array(*hs, old + n + vlen + 3, 1);
	memcpy(*hs + old, arg, n + 1 + vlen);
	memcpy(*hs + old + n + 1 + vlen, "\n", 2);
}
