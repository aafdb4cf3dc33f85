#!/usr/bin/env bats
# 070-mq-topic.bats: administration of topics and groups: create, list,
# show, set, delete, group, group-delete; bad settings change nothing;
# commands that only read or change a database never create one.

# shellcheck disable=SC2154 # stderr, stderr_lines: set by run --separate-stderr
load test_helper
bats_require_minimum_version 1.5.0

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

# usage_error: the last run printed nothing on stdout and the synopsis on
# stderr.
usage_error() {
	[ -z "$output" ] || fail "want nothing on stdout, got: $output"
	[[ $stderr == *usage:* ]] || fail "want the usage on stderr, got: $stderr"
}

# show_line TOPIC KEY: the value of KEY in mq-topic show TOPIC.
show_line() {
	mq-topic show "$1" | sed -n "s/^$2 //p"
}

@test "create makes an empty topic; creating it again is 1, 'exists', nothing changed" {
	run -0 mq-topic create t
	assert_output ''
	[ "$(sql 'SELECT name, next_off, msgs FROM topic')" = 't|1|0' ]
	before=$(state)
	run --separate-stderr -1 mq-topic create t
	one_error mq-topic
	[[ $stderr == *t*exists* ]]
	run --separate-stderr -1 mq-topic create t retention=1h
	one_error mq-topic
	[ "$(state)" = "$before" ]
	# a topic made by a send exists too
	mq-send -q u m
	run --separate-stderr -1 mq-topic create u
	one_error mq-topic
	[[ $stderr == *exists* ]]
	[ "$(sql 'SELECT count(*) FROM msg')" = 1 ]
}

@test "create with settings stores them; a bad one is 64 and creates nothing" {
	run -0 mq-topic create t retention=2h dedup-window=5m max-size=1k
	[ "$(sql 'SELECT retention, dedup_window, max_size FROM topic')" = '7200000|300000|1024' ]
	for bad in retention=abc dedup-window= max-size=0 colour=red noequals; do
		run --separate-stderr -64 mq-topic create u retention=1h "$bad"
		one_error mq-topic
	done
	run -0 mq-topic list
	assert_output t
	# nor a database
	run --separate-stderr -64 mq-topic -d "$BATS_TEST_TMPDIR/new.db" create t colour=red
	one_error mq-topic
	[ ! -e "$BATS_TEST_TMPDIR/new.db" ]
	# bad names
	for name in .t -t 'a b' 'a:b' "$(printf 'x%.0s' {1..129})"; do
		run --separate-stderr -64 mq-topic create "$name"
		one_error mq-topic
		[[ $stderr == *"invalid topic name"* ]]
	done
	run -0 mq-topic create "$(printf 'x%.0s' {1..128})"
	run -0 mq-topic list
	assert_output "$(printf 't\n%s' "$(printf 'x%.0s' {1..128})")"
}

@test "list prints every topic, one a line, by name" {
	mq-topic create zeta
	mq-send -q alpha m
	mq-topic group mid g >/dev/null
	run -0 mq-topic list
	assert_output "$(printf 'alpha\nmid\nzeta')"
	run --separate-stderr -64 mq-topic list extra
	usage_error
}

@test "show prints the settings, counters and groups" {
	mq-send -q t one two three
	mq-recv -g g --format '%r' t >/dev/null
	mq-topic group t h --lease 45s >/dev/null
	run -0 mq-topic show t
	[ "${lines[0]}" = 'topic t' ]
	[[ ${lines[1]} =~ ^created\ [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\.[0-9]{3}Z$ ]]
	[ "${lines[2]}" = 'messages 3' ]
	[ "${lines[3]}" = 'bytes 11' ]
	[ "${lines[4]}" = 'next-offset 4' ]
	[ "${lines[5]}" = 'retention none' ]
	[ "${lines[6]}" = 'dedup-window 1d' ]
	[ "${lines[7]}" = 'max-size 1048576' ]
	[[ ${lines[8]} == "group g: position 2, lag 3, in-flight 1,"*"lease 30s, max-attempts 16, unordered"* ]]
	[[ ${lines[9]} == "group h: position 1, lag 3, in-flight 0,"*"lease 45s,"* ]]
	[ "${#lines[@]}" = 10 ]
	run --separate-stderr -66 mq-topic show nosuch
	one_error mq-topic
	[[ $stderr == *nosuch* ]]
	[ -z "$output" ]
}

@test "set changes retention, dedup-window and max-size; show and mq-send follow" {
	mq-topic create t
	run -0 mq-topic set t retention=7d dedup-window=90s max-size=10
	[ "$(sql 'SELECT retention, dedup_window, max_size FROM topic')" = '604800000|90000|10' ]
	[ "$(show_line t retention)" = 7d ]
	[ "$(show_line t dedup-window)" = 90s ]
	[ "$(show_line t max-size)" = 10 ]
	# one key leaves the others alone
	run -0 mq-topic set t retention=none
	[ "$(sql "SELECT coalesce(CAST(retention AS TEXT), 'none'), dedup_window, max_size FROM topic")" = 'none|90000|10' ]
	[ "$(show_line t retention)" = none ]
	run -0 mq-topic set t max-size=2k
	[ "$(show_line t max-size)" = 2048 ]
	# mq-send keeps to max-size
	run -0 mq-topic set t max-size=10
	run -0 mq-send t 0123456789
	assert_output 1
	run --separate-stderr -65 mq-send t 0123456789a
	one_error mq-send
	[ "$(sql 'SELECT count(*) FROM msg')" = 1 ]
}

@test "set with a bad key or value is 64 and changes nothing" {
	mq-topic create t retention=1h
	mq-send -q t m
	before=$(state)
	for bad in colour=red retention=soon retention= dedup-window=-1s \
	    max-size=0 max-size=1x max-size=99999999999 noequals; do
		run --separate-stderr -64 mq-topic set t "$bad"
		one_error mq-topic
		# with a good one before it: still nothing
		run --separate-stderr -64 mq-topic set t max-size=100 "$bad"
		one_error mq-topic
		[ "$(state)" = "$before" ]
	done
	run --separate-stderr -64 mq-topic set t
	usage_error
	[ "$(state)" = "$before" ]
	run --separate-stderr -66 mq-topic set nosuch retention=1h
	one_error mq-topic
	[ "$(state)" = "$before" ]
}

@test "delete refuses while a group has unsettled messages; --force deletes it all" {
	mq-send -q t a b c
	mq-send -q other x
	mq-recv -g g -n 0 -A t >/dev/null
	mq-topic group t h >/dev/null	# h has received nothing
	mq-recv -g g other >/dev/null
	before=$(state)
	run --separate-stderr -1 mq-topic delete t
	one_error mq-topic
	[[ $stderr == *"group h"* && $stderr == *"3 unsettled"* && $stderr == *--force* ]]
	[ "$(state)" = "$before" ]
	# a dead letter counts as unsettled too
	mq-recv -g h -n 0 t -- sh -c 'exit 65'
	[ "$(sql 'SELECT count(*) FROM delivery WHERE state = 2')" = 3 ]
	run --separate-stderr -1 mq-topic delete t
	one_error mq-topic
	run -0 mq-topic list
	assert_output "$(printf 'other\nt')"

	run -0 mq-topic delete --force t
	run -0 mq-topic list
	assert_output other
	[ "$(sql "SELECT count(*) FROM grp g JOIN topic t ON t.id = g.topic WHERE t.name = 'other'")" = 1 ]
	[ "$(sql 'SELECT count(*) FROM grp')" = 1 ]
	[ "$(sql 'SELECT count(*) FROM msg')" = 1 ]
	[ "$(sql 'SELECT count(*) FROM delivery')" = 1 ]	# other's lease
	[ "$(sql 'SELECT count(*) FROM history WHERE grp NOT IN (SELECT id FROM grp)')" = 0 ]
	run --separate-stderr -66 mq-topic delete t
	one_error mq-topic
	# a new topic of that name starts over
	run -0 mq-send t again
	assert_output 1
	# the other spelling of --force
	run -0 mq-topic --force delete other
	run -0 mq-topic list
	assert_output t
}

@test "delete without --force goes ahead when every group has settled everything" {
	mq-send -q t a b
	mq-recv -g g -n 0 -A t >/dev/null
	run -0 mq-topic delete t
	run -0 mq-topic list
	assert_output ''
	[ "$(sql 'SELECT (SELECT count(*) FROM msg) + (SELECT count(*) FROM grp) + (SELECT count(*) FROM history)')" = 0 ]
}

@test "group stores --lease, --max-attempts, --backoff, --ordered; show prints them" {
	run -0 mq-topic group t g --lease 45s --max-attempts 5 --backoff '1s 5s 1m' --ordered
	[[ $output == "group g: position 1,"*"lease 45s, max-attempts 5, ordered, backoff 1s 5s 1m" ]]
	[ "$(sql 'SELECT lease, max_attempts, backoff, ordered FROM grp')" = '45000|5|1s 5s 1m|1' ]
	run -0 mq-topic show t
	assert_output --partial "group g: "
	[[ $output == *"group g: "*"lease 45s, max-attempts 5, ordered, backoff 1s 5s 1m"* ]]
	# one option leaves the others alone
	run -0 mq-topic group t g --unordered
	[ "$(sql 'SELECT lease, max_attempts, backoff, ordered FROM grp')" = '45000|5|1s 5s 1m|0' ]
	run -0 mq-topic group t g --lease 2m
	[ "$(sql 'SELECT lease, max_attempts, backoff, ordered FROM grp')" = '120000|5|1s 5s 1m|0' ]
	# and the settings are used: a receive leases for the group's time
	mq-send -q t m
	t0=$(date +%s%3N)
	mq-recv -g g t >/dev/null
	due=$(sql 'SELECT due FROM delivery')
	t1=$(date +%s%3N)
	[ "$due" -ge $((t0 + 120000)) ]
	[ "$due" -le $((t1 + 120000)) ]
}

@test "group --timeout stores a handler's time limit, show prints it, none takes it away" {
	run -0 mq-topic group t g
	refute_output --partial timeout
	run -0 mq-topic group t g --timeout 90s
	[[ $output == "group g: "*"backoff "*"; timeout 90s" ]] || fail "$output"
	[ "$(sql 'SELECT timeout FROM grp')" = 90000 ]
	run -0 mq-topic show t
	assert_output --partial "; timeout 90s"
	# other options leave it alone
	mq-topic group t g --lease 1m >/dev/null
	[ "$(sql 'SELECT timeout FROM grp')" = 90000 ]
	run -0 mq-topic group t g --timeout none
	refute_output --partial timeout
	[ "$(sql 'SELECT coalesce(timeout, -1) FROM grp')" = -1 ]
	run -64 --separate-stderr mq-topic group t g --timeout soon
	one_error mq-topic
	[ "$(sql 'SELECT coalesce(timeout, -1) FROM grp')" = -1 ]
}

@test "group with a bad option is 64 and changes nothing" {
	mq-topic group t g --lease 45s >/dev/null
	before=$(state)
	for bad in "--lease 0" "--lease x" "--max-attempts 0" "--max-attempts x" \
	    "--backoff x" "--backoff ''" "--from middle"; do
		eval "run --separate-stderr -64 mq-topic group t g $bad"
		one_error mq-topic
		[ "$(state)" = "$before" ]
	done
	run --separate-stderr -64 mq-topic group t
	usage_error
	run --separate-stderr -64 mq-topic group t .g
	one_error mq-topic
	run --separate-stderr -64 mq-topic group t g --bogus
	usage_error
	[[ ${stderr_lines[0]} == *--bogus* ]]
	[ "$(state)" = "$before" ]
}

@test "group --from latest starts after what is there; the default from the oldest message" {
	mq-send -q t a b
	mq-topic group t late --from latest >/dev/null
	mq-topic group t early >/dev/null
	[ "$(sql "SELECT pos FROM grp WHERE name = 'late'")" = 3 ]
	run -1 mq-recv -g late t
	run -0 mq-recv -g early --format '%o' t
	assert_output 1
}

@test "group-delete refuses while the group has unsettled messages; --force deletes it" {
	mq-send -q t a b c
	mq-recv -g g -n 0 -A t >/dev/null
	mq-recv -g h --format '%r' t >/dev/null	# h: 1 in flight, 2 3 pending
	before=$(state)
	run --separate-stderr -1 mq-topic group-delete t h
	one_error mq-topic
	[[ $stderr == *"group h"* && $stderr == *"3 unsettled"* && $stderr == *--force* ]]
	[ "$(state)" = "$before" ]

	run -0 mq-topic group-delete --force t h
	[ "$(sql 'SELECT name FROM grp')" = g ]
	[ "$(sql 'SELECT count(*) FROM delivery')" = 0 ]
	[ "$(sql 'SELECT count(*) FROM history WHERE grp NOT IN (SELECT id FROM grp)')" = 0 ]
	[ "$(sql 'SELECT count(*) FROM msg')" = 3 ]
	run -0 mq-topic show t
	assert_output --partial 'group g: '
	refute_output --partial 'group h'
	run --separate-stderr -66 mq-topic group-delete t h
	one_error mq-topic
	# a settled group goes without --force
	run -0 mq-topic group-delete t g
	[ "$(sql 'SELECT count(*) FROM grp')" = 0 ]
	run --separate-stderr -66 mq-topic group-delete nosuch g
	one_error mq-topic
	# the name used again is a new group, from the oldest message
	run -0 mq-recv -g h --format '%o %a' t
	assert_output '1 1'
}

@test "commands on a missing database are 66, one line, and create no file" {
	for db in "$MQ_DB" "$BATS_TEST_TMPDIR/sub/dir/mq.db"; do
		for cmd in list "show t" "set t retention=1h" "delete t" \
		    "delete --force t" "group-delete t g" "group-delete --force t g"; do
			read -ra args <<<"$cmd"
			run --separate-stderr -66 mq-topic -d "$db" "${args[@]}"
			one_error mq-topic
			[[ $stderr == *"$db"* ]]
			[ ! -e "$db" ]
		done
	done
	[ ! -e "$BATS_TEST_TMPDIR/sub" ]
	# with MQ_DB as well as -d
	run --separate-stderr -66 mq-topic list
	one_error mq-topic
	no_db
	# create does make it
	run -0 mq-topic create t
	run ! no_db
}

@test "usage: -h on stdout and 0; no command or an unknown one is 64" {
	run -0 mq-topic -h
	[[ $output == *usage:* ]]
	run --separate-stderr -64 mq-topic
	usage_error
	run --separate-stderr -64 mq-topic frobnicate t
	one_error mq-topic
	[[ $stderr == *frobnicate* ]]
}

@test "delete --force and group-delete --force of what is already gone exit 0, as rm -f; without --force 66" {
	run --separate-stderr -66 mq-topic delete --force t
	one_error mq-topic	# no database: it names the wrong place
	no_db
	mq-send -q t a
	mq-topic group t g >/dev/null
	run --separate-stderr -66 mq-topic delete gone
	one_error mq-topic
	[[ $stderr == *gone* ]]
	run --separate-stderr -0 mq-topic delete --force gone
	assert_output ''
	assert_equal "$stderr" ''
	run --separate-stderr -66 mq-topic group-delete t nope
	one_error mq-topic
	run --separate-stderr -0 mq-topic group-delete --force t nope
	assert_equal "$stderr" ''
	run --separate-stderr -66 mq-topic group-delete gone g
	one_error mq-topic
	run -0 mq-topic -f group-delete gone g
	assert_output ''
	# what is there is still deleted, and then it is gone
	run -0 mq-topic group-delete --force t g
	run -0 mq-topic group-delete --force t g
	run -0 mq-topic delete --force t
	run -0 mq-topic delete --force t
	run -0 mq-topic list
	assert_output ''
}

@test "delete and group-delete count delayed messages as unsettled" {
	mq-topic group t g >/dev/null
	mq-send -q --delay 1h t later
	run -1 --separate-stderr mq-topic group-delete t g
	one_error mq-topic
	[[ $stderr == *"1 unsettled"* ]]
	run -1 --separate-stderr mq-topic delete t
	one_error mq-topic
	[[ $stderr == *"1 unsettled"* ]]
	run -0 sql 'SELECT count(*) FROM msg'
	assert_output 1
	[ "$(sql 'SELECT count(*) FROM grp')" = 1 ]
	run -0 mq-topic delete --force t
	run -0 sql 'SELECT count(*) FROM msg'
	assert_output 0
}
