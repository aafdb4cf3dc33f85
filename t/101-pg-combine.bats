#!/usr/bin/env bats
# 101-pg-combine.bats: producers of one host share appends on PostgreSQL
# (common/pg/combine.c).  An mq-send that finds another appending to its
# topic leaves its message in a slot of a file under $TMPDIR/mq-UID; the
# one appending takes every waiting slot into its next transaction.  These
# tests hold that file's lock themselves (an flock, as mq-send takes it),
# so the slots fill for certain, and read the slots' states, two u32 each
# (state, wake) from byte 1032 (combine.c asserts it at build time):
# READY is 2, TAKEN 3.  A holder killed at random under real contention
# is t/048-kill-producers.bats's, run on PostgreSQL too.  A holder here
# waits for topic t's row, which a psql session holds, and is killed
# before or after its append commits.
# shellcheck disable=SC2154 # stderr is set by bats' run --separate-stderr

load test_helper
# shellcheck disable=SC2034 # read by setup() in test_helper.bash
PG_ONLY="the combining file of PostgreSQL's producers"

teardown() {
	kill_bg
}

# comb_file: the one combining file (of topic t) there is, in CF.
comb_file() {
	local f=("$TMPDIR/mq-$(id -u)"/pg-*)
	if [ "${#f[@]}" != 1 ] || [ ! -f "${f[0]}" ]; then
		fail "not one combining file: ${f[*]}"
	fi
	CF=${f[0]}
}

# slots STATE N: exactly N slots are in STATE.
slots() {
	[ "$(od -v -An -tu4 -w8 -j1032 -N256 "$CF" |
	    awk -v s="$1" '$1 == s' | wc -l)" -eq "$2" ]
}

# holder: the pid that holds the file's lock.
holder() {
	awk -v ino=":$(stat -c %i "$CF")" '$2 == "FLOCK" &&
	    substr($6, length($6) - length(ino) + 1) == ino { print $5 }' \
	    /proc/locks
}

# send_held: four mq-send t mK wait in slots while the test holds the
# file's lock (CF, after mq-send t first); then it lets go: one of them
# takes the other three.  Their pids in PIDS.
send_held() {
	local k lk
	exec {lk}>>"$CF"
	flock -x "$lk"
	PIDS=()
	for k in 1 2 3 4; do
		bg "out.$k" mq-send t "m$k"
		PIDS+=("$BG")
	done
	wait_for 60 slots 2 4
	flock -u "$lk"
	exec {lk}>&-
}

# row_held: a psql session (fed through fifo cmds, on fd CMD) holds topic
# t's row, as an append in progress would: appends wait for it.
row_held() {
	mkfifo cmds
	# shellcheck disable=SC2016 # $MQ_DB is expanded by the inner bash
	setsid bash -c 'psql -X -q -A -t -d "$MQ_DB" <cmds' >held 2>&1 3>&- &
	echo "$!" >>"$BATS_TEST_TMPDIR/pgids"
	exec {CMD}>cmds
	printf '%s\n' "BEGIN; SELECT 'held' FROM topic WHERE name = 't' FOR UPDATE;" >&"$CMD"
	wait_for 30 grep -qx held held
}

# take_held: with topic t's row held (row_held) and four sends waiting
# (send_held), one took the other three's messages and sent its append,
# which waits for the row; its pid in H.
take_held() {
	row_held
	send_held
	wait_for 60 slots 3 3
	H=$(holder)
	[ -n "$H" ] || fail "nobody holds $CF"
}

# told_but H: the three mq-send that did not hold exit 0, each having
# printed the offset of its message.
told_but() {
	local k
	for k in 1 2 3 4; do
		if [ "${PIDS[k - 1]}" = "$1" ]; then
			continue
		fi
		finish "${PIDS[k - 1]}" 60
		[ "$ST" = 0 ] || fail "mq-send m$k exited $ST: $(cat "out.$k")"
		holds "out.$k" "m$k"
	done
}

setup_run() {
	export TMPDIR=$BATS_TEST_TMPDIR/run MQ_BUSY_TIMEOUT=120s
	mkdir "$TMPDIR"
	mq-send -q t first
	comb_file
}

@test "producers that find another appending leave their messages in slots: one transaction appends them all" {
	setup_run
	[ "$(stat -c %a "$TMPDIR/mq-$(id -u)")" = 700 ]
	[ "$(stat -c %a "$CF")" = 600 ]
	send_held
	told_but none
	slots 2 0
	run -0 sql "SELECT count(DISTINCT xmin::text) FROM msg WHERE off > 1"
	assert_output 1
	# the holder's row of combined went with its session
	run -0 sql "SELECT count(*) FROM combined"
	assert_output 0
	run -0 sql 'SELECT min(off), max(off), count(*) FROM msg'
	assert_output '1|5|5'
}

@test "a holder killed after its append committed, before it told anyone: its slots' owners find the batch committed" {
	setup_run
	take_held
	# stopped while it waits: the server commits and flushes its append,
	# and it never reads that
	kill -STOP "$H"
	printf '%s\n' 'COMMIT;' >&"$CMD"
	exec {CMD}>&-
	wait_for 60 sql_is 'SELECT count(*) FROM msg' 5
	kill -9 "$H"
	told_but "$H"
	run -0 sql 'SELECT min(off), max(off), count(*), count(DISTINCT body) FROM msg'
	assert_output '1|5|5|5'
	slots 3 0
	slots 2 0
}

@test "a holder killed before its append committed: its batch is settled as not stored, and fails when the server runs it after all" {
	setup_run
	take_held
	kill -9 "$H"
	# the next holder settles the dead one's batch (its row says so) and
	# appends the three again (its own and two slots), waiting for the
	# row in its turn
	wait_for 60 sql_is 'SELECT seq, first FROM combined' '1|0'
	wait_for 60 slots 3 2
	# the dead one's server process gets the row first or second: its
	# append fails either way
	printf '%s\n' 'COMMIT;' >&"$CMD"
	exec {CMD}>&-
	told_but "$H"
	for k in 1 2 3 4; do
		[ "${PIDS[k - 1]}" != "$H" ] || gone=m$k
	done
	run -0 sql 'SELECT min(off), max(off), count(*), count(DISTINCT body) FROM msg'
	assert_output '1|4|4|4'
	run -0 sql "SELECT count(*) FROM msg WHERE $(txt body) = '$gone'"
	assert_output 0
	slots 2 0
	slots 3 0
}

@test "without a private directory of its own under TMPDIR, mq-send appends alone" {
	export TMPDIR=$BATS_TEST_TMPDIR/run
	mkdir -m 755 "$TMPDIR" "$TMPDIR/mq-$(id -u)"
	run -0 mq-send t one
	assert_output 1
	run -0 find "$TMPDIR" -type f
	assert_output ''
	chmod 700 "$TMPDIR/mq-$(id -u)"
	run -0 mq-send t two
	assert_output 2
	comb_file
}
