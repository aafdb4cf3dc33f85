#!/usr/bin/env bats
# mq-ack: settling deliveries by receipt, from arguments or stdin: ack,
# --fail [--delay], --dead [--reason], --extend; stale, unknown and
# malformed receipts; option conflicts.
# shellcheck disable=SC2154 # stderr is set by bats' run --separate-stderr

load test_helper

one_line_error() {
	assert_equal "$status" "$1"
	# a usage error adds the synopsis after its one line
	assert_equal "$(printf '%s\n' "${stderr%%$'\n'usage: *}" | wc -l)" 1
	[[ $stderr == mq-ack:* ]]
}

# receive [ARGS...]: receive from topic t, print the receipts only, one a
# line; fails as mq-recv does
receive() {
	mq-recv --format '%r\n' "$@" t
}

# state OFFSET: "state|attempt" of the delivery of OFFSET in group default,
# or nothing when it is settled
state() {
	sql "SELECT state || '|' || attempt FROM delivery WHERE off = $1"
}

@test "ack from arguments settles every receipt given" {
	mq-send -q t a b c
	run -0 receive -n 3 --lease 1s
	rs=("${lines[@]}")
	assert_equal "${#rs[@]}" 3
	run -0 --separate-stderr mq-ack "${rs[0]}" "${rs[2]}"
	assert_output ""
	assert_equal "$stderr" ""
	run -0 sql 'SELECT off FROM delivery'
	assert_output 2
	run -0 sql 'SELECT settled FROM grp'
	assert_output 2
	# after the lease only the unacked one comes back
	wait_for 60 bash -c 'mq-recv -n 0 --format "%o %a\n" t >>again'
	run -0 cat again
	assert_output '2 2'
	run -1 mq-recv -n 0 t
}

@test "ack from stdin: first field of each line (mq-recv | mq-ack)" {
	mq-send -q t a 'b with spaces' 'c	tab'
	run -0 --separate-stderr bash -c 'set -o pipefail; mq-recv -n 0 t | mq-ack'
	assert_output ""
	assert_equal "$stderr" ""
	run -0 sql 'SELECT count(*) FROM delivery'
	assert_output 0
	run -0 sql 'SELECT settled FROM grp'
	assert_output 3
	# blank lines and leading blanks are fine
	mq-send -q t d
	r=$(receive)
	[[ $r == t:default:4:1:* ]] || fail "receipt '$r' is not of offset 4"
	run -0 --separate-stderr bash -c "printf '\n  %s\tbody\n\n' '$r' | mq-ack"
	assert_equal "$stderr" ""
	run -0 sql 'SELECT count(*) FROM delivery'
	assert_output 0
	run -0 sql 'SELECT settled FROM grp'
	assert_output 4
}

@test "a stale receipt: exit 1, named on stderr, the others applied" {
	mq-send -q t a b
	run -0 receive -n 2
	rs=("${lines[@]}")
	assert_equal "${#rs[@]}" 2
	run -0 mq-ack "${rs[0]}"
	run -1 --separate-stderr mq-ack "${rs[0]}" "${rs[1]}"
	one_line_error 1
	[[ $stderr == *"${rs[0]}"* ]]
	[[ $stderr == *stale* ]]
	assert_output ""
	run -0 sql 'SELECT count(*) FROM delivery'
	assert_output 0
	run -0 sql 'SELECT settled FROM grp'
	assert_output 2
}

@test "a stale receipt from stdin: exit 1, the others applied" {
	mq-send -q t a b
	run -0 receive -n 2
	rs=("${lines[@]}")
	assert_equal "${#rs[@]}" 2
	mq-ack "${rs[0]}"
	run -1 --separate-stderr bash -c "printf '%s\n' '${rs[0]}' '${rs[1]}' | mq-ack"
	one_line_error 1
	[[ $stderr == *"${rs[0]}"* ]]
	run -0 sql 'SELECT count(*) FROM delivery'
	assert_output 0
	run -0 sql 'SELECT settled FROM grp'
	assert_output 2
}

@test "a receipt of an older attempt is stale and changes nothing" {
	mq-send -q t a
	old=$(receive --lease 1s)
	[[ $old == t:default:1:1:* ]] || fail "first receipt: '$old'"
	wait_for 60 bash -c 'mq-recv --format "%r\n" t >new'
	new=$(cat new)
	[[ $new == t:default:1:2:* ]] || fail "second receipt: '$new'"
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
	run -0 sql 'SELECT settled FROM grp'
	assert_output 1
	for bad in t:nogroup:1:1:0123abcd t:default:99:1:0123abcd; do
		run -1 --separate-stderr mq-ack "$bad"
		one_line_error 1
		[[ $stderr == *"$bad"* ]]
	done
	# the highest offset there is, in each way to settle, beside a
	# valid one (PostgreSQL overflowed looking for its run of lease)
	big=t:default:9223372036854775807:1:00000000
	for how in --ack --fail --dead --extend; do
		mq-send -q t b
		r=$(receive)
		case $how in
		--ack)		run -1 --separate-stderr mq-ack "$big" "$r" ;;
		--extend)	run -1 --separate-stderr mq-ack --extend 1h "$big" "$r" ;;
		*)		run -1 --separate-stderr mq-ack "$how" "$big" "$r" ;;
		esac
		one_line_error 1
		[[ $stderr == *"unknown receipt $big"* ]] || fail "$how: $stderr"
		# the valid one applied: not in flight, or for an hour
		run -0 sql "SELECT count(*) FROM delivery WHERE state = 1 AND
		    due < $(( $(date +%s) + 600 ))000"
		assert_output 0
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

@test "--fail --delay 5s: not redelivered at once, but after the delay, attempt 2" {
	# 5s, so that "not at once" holds even on a slow machine
	mq-send -q t a
	r=$(receive)
	start=$(now_ms)
	run -0 --separate-stderr mq-ack --fail --delay 5s "$r"
	assert_output ""
	assert_equal "$stderr" ""
	run -1 mq-recv t
	run -0 state 1
	assert_output '0|1'
	wait_for 60 bash -c 'mq-recv --format "%o %a %b\n" t >>again'
	elapsed=$(( $(now_ms) - start ))
	run -0 cat again
	assert_output '1 2 a'
	[ "$elapsed" -ge 4900 ] || fail "redelivered after ${elapsed}ms"
}

@test "--fail without --delay waits for the group's backoff (10s first)" {
	mq-send -q t a
	r=$(receive)
	before=$(now_ms)
	run -0 mq-ack --fail --reason 'try later' "$r"
	after=$(now_ms)
	run -1 mq-recv t
	# due 10s after the ack, whenever the ack ran (no clock race)
	run -0 sql "SELECT state, attempt, reason,
	    CASE WHEN due BETWEEN $before + 10000 AND $after + 10000 THEN 1
	    ELSE 0 END FROM delivery"
	assert_output '0|1|try later|1'
}

@test "--dead --reason TEXT: a dead letter with that reason, never redelivered" {
	mq-send -q t a b
	run -0 receive -n 2 --lease 1s
	rs=("${lines[@]}")
	assert_equal "${#rs[@]}" 2
	run -0 --separate-stderr mq-ack --dead --reason 'bad input: no id' "${rs[0]}"
	assert_equal "$stderr" ""
	run -0 mq-ack --dead "${rs[1]}"
	run -0 sql 'SELECT off, state, reason FROM delivery ORDER BY off'
	assert_output $'1|2|bad input: no id\n2|2|dead-lettered'
	# the 1s leases taken before this sleep are over after it
	sleep 1.5
	run -1 mq-recv -n 0 t
	run -1 --separate-stderr mq-ack "${rs[0]}"
	[[ $stderr == *"${rs[0]}"* ]]
	# still dead letters, untouched
	run -0 sql 'SELECT off, state, attempt FROM delivery ORDER BY off'
	assert_output $'1|2|1\n2|2|1'
}

@test "--extend 60s keeps a 1s lease from running out" {
	# 60s, far longer than this test takes even on a slow machine
	mq-send -q t a b
	run -0 receive -n 2 --lease 1s
	rs=("${lines[@]}")
	assert_equal "${#rs[@]}" 2
	run -0 --separate-stderr mq-ack --extend 60s "${rs[0]}"
	assert_output ""
	assert_equal "$stderr" ""
	# the other lease runs out: wait for its redelivery, then some more
	wait_for 60 bash -c 'mq-recv -n 0 --format "%o %a\n" t >>again'
	sleep 1
	run -1 mq-recv -n 0 t
	run -0 cat again
	assert_output '2 2'
	run -0 state 1
	assert_output '1|1'
	# the receipt is still good: the lease is extended, not renewed
	run -0 mq-ack "${rs[0]}"
	run -0 state 1
	assert_output ''
}

@test "option conflicts are usage errors (64), database untouched" {
	for args in "--fail --dead" "--fail --extend 1s" "--dead --extend 1s" \
	    "--delay 1s" "--dead --delay 1s" "--extend 1s --delay 1s" \
	    "--reason x" "--extend 1s --reason x" "--fail --delay soon" \
	    "--extend never"; do
		# shellcheck disable=SC2086 # $args: options to split into words
		run -64 --separate-stderr mq-ack $args t:default:1:1:0123abcd
		one_line_error 64
	done
	no_db
	run -64 --separate-stderr mq-ack --bogus
	[[ $stderr == *"usage: mq-ack"* ]]
	run -0 --separate-stderr mq-ack -h
	[[ $output == "usage: mq-ack"* ]]
	assert_equal "$stderr" ""
}

@test "an old receipt and the live one of the same message, in one batch: the live one settles" {
	mq-send -q t one
	run -0 receive --lease 1s
	old=$output
	sleep 2	# the lease runs out: attempt 2 gets a new receipt
	run -0 receive
	live=$output
	[ "$old" != "$live" ] || fail "the same receipt twice: $old"
	run -1 --separate-stderr mq-ack "$old" "$live"
	assert_equal "$stderr" "mq-ack: stale receipt $old: nothing changed"
	run -0 sql 'SELECT count(*) FROM delivery'
	assert_output 0
}

@test "a batch of receipts of many groups settles in one go: fails, and acks of ordered groups" {
	# (PostgreSQL settles a batch in a pipeline, with the commit, its
	# flush and the wake-ups of the waiters after it: the statements of
	# twelve groups (six with acks and fails) and a commit of five ran
	# out of room, 70 "pipeline full")
	local i
	for i in $(seq 12); do
		mq-topic group "t$i" o --ordered >/dev/null
		mq-send -q -k k "t$i" "a$i" "b$i"
		mq-recv -g o --format '%r\n' "t$i" >>fail
		mq-recv -g g --format '%r\n' "t$i" >>plain
	done
	run -0 --separate-stderr mq-ack --fail --delay 0 <fail
	assert_equal "$stderr" ""
	for i in $(seq 12); do
		mq-recv -g o --format '%r\n' "t$i" >>ack
	done
	run -0 --separate-stderr mq-ack <ack
	assert_equal "$stderr" ""
	run -0 --separate-stderr mq-ack <plain
	assert_equal "$stderr" ""
	run -0 sql "SELECT count(*) FROM delivery"
	assert_output 0
	run -0 sql "SELECT count(*) FROM history WHERE event = 'acked'"
	assert_output 24
}

@test "forty receipts in one batch, one of them twice and one stale: each live one settles once, with its history" {
	# (SQLite settles the acks of a group 16 at a time)
	local back
	seq 40 | mq-send -q t
	run -0 receive -n 40
	rs=("${lines[@]}")
	assert_equal "${#rs[@]}" 40
	mq-ack "${rs[0]}"
	# last to first, the repeat in the middle
	mapfile -t back < <(printf '%s\n' "${rs[@]}" | tac)
	run -1 --separate-stderr bash -c 'printf "%s\n" "$@" | mq-ack' - \
	    "${back[@]:0:20}" "${rs[5]}" "${back[@]:20}"
	assert_equal "$stderr" "mq-ack: stale receipt ${rs[5]}: nothing changed
mq-ack: stale receipt ${rs[0]}: nothing changed"
	run -0 sql 'SELECT count(*) FROM delivery'
	assert_output 0
	run -0 sql 'SELECT settled FROM grp'
	assert_output 40
	run -0 sql "SELECT count(*), count(DISTINCT off), min(off), max(off)
	    FROM history WHERE event = 'acked' AND attempt = 1 AND
	    host IS NOT NULL AND pid > 0 AND since > 0 AND dhost IS NOT NULL
	    AND dpid > 0"
	assert_output '40|40|1|40'
}

@test "receipts of two groups taken in turns, one of them twice: each group's acks settle, each once" {
	# (SQLite gathers a group's acks past the other group's receipts)
	local a b i
	seq 20 | mq-send -q t
	mapfile -t a < <(mq-recv -g ga -n 0 --format '%r\n' t)
	mapfile -t b < <(mq-recv -g gb -n 0 --format '%r\n' t)
	assert_equal "${#a[@]} ${#b[@]}" "20 20"
	for i in $(seq 0 19); do
		printf '%s\n%s\n' "${a[i]}" "${b[i]}"
		[ "$i" != 9 ] || printf '%s\n' "${a[3]}"
	done >turns
	run -1 --separate-stderr mq-ack <turns
	assert_equal "$stderr" "mq-ack: stale receipt ${a[3]}: nothing changed"
	run -0 sql 'SELECT count(*) FROM delivery'
	assert_output 0
	run -0 sql "SELECT name, settled FROM grp WHERE name LIKE 'g_' ORDER BY name"
	assert_output "ga|20
gb|20"
	run -0 sql "SELECT count(*), count(DISTINCT grp || ':' || off) FROM history
	    WHERE event = 'acked'"
	assert_output '40|40'
}
