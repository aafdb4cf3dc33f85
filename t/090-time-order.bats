#!/usr/bin/env bats
# 090-time-order.bats: time and order: delayed messages (--delay, --at),
# deduplication (--dedup, --dedup-field, the window), ordered groups (one
# message of a key at a time, FIFO per key under failures and concurrent
# consumers, other keys not blocked), and waiting consumers that wake at
# once on a send, a due retry or a due delayed message.
#
# Every wait is a bounded poll; bounds are generous for a slow, shared
# machine.  How fast a waiter wakes is read from the database's own times
# (msg.ts, msg.due, history.ts), not from the test's clock, and set
# against the one thing a waiter may do instead: look again at its next
# safety look, once a second (common/sqlite/wait.c).  The event under test falls
# about 800ms before that look, and the bound is 500ms.  A waiter that
# misses the event is that late every time; a machine too busy to wake a
# sound one at once is rarely so three times running: such a test passes
# on the first of three runs that is in time (promptly).

# shellcheck disable=SC2154 # stderr: set by bats' run --separate-stderr

load test_helper

# Background processes (pids) and process groups (pgids) this test
# started: killed in teardown if still there.
teardown() {
	kill_bg
}

# running PID: the process is still there (waiting, not exited).
running() {
	kill -0 "$1" 2>/dev/null || fail "pid $1 exited"
}

# delivered OFF [ATTEMPT]: when (ms) group g made delivery ATTEMPT
# (default 1) of OFF; fails when it did not.  Meant for at=$(delivered
# ...), where set -e is off: hence the explicit return.
delivered() {
	local t
	t=$(sql "SELECT h.ts FROM events h JOIN grp g ON g.id = h.grp
	    WHERE g.name = 'g' AND h.event = 'delivered' AND h.off = $1
	    AND h.attempt = ${2:-1}")
	if ! [[ $t =~ ^[0-9]+$ ]]; then
		fail "no delivery $1/${2:-1} in group g: '$t'"
		return 1
	fi
	echo "$t"
}

# promptly WHAT CMD...: runs CMD, which sets LATE (ms, by the database's
# clock), up to three times, each on a fresh database, until LATE is
# under 500ms; fails, saying WHAT and each LATE, when it never is.
promptly() {
	local what=$1 try lates=
	shift
	for try in 1 2 3; do
		[ "$try" = 1 ] || drop_db
		"$@"
		[ "$LATE" -ge 500 ] || return 0
		lates="$lates ${LATE}ms"
	done
	fail "$what:$lates (safety look: 1s)"
}

# got [OPTIONS]: one plain receive in group g of topic t; "RECEIPT BODY"
# in GOT.
got() {
	GOT=$(mq-recv -g g --format '%r %b\n' "$@" t) && [ -n "$GOT" ]
}

msgs() {
	sql 'SELECT count(*) FROM msg'
}

# --- delay -------------------------------------------------------------

@test "--delay: nothing before its time, then the message" {
	start=$(now_ms)
	run -0 mq-send --delay 3s t later
	assert_output 1
	assert_equal "$(sql 'SELECT due - ts FROM msg WHERE off = 1')" 3000
	run --separate-stderr mq-recv -g g t
	in_time $((start + 3000)) "the delay"
	assert_equal "$status" 1
	assert_equal "$output" ""
	assert_equal "$stderr" ""
	wait_for 20 got
	end=$(now_ms)
	[[ $GOT == *" later" ]] || fail "got: $GOT"
	# not early: no sooner than 3s after the send started, and delivered
	# at or after its due time by the database's clock
	[ $((end - start)) -ge 2900 ] || fail "received $((end - start))ms after the send"
	due=$(sql 'SELECT due FROM msg WHERE off = 1')
	at=$(delivered 1)
	[ "$at" -ge "$due" ] || fail "delivered $((due - at))ms before its due time"
}

@test "a delayed message does not hold back the ones after it" {
	mq-send -q --delay 1h t A
	mq-send -q t B C
	run -0 mq-recv -g g -n 0 --format '%o %b\n' t
	assert_output "2 B
3 C"
	run -1 mq-recv -g g -n 0 t
	# ... unless in an ordered group with the same key (mq-send(1))
	mq-topic group u o --ordered >/dev/null
	mq-send -q -k k --delay 1h u A
	mq-send -q -k k u B
	mq-send -q -k j u C
	run -0 mq-recv -g o -n 0 --format '%b\n' u
	assert_output C
}

@test "--at in the past delivers at once; --at 2s ahead waits until then" {
	mq-send -q --at "@$(( $(date +%s) - 60 ))" t epoch
	mq-send -q --at 2020-01-01T00:00:00Z t iso
	mq-send -q --at 5m t ago
	run -0 mq-recv -g g -n 0 --format '%b\n' t
	assert_output "epoch
iso
ago"
	due=$(( $(now_ms) + 2500 ))
	at=$(date -u -d "@$((due / 1000)).$(printf %03d $((due % 1000)))" +%Y-%m-%dT%H:%M:%S.%3NZ)
	run -0 mq-send --at "$at" t soon
	assert_output 4
	assert_equal "$(sql 'SELECT due FROM msg WHERE off = 4')" "$due"
	run mq-recv -g g t
	in_time "$due" "the --at time"
	assert_equal "$status" 1
	wait_for 20 got
	[ "$(now_ms)" -ge "$due" ] || fail "received before $due"
	[[ $GOT == *" soon" ]] || fail "got: $GOT"
	at=$(delivered 4)
	[ "$at" -ge "$due" ] || fail "delivered $((due - at))ms before its due time"
}

@test "bad --delay is a usage error (64), bad --at bad data (65); nothing stored" {
	for v in x 1y -1s '' 1.5s 5mm; do
		run -64 --separate-stderr mq-send --delay "$v" t m
		assert_equal "$output" ""
		[[ $stderr == mq-send:* ]] || fail "--delay '$v': $stderr"
		[[ ${stderr_lines[1]-} == "usage: "* ]] ||
		    fail "want one line, then the usage: $stderr"
	done
	for v in x 2026-13-01 @x '' 2026-01-01T00:00:00Q 2026-01-01T25:00:00Z @-5; do
		run -65 --separate-stderr mq-send --at "$v" t m
		assert_equal "$output" ""
		[[ $stderr == mq-send:* ]] || fail "--at '$v': $stderr"
		assert_equal "${#stderr_lines[@]}" 1
	done
	run -64 mq-send --delay 1s --at @1 t m
	no_db
	mq-send -q t first
	run -65 mq-send --at nonsense t m
	run -64 mq-send --delay nonsense t m
	assert_equal "$(msgs)" 1
}

@test "--delay counts from each message's send, also on a stream" {
	# SPEC: "A message may be sent with a delay ...; no group receives it
	# before then": from stdin the delay counts from each line's send,
	# not from the start of mq-send (a line read 2s after the start used
	# to be due 1s after it was sent; d80592c).
	(echo a; sleep 2; echo b) | mq-send -q --delay 4s t
	run -0 sql 'SELECT off, CASE WHEN due - ts >= 3900 THEN 1 ELSE 0 END FROM msg ORDER BY off'
	assert_output "1|1
2|1"
	# ... and b's time is its own send, 2s after a's
	gap=$(sql 'SELECT b.ts - a.ts FROM msg a, msg b WHERE a.off = 1 AND b.off = 2')
	[ "$gap" -ge 1500 ] || fail "b stamped ${gap}ms after a"
	# neither is due when mq-send is done
	run -1 mq-recv -g g -n 0 t
}

# --- deduplication -------------------------------------------------------

@test "--dedup: the same id prints the same offset and stores nothing new" {
	run -0 mq-send --dedup id1 t a
	assert_output 1
	run -0 --separate-stderr mq-send --dedup id1 t a
	assert_output 1
	assert_equal "$stderr" ""
	# even with another body: the id decides
	run -0 mq-send --dedup id1 t other
	assert_output 1
	assert_equal "$(msgs)" 1
	assert_equal "$(sql "SELECT $(txt body) FROM msg")" a
	run -0 mq-send --dedup id2 t a
	assert_output 2
	run -0 mq-send t a
	assert_output 3
	run -0 mq-send --dedup id2 t a
	assert_output 2
	assert_equal "$(msgs)" 3
	# ids are per topic
	run -0 mq-send --dedup id1 u a
	assert_output 1
	# one consumer sees one message per id
	run -0 mq-recv -g g -n 0 --format '%o\n' t
	assert_output "1
2
3"
}

@test "--dedup: after the topic's window, the same id stores a new message" {
	mq-send -q --dedup id1 t a
	mq-topic set t dedup-window=3s >/dev/null
	run -0 mq-send --dedup id1 t a
	assert_output 1
	# half a second past the window of the first send
	past() { [ "$(now_ms)" -ge "$1" ]; }
	wait_for 20 past $(( $(sql 'SELECT ts FROM msg WHERE off = 1') + 3500 ))
	run -0 mq-send --dedup id1 t a
	assert_output 2
	# the new one is what the id now names
	run -0 mq-send --dedup id1 t a
	assert_output 2
	assert_equal "$(msgs)" 2
}

@test "--dedup-field over a batch of 40 lines, ids repeating across its statements of 16 rows: each id's first line stored once, in order" {
	local i want=
	for i in $(seq 40); do
		printf 'k%d\tb%d\n' $((i % 17)) "$i"
		want+="$(( (i - 1) % 17 + 1 ))"$'\n'
	done >in
	run -0 mq-send --dedup-field 1 -k key t <in
	assert_output "${want%$'\n'}"
	run -0 sql "SELECT off, $(txt body), dedup, key FROM msg ORDER BY off"
	want=
	for i in $(seq 17); do
		want+="$i|k$((i % 17))	b$i|k$((i % 17))|key"$'\n'
	done
	assert_output "${want%$'\n'}"
	run -0 sql "SELECT next_off, msgs FROM topic WHERE name = 't'"
	assert_output '18|17'
}

@test "--dedup-field takes the id from a field of each line" {
	run -0 mq-send --dedup-field 1 t < <(printf 'x\tone\ny\ttwo\nx\tthree\n')
	assert_output "1
2
1"
	assert_equal "$(msgs)" 2
	run -0 sql "SELECT off, $(txt body) FROM msg ORDER BY off"
	assert_output "1|x	one
2|y	two"
	# later, in another run: still the same ids
	run -0 mq-send --dedup-field 2 t < <(printf 'new\tx\nnewer\tz\n')
	assert_output "1
3"
}

@test "dedup ids and keys are UTF-8, sent or looked for: 64 for an argument, 65 for a field, on both backends" {
	# (SQLite stored any bytes, PostgreSQL failed 65 at the server's
	# text; a key to look for that cannot have been sent was 65 there,
	# nothing found here)
	ff=$(printf '\377')
	mq-send -q -k k --dedup d t a
	before=$(db_state)
	run -64 --separate-stderr mq-send --dedup "x$ff" t b
	assert_regex "$stderr" '^mq-send: invalid dedup id: want 1-1024 bytes of UTF-8'
	run -64 --separate-stderr mq-replay -k "$ff" t
	assert_regex "$stderr" '^mq-replay: invalid key: want 1-1024 bytes of UTF-8'
	run -64 mq-lag --messages -k "$ff" t g
	run -64 mq-topic cancel -k "$ff" t
	run -64 mq-topic delay --delay 1h --dedup "$ff" t
	assert_equal "$(db_state)" "$before"
	# a stream: 65 at the record, its batch not stored
	run -65 --separate-stderr mq-send --dedup-field 1 t < <(printf 'e\tb\n%s\tc\nf\td\n' "$ff")
	assert_output ""
	assert_equal "$stderr" "mq-send: message refused: its dedup id (field 1) is not 1-1024 bytes of UTF-8"
	assert_equal "$(db_state)" "$before"
}

@test "--dedup with two messages, or with --dedup-field or stdin lines: 64" {
	run -64 --separate-stderr mq-send --dedup id t a b
	[[ $stderr == mq-send:* ]]
	run -64 mq-send --dedup id t < <(echo a)
	run -64 mq-send --dedup id --dedup-field 1 t < <(echo a)
	run -64 mq-send --dedup-field 1 t a
	run -64 mq-send --dedup-field 0 t < <(echo a)
	run -64 mq-send --dedup '' t a
	no_db
	# --whole is one message: allowed
	run -0 mq-send --dedup w --whole t < <(printf 'a\nb\n')
	assert_output 1
	run -0 mq-send --dedup w --whole t < <(printf 'c\n')
	assert_output 1
}

# --- ordered groups ------------------------------------------------------

@test "ordered group: one message per key at a time, the next after the ack" {
	mq-topic group t g --ordered >/dev/null
	mq-send -q -k a t a1 a2 a3
	mq-send -q -k b t b1 b2
	mq-send -q t n1 n2
	run -0 mq-recv -g g -n 0 --format '%r %b\n' t
	echo "$output" >first
	assert_equal "$(cut -d' ' -f2 first | paste -sd ' ')" "a1 b1 n1 n2"
	# a second consumer gets nothing more while those are held
	run -1 mq-recv -g g -n 0 t
	mq-ack <first
	run -0 mq-recv -g g -n 0 --format '%r %b\n' t
	echo "$output" >second
	assert_equal "$(cut -d' ' -f2 second | paste -sd ' ')" "a2 b2"
	mq-ack <second
	run -0 mq-recv -g g -n 0 --format '%b\n' t
	assert_output a3
	# an unordered group of the same topic takes everything at once
	run -0 mq-recv -g free -n 0 --format '%b\n' t
	assert_equal "$(paste -sd ' ' <<<"$output")" "a1 a2 a3 b1 b2 n1 n2"
}

@test "ordered group: a failing key holds back only itself" {
	mq-topic group t g --ordered >/dev/null
	mq-send -q -k A t a1 a2
	mq-send -q -k B t b1 b2 b3
	mq-send -q t n1 n2
	run -0 mq-recv -g g -n 0 --format '%r %b\n' t
	echo "$output" >first
	# keyless messages flow in parallel: both are out at once
	assert_equal "$(cut -d' ' -f2 first | paste -sd ' ')" "a1 b1 n1 n2"
	mq-ack --fail --delay 1h "$(awk '$2 == "a1" { print $1 }' first)"
	mq-ack "$(awk '$2 == "b1" { print $1 }' first)"
	run -0 mq-recv -g g -n 0 --format '%r %b\n' t
	assert_equal "$(cut -d' ' -f2 <<<"$output")" b2
	mq-ack <<<"$output"
	run -0 mq-recv -g g -n 0 --format '%r %b\n' t
	assert_equal "$(cut -d' ' -f2 <<<"$output")" b3
	mq-ack <<<"$output"
	# a2 waits behind a1's retry; it counts in the lag
	run -1 mq-recv -g g -n 0 t
	run -0 mq-lag --json t g
	jtrue '.retrying == 1 and .lag == 4 and .in_flight == 2' <<<"$output"
}

@test "ordered group: per-key order exact over 1000 messages, 10 keys, 3 consumers, random failures" {
	export MQ_SYNC=normal	# ordering is under test here, not durability
	mq-topic group t g --ordered --backoff 100ms >/dev/null
	# message i has key k(i % 10); sent in rounds so the keys interleave
	for r in $(seq 0 9); do
		for k in $(seq 0 9); do
			seq $((r * 100 + (k ? k : 10))) 10 $((r * 100 + 100)) |
			    mq-send -q -k "k$k" t
		done
	done
	assert_equal "$(msgs)" 1000
	assert_equal "$(sql "SELECT count(*) FROM msg WHERE key = 'k' || (CAST($(txt body) AS INTEGER) % 10)")" 1000
	cat >handler <<-'EOF'
	#!/bin/bash
	# fail about one in five; else log "KEY BODY"
	if (( RANDOM % 5 == 0 )); then exit 1; fi
	printf '%s %s\n' "$MQ_KEY" "$(cat)" >>"$LOG"
	EOF
	chmod +x handler
	export LOG=$BATS_TEST_TMPDIR/log
	consumers=()
	for c in 1 2 3; do
		bg "c$c.out" mq-recv -f -j 3 -g g t -- ./handler
		consumers+=("$BG")
	done
	all_acked() {
		[ "$(sql 'SELECT settled FROM grp')" = 1000 ]
	}
	wait_for 150 all_acked
	for p in "${consumers[@]}"; do
		running "$p"
		kill -TERM "$p"
	done
	for p in "${consumers[@]}"; do
		finish "$p" 20
		assert_equal "$ST" 0
	done
	# each message handled successfully once; per key strictly increasing
	assert_equal "$(wc -l <log)" 1000
	assert_equal "$(cut -d' ' -f2 log | sort -n | paste -sd ' ')" "$(seq 1000 | paste -sd ' ')"
	# shellcheck disable=SC2016 # an awk program
	run -0 awk '"k" ($2 % 10) != $1 { print "wrong key: " $0 }
	    ($1 in last) && $2 <= last[$1] { print "out of order: " last[$1] " then " $0 }
	    { last[$1] = $2 }' log
	assert_output ""
	# not vacuous: failures happened, several consumers took part
	[ "$(sql "SELECT count(*) FROM events WHERE event = 'failed'")" -gt 50 ]
	[ "$(sql "SELECT count(DISTINCT pid) FROM events WHERE event = 'delivered'")" -ge 2 ]
	# no two deliveries of one key overlapped in time: each delivery runs
	# from its "delivered" event to the next event of that attempt
	run -0 sql "
	    WITH d AS (SELECT h.off, h.attempt, h.ts AS s, m.key,
	        (SELECT min(e.ts) FROM events e WHERE e.grp = h.grp
	         AND e.off = h.off AND e.attempt = h.attempt
	         AND e.event <> 'delivered') AS e
	      FROM events h JOIN msg m ON m.off = h.off
	      WHERE h.event = 'delivered')
	    SELECT (SELECT count(*) FROM d WHERE e IS NULL),
	      (SELECT count(*) FROM d a JOIN d b ON a.key = b.key
	       AND (a.off <> b.off OR a.attempt <> b.attempt)
	       AND a.s < b.e AND b.s < a.e),
	      (SELECT count(*) FROM d)"
	[[ $output =~ ^0\|0\|[0-9]+$ ]] || fail "open, overlapping, all: $output"
	[ "${output##*|}" -gt 1000 ]
}

# --- waiting -------------------------------------------------------------

@test "a waiting mq-recv -w wakes on a send, well before its timeout" {
	export MQ_SYNC=normal	# waking is under test here: no fsync in the way
	wake_on_send() {
		local pid sent at
		mq-topic group t g >/dev/null
		bg out mq-recv -g g -w 10s --format '%b\n' t
		pid=$BG
		sleep 1
		running "$pid"	# still waiting
		# the send lands just after one of its safety looks: a waiter
		# that only found it at the next one would take most of a second
		after_look "$pid"
		mq-send -q t hello
		finish "$pid" 15
		assert_equal "$ST" 0
		assert_equal "$(cat out)" hello
		# from the send to the delivery
		sent=$(sql 'SELECT ts FROM msg WHERE off = 1')
		at=$(delivered 1)
		LATE=$((at - sent))
	}
	promptly "delivered after the send" wake_on_send
}

@test "mq-recv -f receives each message as it comes, and keeps following" {
	mq-topic group t g >/dev/null
	bg out mq-recv -f -g g --format '%b\n' t
	pid=$BG
	sleep 0.5
	mq-send -q t one
	wait_for 15 grep -qx one out
	mq-send -q t two
	wait_for 15 grep -qx two out
	running "$pid"
	kill -TERM "$pid"
	finish "$pid" 15
	assert_equal "$ST" 0
	assert_equal "$(paste -sd ' ' out)" "one two"
}

@test "a waiting mq-recv -w wakes when a retry falls due" {
	export MQ_SYNC=normal	# waking is under test here: no fsync in the way
	wake_on_retry() {
		local r pid due at
		mq-send -q t x
		r=$(mq-recv -g g --format '%r' t)
		bg out mq-recv -g g -w 10s --format '%a %b\n' t
		pid=$BG
		sleep 1
		running "$pid"	# x is leased
		# the fail wakes it (a commit); its safety looks come 1s and
		# 2s after that, and the retry falls due 800ms before the second
		mq-ack --fail --delay 1200ms "$r"
		due=$(sql 'SELECT due FROM delivery WHERE off = 1 AND state = 0')
		[ -n "$due" ] || fail "x is not waiting for its retry"
		finish "$pid" 15
		assert_equal "$ST" 0
		assert_equal "$(cat out)" "2 x"
		# at its due time: not before, and not at the next safety look
		at=$(delivered 1 2)
		[ "$at" -ge "$due" ] ||
		    fail "delivered $((due - at))ms before the retry was due"
		LATE=$((at - due))
	}
	promptly "delivered after the retry was due" wake_on_retry
}

@test "a waiting mq-recv -w wakes when a delayed message falls due" {
	export MQ_SYNC=normal	# waking is under test here: no fsync in the way
	wake_on_due() {
		local pid due at
		mq-topic group t g >/dev/null
		bg out mq-recv -g g -w 10s --format '%b\n' t
		pid=$BG
		sleep 1
		running "$pid"
		# the send wakes it (a commit); its safety looks come 1s and
		# 2s after that, and the message falls due 800ms before the
		# second
		mq-send -q --delay 1200ms t x
		due=$(sql 'SELECT due FROM msg WHERE off = 1')
		assert_equal "$(( due - $(sql 'SELECT ts FROM msg WHERE off = 1') ))" 1200
		finish "$pid" 15
		assert_equal "$ST" 0
		assert_equal "$(cat out)" x
		at=$(delivered 1)
		[ "$at" -ge "$due" ] ||
		    fail "delivered $((due - at))ms before it was due"
		LATE=$((at - due))
	}
	promptly "delivered after it was due" wake_on_due
}

@test "a waiting mq-recv -w in an ordered group wakes when its key is freed" {
	export MQ_SYNC=normal	# waking is under test here: no fsync in the way
	wake_on_ack() {
		local r pid acked at
		mq-topic group t g --ordered >/dev/null
		mq-send -q -k k t first second
		r=$(mq-recv -g g --format '%r' t)
		bg out mq-recv -g g -w 10s --format '%b\n' t
		pid=$BG
		sleep 1
		running "$pid"	# second waits behind first
		# the ack lands just after one of its safety looks
		after_look "$pid"
		mq-ack "$r"
		finish "$pid" 15
		assert_equal "$ST" 0
		assert_equal "$(cat out)" second
		acked=$(sql "SELECT ts FROM events WHERE event = 'acked' AND off = 1")
		[ -n "$acked" ] || fail "first was not acked"
		at=$(delivered 2)
		LATE=$((at - acked))
	}
	promptly "delivered after the ack" wake_on_ack
}

@test "waiting consumers do not busy-poll" {
	mq-topic group t g >/dev/null
	mq-topic group t o --ordered >/dev/null
	# in o, k's second message is due but waits behind the first
	mq-send -q -k k t first second
	run -0 mq-recv -g o --lease 1h --format '%r' t
	ro=$output
	mq-recv -g g -n 0 --lease 1h t >/dev/null
	bg w.out mq-recv -g g -w 60s t
	w=$BG
	bg f.out mq-recv -g g -f t
	f=$BG
	bg o.out mq-recv -g o -f t
	o=$BG
	sleep 1
	# user + system CPU in clock ticks: a few for start-up, not a loop
	cpu() {
		awk '{ print $14 + $15 }' "/proc/$1/stat"
	}
	hz=$(getconf CLK_TCK)
	declare -A s0
	for p in "$w" "$f" "$o"; do
		running "$p"
		s0[$p]=$(switches "$p")
	done
	sleep 3
	for p in "$w" "$f" "$o"; do
		running "$p"
		# wake-ups: about one a second (the safety look); looking every
		# 50ms (the fallback without inotify) would be 60
		n=$(switches "$p")
		[ $((n - s0[$p])) -lt 20 ] ||
		    fail "pid $p woke $((n - s0[$p])) times in 3s"
		c=$(cpu "$p")
		[ "$c" -lt $((hz / 2)) ] || fail "pid $p used $c ticks of 1/${hz}s"
	done
	assert_equal "$(cat w.out f.out o.out)" ""
	# not vacuous: they were waiting for these messages, and take them
	mq-ack "$ro"
	wait_for 15 grep -q $'\tsecond$' o.out
	mq-send -q t third
	third() {
		[ "$(cat w.out f.out | grep -c $'\tthird$')" = 1 ]
	}
	wait_for 15 third
}

@test "mq-replay -f prints a message sent after it started" {
	mq-send -q t old
	bg out mq-replay -f --format '%o %b\n' t
	pid=$BG
	wait_for 15 grep -qx '1 old' out
	mq-send -q t new
	wait_for 15 grep -qx '2 new' out
	running "$pid"
	kill -TERM "$pid"
	finish "$pid" 15
	assert_equal "$ST" 0
	assert_equal "$(cat out)" "1 old
2 new"
}

@test "writes to other files beside the database neither spin a waiter nor hide a send" {
	export MQ_SYNC=normal	# waking is under test here: no fsync in the way
	mq-topic group t g >/dev/null
	bg w.out mq-recv -g g -w 60s t
	w=$BG
	# a log written beside the database, a few hundred times a second
	( for i in $(seq 5000); do echo "$i" >> neighbour.log; sleep 0.002; done ) \
	    >/dev/null 2>&1 3>&- &
	echo $! >> "$BATS_TEST_TMPDIR/pids"
	# wake-ups, as the kernel counts them: about one a second (the
	# safety look), not one per write of the log
	sleep 0.5
	running "$w"
	a=$(switches "$w") la=$(wc -l <neighbour.log)
	sleep 2
	b=$(switches "$w") lb=$(wc -l <neighbour.log)
	[ $((lb - la)) -ge 60 ] || fail "the log was written only $((lb - la)) times in 2s"
	[ $((b - a)) -lt 20 ] || fail "waiter woke $((b - a)) times in 2s"
	# a send amid those writes wakes it at once, not at its next look
	# (this waiter, then a new one for each further run)
	send_amid() {
		local sent at
		if [ -z "$w" ]; then
			mq-topic group t g >/dev/null
			bg w.out mq-recv -g g -w 60s t
			w=$BG
			sleep 0.5
		fi
		after_look "$w"
		mq-send -q t hello
		finish "$w" 15
		w=
		assert_equal "$ST" 0
		[[ $(cat w.out) == *$'\thello' ]] || fail "got: $(cat w.out)"
		sent=$(sql 'SELECT ts FROM msg WHERE off = 1')
		at=$(delivered 1)
		LATE=$((at - sent))
		# the log was still being written then
		[ "$(wc -l <neighbour.log)" -gt "$lb" ]
	}
	promptly "delivered after the send" send_amid
}

@test "followers of other topics stay asleep while a topic is written" {
	# a commit wakes the followers of its topic only: 100 followers of
	# quiet topics sleep through 400 commits to another one, waking only
	# for their once-a-second safety look
	local i p pids=() before=() n=0 total=0 start secs
	for i in $(seq 100); do
		bg "f$i.out" mq-recv -g g -f "q$i"
		pids+=("$BG")
	done
	# all registered, so all asleep in their wait
	wait_for 120 sql_is "SELECT count(*) FROM consumer" 100
	sleep 1
	for p in "${pids[@]}"; do
		running "$p"
		before+=("$(switches "$p")")
	done
	start=$(date +%s)
	for i in $(seq 400); do
		echo "m$i"
		sleep 0.005
	done | mq-send -q hot
	secs=$(($(date +%s) - start + 1))
	for i in "${!pids[@]}"; do
		running "${pids[$i]}"
		n=$(($(switches "${pids[$i]}") - before[i]))
		total=$((total + n))
	done
	echo "# 100 followers woke $total times in all during ${secs}s of sends" >&3
	# one safety look a second each, and a little slack; waking on every
	# commit would be 400 each
	[ "$total" -le $((100 * (secs + 3))) ] ||
	    fail "followers woke $total times during ${secs}s of 400 commits"
	# not vacuous: the writes happened one commit each, and the followers
	# still answer their own topic at once
	assert_equal "$(sql "SELECT count(*) FROM msg m JOIN topic t ON t.id = m.topic WHERE t.name = 'hot'")" 400
	mq-send -q q7 wake
	wait_for 30 grep -qx $'.*\twake' f7.out
}

@test "a message that a program that is not mq commits reaches a follower, also while mq writes to other topics" {
	sqlite_only "SQLite's data_version: PostgreSQL's followers look every 5 seconds"
	mq-topic create t >/dev/null
	mq-topic create busy >/dev/null
	bg out mq-recv -f -g g --format '%b\n' t
	has_group() {
		[ "$(sql "SELECT count(*) FROM grp WHERE name = 'g'")" = 1 ]
	}
	wait_for 5 has_group
	sleep 1.5	# its looks of every second have begun
	by_hand() {	# a message appended by hand, as sqlite3 would
		sql "INSERT INTO msg (topic, off, ts, due, body) SELECT id,
		    next_off, strftime('%s', 'now') * 1000,
		    strftime('%s', 'now') * 1000, '$1' FROM topic
		    WHERE name = 't';
		    UPDATE topic SET next_off = next_off + 1, msgs = msgs + 1
		    WHERE name = 't'"
	}
	sleep 5		# nothing looked at for five seconds
	by_hand quiet
	wait_for 3 grep -qx quiet out || fail "not seen in 3s: $(cat out)"
	bg busy.out sh -c 'while :; do mq-send -q busy x || exit; sleep 0.05; done'
	sleep 1.5
	by_hand busy
	# within five seconds of its last look (mq-recv(1))
	wait_for 8 grep -qx busy out || fail "not seen in 8s: $(cat out)"
}
