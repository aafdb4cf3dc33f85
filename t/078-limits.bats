#!/usr/bin/env bats
# 078-limits.bats: mq-topic group --rate N/DUR and --per-key N: limits
# kept in the database, so they hold across consumer processes; a burst,
# then the schedule; per key in flight; shown; bad values refused.

# shellcheck disable=SC2154 # stderr: set by run --separate-stderr
load test_helper
bats_require_minimum_version 1.5.0

teardown() {
	kill_bg
}

@test "--rate: a burst of N, then nothing until the schedule lets one go, whoever asks" {
	mq-topic group t g --rate 3/1h >/dev/null
	seq 10 | mq-send -q t
	run -0 mq-recv -g g -n 0 -A --format '%o\n' t
	assert_output "$(seq 3)"
	# another process, and a plain lease: the limit is the group's
	run -1 mq-recv -g g -n 0 t
	run -1 mq-recv -g g -n 0 --wait 0 t
	run -0 mq-topic show t
	assert_line --regexp '^group g: .*; rate 3/1h$'
	# none: the rest goes at once
	mq-topic group t g --rate none >/dev/null
	run -0 mq-recv -g g -n 0 -A --format '%o\n' t
	assert_output "$(seq 4 10)"
}

@test "--rate 2/1s: a waiting consumer gets the third no sooner than the schedule says" {
	mq-topic group t g --rate 2/1s >/dev/null
	seq 4 | mq-send -q t
	start=$(now_ms)
	run -0 mq-recv -g g -f -n 4 -A --format '%o\n' t
	took=$(( $(now_ms) - start ))
	assert_output "$(seq 4)"
	# two at once, then one each 500ms: at least a second for the last
	[ "$took" -ge 900 ] || fail "4 messages at 2/1s came in ${took}ms"
	run -0 mq-replay --trace 4 t
}

@test "--rate: redeliveries count; a new rate starts with a full burst" {
	mq-topic group t g --rate 2/1h --lease 1s >/dev/null
	seq 3 | mq-send -q t
	run -0 mq-recv -g g -n 0 --format '%o\n' t
	assert_output "$(seq 2)"
	sleep 1.2	# their leases ran out: they are due, but the rate is spent
	run -1 mq-recv -g g -n 0 t
	mq-topic group t g --rate 5/1h >/dev/null
	run -0 mq-recv -g g -n 0 -A --format '%o %a\n' t
	assert_output "$(printf '1 2\n2 2\n3 1')"
}

@test "--per-key 2: at most two of a key in flight, across processes; the next goes when one settles" {
	mq-topic group t g --per-key 2 >/dev/null
	for i in 1 2 3 4; do
		mq-send -q -k a t "a$i"
		mq-send -q -k b t "b$i"
	done
	mq-send -q t none
	run -0 mq-recv -g g -n 0 --format '%o %r\n' t
	assert_equal "$(cut -d' ' -f1 <<<"$output" | tr '\n' ' ')" "1 2 3 4 9 "
	r1=$(awk '$1 == 1 { print $2 }' <<<"$output")
	run -1 mq-recv -g g -n 0 t
	run -0 mq-topic show t
	assert_line --regexp '^group g: .*; per-key 2$'
	mq-ack "$r1"
	run -0 mq-recv -g g -n 0 --format '%o %k\n' t
	assert_output '5 a'
	mq-lag --json t g | jtrue -s '.[0] | .in_flight == 5 and .lag == 8'
}

@test "one claim of many keys: an ordered group hands out one of each key, --per-key 1 too, --per-key 2 two; the rest in order" {
	# (a claim writes its leases 16 at a time: the ones it has leased
	# and not yet written hold their keys all the same, and so do the
	# ones written)
	local i k one='' two=''
	mq-topic group t o --ordered >/dev/null
	mq-topic group t p1 --per-key 1 >/dev/null
	mq-topic group t p2 --per-key 2 >/dev/null
	for i in 1 2 3; do
		for k in $(seq 10 29); do
			mq-send -q -k "k$k" t "$k.$i"
			[ "$i" -gt 1 ] || one="$one$k.$i "
			[ "$i" -gt 2 ] || two="$two$k.$i "
		done
		mq-send -q t "n$i"
		one="${one}n$i " two="${two}n$i "
	done
	run -0 mq-recv -g o -n 0 --format '%b ' t
	assert_output "$one"
	run -0 mq-recv -g p1 -n 0 --format '%b ' t
	assert_output "$one"
	run -0 mq-recv -g p2 -n 0 --format '%b ' t
	assert_output "$two"
	run -0 sql "SELECT count(*) FROM delivery d JOIN grp g ON g.id = d.grp
	    WHERE g.name = 'p2' AND d.state = 1"
	assert_output 43
}

@test "-A in an ordered or --per-key 1 group: each auto-ack settles in the claim, so the key's next goes in it too" {
	# (PostgreSQL handed out one of a key a claim: a1, then a2, then a3)
	mq-topic group t o --ordered >/dev/null
	mq-topic group t p --per-key 1 >/dev/null
	mq-send -q -k a t a1 a2 a3
	run -0 mq-recv -A -g o -n 0 --format '%b ' t
	assert_output 'a1 a2 a3 '
	run -0 mq-recv -A -g p -n 0 --format '%b ' t
	assert_output 'a1 a2 a3 '
	# one in flight holds the key still
	mq-send -q -k b t b4 b5
	mq-recv -g o --format '%b' t >/dev/null
	run -1 mq-recv -A -g o -n 0 t
}

@test "-A in an ordered group: a due retry that the claim settles frees its key for the key's next, due or new, in the same claim" {
	# (PostgreSQL held the key's next back behind the retry's row,
	# deleted only as the claim wrote: a one-shot mq-recv missed it)
	mq-topic group t o --ordered >/dev/null
	mq-send -q -k a t a1 a2
	r=$(mq-recv -g o --format '%r' t)
	mq-ack --fail --delay 0s "$r"
	mq-send -q -k a t a3
	run -0 mq-recv -A -g o -n 0 --format '%b ' t
	assert_output 'a1 a2 a3 '
	# the key's next held back as due (its row written) behind the retry
	mq-send -q -k b t b1 b2
	r=$(mq-recv -g o --format '%r' t)
	run -1 mq-recv -g o t
	mq-ack --fail --delay 0s "$r"
	run -0 mq-recv -A -g o -n 0 --format '%b ' t
	assert_output 'b1 b2 '
}

@test "--per-key: a failed one waits for its retry without holding its key; a lease that ran out still counts" {
	mq-topic group t g --per-key 1 --backoff 1h --lease 1s >/dev/null
	mq-send -q -k a t a1
	mq-send -q -k a t a2
	r=$(mq-recv -g g --format '%r' t)
	mq-ack --fail "$r"
	run -0 mq-recv -g g -n 0 --format '%o\n' t
	assert_output 2
	sleep 1.2	# 2's lease ran out: it comes again itself, alone
	run -0 mq-recv -g g -n 0 --format '%o %a\n' t
	assert_output '2 2'
}

@test "--per-key: a waiting follower wakes when the key frees" {
	mq-topic group t g --per-key 1 >/dev/null
	mq-send -q -k a t a1
	mq-send -q -k a t a2
	r=$(mq-recv -g g --format '%r' t)
	bg "$BATS_TEST_TMPDIR/out" mq-recv -g g -w 30s --format '%o\n' t
	pid=$BG
	after_look "$pid"
	gone "$pid" && fail "it took a message while the key was full: $(cat "$BATS_TEST_TMPDIR/out")"
	mq-ack "$r"
	finish "$pid" 20
	[ "$ST" = 0 ] || fail "status $ST: $(cat "$BATS_TEST_TMPDIR/out")"
	assert_equal "$(cat "$BATS_TEST_TMPDIR/out")" 2
}

@test "--rate and --per-key: bad values are usage errors, nothing changes" {
	mq-topic group t g >/dev/null
	before=$(db_state)
	run -64 --separate-stderr mq-topic group t g --rate 10
	assert_equal "${stderr%%$'\n'*}" "mq-topic: invalid --rate '10': want N/DUR (10/1s, 100/m: N from 1 to 1000000, DUR up to a year) or none"
	for bad in 0/1s 10/0s 10/ /1s 10/soon 1000001/1s 1x/1s 10/400d -1/1s; do
		run -64 mq-topic group t g --rate "$bad"
	done
	run -64 mq-topic group t g --per-key -1
	run -64 mq-topic group t g --per-key many
	assert_equal "$(db_state)" "$before"
}

@test "--per-key: a lease that ran out and went dead frees its key in the same claim" {
	mq-topic group t g --per-key 1 --max-attempts 1 --lease 1s >/dev/null
	mq-send -q -k k t one
	mq-recv -g g t >/dev/null	# and never settled
	sleep 1.3
	mq-send -q -k k t two
	run -0 mq-recv -g g -n 0 --format '%o\n' t
	assert_output 2
	mq-lag --json t g | jtrue -s '.[0] | .dead == 1'
}
