/*
 * pq.c: libpq, loaded the first time a PostgreSQL database is opened
 * rather than linked (pq.h says why).  MQ_LIBPQ names the file to load
 * instead of libpq.so.5 (mq(7)).  A program on SQLite never comes here.
 *
 * A libpq that cannot be loaded, or lacks a function mq calls (older
 * than 14, without pipeline mode), is a usage error, 64, as a build
 * without libpq is: nothing was opened, and it takes installing libpq5
 * or pointing MQ_LIBPQ at it to go on.
 */
#include <dlfcn.h>
#include <stdlib.h>

#include "pg.h"

#define X(ret, name, args)	ret (*pq_##name) args;
PQ_FUNCS
#undef X

void
mq_pg_load(void)
{
	static int loaded;
	const char *lib = getenv("MQ_LIBPQ");
	void *h;

	if (loaded)
		return;
	if (!lib || !*lib)
		lib = "libpq.so.5";
	/*
	 * RTLD_NOW: a symbol missing from what it needs is found here, not
	 * at its first call, in the middle of an operation.
	 */
	if (!(h = dlopen(lib, RTLD_NOW | RTLD_LOCAL)))
		goto fail;
#define X(ret, name, args) \
	if (!(pq_##name = (ret (*)args)dlsym(h, #name))) \
		goto fail;
	PQ_FUNCS
#undef X
	loaded = 1;
	return;
fail:
	mq_die(MQ_EX_USAGE, "cannot load %s (the PostgreSQL client library): "
	    "%s", lib, dlerror());
}
