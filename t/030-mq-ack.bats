#!/usr/bin/env bats
# mq-ack: settling deliveries by receipt, from arguments or stdin: ack,
# --fail [--delay], --dead [--reason], --extend; stale, unknown and
# malformed receipts; option conflicts.

load test_helper

one_line_error() {
	assert_equal "$status" "$1"
	assert_equal "$(printf '%s\n' "$stderr" | wc -l)" 1
	[[ $stderr == mq-ack:* ]]
}

# receive [ARGS...]: receive from topic t, print the receipts only
receive() {
	mq-recv "$@" t | cut -f1
}

# state OFFSET: "state|attempt" of the delivery of OFFSET in group default,
# or nothing when it is settled
state() {
	sql "SELECT state || '|' || attempt FROM delivery WHERE off = $1"
}

@test "ack from arguments settles every receipt given" {
	mq-send -q t a b c
	r=($(receive -n 3 --lease 1s))
	[ "${#r[@]}" -eq 3 ]
	run -0 --separate-stderr mq-ack "${r[0]}" "${r[2]}"
	assert_output ""
	assert_equal "$stderr" ""
	run -0 sql 'SELECT group_concat(off) FROM delivery'
	assert_output 2
	# after the lease only the unacked one comes back
	wait_for 15 bash -c 'mq-recv -n 0 --format "%o %a\n" t >>again'
	run -0 cat again
	assert_output '2 2'
	run -1 mq-recv -n 0 t
}

@test "ack from stdin: first field of each line (mq-recv | mq-ack)" {
	mq-send -q t a 'b with spaces' 'c	tab'
	run -0 --separate-stderr bash -c 'mq-recv -n 0 t | mq-ack'
	assert_equal "$stderr" ""
	run -0 sql 'SELECT count(*) FROM delivery'
	assert_output 0
	run -0 sql 'SELECT settled FROM grp'
	assert_output 3
	# blank lines and leading blanks are fine
	mq-send -q t d
	r=$(receive)
	run -0 bash -c "printf '\n  %s\tbody\n\n' '$r' | mq-ack"
	run -0 sql 'SELECT count(*) FROM delivery'
	assert_output 0
}

@test "a stale receipt: exit 1, named on stderr, the others applied" {
	mq-send -q t a b
	r=($(receive -n 2))
	run -0 mq-ack "${r[0]}"
	run -1 --separate-stderr mq-ack "${r[0]}" "${r[1]}"
	one_line_error 1
	[[ $stderr == *"${r[0]}"* ]]
	[[ $stderr == *stale* ]]
	assert_output ""
	run -0 sql 'SELECT count(*) FROM delivery'
	assert_output 0
	run -0 sql 'SELECT settled FROM grp'
	assert_output 2
}

@test "a stale receipt from stdin: exit 1, the others applied" {
	mq-send -q t a b
	r=($(receive -n 2))
	mq-ack "${r[0]}"
	run -1 --separate-stderr bash -c "printf '%s\n' ${r[0]} ${r[1]} | mq-ack"
	one_line_error 1
	[[ $stderr == *"${r[0]}"* ]]
	run -0 sql 'SELECT count(*) FROM delivery'
	assert_output 0
}

@test "a receipt of an older attempt is stale and changes nothing" {
	mq-send -q t a
	old=$(receive --lease 1s)
	wait_for 15 bash -c 'mq-recv t | cut -f1 >new; test -s new'
	new=$(cat new)
	[[ $new == t:default:1:2:* ]]
	run -1 --separate-stderr mq-ack "$old"
	one_line_error 1
	[[ $stderr == *"$old"* ]]
	run -0 state 1
	assert_output '1|2'
	run -0 mq-ack "$new"
	run -0 state 1
	assert_output ''
}

@test "receipts of an unknown topic, group or offset: exit 1, named" {
	mq-send -q t a
	r=$(receive)
	run -1 --separate-stderr mq-ack nosuch:default:1:1:0123abcd "$r"
	one_line_error 1
	[[ $stderr == *nosuch:default:1:1:0123abcd* ]]
	# the valid one went through
	run -0 sql 'SELECT count(*) FROM delivery'
	assert_output 0
	for bad in t:nogroup:1:1:0123abcd t:default:99:1:0123abcd; do
		run -1 --separate-stderr mq-ack "$bad"
		one_line_error 1
		[[ $stderr == *"$bad"* ]]
	done
}

@test "malformed receipts: exit 65, nothing applied, not even the valid ones" {
	mq-send -q t a
	r=$(receive)
	for bad in foo t:g:x:1:abcdefgh t:default:x:1:abcdef12 t:default:1:1 t:default:1:1:abcdefgh \
	    t:default:1:1:abcdef1 t:default:1:1:abcdef123 t:default:0:1:abcdef12 \
	    t:default:1:0:abcdef12 .t:default:1:1:abcdef12 t::1:1:abcdef12 \
	    'a b:default:1:1:abcdef12' ''; do
		run -65 --separate-stderr mq-ack "$r" "$bad"
		one_line_error 65
		run -0 state 1
		assert_output '1|1'
	done
	run -65 --separate-stderr mq-ack foo "$r"
	one_line_error 65
	run -65 --separate-stderr bash -c "printf '%s\n' '$r' 'not-a-receipt' | mq-ack"
	one_line_error 65
	run -0 mq-ack "$r"
	run -0 state 1
	assert_output ''
}

@test "--fail --delay 2s: not redelivered at once, but after the delay, attempt 2" {
	mq-send -q t a
	r=$(receive)
	start=$(date +%s%3N)
	run -0 --separate-stderr mq-ack --fail --delay 2s "$r"
	assert_equal "$stderr" ""
	run -1 mq-recv t
	run -0 state 1
	assert_output '0|1'
	wait_for 15 bash -c 'mq-recv --format "%o %a %b\n" t >>again'
	elapsed=$(( $(date +%s%3N) - start ))
	run -0 cat again
	assert_output '1 2 a'
	[ "$elapsed" -ge 1900 ]
}

@test "--fail without --delay waits for the group's backoff (10s first)" {
	mq-send -q t a
	r=$(receive)
	run -0 mq-ack --fail --reason 'try later' "$r"
	run -1 mq-recv t
	run -0 sql "SELECT state, reason,
	    due - CAST(strftime('%s', 'now') AS INTEGER) * 1000 > 5000 FROM delivery"
	assert_output '0|try later|1'
}

@test "--dead --reason TEXT: a dead letter with that reason, never redelivered" {
	mq-send -q t a b
	r=($(receive -n 2 --lease 1s))
	run -0 --separate-stderr mq-ack --dead --reason 'bad input: no id' "${r[0]}"
	assert_equal "$stderr" ""
	run -0 mq-ack --dead "${r[1]}"
	run -0 sql 'SELECT off, state, reason FROM delivery ORDER BY off'
	assert_output $'1|2|bad input: no id\n2|2|dead-lettered'
	# both leases are over by the time a 1s lease would have expired
	sleep 1.5
	run -1 mq-recv -n 0 t
	run -1 mq-ack "${r[0]}"
}

@test "--extend 10s keeps a 1s lease from running out" {
	mq-send -q t a b
	r=($(receive -n 2 --lease 1s))
	run -0 --separate-stderr mq-ack --extend 10s "${r[0]}"
	assert_equal "$stderr" ""
	# the other lease runs out: wait for its redelivery, then some more
	wait_for 15 bash -c 'mq-recv -n 0 --format "%o %a\n" t >>again'
	sleep 1
	run -1 mq-recv -n 0 t
	run -0 cat again
	assert_output '2 2'
	run -0 state 1
	assert_output '1|1'
	# the receipt is still good: the lease is extended, not renewed
	run -0 mq-ack "${r[0]}"
	run -0 state 1
	assert_output ''
}

@test "option conflicts are usage errors (64), database untouched" {
	for args in "--fail --dead" "--fail --extend 1s" "--dead --extend 1s" \
	    "--delay 1s" "--dead --delay 1s" "--extend 1s --delay 1s" \
	    "--reason x" "--extend 1s --reason x" "--fail --delay soon" \
	    "--extend never"; do
		run -64 --separate-stderr mq-ack $args t:default:1:1:0123abcd
		one_line_error 64
	done
	[ ! -e "$MQ_DB" ]
	run -64 --separate-stderr mq-ack --bogus
	[[ $stderr == *"usage: mq-ack"* ]]
	run -0 --separate-stderr mq-ack -h
	[[ $output == "usage: mq-ack"* ]]
	assert_equal "$stderr" ""
}
