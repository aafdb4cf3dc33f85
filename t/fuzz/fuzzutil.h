/*
 * fuzzutil.h: what the libFuzzer targets in t/fuzz share.  The checks here
 * are written apart from the library on purpose (a JSON validator and
 * string decoder, a base64 decoder, a UTF-8 validator after Unicode's
 * table 3-7), so a target compares mq's output with an independent
 * reading of it, not with mq's own code.
 *
 * A failed invariant prints what disagreed and aborts, which libFuzzer
 * reports as a crash and saves the input as the reproducer.
 */
#ifndef FUZZUTIL_H
#define FUZZUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Every target defines it; declared for -Wmissing-prototypes. */
int	 LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

void	 fz_fail(const char *fmt, ...)
	    __attribute__((noreturn, format(printf, 1, 2)));
#define FZ_CHECK(cond, ...) do {					\
	if (!(cond)) {							\
		fprintf(stderr, "%s:%d: check failed: %s\n",		\
		    __FILE__, __LINE__, #cond);				\
		fz_fail(__VA_ARGS__);					\
	}								\
} while (0)

/* Writes "label: <bytes, C-escaped>" to stderr, for failure reports. */
void	 fz_show(const char *label, const void *p, size_t n);

/* A NUL-terminated copy of n bytes (free it). */
char	*fz_str(const void *p, size_t n);

/* Output captured in memory: fz_open, write to the FILE, fz_close. */
struct fz_cap {
	FILE	*f;
	char	*p;
	size_t	 n;
};
FILE	*fz_open(struct fz_cap *);
void	 fz_close(struct fz_cap *);	/* p, n hold the output; free(p) */

/* Little-endian integers from the front of the input, 0 past its end. */
uint64_t fz_u64(const uint8_t **p, size_t *n);
uint32_t fz_u32(const uint8_t **p, size_t *n);

/* UTF-8 as Unicode 3-7 defines it: no overlongs, surrogates, > U+10FFFF. */
int	 fz_utf8_ok(const unsigned char *p, size_t n);

/*
 * A JSON string at p (n bytes): 0 and its decoded bytes (malloc'd, in
 * *out, *outlen) and the bytes it took (*used); -1 if malformed.  strict
 * also requires the raw bytes to be valid UTF-8, as RFC 8259 does.
 */
int	 fz_json_string(const char *p, size_t n, int strict, size_t *used,
	    unsigned char **out, size_t *outlen);
/* Any JSON value at p: 0 and the bytes it took, or -1. */
int	 fz_json_value(const char *p, size_t n, size_t *used);
/*
 * The value of member key of the object at p (which must be valid):
 * 0 and its span, or -1 if there is no such member.
 */
int	 fz_json_get(const char *p, size_t n, const char *key,
	    const char **v, size_t *vlen);

/* base64 (RFC 4648, padded): 0 and the decoded bytes (malloc'd), or -1. */
int	 fz_base64_decode(const char *p, size_t n, unsigned char **out,
	    size_t *outlen);

#endif
