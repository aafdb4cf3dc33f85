/*
 * replay.c: a main() for a fuzz target without libFuzzer, which hands it
 * each file named, once.  run.sh -c builds every target with it and the
 * plain compiler and replays the seed corpus: so make test, which has no
 * clang, still finds a target that no longer builds or links (a library
 * function that came to need another file) or a seed that now fails.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fuzzutil.h"

/* a target's own setup, when it has one (libFuzzer calls it first) */
int	LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

int
main(int argc, char **argv)
{
	FILE *f;
	char *buf;
	long len;
	size_t n;
	int i;

	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	for (i = 1; i < argc; i++) {
		if (!(f = fopen(argv[i], "rb")) || fseek(f, 0, SEEK_END) < 0 ||
		    (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) < 0) {
			perror(argv[i]);
			return 1;
		}
		n = (size_t)len;
		/* an input of its exact size, so ASan sees a read past it */
		if (!(buf = malloc(n ? n : 1)) || fread(buf, 1, n, f) != n) {
			perror(argv[i]);
			return 1;
		}
		fclose(f);
		LLVMFuzzerTestOneInput((const uint8_t *)buf, n);
		free(buf);
	}
	return 0;
}
