#!/usr/bin/env bats
# 080-mq-lag.bats: mq-lag, the monitor: every column in a constructed
# scenario (table and JSON), delayed messages apart from lag, thresholds
# and their exit status for cron, JSON lines, Prometheus text (checked by
# promtool), --topics, --consumers, reading while a writer holds the lock,
# never writing, read-only files, missing database or topic, colour only
# on a terminal, and --watch driven through tmux.
#
# Every wait is a bounded poll; bounds are generous for a slow, shared
# machine.  A JSON check goes through jtrue, never a bare jq -e (which
# passes on empty input).

# shellcheck disable=SC2154 # stderr, stderr_lines: set by bats' run --separate-stderr

load test_helper

# Background processes (pids) and process groups (pgids) this test
# started, a tmux server on a private socket, a scratch directory outside
# $BATS_TEST_TMPDIR (for the unprivileged user): all go in teardown.
teardown() {
	local p

	kill_bg
	tm kill-server 2>/dev/null || true
	if [ -e "$BATS_TEST_TMPDIR/dirs" ]; then
		while IFS= read -r p; do
			chmod -R u+w -- "$p" 2>/dev/null || true
			rm -rf -- "$p"
		done <"$BATS_TEST_TMPDIR/dirs"
	fi
}

# tm ARGS...: tmux on a private socket in the test's directory, so no
# user's server is touched; bats' fd 3 stays out of the server.
tm() {
	TMUX='' tmux -S "$BATS_TEST_TMPDIR/tmux.sock" "$@" 3>&-
}

# jf FIELD: FIELD of the JSON line of t/g.
jf() {
	mq-lag --json t g | jq -r ".$1"
}

# lag_is FIELD VALUE: for wait_for.
lag_is() {
	[ "$(jf "$1")" = "$2" ]
}

# col FILE COLUMN [TOPIC GROUP]: the cell under header COLUMN in the row
# of TOPIC/GROUP (t/g) of a table in FILE; fails without that column.
col() {
	awk -v c="$2" -v t="${3-t}" -v g="${4-g}" '
	    NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
	    $1 == t && $2 == g && (c in h) { print $(h[c]); n++ }
	    END { exit n != 1 }' "$1"
}

# narrow FILE: every line of FILE is at most 80 columns; fails naming
# the ones that are not.  (No run: the caller's $output stays.)
narrow() {
	local long
	long=$(awk 'length > 80 { print length ": " $0 }' "$1") || return
	[ -z "$long" ] || fail "wider than 80 columns: $long"
}

# expired_is TOPIC GROUP N: for wait_for.
expired_is() {
	[ "$(mq-lag --json "$1" "$2" | jq -r .expired)" = "$3" ]
}

# scenario [TOPIC GROUP]: 20 messages in TOPIC (t).  Group GROUP (g) took
# 1-10 with a 1s lease, acked 1-3, failed 4-5 for an hour, dead-lettered
# 6, extended 7-8 and let 9-10 expire; 11-20 are not delivered yet.
scenario() {
	local t=${1-t} g=${2-g}
	seq 20 | mq-send -q "$t"
	mq-recv -g "$g" -n 10 --lease 1s --format '%r\n' "$t" >rc
	[ "$(wc -l <rc)" -eq 10 ]
	sed -n 1,3p rc | mq-ack
	sed -n 4,5p rc | mq-ack --fail --delay 1h
	sed -n 6p rc | mq-ack --dead
	sed -n 7,8p rc | mq-ack --extend 1h
	wait_for 15 expired_is "$t" "$g" 2
}

rfc3339='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$'

@test "each column in a constructed scenario, JSON and table agree" {
	scenario
	run -0 --separate-stderr mq-lag --json t g
	assert_equal "$stderr" ""
	assert_equal "${#lines[@]}" 1
	echo "$output" >lag.json
	j() { jq -r ".$1" lag.json; }
	assert_equal "$(j topic)" t
	assert_equal "$(j group)" g
	assert_equal "$(j end_offset)" 20
	assert_equal "$(j messages)" 20
	assert_equal "$(j position)" 11
	assert_equal "$(j in_flight)" 2
	assert_equal "$(j expired)" 2
	assert_equal "$(j retrying)" 2
	assert_equal "$(j dead)" 1
	assert_equal "$(j delayed)" 0
	assert_equal "$(j consumers)" 0
	assert_equal "$(j settled_total)" 3
	# lag: 10 not delivered + in flight + expired + retrying; dead apart
	assert_equal "$(j lag)" $((10 + 2 + 2 + 2))
	# the oldest unsettled message is offset 4 (retrying)
	ts4=$(sql 'SELECT ts FROM msg WHERE off = 4')
	assert_equal "$(jq '.oldest_epoch * 1000 | round' lag.json)" "$ts4"
	[[ $(j oldest_time) =~ $rfc3339 ]]
	jtrue '.oldest_age_s > 0 and .oldest_age_s < 600' <lag.json

	run -0 --separate-stderr mq-lag
	assert_equal "$stderr" ""
	echo "$output" >lag.txt
	# DELAY and CONS are 0 in every row: left out
	[[ ${lines[0]} =~ ^TOPIC\ +GROUP\ +END\ +POS\ +LAG\ +INFL\ +EXP\ +RETRY\ +DEAD\ +AGE$ ]]
	assert_equal "$(col lag.txt END)" 20
	assert_equal "$(col lag.txt POS)" 11
	assert_equal "$(col lag.txt LAG)" 16
	assert_equal "$(col lag.txt INFL)" 2
	assert_equal "$(col lag.txt EXP)" 2
	assert_equal "$(col lag.txt RETRY)" 2
	assert_equal "$(col lag.txt DEAD)" 1
	[[ $(col lag.txt AGE) =~ ^[0-9.]+s$|^[0-9]+m[0-9]{2}s$ ]]
	run -0 mq-lag --wide
	echo "$output" >wide.txt
	[[ ${lines[0]} =~ ^TOPIC\ +GROUP\ +END\ +POS\ +LAG\ +INFL\ +EXP\ +RETRY\ +DELAY\ +DEAD\ +AGE\ +CONS$ ]]
	assert_equal "$(col wide.txt DELAY)" 0
	assert_equal "$(col wide.txt CONS)" 0
	assert_equal "$(col wide.txt INFL)" 2
	# the same with TOPIC and TOPIC GROUP operands
	run -0 mq-lag t
	assert_equal "${#lines[@]}" 2
	assert_line --index 1 --regexp '^t +g +20 +11 +16 +2 +2 +2 +1 '
	run -0 mq-lag t g
	assert_equal "${#lines[@]}" 2
	echo "$output" >lag2.txt
	assert_equal "$(col lag2.txt LAG)" 16
}

@test "80 columns for 8-character names: all-0 columns left out, --wide shows them" {
	# every column but CONS has something
	scenario orders12 billing1
	mq-send -q --delay 1h orders12 later
	mq-send -q idletopc a
	mq-recv -A -g settled1 idletopc >/dev/null
	run -0 mq-lag --wide
	echo "$output" >wide.txt
	narrow wide.txt
	[[ ${lines[0]} =~ ^TOPIC\ +GROUP\ +END\ +POS\ +LAG\ +INFL\ +EXP\ +RETRY\ +DELAY\ +DEAD\ +AGE\ +CONS$ ]]
	assert_equal "$(col wide.txt DELAY orders12 billing1)" 1
	assert_equal "$(col wide.txt CONS orders12 billing1)" 0
	assert_equal "$(col wide.txt INFL idletopc settled1)" 0
	run -0 mq-lag
	echo "$output" >plain.txt
	narrow plain.txt
	[[ ${lines[0]} =~ ^TOPIC\ +GROUP\ +END\ +POS\ +LAG\ +INFL\ +EXP\ +RETRY\ +DELAY\ +DEAD\ +AGE$ ]]
	assert_equal "$(col plain.txt LAG orders12 billing1)" 16
	assert_equal "$(col plain.txt INFL idletopc settled1)" 0
	# a group with nothing unsettled: the five columns that stay
	run -0 mq-lag idletopc
	assert_line --index 0 --regexp '^TOPIC +GROUP +END +POS +LAG$'
	assert_line --index 1 --regexp '^idletopc +settled1 +1 +2 +0$'
	run -0 mq-lag --wide idletopc
	assert_line --index 0 --regexp '^TOPIC +GROUP +END +POS +LAG +INFL +EXP +RETRY +DELAY +DEAD +AGE +CONS$'
	assert_line --index 1 --regexp '^idletopc +settled1 +1 +2 +0 +0 +0 +0 +0 +0 +- +0$'
	# --wide is for the table
	run -64 mq-lag --wide --json
	# --watch: DELAY and CONS make room for the rates
	bin=$(printf %q "$MQ_BIN/mq-lag") db=$(printf %q "$MQ_DB")
	tm new-session -d -s w -x 200 -y 20 "MQ_DB=$db $bin --watch 1s; sleep 300"
	framed() {
		tm capture-pane -p -t w >screen &&
		    grep -Eq '^orders12 +billing1 ' screen &&
		    grep -Eq '^idletopc +settled1 ' screen
	}
	wait_for 30 framed
	sed -n '/^TOPIC /,$p' screen >watch.txt
	[ "$(wc -l <watch.txt)" -ge 3 ] || fail "no table: $(cat screen)"
	narrow watch.txt
	run -0 head -n 1 watch.txt
	assert_output --regexp '^TOPIC +GROUP +END +POS +LAG +INFL +EXP +RETRY +DEAD +AGE +IN/s +OUT/s$'
	assert_equal "$(col watch.txt LAG orders12 billing1)" 16
}

@test "a delayed message is counted in delayed, not in lag nor in the age" {
	mq-topic group t g >/dev/null
	mq-send -q t a
	mq-send -q --delay 1h t later
	mq-send -q t b
	run -0 mq-recv -g g -n 0 --format '%r %b\n' t
	assert_equal "$(cut -d' ' -f2 <<<"$output" | paste -sd ' ')" "a b"
	echo "$output" >receipts
	# the group went past the delayed message
	assert_equal "$(jf position)" 4
	assert_equal "$(jf end_offset)" 3
	assert_equal "$(jf delayed)" 1
	assert_equal "$(jf in_flight)" 2
	assert_equal "$(jf lag)" 2
	mq-ack <receipts
	run -0 mq-lag --json t g
	# everything due is settled: nothing lags, nothing is old
	jtrue '.lag == 0 and .in_flight == 0 and .delayed == 1 and .oldest_time == null' <<<"$output"
	run -0 mq-lag --max-lag 0 --max-age 1ms -q
	assert_output ""
	run -0 mq-lag t g
	echo "$output" >lag.txt
	assert_equal "$(col lag.txt DELAY)" 1
	assert_equal "$(col lag.txt LAG)" 0
}

@test "thresholds: --max-lag, -q, per group and TOPIC/GROUP overrides, exit status" {
	seq 10 | mq-send -q t
	mq-topic group t g >/dev/null
	mq-topic group t h >/dev/null
	# crossed: the table and exactly one breach line per group, exit 1
	run -1 --separate-stderr mq-lag --max-lag 5 t g
	assert_equal "$stderr" ""
	assert_equal "$(grep -c ': lag ' <<<"$output")" 1
	assert_line 't/g: lag 10 > 5'
	assert_line --regexp '^TOPIC +GROUP'
	run -1 --separate-stderr mq-lag -q --max-lag 5
	assert_equal "$stderr" ""
	assert_output "t/g: lag 10 > 5
t/h: lag 10 > 5"
	# not crossed: exit 0, and with -q nothing at all
	run -0 --separate-stderr mq-lag -q --max-lag 10
	assert_equal "$output" ""
	assert_equal "$stderr" ""
	run -0 mq-lag --max-lag 100
	refute_output --partial ': lag '
	assert_line --regexp '^t +g +10 '
	# a limit for a group overrides the global one, in any order
	run -1 mq-lag -q --max-lag 1 --max-lag g=1000
	assert_output "t/h: lag 10 > 1"
	run -1 mq-lag -q --max-lag g=1000 --max-lag 1
	assert_output "t/h: lag 10 > 1"
	# TOPIC/GROUP=N is more specific than GROUP=N
	run -1 mq-lag -q --max-lag t/g=3 --max-lag g=1000 --max-lag h=1000
	assert_output "t/g: lag 10 > 3"
	# a threshold for a topic or group that is not there is a typo: 64
	before=$(db_state)
	run -64 --separate-stderr mq-lag -q --max-lag other/g=3
	assert_equal "$stderr" "mq-lag: --max-lag: no such topic: other"
	run -64 --separate-stderr mq-lag -q --max-dead wrokers=0
	assert_equal "$stderr" "mq-lag: --max-dead: no such group: wrokers"
	run -64 --separate-stderr mq-lag -q --max-age t/x=1s
	assert_equal "$stderr" "mq-lag: --max-age: no such group: t/x"
	run -64 --separate-stderr mq-lag -q --max-lag h=1 t g
	assert_equal "$stderr" "mq-lag: --max-lag: not shown: h"
	run -64 --separate-stderr mq-lag --json --max-expired x=1
	assert_equal "$output" ""
	[ "$(db_state)" = "$before" ]
	# -q with no threshold prints nothing
	run -0 mq-lag -q
	assert_output ""
}

@test "thresholds: --max-age after waiting, --max-dead, --max-expired" {
	mq-send -q t a b c
	mq-topic group t g >/dev/null
	run -0 mq-lag -q --max-age 1m
	assert_output ""
	breach_age() {
		run mq-lag -q --max-age 1s
		[ "$status" -eq 1 ]
	}
	wait_for 15 breach_age
	assert_output --regexp '^t/g: age [0-9.]+s > 1(\.0)?s$'
	# a dead letter
	run -0 mq-lag -q --max-dead 0
	assert_output ""
	run -0 mq-recv -g g --format '%r' t
	mq-ack --dead "$output"
	run -1 --separate-stderr mq-lag -q --max-dead 0
	assert_output "t/g: dead 1 > 0"
	assert_equal "$stderr" ""
	run -0 mq-lag -q --max-dead 1
	assert_output ""
	# an expired lease
	run -0 mq-lag -q --max-expired 0
	assert_output ""
	run -0 mq-recv -g g --lease 1s t
	wait_for 15 lag_is expired 1
	run -1 mq-lag -q --max-expired 0
	assert_output "t/g: expired 1 > 0"
	# all at once: one line each (b expired, c not delivered: lag 2)
	run -1 mq-lag -q --max-expired 0 --max-dead 0 --max-lag 1 --max-age 1s
	assert_equal "${#lines[@]}" 4
	assert_line 't/g: lag 2 > 1'
	assert_line --regexp '^t/g: age [0-9.]+s > 1(\.0)?s$'
	assert_line 't/g: dead 1 > 0'
	assert_line 't/g: expired 1 > 0'
}

@test "--max-silence: a topic nothing was sent to for longer than DUR, one line per topic" {
	mq-send -q t a
	mq-topic group t g >/dev/null
	mq-topic group t h >/dev/null
	mq-send -q u b
	# last_send_ms is the topic's last message's time, on every row
	ts=$(sql "SELECT max(ts) FROM msg WHERE topic = (SELECT id FROM topic WHERE name = 't')")
	run -0 mq-lag --json t
	assert_equal "${#lines[@]}" 2
	# shellcheck disable=SC2016 # jq's and awk's, not the shell's
	jtrue -s --argjson ts "$ts" 'map(.last_send_ms == $ts) | all' <<<"$output"
	run -0 mq-lag -q --max-silence 1h
	assert_output ""
	silent() {
		run mq-lag -q --max-silence 100ms
		[ "$status" -eq 1 ] && [[ $output == *"u: silent"* ]]
	}
	wait_for 15 silent
	# once per topic, however many groups it has
	assert_equal "${#lines[@]}" 2
	assert_line --regexp '^t: silent [0-9.]+s > 100ms$'
	assert_line --regexp '^u: silent [0-9.]+s > 100ms$'
	# a limit for a topic overrides the global one
	run -1 mq-lag -q --max-silence 100ms --max-silence u=1h
	assert_output --regexp '^t: silent [0-9.]+s > 100ms$'
	# a send ends the silence
	mq-send -q t c
	run -0 mq-lag -q --max-silence t=1h --max-silence u=1h
	assert_output ""
	# a breach in the table: after it, on stdout, exit 1
	run -1 --separate-stderr mq-lag --max-silence u=100ms
	assert_equal "$stderr" ""
	assert_line --index 0 --regexp '^TOPIC +GROUP'
	assert_line --regexp '^u: silent [0-9.]+s > 100ms$'
	# a topic that is not there, or a group in its place: 64
	run -64 --separate-stderr mq-lag -q --max-silence nope=1s
	assert_equal "$stderr" "mq-lag: --max-silence: no such topic: nope"
	run -64 --separate-stderr mq-lag -q --max-silence t/g=1s
	[[ ${stderr_lines[0]} == "mq-lag: invalid topic name 't/g'"* ]] ||
	    fail "$stderr"
	run -64 mq-lag -q --max-silence 5x
	run -64 mq-lag -q --max-silence --topics 1s
	# Prometheus: the same time, in seconds
	run -0 mq-lag --prometheus
	ts=$(sql "SELECT last_ts FROM topic WHERE name = 'u'")
	printf '%s\n' "$output" >prom
	# shellcheck disable=SC2016 # jq's and awk's, not the shell's
	run -0 awk -v ts="$ts" '$1 == "mq_topic_last_send_timestamp_seconds{topic=\"u\"}" { print ($2 * 1000 - ts < 1 && ts - $2 * 1000 < 1) }' prom
	assert_output 1
	run -0 bash -c 'promtool check metrics <prom'
	assert_output ""
}

@test "--max-idle: a group with a backlog that settled nothing for longer than DUR" {
	mq-send -q t a
	mq-topic group t g >/dev/null
	mq-topic group t h >/dev/null
	assert_equal "$(jf last_settle_ms)" null
	run -0 mq-lag -q --max-idle 1h
	assert_output ""
	idle() {
		run mq-lag -q --max-idle "$@"
		[ "$status" -eq 1 ]
	}
	# h was made after g, so g may be idle a moment before h: wait for
	# both
	both() {
		idle 100ms && [ "${#lines[@]}" -eq 2 ]
	}
	wait_for 15 both
	assert_equal "${#lines[@]}" 2
	assert_line --regexp '^t/g: idle [0-9.]+s > 100ms$'
	assert_line --regexp '^t/h: idle [0-9.]+s > 100ms$'
	# TOPIC/GROUP and GROUP limits, as for the others
	run -1 mq-lag -q --max-idle 100ms --max-idle t/h=1h
	assert_output --regexp '^t/g: idle [0-9.]+s > 100ms$'
	# g settles: last_settle_ms is then, and without a backlog g is not
	# idle however long ago that was
	before=$(now_ms)
	run -0 mq-recv -g g --format '%r' t
	mq-ack "$output"
	after=$(now_ms)
	run -0 jf last_settle_ms
	[ "$output" -ge "$before" ] && [ "$output" -le "$after" ] ||
	    fail "last_settle_ms $output not in [$before, $after]"
	settled=$output
	later() {
		[ "$(now_ms)" -gt $((settled + 300)) ]
	}
	wait_for 15 later
	run -1 mq-lag -q --max-idle 100ms
	assert_output --regexp '^t/h: idle [0-9.]+s > 100ms$'
	# a new backlog: idle counts from its oldest message, not from the
	# settle long before
	mq-send -q t b
	run -0 mq-lag -q --max-idle g=1h
	assert_output ""
	wait_for 15 idle g=100ms
	assert_output --regexp '^t/g: idle [0-9.]+s > 100ms$'
	# JSON: h never settled
	run -0 mq-lag --json t h
	jtrue '.last_settle_ms == null' <<<"$output"
	# Prometheus: a sample for g, none for h (never)
	run -0 mq-lag --prometheus
	printf '%s\n' "$output" >prom
	run -0 grep -c '^mq_group_last_settle_timestamp_seconds{' prom
	assert_output 1
	# shellcheck disable=SC2016 # jq's and awk's, not the shell's
	run -0 awk -v ts="$settled" '$1 == "mq_group_last_settle_timestamp_seconds{topic=\"t\",group=\"g\"}" { print ($2 * 1000 - ts < 1 && ts - $2 * 1000 < 1) }' prom
	assert_output 1
	run -0 bash -c 'promtool check metrics <prom'
	assert_output ""
	# an auto-ack settles too
	run -0 mq-recv -A -g h t
	run -0 mq-lag --json t h
	jtrue '.last_settle_ms > 0' <<<"$output"
	# a group that is not there: 64
	run -64 --separate-stderr mq-lag -q --max-idle t/x=1s
	assert_equal "$stderr" "mq-lag: --max-idle: no such group: t/x"
	run -64 mq-lag -q --max-idle g=soon
}

@test "bad threshold values exit 64 with one line, then the usage" {
	mq-send -q t a
	mq-topic group t g >/dev/null
	for v in x -1 1.5 5x '' g= =5 'bad name=5' t/=5 /g=5; do
		run -64 --separate-stderr mq-lag --max-lag "$v"
		assert_equal "$output" ""
		[[ ${stderr_lines[1]-} == "usage: "* ]] ||
		    fail "want one line, then the usage: $stderr"
		[[ $stderr == mq-lag:* ]] || fail "--max-lag '$v': $stderr"
	done
	for v in xx -1s 1y ''; do
		run -64 --separate-stderr mq-lag --max-age "$v"
		assert_equal "$output" ""
		[[ ${stderr_lines[1]-} == "usage: "* ]] ||
		    fail "want one line, then the usage: $stderr"
		[[ $stderr == mq-lag:* ]] || fail "--max-age '$v': $stderr"
	done
	for o in "--max-dead x" "--max-expired -3"; do
		# shellcheck disable=SC2086 # an option and its value
		run -64 --separate-stderr mq-lag $o
		assert_equal "$output" ""
		[[ ${stderr_lines[1]-} == "usage: "* ]] ||
		    fail "want one line, then the usage: $stderr"
		[[ $stderr == mq-lag:* ]] || fail "$o: $stderr"
	done
}

@test "--json: every line parses, numbers are numbers, times are RFC 3339 and epoch" {
	mq-send -q t a b c
	mq-topic group t g >/dev/null
	mq-recv -g g t >/dev/null
	mq-send -q t2 x		# a topic without a group
	mq-send -q t3 y
	mq-recv -A -g 'done' t3 >/dev/null	# a group with nothing unsettled
	run -0 --separate-stderr mq-lag --json
	assert_equal "$stderr" ""
	assert_equal "${#lines[@]}" 3
	for line in "${lines[@]}"; do
		jtrue 'type == "object"' <<<"$line"
		jtrue '(.time | type) == "string" and (.epoch | type) == "number"' <<<"$line"
		[[ $(jq -r .time <<<"$line") =~ $rfc3339 ]]
		# the string and the number say the same time
		jtrue '(.time | sub("\\.[0-9]+"; "") | fromdateiso8601) == (.epoch | floor)' <<<"$line"
		jtrue '[.end_offset, .messages, .bytes] | map(type) == ["number", "number", "number"]' <<<"$line"
	done
	grp='select(.group != null)'
	jtrue -s "map($grp) | length == 2" <<<"$output"
	jtrue -s "map($grp | [.position, .lag, .in_flight, .expired, .retrying, .delayed, .dead, .consumers, .settled_total, .oldest_age_s] | map(type) | unique == [\"number\"]) | all" <<<"$output"
	jtrue -s 'map(select(.topic == "t2")) | length == 1 and .[0].group == null' <<<"$output"
	line=$(jq -c 'select(.group == "g")' <<<"$output")
	[[ $(jq -r .oldest_time <<<"$line") =~ $rfc3339 ]]
	jtrue '(.oldest_epoch | type) == "number" and (.oldest_time | sub("\\.[0-9]+"; "") | fromdateiso8601) == (.oldest_epoch | floor)' <<<"$line"
	jtrue '.lag == 3 and .in_flight == 1' <<<"$line"
	line=$(jq -c 'select(.group == "done")' <<<"$output")
	jtrue '.lag == 0 and .oldest_time == null and .settled_total == 1' <<<"$line"
	jtrue '(.last_settle_ms | type) == "number" and (.last_send_ms | type) == "number"' <<<"$line"
	jtrue '.last_settle_ms == null' <<<"$(jq -c 'select(.group == "g")' <<<"$output")"
	jtrue -s 'map(.last_send_ms | type) | unique == ["number"]' <<<"$output"
	# a breach goes to stderr, so the JSON stays parseable
	run -1 --separate-stderr mq-lag --json --max-lag 1
	jtrue -s 'length == 3' <<<"$output"
	assert_equal "$stderr" "t/g: lag 3 > 1"
}

@test "--prometheus passes promtool check metrics, with HELP, TYPE and labels" {
	mq-send -q t a b c
	mq-topic group t g >/dev/null
	mq-recv -g g t >/dev/null
	mq-topic group t g2 >/dev/null
	mq-send -q t2 x
	run -0 --separate-stderr mq-lag --prometheus
	assert_equal "$stderr" ""
	printf '%s\n' "$output" >prom
	run -0 bash -c 'promtool check metrics <prom'
	assert_output ""
	# every sample's metric has one HELP and one TYPE line
	names=$(grep -v '^#' prom | sed 's/[{ ].*//' | sort -u)
	[ -n "$names" ]
	for n in $names; do
		assert_equal "$(grep -c "^# HELP $n " prom)" 1
		assert_equal "$(grep -Ec "^# TYPE $n (gauge|counter)$" prom)" 1
	done
	# labels: topic everywhere, group on group metrics
	assert_equal "$(grep -v '^#' prom | grep -vc 'topic="')" 0
	grep -qx 'mq_group_lag{topic="t",group="g"} 3' prom
	grep -qx 'mq_group_in_flight{topic="t",group="g"} 1' prom
	grep -qx 'mq_topic_messages{topic="t2"} 1' prom
	grep -qx 'mq_topic_messages{topic="t"} 3' prom
	# one sample per topic for topic metrics, one per group for the others
	assert_equal "$(grep -c '^mq_topic_messages{topic="t"}' prom)" 1
	grep -qx 'mq_group_lag{topic="t",group="g2"} 3' prom
	assert_equal "$(grep -c '^mq_group_lag{' prom)" 2
	# a breach goes to stderr: stdout still passes, the same samples
	run -1 --separate-stderr mq-lag --prometheus --max-lag 1
	assert_equal "$stderr" "t/g: lag 3 > 1
t/g2: lag 3 > 1"
	printf '%s\n' "$output" >prom2
	grep -qx 'mq_group_lag{topic="t",group="g"} 3' prom2
	run -0 bash -c 'promtool check metrics <prom2'
	assert_output ""
}

@test "--topics ranks topics by messages, then bytes" {
	mq-send -q small a b
	seq 5 | mq-send -q many
	printf 'long body %d\n' 1 2 3 4 5 | mq-send -q bigger
	mq-topic group many g >/dev/null
	run -0 mq-lag --topics
	[[ ${lines[0]} =~ ^TOPIC\ +MESSAGES\ +BYTES ]]
	assert_equal "$(awk 'NR > 1 { printf "%s ", $1 }' <<<"$output")" "bigger many small "
	assert_equal "$(awk 'NR > 1 { printf "%s ", $2 }' <<<"$output")" "5 5 2 "
	run -0 mq-lag --topics --json
	assert_equal "$(jq -r .topic <<<"$output" | paste -sd ' ')" "bigger many small"
	jtrue -s '.[1].groups == 1 and .[1].messages == 5' <<<"$output"
}

@test "--consumers lists an exec-mode consumer while it runs" {
	mq-send -q t job
	mq-topic group t g >/dev/null
	run -0 mq-lag --consumers
	assert_equal "${#lines[@]}" 1	# the header only
	assert_line --index 0 --regexp '^TOPIC +GROUP '
	run -0 mq-lag --consumers --json
	assert_output ""
	# the handler records its process group
	# shellcheck disable=SC2016 # $$ and $0 are the handler shell's
	bg out mq-recv -f -g g t -- sh -c \
	    'cut -d" " -f5 /proc/$$/stat >>"$0"; exec sleep 300' \
	    "$BATS_TEST_TMPDIR/pgids"
	pid=$BG
	# (jq -e passes on no input: a line must come out)
	listed() {
		mq-lag --consumers --json | jq -c --argjson p "$pid" \
		    'select(.pid == $p and .in_flight == 1)' | grep -q . &&
		    grep -qs . "$BATS_TEST_TMPDIR/pgids"
	}
	wait_for 30 listed
	run -0 mq-lag --consumers --json
	assert_equal "${#lines[@]}" 1
	# shellcheck disable=SC2016 # $h and $p are jq's
	jtrue --arg h "$(hostname)" --argjson p "$pid" \
	    '.topic == "t" and .group == "g" and .host == $h and .pid == $p and .in_flight == 1' <<<"$output"
	[[ $(jq -r .since <<<"$output") =~ $rfc3339 ]]
	run -0 mq-lag --consumers
	assert_equal "${#lines[@]}" 2
	assert_line --index 1 --regexp "^t +g +[^ ]+ +$pid +"
	assert_equal "$(jf consumers)" 1
	assert_equal "$(jf in_flight)" 1
	# once it is gone (killed), the next look reaps it
	kill -9 "$pid"
	finish "$pid" 15
	assert_equal "$ST" 137
	reaped() {
		mq-recv -g g t >/dev/null 2>&1 || true
		[ "$(jf consumers)" = 0 ]
	}
	wait_for 30 reaped
	run -0 mq-lag --consumers --json
	assert_output ""
}

@test "mq-lag answers while another process holds the write lock" {
	sqlite_only "SQLite's one write lock, held by sqlite3"
	mq-send -q t a b
	mq-topic group t g >/dev/null
	# the holder says "held" once it has the lock (a busy timeout of its
	# own, so a probe cannot make it give up)
	printf '%s\n' '.timeout 10000' 'BEGIN IMMEDIATE;' \
	    "INSERT INTO topic(name, created) VALUES('zz', 0);" "SELECT 'held';" >lock.sql
	# shellcheck disable=SC2016 # $MQ_DB is expanded by the inner bash
	setsid bash -c '(cat lock.sql; sleep 300) | sqlite3 "$MQ_DB"' \
	    >held 2>&1 3>&- &
	echo $! >>"$BATS_TEST_TMPDIR/pgids"
	wait_for 30 grep -qx held held
	locked() {
		run ! --separate-stderr sqlite3 "$MQ_DB" 'BEGIN IMMEDIATE; ROLLBACK;'
		[[ $stderr == *"database is locked"* ]] ||
		    fail "the write lock is not held: $stderr"
	}
	locked
	# a mq-lag that waited for the lock would wait past the timeout: a
	# busy timeout longer than that, and the holder longer still
	export MQ_BUSY_TIMEOUT=120s
	run -0 --separate-stderr timeout 20 mq-lag
	assert_equal "$stderr" ""
	assert_line --regexp '^t +g +2 +1 +2 '
	refute_output --partial zz	# not committed: not seen
	run -0 timeout 20 mq-lag --json
	jtrue -s 'length == 1 and .[0].topic == "t" and .[0].group == "g" and .[0].lag == 2' <<<"$output"
	run -0 timeout 20 mq-lag --prometheus
	assert_line 'mq_group_lag{topic="t",group="g"} 2'
	refute_output --partial zz
	run -0 timeout 20 mq-lag --topics
	assert_line --regexp '^t +2 '
	refute_output --partial zz
	run -1 timeout 20 mq-lag -q --max-lag 1
	assert_output "t/g: lag 2 > 1"
	locked	# still held all along
}

@test "mq-lag does not write: data_version, size and time of the files unchanged" {
	sqlite_only "the files' data_version, size and time"
	mq-send -q t a b c
	mq-topic group t g >/dev/null
	mq-recv -g g t >/dev/null
	# a connection of our own sees data_version move on others' commits
	coproc SQ { sqlite3 "$MQ_DB" 2>&1 3>&-; }
	echo "$SQ_PID" >>"$BATS_TEST_TMPDIR/pids"
	dv() {
		echo 'PRAGMA data_version;' >&"${SQ[1]}"
		read -r -t 10 DV <&"${SQ[0]}"
	}
	files() {
		local f
		for f in "$MQ_DB" "$MQ_DB-wal"; do
			if [ -e "$f" ]; then
				stat -c '%n %s %Y.%y' "$f"
				sha256sum <"$f"
			else
				echo "$f: missing"
			fi
		done
	}
	dv; v1=$DV
	[ -n "$v1" ]
	[ -e "$MQ_DB-wal" ]	# kept by our connection: its time is watched too
	before=$(files)
	run -0 mq-lag
	assert_line --regexp '^t +g +3 +2 +3 +1 '
	run -0 mq-lag --json t g
	jtrue '.lag == 3' <<<"$output"
	run -0 mq-lag --prometheus
	assert_line 'mq_group_lag{topic="t",group="g"} 3'
	run -0 mq-lag --topics
	assert_line --regexp '^t +3 '
	run -0 mq-lag --consumers
	assert_line --index 0 --regexp '^TOPIC +GROUP '
	run -1 mq-lag -q --max-lag 0 --max-age 0
	assert_line 't/g: lag 3 > 0'
	# --watch, until it has drawn a few frames
	# shellcheck disable=SC2217 # test_helper's bg: the command reads it
	bg watch.out mq-lag --watch 100ms </dev/null
	wp=$BG
	frames() {
		[ "$(grep -Ec '^t +g +3 +2 +3 +1 ' watch.out)" -ge 3 ]
	}
	wait_for 30 frames
	kill -TERM "$wp"
	finish "$wp" 10
	assert_equal "$ST" 0
	dv; assert_equal "$DV" "$v1"
	assert_equal "$(files)" "$before"
	# the probes work: a write moves them
	mq-send -q t d
	dv; [ "$DV" != "$v1" ] || fail "data_version did not move on a write"
	[ "$(files)" != "$before" ] || fail "the files did not change on a write"
	sq=$SQ_PID fd=${SQ[1]}
	exec {fd}>&-
	finish "$sq" 10
}

# scratch DIR: a new directory the unprivileged user can reach.
scratch() {
	RO=$(mktemp -d "${TMPDIR:-/tmp}/mq-ro.XXXXXX")
	echo "$RO" >>"$BATS_TEST_TMPDIR/dirs"
	chmod 755 "$RO"
}

@test "mq-lag reads a live database it may not write (another user's, read-only directory)" {
	sqlite_only "file permissions (t/100-pg.bats: a role without privileges)"
	scratch
	export MQ_DB=$RO/mq.db
	mq-send -q t a b c
	mq-topic group t g >/dev/null
	mq-recv -g g t >/dev/null
	# the database in use (its -wal and -shm are there), all read-only
	# shellcheck disable=SC2016 # $MQ_DB is expanded by the inner bash
	setsid bash -c '(echo "SELECT count(*) FROM msg;"; sleep 300) | sqlite3 "$MQ_DB"' \
	    >held 2>&1 3>&- &
	echo $! >>"$BATS_TEST_TMPDIR/pgids"
	wait_for 30 grep -qx 3 held
	[ -e "$MQ_DB-wal" ]
	[ -e "$MQ_DB-shm" ]
	chmod 444 "$RO"/mq.db*
	chmod 555 "$RO"
	run -0 --separate-stderr as_nobody "$MQ_BIN/mq-lag" -d "$MQ_DB" --json t g
	assert_equal "$stderr" ""
	jtrue '.end_offset == 3 and .lag == 3 and .in_flight == 1' <<<"$output"
	# still live, nothing added beside it
	[ -e "$MQ_DB-wal" ]
	assert_equal "$(find "$RO" -mindepth 1 -printf '%f\n' | sort | paste -sd ' ')" \
	    "mq.db mq.db-mq mq.db-shm mq.db-wal"
}

@test "mq-lag reads a read-only copy (chmod 444) as another user" {
	sqlite_only "file permissions"
	mq-send -q t a b c
	mq-topic group t g >/dev/null
	mq-recv -g g t >/dev/null
	scratch
	# a consistent copy of the file, as a backup would make
	sqlite3 "$MQ_DB" ".backup '$RO/copy.db'"
	chmod 444 "$RO/copy.db"
	# in a directory the user may write to: SQLite makes its -shm there
	chmod 1777 "$RO"
	run -0 --separate-stderr as_nobody "$MQ_BIN/mq-lag" -d "$RO/copy.db" --json t g
	assert_equal "$stderr" ""
	jtrue '.end_offset == 3 and .lag == 3 and .in_flight == 1' <<<"$output"
}

@test "mq-lag reads a read-only copy in a directory it may not write" {
	sqlite_only "file permissions"
	# A copy with no -wal/-shm beside it (a backup, or a file checkpointed
	# by sqlite3), chmod 444, where the user cannot create the WAL's
	# shared memory: mq-lag only reads, so it must still answer (it used
	# to exit 77 "attempt to write a readonly database"; d80592c).
	mq-send -q t a b c
	mq-topic group t g >/dev/null
	mq-recv -g g t >/dev/null
	scratch
	sqlite3 "$MQ_DB" ".backup '$RO/copy.db'"
	chmod 444 "$RO/copy.db"
	chmod 555 "$RO"
	run -0 --separate-stderr as_nobody "$MQ_BIN/mq-lag" -d "$RO/copy.db" --json t g
	assert_equal "$stderr" ""
	jtrue '.end_offset == 3 and .lag == 3 and .in_flight == 1' <<<"$output"
	run -0 as_nobody "$MQ_BIN/mq-lag" -d "$RO/copy.db"
	assert_line --regexp '^t +g +3 +2 +3 +1 '
	assert_equal "$(ls -A "$RO")" copy.db
}

@test "missing database, topic or group: 66, nothing created" {
	run -66 --separate-stderr mq-lag -d "$BATS_TEST_TMPDIR/nope.db"
	assert_equal "$output" ""
	assert_equal "${#stderr_lines[@]}" 1
	[[ $stderr == mq-lag:* ]] || fail "$stderr"
	[ ! -e "$BATS_TEST_TMPDIR/nope.db" ]
	run -66 mq-lag
	no_db
	run -66 mq-lag -d "$BATS_TEST_TMPDIR/no/such/dir/mq.db"
	[ ! -e "$BATS_TEST_TMPDIR/no" ]
	mq-send -q t a
	mq-topic group t g >/dev/null
	run -66 --separate-stderr mq-lag nosuch
	[[ $stderr == mq-lag:*nosuch* ]] || fail "$stderr"
	assert_equal "$output" ""
	run -66 --separate-stderr mq-lag t nosuch
	[[ $stderr == mq-lag:*nosuch* ]] || fail "$stderr"
	assert_equal "$output" ""
	run -66 --separate-stderr mq-lag --json nosuch
	assert_equal "$output" ""
	run -66 --separate-stderr mq-lag --max-lag 0 nosuch
	assert_equal "$output" ""
	run -0 mq-lag t g
	assert_line --regexp '^t +g +1 +1 +1 '
}

@test "no escape sequences off a terminal or with NO_COLOR; colour on a terminal" {
	mq-send -q t a
	mq-topic group t g >/dev/null
	run -0 mq-recv -g g --format '%r' t
	mq-ack --dead "$output"	# DEAD is drawn hot
	esc=$'\033'
	# plain: STATUS ARGS...: mq-lag ARGS exits STATUS, prints something
	# and no escape sequence
	plain() {
		local want=$1
		shift
		run "-$want" mq-lag "$@"
		[ -n "$output" ] || fail "mq-lag $*: no output"
		[[ $output != *"$esc"* ]] || fail "mq-lag $*: escape in: $output"
	}
	plain 0
	plain 0 --topics
	plain 0 --consumers
	plain 1 --max-dead 0
	assert_line 't/g: dead 1 > 0'
	plain 1 -q --max-dead 0
	NO_COLOR=1 plain 0
	# on a terminal: colour, unless NO_COLOR
	bin=$(printf %q "$MQ_BIN/mq-lag") db=$(printf %q "$MQ_DB")
	tm new-session -d -s c -x 200 -y 20 "MQ_DB=$db $bin; sleep 300"
	tm new-session -d -s n -x 200 -y 20 "NO_COLOR=1 MQ_DB=$db $bin; sleep 300"
	drawn() {
		tm capture-pane -p -t "$1" | grep -Eq '^t +g '
	}
	wait_for 15 drawn c
	wait_for 15 drawn n
	[[ $(tm capture-pane -e -p -t c) == *"${esc}["* ]] ||
	    fail "no colour on a terminal"
	[[ $(tm capture-pane -e -p -t n) != *"${esc}["* ]] ||
	    fail "colour on a terminal with NO_COLOR"
	# a silent topic with no group is drawn hot too
	mq-send -q lone x
	sleep 0.2
	tm new-session -d -s s -x 200 -y 20 "MQ_DB=$db $bin --max-silence lone=100ms; sleep 300"
	lone() {
		tm capture-pane -p -t s | grep -Eq '^lone '
	}
	wait_for 15 lone
	[[ $(tm capture-pane -e -p -t s | grep 'lone ') == *"${esc}[31m"* ]] ||
	    fail "the silent topic lone is not drawn hot (red)"
}

@test "--watch redraws in a terminal and quits on q" {
	mq-send -q t a b c
	mq-topic group t g >/dev/null
	bin=$(printf %q "$MQ_BIN/mq-lag") db=$(printf %q "$MQ_DB")
	st=$(printf %q "$BATS_TEST_TMPDIR/watch.status")
	tm new-session -d -s w -x 200 -y 50 "MQ_DB=$db $bin --watch 1s; echo \$? >$st"
	shows() {
		local screen
		screen=$(tm capture-pane -p -t w) &&
		    grep -Eq '^TOPIC +GROUP +END +POS +LAG .*IN/s +OUT/s' <<<"$screen" &&
		    grep -Eq "$1" <<<"$screen"
	}
	wait_for 30 shows '^t +g +3 +1 +3 '
	tm capture-pane -p -t w | grep -q '(every 1s; q quits)'
	# a later frame shows a new message
	mq-send -q t d
	wait_for 30 shows '^t +g +4 +1 +4 '
	tm send-keys -t w q
	ended() {
		if tm has-session -t w 2>/dev/null; then
			return 1
		fi
	}
	wait_for 20 ended
	assert_equal "$(cat watch.status)" 0
	# --watch goes alone
	run -64 mq-lag --watch 1s --json
	run -64 mq-lag --watch 10ms
	# a name that is not there is said on the terminal, not on the
	# screen --watch would have drawn and then taken away
	tm new-session -d -s e -x 200 -y 20 "MQ_DB=$db $bin --watch 1s --max-lag typo=5; echo rc=\$?; sleep 300"
	said() {
		tm capture-pane -p -t e | grep -q '^rc='
	}
	wait_for 30 said
	run -0 tm capture-pane -p -t e
	assert_line 'rc=64'
	assert_line --partial 'no such group: typo'
}

@test "--watch ends quietly when its reader goes away: 74, nothing on stderr" {
	mq-send -q t a
	# shellcheck disable=SC2016 # PIPESTATUS is the inner shell's
	run -0 bash -c 'timeout 60 mq-lag --watch=100ms 2>err | head -c 10 >/dev/null; echo "${PIPESTATUS[0]}"'
	assert_output 74
	[ ! -s err ] || fail "stderr: $(cat err)"
}
