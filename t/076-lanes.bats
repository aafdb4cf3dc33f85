#!/usr/bin/env bats
# Priority lanes: mq-recv TOPIC1 TOPIC2 ... takes from several topics,
# strictly in the order given or with --fair in turn; receipts of several
# topics settle in one mq-ack stream; exec mode, waiting and -f work
# across all of them; MQ_NO_CREATE per lane.  On both backends.
# shellcheck disable=SC2154 # stderr is set by bats' run --separate-stderr

load test_helper

teardown() {
	exec 6>&- 2>/dev/null || true
	kill_bg
}

# alternates FILE: no two lines in a row are the same.
alternates() {
	local prev='' line all
	all=$(cat "$1")
	while read -r line; do
		[ "$line" != "$prev" ] || fail "two of $line in a row: $all"
		prev=$line
	done <<<"$all"
}

# each_in_time PID LANE...: a message sent to each lane, in turn, comes
# out of the waiting PID's output (read on fd 6) well before the safety
# look of a second; a slow machine has three tries a lane.
each_in_time() {
	local pid=$1 lane i start ms line
	shift
	for lane; do
		for i in 1 2 3; do
			after_look "$pid"
			mq-send -q "$lane" "m$i"
			start=$(now_ms)
			read -r -t 60 line <&6 || fail "$lane m$i did not come: $(cat err)"
			ms=$(( $(now_ms) - start ))
			assert_equal "$line" "$lane m$i"
			[ "$ms" -ge 500 ] || break
		done
		[ "$ms" -lt 500 ] ||
		    fail "a message of $lane took ${ms}ms to arrive (safety look: 1s)"
	done
}

@test "strict order: a later lane only for what the earlier ones lack; a batch may mix them" {
	mq-send -q bulk b1 b2 b3 b4 b5
	mq-send -q urgent u1 u2
	run -0 mq-recv -n 3 --format '%r %T %b\n' urgent bulk
	assert_equal "$(cut -d' ' -f2- <<<"$output")" $'urgent u1\nurgent u2\nbulk b1'
	u1=${lines[0]%% *}
	# lane 1 has nothing due: its messages are in flight
	run -0 mq-recv -n 1 --format '%T %b\n' urgent bulk
	assert_output 'bulk b2'
	# a new message of lane 1 goes first, the backlog of lane 2 waits
	mq-send -q urgent u3
	run -0 mq-recv -n 1 --format '%T %b\n' urgent bulk
	assert_output 'urgent u3'
	# and a retry of lane 1, due now, goes before lane 2 too
	mq-ack --fail --delay 0s "$u1"
	run -0 mq-recv -n 1 --format '%T %b %a\n' urgent bulk
	assert_output 'urgent u1 2'
	run -0 mq-recv -n 0 --format '%T %b\n' urgent bulk
	assert_output $'bulk b3\nbulk b4\nbulk b5'
}

@test "strict order in exec mode: a message of lane 1 sent while lane 2 has a backlog goes next" {
	mq-send -q bulk b1 b2 b3
	cat >h <<'EOF'
#!/bin/sh
body=$(cat)
echo "$MQ_TOPIC $body" >>log
[ "$body" != b1 ] || mq-send -q urgent u1
EOF
	chmod +x h
	run -0 mq-recv -n 4 urgent bulk -- ./h
	run -0 cat log
	assert_output $'bulk b1\nurgent u1\nbulk b2\nbulk b3'
}

@test "--fair: each claim begins at the next lane; one-message runs take turns too" {
	mq-send -q a a1 a2 a3 a4 a5 a6 a7 a8 a9
	mq-send -q b b1 b2 b3 b4 b5
	# exec mode, one handler: a claim a message, the lanes in turn while
	# both have some (whichever begins), then the rest of a
	# shellcheck disable=SC2016 # the handler's variable
	run -0 mq-recv --fair -n 0 a b -- sh -c 'echo "$MQ_TOPIC" >>log'
	assert_equal "$(wc -l <log)" 14
	head -n 10 log >first
	alternates first
	run -0 tail -n 4 log
	assert_output $'a\na\na\na'
	# strict order takes a's nine first
	run -0 mq-recv -g y -n 4 --format '%T\n' a b
	assert_output $'a\na\na\na'
	# a claim of many takes all it can from its lane, the rest from the
	# next: the lane it began at is whole
	run -0 mq-recv --fair -g x -n 0 --format '%T %b\n' a b
	[[ $output == "a a1"*"a a9"$'\n'"b b1"*"b b5" ||
	    $output == "b b1"*"b b5"$'\n'"a a1"*"a a9" ]] || fail "$output"
	assert_equal "${#lines[@]}" 14
	# one-message runs begin at a lane drawn at random: both come
	seq 20 | mq-send -q a
	seq 20 | mq-send -q b
	for i in $(seq 20); do
		mq-recv --fair -g z -n 1 -A --format '%T\n' a b >>runs
	done
	grep -qx a runs || fail "20 runs took no a: $(cat runs)"
	grep -qx b runs || fail "20 runs took no b: $(cat runs)"
}

@test "receipts of several topics settle in one mq-ack stream" {
	mq-send -q a a1 a2
	mq-send -q b b1
	mq-send -q c c1 c2
	mq-recv -n 0 a b c >got
	run -0 cut -d: -f1 got
	assert_output $'a\na\nb\nc\nc'
	# one stream, one batch: every one settled, in its own topic
	run -0 --separate-stderr mq-ack <got
	assert_equal "$stderr" ""
	for t in a b c; do
		sql_is "SELECT settled FROM grp WHERE name = 'default' AND topic = (SELECT id FROM topic WHERE name = '$t')" \
		    "$(mq-replay "$t" | wc -l)" || fail "$t not all settled"
	done
	run -1 mq-recv -n 0 a b c
	# a stale receipt of one topic in the stream settles the others
	mq-send -q a a3
	mq-send -q b b2
	mq-recv -n 0 a b >got2
	head -n 1 got >mixed
	cat got2 >>mixed
	run -1 --separate-stderr mq-ack <mixed
	assert_equal "$stderr" "mq-ack: stale receipt $(head -n 1 got | cut -f1): nothing changed"
	run -1 mq-recv -n 0 a b
	# --fail across topics: each comes back in its own group
	mq-send -q a a4
	mq-send -q b b3
	mq-recv -n 0 a b | mq-ack --fail --delay 0s
	run -0 mq-recv -n 0 --format '%T %b %a\n' a b
	assert_output $'a a4 2\nb b3 2'
}

@test "exec mode across lanes: the handler's MQ_* name the lane, -v too; a consumer a lane" {
	mq-send -q a a1
	mq-send -q b b1
	# shellcheck disable=SC2016 # the handler's variables
	run -0 --separate-stderr mq-recv -v -g w -n 0 a b -- sh -c \
	    'echo "$MQ_TOPIC $MQ_GROUP $MQ_OFFSET ${MQ_RECEIPT%%:*} $(cat)"; [ "$MQ_TOPIC" = a ]'
	assert_output $'a w 1 a a1\nb w 1 b b1'
	[[ $stderr == *"a/w #1 attempt 1: exit 0 -> acked"* ]] || fail "$stderr"
	[[ $stderr == *"b/w #1 attempt 1: exit 1 -> retry in "* ]] || fail "$stderr"
	# the failure is b's, in b's group; a's group settled its message
	run -0 mq-lag --json a w
	[[ $output == *'"lag":0'* ]] || fail "$output"
	run -0 mq-lag --json b w
	[[ $output == *'"retrying":1'* ]] || fail "$output"
	# a following worker is a member of the group on each lane, and
	# leaves both
	mkfifo started
	exec 6<>started
	bg err mq-recv -f -g v a b -- sh -c 'echo go >started; sleep 600'
	pid=$BG
	read -r -t 60 _ <&6 || fail "no handler started: $(cat err)"
	run -0 mq-lag --consumers --json
	assert_equal "$(grep -c '"group":"v"' <<<"$output")" 2
	[[ $output == *'"topic":"a","group":"v"'*'"in_flight":1'* ]] || fail "$output"
	[[ $output == *'"topic":"b","group":"v"'*'"in_flight":0'* ]] || fail "$output"
	kill -TERM "$pid"
	kill -INT "$pid"	# (a second TERM may merge with the first)
	finish "$pid" 60
	assert_equal "$ST" 130
	run -0 mq-lag --consumers --json
	assert_output ""
	# what it held goes back at once
	run -0 mq-recv -g v -n 0 --format '%T %b %a\n' a b
	assert_output $'a a1 2\nb b1 1'
}

@test "a printing -f is listed as a consumer of each lane; its leases stay with its receipts" {
	mq-send -q a a1
	mq-send -q b b1
	mkfifo out
	bg err bash -c 'exec mq-recv -f -g p a b >out'
	pid=$BG
	exec 6<>out
	read -r -t 60 ra _ <&6 || fail "nothing came: $(cat err)"
	read -r -t 60 rb _ <&6 || fail "one came: $(cat err)"
	[[ $ra == a:p:1:1:* && $rb == b:p:1:1:* ]] || fail "$ra $rb"
	run -0 mq-lag --consumers --json
	assert_equal "$(grep -c "\"pid\":$pid," <<<"$output")" 2
	kill -TERM "$pid"
	finish "$pid" 60
	assert_equal "$ST" 0
	# it left both groups, but its messages are still the receipts'
	run -0 mq-lag --consumers --json
	assert_output ""
	run -1 mq-recv -g p -n 0 a b
	run -0 --separate-stderr mq-ack "$ra" "$rb"
	assert_equal "$stderr" ""
}

@test "-f sleeps once and wakes on a send to any lane, not on a timer" {
	local pid
	mq-send -q a start
	mq-send -q b start
	mq-send -q c start
	mq-recv -A -n 0 a b c >/dev/null
	mkfifo out
	bg err bash -c 'exec mq-recv -A -f --format "%T %b\n" a b c >out'
	pid=$BG
	exec 6<>out
	sleep 1		# asleep in its wait
	each_in_time "$pid" c a b
	gone "$pid" && fail "the consumer ended: $(cat err)"
	true
}

@test "on a kernel without FUTEX_WAITV (before 5.16), -f of several lanes still gets what is sent to any of them" {
	sqlite_only "FUTEX_WAITV is the SQLite wait's; PostgreSQL listens"
	local so
	so=$(shim oldkernel "$BATS_TEST_TMPDIR")
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
	mq-send -q a start
	mq-send -q b start
	mq-send -q c start
	mq-recv -A -n 0 a b c >/dev/null
	mkfifo out
	bg err env MQ_OLDKERNEL_LOG="$PWD/refused" LD_PRELOAD="$so" \
	    bash -c 'exec mq-recv -A -f --format "%T %b\n" a b c >out'
	exec 6<>out
	# it looks at every lane at least every 50 ms
	each_in_time "$BG" c b a
	# the shim was in its way: each sleep on the three lanes was refused
	[ -s refused ] || fail "mq-recv never asked for FUTEX_WAITV"
	gone "$BG" && fail "the consumer ended: $(cat err)"
	true
}

@test "a missing topic or group among the lanes: MQ_NO_CREATE refuses before any is made; else each is made" {
	mq-send -q a a1
	mq-send -q b b1
	mq-recv -g g -n 0 -A a >/dev/null
	before=$(db_state)
	MQ_NO_CREATE=1 run -66 --separate-stderr mq-recv -g g a nope
	assert_equal "$stderr" "mq-recv: no such topic: nope (MQ_NO_CREATE is set)"
	MQ_NO_CREATE=1 run -66 --separate-stderr mq-recv -g g a b -- true
	assert_equal "$stderr" "mq-recv: no such group: b/g (MQ_NO_CREATE is set)"
	MQ_NO_CREATE=1 run -66 --separate-stderr mq-recv -g h a b
	assert_equal "$stderr" "mq-recv: no such group: a/h (MQ_NO_CREATE is set)"
	[ "$(db_state)" = "$before" ]
	# on a terminal: a note for each made, then the message
	run -0 script -qec "mq-recv -g g -n 1 a nope b" /dev/null
	assert_line -n 0 $'mq-recv: created topic nope and group g (empty)\r'
	assert_line -n 1 $'mq-recv: created group g on b (from the oldest message, 1 messages)\r'
	assert_line -n 2 --regexp $'^b:g:1:1:[0-9a-f]+\tb1\r$'
	[ "${#lines[@]}" = 3 ]
	MQ_NO_CREATE=1 run -0 mq-recv -g g -n 0 --empty-ok a nope b
	# a lane made later is waited on too
	bg out mq-recv -g g -w 60s --format '%T %b\n' a later
	mq-send -q later hello
	finish "$BG" 60
	assert_equal "$ST" 0
	run -0 cat out
	assert_output 'later hello'
}

@test "one lane is as it was; bad lists of topics are usage errors" {
	mq-send -q t one
	run -0 mq-recv -n 1 --json t
	[[ $output == '{"topic":"t","group":"default","offset":1,"receipt":"t:default:1:1:'* ]] ||
	    fail "$output"
	run -0 mq-recv --fair -n 0 --empty-ok t
	before=$(db_state)
	for args in "t t" "a b a" "a .b" "a b --" "-A a b -- true"; do
		# shellcheck disable=SC2086 # $args: options to split into words
		run -64 --separate-stderr mq-recv $args
		[[ $stderr == mq-recv:* ]] || fail "$args: $stderr"
	done
	run -64 --separate-stderr mq-recv a b a
	[[ $stderr == "mq-recv: topic a given twice"$'\n'* ]] || fail "$stderr"
	# shellcheck disable=SC2046 # 33 topics
	run -64 --separate-stderr mq-recv $(seq -f 't%g' 33)
	[[ $stderr == "mq-recv: too many topics: 33, at most 32"$'\n'* ]] || fail "$stderr"
	[ "$(db_state)" = "$before" ]
	# 32 are fine
	# shellcheck disable=SC2046
	run -1 mq-recv -n 0 $(seq -f 'u%g' 32)
}
