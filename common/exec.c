/*
 * exec.c: mq-recv's exec mode.  Runs a command per message, no shell, the
 * body on its stdin and the metadata in MQ_* variables, up to `jobs` at
 * once, and settles each delivery by the command's exit status:
 * 0 acks, 65 (EX_DATAERR) dead-letters, anything else (or a signal) fails
 * it for retry with the group's backoff.
 *
 * Invariants:
 * - This process is registered as a consumer and its leases carry its id,
 *   so if it dies its messages are released at once by the next consumer
 *   on this host that looks (deliver.c, reap).
 * - Leases are extended every third of the lease while handlers run.
 * - The first SIGTERM or SIGINT stops claiming; running handlers finish
 *   and are settled; exit 0.  A second one sends SIGTERM to the handlers,
 *   releases what is still held (redelivered at once) and exits 130.
 * - Handlers run in their own process group, so a Ctrl-C at the terminal
 *   reaches mq-recv, which decides, and not the handlers directly.
 * - The body reaches the handler through an unlinked temporary file, never
 *   a pipe, so a handler that does not read its stdin cannot block us.
 * - A claim here commits without its own sync (mq_sync): losing it to a
 *   power cut only delivers the message again, and every settle, heartbeat
 *   and the final leave are synced, which syncs the claims before them.
 */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mq.h"

volatile sig_atomic_t mq_stop;
static int sigpipe[2] = { -1, -1 };

static void
on_signal(int sig)
{
	int saved = errno;
	char c = (char)sig;

	if (sig != SIGCHLD)
		mq_stop++;
	if (sigpipe[1] >= 0)
		(void)write(sigpipe[1], &c, 1);
	errno = saved;
}

/* Catches SIGTERM and SIGINT (and SIGCHLD) into mq_stop and a self-pipe. */
void
mq_catch_stop(void)
{
	struct sigaction sa;

	if (sigpipe[0] < 0 && pipe2(sigpipe, O_CLOEXEC | O_NONBLOCK) < 0)
		mq_die(MQ_EX_SOFTWARE, "cannot create pipe:");
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGCHLD, &sa, NULL);
}

int
mq_stop_fd(void)
{
	return sigpipe[0];
}

static void
drain_signals(void)
{
	char buf[64];

	while (read(sigpipe[0], buf, sizeof buf) > 0)
		;
}

struct job {
	pid_t		pid;
	struct mq_msg	msg;
};

static int
body_fd(const struct mq_msg *m)
{
	int fd = -1;
	size_t done = 0;
	ssize_t w;

#ifdef MFD_CLOEXEC
	fd = memfd_create("mq-body", MFD_CLOEXEC);
#endif
	if (fd < 0) {
		char path[] = "/tmp/mq-body.XXXXXX";

		if ((fd = mkostemp(path, O_CLOEXEC)) < 0)
			mq_die(MQ_EX_IOERR, "cannot create temporary file:");
		unlink(path);
	}
	while (done < m->len) {
		if ((w = write(fd, m->body + done, m->len - done)) < 0) {
			if (errno == EINTR)
				continue;
			mq_die(MQ_EX_IOERR, "cannot write temporary file:");
		}
		done += w;
	}
	lseek(fd, 0, SEEK_SET);
	return fd;
}

/* The handler's environment: ours, with the MQ_* variables set anew. */
static char **
handler_env(const struct mq_claim *c, const struct mq_msg *m)
{
	extern char **environ;
	static const char *names[] = { "MQ_TOPIC=", "MQ_GROUP=", "MQ_OFFSET=",
	    "MQ_RECEIPT=", "MQ_ATTEMPT=", "MQ_KEY=", "MQ_TIME=" };
	char ts[40], **env, **e;
	size_t n = 0, i, k;

	for (e = environ; *e; e++)
		n++;
	env = mq_array(NULL, n + 8, sizeof *env);
	for (k = 0, e = environ; *e; e++) {
		for (i = 0; i < 7; i++)
			if (!strncmp(*e, names[i], strlen(names[i])))
				break;
		if (i == 7)
			env[k++] = *e;	/* borrowed, not freed */
	}
	mq_rfc3339(m->ts, ts, sizeof ts);
	asprintf(&env[k++], "MQ_TOPIC=%s", c->topic);
	asprintf(&env[k++], "MQ_GROUP=%s", c->group);
	asprintf(&env[k++], "MQ_OFFSET=%lld", (long long)m->off);
	asprintf(&env[k++], "MQ_RECEIPT=%s", m->receipt);
	asprintf(&env[k++], "MQ_ATTEMPT=%d", m->attempt);
	asprintf(&env[k++], "MQ_KEY=%s", m->key ? m->key : "");
	asprintf(&env[k++], "MQ_TIME=%s", ts);
	for (i = k - 7; i < k; i++)
		if (!env[i])
			mq_die(MQ_EX_SOFTWARE, "out of memory");
	env[k] = NULL;
	return env;
}

/*
 * Starts the handler in a process group of its own, the body on its
 * stdin; returns its pid, or -errno when it could not be executed.
 * posix_spawn, not fork: it does not copy our address space first, which
 * is most of the time from a message's claim to its handler's start.
 */
static pid_t
spawn(const struct mq_claim *c, const struct mq_exec *x, const struct mq_msg *m)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t def;
	char **env = handler_env(c, m);
	int fd = body_fd(m), rc, i, nmq = 7;
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	if (posix_spawn_file_actions_init(&fa) || posix_spawnattr_init(&at) ||
	    posix_spawn_file_actions_adddup2(&fa, fd, 0) ||
	    posix_spawnattr_setpgroup(&at, 0))
		mq_die(MQ_EX_SOFTWARE, "cannot set up handler:");
	sigemptyset(&def);
	sigaddset(&def, SIGTERM);
	sigaddset(&def, SIGINT);
	sigaddset(&def, SIGCHLD);
	sigaddset(&def, SIGPIPE);
	if (posix_spawnattr_setsigdefault(&at, &def) ||
	    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP |
	    POSIX_SPAWN_SETSIGDEF))
		mq_die(MQ_EX_SOFTWARE, "cannot set up handler:");
	rc = posix_spawnp(&pid, x->argv[0], &fa, &at, x->argv, env);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	close(fd);
	for (i = 0; env[i]; i++)
		;
	while (nmq-- > 0)	/* the seven handler_env made; the rest borrowed */
		free(env[--i]);
	free(env);
	return rc ? -rc : pid;
}

static void
settle_job(struct mq *q, struct job *j, int status)
{
	struct mq_receipt r;
	struct mq_settle s;
	char reason[64];
	int rc;

	memset(&s, 0, sizeof s);
	if (mq_parse_receipt(j->msg.receipt, &r) < 0)
		mq_die(MQ_EX_SOFTWARE, "bad receipt %s", j->msg.receipt);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		s.how = MQ_ACK;
	} else if (WIFEXITED(status) && WEXITSTATUS(status) == MQ_EX_DATAERR) {
		s.how = MQ_DEAD_LETTER;
		s.reason = "rejected by handler (exit 65)";
	} else {
		s.how = MQ_FAIL;
		s.delay = -1;
		if (WIFEXITED(status))
			snprintf(reason, sizeof reason, "handler exited %d",
			    WEXITSTATUS(status));
		else
			snprintf(reason, sizeof reason, "handler killed by "
			    "signal %d", WTERMSIG(status));
		s.reason = reason;
	}
	mq_begin(q);
	rc = mq_settle(q, &r, &s);
	mq_commit(q);
	if (rc == MQ_STALE || rc == MQ_UNKNOWN)
		mq_warn("%s: lease was lost before the handler finished; "
		    "not settled", j->msg.receipt);
	mq_msg_free(&j->msg);
	j->pid = 0;
}

static int
reap_jobs(struct mq *q, struct job *jobs, int n)
{
	int i, status, running = 0;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		for (i = 0; i < n; i++)
			if (jobs[i].pid == pid)
				settle_job(q, &jobs[i], status);
	for (i = 0; i < n; i++)
		running += jobs[i].pid != 0;
	return running;
}

/* A message whose handler never ran goes back, due now. */
static void
release(struct mq *q, struct mq_msg *m)
{
	struct mq_receipt r;
	struct mq_settle s;

	memset(&s, 0, sizeof s);
	s.how = MQ_RELEASE;
	s.reason = "handler could not be run";
	if (mq_parse_receipt(m->receipt, &r) == 0) {
		mq_begin(q);
		mq_settle(q, &r, &s);
		mq_commit(q);
	}
	mq_msg_free(m);
}

/*
 * The second signal: handlers get SIGTERM, then SIGKILL after a grace
 * time, and are waited for, so none still runs when its message is
 * released for redelivery.
 */
static void
stop_jobs(struct job *jobs, int n)
{
	int i, left;
	int64_t end = mq_now() + 2000;
	pid_t pid;

	for (i = 0; i < n; i++)
		if (jobs[i].pid)
			kill(-jobs[i].pid, SIGTERM);
	for (;;) {
		while ((pid = waitpid(-1, NULL, WNOHANG)) > 0)
			for (i = 0; i < n; i++)
				if (jobs[i].pid == pid)
					jobs[i].pid = 0;
		for (left = i = 0; i < n; i++)
			left += jobs[i].pid != 0;
		if (!left)
			break;
		if (mq_now() >= end) {
			for (i = 0; i < n; i++)
				if (jobs[i].pid) {
					kill(-jobs[i].pid, SIGKILL);
					waitpid(jobs[i].pid, NULL, 0);
					jobs[i].pid = 0;
				}
			break;
		}
		usleep(10000);
	}
}

int
mq_exec_run(struct mq *q, struct mq_claim *c, const struct mq_exec *x)
{
	struct job *jobs = mq_array(NULL, x->jobs, sizeof *jobs);
	struct mq_msg *msgs = mq_array(NULL, x->jobs, sizeof *msgs);
	struct mq_waiter *w;
	int64_t now, next_due, beat, lease, wake;
	long taken = 0;
	int i, k, running = 0, want, stopped = 0, failed = 0;

	memset(jobs, 0, x->jobs * sizeof *jobs);
	mq_catch_stop();
	c->consumer = mq_consumer_join(q, c->topic, c->group, c->latest,
	    &lease);
	if (c->lease)
		lease = c->lease;
	w = mq_waiter_new(q);
	beat = mq_now() + lease / 3;
	for (;;) {
		drain_signals();
		running = reap_jobs(q, jobs, x->jobs);
		if (mq_stop >= 2)
			break;
		if (mq_stop)
			stopped = 1;
		if (stopped && running == 0)
			break;
		now = mq_now();
		next_due = INT64_MAX;
		want = x->jobs - running;
		if (x->limit && want > x->limit - taken)
			want = (int)(x->limit - taken);
		if (!stopped && want > 0) {
			mq_sync(q, 0);
			k = mq_claim(q, c, msgs, want, &next_due);
			mq_sync(q, 1);
			for (i = 0; i < k; i++) {
				int slot = 0;
				pid_t pid;

				while (jobs[slot].pid)
					slot++;
				if (failed || (pid = spawn(c, x, &msgs[i])) < 0) {
					/* not run: give it back untouched */
					if (!failed)
						failed = -pid;
					release(q, &msgs[i]);
					stopped = 1;
					continue;
				}
				jobs[slot].msg = msgs[i];
				jobs[slot].pid = pid;
				running++;
			}
			taken += k;
			if (k > 0)
				continue;
		}
		if (running == 0 && ((x->limit && taken >= x->limit) ||
		    (!x->follow && mq_now() >= x->until)))
			break;
		if (now >= beat) {
			mq_consumer_heartbeat(q, c->consumer,
			    running ? now + lease : 0);
			beat = now + lease / 3;
		}
		wake = beat;
		if (next_due < wake)
			wake = next_due;
		if (!x->follow && running == 0 && x->until < wake)
			wake = x->until;
		if (wake > mq_now() + 1000)
			wake = mq_now() + 1000;	/* look for dead consumers */
		mq_wait(w, wake, sigpipe[0]);
	}
	if (mq_stop >= 2)
		stop_jobs(jobs, x->jobs);
	mq_consumer_leave(q, c->consumer);	/* releases what is still held */
	mq_waiter_free(w);
	for (i = 0; i < x->jobs; i++)
		mq_msg_free(&jobs[i].msg);
	free(jobs);
	free(msgs);
	if (failed)
		mq_die(failed == ENOENT ? MQ_EX_NOINPUT : failed == EACCES ?
		    MQ_EX_NOPERM : MQ_EX_SOFTWARE, "cannot run %s: %s",
		    x->argv[0], strerror(failed));
	if (mq_stop >= 2)
		return 130;
	return taken || mq_stop ? 0 : MQ_EX_NONE;
}
