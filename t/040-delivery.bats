#!/usr/bin/env bats
# 040-delivery.bats: the at-least-once machinery: leases and their expiry,
# receipts and stale receipts, retry with backoff, dead letters, and
# mq-recv's exec mode (settling by exit status, lease extension, parallel
# handlers, signals, reclaiming the leases of a consumer that was killed).
#
# Every wait is a bounded poll or a bounded sleep whose length is the thing
# being tested; bounds are generous for a slow, shared machine.

load test_helper

# Background processes this test started: killed in teardown if still
# there.  Handlers record their process group in pgids (field 5 of
# /proc/$$/stat: handlers of one mq-recv share a group).
teardown() {
	kill_bg
}

# try_recv [OPTIONS]: one plain receive in group g of topic t; on success
# the line "ATTEMPT RECEIPT BODY" is in GOT.
try_recv() {
	GOT=$(mq-recv -g g --format '%a %r %b\n' "$@" t) && [ -n "$GOT" ]
}

rows() {
	sql 'SELECT count(*) FROM delivery'
}

# dead PID: nothing runs as PID (gone, or a zombie nobody reaped: a
# container's first process may not reap orphans).
dead() {
	local st
	st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) || return 0
	[ "$st" = Z ] || [ "$st" = X ]
}

# running PID: PID runs (not a zombie).
running() {
	dead "$1" && fail "pid $1 is not running"
	return 0
}

# hold_handler: writes ./hold, a handler that records its process group
# in pgids, touches started and runs until the test creates go (at most
# 60s: then it exits 1), then appends "finished" to out and exits 0.
hold_handler() {
	cat >hold <<-'EOF'
		#!/bin/sh
		cut -d' ' -f5 /proc/$$/stat >>pgids
		touch started
		i=0
		until [ -e go ]; do
			i=$((i + 1))
			[ "$i" -le 600 ] || exit 1
			sleep 0.1
		done
		echo finished >>out
	EOF
	chmod +x hold
}

# past MS: the time (now_ms) is MS or later.
past() {
	[ "$(now_ms)" -ge "$1" ]
}

delivered() {
	sql "SELECT count(*) FROM events WHERE event = 'delivered'"
}

@test "an expired lease redelivers with attempt+1 and a new receipt; the old one is stale" {
	mq-topic group t g >/dev/null
	mq-send -q t hello
	run -0 mq-recv -g g --lease 1s --format '%a %r %b' t
	read -r a1 r1 b1 <<<"$output"
	assert_equal "$a1" 1
	assert_equal "$b1" hello
	[[ $r1 == t:g:1:1:* ]] || fail "receipt of attempt 1: $r1"
	# after the lease runs out it comes back
	wait_for 30 try_recv
	read -r a2 r2 b2 <<<"$GOT"
	assert_equal "$a2" 2
	assert_equal "$b2" hello
	[ "$r2" != "$r1" ] || fail "the same receipt again: $r2"
	[[ $r2 == t:g:1:2:* ]] || fail "receipt of attempt 2: $r2"
	assert_equal "$(sql "SELECT count(*) FROM events WHERE event = 'expired'")" 1

	# the receipt of attempt 1 is stale: reported, nothing changes
	before=$(sql 'SELECT * FROM delivery')
	for how in "" --fail --dead "--extend 1h"; do
		read -ra opts <<<"$how"
		run --separate-stderr -1 mq-ack "${opts[@]}" "$r1"
		stderr_has stale "$r1"
		assert_equal "$(sql 'SELECT * FROM delivery')" "$before"
	done
	assert_equal "$(sql 'SELECT state, attempt FROM delivery')" "1|2"

	# the current one settles; settling it again is stale
	run -0 mq-ack "$r2"
	assert_equal "$(rows)" 0
	run --separate-stderr -1 mq-ack "$r2"
	stderr_has "$r2"
	run -1 mq-recv -g g t
}

@test "receipts piped from mq-recv into mq-ack settle" {
	mq-send -q t a b c
	run -0 bash -c 'set -o pipefail; mq-recv -g g -n 0 t | mq-ack'
	assert_output ''
	[ "$(rows)" = 0 ]
	[ "$(sql 'SELECT settled FROM grp')" = 3 ]
	run -1 mq-recv -g g t
}

@test "mq-ack --extend keeps a plain lease past its time" {
	mq-send -q t m
	run -0 mq-recv -g g --lease 1s --format '%r' t
	r=$output
	t0=$(now_ms)
	run -0 mq-ack --extend 60s "$r"
	due=$(sql 'SELECT due FROM delivery')
	[ "$due" -ge $((t0 + 60000)) ] || fail "due $due: before $t0 + 60s"
	[ "$due" -le $(($(now_ms) + 60000)) ] || fail "due $due: too late"
	# past the original lease (taken before t0), well within the new one
	wait_for 30 past $((t0 + 1500))
	run -1 mq-recv -g g t
	run -0 mq-ack "$r"
	[ "$(rows)" = 0 ]
}

@test "mq-ack --dead dead-letters at once, with the reason" {
	mq-send -q t m
	r=$(mq-recv -g g --format '%r' t)
	run -0 mq-ack --dead --reason 'cannot parse' "$r"
	[ "$(sql 'SELECT state, reason FROM delivery')" = "2|cannot parse" ]
	run -1 mq-recv -g g t
	run -1 mq-ack "$r"
}

@test "mq-ack --fail --delay 3s: not redelivered before 3s, redelivered after" {
	mq-topic group t g >/dev/null
	mq-send -q t m
	r=$(mq-recv -g g --format '%r' t)
	t0=$(now_ms)
	run -0 mq-ack --fail --delay 3s "$r"
	assert_equal "$(sql 'SELECT state, attempt FROM delivery')" "0|1"
	due=$(sql 'SELECT due FROM delivery')
	[ "$due" -ge $((t0 + 3000)) ] || fail "due $due: before $t0 + 3s"
	[ "$due" -le $(($(now_ms) + 3000)) ] || fail "due $due: too late"
	# a look a second into the delay finds nothing; it must end before the
	# delay does to show that (2s to spare)
	sleep 1
	run mq-recv -g g t
	in_time $((t0 + 3000)) "the delay"
	assert_equal "$status" 1
	wait_for 30 try_recv
	[ $(($(now_ms) - t0)) -ge 3000 ] || fail "redelivered before the delay"
	read -r a r2 b <<<"$GOT"
	assert_equal "$a" 2
	assert_equal "$b" m
	run -0 mq-ack --fail --delay 0 "$r2"
	# --delay 0: due at once
	run -0 mq-recv -g g --format '%a' t
	assert_output 3
}

@test "--fail without --delay follows the group's backoff, the last step repeating" {
	mq-topic group t g --backoff '2s 3s' >/dev/null
	mq-send -q t m
	for attempt in 1 2 3; do
		wait_for 30 try_recv
		read -r a r _ <<<"$GOT"
		assert_equal "$a" "$attempt"
		t0=$(now_ms)
		run -0 mq-ack --fail "$r"
		t1=$(now_ms)
		due=$(sql 'SELECT due FROM delivery')
		step=$((attempt == 1 ? 2000 : 3000))
		[ "$due" -ge $((t0 + step)) ] || fail "attempt $attempt: due $due before $t0 + ${step}ms"
		[ "$due" -le $((t1 + step)) ] || fail "attempt $attempt: due $due after $t1 + ${step}ms"
		# not before then (2s or more to spare)
		run mq-recv -g g t
		in_time "$due" "attempt $attempt's backoff"
		assert_equal "$status" 1
	done
	assert_equal "$(delivered)" 3
}

@test "the default backoff starts at 10s" {
	mq-send -q t m
	r=$(mq-recv -g g --format '%r' t)
	t0=$(now_ms)
	run -0 mq-ack --fail "$r"
	due=$(sql 'SELECT due FROM delivery')
	[ "$due" -ge $((t0 + 10000)) ] || fail "due $due: before $t0 + 10s"
	[ "$due" -le $(($(now_ms) + 10000)) ] || fail "due $due: too late"
}

@test "after --max-attempts failures a message is a dead letter and is not delivered again" {
	mq-topic group t g --max-attempts 3 >/dev/null
	mq-send -q t m
	for attempt in 1 2 3; do
		run -0 mq-recv -g g --format '%a %r' t
		read -r a r <<<"$output"
		assert_equal "$a" "$attempt"
		run --separate-stderr -0 mq-ack --fail --delay 0 "$r"
		if [ "$attempt" -lt 3 ]; then
			assert_equal "$(sql 'SELECT state, attempt FROM delivery')" "0|$attempt"
		fi
	done
	# the last failure says so
	stderr_has "$r" dead
	assert_equal "$(sql 'SELECT state, attempt FROM delivery')" "2|3"
	reason=$(sql 'SELECT reason FROM delivery')
	[[ $reason == *attempts* ]] || fail "reason: $reason"
	run -1 mq-recv -g g t
	run -1 mq-recv -g g -n 0 t
	[ "$(delivered)" = 3 ]
	[ "$(sql "SELECT count(*) FROM events WHERE event = 'dead'")" = 1 ]
	run -1 mq-ack "$r"
}

@test "a lease that runs out at the last attempt makes a dead letter: lease expired N times" {
	mq-topic group t g --max-attempts 2 --lease 1s >/dev/null
	mq-send -q t m
	run -0 mq-recv -g g --format '%a' t
	assert_output 1
	wait_for 30 try_recv
	assert_equal "${GOT%% *}" 2
	# keep looking until the second lease has run out and the claim that
	# saw it made it a dead letter; none of the looks may get it (each
	# exits 1, saying nothing)
	looked() {
		local st=0
		mq-recv -g g --format '%a\n' t >>got 2>&1 || st=$?
		[ "$st" = 1 ] || echo "mq-recv exited $st" >>got
		[ "$(sql 'SELECT state FROM delivery')" = 2 ]
	}
	wait_for 30 looked
	[ ! -s got ] || fail "a look got: $(cat got)"
	[ "$(sql 'SELECT reason FROM delivery')" = "lease expired 2 times" ]
	[ "$(delivered)" = 2 ]
	run -1 mq-recv -g g t
	run -1 mq-recv -g g -- true
}

@test "mq-recv -n 0 with a command handles every available message even when an expired lease goes dead on the way" {
	# An expired lease that the claim turns into a dead letter takes no
	# claim slot (common/sqlite/deliver.c claim_due): with -j 1 the pass that
	# dead-letters message 1 goes on to message 2, due for a retry, so
	# `mq-recv -n 0 t -- cmd` handles it and exits 0.
	# SPEC: -n 0 = all available; exit 1 = got no message.
	mq-topic group t g --max-attempts 2 >/dev/null
	mq-send -q t a b
	run -0 mq-recv -g g --lease 1s --format '%a %b' t
	assert_output '1 a'
	run -0 mq-recv -g g --format '%r' t
	rb=$output
	wait_for 30 try_recv --lease 1s
	read -r a _ b <<<"$GOT"
	assert_equal "$a $b" "2 a"	# leased for 1s
	# b waits for a retry that falls due after a's last lease ends
	run -0 mq-ack --fail --delay 1500ms "$rb"
	both_due() {
		sql_is "SELECT count(*) FROM delivery WHERE due <= $(now_ms)" 2
	}
	wait_for 30 both_due
	run -0 mq-recv -g g -n 0 t -- sh -c 'cat >>handled; echo >>handled'
	assert_equal "$(sql 'SELECT off, state FROM delivery')" "1|2"
	assert_equal "$(cat handled)" b
}

@test "exec mode: exit 0 acks" {
	mq-send -q t m
	run -0 mq-recv -g g t -- sh -c 'exit 0'
	[ "$(rows)" = 0 ]
	[ "$(sql 'SELECT settled FROM grp')" = 1 ]
	[ "$(sql "SELECT event FROM events ORDER BY ts, k, n")" = "$(printf 'delivered\nacked')" ]
	run -1 mq-recv -g g t
}

@test "exec mode: exit 65 dead-letters" {
	mq-send -q t m
	run -0 mq-recv -g g t -- sh -c 'exit 65'
	[ "$(sql 'SELECT state, attempt FROM delivery')" = "2|1" ]
	[[ $(sql 'SELECT reason FROM delivery') == *65* ]]
	run -1 mq-recv -g g t
}

@test "exec mode: another exit status fails the delivery for retry" {
	mq-send -q t m
	t0=$(now_ms)
	run -0 mq-recv -g g t -- sh -c 'exit 3'
	[ "$(sql 'SELECT state, attempt FROM delivery')" = "0|1" ]
	[ "$(sql 'SELECT due FROM delivery')" -ge $((t0 + 10000)) ]
	[[ $(sql 'SELECT reason FROM delivery') == *3* ]]
	run -1 mq-recv -g g t
}

@test "exec mode: a handler killed by a signal fails the delivery for retry" {
	mq-send -q t m
	t0=$(now_ms)
	run -0 mq-recv -g g t -- sh -c 'kill -9 $$'
	[ "$(sql 'SELECT state, attempt FROM delivery')" = "0|1" ]
	[ "$(sql 'SELECT due FROM delivery')" -gt "$t0" ]
	[[ $(sql 'SELECT reason FROM delivery') == *signal* ]]
}

@test "exec mode: a command that cannot be run stops mq-recv (66); the message comes back at once" {
	mq-send -q t m1 m2
	run --separate-stderr -66 mq-recv -g g -n 0 -j 2 t -- ./no-such-command
	stderr_has "cannot run ./no-such-command"
	# nothing lost, nothing dead: deliverable again now
	[ "$(sql 'SELECT count(*) FROM delivery WHERE state = 0 AND due <= '"$(now_ms)")" = 2 ]
	run -0 mq-recv -g g -n 0 --format '%o %a\n' t
	assert_output "$(printf '1 2\n2 2')"
	[ "$(sql 'SELECT count(*) FROM consumer')" = 0 ]
	# the same from a follower: it stops instead of failing every message
	mq-send -q t m3
	run --separate-stderr -66 mq-recv -g g -f t -- ./no-such-command
	stderr_has "cannot run ./no-such-command"
	run -0 mq-recv -g g --format '%o %a' t
	assert_output '3 2'
}

@test "exec mode: the handler gets the body on stdin, MQ_* in its environment; its stdout passes" {
	mq-topic group t g --backoff 100ms >/dev/null
	body=$(printf 'first line\n\tsecond line\\n')
	mq-send -q -k KEY t "$body"
	# shellcheck disable=SC2016 # for the handler's shell to expand
	run -0 mq-recv -g g t -- sh -c 'cat >body; env >env; echo "handled $MQ_OFFSET"'
	assert_output 'handled 1'
	printf '%s' "$body" >expected
	cmp body expected
	getenv() { sed -n "s/^$1=//p" env; }
	[ "$(getenv MQ_TOPIC)" = t ]
	[ "$(getenv MQ_GROUP)" = g ]
	[ "$(getenv MQ_OFFSET)" = 1 ]
	[ "$(getenv MQ_ATTEMPT)" = 1 ]
	[ "$(getenv MQ_KEY)" = KEY ]
	[[ $(getenv MQ_RECEIPT) =~ ^t:g:1:1:[0-9a-f]{8}$ ]]
	ts=$(sql "SELECT ts FROM msg")
	want=$(date -u -d "@$((ts / 1000))" +%Y-%m-%dT%H:%M:%S).$(printf %03d $((ts % 1000)))Z
	[ "$(getenv MQ_TIME)" = "$want" ]
	# the receipt it saw was the live one: settling it now is stale
	run -1 mq-ack "$(getenv MQ_RECEIPT)"
	# a second attempt says so
	mq-send -q t again
	# shellcheck disable=SC2016 # for the handler's shell to expand
	run -0 mq-recv -g g t -- sh -c 'echo "$MQ_OFFSET $MQ_ATTEMPT"; exit 1'
	assert_output '2 1'
	again() {
		# shellcheck disable=SC2016 # for the handler's shell to expand
		mq-recv -g g t -- sh -c 'echo "$MQ_OFFSET $MQ_ATTEMPT [$MQ_KEY]" >>seen'
	}
	wait_for 30 again
	[ "$(cat seen)" = '2 2 []' ]
}

@test "exec mode: -n 3 stops after three messages" {
	mq-send -q t 1 2 3 4 5
	run -0 mq-recv -g g -n 3 t -- sh -c 'cat >>seen; echo >>seen'
	[ "$(cat seen)" = "$(seq 3)" ]
	[ "$(rows)" = 0 ]
	[ "$(sql 'SELECT pos FROM grp')" = 4 ]
}

@test "exec mode: -n 0 handles all that is available and exits 0; nothing available exits 1" {
	mq-send -q t 1 2 3 4 5
	run -0 mq-recv -g g -n 0 t -- sh -c 'cat >>seen; echo >>seen'
	[ "$(cat seen)" = "$(seq 5)" ]
	[ "$(rows)" = 0 ]
	run -1 mq-recv -g g -n 0 t -- sh -c 'cat >>seen; echo >>seen'
	run -1 mq-recv -g g t -- sh -c 'cat >>seen; echo >>seen'
	[ "$(wc -l <seen)" = 5 ]
}

@test "exec mode: -f keeps following after the first message until told to stop" {
	mq-send -q t 1 2 3
	bg recv.out mq-recv -g g -f t -- sh -c 'cat >>seen; echo >>seen'
	pid=$BG
	lines() { [ "$({ wc -l <seen; } 2>/dev/null)" = "$1" ]; }
	wait_for 30 lines 3
	mq-send -q t 4
	wait_for 30 lines 4
	[ "$(cat seen)" = "$(seq 4)" ]
	kill -0 "$pid"
	kill -TERM "$pid"
	finish "$pid" 30
	[ "$ST" = 0 ]
	[ "$(rows)" = 0 ]
}

@test "exec mode: -j 4 runs four handlers at once, not five" {
	# Each handler logs its start and waits until four handlers have
	# started before it logs its end and exits 0: with fewer than four at
	# once that never happens, and the handlers give up (exit 1, a failed
	# delivery) after 60s.  The fifth may only start after one has ended.
	mq-send -q t 1 2 3 4 5
	cat >handler <<-'EOF'
		#!/bin/sh
		echo "start $MQ_OFFSET" >>log
		i=0
		until [ "$(grep -c start log)" -ge 4 ]; do
			i=$((i + 1))
			[ "$i" -le 600 ] || exit 1
			sleep 0.1
		done
		echo "end $MQ_OFFSET" >>log
	EOF
	chmod +x handler
	run -0 mq-recv -g g -n 0 -j 4 t -- ./handler
	assert_equal "$(rows)" 0
	assert_equal "$(sql 'SELECT settled FROM grp')" 5
	# the most running at once, by the log (appends, in order)
	# shellcheck disable=SC2016 # awk's fields
	run -0 awk '$1 == "start" { n++; if (n > max) max = n }
	    $1 == "end" { n-- } END { print max, NR }' log
	assert_output '4 10'
}

@test "exec mode: the lease is extended while the handler runs" {
	mq-topic group t g --lease 6s >/dev/null
	mq-send -q t m
	hold_handler
	bg recv.out mq-recv -g g t -- ./hold
	pid=$BG
	wait_for 30 test -e started
	# the lease (6s; mq-recv renews it every 2s, so a renewal may be 4s
	# late on a stalled machine) was taken before the handler started:
	# look when it would have run out, and again when one renewal would
	# have (8s)
	sleep 7
	run -1 mq-recv -g g t
	sleep 3
	run -1 mq-recv -g g t
	assert_equal "$(sql 'SELECT state, attempt FROM delivery')" "1|1"
	kill -0 "$pid" || fail "mq-recv ended before its handler was let go"
	touch go
	finish "$pid" 30
	assert_equal "$ST" 0
	assert_equal "$(rows)" 0
	assert_equal "$(sql 'SELECT settled FROM grp')" 1
	assert_equal "$(sql "SELECT count(*) FROM events WHERE event = 'expired'")" 0
	assert_equal "$(delivered)" 1
}

@test "exec mode: SIGTERM lets the running handler finish and settle, exit 0" {
	mq-topic group t g --lease 60s >/dev/null
	mq-send -q t m1 m2
	hold_handler
	bg recv.out mq-recv -g g -f t -- ./hold
	pid=$BG
	wait_for 30 test -e started
	kill -TERM "$pid"
	# it waits for the handler
	sleep 1
	kill -0 "$pid" || fail "mq-recv exited before its handler finished"
	[ ! -e out ] || fail "the handler finished before it was let go"
	touch go
	finish "$pid" 30
	assert_equal "$ST" 0
	assert_equal "$(cat out)" finished
	# m1 acked; m2 never taken (it stopped receiving)
	[ "$(rows)" = 0 ]
	[ "$(sql 'SELECT settled, pos FROM grp')" = "1|2" ]
	[ "$(sql 'SELECT count(*) FROM consumer')" = 0 ]
}

@test "exec mode: a second signal stops the handler, releases its message and exits 130" {
	mq-topic group t g --lease 60s >/dev/null
	mq-send -q t m
	hold_handler	# it would run for 60s
	bg recv.out mq-recv -g g t -- ./hold
	pid=$BG
	wait_for 30 test -e started
	hpgid=$(cat pgids)
	# two different signals, so the second cannot merge with the first
	kill -TERM "$pid"
	kill -INT "$pid"
	finish "$pid" 30
	assert_equal "$ST" 130
	# the handler was told to stop
	wait_for 30 gone "-$hpgid"
	[ ! -e out ] || fail "the handler finished"
	# and the message is deliverable again at once, well before the lease
	[ "$(sql 'SELECT state, attempt FROM delivery')" = "0|1" ]
	run -0 mq-recv -g g --format '%a %b' t
	assert_output '2 m'
	[ "$(sql 'SELECT count(*) FROM consumer')" = 0 ]
}

@test "exec mode: the lease of a consumer killed with SIGKILL is reclaimed at once" {
	mq-topic group t g --lease 60s >/dev/null
	mq-send -q t m
	# shellcheck disable=SC2016 # $$ is the handler shell's
	bg recv.out mq-recv -g g t -- sh -c \
	    'cut -d" " -f5 /proc/$$/stat >>pgids; echo $$ >hpid; touch started; sleep 100'
	pid=$BG
	wait_for 30 test -e started
	assert_equal "$(sql 'SELECT state, attempt FROM delivery')" "1|1"
	kill -9 "$pid"
	finish "$pid" 30
	assert_equal "$ST" 137
	# SPEC: its running handlers die with it (PR_SET_PDEATHSIG)
	wait_for 30 dead "$(cat hpid)"
	# at once: the very next look gets it, without waiting at all
	# (leased for 60s)
	run -0 mq-recv -g g --format '%a %b' t
	assert_output '2 m'
	assert_equal "$(sql "SELECT count(*) FROM events WHERE event = 'released'")" 1
	assert_equal "$(sql 'SELECT count(*) FROM consumer')" 0
}

@test "a consumer that joins after a follower of its group began and is then killed: that follower releases its lease" {
	# The follower reaps once a second from the list of its group's
	# consumers it last read; on SQLite it reads the list again when a
	# consumer joined since (the -mq file counts joins, byte 20), not
	# only every five seconds.
	mq-topic group t g --lease 60s >/dev/null
	mq-send -q t m1
	# A: a follower whose one handler slot stays busy with m1
	# shellcheck disable=SC2016 # $$ is the handler shell's
	bg a.out mq-recv -f -g g t -- sh -c \
	    'cut -d" " -f5 /proc/$$/stat >>pgids; touch a.started; sleep 100'
	a=$BG
	wait_for 30 test -e a.started
	sleep 1.5	# its reaps of every second have begun
	[ -n "$PG" ] || joins=$(od -An -tu4 -j20 -N4 "$MQ_DB-mq" | tr -d ' ')
	mq-send -q t m2
	# B: joins after A's list was read, takes m2 and is killed
	# shellcheck disable=SC2016 # $$ is the handler shell's
	bg b.out mq-recv -g g t -- sh -c \
	    'cut -d" " -f5 /proc/$$/stat >>pgids; echo $$ >bh; touch b.started; sleep 100'
	b=$BG
	wait_for 30 test -e b.started
	[ -n "$PG" ] || assert_equal "$(od -An -tu4 -j20 -N4 "$MQ_DB-mq" | tr -d ' ')" $((joins + 1))
	assert_equal "$(sql "SELECT count(*) FROM delivery WHERE state = 1")" 2
	kill -9 "$b"
	finish "$b" 30
	wait_for 30 dead "$(cat bh)"
	# nobody else runs: A released it (leased for 60s), and took
	# nothing, its slot being busy
	released() {
		[ "$(sql "SELECT count(*) FROM events WHERE event = 'released'")" = 1 ]
	}
	wait_for 30 released || fail "B's lease was not released"
	assert_equal "$(sql "SELECT count(*) FROM delivery WHERE state = 1")" 1
	running "$a"
}

@test "an idle follower leaves alone what the handler of a consumer that left cleanly started" {
	# The follower checks whether the consumers it last read still run;
	# one that left (its row gone) is not reaped, and its handler group,
	# whose id may be another's by now, is not killed.
	mq-topic group t g --lease 60s >/dev/null
	mq-send -q t m
	# B takes m; its handler waits for go, then leaves a sleep behind
	# shellcheck disable=SC2016 # $$ is the handler shell's
	bg b.out mq-recv -g g t -- sh -c \
	    'cut -d" " -f5 /proc/$$/stat >>pgids; touch b.started
	    while [ ! -e go ]; do sleep 0.1; done
	    sleep 300 >/dev/null 2>&1 & echo $! >spid'
	b=$BG
	wait_for 30 test -e b.started
	# A reads the consumers while B is one of them
	bg a.out mq-recv -f -g g t
	a=$BG
	wait_for 30 sql_is "SELECT count(*) FROM consumer" 2
	after_look "$a"
	touch go
	finish "$b" 30
	assert_equal "$ST" 0
	assert_equal "$(sql 'SELECT count(*) FROM consumer')" 1
	# two of A's looks of every second after B left
	after_look "$a"
	after_look "$a"
	running "$(cat spid)"
	running "$a"
}

@test "exec mode: what a killed consumer's handler started is ended before its message goes again" {
	# the handler's own child outlives the handler (PR_SET_PDEATHSIG
	# ends only the handler); it is in the handler group, which the
	# next consumer on the host kills before it releases the lease
	mq-topic group t g --lease 60s >/dev/null
	mq-send -q t m
	# shellcheck disable=SC2016 # $$ and $! are the handler shell's
	bg recv.out mq-recv -g g t -- sh -c \
	    'cut -d" " -f5 /proc/$$/stat >>pgids; sleep 300 & echo $! >spid; wait'
	pid=$BG
	wait_for 30 test -s spid
	spid=$(cat spid)
	running "$spid"
	kill -9 "$pid"
	finish "$pid" 30
	assert_equal "$ST" 137
	# the handler's child runs on, until a consumer of the group looks
	running "$spid"
	run -0 mq-recv -g g --format '%a %b' t
	assert_output '2 m'
	# and by then the first handler's child is no more
	dead "$spid" || fail "pid $spid of the first handler still runs"
	assert_equal "$(sql 'SELECT count(*) FROM consumer')" 0
}

@test "reaping a dead consumer does not release a live consumer that took its id meanwhile" {
	sqlite_only "plays the other reaper with sqlite3 holding the write lock; on PostgreSQL a consumer's advisory lock decides (t/100-pg.bats)"
	# sq_reap() (common/sqlite/deliver.c) finds dead consumers in a read, then reads the
	# consumer rows again under the write lock before it releases
	# anything.  Consumer ids are reused (INTEGER PRIMARY KEY without
	# AUTOINCREMENT): while it waited for the lock, the dead consumer may
	# have been reaped by another process and a new consumer joined with
	# the same id.  The live newcomer keeps its leases (its message is
	# not delivered again while its handler runs) and its row (should it
	# die later, its leases are still reclaimed at once).
	# SPEC: until a delivery is settled, no other member gets it.
	# The other reaper and the newcomer are played by sqlite3 here,
	# holding the write lock; the newcomer's process is a sleep.
	mq-topic group t g --lease 60s >/dev/null
	mq-send -q t m1 m2
	# consumer A takes m1 and is killed
	# shellcheck disable=SC2016 # $$ is the handler shell's
	bg a.out mq-recv -g g t -- sh -c \
	    'cut -d" " -f5 /proc/$$/stat >>pgids; touch started; sleep 100'
	wait_for 30 test -e started
	aid=$(sql 'SELECT id FROM consumer')
	kill -9 "$BG"
	finish "$BG" 30
	kill -9 -- "-$(cat pgids)"
	# the process of consumer C
	sleep 100 3>&- &
	cpid=$!
	echo "$cpid" >>pids
	cstart=$(awk '{ sub(/.*\) /, ""); print $20 }' "/proc/$cpid/stat")
	# another process holds the write lock
	mkfifo lock
	sqlite3 "$MQ_DB" <lock >lock.out 2>&1 3>&- &
	echo "$!" >>pids
	exec 4>lock
	echo "BEGIN IMMEDIATE; SELECT 'locked';" >&4
	wait_for 30 grep -q locked lock.out
	# B looks for dead consumers: it sees A dead and waits for the lock
	bg b.out mq-recv -g g --format '%o %a\n' t
	bpid=$BG
	in_busy_wait() { grep -q nanosleep "/proc/$bpid/wchan"; }
	wait_for 30 in_busy_wait
	# meanwhile: A is reaped, C joins with A's id and takes m1
	now=$(now_ms)
	cat >&4 <<-SQL
		UPDATE delivery SET state = 0, due = $now, consumer = NULL
		    WHERE consumer = $aid;
		DELETE FROM consumer WHERE id = $aid;
		INSERT INTO consumer (id, grp, host, boot, pid, start, since, seen)
		    VALUES ($aid, (SELECT id FROM grp), '$(hostname)',
		    '$(cat /proc/sys/kernel/random/boot_id)', $cpid, $cstart,
		    $now, $now);
		UPDATE delivery SET state = 1, attempt = 2, due = $now + 60000,
		    consumer = $aid, token = 1 WHERE off = 1;
		COMMIT;
	SQL
	exec 4>&-
	finish "$bpid" 30
	[ "$ST" = 0 ]
	# C is alive: its row and its lease stay; B gets m2
	[ "$(sql 'SELECT pid FROM consumer')" = "$cpid" ]
	[ "$(sql 'SELECT state, attempt, consumer FROM delivery WHERE off = 1')" = "1|2|$aid" ]
	[ "$(cat b.out)" = "2 1" ]
}

@test "exec mode: a running consumer has its row (host, pid); it goes when the consumer exits" {
	mq-send -q t m
	bg recv.out mq-recv -g g -f t -- sh -c 'exit 0'
	pid=$BG
	wait_for 30 sql_is 'SELECT count(*) FROM consumer' 1
	[ "$(sql 'SELECT host, pid FROM consumer')" = "$(hostname)|$pid" ]
	[ "$(sql 'SELECT g.name FROM consumer c JOIN grp g ON g.id = c.grp')" = g ]
	wait_for 30 sql_is 'SELECT count(*) FROM delivery' 0
	kill -TERM "$pid"
	finish "$pid" 30
	[ "$ST" = 0 ]
	[ "$(sql 'SELECT count(*) FROM consumer')" = 0 ]
	# the same after a bounded run
	mq-send -q t m2
	run -0 mq-recv -g g t -- true
	[ "$(sql 'SELECT count(*) FROM consumer')" = 0 ]
}

@test "exec mode without -f waits for the handlers it started, with free slots left" {
	mq-topic group t g --lease 60s >/dev/null
	mq-send -q t m1 m2
	# two messages, three slots: the claim comes back short
	# shellcheck disable=SC2016 # $MQ_OFFSET is the handler's
	run -0 mq-recv -n 5 -j 3 -g g t -- sh -c 'sleep 0.3; echo "handled $MQ_OFFSET"'
	assert_equal "$(printf '%s\n' "${lines[@]}" | sort)" "$(printf 'handled 1\nhandled 2')"
	# both acked: nothing left, nothing released
	run -0 mq-lag --json t g
	jtrue '.lag == 0 and .retrying == 0' <<<"$output"
	assert_equal "$(sql "SELECT count(*) FROM events WHERE event = 'released'")" 0
}

@test "a claim that meets a dead letter and a due message hands each message out once" {
	# the lease of one runs out at its last attempt while two is due:
	# one goes dead, two is delivered, once (review of the PostgreSQL
	# claim: its due rows were taken again after a dead one)
	mq-topic group t g --max-attempts 1 >/dev/null
	mq-send -q t one
	mq-send -q --delay 1s t two
	run -0 mq-recv -g g -n 2 --lease 1s --format '%o %a %b\n' t
	assert_output '1 1 one'
	sleep 2
	run -0 mq-recv -g g -n 5 --format '%o %a %b\n' t
	assert_output '2 1 two'
	assert_equal "$(sql "SELECT count(*) FROM delivery WHERE state = 2")" 1
}

@test "a claim that meets due retries and new messages at once hands out no more than it asks for" {
	# a follower's claim on PostgreSQL reads new messages ahead, for all
	# it asks, before its due rows took their share: -n 10 printed the
	# three retries and ten new messages (and a claim of 256 with due
	# rows wrote past the end of its array)
	mq-send -q t a b c
	bg out mq-recv -g g -f -n 10 --format '%r %b\n' t
	has() { [ "$(wc -l <out)" -ge "$1" ]; }
	wait_for 30 has 3 || fail "the first three never came: $(cat out)"
	run -0 mq-topic group t g --pause forever
	cut -d' ' -f1 out | mq-ack --fail --delay 0
	seq 10 | mq-send -q t
	run -0 mq-topic group t g --resume
	finish "$BG" 30
	[ "$ST" = 0 ] || fail "exit $ST: $(cat out)"
	assert_equal "$(wc -l <out)" 10
	assert_equal "$(cut -d' ' -f2 out | tr '\n' ' ')" "a b c a b c 1 2 3 4 "
	run -0 mq-lag --json t g
	jtrue '.position == 8' <<<"$output"
}
