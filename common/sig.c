/*
 * sig.c: signals.  The first SIGTERM or SIGINT asks a program to stop
 * (mq_stop counts them); SIGCHLD and SIGIO only wake it.  Whatever a program is
 * waiting in is told through the poke it registered (a waiter bumps the
 * word it sleeps on), so a signal that lands just before the sleep is
 * not slept through.  Handlers are installed without SA_RESTART, so a
 * blocking call returns with EINTR.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "mq.h"

volatile sig_atomic_t mq_stop;
static void (*volatile poke)(void);

static void
on_signal(int sig)
{
	int saved = errno;

	if (sig != SIGCHLD && sig != SIGIO)
		mq_stop++;
	if (poke)
		poke();
	errno = saved;
}

void
mq_catch_stop(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGCHLD, &sa, NULL);
	sigaction(SIGIO, &sa, NULL);	/* a handler's stderr (exec.c) */
}

/* fn must be async-signal-safe; NULL removes it. */
void
mq_on_signal(void (*fn)(void))
{
	poke = fn;
}
