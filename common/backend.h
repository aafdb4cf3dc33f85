/*
 * backend.h: what a storage engine must provide.  Private to the library
 * and the backends (common/sqlite/, later others); programs see only the
 * mq_* calls of mq.h, which dispatch through this table (backend.c).
 *
 * A backend is a table of whole operations.  Each one is one transaction:
 * it is done entirely or not at all, and a program never begins or commits
 * anything itself.  The contract of every operation:
 * - It is correct without a database-wide lock: counters change by
 *   increments, a group's position only moves by max(), a receipt's
 *   attempt and token are checked by the statement that settles it, and a
 *   per-topic row lock (or the database's one writer) orders offsets.
 * - It can be done by a network database in one or two round trips: the
 *   inputs come whole (a batch of messages or receipts), the results go
 *   back whole (no callbacks into the program inside a transaction, but
 *   for the pure ones named below).
 * - Writes that report success are durable when they return (committed
 *   and synced), except claims, heartbeats and consumer registrations: a
 *   lost claim only means the message is delivered again.  The messages a
 *   read or claim returns are durable before they are returned, so no
 *   message is printed that a power cut could take back (counts may still
 *   include claims that a power cut would undo).
 * - The delivery rules (backoff, when a delivery becomes a dead letter and
 *   with which reason, lease maths) are not the backend's: it asks
 *   policy.c, which is pure.
 * - Errors of the database itself (I/O, corruption, busy past the
 *   timeout, permissions) end the program with the documented exit status
 *   and one line on stderr (mq_die); what a caller can act on comes back as
 *   a result code (MQ_E_*).
 */
#ifndef MQ_BACKEND_H
#define MQ_BACKEND_H

#include "mq.h"

struct mq_backend {
	const char *name;
	/* how often a follower with nothing to do looks for dead consumers
	   and at its topic (ms): cheap on a local file, a few round trips
	   to a server */
	int64_t	 idle_ms;
	void	(*close)(struct mq *);

	/* topics and groups */
	int	(*topic_get)(struct mq *, const char *, struct mq_topic *);
	int	(*topic_list)(struct mq *, struct mq_topic **);
	int	(*topic_create)(struct mq *, const char *,
		    const struct mq_topic_conf *, struct mq_topic *);
	int	(*topic_conf)(struct mq *, const char *,
		    const struct mq_topic_conf *, struct mq_topic *);
	int	(*topic_delete)(struct mq *, const char *, int,
		    struct mq_held *);
	int	(*group_get)(struct mq *, const char *, const char *,
		    struct mq_group *);
	int	(*group_conf)(struct mq *, const char *, const char *,
		    const struct mq_group_conf *, struct mq_group *);
	int	(*group_delete)(struct mq *, const char *, const char *, int,
		    struct mq_held *);
	int	(*snapshot)(struct mq *, struct mq_lag *);

	/* messages */
	int	(*append)(struct mq *, struct mq_append *,
		    const struct mq_rec *, size_t, struct mq_sent *);
	int	(*outbox)(struct mq *, struct mq_outbox *);
	int	(*claim)(struct mq *, const struct mq_claim *, struct mq_msg *,
		    int, int64_t *);
	void	(*settle)(struct mq *, struct mq_settle *, size_t);
	int	(*read)(struct mq *, const struct mq_read *, struct mq_msg *,
		    int);
	int64_t	(*offset_at)(struct mq *, const char *, int64_t);
	int	(*move)(struct mq *, const char *, const char *,
		    const struct mq_move *, struct mq_moved *);
	int	(*redrive)(struct mq *, const char *, const char *,
		    const int64_t *, int *, int, int, int64_t *);
	int	(*mark)(struct mq *, const struct mq_mark *,
		    struct mq_marked **);
	int	(*trace)(struct mq *, const char *, int64_t, struct mq_trace *);
	/* up to max in order of offset of each source: mq_list merges */
	int	(*list)(struct mq *, const struct mq_list *, struct mq_item *,
		    int);
	int	(*purge)(struct mq *, const char *, struct mq_purge *);
	void	(*vacuum)(struct mq *);
	/* a consistent copy to a new file; NULL: not this way (PostgreSQL) */
	void	(*backup)(struct mq *, const char *);

	/* consumers: me is this process (host.c fills it) */
	int64_t	(*join)(struct mq *, const char *, const char *, int,
		    const struct mq_consumer *me, int64_t *);
	void	(*beat)(struct mq *, int64_t, int64_t);
	void	(*leave)(struct mq *, int64_t);
	int	(*consumers)(struct mq *, const char *, const char *,
		    struct mq_consumer **);
	/*
	 * Releases and removes the consumers of a group on host for which
	 * gone() says so.
	 */
	int	(*reap)(struct mq *, const char *topic, const char *group,
		    const char *host,
		    int (*gone)(const struct mq_consumer *, const char *),
		    const char *boot);

	/* waiting for one of n topics to change (mq.h: mq_wait) */
	struct mq_waiter *(*waiter)(struct mq *, const char *const *, int);
	int	(*wait)(struct mq_waiter *, int64_t, uint32_t *);
	void	(*waiter_free)(struct mq_waiter *);
};

/* Every backend's state starts with this, and every waiter's. */
struct mq {
	const struct mq_backend	*be;
	char			*path;	/* as the user named it */
};
struct mq_waiter {
	struct mq		*q;
};

/* common/sqlite/ */
struct mq *mq_sqlite_open(const char *path, int mode);

/* common/pg/, when built with libpq (MQ_PG) */
void	 mq_pg_load(void);	/* libpq, before mq_pg_open; exits 64 */
struct mq *mq_pg_open(const char *conn, int mode);
int	 mq_pg_schema_version(void);
int	 mq_is_pg(const char *path);
int	 mq_is_private(const char *path);

#endif
