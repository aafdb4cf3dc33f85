#!/usr/bin/env bats
# 060-mq-purge.bats: retention.  What every group has settled goes; what a
# group still needs stays unless told --force; retention by age; dead
# letters; expired dedup ids; --dry-run counts only; --vacuum gives the
# space back.  Offsets are never reused.
#
# Receipts go to mq-ack as arguments, and bulk sends go through xargs, so
# these tests do not lean on the stdin readers of mq-ack and mq-send.
# Every wait is bounded; every background process has its pid kept, so
# teardown kills it by that pid.

# shellcheck disable=SC2154 # stderr, stderr_lines: set by run --separate-stderr
load test_helper
bats_require_minimum_version 1.5.0

teardown() {
	kill_bg
}

# stored [TOPIC]: the offsets stored, space separated.
stored() {
	sql "SELECT m.off FROM msg m JOIN topic t ON t.id = m.topic
	    WHERE t.name = '${1:-t}' ORDER BY m.off" | paste -sd ' '
}

count() {
	sql "SELECT count(*) FROM $1"
}

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

send10() {
	mq-send -q t m1 m2 m3 m4 m5 m6 m7 m8 m9 m10
}

@test "deletes only what every group has settled; offsets are never reused" {
	send10
	recv_ack a
	recv_ack b 5
	run -0 mq-purge t
	[[ $output == "t: deleted 5 messages"* ]]
	[ "$(stored)" = "6 7 8 9 10" ]
	[ "$(sql 'SELECT msgs, bytes FROM topic')" = "5|11" ]
	[ "$(sql 'SELECT count(*) FROM history WHERE off <= 5')" = 0 ]
	# nothing more is settled by both: nothing more goes
	run -0 mq-send t m11
	assert_output 11
	run -0 mq-purge t
	assert_output ''
	[ "$(stored)" = "6 7 8 9 10 11" ]
	# b settles the rest; a has not received 11 yet: 11 stays
	recv_ack b
	run -0 mq-purge t
	[[ $output == "t: deleted 5 messages"* ]]
	[ "$(stored)" = 11 ]
	run -0 mq-send t m12
	assert_output 12
	run -0 mq-recv -g a -n 0 --format '%r %o %b\n' t
	[ "$(cut -d' ' -f2- <<<"$output")" = "$(printf '11 m11\n12 m12')" ]
	mapfile -t ra < <(cut -d' ' -f1 <<<"$output")
	[ "${#ra[@]}" = 2 ]
	recv_ack b
	run -0 mq-purge t
	assert_output ''
	[ "$(stored)" = "11 12" ]	# a's leases hold them
	mq-ack "${ra[@]}"
	# everything settled: all goes, and the next offset is still new
	run -0 mq-purge t
	[[ $output == "t: deleted 2 messages"* ]]
	[ "$(count msg)" = 0 ]
	[ "$(sql 'SELECT msgs, bytes, next_off FROM topic')" = "0|0|13" ]
	run -0 mq-send t m13
	assert_output 13
	run -0 mq-recv -g b --format '%o %b' t
	assert_output '13 m13'
}

@test "a topic without groups keeps everything" {
	send10
	run -0 mq-purge t
	assert_output ''
	run -0 mq-purge
	assert_output ''
	[ "$(count msg)" = 10 ]
}

@test "--dry-run counts and changes nothing" {
	send10
	recv_ack a
	recv_ack b 5
	before=$(state)
	run -0 mq-purge --dry-run t
	dry=$output
	[[ $dry == "t: would delete 5 messages"* ]]
	run -0 mq-purge -n
	[ "$output" = "$dry" ]
	[ "$(state)" = "$before" ]
	run -0 mq-purge t
	[ "$output" = "${dry/would delete/deleted}" ]
	[ "$(count msg)" = 5 ]
	# one message: no plural
	recv_ack b 1
	run -0 mq-purge --dry-run t
	[[ $output == "t: would delete 1 message ("* ]]
	run -0 mq-purge t
	[[ $output == "t: deleted 1 message ("* ]]
}

@test "-q deletes without a word" {
	send10
	recv_ack a
	run -0 mq-purge -q t
	assert_output ''
	[ "$(count msg)" = 0 ]
}

@test "--before-offset: unsettled messages need --force; then the group goes on from the oldest left" {
	send10
	recv_ack g 3
	r4=$(mq-recv -g g --format '%r' t)	# 4 in flight
	# below 3 all is settled: no --force needed
	run -0 mq-purge --before-offset 3 t
	[[ $output == "t: deleted 2 messages"* ]]
	[ "$(stored)" = "3 4 5 6 7 8 9 10" ]

	before=$(state)
	run --separate-stderr -1 mq-purge --before-offset 8 t
	one_error mq-purge
	# it says what would be lost: 4 (in flight), 5, 6, 7
	[[ $stderr == *"4 messages"* && $stderr == *--force* ]]
	[ -z "$output" ]
	[ "$(state)" = "$before" ]
	run --separate-stderr -1 mq-purge --before-offset 8 --dry-run t
	one_error mq-purge
	[[ $stderr == *"4 messages"* && $stderr == *--force* ]]
	[ "$(state)" = "$before" ]

	run -0 mq-purge --before-offset 8 --force t
	[[ $output == "t: deleted 5 messages"* ]]
	[ "$(stored)" = "8 9 10" ]
	# the in-flight delivery went with its message
	[ "$(count delivery)" = 0 ]
	run --separate-stderr -1 mq-ack "$r4"
	[[ $stderr == *"$r4"* ]]
	run -0 mq-recv -g g -n 0 --format '%o ' t
	assert_output '8 9 10 '
}

@test "--older-than: unsettled messages need --force; then the group goes on from the oldest left" {
	mq-send -q t a b c
	recv_ack g 1
	mq-send -q t d e
	# a b c ten minutes back (times still never decrease along offsets),
	# so that no slow start of mq-purge can carry "now" across the gap
	# between c and d
	sql 'UPDATE msg SET ts = ts - 600000, due = due - 600000 WHERE off <= 3'
	tc=$(sql 'SELECT ts FROM msg WHERE off = 3')
	# "older than just after c", a duration computed just before each
	# purge: a b c
	cutoff() { echo "$(( $(now_ms) - tc - 1 ))ms"; }
	run --separate-stderr -1 mq-purge --older-than "$(cutoff)" t
	one_error mq-purge
	[[ $stderr == *"2 messages"* && $stderr == *--force* ]]
	[ "$(stored)" = "1 2 3 4 5" ]
	before=$(state)
	run -0 mq-purge --older-than 1h t
	assert_output ''
	[ "$(state)" = "$before" ]
	run -0 mq-purge --older-than "$(cutoff)" --force t
	[[ $output == "t: deleted 3 messages"* ]]
	[ "$(stored)" = "4 5" ]
	run -0 mq-recv -g g -n 0 --format '%o %b\n' t
	assert_output "$(printf '4 d\n5 e')"
}

@test "retention: messages past the topic's retention go, settled or not" {
	mq-topic group t g >/dev/null
	mq-topic set t retention=1s
	mq-send -q t a b c
	mq-topic group u g >/dev/null
	mq-send -q u x
	sleep 1.5
	run -0 mq-purge
	[[ $output == "t: deleted 3 messages"* ]]
	[[ $output != *u:* ]]
	[ "$(stored t)" = "" ]
	[ "$(stored u)" = 1 ]
	run -0 mq-send t d
	assert_output 4
	run -0 mq-recv -g g -n 0 --format '%o %b\n' t
	assert_output '4 d'
}

@test "--dead drops dead letters, of one group with -g; their messages can then go" {
	mq-send -q t a b c
	run -0 mq-recv -g g -n 2 t -- sh -c 'exit 65'
	recv_ack g
	run -0 mq-recv -g h -n 1 t -- sh -c 'exit 65'
	recv_ack h
	[ "$(sql 'SELECT count(*) FROM delivery WHERE state = 2')" = 3 ]
	# without --dead the dead letters keep their messages (3, settled
	# by both, goes)
	run -0 mq-purge t
	[[ $output == "t: deleted 1 message ("* ]]
	[ "$(stored)" = "1 2" ]

	run -0 mq-purge --dead -g h t
	[[ $output == *", 1 dead letter" ]]
	[ "$(sql "SELECT g.name || d.off FROM delivery d JOIN grp g ON g.id = d.grp ORDER BY 1" | xargs)" = "g1 g2" ]
	[ "$(stored)" = "1 2" ]	# g still has them

	before=$(state)
	run -0 mq-purge --dead --dry-run t
	dry=$output
	[[ $dry == *"would delete"*"2 dead letters"* ]]
	[ "$(state)" = "$before" ]
	run -0 mq-purge --dead t
	[ "$output" = "${dry/would delete/deleted}" ]
	[ "$(count delivery)" = 0 ]
	[ "$(count msg)" = 0 ]

	run --separate-stderr -66 mq-purge --dead -g nog t
	one_error mq-purge
	[[ $stderr == *nog* ]]
	run --separate-stderr -64 mq-purge -g g t
	one_error mq-purge
	run --separate-stderr -64 mq-purge --dead -g g
	one_error mq-purge
}

@test "--vacuum gives the space of purged messages back and truncates the WAL" {
	sqlite_only "the file's size and its WAL (t/100-pg.bats runs --vacuum on PostgreSQL)"
	body=$(printf '%0200d' 0)
	yes "$body" | head -n 20000 | xargs mq-send -q t
	[ "$(count msg)" = 20000 ]
	# keep a second connection open, as a running consumer would, so the
	# WAL is not simply removed when mq-purge closes
	mkfifo holder.in
	sqlite3 "$MQ_DB" <holder.in >holder.out 2>&1 3>&- &
	holder=$!
	echo "$holder" >>"$BATS_TEST_TMPDIR/pids"
	exec 5>holder.in
	echo 'SELECT count(*) FROM topic;' >&5
	wait_for 30 test -s holder.out
	[ "$(cat holder.out)" = 1 ]

	mq-recv -g g -n 0 -A t >/dev/null
	run -0 mq-purge t
	[[ $output == "t: deleted 20000 messages"* ]]
	size1=$(stat -c %s "$MQ_DB")
	wal1=$(stat -c %s "$MQ_DB-wal")
	[ "$size1" -gt 4000000 ]
	[ "$wal1" -gt 0 ]

	kill -0 "$holder"	# the second connection is still open
	run -0 mq-purge --vacuum t
	size2=$(stat -c %s "$MQ_DB")
	echo "# $size1 -> $size2 bytes, WAL $wal1 -> $(stat -c %s "$MQ_DB-wal" 2>/dev/null || echo none)" >&3
	[ "$size2" -lt $((size1 / 4)) ]
	[ ! -s "$MQ_DB-wal" ]
	exec 5>&-
	# the database is sound and goes on
	db_intact
	run -0 mq-send t after
	assert_output 20001
}

@test "without TOPIC every topic is purged by its own rules" {
	mq-send -q u a b
	mq-send -q v c d e
	mq-send -q w f
	recv_ack g 0 u
	recv_ack g 2 v
	mq-topic group w g >/dev/null
	run -0 mq-purge --dry-run
	[[ $output == *"u: would delete 2 messages"* && $output == *"v: would delete 2 messages"* ]]
	run -0 mq-purge
	[ "${#lines[@]}" = 2 ]
	[[ ${lines[0]} == "u: deleted 2 messages"* ]]
	[[ ${lines[1]} == "v: deleted 2 messages"* ]]
	[ "$(stored u)" = "" ]
	[ "$(stored v)" = 3 ]
	[ "$(stored w)" = 1 ]
}

@test "expired dedup ids are removed; the same id is then a new message" {
	mq-topic create t dedup-window=1s
	run -0 mq-send --dedup x t a
	assert_output 1
	run -0 mq-send --dedup x t b
	assert_output 1
	[ "$(count msg)" = 1 ]
	[ "$(count dedup)" = 1 ]
	sleep 1.2
	run -0 mq-purge --dry-run t
	[ "$(count dedup)" = 1 ]
	run -0 mq-purge t
	[ "$(count dedup)" = 0 ]
	# a long window from here on, so the next two sends need not come
	# within a second of each other; under it an id still stored would
	# be a duplicate: c is new because the purge removed x
	mq-topic set t dedup-window=1h
	run -0 mq-send --dedup x t c
	assert_output 2
	# inside the window it is a duplicate again
	run -0 mq-send --dedup x t d
	assert_output 2
	[ "$(sql 'SELECT id, off FROM dedup')" = 'x|2' ]
	[ "$(stored)" = "1 2" ]
}

@test "bad options are 64, a missing topic or database 66, one line each" {
	send10
	recv_ack g
	before=$(state)
	for opts in "--older-than 1s --before-offset 3 t" "--before-offset 0 t" \
	    "--before-offset x t" "--older-than 1x t" "-g g t" "--dead -g g" \
	    ".bad" "-g .bad --dead t"; do
		read -ra args <<<"$opts"
		run --separate-stderr -64 mq-purge "${args[@]}"
		one_error mq-purge
		[ -z "$output" ]
	done
	# misuse that getopt or the operand count catches gets the usage
	# (STYLE: usage() prints the synopsis to stderr and exits 64)
	run --separate-stderr -64 mq-purge t u
	[[ $stderr == *usage:* ]]
	[ -z "$output" ]
	run --separate-stderr -64 mq-purge --no-such-option t
	[[ ${stderr_lines[0]} == *no-such-option* ]]
	[ -z "$output" ]
	run --separate-stderr -66 mq-purge nosuch
	one_error mq-purge
	[[ $stderr == *nosuch* ]]
	[ "$(state)" = "$before" ]
	run --separate-stderr -66 mq-purge -d "$BATS_TEST_TMPDIR/none.db"
	one_error mq-purge
	[ ! -e "$BATS_TEST_TMPDIR/none.db" ]
	run --separate-stderr -66 mq-purge --vacuum -d "$BATS_TEST_TMPDIR/none.db" t
	one_error mq-purge
	[ ! -e "$BATS_TEST_TMPDIR/none.db" ]
}

@test "--before-offset past the end does not move groups past the end" {
	# mq-purge --before-offset N --force with N beyond the topic's next
	# offset moves the groups up to the next offset at most, never to N
	# (mq_store_purge_range), so a message sent after the purge, at an
	# offset below N, is still delivered to every group.
	# SPEC: every group receives every message of its topic; offsets are
	# never reused, so what comes after a purge is new to every group.
	mq-send -q t 1 2 3
	mq-topic group t g >/dev/null
	run -0 mq-purge --before-offset 1000 --force t
	[ "$(count msg)" = 0 ]
	run -0 mq-send t new
	assert_output 4
	run -0 mq-recv -g g --format '%o %b' t
	assert_output '4 new'
}

@test "after a purge, a group's lag counts the messages it can still receive" {
	# The default purge deletes every message no group holds, so it
	# leaves holes above a message one group still holds (offset 3 here).
	# A group that then starts below them (new, or rewound with
	# --earliest) counts in its lag only the messages still stored
	# (sq_stats in common/sqlite/topic.c, with topic.gap_below), not next_off - pos:
	# the lag shown is what mq-recv then gets.
	# SPEC (mq-lag): lag = messages of the topic the group has not
	# settled; mq-topic show prints the same lag.
	send10
	recv_ack a
	run -0 mq-recv -g b -n 0 --format '%o %r\n' t
	mapfile -t receipts < <(awk '$1 != 3 { print $2 }' <<<"$output")
	[ "${#receipts[@]}" = 9 ]
	mq-ack "${receipts[@]}"
	# every message but 3 goes: holes below it and above it
	run -0 mq-purge t
	[[ $output == "t: deleted 9 messages"* ]]
	[ "$(stored)" = 3 ]
	run -0 mq-topic group t n
	[[ $output =~ lag\ ([0-9]+), ]]
	lag=${BASH_REMATCH[1]}
	run -0 mq-recv -g n -n 0 --format '%o\n' t
	[ "${#lines[@]}" = "$lag" ]
	assert_output 3
}
