/*
 * db.h: private to the storage layer (db.c, store.c).  Nothing outside
 * these two files may include sqlite3.h.
 */
#ifndef MQ_DB_H
#define MQ_DB_H

#include <sqlite3.h>

#include "mq.h"

#define MQ_NSTMT	96

struct mq {
	sqlite3		*db;
	char		*path;
	int		 mode;
	int		 in_tx;
	int64_t		 busy_ms, busy_since;
	int		 sync_normal;	/* MQ_SYNC=normal */
	int		 sync_now;	/* what the connection does now: 1 FULL */
	sqlite3_stmt	*dv;		/* PRAGMA data_version, kept: waiters poll it */
	sqlite3_stmt	*stmt[MQ_NSTMT];
};

sqlite3_stmt *mq_stmt(struct mq *, int slot, const char *sql);
void	 mq_dbdie(struct mq *, const char *what) __attribute__((noreturn));
int	 mq_step(struct mq *, sqlite3_stmt *, const char *what);

#endif
