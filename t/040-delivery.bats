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
# there.  Handlers record their process group in pgids.
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

# sql_is QUERY VALUE: the query prints VALUE (for wait_for: the query runs
# on every try).
sql_is() {
	[ "$(sql "$1")" = "$2" ]
}

delivered() {
	sql "SELECT count(*) FROM history WHERE event = 'delivered'"
}

@test "an expired lease redelivers with attempt+1 and a new receipt; the old one is stale" {
	mq-topic group t g >/dev/null
	mq-send -q t hello
	run -0 mq-recv -g g --lease 1s --format '%a %r %b' t
	read -r a1 r1 b1 <<<"$output"
	[ "$a1" = 1 ] && [ "$b1" = hello ]
	# after the lease runs out it comes back
	wait_for 10 try_recv
	read -r a2 r2 b2 <<<"$GOT"
	[ "$a2" = 2 ] && [ "$b2" = hello ]
	[ "$r2" != "$r1" ]
	[[ $r2 == t:g:1:2:* ]]
	[ "$(sql "SELECT count(*) FROM history WHERE event = 'expired'")" = 1 ]

	# the receipt of attempt 1 is stale: reported, nothing changes
	before=$(sql 'SELECT * FROM delivery')
	for how in "" --fail --dead "--extend 1h"; do
		run --separate-stderr -1 mq-ack $how "$r1"
		[[ $stderr == *stale* && $stderr == *"$r1"* ]]
		[ "$(sql 'SELECT * FROM delivery')" = "$before" ]
	done
	[ "$(sql 'SELECT state, attempt FROM delivery')" = "1|2" ]

	# the current one settles; settling it again is stale
	run -0 mq-ack "$r2"
	[ "$(rows)" = 0 ]
	run --separate-stderr -1 mq-ack "$r2"
	[[ $stderr == *"$r2"* ]]
	run -1 mq-recv -g g t
}

@test "receipts piped from mq-recv into mq-ack settle" {
	mq-send -q t a b c
	run bash -c 'mq-recv -g g -n 0 t | mq-ack'
	assert_success
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
	run -0 mq-ack --extend 10s "$r"
	due=$(sql 'SELECT due FROM delivery')
	[ "$due" -ge $((t0 + 10000)) ] && [ "$due" -le $(($(now_ms) + 10000)) ]
	sleep 1.5	# past the original lease
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

@test "mq-ack --fail --delay 2s: not redelivered before 2s, redelivered after" {
	mq-topic group t g >/dev/null
	mq-send -q t m
	r=$(mq-recv -g g --format '%r' t)
	t0=$(now_ms)
	run -0 mq-ack --fail --delay 2s "$r"
	[ "$(sql 'SELECT state, attempt FROM delivery')" = "0|1" ]
	due=$(sql 'SELECT due FROM delivery')
	[ "$due" -ge $((t0 + 2000)) ] && [ "$due" -le $(($(now_ms) + 2000)) ]
	sleep 0.7
	run -1 mq-recv -g g t
	[ $(($(now_ms) - t0)) -lt 2000 ]	# that look was before the delay
	wait_for 10 try_recv
	[ $(($(now_ms) - t0)) -ge 2000 ]
	read -r a r2 b <<<"$GOT"
	[ "$a" = 2 ] && [ "$b" = m ]
	run -0 mq-ack --fail --delay 0 "$r2"
	# --delay 0: due at once
	run -0 mq-recv -g g --format '%a' t
	assert_output 3
}

@test "--fail without --delay follows the group's backoff, the last step repeating" {
	mq-topic group t g --backoff '1s 2s' >/dev/null
	mq-send -q t m
	for attempt in 1 2 3; do
		wait_for 10 try_recv
		read -r a r b <<<"$GOT"
		[ "$a" = "$attempt" ]
		t0=$(now_ms)
		run -0 mq-ack --fail "$r"
		t1=$(now_ms)
		due=$(sql 'SELECT due FROM delivery')
		step=$((attempt == 1 ? 1000 : 2000))
		[ "$due" -ge $((t0 + step)) ] && [ "$due" -le $((t1 + step)) ]
		run -1 mq-recv -g g t
	done
	[ "$(delivered)" = 3 ]
}

@test "the default backoff starts at 10s" {
	mq-send -q t m
	r=$(mq-recv -g g --format '%r' t)
	t0=$(now_ms)
	run -0 mq-ack --fail "$r"
	due=$(sql 'SELECT due FROM delivery')
	[ "$due" -ge $((t0 + 10000)) ] && [ "$due" -le $(($(now_ms) + 10000)) ]
}

@test "after --max-attempts failures a message is a dead letter and is not delivered again" {
	mq-topic group t g --max-attempts 3 >/dev/null
	mq-send -q t m
	for attempt in 1 2 3; do
		run -0 mq-recv -g g --format '%a %r' t
		read -r a r <<<"$output"
		[ "$a" = "$attempt" ]
		run --separate-stderr -0 mq-ack --fail --delay 0 "$r"
	done
	# the last failure says so
	[[ $stderr == *"$r"*dead* ]]
	[ "$(sql 'SELECT state, attempt FROM delivery')" = "2|3" ]
	reason=$(sql 'SELECT reason FROM delivery')
	[[ $reason == *attempts* ]]
	run -1 mq-recv -g g t
	run -1 mq-recv -g g -n 0 t
	[ "$(delivered)" = 3 ]
	[ "$(sql "SELECT count(*) FROM history WHERE event = 'dead'")" = 1 ]
	run -1 mq-ack "$r"
}

@test "a lease that runs out at the last attempt makes a dead letter: lease expired N times" {
	mq-topic group t g --max-attempts 2 --lease 1s >/dev/null
	mq-send -q t m
	run -0 mq-recv -g g --format '%a' t
	assert_output 1
	wait_for 10 try_recv
	[ "${GOT%% *}" = 2 ]
	# keep looking until the second lease has run out and the claim that
	# saw it made it a dead letter; none of the looks may get it
	looked() {
		mq-recv -g g --format '%a\n' t >>got 2>&1 || true
		[ "$(sql 'SELECT state FROM delivery')" = 2 ]
	}
	wait_for 10 looked
	[ ! -s got ]
	[ "$(sql 'SELECT reason FROM delivery')" = "lease expired 2 times" ]
	[ "$(delivered)" = 2 ]
	run -1 mq-recv -g g t
	run -1 mq-recv -g g -- true
}

@test "mq-recv -n 0 with a command handles every available message even when an expired lease goes dead on the way" {
	# An expired lease that the claim turns into a dead letter takes no
	# claim slot (deliver.c claim_due): with -j 1 the pass that
	# dead-letters message 1 goes on to message 2, due for a retry, so
	# `mq-recv -n 0 t -- cmd` handles it and exits 0.
	# SPEC: -n 0 = all available; exit 1 = got no message.
	mq-topic group t g --max-attempts 2 >/dev/null
	mq-send -q t a b
	run -0 mq-recv -g g --lease 1s --format '%a %b' t
	assert_output '1 a'
	run -0 mq-recv -g g --format '%r' t
	rb=$output
	wait_for 10 try_recv --lease 1s
	read -r a r b <<<"$GOT"
	[ "$a $b" = "2 a" ]	# leased for 1s
	# b waits for a retry that falls due after a's last lease ends
	run -0 mq-ack --fail --delay 1500ms "$rb"
	both_due() {
		sql_is "SELECT count(*) FROM delivery WHERE due <= $(now_ms)" 2
	}
	wait_for 10 both_due
	run -0 mq-recv -g g -n 0 t -- sh -c 'cat >>handled; echo >>handled'
	[ "$(sql 'SELECT off, state FROM delivery')" = "1|2" ]
	[ "$(cat handled)" = b ]
}

@test "exec mode: exit 0 acks" {
	mq-send -q t m
	run -0 mq-recv -g g t -- sh -c 'exit 0'
	[ "$(rows)" = 0 ]
	[ "$(sql 'SELECT settled FROM grp')" = 1 ]
	[ "$(sql "SELECT event FROM history ORDER BY rowid")" = "$(printf 'delivered\nacked')" ]
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
	[[ $stderr == *"cannot run ./no-such-command"* ]]
	# nothing lost, nothing dead: deliverable again now
	[ "$(sql 'SELECT count(*) FROM delivery WHERE state = 0 AND due <= '"$(now_ms)")" = 2 ]
	run -0 mq-recv -g g -n 0 --format '%o %a\n' t
	assert_output "$(printf '1 2\n2 2')"
	[ "$(sql 'SELECT count(*) FROM consumer')" = 0 ]
	# the same from a follower: it stops instead of failing every message
	mq-send -q t m3
	run --separate-stderr -66 mq-recv -g g -f t -- ./no-such-command
	run -0 mq-recv -g g --format '%o %a' t
	assert_output '3 2'
}

@test "exec mode: the handler gets the body on stdin, MQ_* in its environment; its stdout passes" {
	mq-topic group t g --backoff 100ms >/dev/null
	body=$(printf 'first line\n\tsecond line\\n')
	mq-send -q -k KEY t "$body"
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
	want=$(sql "SELECT strftime('%Y-%m-%dT%H:%M:%S', ts / 1000, 'unixepoch') ||
	    printf('.%03dZ', ts % 1000) FROM msg")
	[ "$(getenv MQ_TIME)" = "$want" ]
	# the receipt it saw was the live one: settling it now is stale
	run -1 mq-ack "$(getenv MQ_RECEIPT)"
	# a second attempt says so
	mq-send -q t again
	run -0 mq-recv -g g t -- sh -c 'echo "$MQ_OFFSET $MQ_ATTEMPT"; exit 1'
	assert_output '2 1'
	again() {
		mq-recv -g g t -- sh -c 'echo "$MQ_OFFSET $MQ_ATTEMPT [$MQ_KEY]" >>seen'
	}
	wait_for 10 again
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
	wait_for 10 lines 3
	mq-send -q t 4
	wait_for 10 lines 4
	[ "$(cat seen)" = "$(seq 4)" ]
	kill -0 "$pid"
	kill -TERM "$pid"
	finish "$pid" 10
	[ "$ST" = 0 ]
	[ "$(rows)" = 0 ]
}

@test "exec mode: -j 4 runs four handlers at once" {
	mq-send -q t 1 2 3 4
	t0=$(now_ms)
	run -0 mq-recv -g g -n 0 -j 4 t -- sh -c 'date +%s%3N >>starts; sleep 1'
	t1=$(now_ms)
	[ "$(wc -l <starts)" = 4 ]
	spread=$(( $(sort -n starts | tail -1) - $(sort -n starts | head -1) ))
	echo "# starts within ${spread}ms, all done in $((t1 - t0))ms" >&3
	# one at a time, each start would be at least 1s after the last
	[ "$spread" -lt 900 ]
	[ $((t1 - t0)) -lt 3500 ]
	[ "$(rows)" = 0 ]
}

@test "exec mode: the lease is extended while the handler runs" {
	mq-topic group t g --lease 2s >/dev/null
	mq-send -q t m
	bg recv.out mq-recv -g g t -- sh -c 'echo $$ >>pgids; touch started; sleep 5'
	pid=$BG
	wait_for 10 test -e started
	t0=$(now_ms)
	sleep 3	# past the 2s lease
	run -1 mq-recv -g g t
	sleep 1
	run -1 mq-recv -g g t
	[ $(($(now_ms) - t0)) -lt 5000 ]	# the handler still runs
	[ "$(sql 'SELECT state FROM delivery')" = 1 ]
	finish "$pid" 15
	[ "$ST" = 0 ]
	[ "$(rows)" = 0 ]
	[ "$(sql "SELECT count(*) FROM history WHERE event = 'expired'")" = 0 ]
	[ "$(delivered)" = 1 ]
}

@test "exec mode: SIGTERM lets the running handler finish and settle, exit 0" {
	mq-topic group t g --lease 60s >/dev/null
	mq-send -q t m1 m2
	bg recv.out mq-recv -g g -f t -- sh -c 'echo $$ >>pgids; touch started; sleep 2; echo done >>out'
	pid=$BG
	wait_for 10 test -e started
	kill -TERM "$pid"
	finish "$pid" 15
	[ "$ST" = 0 ]
	[ "$(cat out)" = done ]
	# m1 acked; m2 never taken (it stopped receiving)
	[ "$(rows)" = 0 ]
	[ "$(sql 'SELECT settled, pos FROM grp')" = "1|2" ]
	[ "$(sql 'SELECT count(*) FROM consumer')" = 0 ]
}

@test "exec mode: a second signal stops the handler, releases its message and exits 130" {
	mq-topic group t g --lease 60s >/dev/null
	mq-send -q t m
	bg recv.out mq-recv -g g t -- sh -c 'echo $$ >>pgids; touch started; sleep 30; echo done >>out'
	pid=$BG
	wait_for 10 test -e started
	hpgid=$(cat pgids)
	# two different signals, so the second cannot merge with the first
	kill -TERM "$pid"
	kill -INT "$pid"
	finish "$pid" 15
	[ "$ST" = 130 ]
	# the handler was told to stop
	wait_for 10 gone "-$hpgid"
	[ ! -e out ]
	# and the message is deliverable again at once, well before the lease
	[ "$(sql 'SELECT state, attempt FROM delivery')" = "0|1" ]
	run -0 mq-recv -g g --format '%a %b' t
	assert_output '2 m'
	[ "$(sql 'SELECT count(*) FROM consumer')" = 0 ]
}

@test "exec mode: the lease of a consumer killed with SIGKILL is reclaimed at once" {
	mq-topic group t g --lease 60s >/dev/null
	mq-send -q t m
	bg recv.out mq-recv -g g t -- sh -c 'echo $$ >>pgids; touch started; sleep 100'
	pid=$BG
	wait_for 10 test -e started
	[ "$(sql 'SELECT state, attempt FROM delivery')" = "1|1" ]
	kill -9 "$pid"
	finish "$pid" 10
	[ "$ST" = 137 ]
	kill -9 -- "-$(cat pgids)"
	t0=$(now_ms)
	run -0 mq-recv -g g -w 10s --format '%a %b' t
	elapsed=$(($(now_ms) - t0))
	assert_output '2 m'
	[ "$elapsed" -lt 5000 ]
	[ "$(sql "SELECT count(*) FROM history WHERE event = 'released'")" = 1 ]
	[ "$(sql 'SELECT count(*) FROM consumer')" = 0 ]
}

@test "reaping a dead consumer does not release a live consumer that took its id meanwhile" {
	# reap() (deliver.c) finds dead consumers in a read, then reads the
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
	bg a.out mq-recv -g g t -- sh -c 'echo $$ >>pgids; touch started; sleep 100'
	wait_for 10 test -e started
	aid=$(sql 'SELECT id FROM consumer')
	kill -9 "$BG"
	finish "$BG" 10
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
	wait_for 10 grep -q locked lock.out
	# B looks for dead consumers: it sees A dead and waits for the lock
	bg b.out mq-recv -g g --format '%o %a\n' t
	bpid=$BG
	in_busy_wait() { grep -q nanosleep "/proc/$bpid/wchan"; }
	wait_for 10 in_busy_wait
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
	finish "$bpid" 15
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
	wait_for 10 sql_is 'SELECT count(*) FROM consumer' 1
	[ "$(sql 'SELECT host, pid FROM consumer')" = "$(hostname)|$pid" ]
	[ "$(sql 'SELECT g.name FROM consumer c JOIN grp g ON g.id = c.grp')" = g ]
	wait_for 10 sql_is 'SELECT count(*) FROM delivery' 0
	kill -TERM "$pid"
	finish "$pid" 10
	[ "$ST" = 0 ]
	[ "$(sql 'SELECT count(*) FROM consumer')" = 0 ]
	# the same after a bounded run
	mq-send -q t m2
	run -0 mq-recv -g g t -- true
	[ "$(sql 'SELECT count(*) FROM consumer')" = 0 ]
}
