/*
 * sqlite.c: the SQLite backend as the storage interface sees it: its
 * table of operations (backend.h), implemented in topic.c, deliver.c,
 * log.c, mark.c, outbox.c, backup.c and wait.c.  Nothing else in this folder refers to the table, so
 * those files depend on open.c and engine.c, never the other way.
 */
#include "sq.h"

static const struct mq_backend sqlite_backend = {
	.name = "sqlite",
	.idle_ms = 1000,
	.close = sq_close,
	.topic_get = sq_topic_get,
	.topic_list = sq_topic_list,
	.topic_create = sq_topic_create,
	.topic_conf = sq_topic_conf,
	.topic_delete = sq_topic_delete,
	.group_get = sq_group_get,
	.group_conf = sq_group_conf,
	.group_delete = sq_group_delete,
	.snapshot = sq_snapshot,
	.append = sq_append,
	.outbox = sq_outbox,
	.claim = sq_claim,
	.settle = sq_settle,
	.read = sq_read,
	.offset_at = sq_offset_at,
	.move = sq_move,
	.redrive = sq_redrive,
	.mark = sq_mark,
	.trace = sq_trace,
	.list = sq_list,
	.purge = sq_purge,
	.vacuum = sq_vacuum,
	.backup = sq_backup,
	.join = sq_join,
	.beat = sq_beat,
	.leave = sq_leave,
	.consumers = sq_consumers,
	.reap = sq_reap,
	.waiter = sq_waiter,
	.wait = sq_wait,
	.waiter_free = sq_waiter_free,
};

struct mq *
mq_sqlite_open(const char *path, int mode)
{
	return sq_open(path, mode, &sqlite_backend);
}
