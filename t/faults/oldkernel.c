/*
 * oldkernel.c: an LD_PRELOAD shim that makes the kernel look older than
 * Linux 5.16 to a program: syscall(SYS_futex_waitv, ...) fails with
 * ENOSYS, as it does there, so the fallback of a wait on several topics
 * can be tested (t/076-lanes.bats).  Every other syscall() goes through.
 *
 *   cc -shared -fPIC -O2 -Wall -Wextra -o oldkernel.so oldkernel.c -ldl
 *   [MQ_OLDKERNEL_LOG=FILE] LD_PRELOAD=/path/oldkernel.so PROGRAM ...
 *
 * With MQ_OLDKERNEL_LOG, a line "futex_waitv" is appended to FILE for
 * each call refused, so a test can tell that the shim was in the way.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_futex_waitv
#define SYS_futex_waitv	449
#endif

long
syscall(long n, ...)
{
	static long (*real)(long, ...);
	long a[6];
	const char *log;
	va_list ap;
	int fd, i;

	va_start(ap, n);
	for (i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (n == SYS_futex_waitv) {
		if ((log = getenv("MQ_OLDKERNEL_LOG")) &&
		    (fd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0644)) >= 0) {
			/* the refusal stands without its line */
			(void)!write(fd, "futex_waitv\n", 12);
			close(fd);
		}
		errno = ENOSYS;
		return -1;
	}
	if (!real && !(real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall")))
		abort();
	return real(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}
