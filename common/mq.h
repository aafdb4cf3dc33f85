/*
 * mq.h: the interface of libmq, the library every mq program links.
 *
 * Prototypes are grouped by the file that implements them.  Programs see no
 * SQL and no SQLite type: the database is an opaque struct mq, and the
 * storage layer (db.c, store.c) is the only code that talks to SQLite.
 *
 * Errors: most functions die with the documented exit status (mq_die) when
 * the database fails, since a program cannot do anything better than stop;
 * an open transaction is rolled back by SQLite when the process exits.
 */
#ifndef MQ_H
#define MQ_H

#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>

#define MQ_VERSION	"0.1.0"
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

/* err.c */
extern const char *mq_prog;
void	 mq_setprog(const char *argv0);
void	 mq_die(int status, const char *fmt, ...)
	    __attribute__((noreturn, format(printf, 2, 3)));
void	 mq_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void	*mq_alloc(size_t n);
void	*mq_array(void *p, size_t n, size_t size);
char	*mq_strdup(const char *s);
char	*mq_memdup(const void *p, size_t n);
int	 mq_finish(void);
void	 mq_version(void);

/* parse.c */
int64_t	 mq_now(void);
int	 mq_parse_duration(const char *s, int64_t *ms);
int	 mq_parse_time(const char *s, int64_t now, int64_t *ms);
int	 mq_valid_name(const char *s);
const char *mq_name_arg(const char *s, const char *what);
int64_t	 mq_duration_arg(const char *s, const char *what);
int64_t	 mq_time_arg(const char *s, const char *what);
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

/* db.c: opening, creating and migrating the database; transactions */
struct mq;
enum { MQ_READ = 0, MQ_WRITE = 1, MQ_UPDATE = 2 };	/* UPDATE: write, must exist */
const char *mq_default_path(void);
struct mq *mq_open(const char *path, int mode);
void	 mq_close(struct mq *);
const char *mq_path(struct mq *);
void	 mq_begin(struct mq *);		/* BEGIN IMMEDIATE: the write lock */
void	 mq_begin_read(struct mq *);
void	 mq_commit(struct mq *);
void	 mq_rollback(struct mq *);
int64_t	 mq_data_version(struct mq *);
void	 mq_sync(struct mq *, int full);
int	 mq_schema_version(void);

/* store.c: the storage layer; every SQL statement of mq lives there */
struct mq_topic {
	int64_t		id;
	char		name[MQ_NAME_MAX + 1];
	int64_t		created, next_off, last_ts, msgs, bytes;
	int64_t		retention, dedup_window, max_size;	/* retention<0: none */
	int64_t		gap_below;	/* offsets from here on have no holes */
};

struct mq_group {
	int64_t		id, topic;
	char		name[MQ_NAME_MAX + 1];
	int64_t		created, pos, lease, settled;
	int64_t		delivered, failed, deadlettered;	/* counters */
	int		max_attempts, ordered;
	char		backoff[512];
};

/* A message, and when received, its delivery. */
struct mq_msg {
	int64_t		off, ts, due;
	char		*key;		/* NULL: none */
	unsigned char	*body;
	size_t		len;
	int		attempt;
	uint32_t	token;
	char		receipt[MQ_RECEIPT_MAX];
};
void	 mq_msg_free(struct mq_msg *);

#define MQ_DEFAULT_MAX_SIZE	1048576
#define MQ_SIZE_LIMIT		(256 * 1048576)
#define MQ_DEFAULT_LEASE	30000

int	 mq_topic_get(struct mq *, const char *name, struct mq_topic *);
void	 mq_topic_ensure(struct mq *, const char *name, struct mq_topic *);
void	 mq_topic_save_counts(struct mq *, const struct mq_topic *);
void	 mq_topic_each(struct mq *, void (*fn)(const struct mq_topic *, void *),
	    void *arg);

int	 mq_group_get(struct mq *, const struct mq_topic *, const char *name,
	    struct mq_group *);
void	 mq_group_create(struct mq *, const struct mq_topic *, const char *name,
	    int latest, struct mq_group *);
void	 mq_group_save(struct mq *, const struct mq_group *);
void	 mq_group_each(struct mq *, const struct mq_topic *,
	    void (*fn)(const struct mq_group *, void *), void *arg);

int64_t	 mq_store_append(struct mq *, struct mq_topic *, int64_t now,
	    int64_t due, const char *key, const char *dedup, const void *body,
	    size_t len, int *dup);
int64_t	 mq_store_dedup_expire(struct mq *, const struct mq_topic *,
	    int64_t now, int dry);

void	 mq_topic_set(struct mq *, const struct mq_topic *);
void	 mq_topic_delete(struct mq *, const struct mq_topic *);
void	 mq_group_delete(struct mq *, const struct mq_group *);

/*
 * Counts of a group's unsettled messages.  lag = pending + inflight +
 * expired + retrying + waiting: what is due or in hand; delayed (not due
 * yet) and dead letters are counted apart.
 */
struct mq_gstats {
	int64_t		pending;	/* not handed out yet */
	int64_t		inflight, expired, retrying, delayed, waiting, dead;
	int64_t		lag, oldest_off, oldest_ts, consumers;
};
void	 mq_group_stats(struct mq *, const struct mq_topic *,
	    const struct mq_group *, int64_t now, struct mq_gstats *);

int	 mq_store_read(struct mq *, const struct mq_topic *, int64_t from,
	    int64_t to, const char *key, struct mq_msg *out, int max);
int64_t	 mq_store_offset_at(struct mq *, const struct mq_topic *, int64_t ts);
int64_t	 mq_store_count_range(struct mq *, const struct mq_topic *,
	    int64_t from, int64_t to);
int64_t	 mq_store_cancel(struct mq *, const struct mq_group *, int64_t off,
	    int below, int dry);
int64_t	 mq_store_redrive(struct mq *, const struct mq_group *, int64_t off,
	    int64_t now);
struct mq_event {
	int64_t		 ts, pid;
	int		 attempt;
	const char	*event, *host, *reason;
};
void	 mq_store_history_each(struct mq *, int64_t grp, int64_t off,
	    void (*fn)(const struct mq_event *, void *), void *arg);

int64_t	 mq_store_handed_out(struct mq *, const struct mq_topic *);
int64_t	 mq_store_first_off(struct mq *, const struct mq_topic *);
void	 mq_store_range_size(struct mq *, const struct mq_topic *, int64_t lo,
	    int64_t hi, int settled, int64_t skip_dead, int64_t *n,
	    int64_t *bytes);
void	 mq_store_purge_range(struct mq *, struct mq_topic *, int64_t lo,
	    int64_t hi, int settled, int64_t *n, int64_t *bytes);
int64_t	 mq_store_drop_dead(struct mq *, const struct mq_topic *,
	    const struct mq_group *, int dry);
void	 mq_store_vacuum(struct mq *);

/* Delivery rows, as the delivery logic sees them. */
enum { MQ_WAITING = 0, MQ_LEASED = 1, MQ_DEAD = 2 };
struct mq_delivery {
	int64_t		grp, off, due, consumer;	/* consumer 0: none */
	int		state, attempt, expired;
	uint32_t	token;
	char		*key;
};
int	 mq_store_due(struct mq *, const struct mq_group *, int64_t now,
	    struct mq_delivery *out, int max);
int	 mq_store_new(struct mq *, const struct mq_group *, int64_t from,
	    int64_t upto, struct mq_delivery *out, int max);
int64_t	 mq_store_next_due(struct mq *, const struct mq_group *,
	    int64_t now);
int	 mq_store_claimable(struct mq *, const struct mq_group *, int64_t now);
int	 mq_store_key_busy(struct mq *, const struct mq_group *, const char *key);
int	 mq_store_delivery_get(struct mq *, int64_t grp, int64_t off,
	    struct mq_delivery *);
void	 mq_store_delivery_put(struct mq *, const struct mq_delivery *,
	    const char *reason);
void	 mq_store_delivery_del(struct mq *, int64_t grp, int64_t off);
int	 mq_store_msg(struct mq *, int64_t topic, int64_t off, struct mq_msg *);
void	 mq_store_history(struct mq *, int64_t grp, int64_t off, int attempt,
	    const char *event, int64_t consumer, const char *reason);
void	 mq_delivery_free(struct mq_delivery *);

struct mq_consumer {
	int64_t		id, grp, pid, start, since, seen;
	char		host[256], boot[40];
};
int64_t	 mq_store_consumer_add(struct mq *, const struct mq_consumer *);
void	 mq_store_consumer_del(struct mq *, int64_t id);
void	 mq_store_consumer_seen(struct mq *, int64_t id, int64_t now);
int	 mq_store_consumers_on(struct mq *, const char *host,
	    struct mq_consumer **out);
int	 mq_store_consumers_of(struct mq *, int64_t grp,
	    struct mq_consumer **out, int64_t **held);
int	 mq_store_release(struct mq *, int64_t consumer, int64_t now);
int	 mq_store_extend_consumer(struct mq *, int64_t consumer, int64_t due);

/* deliver.c: claim, settle, lease, retry, dead letters */
struct mq_claim {
	const char	*topic, *group;
	int		 latest;	/* new group starts at the end */
	int64_t		 lease;		/* ms; 0: the group's */
	int		 autoack;
	int64_t		 consumer;	/* 0: the lease belongs to the receipt */
};
int	 mq_claim(struct mq *, const struct mq_claim *, struct mq_msg *out,
	    int max, int64_t *next_due);

/* exec.c: running a command per message (mq-recv -- COMMAND) */
struct mq_exec {
	char		**argv;
	int		  jobs;
	long		  limit;	/* messages to take; 0: no limit */
	int		  follow;
	int64_t		  until;	/* wait for the first message until */
};
int	 mq_exec_run(struct mq *, struct mq_claim *, const struct mq_exec *);
extern volatile sig_atomic_t mq_stop;
void	 mq_catch_stop(void);
int	 mq_stop_fd(void);

enum { MQ_ACK, MQ_FAIL, MQ_DEAD_LETTER, MQ_EXTEND, MQ_RELEASE };
struct mq_settle {
	int		 how;
	int64_t		 delay;		/* MQ_FAIL: -1 for the backoff */
	int64_t		 extend;	/* MQ_EXTEND */
	const char	*reason;
};
enum { MQ_SETTLED, MQ_STALE, MQ_UNKNOWN, MQ_WENT_DEAD };
int	 mq_settle(struct mq *, const struct mq_receipt *,
	    const struct mq_settle *);

int64_t	 mq_consumer_join(struct mq *, const char *topic, const char *group,
	    int latest, int64_t *lease);
void	 mq_consumer_leave(struct mq *, int64_t id);
void	 mq_consumer_heartbeat(struct mq *, int64_t id, int64_t lease_until);
const char *mq_hostname(void);

/* out.c: escapes, JSON, format strings */
enum { MQ_OUT_LINE, MQ_OUT_NUL, MQ_OUT_JSON, MQ_OUT_FORMAT, MQ_OUT_BODY };
struct mq_out {
	int		 mode;
	const char	*format;	/* MQ_OUT_FORMAT */
	const char	*topic, *group;
	int		 with_receipt;	/* MQ_OUT_LINE: RECEIPT<TAB>BODY */
};
void	 mq_out_msg(FILE *, const struct mq_out *, const struct mq_msg *);
int	 mq_check_format(const char *fmt);
void	 mq_escape(FILE *, const unsigned char *p, size_t n);
size_t	 mq_unescape(char *s);
int	 mq_utf8_valid(const unsigned char *p, size_t n);
void	 mq_json_str(FILE *, const unsigned char *p, size_t n);
void	 mq_base64(FILE *, const unsigned char *p, size_t n);
void	 mq_rfc3339(int64_t ms, char *buf, size_t len);

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
int	 mq_want_colour(FILE *);

/* lag.c: what mq-lag reports */
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
void	 mq_lag_collect(struct mq *, struct mq_lag *);
int64_t	 mq_lag_age(const struct mq_lag *, const struct mq_lag_row *);
void	 mq_lag_json(FILE *, const struct mq_lag *);
void	 mq_lag_prometheus(FILE *, const struct mq_lag *);
void	 mq_lag_topics(FILE *, struct mq_lag *, int json);
void	 mq_lag_consumers(FILE *, struct mq *, const struct mq_lag *, int json);

/* wait.c: sleeping until the database may have changed */
struct mq_waiter;
struct mq_waiter *mq_waiter_new(struct mq *);
void	 mq_waiter_free(struct mq_waiter *);
int	 mq_waiter_fd(struct mq_waiter *);
int	 mq_wait(struct mq_waiter *, int64_t until, int fd);

#endif
