#!/usr/bin/env bats
# 073-backup.bats: mq-topic backup FILE: a consistent copy while the queue
# is in use, on disk before it has its name, as private as the database;
# restored, every settled message stays settled and every unsettled one
# is delivered.  On PostgreSQL it says to use pg_dump.

# shellcheck disable=SC2154 # stderr: set by run --separate-stderr
load test_helper
bats_require_minimum_version 1.5.0

teardown() {
	kill_bg
}

# one_error PROG: the last run printed exactly one line on stderr, from
# PROG (a usage error adds the synopsis after it).
one_error() {
	local e=${stderr%%$'\n'usage: *}
	[[ $e != *$'\n'* ]] || fail "want one line on stderr, got: $stderr"
	[[ $e == "$1: "* ]] || fail "want a line from $1, got: $stderr"
}

# leases_over: no lease of the database runs any more.
leases_over() {
	[ "$(sql 'SELECT coalesce(max(due), 0) FROM delivery WHERE state = 1')" -le "$(now_ms)" ]
}

# indb FILE SQL: a query on another database file.
indb() {
	sqlite3 -cmd '.timeout 30000' "$1" "$2"
}

@test "restored, a backup hands out what was unsettled and nothing that was settled" {
	sqlite_only "PostgreSQL is backed up with pg_dump"
	seq 10 | mq-send -q t
	mq-topic group t g --lease 1s --max-attempts 2 >/dev/null
	recv_ack g 3					# 1-3 settled
	mq-recv -g g --format '%r' t >/dev/null		# 4 in flight
	r=$(mq-recv -g g --format '%r' t)
	mq-ack --dead "$r"				# 5 dead
	r=$(mq-recv -g g --format '%r' t)
	mq-ack --fail --delay 0 "$r"			# 6 waits for a retry
	mq-topic cancel t 8 >/dev/null			# 8 cancelled
	run -0 mq-topic backup "$BATS_TEST_TMPDIR/copy.db"
	assert_output ''
	# the queue goes on; the copy does not see it
	recv_ack g
	mq-send -q t 11
	assert_equal "$(indb copy.db 'PRAGMA integrity_check')" ok
	assert_equal "$(indb copy.db 'SELECT count(*), max(off) FROM msg')" '10|10'
	[ ! -e copy.db-wal ] || fail "a backup comes as one file"
	# restore: the copy in the database's place, with no -wal or -shm
	mkdir restored
	mv copy.db restored/mq.db
	export MQ_DB=$BATS_TEST_TMPDIR/restored/mq.db
	wait_for 10 leases_over
	run -0 mq-recv -A -n 0 -g g --format '%b\n' t
	assert_equal "$(sort -n <<<"$output" | tr '\n' ' ')" '4 6 7 9 10 '
	run -1 mq-recv -g g t
	mq-lag --json t g | jtrue '.dead == 1 and .lag == 0 and .cancelled_total == 1'
	assert_equal "$(sql 'PRAGMA journal_mode')" wal
}

@test "a backup taken while producers and a consumer run is whole: integrity, dense offsets, counts that agree" {
	sqlite_only "PostgreSQL is backed up with pg_dump"
	mq-send -q t first
	mq-topic group t g >/dev/null
	local i
	for i in 1 2 3 4; do
		# shellcheck disable=SC2016 # the inner shell expands them
		bg "prod.$i" sh -c 'for n in $(seq 150); do mq-send -q t "p$1.$n" || exit; done' sh "$i"
	done
	bg cons mq-recv -f -A -g g --format '%o\n' t
	wait_for 60 sql_is 'SELECT count(*) > 100 FROM msg' 1
	run -0 mq-topic backup "$BATS_TEST_TMPDIR/mid.db"
	for p in $(head -4 "$BATS_TEST_TMPDIR/pids"); do
		finish "$p" 120
		assert_equal "$ST" 0
	done
	assert_equal "$(indb mid.db 'PRAGMA integrity_check')" ok
	# offsets 1..N with no hole, N = next_off - 1; counters agree
	assert_equal "$(indb mid.db 'SELECT count(*) = max(off), max(off) + 1 = (SELECT next_off FROM topic), count(*) = (SELECT msgs FROM topic) FROM msg')" '1|1|1'
	assert_equal "$(indb mid.db 'SELECT pos <= (SELECT next_off FROM topic) FROM grp')" 1
	n=$(indb mid.db 'SELECT count(*) FROM msg')
	[ "$n" -gt 100 ] && [ "$n" -le 601 ] || fail "backup holds $n messages"
}

@test "the backup is as private as the database; an existing FILE is refused (1); bad places are 66 or 77; nothing changes" {
	sqlite_only "PostgreSQL is backed up with pg_dump"
	mq-send -q t one
	chmod 600 "$MQ_DB"
	run -0 mq-topic backup b1.db
	assert_equal "$(stat -c %a b1.db)" 600
	before=$(db_state)
	run --separate-stderr -1 mq-topic backup b1.db
	one_error mq-topic
	[[ $stderr == *exists* ]] || fail "$stderr"
	run --separate-stderr -66 mq-topic backup nosuchdir/b.db
	one_error mq-topic
	run --separate-stderr -64 mq-topic backup
	one_error mq-topic
	run --separate-stderr -64 mq-topic backup a b
	one_error mq-topic
	run --separate-stderr -66 mq-topic -d "$BATS_TEST_TMPDIR/none.db" backup b2.db
	one_error mq-topic
	[ ! -e b2.db ] && [ ! -e none.db ] || fail "made a file"
	assert_equal "$(db_state)" "$before"
	ls ./*.tmp 2>/dev/null && fail "a temporary file was left" || true
	if [ "$(id -u)" = 0 ]; then
		mkdir ro && chmod 755 ro && chmod 644 "$MQ_DB"
		run --separate-stderr -77 as_nobody mq-topic backup "$BATS_TEST_TMPDIR/ro/b.db"
		one_error mq-topic
	fi
}

@test "PostgreSQL: backup says to use pg_dump, 64, one line" {
	[ -n "$PG" ] || skip "PostgreSQL only"
	mq-send -q t one
	run --separate-stderr -64 mq-topic backup b.db
	one_error mq-topic
	[[ $stderr == *pg_dump* ]] || fail "$stderr"
	[ ! -e b.db ] || fail "made a file"
}
