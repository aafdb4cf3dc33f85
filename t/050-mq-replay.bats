#!/usr/bin/env bats
# 050-mq-replay.bats: mq-replay reads the log without touching any group
# (ranges, keys, counts, times, output forms, -f), moves a group's cursor
# (--from-offset, --since, --shift, --earliest, --latest, --dry-run),
# redrives dead letters and traces one message.
#
# Receipts go to mq-ack as arguments rather than on stdin, so these tests
# do not lean on mq-ack's stdin reader.  Every wait is bounded, and every
# background process is started with bg, so teardown kills it by its pid.

# shellcheck disable=SC2154 # stderr, stderr_lines: set by run --separate-stderr
load test_helper
bats_require_minimum_version 1.5.0

teardown() {
	kill_bg
}

# offsets GROUP: receive every available message of t in GROUP (leased,
# not acked) and print the offsets, space separated; empty if none.
offsets() {
	mq-recv -g "$1" -n 0 --format '%o ' t || true
}

# state: everything a group's progress lives in, for before/after checks.
state() {
	db_state
}

# one_error PROG: the last run printed exactly one line on stderr, from PROG.
one_error() {
	# a usage error adds the synopsis after its one line
	local e=${stderr%%$'\n'usage: *}
	[[ $e != *$'\n'* ]] || fail "want one line on stderr, got: $stderr"
	[[ $e == "$1: "* ]] ||
	    fail "want a line from $1 on stderr, got: $stderr"
}

# has TEXT: f.out, a follower's output, holds TEXT.
has() {
	grep -qF -- "$1" f.out
}

# lines_are N: f.out has at least N lines (read without forking, for
# timing).
lines_are() {
	local have
	mapfile -t have <f.out
	[ "${#have[@]}" -ge "$1" ]
}

send10() {
	mq-send -q t m1 m2 m3 m4 m5 m6 m7 m8 m9 m10
}

# --- read mode ---------------------------------------------------------

@test "a range prints exactly those messages as OFFSET<TAB>BODY and changes no group" {
	send10
	# groups in every kind of state: acked, in flight, retrying, dead,
	# not started
	recv_ack g 3
	mq-recv -g g --format '%r' t >/dev/null
	r=$(mq-recv -g g --format '%r' t)
	mq-ack --fail --delay 1h "$r"
	r=$(mq-recv -g g --format '%r' t)
	mq-ack --dead "$r"
	mq-topic group t h >/dev/null
	before=$(state)
	[ "$(sql 'SELECT count(*) FROM delivery')" = 3 ]

	run -0 mq-replay --from-offset 3 --to-offset 5 t
	assert_output "$(printf '3\tm3\n4\tm4\n5\tm5')"
	run -0 mq-replay --from-offset 9 t
	assert_output "$(printf '9\tm9\n10\tm10')"
	run -0 mq-replay --to-offset 2 t
	assert_output "$(printf '1\tm1\n2\tm2')"
	run -0 mq-replay t
	[ "${#lines[@]}" = 10 ]
	[ "${lines[9]}" = "$(printf '10\tm10')" ]
	[ "$(state)" = "$before" ]
	# and the groups carry on where they were
	[ "$(offsets g)" = "7 8 9 10 " ]
	[ "$(offsets h)" = "1 2 3 4 5 6 7 8 9 10 " ]
}

@test "a full disk on stdout: 74 and the cause, from mq-replay and mq-send alike" {
	# (on PostgreSQL, closing the connection cleared errno before the
	# last flush's check: "write error: Success")
	[ -w /dev/full ] || skip "no /dev/full"
	mq-send -q t a b
	run -74 --separate-stderr sh -c 'mq-replay t >/dev/full'
	assert_equal "$stderr" "mq-replay: write error: No space left on device"
	run -74 --separate-stderr sh -c 'mq-send t c >/dev/full'
	assert_equal "$stderr" "mq-send: write error: No space left on device"
	assert_equal "$(mq-replay --format '%b\n' t)" "$(printf 'a\nb\nc')"
}

@test "bodies are escaped so each message is one line" {
	mq-send -q t "$(printf 'two\nlines\tand a \\ backslash')" "$(printf 'bin\001')"
	run -0 mq-replay t
	[ "${#lines[@]}" = 2 ]
	[ "${lines[0]}" = "$(printf '1\t')two\\nlines\\tand a \\\\ backslash" ]
	[ "${lines[1]}" = "$(printf '2\t')bin\\001" ]
}

@test "escapes: every kind of byte, in a body, a key and JSON" {
	# printable ASCII and whole UTF-8 characters go as they are, in runs;
	# the rest is escaped, each byte on its own
	printf 'a\\b\tc\rd\001e\177f\377g\303\251\342\202\254\360\237\230\200h\342\202i\355\240\200j\n\0' |
	    mq-send -q -0 -k "$(printf 'k\001"\\\303\251\177\t')" t
	run -0 mq-replay --format '%k|%b\n' t
	assert_output 'k\001"\\é\177\t|a\\b\tc\rd\001e\177f\377gé€😀h\342\202i\355\240\200j\n'
	run -0 mq-replay --json t
	assert_output --partial '"key":"k\u0001\"\\é\u007f\t"'
	# not UTF-8: the body in base64, whole
	assert_output --partial "\"body\":\"$(printf 'a\\b\tc\rd\001e\177f\377g\303\251\342\202\254\360\237\230\200h\342\202i\355\240\200j\n' | base64 -w0)\",\"base64\":true"
}

@test "-k KEY prints only that key's messages" {
	mq-send -q -k a t a1
	mq-send -q -k b t b1
	mq-send -q t plain
	mq-send -q -k a t a2
	run -0 mq-replay -k a t
	assert_output "$(printf '1\ta1\n4\ta2')"
	run -0 mq-replay -k b t
	assert_output "$(printf '2\tb1')"
	run -0 mq-replay -k a --from-offset 2 t
	assert_output "$(printf '4\ta2')"
	run -1 mq-replay -k nosuch t
	assert_output ''
}

@test "-n N prints at most N messages" {
	send10
	run -0 mq-replay -n 3 t
	assert_output "$(printf '1\tm1\n2\tm2\n3\tm3')"
	run -0 mq-replay -n 2 --from-offset 5 t
	assert_output "$(printf '5\tm5\n6\tm6')"
	run -0 mq-replay -n 50 --from-offset 9 t
	assert_output "$(printf '9\tm9\n10\tm10')"
	run -0 mq-replay -n 0 t
	[ "${#lines[@]}" = 10 ]
}

@test "-n counts past the reader's chunk" {
	seq 1 1500 | xargs mq-send -q t
	run -0 mq-replay -n 1100 t
	[ "${#lines[@]}" = 1100 ]
	[ "${lines[1099]}" = "$(printf '1100\t1100')" ]
	run -0 mq-replay --from-offset 1000 t
	[ "${#lines[@]}" = 501 ]
	[ "${lines[500]}" = "$(printf '1500\t1500')" ]
}

@test "--since and --until select by time: @EPOCH, ISO 8601, durations" {
	mq-send -q t early
	mq-send -q t late
	# the first message ten minutes back (times still never decrease
	# along offsets), so that no slow start of a program below can carry
	# "now" across the gap between the two
	sql 'UPDATE msg SET ts = ts - 600000, due = due - 600000 WHERE off = 1'
	ta=$(sql 'SELECT ts FROM msg WHERE off = 1')
	tb=$(sql 'SELECT ts FROM msg WHERE off = 2')
	T=$((ta / 1000 + 1))	# a whole second after the first message
	[ "$ta" -lt $((T * 1000)) ]
	[ "$tb" -gt $((T * 1000)) ]

	run -0 mq-replay --since "@$T" t
	assert_output "$(printf '2\tlate')"
	run -0 mq-replay --until "@$T" t
	assert_output "$(printf '1\tearly')"
	iso=$(date -u -d "@$T" +%Y-%m-%dT%H:%M:%SZ)
	run -0 mq-replay --since "$iso" t
	assert_output "$(printf '2\tlate')"
	run -0 mq-replay --until "$iso" t
	assert_output "$(printf '1\tearly')"
	# durations: that long ago
	run -0 mq-replay --since 1h t
	assert_output "$(printf '1\tearly\n2\tlate')"
	run -1 mq-replay --until 1h t
	assert_output ''
	# a duration that means "just after the first message" (good while
	# mq-replay starts within the gap of ten minutes)
	ago=$(( $(now_ms) - ta - 1 ))
	run -0 mq-replay --since "${ago}ms" t
	assert_output "$(printf '2\tlate')"
	# both ends, and with a range
	run -0 mq-replay --since 1h --until "@$T" t
	assert_output "$(printf '1\tearly')"
	run -1 mq-replay --since "@$T" --to-offset 1 t
	assert_output ''
	# a malformed time is bad data
	run --separate-stderr -65 mq-replay --since tomorrow t
	one_error mq-replay
	[[ $stderr == *tomorrow* ]]
	[ -z "$output" ]
}

@test "--json prints JSON lines that jq reads, with key, size, time and body" {
	mq-send -q -k K t "$(printf 'a "quoted"\ttab')"
	mq-send -q t "$(printf 'caf\303\251')"
	mq-send -q t "$(printf 'bin\377x')"
	run -0 mq-replay --json t
	[ "${#lines[@]}" = 3 ]
	run -0 bash -o pipefail -c 'mq-replay --json t | jq -c "[.topic, .offset, .key, .size, .body, .base64]"'
	b64=$(printf 'bin\377x' | base64)
	assert_output "$(printf '%s\n' '["t",1,"K",14,"a \"quoted\"\ttab",null]' \
	    '["t",2,null,5,"café",null]' '["t",3,null,5,"'"$b64"'",true]')"
	# the binary body decodes to the bytes sent
	run -0 bash -o pipefail -c 'mq-replay --json --from-offset 3 t | jq -r .body | base64 -d >got'
	printf 'bin\377x' >want
	cmp got want
	# the time is the message's
	ts=$(sql 'SELECT ts FROM msg WHERE off = 1')
	run -0 bash -o pipefail -c 'mq-replay --json -n 1 t | jq -r ".epoch_ms, .time"'
	[ "${#lines[@]}" = 2 ]
	[ "${lines[0]}" = "$ts" ]
	[ "${lines[1]}" = "$(date -u -d "@$((ts / 1000))" +%Y-%m-%dT%H:%M:%S).$(printf %03d $((ts % 1000)))Z" ]
}

@test "--format prints the % directives" {
	mq-send -q -k K t one
	mq-send -q t two
	run -0 mq-replay --format '%o %b\n' t
	assert_output "$(printf '1 one\n2 two')"
	run -0 mq-replay --format '%T:%o:%k:%s:%b\n' t
	assert_output "$(printf 't:1:K:3:one\nt:2::3:two')"
	run --separate-stderr -64 mq-replay --format '%z' t
	one_error mq-replay
	[ -z "$output" ]
}

@test "-0 writes NUL-terminated records with the body raw" {
	mq-send -q t "$(printf 'a\nb')" c
	mq-replay -0 t >out
	# two records, each ending in NUL, the newline of the first kept
	[ "$(tr -cd '\0' <out | wc -c)" = 2 ]
	[ "$(tail -c 1 out | od -An -c | tr -d ' ')" = '\0' ]
	mapfile -d '' rec <out
	[ "${#rec[@]}" = 2 ]
	[ "${rec[0]#*$'\t'}" = "$(printf 'a\nb')" ]
	[ "${rec[1]#*$'\t'}" = c ]
}

@test "-0 records start with the offset, as the line output does" {
	# as mq-recv -0 writes RECEIPT<TAB>BODY<NUL>, with the offset in
	# the receipt's place (empty before 67c8ef2)
	mq-send -q t a b
	mq-replay -0 t >out
	printf '1\ta\0002\tb\000' >want
	cmp out want
}

@test "a missing topic is 66; a missing database is 66 and is not created" {
	mq-send -q t m
	run --separate-stderr -66 mq-replay nosuch
	one_error mq-replay
	[[ $stderr == *nosuch* ]]
	[ -z "$output" ]
	run --separate-stderr -66 mq-replay -d "$BATS_TEST_TMPDIR/none.db" t
	one_error mq-replay
	[ ! -e "$BATS_TEST_TMPDIR/none.db" ]
	drop_db
	run --separate-stderr -66 mq-replay t
	one_error mq-replay
	no_db
	run --separate-stderr -66 mq-replay --trace 1 t
	one_error mq-replay
	no_db
	run --separate-stderr -66 mq-replay -g g --earliest t
	one_error mq-replay
	no_db
}

@test "an empty selection exits 1 and prints nothing" {
	mq-topic create t
	run -1 mq-replay t
	assert_output ''
	send10
	run -1 mq-replay --from-offset 11 t
	assert_output ''
	run -1 mq-replay --from-offset 5 --to-offset 4 t
	assert_output ''
}

@test "--since and --until take now, today and yesterday (00:00 local time)" {
	export TZ=Asia/Kolkata	# local midnight is not UTC's
	y0=$(date -d 'yesterday 00:00' +%s)
	t0=$(date -d 'today 00:00' +%s)
	mq-send -q t y-1ms y t-1ms t
	# times never decrease along offsets: just before and at each midnight
	ts="CASE off WHEN 1 THEN $((y0 * 1000 - 1)) WHEN 2 THEN $((y0 * 1000))
	    WHEN 3 THEN $((t0 * 1000 - 1)) ELSE $((t0 * 1000)) END"
	sql "UPDATE msg SET ts = $ts, due = $ts"
	mq-send -q t now
	run -0 mq-replay --since today t
	assert_output "$(printf '4\tt\n5\tnow')"
	run -0 mq-replay --until today t
	assert_output "$(printf '1\ty-1ms\n2\ty\n3\tt-1ms\n4\tt')"
	run -0 mq-replay --since yesterday --until today --format '%o ' t
	assert_output '2 3 4 '
	run -0 mq-replay --until yesterday t
	assert_output "$(printf '1\ty-1ms\n2\ty')"
	run -1 mq-replay --since now t
	assert_output ''
	run -0 mq-replay --since today --until now --format '%o ' t
	assert_output '4 5 '
	[ "$(date -d 'today 00:00' +%s)" = "$t0" ] ||
	    skip "midnight passed during the test"
	run -65 --separate-stderr mq-replay --since noon t
	one_error mq-replay
}

@test "-f prints what is there, then messages sent after it started, until SIGTERM" {
	mq-send -q t old
	bg f.out mq-replay -f t
	pid=$BG
	wait_for 30 has old
	mq-send -q t new1
	wait_for 30 has new1
	mq-send -q t new2 new3
	wait_for 30 has new3
	kill -0 "$pid"	# still following
	kill -TERM "$pid"
	finish "$pid" 30
	[ "$ST" = 0 ]
	[ "$(cat f.out)" = "$(printf '1\told\n2\tnew1\n3\tnew2\n4\tnew3')" ]
	# it read: no group, no delivery
	[ "$(sql 'SELECT count(*) FROM grp')" = 0 ]
	[ "$(sql 'SELECT count(*) FROM delivery')" = 0 ]
}

@test "-f wakes within milliseconds of a commit, not on its next look" {
	# Without a wake-up on the commit, the follower would find a new
	# message only on its next look (SAFETY_MS in wait.c): each send
	# comes just after one, so that is most of a second later (five on
	# PostgreSQL), every time.  Woken by the commit, it is a few ms.  The
	# first of up to three under 500ms passes, so two stalls of a busy
	# machine are forgiven; the clock is read without forking.
	mq-send -q t first
	bg f.out mq-replay -f --format '%o\n' t
	pid=$BG
	wait_for 30 lines_are 1
	sleep 1		# asleep in its wait
	lat=()
	for k in 2 3 4; do
		after_look "$pid"
		mq-send -q t "m$k"
		t0=${EPOCHREALTIME//[!0-9]/}
		until lines_are "$k"; do
			[ $(( ${EPOCHREALTIME//[!0-9]/} - t0 )) -lt 10000000 ] || break
			sleep 0.01
		done
		lat+=($(( (${EPOCHREALTIME//[!0-9]/} - t0) / 1000 )))
		[ "${lat[-1]}" -ge 500 ] || break
	done
	echo "# latencies after the commit: ${lat[*]} ms" >&3
	[ "${lat[-1]}" -lt 500 ] ||
	    fail "latencies ${lat[*]}ms (safety look: 1s)"
	wait_for 30 lines_are "$k"
	kill -TERM "$pid"
	finish "$pid" 30
	[ "$ST" = 0 ]
	[ "$(cat f.out)" = "$(seq "$k")" ]
}

@test "-f with --from-offset and a key follows only the matching messages" {
	mq-send -q -k a t a1
	mq-send -q -k b t b1
	bg f.out mq-replay -f -k a --from-offset 2 --format '%o %b\n' t
	pid=$BG
	mq-send -q -k b t b2
	mq-send -q -k a t a2
	wait_for 30 has a2
	kill -TERM "$pid"
	finish "$pid" 30
	[ "$ST" = 0 ]
	[ "$(cat f.out)" = '4 a2' ]
}

# --- moving a group ----------------------------------------------------

@test "-g --from-offset rewinds a group: it receives those messages again" {
	send10
	recv_ack g
	run -1 mq-recv -g g t
	run -0 mq-replay -g g --from-offset 4 t
	[[ $output == *"t/g"* && $output == *"11 -> 4"* && $output == *"7 messages"* ]]
	[ "${#lines[@]}" = 1 ]
	[ "$(sql 'SELECT pos FROM grp')" = 4 ]
	[ "$(offsets g)" = "4 5 6 7 8 9 10 " ]
	run -1 mq-recv -g g t
}

@test "-g --dry-run says the same and changes nothing" {
	send10
	recv_ack g
	mq-topic group t h >/dev/null
	run -0 mq-replay -g g --from-offset 4 t --dry-run
	assert_output 't/g: would move position 11 -> 4: 7 messages would come again, 0 would be skipped, 0 unsettled deliveries would be dropped'
	before=$(state)
	for move in "-g g --from-offset 4" "-g g --earliest" "-g g --shift -3" \
	    "-g g --since 1h" "-g h --latest" "-g h --shift 5"; do
		read -ra args <<<"$move"
		run -0 mq-replay --dry-run "${args[@]}" t
		[[ $output == "t/"?": would move position "*" -> "*" would come again, "*" would be skipped, "*" would be dropped" ]]
		[ "$(state)" = "$before" ]
	done
	run -1 mq-recv -g g t
	# the real move does what the dry run said, and says it did
	run -0 mq-replay -g g --from-offset 4 t
	assert_output 't/g: position 11 -> 4: 7 messages come again, 0 skipped, 0 unsettled deliveries dropped'
	# one message, one delivery: no plural
	mq-recv -g g --format '%o' t >/dev/null
	run -0 mq-replay -g g --dry-run --shift -1 t
	assert_output 't/g: would move position 5 -> 4: 1 message would come again, 0 would be skipped, 1 unsettled delivery would be dropped'
	run -0 mq-replay -g g --shift -1 t
	assert_output 't/g: position 5 -> 4: 1 message comes again, 0 skipped, 1 unsettled delivery dropped'
}

@test "--shift -3 moves back three; --earliest to the start" {
	send10
	recv_ack g
	run -0 mq-replay -g g --shift -3 t
	[[ $output == *"11 -> 8"* && $output == *"3 messages"* ]]
	run -0 mq-recv -g g -n 0 --format '%o %r\n' t
	[ "$(awk '{ print $1 }' <<<"$output" | xargs)" = "8 9 10" ]
	mapfile -t receipts < <(awk '{ print $2 }' <<<"$output")
	[ "${#receipts[@]}" = 3 ]
	mq-ack "${receipts[@]}"
	[ "$(sql 'SELECT count(*) FROM delivery')" = 0 ]
	run -0 mq-replay -g g --earliest t
	[[ $output == *"11 -> 1"* && $output == *"10 messages"* ]]
	[ "$(offsets g)" = "1 2 3 4 5 6 7 8 9 10 " ]
	run -1 mq-recv -g g t
}

@test "--latest skips all there is, in flight and retrying included: nothing to receive afterwards" {
	# --latest drops the in-flight and retrying deliveries before the
	# end even when the group's position is already there (every
	# message handed out), just as it does when there is one more
	# message to skip: nothing comes back when their lease or backoff
	# runs out.  Only a --shift that lands where the group is leaves it
	# "unchanged".
	# SPEC: --latest moves the group's cursor so it skips ahead.
	#
	# two topics: t with no message after the ones in flight, u with
	# one more; --latest must leave nothing to receive in both
	for topic in t u; do
		mq-send -q "$topic" m1 m2 m3
		run -0 mq-recv -g g -n 0 --lease 1s --format '%r\n' "$topic"
		[ "${#lines[@]}" = 3 ]
		mq-ack --fail --delay 1s "${lines[0]}"
	done
	[ "$(sql 'SELECT count(*) FROM delivery')" = 6 ]
	mq-send -q u m4
	run -0 mq-replay -g g --latest t
	[[ $output == *"4 -> 4"* && $output == *"3 unsettled"* ]]
	run -0 mq-replay -g g --latest u
	[[ $output == *"4 -> 5"* && $output == *"1 skipped"* && $output == *"3 unsettled"* ]]
	sleep 1.5	# past the leases and the retry
	run -1 mq-recv -g g -n 0 t
	run -1 mq-recv -g g -n 0 u
	[ "$(sql 'SELECT count(*) FROM delivery')" = 0 ]
	# and the group goes on with what comes next
	mq-send -q t m4
	run -0 mq-recv -g g --format '%o %b' t
	assert_output '4 m4'
}

@test "--latest skips messages the group never received; --shift forward too" {
	send10
	mq-topic group t g >/dev/null
	run -0 mq-replay -g g --shift 2 t
	[[ $output == *"1 -> 3"* && $output == *"2 skipped"* ]]
	run -0 mq-recv -g g --format '%o' t
	assert_output 3
	run -0 mq-replay -g g --latest t
	[[ $output == *"4 -> 11"* && $output == *"7 skipped"* ]]
	run -1 mq-recv -g g t
	# out of range shifts stop at the ends
	run -0 mq-replay -g g --shift -100 t
	[ "$(sql 'SELECT pos FROM grp')" = 1 ]
	run -0 mq-replay -g g --shift 100 t
	[ "$(sql 'SELECT pos FROM grp')" = 11 ]
}

@test "a rewind over an in-flight delivery makes the old receipt stale" {
	mq-send -q t a b c
	r1=$(mq-recv -g g --format '%r' t)
	[[ $r1 == t:g:1:1:* ]]
	run -0 mq-replay -g g --earliest t
	[[ $output == *"1 unsettled"* ]]
	[ "$(sql 'SELECT count(*) FROM delivery')" = 0 ]
	run --separate-stderr -1 mq-ack "$r1"
	[[ $stderr == *"$r1"* ]]
	# received again, with a new receipt; the old one still settles
	# nothing
	r2=$(mq-recv -g g --format '%r' t)
	[[ $r2 == t:g:1:* ]]
	[ "$r2" != "$r1" ]
	run --separate-stderr -1 mq-ack "$r1"
	[[ $stderr == *"$r1"* ]]
	[ "$(sql 'SELECT state FROM delivery WHERE off = 1')" = 1 ]
	run -0 mq-ack "$r2"
	[ "$(sql 'SELECT count(*) FROM delivery')" = 0 ]
}

@test "-g --since TIME moves the group to the first message at or after TIME" {
	mq-send -q t early
	ta=$(sql 'SELECT ts FROM msg WHERE off = 1')
	T=$((ta / 1000 + 1))
	sleep 1.1
	mq-send -q t late
	recv_ack g
	run -1 mq-recv -g g t
	run -0 mq-replay -g g --since "@$T" t
	[[ $output == *"3 -> 2"* && $output == *"1 message comes again"* ]]
	run -0 mq-recv -g g -n 0 --format '%o %b\n' t
	assert_output '2 late'
	run -0 mq-replay -g g --since 1h t
	[[ $output == *"3 -> 1"* ]]
	[ "$(offsets g)" = "1 2 " ]
}

@test "moving takes exactly one move option: else 64, one line" {
	send10
	recv_ack g
	before=$(state)
	for opts in "--earliest --latest" "--from-offset 2 --shift 1" \
	    "--since 1h --earliest" ""; do
		read -ra args <<<"$opts"
		run --separate-stderr -64 mq-replay -g g "${args[@]}" t
		one_error mq-replay
		[ -z "$output" ]
	done
	# group-only options without -g
	for opts in --earliest --latest "--shift 1" --dry-run --dead "--offset 1"; do
		read -ra args <<<"$opts"
		run --separate-stderr -64 mq-replay "${args[@]}" t
		one_error mq-replay
		[ -z "$output" ]
	done
	run --separate-stderr -64 mq-replay -g g --from-offset 0 t
	one_error mq-replay
	run --separate-stderr -64 mq-replay -g 'bad name' --earliest t
	one_error mq-replay
	[ "$(state)" = "$before" ]
}

@test "a missing group or topic is 66, one line, nothing created" {
	send10
	before=$(state)
	run --separate-stderr -66 mq-replay -g nog --earliest t
	one_error mq-replay
	[[ $stderr == *nog* ]]
	run --separate-stderr -66 mq-replay -g nog --dead t
	one_error mq-replay
	run --separate-stderr -66 mq-replay -g g --earliest nosuch
	one_error mq-replay
	[[ $stderr == *nosuch* ]]
	[ "$(state)" = "$before" ]
}

# --- redriving dead letters --------------------------------------------

@test "--dead redrives a group's dead letters: delivered again with attempt 1" {
	mq-send -q t a b c
	run -0 mq-recv -g g -n 0 t -- sh -c 'exit 65'
	run -0 mq-recv -g h -n 1 t -- sh -c 'exit 65'
	[ "$(sql 'SELECT count(*) FROM delivery WHERE state = 2')" = 4 ]
	run -1 mq-recv -g g t

	# --dry-run counts and changes nothing
	before=$(state)
	run -0 mq-replay -g g --dead --dry-run t
	assert_output 't/g: would redrive 3 dead letters'
	run -0 mq-replay -g g --dead --offset 2 --dry-run t
	assert_output 't/g: would redrive 1 dead letter'
	# it warns and fails as the real run would
	run -1 --separate-stderr mq-replay -g g --dead --offset 2 --offset 9 --dry-run t
	assert_output 't/g: would redrive 1 dead letter'
	assert_equal "$stderr" "mq-replay: offset 9 is not a dead letter of t/g"
	# an offset named twice is one dead letter, in both
	run -0 --separate-stderr mq-replay -g g --dead --offset 2 --offset 2 --dry-run t
	assert_output 't/g: would redrive 1 dead letter'
	assert_equal "$stderr" ""
	[ "$(state)" = "$before" ]
	run -1 mq-recv -g g t

	# --offset N: only that one
	run -0 --separate-stderr mq-replay -g g --dead --offset 2 --offset 2 t
	assert_output 't/g: 1 dead letter redriven'
	assert_equal "$stderr" ""
	run -0 mq-recv -g g -n 0 --format '%o %a %b\n' t
	assert_output '2 1 b'

	# the rest
	run -0 mq-replay -g g --dead t
	assert_output 't/g: 2 dead letters redriven'
	run -0 mq-recv -g g -n 0 --format '%o %a %b\n' t
	assert_output "$(printf '1 1 a\n3 1 c')"
	# h's dead letter stayed dead
	[ "$(sql "SELECT d.off, d.state FROM delivery d JOIN grp g ON g.id = d.grp WHERE g.name = 'h'")" = '1|2' ]
	[ "$(sql "SELECT count(*) FROM events WHERE event = 'redriven'")" = 3 ]

	# nothing left to redrive: 1
	run -1 mq-replay -g g --dead t
	assert_output 't/g: 0 dead letters redriven'
	run --separate-stderr -1 mq-replay -g h --dead --offset 3 t
	one_error mq-replay
}

@test "a redriven message that fails again goes through the retries anew" {
	mq-topic group t g --max-attempts 2 >/dev/null
	mq-send -q t m
	for a in 1 2; do
		r=$(mq-recv -g g --format '%r' t)
		mq-ack --fail --delay 0 "$r" 2>/dev/null
	done
	[ "$(sql 'SELECT state, attempt FROM delivery')" = '2|2' ]
	run -0 mq-replay -g g --dead t
	assert_output "t/g: 1 dead letter redriven"
	run -0 mq-recv -g g --format '%a %r' t
	read -r a r <<<"$output"
	[ "$a" = 1 ]
	run -0 mq-ack --fail --delay 0 "$r"
	[ "$(sql 'SELECT state, attempt FROM delivery')" = '0|1' ]
}

# --- tracing -----------------------------------------------------------

@test "--trace shows the message and every group's history: attempts, events, host and pid" {
	mq-topic group t h >/dev/null
	mq-send -q -k KEY t 'hello world'
	host=$(hostname)
	# step OUT CMD...: run CMD as a process of its own (bg), its pid kept
	# in pids for the history; it must succeed within a bounded wait
	pids=()
	step() {
		bg "$@"
		pids+=("$BG")
		finish "$BG" 30
		[ "$ST" = 0 ] || fail "$* exited $ST: $(cat "$1")"
	}
	for i in 1 2; do
		step r mq-recv -g g --format '%r' t
		step a mq-ack --fail --delay 0 "$(cat r)"
	done
	step r mq-recv -g g --format '%r' t
	step a mq-ack "$(cat r)"
	[ "${#pids[@]}" = 6 ]

	run -0 mq-replay --trace 1 t
	printf '%s\n' "$output" >trace
	grep -qx 'offset 1' trace
	grep -qx 'size 11' trace
	grep -qx 'key KEY' trace
	grep -qx 'body hello world' trace
	grep -qx 'topic t' trace
	ts=$(sql 'SELECT ts FROM msg')
	grep -qx "time $(date -u -d "@$((ts / 1000))" +%Y-%m-%dT%H:%M:%S).$(printf %03d $((ts % 1000)))Z" trace

	# group g: six events in order
	sed -n '/^group g/,/^group h/p' trace | grep attempt >events
	want=
	events=(delivered failed delivered failed delivered acked)
	for i in 0 1 2 3 4 5; do
		want+="attempt $((i / 2 + 1)) ${events[i]} $host:${pids[i]}"$'\n'
	done
	got=$(awk '{ print $2, $3, $4, $5 }' events)
	[ "$got" = "${want%$'\n'}" ]
	# the times are in order
	[ "$(awk '{ print $1 }' events)" = "$(awk '{ print $1 }' events | sort)" ]
	# group h has not received it
	grep -qx 'group h: not delivered yet' trace
	[ "$(sed -n '/^group h/,$p' trace | wc -l)" = 1 ]
}

@test "--trace shows in-flight, retrying and dead deliveries, and a missing offset is 66" {
	mq-send -q t a b c
	mq-recv -g g --format '%r' t >/dev/null
	r=$(mq-recv -g h --format '%r' t)
	mq-ack --fail --delay 1h "$r"
	mq-recv -g i t -- sh -c 'exit 65'
	run -0 mq-replay --trace 1 t
	[[ $output == *"group g: in flight, attempt 1"* ]]
	[[ $output == *"group h: waiting, attempt 1 done"* ]]
	[[ $output == *"group i: dead letter after 1 attempts"* ]]
	run -0 mq-replay --trace 2 t
	[[ $output == *"group g: not delivered yet"* ]]
	run --separate-stderr -66 mq-replay --trace 4 t
	one_error mq-replay
	run --separate-stderr -66 mq-replay --trace 1 nosuch
	one_error mq-replay
	run --separate-stderr -64 mq-replay --trace x t
	one_error mq-replay
}
