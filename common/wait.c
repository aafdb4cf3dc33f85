/*
 * wait.c: sleeping until the database may have changed, without polling
 * hard.
 *
 * A commit by another process appends to the -wal file, and inotify
 * reports that write (writes to the mmapped -shm are not reported, so it
 * is not watched).  The watch is on the -wal file itself, which our own
 * open connection keeps in place; only when it cannot be watched is the
 * directory watched, with events of other files in it ignored.  Events
 * are only a hint: PRAGMA data_version, which changes exactly when another
 * connection committed, decides.  The write comes before the commit is
 * visible (the writer syncs the WAL, then publishes the commit in the
 * -shm), so after an event with no change yet the wait looks again every
 * 0.2ms for a while
 * (HURRY_MS, longer than a sync takes) instead of sleeping until the next
 * event.  Where inotify is missing the wait falls back to looking every
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
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/inotify.h>
#endif

#include "mq.h"

#define FALLBACK_MS	50
#define SAFETY_MS	1000	/* look now and then even with inotify */
#define HURRY_MS	50	/* after an event, look this long ... */
#define HURRY_NS	200000	/* ... this often */

struct mq_waiter {
	struct mq	*q;
	int		 fd;
	int64_t		 dv;
	int		 dirwatch;	/* watching the directory, not the WAL */
	const char	*base;		/* the database's file name */
	size_t		 baselen;
};

struct mq_waiter *
mq_waiter_new(struct mq *q)
{
	struct mq_waiter *w = mq_alloc(sizeof *w);
	size_t n = strlen(mq_path(q));
	char *wal = mq_alloc(n + 5), *dir = mq_strdup(mq_path(q)), *slash;

	w->q = q;
	w->fd = -1;
	w->base = strrchr(mq_path(q), '/') ? strrchr(mq_path(q), '/') + 1 :
	    mq_path(q);
	w->baselen = strlen(w->base);
	w->dv = mq_data_version(q);	/* a read: the -wal file exists now */
#ifdef __linux__
	snprintf(wal, n + 5, "%s-wal", mq_path(q));
	if ((slash = strrchr(dir, '/')))
		*(slash == dir ? slash + 1 : slash) = '\0';
	else
		strcpy(dir, ".");
	if ((w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) >= 0 &&
	    inotify_add_watch(w->fd, wal, IN_MODIFY) < 0) {
		w->dirwatch = 1;
		if (inotify_add_watch(w->fd, dir, IN_MODIFY | IN_CREATE |
		    IN_MOVED_TO) < 0) {
			close(w->fd);
			w->fd = -1;
		}
	}
#else
	(void)slash;
#endif
	free(wal);
	free(dir);
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

/*
 * Reads the queued events (a bounded number of times: a busy directory
 * must not keep us here); returns whether one was about the database or
 * its WAL, not another file of the same directory.
 */
static int
drain(struct mq_waiter *w)
{
#ifdef __linux__
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	const struct inotify_event *e;
	ssize_t n;
	char *p;
	int tries, ours = 0;

	for (tries = 0; tries < 8 && (n = read(w->fd, buf, sizeof buf)) > 0;
	    tries++)
		for (p = buf; p < buf + n; p += sizeof *e + e->len) {
			e = (const struct inotify_event *)p;
			if (!w->dirwatch)
				ours = 1;
			else if (e->len && !strncmp(e->name, w->base, w->baselen) &&
			    (e->name[w->baselen] == '\0' ||
			    !strcmp(e->name + w->baselen, "-wal")))
				ours = 1;
		}
	return ours;
#else
	(void)w;
	return 0;
#endif
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
	struct timespec ts;
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
		ts.tv_sec = ms / 1000;
		ts.tv_nsec = ms % 1000 * 1000000;
		if (now < hurry) {
			ts.tv_sec = 0;
			ts.tv_nsec = HURRY_NS;
		}
		pfd[0].fd = w->fd;	/* poll ignores a negative fd */
		pfd[0].events = POLLIN;
		pfd[1].fd = fd;
		pfd[1].events = POLLIN;
		rc = ppoll(pfd, 2, &ts, NULL);
		if (rc < 0 && errno == EINTR)
			return -1;
		if (rc > 0 && (pfd[1].revents & POLLIN))
			return 2;
		if (rc > 0 && (pfd[0].revents & POLLIN) && drain(w))
			hurry = mq_now() + HURRY_MS;
	}
}
