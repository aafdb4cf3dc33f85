/*
 * sq.h: private to the SQLite backend (common/sqlite/).  Nothing outside
 * this folder includes sqlite3.h.
 *
 * Files: sqlite.c (the table of operations), open.c (finding, creating,
 * migrating; statements; transactions), engine.c (the -mq file: writer
 * queue, group commit, wake-ups), topic.c (topics, groups, their counts,
 * consumers), deliver.c (append, claim, settle), mark.c (cancel, delay),
 * log.c (reading, moving, redriving, tracing, purging), backup.c,
 * wait.c (waiting for a topic).
 */
#ifndef MQ_SQ_H
#define MQ_SQ_H

#include <sqlite3.h>

#if SQLITE_VERSION_NUMBER < 3035000
#error "mq needs SQLite 3.35 or later (DELETE ... RETURNING)"
#endif

#include "../backend.h"

#define SQ_NSTMT	128
#define SQ_NTAKEN	64	/* combining slots one holder may take */

/* How commits reach the disk. */
enum {
	SQ_GROUP,	/* NORMAL commits, the WAL synced after, shared (engine.c) */
	SQ_FULL,	/* no -mq file: synchronous=FULL, each commit syncs */
	SQ_NONE,	/* MQ_SYNC=normal: the checkpoints sync */
};

/*
 * How a transaction must end (sq_commit): durable before returning; or
 * not, but with what it read durable (a claim shows what it read); or
 * neither (heartbeats, registrations).
 */
enum { SQ_DURABLE, SQ_SEEN, SQ_LAZY };

struct sq_shm;

/* A group's consumers on this host as sq_reap last read them. */
struct sq_reaped {
	char		 topic[MQ_NAME_MAX + 1], group[MQ_NAME_MAX + 1];
	uint32_t	 joins;		/* sq_joins() before that read */
	int64_t		 at;		/* when; 0: read again */
	struct mq_consumer *c;
	int		 n;
};

struct sq {
	struct mq	 base;		/* first: the table and the path */
	sqlite3		*db;
	int		 mode;		/* MQ_READ, MQ_WRITE */
	int		 in_tx, in_write;
	int64_t		 busy_ms, busy_since;
	int		 sync;		/* SQ_GROUP ... */
	sqlite3_stmt	*dv;		/* PRAGMA data_version */
	const char	*sql[SQ_NSTMT];	/* statement cache, keyed by text */
	sqlite3_stmt	*stmt[SQ_NSTMT];

	/* engine.c */
	int		 shmfd;		/* the -mq file; -1: none */
	struct sq_shm	*shm;
	int		 shm_rw;	/* mapped for writing */
	size_t		 shm_len;	/* mapped: all of it, or (read-only)
					   the part an older mq's file has */
	int		 queued;	/* holds the writer queue */
	int64_t		 queue_since;	/* waiting since; 0: from now */
	int		 wal_frames;	/* in the WAL after our last commit */
	int		 wal_left;	/* the same, kept for sq_wal_close */
	uint64_t	 seen;		/* commits a read may have seen */
	int64_t		*touched;	/* topics this transaction changed */
	int		 ntouched, atouched;

	/* deliver.c: sq_reap's last read of each lane */
	struct sq_reaped *reaped;
	int		 nreaped;

	/* combine.c: the slots this transaction took */
	int		 taken[SQ_NTAKEN], ntaken;
	/* combine.c: sq_comb_gather */
	uint32_t	 combined;	/* the -mq file's count as it last ran */
	int		 gathered;	/* it has run */
	int64_t		 gather_after;	/* no yields before (us, monotonic) */
};

#define SQ(q)	((struct sq *)(q))

/* open.c */
struct mq *sq_open(const char *path, int mode, const struct mq_backend *);
void	 sq_close(struct mq *);
void	 sq_die(struct sq *, const char *what) __attribute__((noreturn));
sqlite3_stmt *sq_stmt(struct sq *, const char *sql);
int	 sq_step(struct sq *, sqlite3_stmt *, const char *what);
void	 sq_exec(struct sq *, const char *sql, const char *what);
int64_t	 sq_int(struct sq *, const char *sql, int64_t dflt, int nargs, ...);
char	*sq_text(sqlite3_stmt *, int col);
void	 sq_copy(sqlite3_stmt *, int col, char *buf, size_t len);
int	 sq_status_of_errno(int);
int	 sq_status_of(int rc, int eno);
void	 sq_sync_dir(const char *path);
void	 sq_begin(struct sq *);
void	 sq_begin_read(struct sq *);
void	 sq_commit(struct sq *, int how);
void	 sq_rollback(struct sq *);
void	 sq_touch(struct sq *, int64_t topic);
int64_t	 sq_data_version(struct sq *);

/* engine.c */
void	 sq_engine_open(struct sq *);
void	 sq_engine_close(struct sq *);
void	 sq_queue_enter(struct sq *);
void	 sq_queue_leave(struct sq *);
uint64_t sq_commit_begins(struct sq *);
void	 sq_commit_done(struct sq *, uint64_t seq);
void	 sq_durable(struct sq *, uint64_t seq, int reader);
uint64_t sq_commits_seen(struct sq *);
uint32_t sq_joins(struct sq *);
void	 sq_joined(struct sq *);
void	 sq_wake(struct sq *, int64_t topic);
void	 sq_checkpoint(struct sq *, int frames);
void	 sq_wal_close(struct sq *);
uint32_t *sq_slot(struct sq *, int64_t topic);
int	 sq_slot_wait(struct sq *, int n, const int64_t *topic,
	    uint32_t *const *slot, const uint32_t *seen, int64_t ms);

/* combine.c */
int	 sq_comb_send(struct sq *, const struct mq_append *,
	    const struct mq_rec *, struct mq_sent *);
void	 sq_comb_recover(struct sq *);
void	 sq_comb_gather(struct sq *);
int	 sq_comb_join(struct sq *, const struct mq_append *,
	    const struct mq_topic *, struct mq_rec *, int *slot, int max);
void	 sq_comb_joined(struct sq *, const int *slot, const struct mq_sent *,
	    int);
void	 sq_comb_take(struct sq *);
void	 sq_comb_end(struct sq *, uint64_t seq);
void	 sq_comb_left(struct sq *);

/* topic.c */
int	 sq_topic_row(struct sq *, const char *name, struct mq_topic *);
int	 sq_group_row(struct sq *, int64_t topic, const char *name,
	    struct mq_group *);
void	 sq_topic_ensure(struct sq *, const char *name, struct mq_topic *);
void	 sq_group_ensure(struct sq *, const struct mq_topic *,
	    const char *name, int latest, struct mq_group *);
int	 sq_groups(struct sq *, int64_t topic, struct mq_group **);
int	 sq_need(struct sq *, const char *topic, const char *group,
	    struct mq_topic *, struct mq_group *);
void	 sq_stats(struct sq *, const struct mq_topic *, const struct mq_group *,
	    int64_t now, struct mq_gstats *);
int64_t	 sq_first_off(struct sq *, int64_t topic);
int64_t	 sq_count_range(struct sq *, int64_t topic, int64_t from, int64_t to);
void	 sq_msg_row(sqlite3_stmt *, struct mq_msg *);
void	 sq_msg_at(sqlite3_stmt *, int col, struct mq_msg *);
int	 sq_consumers_on(struct sq *, const char *topic, const char *group,
	    const char *host, struct mq_consumer **);

/* deliver.c */
struct sq_by {			/* who delivered an attempt, and when */
	int64_t		since, pid;
	char		host[256];
};
void	 sq_history(struct sq *, int64_t grp, int64_t off, int attempt,
	    const char *event, const char *reason, const struct sq_by *);
int64_t	 sq_release(struct sq *, int64_t consumer, int64_t now);
void	 sq_replace_older(struct sq *, const struct mq_topic *, const char *key,
	    int64_t off);
int	 sq_append_to(struct sq *, const struct mq_topic *, struct mq_append *,
	    const struct mq_rec *, size_t, struct mq_sent *);
int	 sq_append_tx(struct sq *, struct mq_append *, const struct mq_rec *,
	    size_t, struct mq_sent *);

/* The operations, as sqlite.c lists them in its table. */
int	 sq_topic_get(struct mq *, const char *, struct mq_topic *);
int	 sq_topic_list(struct mq *, struct mq_topic **);
int	 sq_topic_create(struct mq *, const char *,
	    const struct mq_topic_conf *, struct mq_topic *);
int	 sq_topic_conf(struct mq *, const char *, const struct mq_topic_conf *,
	    struct mq_topic *);
int	 sq_topic_delete(struct mq *, const char *, int, struct mq_held *);
int	 sq_group_get(struct mq *, const char *, const char *,
	    struct mq_group *);
int	 sq_group_conf(struct mq *, const char *, const char *,
	    const struct mq_group_conf *, struct mq_group *);
int	 sq_group_delete(struct mq *, const char *, const char *, int,
	    struct mq_held *);
int	 sq_snapshot(struct mq *, struct mq_lag *);
int	 sq_consumers(struct mq *, const char *, const char *,
	    struct mq_consumer **);

int	 sq_append(struct mq *, struct mq_append *, const struct mq_rec *,
	    size_t, struct mq_sent *);
int	 sq_outbox(struct mq *, struct mq_outbox *);
int	 sq_claim(struct mq *, const struct mq_claim *, struct mq_msg *, int,
	    int64_t *);
void	 sq_settle(struct mq *, struct mq_settle *, size_t);
int64_t	 sq_join(struct mq *, const char *, const char *, int,
	    const struct mq_consumer *, int64_t *);
void	 sq_beat(struct mq *, int64_t, int64_t);
void	 sq_leave(struct mq *, int64_t);
int	 sq_reap(struct mq *, const char *, const char *, const char *,
	    int (*)(const struct mq_consumer *, const char *), const char *);

int	 sq_read(struct mq *, const struct mq_read *, struct mq_msg *, int);
int64_t	 sq_offset_at(struct mq *, const char *, int64_t);
int	 sq_move(struct mq *, const char *, const char *,
	    const struct mq_move *, struct mq_moved *);
int	 sq_redrive(struct mq *, const char *, const char *, const int64_t *,
	    int *, int, int, int64_t *);
int	 sq_mark(struct mq *, const struct mq_mark *, struct mq_marked **);
void	 sq_backup(struct mq *, const char *);
int	 sq_trace(struct mq *, const char *, int64_t, struct mq_trace *);
int	 sq_list(struct mq *, const struct mq_list *, struct mq_item *, int);
int	 sq_purge(struct mq *, const char *, struct mq_purge *);
void	 sq_vacuum(struct mq *);

struct mq_waiter *sq_waiter(struct mq *, const char *const *, int);
int	 sq_wait(struct mq_waiter *, int64_t, uint32_t *);
void	 sq_waiter_free(struct mq_waiter *);

#endif
