/*
 * pg.h: private to the PostgreSQL backend (common/pg/).  Nothing outside
 * this folder includes libpq-fe.h.
 *
 * Files: pg.c (connecting, the schema, statements, transactions, errors,
 * the table of operations), topic.c (topics, groups, counts, consumers),
 * deliver.c (append, claim, settle, consumer liveness), mark.c (cancel,
 * delay), outbox.c (moving an outbox's rows, through send.sql's
 * send()), log.c (reading, moving, redriving, tracing, purging), wait.c
 * (LISTEN/NOTIFY), combine.c (producers of one host sharing appends),
 * pq.c (loading libpq: every PQ... call goes through
 * pq.h's pointers).
 *
 * Every operation is one transaction (READ COMMITTED) that locks rows in
 * one order: topic, then group, then deliveries.  A deadlock or
 * serialization failure, which that order should never cause, rolls the
 * transaction back and the operation starts over (PG_RETRY).
 *
 * A plain mq-recv's claim leases new messages as runs, one row of lease
 * for up to 1,024 offsets (lease.sql), not as delivery rows.  A statement
 * that writes delivery rows, or reads them to decide, must first turn the
 * runs it could touch into delivery rows (SQL unlease(), as settle,
 * cancel, delay, moves and purge do), and a reader of every delivery
 * reads the view deliveries.
 */
#ifndef MQ_PG_H
#define MQ_PG_H

#include <libpq-fe.h>
#include "pq.h"		/* after libpq-fe.h: PQexec is pq_PQexec ... */

#include "../backend.h"

#define PG_RETRY	(-100)	/* an operation's attempt: start over */
/* r = e, or start the operation over */
#define TRY(r, e)	do { if (!((r) = (e))) return PG_RETRY; } while (0)

#define PG_NPREP	64

struct pgq {
	struct mq	 base;		/* first: the table and the path */
	PGconn		*conn;
	char		*shown;		/* the connection, password masked */
	int		 mode;
	int		 in_tx;		/* 1 a write, 2 a read-only snapshot */
	int		 begin;		/* a write's BEGIN, not sent yet */
	int		 committing;	/* a COMMIT, or a write that commits as
					   it ends, is under way */
	char		 num[16][24];	/* pg_int's buffers */
	int		 nnum;
	int64_t		 lockkey[MQ_LANES_MAX];	/* our consumers' advisory
					   locks (one a lane) */
	int		 nlockkey;
	int64_t		 lockspace;	/* this installation's advisory locks */
	int64_t		 busy;		/* lock_timeout, ms */
	int		 async;		/* MQ_SYNC=normal */
	int64_t		 trips;		/* round trips, for the curious */
	int64_t		 flushes;	/* FLUSH_SQL asked, as curious */
	struct {			/* statements prepared (pg_runc) */
		const char	*sql;	/* by the address of their text */
		int		 id;	/* named mq_<id> */
	}		 prep[PG_NPREP];
	int		 nprep, prep_seq;
	uint32_t	 prep_tag;	/* in their names: this session's */
	int		 pipe_oks;	/* statements that went through */
	int64_t		*notify;	/* topics to tell after the commit */
	int		 nnotify;
	struct {			/* what its waiter heard (wait.c) */
		int64_t		 topic;
		int64_t		 below;	/* offsets below it are durable */
	}		 durable[MQ_LANES_MAX];
	int		 ndurable;
	struct pg_claimed {		/* each lane's group as its last
					   claim left it (deliver.c) */
		char		 topic[MQ_NAME_MAX + 1];
		int64_t		 tid;
		struct mq_group	 g;
	}		 claimed[MQ_LANES_MAX];
	int		 nclaimed;
	/* combine.c: this session as a holder that appends for others */
	int64_t		 comb_token;	/* random; 0 until it first holds */
	int64_t		 comb_seq;	/* its batches */
	int		 comb_batch;	/* the append writes combined */
};

#define PGQ(q)	((struct pgq *)(q))

/*
 * Statements sent one after another without waiting, their results read
 * together: one round trip (pg.c).  pg_pipe_q queues a prepared one (with
 * the write's BEGIN first when it is not sent yet), pg_pipe_run sends the
 * sync and reads each result in order into r[].
 */
#define PG_PIPE_MAX	16
#define PG_PIPE_COMMIT	5	/* what pg_pipe_commit queues, at most */
struct pg_pipe {
	int		 n;			/* statements queued */
	int		 skip;			/* results before the first */
	const char	*sql[PG_PIPE_MAX];	/* each one's text */
	int		 prep[PG_PIPE_MAX];	/* a Prepare went first */
	const char	*what[PG_PIPE_MAX];
	int		 late;			/* 1 + the one after the commit
						   whose error is a warning */
};

/* pg.c */
void	 pg_die(struct pgq *, PGresult *, const char *what)
	    __attribute__((noreturn));
const char *pg_int(struct pgq *, int64_t);
PGresult *pg_run(struct pgq *, const char *sql, int n, const char *const *v,
	    const int *len, const int *fmt, const char *what);
PGresult *pg_runc(struct pgq *, const char *sql, int n,
	    const char *const *v, const int *len, const int *fmt,
	    const char *what);
PGresult *pg_qx(struct pgq *, int prep, const char *what, const char *sql,
	    int n, ...);
/* (q, what, sql, n, n text parameters): pg_run's, pg_runc's */
#define pg_q(q, ...)	pg_qx((q), 0, __VA_ARGS__)
#define pg_qc(q, ...)	pg_qx((q), 1, __VA_ARGS__)
PGresult *pg_run_flush(struct pgq *, const char *sql, int n,
	    const char *const *v, const int *len, const int *fmt,
	    const char *topic, const char *what);
void	 pg_pipe_q(struct pgq *, struct pg_pipe *, const char *what,
	    const char *sql, int n, ...);
int	 pg_pipe_run(struct pgq *, struct pg_pipe *, PGresult **r);
void	 pg_pipe_commit(struct pgq *, struct pg_pipe *, int flush,
	    const char *lsn);
void	 pg_pipe_done(struct pgq *);
int	 pg_ok(PGresult *);
int64_t	 pg_get(PGresult *, int row, int col);
char	*pg_str(PGresult *, int row, int col);
void	 pg_copy(PGresult *, int row, int col, char *buf, size_t len);
int	 pg_null(PGresult *, int row, int col);
unsigned char *pg_bytes(PGresult *, int row, int col, size_t *len);
char	*pg_text_form(char *);
int	 pg_begin(struct pgq *);
int	 pg_commit(struct pgq *);
int	 pg_commit_seen(struct pgq *, int shows);
void	 pg_flush(struct pgq *, const char *lsn);
int	 pg_begin_read(struct pgq *);
void	 pg_session(struct pgq *);
void	 pg_rollback(struct pgq *);
int64_t	 pg_now(void);
void	 pg_notify(struct pgq *, int64_t topic);
void	 pg_channel(struct pgq *, int64_t topic, char *buf, size_t len);

/* topic.c */
int	 pg_topic_row(struct pgq *, const char *name, struct mq_topic *,
	    int lock);
int	 pg_group_row(struct pgq *, int64_t topic, const char *name,
	    struct mq_group *, int lock);
int	 pg_topic_ensure(struct pgq *, const char *name, struct mq_topic *,
	    int lock);
int	 pg_group_ensure(struct pgq *, const struct mq_topic *,
	    const char *name, int latest, struct mq_group *, int lock);
int	 pg_stats(struct pgq *, const struct mq_topic *,
	    const struct mq_group *, int64_t now, struct mq_gstats *);
int64_t	 pg_first_off(struct pgq *, int64_t topic);
int64_t	 pg_count_range(struct pgq *, int64_t topic, int64_t from,
	    int64_t to);
void	 pg_msg_row(PGresult *, int row, int col, struct mq_msg *);
void	 pg_group_locked(struct pgq *, struct pg_pipe *, const char *topic,
	    const char *name);
int	 pg_group_locked_row(PGresult *, struct mq_group *,
	    int64_t *topic_paused);
int	 pg_dead_consumers_of(struct pgq *, const char *topic,
	    const char *group, struct mq_consumer **);
int	 pg_consumers_of(struct pgq *, const char *topic, const char *group,
	    struct mq_consumer **);
int	 pg_need(struct pgq *, const char *topic, const char *group,
	    struct mq_topic *, struct mq_group *, int lock);
int	 pg_groups(struct pgq *, int64_t topic, struct mq_group **, int lock);

/* arrays as text parameters: '{...}' */
struct pg_arr {
	char	*s;
	size_t	 len, cap;
	int	 n;
};
void	 pg_arr_int(struct pg_arr *, int64_t);
void	 pg_arr_str(struct pg_arr *, const char *);	/* NULL: NULL */
const char *pg_arr_end(struct pg_arr *);
void	 pg_arr_free(struct pg_arr *);

int64_t	 pg_durable_below(struct pgq *, int64_t topic);
void	 pg_heard_durable(struct pgq *, int64_t topic, int64_t below);

/* combine.c */
int	 pg_comb_append(struct pgq *, struct mq_append *,
	    const struct mq_rec *, size_t, struct mq_sent *);
void	 pg_comb_close(struct pgq *);

/* deliver.c */
int	 pg_append_fast(struct pgq *, struct mq_append *,
	    const struct mq_rec *, size_t, struct mq_sent *);
int	 pg_history(struct pgq *, int64_t grp, int64_t off, int attempt,
	    const char *event, const char *reason, int64_t since,
	    const char *dhost, int64_t dpid);
int64_t	 pg_release(struct pgq *, int64_t consumer, int64_t now);
int	 pg_relock(struct pgq *, int64_t until);

/* mark.c */
int	 pg_replace_older(struct pgq *, const struct mq_topic *, const char *key,
	    int64_t off);

/* The operations, as pg.c lists them in its table. */
int	 pg_topic_get(struct mq *, const char *, struct mq_topic *);
int	 pg_topic_list(struct mq *, struct mq_topic **);
int	 pg_topic_create(struct mq *, const char *,
	    const struct mq_topic_conf *, struct mq_topic *);
int	 pg_topic_conf(struct mq *, const char *, const struct mq_topic_conf *,
	    struct mq_topic *);
int	 pg_topic_delete(struct mq *, const char *, int, struct mq_held *);
int	 pg_group_get(struct mq *, const char *, const char *,
	    struct mq_group *);
int	 pg_group_conf(struct mq *, const char *, const char *,
	    const struct mq_group_conf *, struct mq_group *);
int	 pg_group_delete(struct mq *, const char *, const char *, int,
	    struct mq_held *);
int	 pg_snapshot(struct mq *, struct mq_lag *);
int	 pg_consumers(struct mq *, const char *, const char *,
	    struct mq_consumer **);

int	 pg_append(struct mq *, struct mq_append *, const struct mq_rec *,
	    size_t, struct mq_sent *);
int	 pg_outbox(struct mq *, struct mq_outbox *);
int	 pg_claim(struct mq *, const struct mq_claim *, struct mq_msg *, int,
	    int64_t *);
void	 pg_settle(struct mq *, struct mq_settle *, size_t);
int64_t	 pg_join(struct mq *, const char *, const char *, int,
	    const struct mq_consumer *, int64_t *);
void	 pg_beat(struct mq *, int64_t, int64_t);
void	 pg_leave(struct mq *, int64_t);
int	 pg_reap(struct mq *, const char *, const char *, const char *,
	    int (*)(const struct mq_consumer *, const char *), const char *);

int	 pg_read(struct mq *, const struct mq_read *, struct mq_msg *, int);
int64_t	 pg_offset_at(struct mq *, const char *, int64_t);
int	 pg_move(struct mq *, const char *, const char *,
	    const struct mq_move *, struct mq_moved *);
int	 pg_redrive(struct mq *, const char *, const char *, const int64_t *,
	    int *, int, int, int64_t *);
int	 pg_mark(struct mq *, const struct mq_mark *, struct mq_marked **);
int	 pg_trace(struct mq *, const char *, int64_t, struct mq_trace *);
int	 pg_list(struct mq *, const struct mq_list *, struct mq_item *, int);
int	 pg_purge(struct mq *, const char *, struct mq_purge *);
void	 pg_vacuum(struct mq *);

struct mq_waiter *pg_waiter(struct mq *, const char *const *, int);
int	 pg_wait(struct mq_waiter *, int64_t, uint32_t *);
void	 pg_waiter_free(struct mq_waiter *);

#endif
