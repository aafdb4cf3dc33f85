#!/usr/bin/env bats
# 077-idempotent.bats: mq-topic group --idempotent-by: a business id the
# group acked is settled as a duplicate (never handed out, counted,
# traced); one leased waits for that delivery to end; a failure or a dead
# letter lets the next one go; the window ends it; dedup, key and field:N.

# shellcheck disable=SC2154 # stderr: set by run --separate-stderr
load test_helper
bats_require_minimum_version 1.5.0

teardown() {
	kill_bg
}

# lagj GROUP FILTER: FILTER is true of the group's mq-lag --json row.
lagj() {
	mq-lag --json t "$1" | jtrue -s ".[0] | $2"
}

# handler: a slow handler that logs its start and end with the body,
# exits with the status in the file "fail" when it holds its offset.
handler() {
	cat >"$BATS_TEST_TMPDIR/h" <<EOF
#!/bin/sh
b=\$(cat)
echo "start \$MQ_OFFSET \$b" >>"$BATS_TEST_TMPDIR/log"
sleep \${SLOW:-1}
echo "end \$MQ_OFFSET" >>"$BATS_TEST_TMPDIR/log"
grep -qx "\$MQ_OFFSET" "$BATS_TEST_TMPDIR/fail" 2>/dev/null && exit 1
exit 0
EOF
	chmod +x "$BATS_TEST_TMPDIR/h"
	: >"$BATS_TEST_TMPDIR/log"
}

# ran: the offsets the handler started, in order, space-separated.
ran() {
	awk '$1 == "start" { printf "%s%s", s, $2; s = " " }' \
	    "$BATS_TEST_TMPDIR/log"
}

@test "idempotent-by field:1: three sends of one id, two at once with a slow handler: it runs once" {
	handler
	mq-topic group t g --idempotent-by field:1 >/dev/null
	printf 'A 1\nA 2\nB 1\n' | mq-send -q t
	# -j 3: 1 and 3 run at once; 2 waits for 1, and then is a duplicate
	run -0 mq-recv -g g -j 3 -n 0 t -- "$BATS_TEST_TMPDIR/h"
	assert_equal "$(ran | tr ' ' '\n' | sort | tr '\n' ' ')" "1 3 "
	echo 'A 3' | mq-send -q t
	# a duplicate is never handed to a handler: nothing was taken
	run -1 mq-recv -g g -j 3 -n 0 t -- "$BATS_TEST_TMPDIR/h"
	assert_equal "$(ran | tr ' ' '\n' | sort | tr '\n' ' ')" "1 3 "
	lagj g '.lag == 0 and .duplicates_total == 2 and .settled_total == 4 and .delivered_total == 2'
	run -0 mq-replay --trace 2 t
	assert_line --regexp '^group g: settled$'
	assert_line --regexp 'attempt 0  duplicate  .*duplicate of #1$'
	run -0 mq-replay --trace 4 t
	assert_line --regexp 'duplicate of #1$'
	run -0 mq-topic show t
	assert_line --regexp '^group g: .*lapsed 0, duplicates 2, consumers 0;.*; idempotent-by field:1 for 1d$'
	mq-lag --prometheus t | grep -qx 'mq_group_duplicates_total{topic="t",group="g"} 2'
}

@test "idempotent: a leased id holds the next one back; an ack makes it a duplicate, a failure lets it go" {
	mq-topic group t g --idempotent-by key --backoff 1h >/dev/null
	mq-send -q -k order-7 t <<<'first'
	mq-send -q -k order-7 t <<<'second'
	mq-send -q -k order-8 t <<<'other'
	r1=$(mq-recv -g g --format '%r' t)
	run -0 mq-recv -g g -n 0 --format '%o %b\n' t
	assert_output '3 other'		# 2 waits: order-7 is leased
	run -1 mq-recv -g g -n 0 t
	lagj g '.lag == 3 and .in_flight == 2'
	mq-ack --fail "$r1"		# not acked: 2 goes now
	run -0 mq-recv -g g -n 0 --format '%o %b %r\n' t
	assert_output --regexp '^2 second t:g:2:'
	r2=${output##* }
	# the retry of 1 waits an hour; acked, 2 makes it a duplicate
	mq-ack "$r2"
	mq-topic delay t 1 --delay 0s >/dev/null
	run -1 mq-recv -g g -n 0 t
	lagj g '.lag == 1 and .in_flight == 1 and .duplicates_total == 1'
	run -0 mq-replay --trace 1 t
	assert_line --regexp 'attempt 1  failed'
	assert_line --regexp 'attempt 1  duplicate  .*duplicate of #2$'
}

@test "idempotent-by field:1: ids that are not UTF-8 work as any other, and block nothing" {
	# (PostgreSQL refused the id at every claim: 65, "invalid byte
	# sequence for encoding UTF8", and the group handed out nothing
	# more, not even the messages before it)
	mq-topic group t g --idempotent-by field:1 >/dev/null
	mq-send -q t 'ok1 a'
	printf '\377 b\n' | mq-send -q t
	mq-send -q t 'ok3 c'
	printf '\377 d\n' | mq-send -q t	# the id of 2: held back
	printf '\376 e\n' | mq-send -q t
	# an id that is the form PostgreSQL keeps the one of 2 in
	printf '\357\277\277ff f\n' | mq-send -q t
	run -0 mq-recv -g g -n 0 --format '%o %r\n' t
	assert_equal "$(cut -d' ' -f1 <<<"$output" | tr '\n' ' ')" "1 2 3 5 6 "
	cut -d' ' -f2 <<<"$output" | mq-ack
	run -1 mq-recv -g g -n 0 t
	lagj g '.lag == 0 and .duplicates_total == 1'
	run -0 mq-replay --trace 4 t
	assert_line --regexp 'duplicate of #2$'
}

@test "ordered and idempotent: a duplicate behind its key waits for its turn before it is settled as one" {
	# (PostgreSQL settled it at once, before the message ahead of it
	# in its key: a later --replace of the key found it gone)
	mq-topic group t h --ordered --idempotent-by field:1 >/dev/null
	mq-send -q t 'y 1'
	mq-recv -A -g h t >/dev/null
	mq-send -q -k b t m2 'y 3'
	run -0 mq-recv -g h -n 0 --format '%o\n' t
	assert_output 2
	lagj h '.lag == 2 and .duplicates_total == 0'
	mq-send -q -k b --replace t m4
	run -0 mq-replay --trace 3 t
	assert_line --regexp 'replaced .*by #4$'
}

@test "idempotent: a dead letter lets the next one go; --max-attempts 1" {
	mq-topic group t g --idempotent-by key --max-attempts 1 >/dev/null
	mq-send -q -k k1 t <<<'a'
	mq-send -q -k k1 t <<<'b'
	r=$(mq-recv -g g --format '%r' t)
	run -1 mq-recv -g g -n 0 t
	mq-ack --dead "$r"
	run -0 mq-recv -g g -n 0 -A --format '%o\n' t
	assert_output 2
}

@test "idempotent: a lease that ran out no longer holds (the consumer died)" {
	mq-topic group t g --idempotent-by key --lease 1s >/dev/null
	mq-send -q -k k1 t <<<'a'
	mq-send -q -k k1 t <<<'b'
	mq-recv -g g t >/dev/null	# and never acked
	run -1 mq-recv -g g -n 0 t
	# after the lease: 1 comes again or 2 goes, but never both at once
	run -0 mq-recv -g g -n 0 --wait 5s --format '%o\n' t
	[ "${#lines[@]}" -eq 1 ] || fail "want one delivery at once, got: $output"
}

@test "idempotent: auto-ack in one claim: the second of an id is a duplicate of the first" {
	mq-topic group t g --idempotent-by field:2 >/dev/null
	printf 'x id1 a\ny id1 b\nz id2 c\nw\n' | mq-send -q t
	run -0 mq-recv -g g -n 0 -A --format '%o\n' t
	assert_output "$(printf '1\n3\n4')"	# 4 has no field 2: no id
	lagj g '.lag == 0 and .duplicates_total == 1'
	printf 'v id2 d\n' | mq-send -q t
	run -1 mq-recv -g g -n 0 -A t
	run -0 mq-replay --trace 5 t
	assert_line --regexp 'duplicate of #3$'
}

@test "idempotent-by dedup: the dedup id, once the topic's dedup window let the send through" {
	mq-topic create t dedup-window=1ms >/dev/null
	mq-topic group t g --idempotent-by dedup >/dev/null
	mq-send -q --dedup pay-1 t a
	sleep 0.1
	mq-send -q --dedup pay-1 t b	# a new message: the window passed
	mq-send -q t c			# no dedup id: goes
	run -0 mq-recv -g g -n 0 -A --format '%o\n' t
	assert_output "$(printf '1\n3')"
	lagj g '.duplicates_total == 1'
}

@test "idempotent: after the window the id runs again; mq-purge forgets it" {
	mq-topic group t g --idempotent-by key --idempotent-window 1s >/dev/null
	mq-send -q -k k1 t <<<'a'
	recv_ack g
	sql_is "SELECT count(*) FROM consumed" 1
	sleep 1.2
	mq-send -q -k k1 t <<<'b'
	run -0 mq-recv -g g -n 0 -A --format '%o\n' t
	assert_output 2
	sleep 1.2
	mq-purge t >/dev/null
	sql_is "SELECT count(*) FROM consumed" 0
}

@test "idempotent-by none: off, and what the group remembered is forgotten" {
	mq-topic group t g --idempotent-by key >/dev/null
	mq-send -q -k k1 t <<<'a'
	recv_ack g
	sql_is "SELECT count(*) FROM consumed" 1
	run -0 mq-topic group t g --idempotent-by none
	refute_output --partial 'idempotent-by'
	sql_is "SELECT count(*) FROM consumed" 0
	mq-send -q -k k1 t <<<'b'
	run -0 mq-recv -g g -n 0 -A --format '%o\n' t
	assert_output 2
}

@test "idempotent: two consumers at once never run one id twice" {
	handler
	mq-topic group t g --idempotent-by field:1 --backoff 1s >/dev/null
	bg "$BATS_TEST_TMPDIR/c1" mq-recv -f -g g -j 2 t -- "$BATS_TEST_TMPDIR/h"
	bg "$BATS_TEST_TMPDIR/c2" mq-recv -f -g g -j 2 t -- "$BATS_TEST_TMPDIR/h"
	for i in 1 2 3 4 5 6; do
		printf 'A %s\nB %s\n' "$i" "$i" | mq-send -q t
	done
	wait_for 30 lagj g '.lag == 0' || fail "not all settled: $(mq-lag t g)"
	# one start per id: the others were held, then duplicates
	assert_equal "$(grep -c '^start' "$BATS_TEST_TMPDIR/log")" 2
	lagj g '.duplicates_total == 10'
}

@test "--idempotent-by and --idempotent-window: bad values are usage errors, nothing changes" {
	mq-topic group t g >/dev/null
	before=$(db_state)
	run -64 --separate-stderr mq-topic group t g --idempotent-by body
	assert_equal "${stderr%%$'\n'*}" "mq-topic: invalid --idempotent-by 'body': want dedup, key, field:N (1 to 1000) or none"
	run -64 mq-topic group t g --idempotent-by field:0
	run -64 mq-topic group t g --idempotent-by field:1x
	run -64 mq-topic group t g --idempotent-by field:1001
	run -64 mq-topic group t g --idempotent-window 0s
	run -64 mq-topic group t g --idempotent-window soon
	assert_equal "$(db_state)" "$before"
}

@test "idempotent: an auto-acked message whose output failed comes again, not as a duplicate of itself" {
	mq-topic group t g --idempotent-by key >/dev/null
	mq-send -q -k a t one
	run -74 sh -c 'mq-recv -g g -A t >/dev/full'
	run -0 mq-recv -g g --format '%o %a %b\n' t
	assert_output '1 2 one'
	lagj g '.duplicates_total == 0'
}

@test "idempotent: a due row after duplicates in one claim is not left behind" {
	mq-topic group t g --idempotent-by key >/dev/null
	mq-send -q -k a t one
	mq-send -q -k a t two
	mq-send -q -k b t three
	run -0 mq-recv -g g -n 0 --format '%o %r\n' t
	assert_equal "$(cut -d' ' -f1 <<<"$output" | tr '\n' ' ')" "1 3 "
	r1=$(awk '$1 == 1 { print $2 }' <<<"$output")
	r3=$(awk '$1 == 3 { print $2 }' <<<"$output")
	mq-ack --fail --delay 0s "$r3"
	mq-ack "$r1"
	# 2 (due first) is a duplicate now; 3, due too, comes in this claim
	run -0 mq-recv -g g --format '%o %b\n' t
	assert_output '3 three'
}

@test "idempotent in an ordered group: a duplicate holds no key" {
	mq-topic group t g --ordered --idempotent-by field:1 >/dev/null
	mq-send -q -k K t 'A 1'
	recv_ack g
	mq-send -q -k K t 'A 2'
	mq-send -q -k K t 'B 3'
	run -0 mq-recv -g g --format '%o %b\n' t
	assert_output '3 B 3'
	lagj g '.duplicates_total == 1'
}
