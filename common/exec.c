/*
 * exec.c: mq-recv's exec mode.  Runs a command per message, no shell, the
 * body on its stdin and the metadata in MQ_* variables, up to `jobs` at
 * once, and settles each delivery by the command's exit status:
 * 0 acks, 65 (EX_DATAERR) dead-letters, anything else (or a signal) fails
 * it for retry with the group's backoff.  The loop around it is follow.c.
 *
 * Invariants:
 * - This process is registered as a consumer and its leases carry its id,
 *   so if it dies its messages are released at once by the next consumer
 *   on this host that looks (mq_reap).
 * - Leases are extended every third of the lease while handlers run.
 * - Handlers that finish together are settled together: one commit, one
 *   sync.
 * - The first SIGTERM or SIGINT stops claiming; running handlers finish
 *   and are settled; exit 0.  A second one sends SIGTERM to the handlers,
 *   then SIGKILL, waits for them, and releases what is still held
 *   (redelivered at once); exit 130.
 * - Handlers run in a process group of their own (the handler group:
 *   one per mq-recv, held open by an anchor process that does nothing),
 *   so a Ctrl-C at the terminal reaches mq-recv, which decides, and not
 *   the handlers directly.
 * - A handler dies with its mq-recv (PR_SET_PDEATHSIG, set in the child
 *   before it runs the command, after checking that its parent is still
 *   the mq-recv that made it); what a handler started in turn stays in
 *   the handler group, which the consumer row names, and the consumer that
 *   reaps a dead one kills that group before it releases the leases
 *   (host.c): a message is never handled twice at once on this host.
 * - The body reaches the handler through an unlinked temporary file, never
 *   a pipe, so a handler that does not read its stdin cannot block us.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mq.h"

#define TAIL	2048	/* bytes of a handler's stderr kept for its reason */
#define DRAIN_MAX	16	/* reads of a stderr pipe a turn */
#define GRACE	5000	/* ms from a timeout's SIGTERM to its SIGKILL */

struct job {
	pid_t		pid;
	struct mq_msg	msg;
	int		err;		/* the read end of its stderr; -1 */
	int64_t		start, term;	/* when it started; got SIGTERM */
	int64_t		timeout;	/* ms it may run; 0: no limit */
	struct mq_proc	*tree;		/* it and its own, at the SIGTERM */
	int		 ntree;
	char		tail[TAIL];	/* the last of its stderr */
	size_t		tlen;
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

/*
 * The handler's environment: ours, with the MQ_* variables set anew and
 * one MQ_H_NAME for each header (none inherited).  *made: how many at the
 * end were made here, to free; the rest are borrowed.
 */
static char **
handler_env(const struct mq_claim *c, const struct mq_msg *m, int *made)
{
	extern char **environ;
	static const char *names[] = { "MQ_TOPIC=", "MQ_GROUP=", "MQ_OFFSET=",
	    "MQ_RECEIPT=", "MQ_ATTEMPT=", "MQ_KEY=", "MQ_TIME=", "MQ_H_" };
	char ts[40], var[MQ_HENV_MAX], **env, **e;
	const char *hs = m->headers;
	struct mq_header h;
	size_t n = 0, i, k, first;

	for (e = environ; *e; e++)
		n++;
	env = mq_array(NULL, n + 8 + MQ_HEADERS_MAX, sizeof *env);
	for (k = 0, e = environ; *e; e++) {
		for (i = 0; i < 8; i++)
			if (!strncmp(*e, names[i], strlen(names[i])))
				break;
		if (i == 8)
			env[k++] = *e;	/* borrowed, not freed */
	}
	first = k;
	mq_rfc3339(m->ts, ts, sizeof ts);
	asprintf(&env[k++], "MQ_TOPIC=%s", m->topic);
	asprintf(&env[k++], "MQ_GROUP=%s", c->group);
	asprintf(&env[k++], "MQ_OFFSET=%lld", (long long)m->off);
	asprintf(&env[k++], "MQ_RECEIPT=%s", m->receipt);
	asprintf(&env[k++], "MQ_ATTEMPT=%d", m->attempt);
	asprintf(&env[k++], "MQ_KEY=%s", m->key ? m->key : "");
	asprintf(&env[k++], "MQ_TIME=%s", ts);
	while (k < first + 7 + MQ_HEADERS_MAX && mq_header_next(&hs, &h)) {
		mq_header_env(var, h.name, h.nlen);
		asprintf(&env[k++], "%s=%.*s", var, (int)h.vlen, h.value);
	}
	for (i = first; i < k; i++)
		if (!env[i])
			mq_die(MQ_EX_SOFTWARE, "out of memory");
	env[k] = NULL;
	*made = (int)(k - first);
	return env;
}

/* The handler group and what a child needs to join it (spawn below). */
static pid_t group, parent;
static int64_t group_start;

/*
 * The anchor: a child that only waits, so the handler group exists while
 * mq-recv lives, and dies with it.
 */
static void
start_group(void)
{
	sigset_t all;
	pid_t pid;

	parent = getpid();
	if ((pid = fork()) < 0)
		mq_die(MQ_EX_SOFTWARE, "cannot fork:");
	if (pid == 0) {
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(0);
		sigfillset(&all);
		sigdelset(&all, SIGKILL);
		sigprocmask(SIG_SETMASK, &all, NULL);
		for (;;)
			pause();
	}
	setpgid(pid, pid);	/* both sides: whichever runs first */
	group = pid;
	group_start = mq_proc_start(pid);
}

/* Where argv[0] is run from: a path, or the first match in $PATH. */
static char *
find_command(const char *name)
{
	const char *path = getenv("PATH"), *p, *e;
	char buf[PATH_MAX];
	struct stat st;

	if (strchr(name, '/'))
		return mq_strdup(name);
	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	for (p = path; ; p = e + 1) {
		e = strchr(p, ':');
		if (!e)
			e = p + strlen(p);
		snprintf(buf, sizeof buf, "%.*s/%s", (int)(e - p),
		    e == p ? "." : p, name);
		if (e == p)
			snprintf(buf, sizeof buf, "./%s", name);
		if (stat(buf, &st) == 0 && S_ISREG(st.st_mode) &&
		    access(buf, X_OK) == 0)
			return mq_strdup(buf);
		if (!*e)
			break;
	}
	return mq_strdup(name);	/* execve says what is wrong */
}

struct child {
	const char	*path;
	char		**argv, **env;
	int		 fd, errfd;
	volatile int	 err;	/* written by the child: shared memory */
};

/*
 * The child, on the parent's memory until it runs the command (vfork, as
 * posix_spawn does): it may only make system calls.  Signals back to
 * default, the handler group, death with the parent (unless the parent
 * is gone already), the body on stdin.
 */
static void __attribute__((noreturn))
child(struct child *c)
{
	struct sigaction sa;
	sigset_t none;
	int sig;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = SIG_DFL;
	for (sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			sigaction(sig, &sa, NULL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (setpgid(0, group) < 0 && setpgid(0, 0) < 0) {
		c->err = errno;
		_exit(127);
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);	/* mq-recv died meanwhile: run nothing */
	if (dup2(c->fd, 0) < 0 || dup2(c->errfd, 2) < 0) {
		c->err = errno;
		_exit(127);
	}
	execve(c->path, c->argv, c->env);
	c->err = errno;
	_exit(127);
}

/*
 * Starts the handler in the handler group, the body on its stdin, its
 * stderr on a pipe whose read end goes to *err (see drain); returns its
 * pid, or -errno when it could not be executed.  Not fork: copying our
 * address space first was most of the time from a message's claim to its
 * handler's start.
 */
static pid_t
spawn(const struct mq_claim *c, char **argv, const char *path,
    const struct mq_msg *m, int *err)
{
	struct child ch;
	sigset_t all, old;
	int i, nmq, p[2];
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	if (pipe2(p, O_CLOEXEC) < 0)
		mq_die(MQ_EX_SOFTWARE, "cannot make a pipe:");
	/* its data wakes us (SIGIO, see sig.c) wherever we wait */
	if (fcntl(p[0], F_SETOWN, getpid()) < 0 ||
	    fcntl(p[0], F_SETFL, O_NONBLOCK | O_ASYNC) < 0)
		mq_die(MQ_EX_SOFTWARE, "cannot set up a pipe:");
	ch.path = path;
	ch.argv = argv;
	ch.env = handler_env(c, m, &nmq);
	ch.fd = body_fd(m);
	ch.errfd = p[1];
	ch.err = 0;
	/* no handler of ours may run in the child, on our memory */
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	if ((pid = vfork()) == 0)
		child(&ch);
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(ch.fd);
	close(p[1]);
	for (i = 0; ch.env[i]; i++)
		;
	while (nmq-- > 0)	/* those handler_env made; the rest borrowed */
		free(ch.env[--i]);
	free(ch.env);
	if (pid < 0 || ch.err) {
		close(p[0]);
		if (pid < 0)
			return -errno;
		waitpid(pid, NULL, 0);
		return -ch.err;
	}
	*err = p[0];
	return pid;
}

/*
 * What a handler wrote to stderr goes on to ours as it comes, and its
 * last TAIL bytes are kept for the reason of a failure (j NULL: an
 * ended handler's pipe that what it started still holds open, read to
 * its end).  At the end of its writers, the pipe closes.  At most
 * DRAIN_MAX reads a turn, so that a handler that writes without end does
 * not keep us from the rest (timeouts, leases, signals): 1 when there
 * may be more.
 */
static int
drain(int *fd, struct job *j)
{
	char buf[4096];
	ssize_t n;
	int reads = 0;

	while (*fd >= 0) {
		if (reads++ == DRAIN_MAX)
			return 1;	/* more: the rest on the next turn */
		if ((n = read(*fd, buf, sizeof buf)) < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0 || errno != EAGAIN) {
				close(*fd);
				*fd = -1;
			}
			return 0;
		}
		fwrite(buf, 1, n, stderr);
		if (!j)
			continue;
		if ((size_t)n >= TAIL) {
			memcpy(j->tail, buf + n - TAIL, TAIL);
			j->tlen = TAIL;
		} else {
			if (j->tlen + n > TAIL) {
				memmove(j->tail, j->tail + (j->tlen + n - TAIL),
				    TAIL - n);
				j->tlen = TAIL - n;
			}
			memcpy(j->tail + j->tlen, buf, n);
			j->tlen += n;
		}
	}
	return 0;
}

/*
 * A handler and what it started, its descendants found in /proc (they
 * share the handler group with the other handlers, so the group cannot
 * be signalled for one of them); with SIGTERM they are kept, so that
 * those still there when the grace time ends, or when the handler has
 * gone without them, get SIGKILL (host.c checks each is still itself).
 */
static void
kill_tree(struct job *j, int sig)
{
	struct mq_proc *t;
	int n = j->pid ? mq_proc_tree(j->pid, &t) : 0;

	if (sig == SIGTERM) {
		free(j->tree);
		j->tree = t;
		j->ntree = n;
		mq_proc_kill(t, n, sig);
		return;
	}
	if (n)
		mq_proc_kill(t, n, sig);
	if (n)
		free(t);
	mq_proc_kill(j->tree, j->ntree, sig);	/* those that were there */
	free(j->tree);
	j->tree = NULL;
	j->ntree = 0;
}

struct runner {
	struct mq	*q;
	char		**argv;
	char		*path;		/* of argv[0] */
	struct job	*jobs;
	int		 n;		/* slots */
	int		 failed;	/* errno of a handler that could not run */
	int64_t		 timeout[MQ_LANES_MAX];	/* ms a handler of each lane
					   may run; 0: no limit */
	int		*open;		/* stderr pipes of ended handlers */
	int		 nopen;
};

/*
 * The tail as text a database takes: bytes that are not UTF-8 (the cut
 * may split a character) and controls but newline and tab become '?'.
 */
static void
clean(char *p, size_t n)
{
	size_t i = 0, k;
	unsigned char c;

	while (i < n) {
		c = (unsigned char)p[i];
		if ((k = mq_utf8_len((unsigned char *)p + i, n - i)) > 1) {
			i += k;
			continue;
		}
		if (k != 1 || (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f)
			p[i] = '?';
		i++;
	}
}

/*
 * What a handler's exit status says about its message; a failure's
 * reason says how it ended and, after a colon, the last of its stderr.
 */
static char *
outcome(struct mq_settle *s, const struct job *j, int status,
    int64_t timeout, char *ended, size_t elen)
{
	char how[64], d[32], *reason;
	size_t n = j->tlen;

	memset(s, 0, sizeof *s);
	if (mq_parse_receipt(j->msg.receipt, &s->r) < 0)
		mq_die(MQ_EX_SOFTWARE, "bad receipt %s", j->msg.receipt);
	if (j->term)
		snprintf(ended, elen, "timeout");
	else if (WIFEXITED(status))
		snprintf(ended, elen, "exit %d", WEXITSTATUS(status));
	else
		snprintf(ended, elen, "signal %d", WTERMSIG(status));
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && !j->term) {
		s->how = MQ_ACK;
		return NULL;
	}
	if (j->term) {
		mq_format_duration(timeout, d, sizeof d);
		snprintf(how, sizeof how, "timeout after %s", d);
	} else if (WIFEXITED(status) && WEXITSTATUS(status) == MQ_EX_DATAERR)
		snprintf(how, sizeof how, "rejected by handler (exit 65)");
	else if (WIFEXITED(status))
		snprintf(how, sizeof how, "handler exited %d",
		    WEXITSTATUS(status));
	else
		snprintf(how, sizeof how, "handler killed by signal %d",
		    WTERMSIG(status));
	while (n > 0 && (j->tail[n - 1] == '\n' || j->tail[n - 1] == '\r'))
		n--;
	if (asprintf(&reason, "%s%s%.*s", how, n ? ": " : "", (int)n,
	    j->tail) < 0)
		mq_die(MQ_EX_SOFTWARE, "out of memory");
	clean(reason, strlen(reason));
	s->reason = reason;
	if (WIFEXITED(status) && WEXITSTATUS(status) == MQ_EX_DATAERR &&
	    !j->term)
		s->how = MQ_DEAD_LETTER;
	else {
		s->how = MQ_FAIL;
		s->delay = -1;
	}
	return reason;
}

/*
 * A handler past its time gets SIGTERM, with what it started, and
 * SIGKILL GRACE later; returns when to look again (INT64_MAX: never).
 */
static int64_t
time_out(struct runner *x, int64_t now)
{
	int64_t next = INT64_MAX, at;
	struct job *j;
	int i;

	for (i = 0; i < x->n; i++) {
		j = &x->jobs[i];
		if (!j->pid || !j->timeout)
			continue;
		if (!j->term && now >= j->start + j->timeout) {
			kill_tree(j, SIGTERM);
			j->term = now;
		} else if (j->term && now >= j->term + GRACE) {
			kill_tree(j, SIGKILL);
			continue;	/* it goes at once */
		}
		at = j->term ? j->term + GRACE : j->start + j->timeout;
		if (at < next)
			next = at;
	}
	return next;
}

/* -v: "jobs/workers #9 attempt 3: exit 1 -> retry in 30s" */
static void
said(const struct mq_follow *f, const struct mq_settle *s,
    const struct mq_msg *m, const char *ended)
{
	char then[32] = "";
	int64_t d = s->due - mq_now();

	if (d >= 1000)
		d = (d + 500) / 1000 * 1000;	/* to the second */
	if (s->how == MQ_FAIL && s->result == MQ_SETTLED)
		mq_format_duration(d > 0 ? d : 0, then, sizeof then);
	fprintf(stderr, "%s/%s #%lld attempt %d: %s -> %s%s\n", m->topic,
	    f->c.group, (long long)m->off, m->attempt, ended,
	    s->how == MQ_ACK ? "acked" : *then ? "retry in " : "dead letter",
	    then);
}

/* Settles every handler that has ended, in one batch; returns how many run. */
static int
reap_jobs(struct mq_follow *f)
{
	struct runner *x = f->arg;
	struct mq_settle *s = mq_array(NULL, x->n, sizeof *s);
	char **reason = mq_array(NULL, x->n, sizeof *reason);
	char (*ended)[32] = mq_array(NULL, x->n, sizeof *ended);
	int i, k = 0, running = 0, status, done[1024], more = 0;
	pid_t pid;

	for (i = 0; i < x->n; i++)
		if (x->jobs[i].pid)
			more |= drain(&x->jobs[i].err, &x->jobs[i]);
	for (i = 0; i < x->nopen; i++) {
		more |= drain(&x->open[i], NULL);
		if (x->open[i] < 0)
			x->open[i--] = x->open[--x->nopen];
	}
	f->wake_by = time_out(x, mq_now());
	if (more)	/* a pipe not read to its end: look again at once */
		f->wake_by = mq_now();
	while (k < x->n && (pid = waitpid(-1, &status, WNOHANG)) > 0)
		for (i = 0; i < x->n; i++)
			if (x->jobs[i].pid == pid) {
				drain(&x->jobs[i].err, &x->jobs[i]);
				x->jobs[i].pid = 0;
				if (x->jobs[i].term)	/* gone, not its own */
					kill_tree(&x->jobs[i], SIGKILL);
				if (x->jobs[i].err >= 0) {	/* held open */
					x->open = mq_array(x->open,
					    x->nopen + 1, sizeof *x->open);
					x->open[x->nopen++] = x->jobs[i].err;
					x->jobs[i].err = -1;
				}
				reason[k] = outcome(&s[k], &x->jobs[i],
				    status, x->jobs[i].timeout, ended[k],
				    sizeof ended[k]);
				done[k++] = i;
			}
	mq_settle(x->q, s, k);
	for (i = 0; i < k; i++) {
		if (s[i].result == MQ_STALE || s[i].result == MQ_UNKNOWN)
			mq_warn("%s: lease was lost before the handler "
			    "finished; not settled", x->jobs[done[i]].msg.receipt);
		else if (f->verbose)
			said(f, &s[i], &x->jobs[done[i]].msg, ended[i]);
		mq_msg_free(&x->jobs[done[i]].msg);
		free(reason[i]);
	}
	free(s);
	free(reason);
	free(ended);
	for (i = 0; i < x->n; i++)
		running += x->jobs[i].pid != 0;
	return running;
}

/* Free slots: how many to claim now. */
static int
free_slots(struct mq_follow *f, int want)
{
	struct runner *x = f->arg;
	int i, n = 0;

	if (x->failed)
		return 0;
	for (i = 0; i < x->n; i++)
		n += x->jobs[i].pid == 0;
	return n < want ? n : want;
}

/* Messages whose handler never ran go back, due now. */
static void
release(struct mq *q, struct mq_msg *m, int n)
{
	struct mq_settle *s = mq_array(NULL, n, sizeof *s);
	int i, k = 0;

	for (i = 0; i < n; i++) {
		memset(&s[k], 0, sizeof s[k]);
		s[k].how = MQ_RELEASE;
		s[k].reason = "handler could not be run";
		if (mq_parse_receipt(m[i].receipt, &s[k].r) == 0)
			k++;
		mq_msg_free(&m[i]);
	}
	mq_settle(q, s, k);
	free(s);
}

static int
start_jobs(struct mq_follow *f, struct mq_msg *m, int n)
{
	struct runner *x = f->arg;
	int i, slot = 0;
	pid_t pid;

	for (i = 0; i < n; i++) {
		while (x->jobs[slot].pid)
			slot++;
		if ((pid = spawn(&f->c, x->argv, x->path, &m[i],
		    &x->jobs[slot].err)) < 0) {
			/* not run: give it and the rest back untouched */
			x->failed = -pid;
			release(x->q, m + i, n - i);
			mq_stop = mq_stop ? mq_stop : 1;
			return 0;
		}
		x->jobs[slot].msg = m[i];
		x->jobs[slot].pid = pid;
		x->jobs[slot].start = mq_now();
		x->jobs[slot].timeout = x->timeout[m[i].lane];
		x->jobs[slot].term = 0;
		x->jobs[slot].tlen = 0;
	}
	return 0;
}

/*
 * The second signal: the handler group gets SIGTERM, then SIGKILL after a
 * grace time (or as soon as the handlers are gone, for what they
 * started), and the handlers are waited for, so nothing of theirs still
 * runs when their messages are released for redelivery.
 */
static void
stop_jobs(struct mq_follow *f)
{
	struct runner *x = f->arg;
	struct job *jobs = x->jobs;
	int i, left, n = x->n;
	int64_t end = mq_now() + 2000;
	pid_t pid;

	(void)jobs;
	kill(-group, SIGTERM);	/* (the anchor blocks it) */
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
			kill(-group, SIGKILL);
			for (i = 0; i < n; i++)
				if (jobs[i].pid) {
					waitpid(jobs[i].pid, NULL, 0);
					jobs[i].pid = 0;
				}
			break;
		}
		usleep(10000);
	}
	/* what the handlers started goes too, before their messages do */
	kill(-group, SIGKILL);
}

/*
 * timeout: how long a handler may run (ms); 0: as long as its lane's
 * group says, as it is now (0 there: no limit); -1: no limit.
 */
int
mq_exec_run(struct mq *q, struct mq_follow *f, char **argv, int jobs,
    int64_t timeout)
{
	struct mq_group g;
	struct runner x;
	int i;

	memset(&x, 0, sizeof x);
	x.q = q;
	x.argv = argv;
	for (i = 0; i < f->nlanes; i++)
		x.timeout[i] = timeout < 0 ? 0 : timeout ? timeout :
		    mq_group_get(q, f->topics[i], f->c.group, &g) > 0 ?
		    g.timeout : 0;
	x.n = jobs > 1024 ? 1024 : jobs;
	x.jobs = mq_array(NULL, x.n, sizeof *x.jobs);
	memset(x.jobs, 0, x.n * sizeof *x.jobs);
	for (i = 0; i < x.n; i++)
		x.jobs[i].err = -1;
	x.path = find_command(argv[0]);
	start_group();
	f->pgid = group;
	f->pgstart = group_start;
	f->arg = &x;
	f->member = 1;
	f->beat_lease = 1;
	f->want = free_slots;
	f->got = start_jobs;
	f->busy = reap_jobs;
	f->halt = stop_jobs;
	mq_follow(q, f);
	kill(group, SIGKILL);	/* the anchor, its work done */
	waitpid(group, NULL, 0);
	for (i = 0; i < x.n; i++) {
		mq_msg_free(&x.jobs[i].msg);
		if (x.jobs[i].err >= 0)
			close(x.jobs[i].err);
	}
	for (i = 0; i < x.nopen; i++)
		close(x.open[i]);
	free(x.open);
	free(x.jobs);
	free(x.path);
	if (x.failed)
		mq_die(x.failed == ENOENT ? MQ_EX_NOINPUT : x.failed == EACCES ?
		    MQ_EX_NOPERM : MQ_EX_SOFTWARE, "cannot run %s: %s",
		    argv[0], strerror(x.failed));
	if (mq_stop >= 2)
		return 130;
	return f->taken || mq_stop ? 0 : MQ_EX_NONE;
}
