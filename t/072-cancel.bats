#!/usr/bin/env bats
# 072-cancel.bats: mq-topic cancel and delay: one message (by offset, key
# or dedup id), in every group or one, whatever it is doing: not handed
# out yet, waiting for a retry, in flight, dead; counted, traced; refused
# changes nothing; a cancel racing a claim has one winner.

# shellcheck disable=SC2154 # stderr: set by run --separate-stderr
load test_helper
bats_require_minimum_version 1.5.0

# one_error PROG: the last run printed exactly one line on stderr, from PROG.
one_error() {
	local e=${stderr%%$'\n'usage: *}
	[[ $e != *$'\n'* ]] || fail "want one line on stderr, got: $stderr"
	[[ $e == "$1: "* ]] || fail "want a line from $1, got: $stderr"
}

# bodies GROUP: the bodies GROUP receives now (and acks), one a line.
bodies() {
	local out
	out=$(mq-recv -A -n 0 -g "$1" --format '%b\n' t) || true
	printf '%s' "$out"
}

# lagj GROUP FILTER: FILTER is true of the group's mq-lag --json row.
lagj() {
	mq-lag --json t "$1" | jtrue -s ".[0] | $2"
}

@test "cancel: a message no group has had is skipped by every group; counted, traced" {
	seq 5 | mq-send -q t
	mq-topic group t g >/dev/null
	mq-topic group t h >/dev/null
	run -0 mq-topic cancel t 2 4
	assert_output "t/g: cancelled 2
t/g: cancelled 4
t/h: cancelled 2
t/h: cancelled 4"
	lagj g '.lag == 3 and .cancelled_total == 2 and .settled_total == 2'
	assert_equal "$(bodies g)" "$(printf '1\n3\n5')"
	assert_equal "$(bodies h)" "$(printf '1\n3\n5')"
	lagj g '.lag == 0 and .position == 6 and .cancelled_total == 2'
	# passed by: no row is left behind for the cancelled ones
	assert_equal "$(sql 'SELECT count(*) FROM delivery')" 0
	run -0 mq-replay --trace 2 t
	assert_line --regexp '^group g: settled$'
	assert_line --regexp 'attempt 0  cancelled  .*by '"$(id -un)"'$'
	run -0 mq-topic show t
	assert_line --regexp '^group g: .*dead 0, cancelled 2, lapsed 0, duplicates 0, consumers 0;'
	mq-lag --prometheus t | grep -qx 'mq_group_cancelled_total{topic="t",group="g"} 2'
}

@test "cancel: waiting for a retry or dead, the row goes; in flight only with --force, then its receipt is stale" {
	seq 3 | mq-send -q t
	mq-topic group t g --max-attempts 2 >/dev/null
	r1=$(mq-recv -g g --format '%r' t)
	mq-ack --fail "$r1"			# 1 waits for its retry
	r2=$(mq-recv -g g --format '%r' t)	# 2 in flight
	r3=$(mq-recv -g g --format '%r' t)
	mq-ack --dead "$r3"			# 3 dead
	lagj g '.retrying == 1 and .in_flight == 1 and .dead == 1'
	before=$(db_state)
	run --separate-stderr -1 mq-topic cancel t 1 2 3
	one_error mq-topic
	stderr_has "t/g: 2 is in flight" "--force"
	assert_output ''
	assert_equal "$(db_state)" "$before"
	run -0 mq-topic cancel t 1 3
	assert_output "t/g: cancelled 1
t/g: cancelled 3"
	lagj g '.retrying == 0 and .dead == 0 and .in_flight == 1 and .cancelled_total == 2'
	run -0 mq-topic cancel --force t 2
	assert_output "t/g: cancelled 2"
	run -1 mq-ack "$r2"
	lagj g '.lag == 0 and .in_flight == 0 and .cancelled_total == 3 and .settled_total == 3'
	run -1 mq-recv -g g t
	# the attempt's delivery stays in the history
	run -0 mq-replay --trace 2 t
	assert_line --regexp 'attempt 1  delivered'
	assert_line --regexp 'attempt 1  cancelled'
}

@test "cancel -g: only that group; --dry-run says what and changes nothing" {
	seq 3 | mq-send -q t
	mq-topic group t g >/dev/null
	mq-topic group t h >/dev/null
	before=$(db_state)
	run -0 mq-topic cancel --dry-run t 1
	assert_output "t/g: would cancel 1
t/h: would cancel 1"
	assert_equal "$(db_state)" "$before"
	run -0 mq-topic cancel -g h t 1
	assert_output "t/h: cancelled 1"
	assert_equal "$(bodies g)" "$(printf '1\n2\n3')"
	assert_equal "$(bodies h)" "$(printf '2\n3')"
}

@test "cancel -k KEY: every unsettled message of the key; --dedup ID: the one of the id" {
	mq-send -q -k a t a1
	mq-send -q -k b t b1
	mq-send -q -k a t a2
	mq-send -q --dedup order-7 t o7
	mq-send -q -k a t a3
	mq-topic group t g --from earliest >/dev/null
	recv_ack g 1				# a1 settled
	run -0 mq-topic cancel -k a t
	assert_output "t/g: cancelled 3
t/g: cancelled 5"
	run -0 mq-topic cancel --dedup order-7 t
	assert_output "t/g: cancelled 4"
	assert_equal "$(bodies g)" b1
	run --separate-stderr -66 mq-topic cancel -k nosuch t
	one_error mq-topic
	run --separate-stderr -66 mq-topic cancel --dedup nosuch t
	one_error mq-topic
}

@test "cancel: nothing left to do is 1; bad input is 64, 65 or 66 with one line, and changes nothing" {
	seq 2 | mq-send -q t
	run --separate-stderr -1 mq-topic cancel t 1
	one_error mq-topic
	stderr_has "no groups"
	mq-topic group t g >/dev/null
	recv_ack g 1
	before=$(db_state)
	run --separate-stderr -1 mq-topic cancel t 1
	one_error mq-topic
	stderr_has "nothing to cancel" "settled already"
	run --separate-stderr -66 mq-topic cancel t 1 9
	one_error mq-topic
	stderr_has "no message at offset 9"
	run --separate-stderr -66 mq-topic cancel nosuch 1
	one_error mq-topic
	run --separate-stderr -66 mq-topic cancel -g nosuch t 2
	one_error mq-topic
	for args in "t" "t 0" "t x" "-k a t 2" "--dedup i -k a t" "--at now t 2" \
	    "--bogus t 2" "-g BAD/NAME t 2" ""; do
		# shellcheck disable=SC2086 # each args is words on purpose
		run --separate-stderr -64 mq-topic cancel $args
		one_error mq-topic
	done
	for args in "t 2" "--at now --delay 1s t 2" "--delay xyz t 2"; do
		# shellcheck disable=SC2086
		run --separate-stderr -64 mq-topic delay $args
		one_error mq-topic
	done
	run --separate-stderr -65 mq-topic delay --at 'not a time' t 2
	one_error mq-topic
	assert_equal "$(db_state)" "$before"
}

@test "delay: a message not handed out, or waiting for a retry, is due at the new time; earlier works too" {
	mq-send -q t now
	mq-send -q --delay 1h t later
	mq-topic group t g --backoff 1h >/dev/null
	run -0 mq-topic delay --delay 1h t 1
	assert_output --regexp '^t/g: rescheduled 1 to 20[0-9-]+T[0-9:.]+Z$'
	run -1 mq-recv -g g t
	lagj g '.lag == 0 and .delayed == 2'
	run -0 mq-topic delay --at now t 2
	assert_equal "$(bodies g)" later
	run -0 mq-topic delay --at now t 1
	r=$(mq-recv -g g --format '%r' t)
	mq-ack --fail "$r"			# waits an hour for its retry
	lagj g '.retrying == 1'
	run -0 mq-topic delay --at now t 1
	run -0 mq-recv -g g --format '%b %a' t
	assert_output 'now 2'
}

@test "delay: in flight is refused without --force; a dead letter is refused; --dry-run changes nothing" {
	seq 2 | mq-send -q t
	mq-topic group t g >/dev/null
	r=$(mq-recv -g g --format '%r' t)
	r2=$(mq-recv -g g --format '%r' t)
	mq-ack --dead "$r2"
	before=$(db_state)
	run --separate-stderr -1 mq-topic delay --delay 1h t 1
	one_error mq-topic
	stderr_has "in flight" "--force"
	run --separate-stderr -1 mq-topic delay --delay 1h t 2
	one_error mq-topic
	stderr_has "dead letter" "mq-replay --dead"
	run -0 mq-topic delay --dry-run --delay 1h t 1 --force
	assert_output --regexp '^t/g: would reschedule 1 to '
	assert_equal "$(db_state)" "$before"
	run -0 mq-topic delay --force --at now t 1
	run -1 mq-ack "$r"
	run -0 mq-recv -g g --format '%b %a' t
	assert_output '1 2'
}

@test "delay in an ordered group: later messages of the key wait behind the one moved" {
	mq-send -q -k a t a1
	mq-send -q -k a t a2
	mq-send -q -k b t b1
	mq-topic group t g --ordered >/dev/null
	mq-topic delay --delay 1h t 1 >/dev/null
	assert_equal "$(bodies g)" b1
	mq-topic delay --at now t 1 >/dev/null
	run -0 mq-recv -n 0 -g g --format '%b %r' t
	assert_equal "${#lines[@]}" 1
	[[ $output == "a1 "* ]] || fail "want a1 alone, got: $output"
	mq-ack "${output#a1 }"
	assert_equal "$(bodies g)" a2
	lagj g '.lag == 0 and .delayed == 0'
}

@test "delay of a later message of a key, or of another message between two of a key, in an ordered group: the key's messages still go one at a time" {
	# (PostgreSQL handed out c1 and c2 together: the claim writes its
	# leases at its end, and what it read of the group's keys after it
	# took a due row moved ahead did not show c1 handed out just before)
	mq-topic group t g --ordered >/dev/null
	mq-send -q -k c t c1 c2
	mq-topic delay --at now -g g t 2 >/dev/null
	run -0 mq-recv -g g -n 0 --format '%b %r\n' t
	assert_equal "${#lines[@]}" 1
	[[ $output == "c1 "* ]] || fail "want c1 alone, got: $output"
	mq-ack "${output#c1 }"
	assert_equal "$(bodies g)" c2
	# another message between them moved
	mq-topic group t h --ordered --from latest >/dev/null
	mq-send -q -k d t d3
	mq-send -q t x4
	mq-send -q -k d t d5
	mq-topic delay --at now -g h t 4 >/dev/null
	run -0 mq-recv -g h -n 0 --format '%b\n' t
	assert_equal "$output" "$(printf 'd3\nx4')"
}

@test "ordered: a message moved ahead whose time to live ran out frees its key in the same claim" {
	mq-topic group t g --ordered >/dev/null
	mq-send -q -k c --ttl 1s t c1
	mq-send -q -k c t c2
	mq-topic delay --at now -g g t 1 >/dev/null
	sleep 1.2
	run -0 mq-recv -g g -n 0 --format '%b\n' t
	assert_output c2
	lagj g '.lapsed_total == 1'
}

@test "delay of a message the group has not reached: it waits for the group, goes once, in its place when due" {
	seq 4 | mq-send -q t
	mq-topic group t g >/dev/null
	mq-topic delay --at now t 3 >/dev/null
	mq-topic delay --delay 1h t 2 >/dev/null
	# due is when it may go: 3 does not pass 1, and goes before 4
	run -0 mq-recv -g g --format '%o %r' t
	[[ $output == "1 "* ]] || fail "want 1 first, got: $output"
	mq-ack "${output#1 }"
	run -0 mq-recv -g g --format '%o %r' t
	[[ $output == "3 "* ]] || fail "want 3 next, got: $output"
	mq-ack "${output#3 }"
	assert_equal "$(bodies g)" 4
	run -1 mq-recv -g g t
	mq-topic delay --at now t 2 >/dev/null
	assert_equal "$(bodies g)" 2
	run -1 mq-recv -g g t
	lagj g '.lag == 0 and .delayed == 0 and .settled_total == 4'
	# every key at once, then one batch: each message once
	mq-send -q -k k t k5 k6
	mq-topic delay --at now -k k t >/dev/null
	assert_equal "$(bodies g)" "$(printf 'k5\nk6')"
	lagj g '.lag == 0 and .settled_total == 6'
}

@test "ordered: an earlier message of a key is not held behind a later one moved" {
	mq-send -q -k a t a1 a2
	mq-topic group t g --ordered >/dev/null
	mq-topic delay --delay 1h t 2 >/dev/null
	run -0 mq-recv -g g --format '%b' t
	assert_output a1
}

@test "cancel of the first messages: a plain mq-recv still gets the next one" {
	seq 40 | mq-send -q t
	mq-topic group t g >/dev/null
	mq-topic cancel t $(seq 39) >/dev/null
	run -0 mq-recv -g g --format '%b' t
	assert_output 40
}

@test "--dedup names a message while the topic remembers its id" {
	mq-topic create t dedup-window=1s
	mq-topic group t g >/dev/null
	mq-send -q --dedup id-1 t one
	run -0 mq-topic cancel --dry-run --dedup id-1 t
	assert_output 't/g: would cancel 1'
	sleep 1.2	# past the window: waiting longer only makes it surer
	run --separate-stderr -66 mq-topic cancel --dedup id-1 t
	one_error mq-topic
}

@test "a rewind hands a cancelled message out again; a skip ahead leaves no row behind" {
	seq 4 | mq-send -q t
	mq-topic group t g >/dev/null
	mq-topic cancel t 2 3 >/dev/null
	mq-replay -g g --from-offset 4 t >/dev/null
	assert_equal "$(sql 'SELECT count(*) FROM delivery')" 0
	assert_equal "$(bodies g)" 4
	mq-topic cancel t 1 >/dev/null || true	# settled: nothing
	mq-replay -g g --from-offset 1 t >/dev/null
	assert_equal "$(bodies g)" "$(printf '1\n2\n3\n4')"
}

@test "cancel racing a claim: either the claim wins and the cancel is refused, or the cancel wins and nobody receives it" {
	mq-topic group t g >/dev/null
	local i won_c=0 won_r=0
	for i in $(seq 20); do
		mq-send -q t "m$i"
		mq-recv -g g --format '%o %r\n' t >"recv.$i" 2>/dev/null &
		rp=$!
		mq-topic cancel t "$i" >"cancel.$i" 2>&1 &
		cp=$!
		st_r=0 st_c=0
		wait "$rp" || st_r=$?
		wait "$cp" || st_c=$?
		if [ "$st_c" = 0 ]; then
			[ "$st_r" = 1 ] && [ ! -s "recv.$i" ] ||
			    fail "round $i: cancelled, yet received: $(cat "recv.$i")"
			won_c=$((won_c + 1))
		else
			[ "$st_c" = 1 ] || fail "round $i: cancel exit $st_c: $(cat "cancel.$i")"
			grep -q 'in flight' "cancel.$i" || fail "round $i: $(cat "cancel.$i")"
			read -r off r <"recv.$i"
			assert_equal "$off" "$i"
			mq-ack "$r"
			won_r=$((won_r + 1))
		fi
	done
	echo "# cancel won $won_c, claim won $won_r" >&3
	lagj g '.lag == 0 and .in_flight == 0 and .position == 21'
	assert_equal "$(sql 'SELECT count(*) FROM delivery')" 0
}

@test "send --replace -k: earlier messages of the key a group has not handed out are settled as replaced" {
	mq-topic group t g --ordered >/dev/null
	mq-topic group t h >/dev/null
	mq-send -q -k x t x1
	r=$(mq-recv -g h --format '%r' t)		# x1 in flight in h
	mq-send -q -k x t x2
	mq-send -q -k x --delay 1h t x3		# held back: delayed
	mq-send -q -k y t y1
	run -0 mq-send -k x --replace t x4
	assert_output 5
	# g had handed out nothing: x4 alone of x; h keeps x1 in flight
	assert_equal "$(bodies g)" "$(printf 'y1\nx4')"
	mq-ack "$r"
	assert_equal "$(bodies h)" "$(printf 'y1\nx4')"
	lagj g '.lag == 0 and .delayed == 0 and .settled_total == 5 and .cancelled_total == 0'
	lagj h '.lag == 0 and .delayed == 0 and .settled_total == 5'
	run -0 mq-replay --trace 2 t
	assert_line --regexp 'attempt 0  replaced  .*by #5$'
	# a batch: the last of it wins
	printf 'a\nb\nc\n' | mq-send -q -k z --replace t
	assert_equal "$(bodies g)" c
	run --separate-stderr -64 mq-send --replace t m
	[[ $stderr == *"needs -k"* ]] || fail "$stderr"
}

@test "ttl: a message a group has not handed out before its time to live lapses for it, counted and traced; one handed out goes on" {
	mq-topic group t g >/dev/null
	mq-topic group t h --ordered >/dev/null
	start=$(now_ms)
	mq-send -q -k a --ttl 2s t a1		# to be handed out in time, in g
	mq-send -q -k a --ttl 300ms t a2	# lapses; in h behind a1
	mq-send -q --ttl 1h --delay 1s t later	# delayed, lives
	mq-send -q --ttl 500ms --delay 1h t never
	r=$(mq-recv -g g --format '%r' t)
	r2=$(mq-recv -g h --format '%r' t)
	in_time $((start + 1500)) "a1 handed out inside its 2s"
	mq-ack --fail --delay 0 "$r"		# g: a1 waits for a retry
	mq-ack "$r2"
	sleep 2.1				# past every short ttl
	run -0 mq-recv -A -n 0 -g g --format '%b %a\n' t
	assert_output "a1 2
later 1"
	run -0 mq-recv -A -n 0 -g h --format '%b' t
	assert_output later
	lagj g '.lag == 0 and .delayed == 0 and .lapsed_total == 2 and .settled_total == 4'
	lagj h '.lag == 0 and .lapsed_total == 2 and .settled_total == 4'
	run -0 mq-replay --trace 2 t
	assert_line --regexp 'attempt 0  lapsed  .*time to live ran out$'
	mq-lag --prometheus t | grep -qx 'mq_group_lapsed_total{topic="t",group="g"} 2'
}

@test "ttl: the topic's default, --ttl over it, none; bad ones are 64 and change nothing" {
	mq-topic create t ttl=300ms
	run -0 mq-topic show t
	assert_line 'ttl 300ms'
	mq-topic group t g >/dev/null
	mq-send -q t short
	mq-send -q --ttl 1h t long
	mq-topic set t ttl=none
	run -0 mq-topic show t
	refute_line --partial 'ttl '
	mq-send -q t forever
	sleep 0.5
	assert_equal "$(bodies g)" "$(printf 'long\nforever')"
	before=$(db_state)
	for bad in "mq-send --ttl 0 t x" "mq-send --ttl x t x" "mq-topic set t ttl=0" \
	    "mq-topic set t ttl=soon"; do
		# shellcheck disable=SC2086 # a command line to split
		run --separate-stderr -64 $bad
		[[ $stderr == *ttl* ]] || fail "$bad: $stderr"
	done
	assert_equal "$(db_state)" "$before"
}

@test "ttl: held rows lapse too, and free their key; a long run of lapsed messages does not hide the next live one" {
	mq-topic group t g --ordered >/dev/null
	mq-send -q -k a t a1
	r=$(mq-recv -g g --format '%r' t)		# a1 in flight
	# (a second to live: five programs start before the held rows are
	# made, each a connection to PostgreSQL on a busy machine)
	mq-send -q -k a --ttl 1s t a2 a3 a4	# held behind a1
	mq-send -q -k a t a5
	mq-send -q --delay 2s --ttl 1s t d1	# held: delayed
	mq-send -q --delay 2s t d2
	run -1 mq-recv -g g t				# makes the held rows
	assert_equal "$(sql 'SELECT count(*) FROM delivery WHERE state = 0')" 6
	sleep 2.2
	mq-ack "$r"
	run -0 mq-recv -A -n 0 -g g --format '%b\n' t
	assert_equal "$(sort <<<"$output")" "$(printf 'a5\nd2')"
	lagj g '.lag == 0 and .lapsed_total == 4'
	seq 5000 | mq-send -q --ttl 100ms t
	mq-send -q t live
	sleep 0.3
	run -0 mq-recv -g g --format '%b' t
	assert_output live
	lagj g '.lapsed_total == 5004'
}

@test "send --replace settles held rows below the position too, not what is in flight" {
	mq-topic group t g --ordered >/dev/null
	mq-send -q -k x t x1 x2 x3
	r=$(mq-recv -g g --format '%r' t)		# x1 in flight
	run -1 mq-recv -g g t				# x2, x3 held behind it
	assert_equal "$(sql 'SELECT count(*) FROM delivery WHERE state = 0')" 2
	mq-send -q -k x --replace t x4
	mq-ack "$r"
	assert_equal "$(bodies g)" x4
	lagj g '.lag == 0 and .settled_total == 4'
	assert_equal "$(sql 'SELECT count(*) FROM delivery')" 0
}
