/*
 * wait.c: sleeping until the database may have changed, without polling
 * hard.
 *
 * A commit by another process appends to the -wal file; inotify on the
 * database's directory reports that write (writes to the mmapped -shm are
 * not reported, so it is not watched).  Events are only a hint: PRAGMA
 * data_version, which changes exactly when another connection committed,
 * decides.  The write comes before the commit is visible (the writer
 * syncs the WAL, then publishes the commit in the -shm), so after an event
 * with no change yet the wait looks again every millisecond for a while
 * (HURRY_MS) instead of sleeping until the next event.  Where inotify is missing the wait falls back to looking every
 * 50ms.  Either way a wait never sleeps past `until`, so a caller that
 * knows when the next lease or retry falls due passes that time.
 *
 * The waiter is created before the caller's first look, so a commit that
 * lands between a look and the sleep is not missed: its events are queued
 * and its data_version differs.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/inotify.h>
#endif

#include "mq.h"

#define FALLBACK_MS	50
#define SAFETY_MS	1000	/* look now and then even with inotify */
#define HURRY_MS	200	/* after an event, look every ms this long */

struct mq_waiter {
	struct mq	*q;
	int		 fd;
	int64_t		 dv;
};

struct mq_waiter *
mq_waiter_new(struct mq *q)
{
	struct mq_waiter *w = mq_alloc(sizeof *w);
	char *dir = mq_strdup(mq_path(q)), *slash;

	w->q = q;
	w->fd = -1;
#ifdef __linux__
	if ((slash = strrchr(dir, '/')))
		*(slash == dir ? slash + 1 : slash) = '\0';
	else
		strcpy(dir, ".");
	if ((w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) >= 0 &&
	    inotify_add_watch(w->fd, dir, IN_MODIFY | IN_CREATE |
	    IN_MOVED_TO) < 0) {
		close(w->fd);
		w->fd = -1;
	}
#else
	(void)slash;
#endif
	free(dir);
	w->dv = mq_data_version(q);
	return w;
}

void
mq_waiter_free(struct mq_waiter *w)
{
	if (!w)
		return;
	if (w->fd >= 0)
		close(w->fd);
	free(w);
}

int
mq_waiter_fd(struct mq_waiter *w)
{
	return w->fd;
}

static void
drain(int fd)
{
	char buf[4096];

	while (read(fd, buf, sizeof buf) > 0)
		;
}

/*
 * Returns 1 when another connection committed since the last call (or the
 * waiter's creation), 0 when `until` (ms since the epoch) came first, 2
 * when `fd` (if not -1) became readable, -1 when interrupted by a signal.
 */
int
mq_wait(struct mq_waiter *w, int64_t until, int fd)
{
	struct pollfd pfd[2];
	int64_t now, dv, ms, hurry = 0;
	int rc;

	for (;;) {
		if ((dv = mq_data_version(w->q)) != w->dv) {
			w->dv = dv;
			return 1;
		}
		now = mq_now();
		if (now >= until)
			return 0;
		ms = until - now;
		if (ms > (w->fd >= 0 ? SAFETY_MS : FALLBACK_MS))
			ms = w->fd >= 0 ? SAFETY_MS : FALLBACK_MS;
		if (now < hurry)
			ms = 1;
		pfd[0].fd = w->fd;	/* poll ignores a negative fd */
		pfd[0].events = POLLIN;
		pfd[1].fd = fd;
		pfd[1].events = POLLIN;
		rc = poll(pfd, 2, (int)ms);
		if (rc < 0 && errno == EINTR)
			return -1;
		if (rc > 0 && (pfd[1].revents & POLLIN))
			return 2;
		if (rc > 0 && (pfd[0].revents & POLLIN)) {
			drain(w->fd);
			hurry = mq_now() + HURRY_MS;
		}
	}
}
