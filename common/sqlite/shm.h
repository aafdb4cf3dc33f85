/*
 * shm.h: the layout of the -mq file (engine.c, combine.c), worked on
 * with ../atomic.h's atomics and futexes.  Private to common/sqlite/.
 */
#ifndef MQ_SHM_H
#define MQ_SHM_H

#include <stdint.h>

#include "../atomic.h"
#include "../mq.h"

#define SHM_MAGIC	0x6d712d6dU	/* "mq-m" */
#define SHM_VERSION	2
#define NSLOT		16384
#define NCOMB		64		/* combining slots (combine.c) */
#define COMB_KEY	1024		/* the longest key mq-send takes */
#define COMB_BODY	6992		/* a slot is 8 KB */

/*
 * A message one mq-send left for whoever holds the writer queue to
 * append in its own transaction (combine.c).  Its state and its owner's
 * futex are apart, in comb_word[], so that a look at every slot's state
 * reads a few cache lines.
 */
struct sq_comb {
	uint32_t	owner, taker;	/* pids */
	uint32_t	len, haskey;
	uint64_t	seq;		/* the commit that stored it */
	int64_t		off;		/* the offset it was given */
	char		topic[MQ_NAME_MAX + 1];
	char		key[COMB_KEY + 1];
	char		body[COMB_BODY];
};

/*
 * Version 2 ends at slot[]; comb_word[] and comb[] were added after it, so a file made by
 * an older mq is only made longer (zeroes: every slot free), and an
 * older mq maps the part it knows.  A reader that may not write the
 * file maps what is there (engine.c), and reads nothing past slot[].
 */
struct sq_shm {
	uint32_t	magic, version;
	uint32_t	sync_word;	/* futex: bumped after every sync */
	uint32_t	leader;		/* pid syncing now; 0: none */
	uint32_t	sync_waiters;	/* asleep on sync_word */
	uint32_t	joins;		/* bumped once a consumer's join is
					   committed (sq_reap reads again;
					   byte 20: t/040) */
	uint64_t	writing;	/* the last commit begun */
	uint64_t	written;	/* the last commit done */
	uint64_t	synced;		/* every commit up to here is on disk */
	uint64_t	syncs;		/* syncs done, for the curious */
	uint32_t	ckpt_at;	/* WAL frames when a checkpoint last began;
					   0 once the WAL started over */
	uint32_t	combined;	/* messages appended from slots: a
					   holder that sees it move yields
					   (combine.c; byte 60: t/047) */
	uint64_t	failed;		/* commits up to here may be lost: a
					   sync of the WAL failed */
	struct {
		uint32_t	seq, waiters;
	} slot[NSLOT];
	struct {
		uint32_t	state;	/* COMB_* (combine.c) */
		uint32_t	wake;	/* bumped whenever state may change */
	} comb_word[NCOMB];
	struct sq_comb	comb[NCOMB];
};

void	 sq_max_store(uint64_t *, uint64_t);

#endif
