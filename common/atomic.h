/*
 * atomic.h: atomics and futexes on memory that processes share (a mapped
 * file): the SQLite engine's -mq file (common/sqlite/shm.h) and the
 * PostgreSQL backend's combining slots (common/pg/combine.c).
 */
#ifndef MQ_ATOMIC_H
#define MQ_ATOMIC_H

#include <stdint.h>

/*
 * Sequentially consistent throughout: a sleeper counts itself and then
 * checks the word; a waker bumps the word and then checks the count.
 * Each pair is a store then a load of another place, which only a full
 * order keeps from passing each other.
 */
#define LOAD(p)		__atomic_load_n((p), __ATOMIC_SEQ_CST)
#define STORE(p, v)	__atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define ADD(p, v)	__atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST)
#define CAS(p, o, n)	__atomic_compare_exchange_n((p), &(o), (n), 0, \
			    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)

/* host.c: sleeps while *w is val, at most ms; wakes every sleeper */
int	 mq_futex_wait(uint32_t *w, uint32_t val, int64_t ms);
void	 mq_futex_wake(uint32_t *w);

#endif
