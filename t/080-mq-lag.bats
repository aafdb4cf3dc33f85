#!/usr/bin/env bats
# 080-mq-lag.bats: mq-lag, the monitor: every column in a constructed
# scenario (table and JSON), delayed messages apart from lag, thresholds
# and their exit status for cron, JSON lines, Prometheus text (checked by
# promtool), --topics, --consumers, reading while a writer holds the lock,
# never writing, read-only files, missing database or topic, colour only
# on a terminal, and --watch driven through tmux.
#
# Every wait is a bounded poll; bounds are generous for a slow, shared
# machine.

load test_helper

# Background processes (pids) and process groups (pgids) this test
# started, a tmux server on a private socket, a scratch directory outside
# $BATS_TEST_TMPDIR (for the unprivileged user): all go in teardown.
teardown() {
	local p

	kill_bg
	tm kill-server 2>/dev/null || true
	for p in $(cat "$BATS_TEST_TMPDIR/dirs" 2>/dev/null); do
		chmod -R u+w -- "$p" 2>/dev/null
		rm -rf -- "$p"
	done
}

# tm ARGS...: tmux on a private socket under the test's directory, so no
# user's server is touched; bats' fd 3 stays out of the server.
tm() {
	TMUX= TMUX_TMPDIR="$BATS_TEST_TMPDIR" tmux -L "mqtest$$" "$@" 3>&-
}

# jf FIELD: FIELD of the JSON line of t/g.
jf() {
	mq-lag --json t g | jq -r ".$1"
}

# lag_is FIELD VALUE: for wait_for.
lag_is() {
	[ "$(jf "$1")" = "$2" ]
}

# col FILE COLUMN: the cell under header COLUMN in the row of t/g of a
# table in FILE.
col() {
	awk -v c="$2" 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
	    $1 == "t" && $2 == "g" { print $(h[c]); n++ }
	    END { exit n != 1 }' "$1"
}

# 20 messages in t.  Group g took 1-10 with a 1s lease, acked 1-3, failed
# 4-5 for an hour, dead-lettered 6, extended 7-8 and let 9-10 expire;
# 11-20 are not delivered yet.
scenario() {
	seq 20 | mq-send -q t
	mq-recv -g g -n 10 --lease 1s --format '%r\n' t >rc
	[ "$(wc -l <rc)" -eq 10 ]
	sed -n 1,3p rc | mq-ack
	sed -n 4,5p rc | mq-ack --fail --delay 1h
	sed -n 6p rc | mq-ack --dead
	sed -n 7,8p rc | mq-ack --extend 1h
	wait_for 15 lag_is expired 2
}

rfc3339='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$'

@test "each column in a constructed scenario, JSON and table agree" {
	scenario
	run -0 --separate-stderr mq-lag --json t g
	assert_equal "$stderr" ""
	[ "${#lines[@]}" -eq 1 ]
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
	jq -e '.oldest_age_s > 0 and .oldest_age_s < 600' lag.json

	run -0 --separate-stderr mq-lag
	assert_equal "$stderr" ""
	echo "$output" >lag.txt
	[[ ${lines[0]} =~ ^TOPIC\ +GROUP\ +END\ +POS\ +LAG\ +INFLIGHT\ +EXPIRED\ +RETRY\ +DELAYED\ +DEAD\ +OLDEST\ +CONSUMERS$ ]]
	assert_equal "$(col lag.txt END)" 20
	assert_equal "$(col lag.txt POS)" 11
	assert_equal "$(col lag.txt LAG)" 16
	assert_equal "$(col lag.txt INFLIGHT)" 2
	assert_equal "$(col lag.txt EXPIRED)" 2
	assert_equal "$(col lag.txt RETRY)" 2
	assert_equal "$(col lag.txt DELAYED)" 0
	assert_equal "$(col lag.txt DEAD)" 1
	assert_equal "$(col lag.txt CONSUMERS)" 0
	[[ $(col lag.txt OLDEST) =~ ^[0-9.]+s$|^[0-9]+m[0-9]{2}s$ ]]
	# the same with TOPIC and TOPIC GROUP operands
	run -0 mq-lag t
	assert_equal "${#lines[@]}" 2
	run -0 mq-lag t g
	echo "$output" >lag2.txt
	assert_equal "$(col lag2.txt LAG)" 16
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
	mq-lag --json t g >j
	# everything due is settled: nothing lags, nothing is old
	jq -e '.lag == 0 and .in_flight == 0 and .delayed == 1 and .oldest_time == null' j
	run -0 mq-lag --max-lag 0 --max-age 1ms -q
	assert_output ""
	run -0 mq-lag t g
	echo "$output" >lag.txt
	assert_equal "$(col lag.txt DELAYED)" 1
	assert_equal "$(col lag.txt LAG)" 0
}

@test "thresholds: --max-lag, -q, per group and TOPIC/GROUP overrides, exit status" {
	seq 10 | mq-send -q t
	mq-topic group t g >/dev/null
	mq-topic group t h >/dev/null
	# crossed: the table and exactly one breach line per group, exit 1
	run -1 --separate-stderr mq-lag --max-lag 5 t g
	assert_equal "$stderr" ""
	[ "$(grep -c ': lag ' <<<"$output")" -eq 1 ]
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
	run -0 mq-lag -q --max-lag other/g=3
	assert_output ""
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
	mq-recv -g g --format '%r\n' t | mq-ack --dead
	run -1 --separate-stderr mq-lag -q --max-dead 0
	assert_output "t/g: dead 1 > 0"
	run -0 mq-lag -q --max-dead 1
	# an expired lease
	run -0 mq-lag -q --max-expired 0
	mq-recv -g g --lease 1s t >/dev/null
	wait_for 15 lag_is expired 1
	run -1 mq-lag -q --max-expired 0
	assert_output "t/g: expired 1 > 0"
	# all at once: one line each
	run -1 mq-lag -q --max-expired 0 --max-dead 0 --max-lag 1 --max-age 1s
	assert_equal "${#lines[@]}" 4
}

@test "bad threshold values exit 64 with one line on stderr" {
	mq-send -q t a
	mq-topic group t g >/dev/null
	for v in x -1 1.5 5x '' g= =5 'bad name=5' t/=5 /g=5; do
		run -64 --separate-stderr mq-lag --max-lag "$v"
		assert_equal "$output" ""
		[ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
		[[ $stderr == mq-lag:* ]]
	done
	for v in xx -1s 1y ''; do
		run -64 --separate-stderr mq-lag --max-age "$v"
		[[ $stderr == mq-lag:* ]]
	done
	run -64 mq-lag --max-dead x
	run -64 mq-lag --max-expired -3
}

@test "--json: every line parses, numbers are numbers, times are RFC 3339 and epoch" {
	mq-send -q t a b c
	mq-topic group t g >/dev/null
	mq-recv -g g t >/dev/null
	mq-send -q t2 x		# a topic without a group
	mq-send -q t3 y
	mq-recv -A -g done t3 >/dev/null	# a group with nothing unsettled
	run -0 --separate-stderr mq-lag --json
	assert_equal "$stderr" ""
	assert_equal "${#lines[@]}" 3
	for line in "${lines[@]}"; do
		jq -e . <<<"$line" >/dev/null
		jq -e '(.time | type) == "string" and (.epoch | type) == "number"' <<<"$line"
		[[ $(jq -r .time <<<"$line") =~ $rfc3339 ]]
		# the string and the number say the same time
		jq -e '(.time | sub("\\.[0-9]+"; "") | fromdateiso8601) == (.epoch | floor)' <<<"$line"
		jq -e '[.end_offset, .messages, .bytes] | map(type) == ["number", "number", "number"]' <<<"$line"
	done
	grp='select(.group != null)'
	jq -se "map($grp) | length == 2" <<<"$output"
	jq -se "map($grp | [.position, .lag, .in_flight, .expired, .retrying, .delayed, .dead, .consumers, .settled_total, .oldest_age_s] | map(type) | unique == [\"number\"]) | all" <<<"$output"
	jq -se 'map(select(.topic == "t2")) | length == 1 and .[0].group == null' <<<"$output"
	line=$(jq -c 'select(.group == "g")' <<<"$output")
	[[ $(jq -r .oldest_time <<<"$line") =~ $rfc3339 ]]
	jq -e '(.oldest_epoch | type) == "number" and (.oldest_time | sub("\\.[0-9]+"; "") | fromdateiso8601) == (.oldest_epoch | floor)' <<<"$line"
	jq -e '.lag == 3 and .in_flight == 1' <<<"$line"
	line=$(jq -c 'select(.group == "done")' <<<"$output")
	jq -e '.lag == 0 and .oldest_time == null and .settled_total == 1' <<<"$line"
	# a breach goes to stderr, so the JSON stays parseable
	run -1 --separate-stderr mq-lag --json --max-lag 1
	jq -se 'length == 3' <<<"$output"
	[[ $stderr == *"t/g: lag 3 > 1"* ]]
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
		[ "$(grep -c "^# HELP $n " prom)" -eq 1 ]
		[ "$(grep -Ec "^# TYPE $n (gauge|counter)$" prom)" -eq 1 ]
	done
	# labels: topic everywhere, group on group metrics
	[ "$(grep -v '^#' prom | grep -vc 'topic="')" -eq 0 ]
	grep -qx 'mq_group_lag{topic="t",group="g"} 3' prom
	grep -qx 'mq_group_in_flight{topic="t",group="g"} 1' prom
	grep -qx 'mq_topic_messages{topic="t2"} 1' prom
	grep -qx 'mq_topic_messages{topic="t"} 3' prom
	# one sample per topic for topic metrics, one per group for the others
	[ "$(grep -c '^mq_topic_messages{topic="t"}' prom)" -eq 1 ]
	grep -qx 'mq_group_lag{topic="t",group="g2"} 3' prom
	[ "$(grep -c '^mq_group_lag{' prom)" -eq 2 ]
	# a breach goes to stderr: stdout still passes
	run -1 --separate-stderr mq-lag --prometheus --max-lag 1
	[[ $stderr == *"t/g: lag 3 > 1"* ]]
	printf '%s\n' "$output" >prom2
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
	jq -se '.[1].groups == 1 and .[1].messages == 5' <<<"$output"
}

@test "--consumers lists an exec-mode consumer while it runs" {
	mq-send -q t job
	mq-topic group t g >/dev/null
	run -0 mq-lag --consumers
	assert_equal "${#lines[@]}" 1	# the header only
	# the handler records its process group (it is its own leader)
	bg out mq-recv -f -g g t -- sh -c 'echo $$ >>"$0"; exec sleep 30' \
	    "$BATS_TEST_TMPDIR/pgids"
	pid=$BG
	listed() {
		mq-lag --consumers --json | jq -e --argjson p "$pid" \
		    'select(.pid == $p and .in_flight == 1)' >/dev/null
	}
	wait_for 15 listed
	run -0 mq-lag --consumers --json
	jq -e --arg h "$(hostname)" '.topic == "t" and .group == "g" and .host == $h' <<<"$output"
	[[ $(jq -r .since <<<"$output") =~ $rfc3339 ]]
	run -0 mq-lag --consumers
	assert_line --regexp "^t +g +[^ ]+ +$pid +"
	assert_equal "$(jf consumers)" 1
	assert_equal "$(jf in_flight)" 1
	# once it is gone (killed), the next look reaps it
	{ kill -9 "$pid"; wait "$pid"; } 2>/dev/null || true
	gone() {
		mq-recv -g g t >/dev/null 2>&1 || true
		[ "$(jf consumers)" = 0 ]
	}
	wait_for 15 gone
}

@test "mq-lag answers while another process holds the write lock" {
	mq-send -q t a b
	mq-topic group t g >/dev/null
	# the holder says "held" once it has the lock (a busy timeout of its
	# own, so a probe cannot make it give up)
	printf '%s\n' '.timeout 10000' 'BEGIN IMMEDIATE;' \
	    "INSERT INTO topic(name, created) VALUES('zz', 0);" "SELECT 'held';" >lock.sql
	setsid bash -c '(cat lock.sql; sleep 30) | sqlite3 "$MQ_DB"' \
	    >held 2>&1 3>&- &
	echo $! >>"$BATS_TEST_TMPDIR/pgids"
	wait_for 15 grep -qx held held
	locked() {
		! sqlite3 "$MQ_DB" 'BEGIN IMMEDIATE; ROLLBACK;' 2>/dev/null
	}
	locked
	run -0 --separate-stderr timeout 3 mq-lag
	assert_equal "$stderr" ""
	assert_line --regexp '^t +g +2 '
	refute_output --partial zz	# not committed: not seen
	run -0 timeout 3 mq-lag --json
	run -0 timeout 3 mq-lag --prometheus
	run -0 timeout 3 mq-lag --topics
	run -1 timeout 3 mq-lag -q --max-lag 1
	assert_output "t/g: lag 2 > 1"
	locked	# still held all along
}

@test "mq-lag does not write: data_version, size and time of the files unchanged" {
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
			[ -e "$f" ] && stat -c '%n %s %Y.%y' "$f" && sha256sum <"$f"
		done
	}
	dv; v1=$DV
	[ -n "$v1" ]
	before=$(files)
	mq-lag >/dev/null
	mq-lag --json t g >/dev/null
	mq-lag --prometheus >/dev/null
	mq-lag --topics >/dev/null
	mq-lag --consumers >/dev/null
	mq-lag -q --max-lag 0 --max-age 0 >/dev/null || true
	mq-lag --watch 100ms </dev/null >/dev/null 3>&- & wp=$!
	echo "$wp" >>"$BATS_TEST_TMPDIR/pids"
	sleep 0.5
	kill -TERM "$wp"
	wait "$wp" || true
	dv; assert_equal "$DV" "$v1"
	assert_equal "$(files)" "$before"
	# the probe works: a write moves it
	mq-send -q t d
	dv; [ "$DV" != "$v1" ]
	exec {SQ[1]}>&-
}

# scratch DIR: a new directory the unprivileged user can reach.
scratch() {
	RO=$(mktemp -d "${TMPDIR:-/tmp}/mq-ro.XXXXXX")
	echo "$RO" >>"$BATS_TEST_TMPDIR/dirs"
	chmod 755 "$RO"
}

@test "mq-lag reads a live database it may not write (another user's, read-only directory)" {
	scratch
	export MQ_DB=$RO/mq.db
	mq-send -q t a b c
	mq-topic group t g >/dev/null
	mq-recv -g g t >/dev/null
	# the database in use (its -wal and -shm are there), all read-only
	setsid bash -c '(echo "SELECT count(*) FROM msg;"; sleep 30) | sqlite3 "$MQ_DB"' \
	    >/dev/null 2>&1 3>&- &
	echo $! >>"$BATS_TEST_TMPDIR/pgids"
	wait_for 15 test -e "$MQ_DB-shm"
	chmod 444 "$RO"/mq.db*
	chmod 555 "$RO"
	run -0 --separate-stderr as_nobody "$MQ_BIN/mq-lag" -d "$MQ_DB" --json t g
	assert_equal "$stderr" ""
	jq -e '.end_offset == 3 and .lag == 3 and .in_flight == 1' <<<"$output"
}

@test "mq-lag reads a read-only copy (chmod 444) as another user" {
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
	jq -e '.end_offset == 3 and .lag == 3 and .in_flight == 1' <<<"$output"
}

@test "mq-lag reads a read-only copy in a directory it may not write" {
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
	jq -e '.end_offset == 3 and .lag == 3 and .in_flight == 1' <<<"$output"
	run -0 as_nobody "$MQ_BIN/mq-lag" -d "$RO/copy.db"
	assert_line --regexp '^t +g +3 +2 +3 +1 '
	assert_equal "$(ls -A "$RO")" copy.db
}

@test "missing database, topic or group: 66, nothing created" {
	run -66 --separate-stderr mq-lag -d "$BATS_TEST_TMPDIR/nope.db"
	[ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
	[[ $stderr == mq-lag:* ]]
	[ ! -e "$BATS_TEST_TMPDIR/nope.db" ]
	run -66 mq-lag
	[ ! -e "$MQ_DB" ]
	run -66 mq-lag -d "$BATS_TEST_TMPDIR/no/such/dir/mq.db"
	[ ! -e "$BATS_TEST_TMPDIR/no" ]
	mq-send -q t a
	mq-topic group t g >/dev/null
	run -66 --separate-stderr mq-lag nosuch
	[[ $stderr == mq-lag:*nosuch* ]]
	assert_equal "$output" ""
	run -66 --separate-stderr mq-lag t nosuch
	[[ $stderr == mq-lag:*nosuch* ]]
	run -66 mq-lag --json nosuch
	run -66 mq-lag --max-lag 0 nosuch
	run -0 mq-lag t g
}

@test "no escape sequences off a terminal or with NO_COLOR; colour on a terminal" {
	mq-send -q t a
	mq-topic group t g >/dev/null
	mq-recv -g g t | mq-ack --dead	# DEAD is drawn hot
	esc=$'\033'
	for args in "" "--topics" "--consumers" "--max-dead 0" "-q --max-dead 0"; do
		run mq-lag $args
		[[ $output != *"$esc"* ]]
	done
	# on a terminal: colour, unless NO_COLOR
	bin=$(printf %q "$MQ_BIN/mq-lag") db=$(printf %q "$MQ_DB")
	tm new-session -d -s c -x 200 -y 20 "MQ_DB=$db $bin; sleep 60"
	tm new-session -d -s n -x 200 -y 20 "NO_COLOR=1 MQ_DB=$db $bin; sleep 60"
	drawn() {
		tm capture-pane -p -t "$1" | grep -Eq '^t +g '
	}
	wait_for 15 drawn c
	wait_for 15 drawn n
	[[ $(tm capture-pane -e -p -t c) == *"$esc["* ]]
	[[ $(tm capture-pane -e -p -t n) != *"$esc["* ]]
}

@test "--watch redraws in a terminal and quits on q" {
	mq-send -q t a b c
	mq-topic group t g >/dev/null
	bin=$(printf %q "$MQ_BIN/mq-lag") db=$(printf %q "$MQ_DB")
	tm new-session -d -s w -x 200 -y 50 "MQ_DB=$db $bin --watch 1s"
	shows() {
		local screen
		screen=$(tm capture-pane -p -t w) &&
		    grep -Eq '^TOPIC +GROUP +END +POS +LAG .*IN/s +OUT/s' <<<"$screen" &&
		    grep -Eq "$1" <<<"$screen"
	}
	wait_for 20 shows '^t +g +3 +1 +3 '
	# a later frame shows a new message
	mq-send -q t d
	wait_for 20 shows '^t +g +4 +1 +4 '
	tm send-keys -t w q
	ended() {
		! tm has-session -t w 2>/dev/null
	}
	wait_for 10 ended
	# --watch goes alone
	run -64 mq-lag --watch 1s --json
	run -64 mq-lag --watch 10ms
}
