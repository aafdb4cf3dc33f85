/*
 * fuzz_name: mq_valid_name (parse.c), the rule for topic and group names.
 *
 * - It says yes exactly to 1-128 bytes of A-Z a-z 0-9 . _ - not starting
 *   with '-' or '.' (the rule as mq-topic(1) states it, checked here
 *   without <ctype.h>, so a locale cannot widen it).
 * - A valid name holds none of the bytes a receipt or a shell word
 *   would split on (':', whitespace, quotes).
 */
#include <stdlib.h>
#include <string.h>

#include "mq.h"
#include "fuzzutil.h"

static int
ref_name(const char *s)
{
	size_t n = strlen(s), i;

	if (n < 1 || n > MQ_NAME_MAX || s[0] == '-' || s[0] == '.')
		return 0;
	for (i = 0; i < n; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' &&
		    s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
		    s[i] == '.' || s[i] == '_' || s[i] == '-'))
			return 0;
	return 1;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fz_str(data, size);
	int got = mq_valid_name(s), want = ref_name(s);

	if (got != want) {
		fz_show("name", s, strlen(s));
		fz_fail("mq_valid_name: %d, expected %d", got, want);
	}
	if (got)
		FZ_CHECK(!strpbrk(s, ": \t\n\r'\"\\$`*?[]{}()<>|&;#~!"),
		    "a valid name with a special byte: %s", s);
	free(s);
	return 0;
}
