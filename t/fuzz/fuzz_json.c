/*
 * fuzz_json: mq_json_str, mq_base64 and mq_utf8_valid (out.c), what
 * mq-recv --json and mq-replay --json print bodies and keys with.
 *
 * - mq_utf8_valid says yes exactly to UTF-8 as Unicode's table 3-7
 *   defines it (the check here is written apart from mq's).
 * - mq_json_str of any bytes is a valid JSON text (RFC 8259, raw bytes
 *   UTF-8 too) with no raw control byte; when the input is valid UTF-8
 *   a JSON string decoder written here reads it back to the input (bytes
 *   that are not UTF-8 become U+FFFD: JSON cannot carry them).
 * - mq_base64 of any bytes is padded RFC 4648 base64 of the right length
 *   that decodes (strictly: zero pad bits) to the input.
 */
#include <stdlib.h>
#include <string.h>

#include "mq.h"
#include "fuzzutil.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_cap c;
	unsigned char *dec;
	size_t used, len, i;
	int utf8 = fz_utf8_ok(data, size);

	FZ_CHECK(mq_utf8_valid(data, size) == utf8,
	    "mq_utf8_valid says %d", mq_utf8_valid(data, size));

	mq_json_str(fz_open(&c), data, size);
	fz_close(&c);
	for (i = 0; i < c.n; i++)
		FZ_CHECK((unsigned char)c.p[i] >= 0x20, "raw control byte "
		    "0x%02x at %zu of the JSON string", c.p[i], i);
	if (fz_json_string(c.p, c.n, 0, &used, &dec, &len) < 0 ||
	    used != c.n || (utf8 && (len != size || memcmp(dec, data, size)))) {
		fz_show("input", data, size);
		fz_show("JSON", c.p, c.n);
		fz_fail("the JSON string does not decode to the input");
	}
	free(dec);
	if (fz_json_value(c.p, c.n, &used) < 0 || used != c.n) {
		fz_show("input", data, size);
		fz_show("JSON", c.p, c.n);
		fz_fail("UTF-8 input but not a valid JSON text");
	}
	free(c.p);

	mq_base64(fz_open(&c), data, size);
	fz_close(&c);
	FZ_CHECK(c.n == (size + 2) / 3 * 4, "base64 of %zu bytes is %zu long",
	    size, c.n);
	if (fz_base64_decode(c.p, c.n, &dec, &len) < 0 || len != size ||
	    memcmp(dec, data, size)) {
		fz_show("input", data, size);
		fz_show("base64", c.p, c.n);
		fz_fail("base64 does not decode to the input");
	}
	free(dec);
	free(c.p);
	return 0;
}
