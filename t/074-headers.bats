#!/usr/bin/env bats
# 074-headers.bats: message headers (mq-send -H NAME=VALUE): stored with
# every message of the send, in the order given; shown by --json, by
# --format (%h{NAME}, %H), by --trace and mq-lag --messages; MQ_H_NAME in
# exec mode; mq-replay -H selects by them.  Bad names and values are
# usage errors that change nothing.  A database of the schema before
# headers is migrated; a topic copied to another database (mq(7)) keeps
# them.  On both backends.

# shellcheck disable=SC2154 # stderr, stderr_lines: set by bats' run --separate-stderr
# shellcheck disable=SC2016 # handlers' scripts in single quotes: theirs to expand

load test_helper

teardown() {
	kill_bg
}

# slots_ready N: at least N combining slots of the -mq file wait to be
# taken (see t/043-combine.bats).
slots_ready() {
	[ "$(od -v -An -tu4 -w8 -j131144 -N512 "$MQ_DB-mq" |
	    awk '$1 == 2' | wc -l)" -ge "$1" ]
}

# offsets ARGS...: the offsets mq-replay ARGS prints, one line, blank
# separated; fails as mq-replay does.
offsets() {
	local out
	out=$(mq-replay --format '%o ' "$@") || return
	echo "${out% }"
}

@test "-H: every message of the send carries its headers in the order given; --json shows them, only where there are some" {
	mq-send -q -H trace-id=4bf92f35 -H content-type=text/plain t one two
	mq-send -q t three
	printf 'four\nfive\n' | mq-send -q -H 'q=a=b c é' -H empty= t
	mq-send -q --dedup d1 -H via=dedup t six
	run -0 mq-recv -n 0 --json t
	assert_equal "${#lines[@]}" 6
	for i in 0 1; do
		jtrue '.headers == {"trace-id": "4bf92f35", "content-type": "text/plain"}
		    and (.headers | keys_unsorted) == ["trace-id", "content-type"]' \
		    <<<"${lines[i]}"
	done
	jtrue 'has("headers") | not' <<<"${lines[2]}"
	for i in 3 4; do
		jtrue '.headers == {"q": "a=b c é", "empty": ""}' <<<"${lines[i]}"
	done
	jtrue '.body == "six" and .headers == {"via": "dedup"}' <<<"${lines[5]}"
	# mq-replay the same
	run -0 mq-replay --json --from-offset 4 -n 1 t
	jtrue '.headers == {"q": "a=b c é", "empty": ""} and .body == "four"' <<<"$output"
}

@test "-H from a stream: a batch of over 1000 messages, with dedup ids, each keeps the headers" {
	seq 1200 | sed 's/^/id-/' | mq-send -q --dedup-field 1 -H batch=b1 t
	seq 5 | mq-send -q -H batch=b2 t
	run -0 sh -c 'mq-replay -H batch=b1 t | wc -l'
	assert_output 1200
	run -0 offsets -H batch=b2 t
	assert_output '1201 1202 1203 1204 1205'
}

@test "--format: %h{NAME} is the value, escaped, empty without one; %H is every header, a tab between two" {
	mq-send -q -H a=1 -H 'b=x\y' t m
	mq-send -q t n
	run -0 mq-replay --format '%o[%h{a}][%h{b}][%h{c}][%H]\n' t
	assert_equal "${lines[0]}" $'1[1][x\\\\y][][a=1\tb=x\\\\y]'
	assert_equal "${lines[1]}" '2[][][][]'
	run -0 mq-recv -n 0 -g g --format '%o %h{a} %%h{a}\n' t
	assert_output $'1 1 %h{a}\n2  %h{a}'
	local f
	for f in '%h' '%h{}' '%h{a' '%ha}' '%h{.a}' '%h{a b}' '%h{a}%h{'; do
		run -64 --separate-stderr mq-replay --format "$f" t
		stderr_has "invalid format"
		run -64 --separate-stderr mq-recv -g g2 --format "$f" t
		stderr_has "invalid format"
	done
	# the refused receives made no group
	run -0 sql "SELECT count(*) FROM grp WHERE name = 'g2'"
	assert_output 0
}

@test "exec mode: each header is MQ_H_NAME, upper case with - and . as _; none comes from mq-recv's own environment" {
	mq-send -q -H trace-id=abc -H content.type='a b' -H Mixed_Case=1 t m
	mq-send -q t bare
	run -0 env MQ_H_STALE=old MQ_H_TRACE_ID=old mq-recv -n 2 -g g t -- \
	    sh -c 'env | grep "^MQ_H_" | sort >"env.$MQ_OFFSET"; exit 0'
	run -0 cat env.1
	assert_output $'MQ_H_CONTENT_TYPE=a b\nMQ_H_MIXED_CASE=1\nMQ_H_TRACE_ID=abc'
	run -0 cat env.2
	assert_output ''
	run -0 mq-lag --json t g
	jtrue '.lag == 0' <<<"$output"
}

@test "mq-replay -H: only messages with that value; repeated, every one must match; -n counts matches; none matched: 1" {
	mq-send -q -H env=prod -H team=a t 1
	mq-send -q -H env=dev -H team=a t 2
	mq-send -q t 3
	mq-send -q -k k -H env=prod t 4
	mq-send -q -H team=b -H env=prod t 5
	run -0 offsets -H env=prod t
	assert_output '1 4 5'
	run -0 offsets -H env=prod -H team=a t
	assert_output 1
	run -0 offsets -H team=b -H env=prod t
	assert_output 5
	run -0 offsets -n 2 -H env=prod t
	assert_output '1 4'
	run -0 offsets -k k -H env=prod t
	assert_output 4
	run -0 offsets --from-offset 2 --to-offset 4 -H env=prod t
	assert_output 4
	# exact values, exact names
	for h in team=c env=pro env=prod2 Env=prod env= envx=prod; do
		run -1 offsets -H "$h" t
		assert_output ''
	done
	run -1 offsets -k k -H team=a t
	assert_output ''
}

@test "mq-replay -f -H: follows, printing only the messages that match" {
	mq-send -q -H x=1 t a
	bg out mq-replay -f -n 2 -H x=1 --format '%o %b\n' t
	pid=$BG
	mq-send -q t b
	mq-send -q -H x=2 t c
	mq-send -q -H x=1 -H y=2 t d
	finish "$pid" 30
	assert_equal "$ST" 0
	run -0 cat out
	assert_output $'1 a\n4 d'
}

@test "bad headers: one line, 64, nothing sent, the database unchanged" {
	mq-send -q t first
	before=$(db_state)
	local long129 v1025
	long129=$(printf 'n%.0s' $(seq 129))
	v1025=$(printf 'v%.0s' $(seq 1025))
	local -a bad=(noequals '=v' -a=v .a=v 'a b=v' 'a/b=v' "$long129=v"
	    $'a\nb=v' $'x\ny' $'\033[31m=v' "$long129$long129"
	    $'a=x\ty' $'a=x\ny' $'a=x\033y' $'a=\xff' $'a=x\x7f' "a=$v1025")
	for h in "${bad[@]}"; do
		run -64 --separate-stderr mq-send -H "$h" t x
		assert_output ''
		[[ ${stderr_lines[0]} == "mq-send: invalid "*header* ]] ||
		    fail "-H '$h': ${stderr_lines[0]}"
		[[ ${stderr_lines[1]} == "usage: "* ]] || fail "-H '$h': $stderr"
		# one line, then the synopsis
		assert_equal "${stderr#*$'\n'}" "$(mq-send --help | sed '/^$/,$d')"
		run -64 --separate-stderr mq-replay -H "$h" t
		[[ ${stderr_lines[0]} == "mq-replay: invalid "*header* ]] ||
		    fail "mq-replay -H '$h': ${stderr_lines[0]}"
	done
	run -64 --separate-stderr mq-send -H a=1 -H b=2 -H a=3 t x
	assert_equal "${stderr_lines[0]}" "mq-send: header a given twice"
	run -64 --separate-stderr mq-send -H a-b=1 -H A.B=2 t x
	assert_equal "${stderr_lines[0]}" \
	    "mq-send: headers a-b and A.B would be one variable, MQ_H_A_B, in exec mode"
	local -a many=()
	for i in $(seq 65); do many+=(-H "h$i=$i"); done
	run -64 --separate-stderr mq-send "${many[@]}" t x
	assert_equal "${stderr_lines[0]}" "mq-send: too many headers: at most 64"
	# from stdin too: nothing read, nothing sent
	run -64 --separate-stderr mq-send -H bad t <<<"x"
	run -64 --separate-stderr mq-replay -g g -H a=1 --earliest t
	stderr_has "-H goes with reading the log"
	run -64 --separate-stderr mq-replay --trace 1 -H a=1 t
	assert_equal "$(db_state)" "$before"
	db_intact
	# the limits themselves are fine
	long128=${long129:1}
	run -0 mq-send "${many[@]:4}" -H "$long128=${v1025:1}" t x
	assert_output 2
	run -0 mq-replay --from-offset 2 --json t
	jtrue '(.headers | length) == 64 and
	    (.headers | to_entries | last | (.key | length) == 128 and (.value | length) == 1024)' <<<"$output"
}

@test "--trace and mq-lag --messages show the headers" {
	mq-topic group t g >/dev/null
	mq-send -q -H a=1 -H 'b=two words' t m
	run -0 mq-replay --trace 1 t
	assert_line 'header a=1'
	assert_line 'header b=two words'
	run -0 mq-lag --messages --json t g
	jtrue '.headers == {"a": "1", "b": "two words"}' <<<"$output"
	mq-send -q t bare
	run -0 mq-replay --trace 2 t
	refute_line --partial 'header'
}

@test "a retry and a redriven dead letter keep their headers: the same message" {
	mq-topic group t g --max-attempts 2 >/dev/null
	mq-send -q -H a=1 t m
	r=$(mq-recv -g g --format '%r' t)
	mq-ack --fail --delay 0 "$r"
	run -0 mq-recv -g g --format '%a %h{a} %r' t
	[[ $output == "2 1 t:g:1:2:"* ]] || fail "retry: $output"
	mq-ack --dead "${output##* }"
	mq-replay -g g --dead t >/dev/null
	run -0 mq-recv -g g --json t
	jtrue '.headers == {"a": "1"} and .body == "m"' <<<"$output"
}

@test "a send with headers takes no combining slot: its headers are stored with it" {
	sqlite_only "the slots of the -mq file"
	export MQ_BUSY_TIMEOUT=120s
	mq-send -q t first
	exec {lk}>>"$MQ_DB-mq"
	flock -x "$lk"
	bg out.h mq-send -H h=1 t with
	ph=$BG
	bg out.p mq-send t plain
	pp=$BG
	# the plain one leaves its message in a slot
	wait_for 60 slots_ready 1
	flock -u "$lk"
	exec {lk}>&-
	finish "$ph" 60
	assert_equal "$ST" 0
	finish "$pp" 60
	assert_equal "$ST" 0
	run -0 mq-replay --format '%b %H\n' t
	assert_line 'with h=1'
	assert_line 'plain '
	assert_equal "${#lines[@]}" 3
}

@test "a database of the schema before headers (SQLite 9, PostgreSQL 6) is migrated by a reader; old messages have none, and every table and column of the step is made" {
	mq-send -q -k k t old
	mq-topic group t g >/dev/null
	# what the step to SQLite 10, PostgreSQL 7 adds goes
	local older
	older=$(undo_step10)
	if [ -n "$PG" ]; then
		sql "$(undo_pg_step9) $(undo_pg_step8) $older
		    UPDATE mq_meta SET value = '6' WHERE key = 'version'"
		want=9
		version="SELECT value FROM mq_meta WHERE key = 'version'"
	else
		sql "$older PRAGMA user_version = 9"
		want=10
		version='PRAGMA user_version'
	fi
	run -0 sql "$version"
	[ "$output" != "$want" ] || fail "not made older"
	run -0 mq-replay --json t
	jtrue '.key == "k" and .body == "old" and (has("headers") | not)' <<<"$output"
	run -0 sql "$version"
	assert_output "$want"
	run -0 sql 'SELECT count(*) FROM msg WHERE headers IS NULL'
	assert_output 1
	run -0 sql 'SELECT (SELECT count(*) FROM consumed) + (SELECT count(*)
	    FROM outbox) + (SELECT count(bid) FROM delivery) + (SELECT
	    count(dedup) FROM msg) + (SELECT sum(per_key + rate_tat) + count(idem)
	    + count(rate_n) + sum(duplicates) FROM grp)'
	assert_output 0
	mq-send -q -H a=1 t new
	run -0 mq-recv -n 0 -g g --format '%o %b [%H]\n' t
	assert_output $'1 old []\n2 new [a=1]'
	db_intact
}

@test "a topic copied to another database with mq(7)'s per-message loop keeps keys and headers" {
	# the old database: a SQLite file; the new one: the test's (either)
	old=$BATS_TEST_TMPDIR/old.db
	mq-send -q -d "$old" -k k1 -H trace-id=abc -H 'note=a b  c' orders one
	mq-send -q -d "$old" orders $'two\ttabbed'
	mq-send -q -d "$old" -H 'x=*' orders 'three*'
	PG=$MQ_DB
	# as mq(7) has it, under "Moving from SQLite"
	us=$(printf '\037') tab=$(printf '\t')
	# shellcheck disable=SC2086 # $headers split at tabs, on purpose
	mq-replay -d "$old" --format "%o$us%k$us%H$us%b\n" orders |
	while IFS=$us read -r off key headers body; do
		set -f; IFS=$tab; set -- $headers; unset IFS; set +f
		for h; do set -- "$@" -H "$h"; shift; done
		mq-send -q -e -d "$PG" ${key:+-k "$key"} "$@" --dedup "copy-$off" \
		    orders -- "$body" || exit
	done
	want=$(mq-replay -d "$old" --json orders | jq -c 'del(.time, .epoch_ms)')
	run -0 sh -c "mq-replay --json orders | jq -c 'del(.time, .epoch_ms)'"
	assert_output "$want"
	run -0 mq-replay --json -n 1 orders
	jtrue '.key == "k1" and .headers == {"trace-id": "abc", "note": "a b  c"}' <<<"$output"
}
