#!/usr/bin/env bats
# 043-combine.bats: producers share transactions (common/sqlite/combine.c).
# An mq-send that finds the writer queue held leaves its message in a slot
# of the -mq file; whoever holds the queue next and appends takes every
# waiting slot into its own commit.  These tests hold the queue themselves
# (an flock on the -mq file, as mq's writers take it) so the slots fill up
# for certain, and read the -mq file's numbers at the places
# common/sqlite/shm.h fixes (combine.c asserts them at build time):
#   byte 24      writing: durable commits begun, u64
#   byte 60      combined: messages appended from slots, u32
#   byte 131144  the slots' states, two u32 each (state, wake); READY is 2
# The random kills of t/048-kill-producers.bats and the recorded power
# cuts of t/047-powercut.bats cover the same code under real contention.
# shellcheck disable=SC2154 # stderr is set by bats' run --separate-stderr

load test_helper
# shellcheck disable=SC2034 # read by setup() in test_helper.bash
SQLITE_ONLY="the writer queue and the slots of the -mq file"

teardown() {
	kill_bg
	if [ -n "${RO_DIR-}" ]; then
		rm -rf "$RO_DIR"
	fi
}

u32() {
	od -An -tu4 -j"$1" -N4 "$MQ_DB-mq" | tr -d ' '
}

u64() {
	od -An -tu8 -j"$1" -N8 "$MQ_DB-mq" | tr -d ' '
}

# ready N: exactly N slots wait to be taken.
ready() {
	[ "$(od -v -An -tu4 -w8 -j131144 -N512 "$MQ_DB-mq" |
	    awk '$1 == 2' | wc -l)" -eq "$1" ]
}

# in_flock PID: PID waits in flock(2).
in_flock() {
	grep -q locks_lock_inode_wait "/proc/$1/wchan"
}

# let_go: lets go of the queue this test holds (descriptor lk), and waits
# for the senders pids[]: the second exits 65, too big for topic a, with
# one line that says so; the others 0.
let_go() {
	local n
	flock -u "$lk"
	exec {lk}>&-
	for n in $(seq "${#pids[@]}"); do
		finish "${pids[n - 1]}" 60
		[ "$ST" = "$([ "$n" = 2 ] && echo 65 || echo 0)" ] ||
		    fail "mq-send $n exited $ST: $(cat "out.$n" 2>/dev/null)"
	done
	grep -q 'over the size limit of 8 bytes of topic a' out.2 ||
	    fail "out.2: $(cat out.2)"
}

# queue_held: some process holds the writer queue.
queue_held() {
	! flock -n "$MQ_DB-mq" true
}

@test "producers that find the queue held leave their messages in slots: the next holder appends all of them in one commit" {
	export MQ_BUSY_TIMEOUT=120s
	mq-send -q t first
	exec {lk}>>"$MQ_DB-mq"
	flock -x "$lk"
	w0=$(u64 24) c0=$(u32 60)
	pids=()
	for k in 1 2 3 4; do
		bg "out.$k" mq-send t "m$k"
		pids+=("$BG")
	done
	wait_for 60 ready 4
	flock -u "$lk"
	exec {lk}>&-
	for k in 1 2 3 4; do
		finish "${pids[k - 1]}" 60
		[ "$ST" = 0 ] || fail "mq-send m$k exited $ST: $(cat "out.$k")"
		holds "out.$k" "m$k"
	done
	# one commit for the four: the first to get the queue took the others
	assert_equal "$(u64 24)" $((w0 + 1))
	assert_equal "$(u32 60)" $((c0 + 3))
	ready 0
	run -0 sql 'SELECT min(off), max(off), count(*) FROM msg'
	assert_output '1|5|5'
	db_intact
}

@test "a holder that dies with slots taken: their owners see it and send them, each once" {
	export MQ_BUSY_TIMEOUT=120s
	local shim
	shim=$(shim faultshim "$BATS_TEST_TMPDIR")
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
	mq-send -q t first
	# sqlite3, fed through a fifo, keeps the database open (a read: it
	# holds the -shm): first only
	# that (so the -shm is there, as it will be for the holder), then
	# with SQLite's write lock, so the holder waits in the queue, after
	# the slots are filled, before it appends
	mkfifo cmds
	# shellcheck disable=SC2016 # $MQ_DB is expanded by the inner bash
	setsid bash -c 'sqlite3 "$MQ_DB" <cmds' >held 2>&1 3>&- &
	holder=$!
	echo "$holder" >>"$BATS_TEST_TMPDIR/pgids"
	exec {cmd}>cmds
	printf '%s\n' '.timeout 10000' "SELECT 'open' FROM topic LIMIT 1;" >&"$cmd"
	wait_for 30 grep -qx open held
	# the holder's first write to the WAL (its COMMIT), from a dry run
	MQ_FAULT_PREFIX=$MQ_DB MQ_FAULT_AT=0 MQ_FAULT_LOG=dry.log \
	    LD_PRELOAD=$shim mq-send -q t dry
	at=$(awk -F'\t' '$2 ~ /write/ && $3 == "mq.db-wal" { print $1; exit }' dry.log)
	[ -n "$at" ] || fail "the dry run wrote no WAL: $(cat dry.log)"
	printf '%s\n' 'BEGIN IMMEDIATE;' \
	    "INSERT INTO topic(name, created) VALUES('zz', 0);" "SELECT 'held';" >&"$cmd"
	wait_for 30 grep -qx held held
	bg h.out env MQ_FAULT_PREFIX="$MQ_DB" MQ_FAULT_AT="$at" \
	    MQ_FAULT_ERRNO=EIO LD_PRELOAD="$shim" mq-send t H
	h=$BG
	wait_for 30 queue_held
	c0=$(u32 60)
	pids=()
	for k in 1 2 3; do
		bg "out.$k" mq-send t "m$k"
		pids+=("$BG")
	done
	wait_for 60 ready 3
	kill -9 -- "-$holder"
	exec {cmd}>&-
	# the holder took the three, failed to commit and died
	finish "$h" 60
	assert_equal "$ST" 74
	run -0 cat h.out
	assert_output --partial 'cannot commit'
	for k in 1 2 3; do
		finish "${pids[k - 1]}" 60
		[ "$ST" = 0 ] || fail "mq-send m$k exited $ST: $(cat "out.$k")"
		holds "out.$k" "m$k"
	done
	# taken three times by the dead one, then twice (and once sent by
	# its own) by the owner that found it dead
	assert_equal "$(u32 60)" $((c0 + 5))
	ready 0
	run -0 sql 'SELECT min(off), max(off), count(*), count(DISTINCT body) FROM msg'
	assert_output '1|5|5|5'	# first, dry, m1-m3
	run -0 sql "SELECT count(*) FROM msg WHERE body IN ('H', CAST('H' AS BLOB))"
	assert_output 0
	db_intact
}

# set_u32 OFFSET VALUE: VALUE at byte OFFSET of the -mq file, as a u32.
set_u32() {
	local v=$2
	# shellcheck disable=SC2059 # the format is the bytes
	printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $((v & 255)) \
	    $((v >> 8 & 255)) $((v >> 16 & 255)) $((v >> 24 & 255)))" |
	    dd of="$MQ_DB-mq" bs=1 seek="$1" count=4 conv=notrunc status=none
}

# sends_past_leader: three mq-send t mK at once, each made to wait for
# the leader byte 12 names, finish with 0, and their offsets hold mK.
sends_past_leader() {
	local k pids=()
	for k in 1 2 3; do
		bg "out.$k" mq-send t "m$k"
		pids+=("$BG")
	done
	for k in 1 2 3; do
		finish "${pids[k - 1]}" 60
		[ "$ST" = 0 ] || fail "mq-send m$k exited $ST: $(cat "out.$k")"
		holds "out.$k" "m$k"
	done
	# the one that took its place is done: nobody leads
	assert_equal "$(u32 12)" 0
}

@test "a sync leader that hangs, or died, is replaced: its waiters sync for themselves, and what they print is stored" {
	mq-send -q t first
	# byte 12: the pid of the process syncing the WAL for the others;
	# one that lives and never ends its sync (they wait 2 s for it)
	bg /dev/null sleep 120
	set_u32 12 "$BG"
	[ "$(u32 12)" = "$BG" ] || fail "byte 12: $(u32 12)"
	s0=$(u64 48)
	sends_past_leader
	(($(u64 48) > s0)) || fail "no sync counted"
	# one that is gone
	true &
	gone=$!
	wait "$gone"
	set_u32 12 "$gone"
	sends_past_leader
	db_intact
}

@test "a reader that may only read an older mq's -mq file (shorter) still syncs what it shows first" {
	local so
	RO_DIR=$(mktemp -d /tmp/mq-ro.XXXXXX)
	chmod 755 "$RO_DIR"
	export MQ_DB="$RO_DIR/mq.db"
	mq-send -q t hello
	# as an mq from before the combining slots left it (131144 bytes
	# long: it ends at slot[]), and with that commit not yet synced:
	# synced (byte 40, a u64) is 0
	truncate -s 131144 "$MQ_DB-mq"
	dd if=/dev/zero of="$MQ_DB-mq" bs=1 seek=40 count=8 conv=notrunc \
	    status=none
	[ "$(u64 40)" = 0 ] || fail "synced: $(u64 40)"
	chmod 666 "$MQ_DB" "$MQ_DB-wal" "$MQ_DB-shm"
	chmod 444 "$MQ_DB-mq"
	so=$(shim faultshim "$BATS_TEST_TMPDIR")
	cp "$so" "$RO_DIR/faultshim.so"
	: >"$RO_DIR/log"
	chmod 666 "$RO_DIR/log"
	run -0 as_nobody env \
	    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
	    MQ_FAULT_PREFIX="$MQ_DB" MQ_FAULT_LOG="$RO_DIR/log" \
	    LD_PRELOAD="$RO_DIR/faultshim.so" mq-replay t
	assert_output "$(printf '1\thello')"
	grep -q $'\tfdatasync\tmq.db-wal\t' "$RO_DIR/log" ||
	    fail "the WAL was not synced: $(cat "$RO_DIR/log")"
	# a reader changes nothing: the file is as long as it was
	assert_equal "$(stat -c %s "$MQ_DB-mq")" 131144
}

@test "slots of several topics and keys, one too big for its topic: each run of alike slots is one append, the big one is refused and said so" {
	export MQ_BUSY_TIMEOUT=120s
	mq-topic create a max-size=8 >/dev/null
	mq-send -q b first
	exec {lk}>>"$MQ_DB-mq"
	flock -x "$lk"
	c0=$(u32 60)
	local k n t body pids=()
	n=0
	for k in "a small" "a far-too-big-for-a" "-k k1 b x" "-k k2 b y" \
	    "-k k1 b z" "b w"; do
		# shellcheck disable=SC2086 # options, topic and body
		bg "out.$((++n))" mq-send $k
		pids+=("$BG")
		wait_for 60 ready "$n"
	done
	# a send of two messages does not use a slot: it waits in flock(2),
	# and the kernel hands it the queue as we let go (the owners of the
	# slots only try every 20ms): it takes all six slots
	bg out.7 mq-send b h1 h2
	local holder=$BG
	wait_for 60 in_flock "$holder"
	pids+=("$holder")
	let_go
	for k in 1:a:small 3:b:x 4:b:y 5:b:z 6:b:w; do
		IFS=: read -r n t body <<<"$k"
		run -0 sql "SELECT CAST(m.body AS TEXT) FROM msg m JOIN topic t
		    ON t.id = m.topic WHERE t.name = '$t' AND m.off = $(cat "out.$n")"
		assert_output "$body"
	done
	run -0 sql "SELECT t.name, t.next_off, t.msgs FROM topic t ORDER BY t.name"
	assert_output $'a|2|1\nb|8|7'
	if [ "$(cat out.7)" = $'2\n3' ]; then
		# it held the queue first: small went with the big one's run,
		# and only the big one was refused; b's runs in slot order
		assert_equal "$(u32 60)" $((c0 + 5))
		run -0 sql "SELECT CAST(m.body AS TEXT) FROM msg m JOIN topic t
		    ON t.id = m.topic WHERE t.name = 'b' ORDER BY m.off"
		assert_output "$(printf '%s\n' first h1 h2 x z y w)"
	else
		# (an owner's look came first: it held the queue, took the
		# others' slots, the two-message send came after)
		assert_equal "$(u32 60)" $((c0 + 4))
	fi
	ready 0
	db_intact
}

@test "a holder's one message takes along the slots of its topic and key in its own append; a slot too big for the topic is refused, not the holder's" {
	export MQ_BUSY_TIMEOUT=120s
	mq-topic create a max-size=8 >/dev/null
	exec {lk}>>"$MQ_DB-mq"
	flock -x "$lk"
	c0=$(u32 60)
	local k n pids=()
	n=0
	for k in "-k k1 a x" "a far-too-big-for-a" "a small"; do
		# shellcheck disable=SC2086 # options, topic and body
		bg "out.$((++n))" mq-send $k
		pids+=("$BG")
		wait_for 60 ready "$n"
	done
	# a send with a dedup id takes no slot: it waits in flock(2) and is
	# handed the queue as we let go (see the test above)
	bg out.4 mq-send --dedup d1 a h
	local holder=$BG
	wait_for 60 in_flock "$holder"
	pids+=("$holder")
	let_go
	for k in 1:x:k1 3:small: 4:h:; do
		IFS=: read -r n body key <<<"$k"
		run -0 sql "SELECT CAST(body AS TEXT), coalesce(key, '') FROM msg
		    WHERE off = $(cat "out.$n")"
		assert_output "$body|$key"
	done
	run -0 sql "SELECT next_off, msgs FROM topic WHERE name = 'a'"
	assert_output '4|3'
	if [ "$(cat out.4)" = 1 ]; then
		# it held the queue first: small, the last slot, joined its
		# append right after it; x (another key) came after, in a run
		# of its own (slots that only follow go in slot order: x first)
		assert_equal "$(cat out.3) $(cat out.1)" "2 3"
		assert_equal "$(u32 60)" $((c0 + 2))
	fi
	# (an owner's look came first: it held the queue and took the
	# others' slots; each is still stored once, above)
	ready 0
	db_intact
}

@test "a sender whose lock of the writer queue fails takes its message back from its slot first: 74, and it is never stored" {
	local so log n
	so=$(shim faultshim "$BATS_TEST_TMPDIR")
	# (an ASan build wants its runtime first in the library list)
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
	mq-send -q t first
	log=$BATS_TEST_TMPDIR/calls
	# the calls of a send that goes well, counted: which is its first
	# flock, the one after its message went into a slot
	MQ_FAULT_PREFIX=$MQ_DB MQ_FAULT_LOCKS=1 MQ_FAULT_LOG=$log \
	    LD_PRELOAD=$so run -0 mq-send t probe
	assert_output 2
	n=$(awk -F'\t' '$2 == "flock" { print $1; exit }' "$log")
	[ -n "$n" ] || fail "no flock counted: $(cat "$log")"
	# from that one on, every flock fails
	MQ_FAULT_PREFIX=$MQ_DB MQ_FAULT_LOCKS=1 MQ_FAULT_AT=$n \
	    MQ_FAULT_STICKY=1 MQ_FAULT_ERRNO=EIO LD_PRELOAD=$so \
	    run -74 --separate-stderr mq-send t lost
	assert_output ''
	assert_equal "${#stderr_lines[@]}" 1
	assert_regex "$stderr" '^mq-send: cannot lock .*-mq: '
	ready 0
	# the next sender finds no slot waiting to take along
	run -0 mq-send t third
	assert_output 3
	run -0 sql "SELECT off, $(txt body) FROM msg ORDER BY off"
	assert_output $'1|first\n2|probe\n3|third'
	db_intact
}

# lines N FILE: FILE has N lines.
lines() {
	[ "$(wc -l <"$2")" -eq "$1" ]
}

@test "a holder gives its CPU to others (sched_yield) before it takes slots, while others send; a lone sender never does" {
	command -v strace >/dev/null || skip "no strace(1)"
	export MQ_BUSY_TIMEOUT=120s
	local fifo=$BATS_TEST_TMPDIR/in log=$BATS_TEST_TMPDIR/calls k s
	mq-send -q t first
	mkfifo "$fifo"
	# a long-lived sender, its reads of stdin and its yields recorded
	# (its stdin redirected by the command itself: bash gives a
	# background job /dev/null otherwise)
	# shellcheck disable=SC2016 # for sh to expand
	bg out.l sh -c 'exec "$@" <"$0"' "$fifo" \
	    strace -f -qq -s 16 -e trace=read,sched_yield -o "$log" mq-send t
	l=$BG
	# (opened after: the sender must not hold a writer's end itself)
	exec {w}>"$fifo"
	# alone, one message at a time: no yield
	for k in $(seq 10); do
		echo "lone$k" >&"$w"
		wait_for 60 lines "$k" out.l || fail "out.l: $(cat out.l)"
	done
	# a slot waits (its sender stopped, so it cannot take the queue
	# itself) as the long-lived one appends: it yields, then takes it
	exec {lk}>>"$MQ_DB-mq"
	flock -x "$lk"
	bg out.s mq-send t waiting
	s=$BG
	wait_for 60 ready 1
	kill -STOP "$s"
	flock -u "$lk"
	exec {lk}>&-
	echo joins >&"$w"
	wait_for 60 lines 11 out.l
	kill -CONT "$s"
	finish "$s" 60
	[ "$ST" = 0 ] || fail "the waiting mq-send exited $ST: $(cat out.s)"
	exec {w}>&-
	finish "$l" 60
	[ "$ST" = 0 ] || fail "the long-lived mq-send exited $ST: $(cat out.l)"
	holds out.s waiting
	assert_equal "$(tail -n 1 out.l)" 12
	run -0 sql "SELECT $(txt body) FROM msg WHERE off >= 12 ORDER BY off"
	assert_output $'joins\nwaiting'
	# yields: none before it read "joins", some after
	run -0 awk '/read\(0, "joins/ { j = 1 }
	    / sched_yield\(/ { y[j + 0]++ }
	    END { print j + 0, y[0] + 0, (y[1] > 0) }' "$log"
	assert_output '1 0 1'
	db_intact
}
