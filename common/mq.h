/*
 * mq.h: the interface of libmq, the library every mq program links.
 *
 * Prototypes are grouped by the file that implements them.  Programs see no
 * SQL and no backend type: the database is an opaque struct mq, and every
 * change to it is one whole operation of the storage interface (backend.c,
 * with the contract in backend.h), one transaction each.
 *
 * Errors of the database itself end the program with the documented exit
 * status (mq_die); what a program can act on (no such topic, a message too
 * large, a delete that would lose messages) comes back as MQ_E_*.
 */
#ifndef MQ_H
#define MQ_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>

#define MQ_VERSION	"0.2.0"
#define MQ_NAME_MAX	128

/* Exit statuses: ../SPEC.md section 4, the only table of them. */
enum {
	MQ_EX_OK	= 0,
	MQ_EX_NONE	= 1,	/* nothing to do, a check failed, stale receipt */
	MQ_EX_USAGE	= 64,
	MQ_EX_DATAERR	= 65,
	MQ_EX_NOINPUT	= 66,
	MQ_EX_SOFTWARE	= 70,
	MQ_EX_IOERR	= 74,
	MQ_EX_TEMPFAIL	= 75,
	MQ_EX_NOPERM	= 77,
};

/* err.c: errors and memory */
extern const char *mq_prog;
void	 mq_setprog(const char *argv0);
void	 mq_die(int status, const char *fmt, ...)
	    __attribute__((noreturn, format(printf, 2, 3)));
void	 mq_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void	 mq_vwarn(const char *fmt, va_list) __attribute__((format(printf, 1, 0)));
void	*mq_alloc(size_t n);
void	*mq_array(void *p, size_t n, size_t size);
char	*mq_strdup(const char *s);
char	*mq_memdup(const void *p, size_t n);
int	 mq_finish(void);
size_t	 mq_write(int fd, const void *buf, size_t len);

/* parse.c: durations, times, names, numbers, receipts */
int64_t	 mq_now(void);
int	 mq_parse_duration(const char *s, int64_t *ms);
int	 mq_parse_time(const char *s, int64_t now, int64_t *ms);
int	 mq_valid_name(const char *s);
const char *mq_name_arg(const char *s, const char *what);
int	 mq_valid_key(const void *p, size_t n);
const char *mq_key_arg(const char *s, const char *what);
int	 mq_topics_arg(int argc, char **argv);
int64_t	 mq_duration_arg(const char *s, const char *what);
int64_t	 mq_time_arg(const char *s, const char *what);
int64_t	 mq_pause_arg(const char *s);
const char *mq_idem_arg(const char *s);
void	 mq_rate_arg(const char *s, int64_t *n, int64_t *ms);
long long mq_num_arg(const char *s, long long min, long long max,
	    const char *what);
int	 mq_parse_backoff(const char *s, int64_t **steps, int *n);
void	 mq_format_duration(int64_t ms, char *buf, size_t len);

struct mq_receipt {
	char		topic[MQ_NAME_MAX + 1];
	char		group[MQ_NAME_MAX + 1];
	int64_t		off;
	int		attempt;
	uint32_t	token;
};
int	 mq_parse_receipt(const char *s, struct mq_receipt *r);
void	 mq_format_receipt(char *buf, size_t len, const char *topic,
	    const char *group, int64_t off, int attempt, uint32_t token);
#define MQ_RECEIPT_MAX	(2 * MQ_NAME_MAX + 48)

/*
 * header.c: NAME=VALUE pairs a message carries, as one string of
 * "NAME=VALUE\n" lines (NULL: none), in the database too
 */
#define MQ_HEADERS_MAX	64	/* headers of a message */
#define MQ_HVALUE_MAX	1024	/* bytes of a value */
#define MQ_HENV_MAX	(MQ_NAME_MAX + 6)	/* MQ_H_NAME and a NUL */
struct mq_header {
	const char	*name, *value;	/* not NUL-terminated */
	size_t		 nlen, vlen;
};
void	 mq_header_arg(char **hs, const char *arg, int send);
int	 mq_header_next(const char **p, struct mq_header *);
const char *mq_header_get(const char *hs, const char *name, size_t n,
	    size_t *len);
int	 mq_header_match(const char *hs, const char *want);
void	 mq_header_env(char *buf, const char *name, size_t n);

/* cli.c: what every program's main() repeats */
void	 mq_begin(char **argv, const char *synopsis,
	    const char *const *options);
void	 mq_help(void) __attribute__((noreturn));
void	 mq_usage(void) __attribute__((noreturn));
void	 mq_usage_err(const char *fmt, ...)
	    __attribute__((noreturn, format(printf, 1, 2)));
void	 mq_version(void) __attribute__((noreturn));
void	 mq_no_topic(const char *topic) __attribute__((noreturn));
void	 mq_no_group(const char *topic, const char *group)
	    __attribute__((noreturn));
void	 mq_check(int rc, const char *topic, const char *group);

/* sig.c: SIGTERM and SIGINT as a request to stop; SIGCHLD as a wake-up */
extern volatile sig_atomic_t mq_stop;
void	 mq_catch_stop(void);
void	 mq_on_signal(void (*poke)(void));

/* host.c: who and where this process is, and whether another still runs */
const char *mq_hostname(void);
void	 mq_boot_id(char *buf, size_t len);
int64_t	 mq_proc_start(int pid);
struct mq_proc {
	int		pid;
	int64_t		start;
};
int	 mq_proc_tree(int root, struct mq_proc **);
void	 mq_proc_kill(const struct mq_proc *, int n, int sig);
struct mq_consumer;
int	 mq_consumer_ended(const struct mq_consumer *, const char *boot);
int	 mq_consumer_gone(const struct mq_consumer *, const char *boot);

/* ---------------------------------------------------------------------- */
/* backend.c: the storage interface, in whole operations (see backend.h) */

struct mq;
/* MQ_UPDATE: to write a database that must exist already */
enum { MQ_READ = 0, MQ_WRITE = 1, MQ_UPDATE = 2 };
struct mq *mq_open(const char *path, int mode);
void	 mq_close(struct mq *);
const char *mq_path(struct mq *);
const char *mq_default_path(void);
int	 mq_schema_version(void);

/* What an operation can report besides success (0) or a count. */
enum {
	MQ_E_NOTOPIC	= -1,	/* no such topic */
	MQ_E_NOGROUP	= -2,	/* no such group */
	MQ_E_HELD	= -3,	/* would delete messages a group has not settled */
	MQ_E_TOOBIG	= -4,	/* a message over the topic's size limit */
	MQ_E_NOMSG	= -5,	/* no message at that offset */
	MQ_E_BEHIND	= -6,	/* an outbox's ids went back (mq_outbox_move) */
};

#define MQ_KEEP			INT64_MIN	/* a setting left as it is */
#define MQ_DEFAULT_MAX_SIZE	1048576
#define MQ_SIZE_LIMIT		(256 * 1048576)
#define MQ_DEFAULT_LEASE	30000

struct mq_topic {
	int64_t		id;
	char		name[MQ_NAME_MAX + 1];
	int64_t		created, next_off, last_ts, msgs, bytes;
	int64_t		retention, dedup_window, max_size;	/* retention<0: none */
	int64_t		gap_below;	/* offsets from here on have no holes */
	int64_t		paused_until;	/* 0: not paused */
	int64_t		ttl;		/* a message's time to live; 0: none */
};
struct mq_topic_conf {			/* MQ_KEEP: unchanged */
	int64_t		retention;	/* -1: none */
	int64_t		dedup_window, max_size;
	int64_t		paused_until;	/* 0: resume */
	int64_t		ttl;		/* 0: none */
};
void	 mq_topic_settings(struct mq_topic_conf *, int argc, char **argv);
int	 mq_topic_get(struct mq *, const char *name, struct mq_topic *);
int	 mq_topic_list(struct mq *, struct mq_topic **out);
int	 mq_topic_create(struct mq *, const char *name,
	    const struct mq_topic_conf *, struct mq_topic *);
int	 mq_topic_conf(struct mq *, const char *name,
	    const struct mq_topic_conf *, struct mq_topic *);

/* What a delete would lose: the first group with unsettled messages. */
struct mq_held {
	char		group[MQ_NAME_MAX + 1];
	int64_t		n;
};
int	 mq_topic_delete(struct mq *, const char *name, int force,
	    struct mq_held *);

struct mq_group {
	int64_t		id, topic;
	char		name[MQ_NAME_MAX + 1];
	int64_t		created, pos, lease, settled;
	int64_t		delivered, failed, deadlettered;	/* counters */
	int64_t		cancelled, lapsed;
	int64_t		settled_ts;	/* when settled last grew; 0: never */
	int64_t		paused_until;	/* 0: not paused */
	int64_t		timeout;	/* ms a handler may run; 0: no limit */
	int		max_attempts, ordered;
	char		backoff[512];
	char		idem[16];	/* --idempotent-by; "": off */
	int64_t		idem_window;	/* ms a settled business id counts */
	int64_t		duplicates;	/* settled as duplicates (counter) */
	int64_t		rate_n, rate_ms;	/* --rate N/DUR; 0: none */
	int64_t		rate_tat;	/* us: the next one on schedule */
	int		per_key;	/* in flight per key; 0: no limit */
};
struct mq_group_conf {
	int64_t		lease;		/* MQ_KEEP: unchanged */
	int		max_attempts;	/* 0: unchanged */
	int		ordered;	/* -1: unchanged */
	const char	*backoff;	/* NULL: unchanged */
	int		latest;		/* a new group starts at the end */
	int64_t		paused_until;	/* MQ_KEEP: unchanged; 0: resume */
	int64_t		timeout;	/* MQ_KEEP: unchanged; 0: no limit */
	const char	*idem;		/* NULL: unchanged; "": off */
	int64_t		idem_window;	/* MQ_KEEP: unchanged */
	int64_t		rate_n, rate_ms;	/* MQ_KEEP: unchanged; 0: none */
	int		per_key;	/* -1: unchanged; 0: no limit */
};
/* Until when the group (or its topic) hands nothing out; 0: it does. */
int64_t	 mq_paused(const struct mq_topic *, const struct mq_group *,
	    int64_t now);
int	 mq_group_get(struct mq *, const char *topic, const char *name,
	    struct mq_group *);
int	 mq_group_conf(struct mq *, const char *topic, const char *name,
	    const struct mq_group_conf *, struct mq_group *);
int	 mq_group_delete(struct mq *, const char *topic, const char *name,
	    int force, struct mq_held *);

/*
 * Counts of a group's unsettled messages.  lag = pending + inflight +
 * expired + retrying + waiting: what is due or in hand; delayed (not due
 * yet) and dead letters are counted apart.
 */
struct mq_gstats {
	int64_t		pending;	/* not handed out yet */
	int64_t		inflight, expired, retrying, delayed, waiting, dead;
	int64_t		lag, oldest_off, oldest_ts, consumers;
	int64_t		ahead;		/* rows from pos on (mq_mark) */
};
struct mq_lag_row {
	struct mq_topic	 t;
	struct mq_group	 g;
	struct mq_gstats s;
	int		 has_group;	/* 0: a topic without groups */
	double		 in, out;	/* messages per second, for --watch */
};
struct mq_lag {
	const char		*topic, *group;	/* only these; NULL: all */
	struct mq_lag_row	*rows;
	int			 n;
	int64_t			 now;
};
/* One consistent snapshot of every topic and group (or of the named). */
int	 mq_snapshot(struct mq *, struct mq_lag *);

/* A message, and when received, its delivery. */
struct mq_msg {
	int64_t		off, ts, due;
	char		*key;		/* NULL: none */
	char		*headers;	/* NULL: none; "NAME=VALUE\n" each */
	unsigned char	*body;
	size_t		len;
	int		attempt;
	uint32_t	token;
	char		receipt[MQ_RECEIPT_MAX];
	const char	*topic;		/* mq_follow: its lane's topic; else NULL */
	int		lane;		/* mq_follow: its lane, from 0 */
};

/* Appending: a batch of records, one transaction. */
struct mq_rec {
	const void	*body;
	size_t		 len;
	const char	*dedup;		/* NULL: none */
};
struct mq_append {
	const char	*topic, *key;
	const char	*headers;	/* NULL: none (header.c) */
	int64_t		 delay, at;	/* -1: not given */
	int		 replace;	/* with key: the newest one wins */
	int64_t		 ttl;		/* ms; 0: the topic's */
	size_t		 bad;		/* out, with MQ_E_TOOBIG: which one */
	int64_t		 max_size;	/* out, with MQ_E_TOOBIG */
};
struct mq_sent {
	int64_t		off;
	int		dup;		/* a dedup id seen: off is the first */
};
int	 mq_append(struct mq *, struct mq_append *, const struct mq_rec *,
	    size_t n, struct mq_sent *);

/*
 * Moving rows of an application's outbox (outbox.c), one transaction:
 * the rows above the source's mark are appended, each with its own
 * topic and settings, and the mark goes up to the last row's id.  Rows
 * at or below it were moved before: sent[i].off is 0 for them.  When
 * the mark is above seq (the largest id the source has handed out),
 * nothing is done: MQ_E_BEHIND, the mark in moved.
 */
struct mq_outrow {
	int64_t		 id;
	struct mq_append a;		/* topic, key, delay, at, ttl */
	struct mq_rec	 r;		/* body, dedup */
};
struct mq_outbox {
	const char	*source;
	int64_t		 seq;
	struct mq_outrow *rows;		/* in order of id */
	size_t		 n;
	struct mq_sent	*sent;		/* out: one per row */
	int64_t		 moved;		/* out: the mark */
	size_t		 bad;		/* out, with MQ_E_TOOBIG: which row */
	int64_t		 max_size;	/* out, with MQ_E_TOOBIG */
};
int	 mq_outbox_move(struct mq *, struct mq_outbox *);

/* sqlite/appdb.c: an application's outbox table, in its own SQLite file */
struct mq_appdb;
struct mq_appdb *mq_appdb_open(const char *path, int create,
	    int patient);
const char *mq_appdb_source(struct mq_appdb *);
int	 mq_appdb_replaced(struct mq_appdb *);
int	 mq_appdb_read(struct mq_appdb *, struct mq_outrow *, int max,
	    size_t max_bytes, int64_t *seq);
int64_t	 mq_appdb_seq(struct mq_appdb *);
void	 mq_appdb_delete(struct mq_appdb *, int64_t upto);
int	 mq_appdb_changed(struct mq_appdb *);
void	 mq_appdb_close(struct mq_appdb *);
void	 mq_outrows_free(struct mq_outrow *, int n);

/* outbox.c: mq-send --from-outbox, mq-topic outbox-init */
int	 mq_outbox_send(const char *db, const char *appdb, int follow,
	    int quiet);
void	 mq_outbox_init(const char *appdb);

/* Claiming: up to max messages for a group, creating both on first use. */
struct mq_claim {
	const char	*topic, *group;
	int		 latest;	/* a new group starts at the end */
	int64_t		 lease;		/* ms; 0: the group's */
	int		 autoack;
	int64_t		 consumer;	/* 0: the lease belongs to the receipt */
	int		 woken;		/* the topic just changed (or the last
					   claim was full): skip the read that
					   looks for nothing first */
};
/*
 * *next_due: when something may be due next (INT64_MAX: nothing known);
 * 0: the claim stopped looking before it found max or the end (a long run
 * of lapsed or cancelled messages): claim again at once.
 */
int	 mq_claim(struct mq *, const struct mq_claim *, struct mq_msg *out,
	    int max, int64_t *next_due);

/* Settling: a batch of receipts, each with its own outcome, one commit. */
/* MQ_GIVEBACK: an auto-acked message whose output failed (token unused) */
enum { MQ_ACK, MQ_FAIL, MQ_DEAD_LETTER, MQ_EXTEND, MQ_RELEASE, MQ_GIVEBACK };
enum { MQ_SETTLED, MQ_STALE, MQ_UNKNOWN, MQ_WENT_DEAD };
struct mq_settle {
	struct mq_receipt r;
	int		 how;
	int64_t		 delay;		/* MQ_FAIL: -1 for the backoff */
	int64_t		 extend;	/* MQ_EXTEND */
	const char	*reason;
	int		 result;	/* out: MQ_SETTLED ... */
	int64_t		 due;		/* out: MQ_FAIL: when it goes again */
};
void	 mq_settle(struct mq *, struct mq_settle *, size_t n);

/* Reading the log, without a group. */
struct mq_read {
	const char	*topic, *key;
	int64_t		 from, to;	/* offsets, both included */
};
int	 mq_read(struct mq *, const struct mq_read *, struct mq_msg *out,
	    int max);
int64_t	 mq_offset_at(struct mq *, const char *topic, int64_t ts);

/*
 * A group's messages as it sees them, changing nothing (mq-lag
 * --messages): not handed out yet (from the log, or held back by a delay
 * or a busy key), leased (in time, or run out and not yet taken back),
 * waiting to be tried again, dead.
 */
enum { MQ_I_PENDING, MQ_I_INFLIGHT, MQ_I_EXPIRED, MQ_I_RETRY, MQ_I_DEAD,
	MQ_I_NSTATES };
struct mq_list {
	const char	*topic, *group, *key;	/* key NULL: any */
	int64_t		 from, to;		/* offsets, both included */
	int		 states;		/* 1 << MQ_I_... of each wanted */
	int64_t		 now;
};
struct mq_item {
	struct mq_msg	 m;	/* m.off 0: purged from the log */
	int64_t		 off;
	int		 state, expired;	/* attempt is m.attempt */
	int64_t		 due;	/* lease end, retry or delivery time */
	char		*host;	/* who holds the lease, NULL: nobody */
	int64_t		 pid;
	char		*reason;	/* the last one given, NULL: none */
};
int	 mq_list(struct mq *, const struct mq_list *, struct mq_item *out,
	    int max);
void	 mq_item_free(struct mq_item *);
int	 mq_item_states(const char *list);
void	 mq_list_print(FILE *, struct mq *, struct mq_list *, long limit,
	    int json);

/* Moving a group's position. */
enum { MQ_TO_OFFSET, MQ_TO_TIME, MQ_TO_SHIFT, MQ_TO_EARLIEST, MQ_TO_LATEST };
struct mq_move {
	int		to;
	int64_t		arg;		/* offset, time or shift */
	int		dry;
};
struct mq_moved {
	int64_t		from, to;	/* positions */
	int64_t		again, skipped, dropped;
	int		unchanged;
};
int	 mq_move(struct mq *, const char *topic, const char *group,
	    const struct mq_move *, struct mq_moved *);
int	 mq_redrive(struct mq *, const char *topic, const char *group,
	    const int64_t *offs, int *found, int n, int dry, int64_t *count);

/*
 * Cancelling or rescheduling messages (mq-topic cancel, delay), in one
 * group or every group of the topic, by offsets, by key (every message of
 * it) or by dedup id.  Each (group, message) gets an action from
 * mq_rule_mark; when any is MQ_M_REFUSE nothing is changed.  Returns the
 * number of results in *out (to free), or MQ_E_*; MQ_E_NOMSG with the
 * offset in *out[0].off.
 */
enum { MQ_CANCEL, MQ_DELAY };
struct mq_mark {
	const char	*topic, *group;	/* group NULL: every group */
	int		 op;		/* MQ_CANCEL or MQ_DELAY */
	int64_t		 due;		/* MQ_DELAY: when it is due */
	const int64_t	*offs;		/* the messages: these offsets, */
	int		 noffs;
	const char	*key;		/* or every message of this key, */
	const char	*dedup;		/* or the one of this dedup id */
	int		 force, dry;
	const char	*reason;	/* in the history */
};
struct mq_marked {
	char		 group[MQ_NAME_MAX + 1];
	int64_t		 off;
	int		 state;		/* MQ_WAITING ... MQ_DONE: before */
	int		 act;		/* MQ_M_* */
};
int	 mq_mark(struct mq *, const struct mq_mark *, struct mq_marked **out);

/* One message and every group's delivery of it, for --trace. */
enum { MQ_WAITING = 0, MQ_LEASED = 1, MQ_DEAD = 2, MQ_NOT_YET = 3,
	MQ_DONE = 4 };
/*
 * A delivery row in state MQ_SKIP sits at or after its group's position:
 * the group settled the message before handing it out (cancelled), and
 * passes it by when its position gets there.  A row in state MQ_WAITING
 * may sit there too (rescheduled): the position passes it, and it is
 * handed out when due.
 */
#define MQ_SKIP	5
struct mq_event {
	int64_t		 ts, pid;
	int		 attempt;
	char		*event, *host, *reason;
};
struct mq_trace_group {
	char		 name[MQ_NAME_MAX + 1];
	int		 state;		/* MQ_WAITING ... MQ_DONE */
	int		 attempt;
	int64_t		 due;
	struct mq_event	*ev;
	int		 nev;
};
struct mq_trace {
	struct mq_msg		 m;
	struct mq_trace_group	*g;
	int			 n;
};
int	 mq_trace(struct mq *, const char *topic, int64_t off,
	    struct mq_trace *);

/*
 * Purging one topic: the first call plans (and with dry, only counts);
 * each later call deletes one short chunk; 0 when done.
 */
struct mq_purge {
	int64_t		 older, before;	/* -1: not given */
	int		 force, dead, dry;
	const char	*group;		/* with dead: only this group's */
	/* out */
	int64_t		 deleted, bytes, dropped, held;
	/* the backend's own, between calls */
	int		 planned;
	int64_t		 lo, all, line;
};
int	 mq_purge(struct mq *, const char *topic, struct mq_purge *);
void	 mq_vacuum(struct mq *);
void	 mq_backup(struct mq *, const char *file);

/* Consumers: processes that hold leases of their own (exec mode, -f). */
struct mq_consumer {
	int64_t		id, grp, pid, start, since, seen, held;
	int64_t		pgid, pgstart;	/* its handler group; 0: none */
	char		topic[MQ_NAME_MAX + 1], group[MQ_NAME_MAX + 1];
	char		host[256], boot[40];
};
int64_t	 mq_join(struct mq *, const char *topic, const char *group,
	    int latest, int64_t pgid, int64_t pgstart, int64_t *lease);
void	 mq_beat(struct mq *, int64_t id, int64_t lease_until);
void	 mq_leave(struct mq *, int64_t id);
int	 mq_consumers(struct mq *, const char *topic, const char *group,
	    struct mq_consumer **out);
void	 mq_reap(struct mq *, const char *topic, const char *group);
int64_t	 mq_idle_ms(struct mq *);
int64_t	 mq_pid(void);
uint32_t mq_token(void);
int64_t	 mq_history_n(void);
int64_t	 mq_busy_timeout(void);

/*
 * Waiting until one of n topics (up to MQ_LANES_MAX) may have something
 * new, in one sleep: 2 a writer changed one, and *changed (when not
 * NULL) has bit i set for each topics[i] changed; 1 one may have changed
 * (or a signal came); 0 the time came; MQ_WAIT_QUIET the time came, and
 * the backend can tell that nothing was committed to the topics since
 * the waiter was made or last returned 1 or 2, so a look would find
 * what the last one found (SQLite: see sqlite/wait.c).
 */
#define MQ_LANES_MAX	32
#define MQ_WAIT_QUIET	3
struct mq_waiter;
struct mq_waiter *mq_waiter_new(struct mq *, const char *const *topics,
	    int n);
int	 mq_wait(struct mq_waiter *, int64_t until, uint32_t *changed);
void	 mq_waiter_free(struct mq_waiter *);

/* ---------------------------------------------------------------------- */
/* policy.c: the delivery rules, the same for every backend (pure) */
int64_t	 mq_backoff(const char *schedule, int attempt);
struct mq_verdict {
	int		state;		/* MQ_WAITING or MQ_DEAD */
	int64_t		due;
	char		reason[4200];	/* a handler's stderr may be 2 KiB */
};
void	 mq_rule_fail(const struct mq_group *, int attempt, int64_t now,
	    int64_t delay, const char *why, struct mq_verdict *);
int	 mq_rule_expired(const struct mq_group *, int attempt, int expired,
	    struct mq_verdict *);
void	 mq_rule_stamp(int64_t now, int64_t last_ts, int64_t delay,
	    int64_t at, int64_t *ts, int64_t *due);
int64_t	 mq_rule_move(const struct mq_move *, int64_t at_time, int64_t pos,
	    int64_t first, int64_t next_off);
/* What cancel or delay does to a message in a group (mq_mark). */
enum {
	MQ_M_NONE,	/* settled already: nothing */
	MQ_M_REFUSE,	/* held (in flight, dead): not without --force */
	MQ_M_DROP,	/* settled now: its delivery row goes */
	MQ_M_SKIP,	/* settled now, not handed out yet: a MQ_SKIP row */
	MQ_M_DUE,	/* its delivery row waits until the new time */
	MQ_M_AHEAD,	/* not handed out yet: a row waits until then */
};
int	 mq_rule_mark(int op, int state, int ahead, int force);
int	 mq_rule_lapsed(int state, int attempt, int64_t expires, int64_t now);
char	*mq_business_id(const char *how, const struct mq_msg *,
	    const char *dedup);
int	 mq_rule_rate(const struct mq_group *, int64_t now, int want,
	    int64_t *t0, int64_t *next);
int64_t	 mq_rule_rate_tat(const struct mq_group *, int64_t t0, int n);

/*
 * follow.c: the one loop that claims, waits and keeps a consumer's leases
 * alive, for mq-recv's printing and exec modes.  The callbacks say how
 * many to claim now, take each claimed batch, and (exec mode) settle
 * finished handlers and report how many still run.  It claims from one
 * or more topics (lanes), each message tagged with its lane: strictly in
 * the order given, or with fair in turn.
 */
struct mq_follow {
	struct mq_claim	 c;		/* each lane's claim, but its topic */
	const char *const *topics;	/* the lanes */
	int		 nlanes;	/* 1 to MQ_LANES_MAX */
	int		 fair;		/* in turn, not strictly in order */
	long		 limit;		/* messages to take; 0: no limit */
	int		 follow;	/* until a signal */
	int64_t		 until;		/* else wait for messages until then */
	int		 first;		/* stop once some came and no more are ready */
	int		 member;	/* register as a consumer */
	int		 beat_lease;	/* heartbeats extend the leases held */
	int64_t		 pgid, pgstart;	/* the handler group, and when its
					   anchor started (exec mode) */
	int		(*want)(struct mq_follow *, int n);
	int		(*got)(struct mq_follow *, struct mq_msg *, int n);
	int		(*busy)(struct mq_follow *);	/* NULL: none run */
	void		(*halt)(struct mq_follow *);	/* second signal */
	void		 *arg;
	int64_t		 wake_by;	/* set by busy: look again then */
	int64_t		 stop_at;	/* take nothing from then on; 0: never */
	int		 verbose;	/* exec mode: a line per settled message */
	long		 taken;		/* out */
};
int	 mq_follow(struct mq *, struct mq_follow *);

/* exec.c: running a command per message (mq-recv -- COMMAND) */
int	 mq_exec_run(struct mq *, struct mq_follow *, char **argv, int jobs,
	    int64_t timeout);

/* out.c: escapes, JSON, format strings */
enum { MQ_OUT_LINE, MQ_OUT_NUL, MQ_OUT_JSON, MQ_OUT_FORMAT, MQ_OUT_BODY };
struct mq_out {
	int		 mode;
	const char	*format;	/* MQ_OUT_FORMAT */
	const char	*topic, *group;	/* topic: unless the message has one */
	int		 with_receipt;	/* MQ_OUT_LINE: RECEIPT<TAB>BODY */
};
void	 mq_out_msg(FILE *, const struct mq_out *, const struct mq_msg *);
int	 mq_check_format(const char *fmt);
void	 mq_escape(FILE *, const unsigned char *p, size_t n);
void	 mq_preview(const unsigned char *p, size_t n, size_t max, char *buf,
	    size_t len);
size_t	 mq_unescape(char *s);
size_t	 mq_utf8_len(const unsigned char *, size_t);
int	 mq_utf8_valid(const unsigned char *p, size_t n);
void	 mq_json_str(FILE *, const unsigned char *p, size_t n);
void	 mq_json_headers(FILE *, const char *hs);
void	 mq_base64(FILE *, const unsigned char *p, size_t n);
void	 mq_rfc3339(int64_t ms, char *buf, size_t len);
void	 mq_out_trace(FILE *, const char *topic, const struct mq_trace *);
void	 mq_msg_free(struct mq_msg *);
void	 mq_trace_free(struct mq_trace *);

/* input.c: records from a descriptor, with a deadline */
struct mq_input {
	int		 fd, delim, eof, skipping;	/* delim -1: whole input */
	char		*buf;
	size_t		 len, cap, start, max;
};
enum { MQ_IN_REC, MQ_IN_EOF, MQ_IN_TIMEOUT, MQ_IN_LONG };
void	 mq_input_init(struct mq_input *, int fd, int delim, size_t max);
void	 mq_input_free(struct mq_input *);
int	 mq_input_next(struct mq_input *, int64_t until, char **p, size_t *n);
char	*mq_record_decode(const char *p, size_t *n, int unescape);
char	*mq_record_field(const char *p, size_t n, int k);

/* replay.c: mq-replay's reading of the log */
struct mq_replay {
	struct mq_read	 rd;
	int64_t		 since, until;	/* times; -1: not given */
	const char	*headers;	/* only messages with all of these */
	long		 limit;		/* messages to print; 0: no limit */
	int		 follow;
};
int	 mq_replay(struct mq *, const struct mq_replay *,
	    const struct mq_out *);

/* table.c: aligned tables and human units for people */
struct mq_table;
struct mq_table *mq_table_new(int ncols, const char *const *head,
	    const char *align);
void	 mq_table_add(struct mq_table *, char **cells, const int *hot);
void	 mq_table_print(FILE *, struct mq_table *, int colour);
void	 mq_table_free(struct mq_table *);
void	 mq_human_count(int64_t n, char *buf, size_t len);
void	 mq_human_age(int64_t ms, char *buf, size_t len);
void	 mq_human_size(int64_t bytes, char *buf, size_t len);
const char *mq_plural(int64_t n, const char *one, const char *many);
int	 mq_want_colour(FILE *);

/* admin.c: mq-topic's commands with options of their own */
void	 mq_topic_show(struct mq *, const char *topic);
struct mq *mq_topic_group(const char *db, int argc, char **argv);
struct mq *mq_topic_mark(const char *db, int op, int force, int argc,
	    char **argv);

/* lag.c: what mq-lag reports, in its machine forms */
void	 mq_lag_collect(struct mq *, struct mq_lag *);
void	 mq_lag_limits_known(const struct mq_lag *);
int64_t	 mq_lag_age(const struct mq_lag *, const struct mq_lag_row *);
void	 mq_lag_json(FILE *, const struct mq_lag *);
void	 mq_lag_prometheus(FILE *, const struct mq_lag *);
enum { MQ_LAG_WATCH = 1, MQ_LAG_WIDE = 2 };
void	 mq_lag_table(FILE *, const struct mq_lag *, int how);
void	 mq_lag_topics(FILE *, struct mq_lag *, int json);
void	 mq_lag_consumers(FILE *, struct mq *, const struct mq_lag *, int json);
enum { MQ_LIM_LAG, MQ_LIM_AGE, MQ_LIM_DEAD, MQ_LIM_EXPIRED, MQ_LIM_SILENCE,
    MQ_LIM_IDLE };
void	 mq_lag_limit(int what, char *arg);
int	 mq_lag_limits(void);
int	 mq_lag_breached(const struct mq_lag *, const struct mq_lag_row *,
	    int what);
int	 mq_lag_check(FILE *, const struct mq_lag *);

#endif
