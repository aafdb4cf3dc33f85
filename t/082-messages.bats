#!/usr/bin/env bats
# 082-messages.bats: mq-lag --messages, a group's messages by state
# (pending from the log, held back by a delay or a busy key, in flight
# with its holder, expired, waiting for a retry with the last reason,
# dead with its reason), in the table and in JSON, its filters, and that
# it changes nothing; and a consumer's note when it makes its topic or
# group, or MQ_NO_CREATE's refusal (typos seen).  On both backends.
# shellcheck disable=SC2154 # stderr, stderr_lines: set by bats' run --separate-stderr

load test_helper

teardown() {
	kill_bg
}

# scenario: topic t, group g (2 attempts): 1 retry (failed, "disk full"),
# 2 dead ("bad input"), 3 in flight, 4 and 5 pending, 6 delayed 1h.
scenario() {
	mq-topic group t g --max-attempts 2 >/dev/null
	mq-send -q t 'first job' second third 'fourth body that is rather long and goes on and on' five
	mq-send -q --delay 1h t later
	local r
	r=$(mq-recv -g g --format '%r\n' t)
	mq-ack --fail --delay 10m --reason 'disk full' "$r"
	r=$(mq-recv -g g --format '%r\n' t)
	mq-ack --dead --reason 'bad input' "$r"
	mq-recv -g g --lease 10m t >/dev/null
}

@test "every state in the table, one row a message in order, and nothing changes" {
	scenario
	before=$(db_state)
	run -0 mq-lag --messages t g
	assert_line -n 0 --regexp '^OFFSET +STATE +TRY +AGE +DUE +HOLDER +REASON +BODY$'
	assert_line -n 1 --regexp '^ +1  retry +1 .* in 9m[0-9]+s +- +disk full +first job$'
	assert_line -n 2 --regexp '^ +2  dead +1 .* - +- +bad input +second$'
	assert_line -n 3 --regexp "^ +3  inflight +1 .* in 9m[0-9]+s +$(hostname):[0-9]+ +- +third$"
	assert_line -n 4 --regexp '^ +4  pending +0 .* - +- +- +fourth body [a-z ]*\.\.\.$'
	assert_line -n 5 --regexp '^ +5  pending +0 .* - +- +- +five$'
	assert_line -n 6 --regexp '^ +6  pending +0 .* in 59m[0-9]+s +- +- +later$'
	[ "${#lines[@]}" = 7 ]
	# within 80 columns
	for l in "${lines[@]}"; do
		[ "${#l}" -le 80 ] || fail "wider than 80: $l"
	done
	[ "$(db_state)" = "$before" ]
	# and a receiver still gets what is pending, from 4 on
	run -0 mq-recv -g g --format '%o\n' -n 0 t
	assert_output $'4\n5'
}

@test "JSON lines carry everything: state, attempt, due, holder, reason, key, body" {
	scenario
	run -0 mq-lag --messages --json t g
	[ "${#lines[@]}" = 6 ]
	jtrue '.offset == 1 and .state == "retry" and .attempt == 1 and .reason == "disk full" and .due_ms > .epoch_ms and .body == "first job" and (has("host") | not)' <<<"${lines[0]}"
	jtrue '.offset == 2 and .state == "dead" and .reason == "bad input" and (has("due_ms") | not)' <<<"${lines[1]}"
	# shellcheck disable=SC2016 # $h is jq's
	jtrue --arg h "$(hostname)" '.offset == 3 and .state == "inflight" and .host == $h and .pid > 0 and .due_ms > .epoch_ms' <<<"${lines[2]}"
	jtrue '.offset == 4 and .state == "pending" and .attempt == 0 and .size == 50 and .key == null' <<<"${lines[3]}"
	jtrue '.offset == 6 and .state == "pending" and .due_ms - .epoch_ms >= 3590000' <<<"${lines[5]}"
	jtrue '.topic == "t" and .group == "g"' <<<"${lines[4]}"
	# a body that is not UTF-8 goes as base64
	printf '\377\376' | mq-send -q t
	run -0 mq-lag --messages --json --from-offset 7 t g
	jtrue '.offset == 7 and .base64 == true and .body == "//4="' <<<"$output"
}

@test "JSON: a reason's quote, controls and UTF-8; mq-ack refuses a reason that is not UTF-8" {
	mq-send -q t m
	r=$(mq-recv -g g t | cut -f1)
	before=$(db_state)
	run -64 mq-ack --dead --reason "$(printf 'bad\377')" "$r"
	assert_output --partial 'invalid reason: want UTF-8'
	[ "$(db_state)" = "$before" ]
	mq-ack --dead --reason "$(printf 'bad"x\001\342\202\254y')" "$r"
	run -0 mq-lag --messages --json t g
	assert_output --partial '"reason":"bad\"x\u0001€y"'
	jtrue '.reason == "bad\"x\u0001€y"' <<<"$output"
}

@test "an expired lease, and a message behind its key in an ordered group" {
	mq-topic group t g --ordered >/dev/null
	mq-send -q -k a t a1 a2
	mq-send -q t free
	mq-recv -g g --lease 1ms -n 1 t >/dev/null
	sleep 0.1
	run -0 mq-lag --messages --json t g
	[ "${#lines[@]}" = 3 ]
	jtrue '.offset == 1 and .state == "expired" and .key == "a"' <<<"${lines[0]}"
	jtrue '.offset == 2 and .state == "pending" and .key == "a"' <<<"${lines[1]}"
	jtrue '.offset == 3 and .state == "pending" and .key == null' <<<"${lines[2]}"
	run -0 mq-lag --messages --state expired t g
	assert_line -n 1 --regexp '^ +1  expired +1 .* ago '
	[ "${#lines[@]}" = 2 ]
}

@test "--state, -k, --from-offset, --to-offset and -n choose the messages" {
	scenario
	mq-send -q -k k1 t keyed
	run -0 mq-lag --messages --state dead,retry --json t g
	[ "$(jq -r .offset <<<"$output" | paste -sd' ')" = "1 2" ]
	run -0 mq-lag --messages --state pending --json t g
	[ "$(jq -r .offset <<<"$output" | paste -sd' ')" = "4 5 6 7" ]
	run -0 mq-lag --messages --state inflight --json t g
	[ "$(jq -r .offset <<<"$output" | paste -sd' ')" = "3" ]
	run -0 mq-lag --messages -k k1 --json t g
	[ "$(jq -r .offset <<<"$output" | paste -sd' ')" = "7" ]
	run -0 mq-lag --messages --from-offset 2 --to-offset 5 --json t g
	[ "$(jq -r .offset <<<"$output" | paste -sd' ')" = "2 3 4 5" ]
	run -0 mq-lag --messages -n 3 --from-offset 2 --json t g
	[ "$(jq -r .offset <<<"$output" | paste -sd' ')" = "2 3 4" ]
	# nothing in that state: the header alone, still 0
	run -0 mq-lag --messages --state expired t g
	[ "${#lines[@]}" = 1 ]
}

@test "more messages than one read: every one, in order" {
	mq-topic group t g >/dev/null
	seq 1 700 | mq-send -q t
	mq-recv -g g -n 300 t >/dev/null
	run -0 mq-lag --messages --json t g
	[ "${#lines[@]}" = 700 ]
	[ "$(jq -r .offset <<<"$output" | paste -sd' ')" = "$(seq 1 700 | paste -sd' ')" ]
	[ "$(jq -r .state <<<"$output" | sort | uniq -c | awk '{ print $2 "=" $1 }' | paste -sd' ')" = "inflight=300 pending=400" ]
}

@test "the table stops at 1000 rows and says so; -n and --json go on" {
	mq-topic group t g >/dev/null
	seq 1 1003 | mq-send -q t
	run -0 --separate-stderr mq-lag --messages t g
	assert_equal "${#lines[@]}" 1001	# and the header
	assert_line --index 1000 --regexp '^ *1000 +pending '
	assert_equal "$stderr" "mq-lag: more than 1000 messages: the first 1000 shown (-n N shows N, --json all)"
	run -0 --separate-stderr mq-lag --messages -n 1003 t g
	assert_equal "${#lines[@]}" 1004
	assert_equal "$stderr" ""
	mq-recv -A -g g t >/dev/null	# 1002 left: still more
	run -0 --separate-stderr mq-lag --messages --from-offset 3 t g
	assert_equal "${#lines[@]}" 1001
	[ -n "$stderr" ]
	run -0 --separate-stderr mq-lag --messages --from-offset 4 t g
	assert_equal "${#lines[@]}" 1001
	assert_equal "$stderr" ""
	run -0 mq-lag --messages --json t g
	assert_equal "${#lines[@]}" 1002
}

@test "bad use: 64; no such topic or group: 66; nothing created" {
	mq-topic group t g >/dev/null
	before=$(db_state)
	run -64 --separate-stderr mq-lag --messages --state bogus t g
	assert_equal "${stderr_lines[0]}" "mq-lag: invalid state 'bogus': want pending, inflight, expired, retry or dead"
	run -64 --separate-stderr mq-lag --messages t
	assert_equal "${stderr_lines[0]}" "mq-lag: --messages wants TOPIC and GROUP"
	[[ ${stderr_lines[1]} == "usage: mq-lag "* ]]
	run -64 --separate-stderr mq-lag --state dead t g
	stderr_has "go with --messages"
	run -64 --separate-stderr mq-lag --messages --prometheus t g
	stderr_has "--messages goes with"
	run -64 mq-lag --messages -n 0 t g
	run -66 --separate-stderr mq-lag --messages t nope
	assert_equal "$stderr" "mq-lag: no such group: t/nope"
	run -66 --separate-stderr mq-lag --messages nope g
	assert_equal "$stderr" "mq-lag: no such topic: nope"
	[ "$(db_state)" = "$before" ]
}

# --- no silent typos: a consumer that makes its topic or group ----------

@test "a consumer that makes a group says so on a terminal, once; MQ_NO_CREATE makes it 66" {
	mq-send -q jobs a b c
	before=$(db_state)
	# MQ_NO_CREATE: nothing made, 66, one line
	MQ_NO_CREATE=1 run -66 --separate-stderr mq-recv -g wrokers jobs
	assert_equal "$stderr" "mq-recv: no such group: jobs/wrokers (MQ_NO_CREATE is set)"
	MQ_NO_CREATE=1 run -66 --separate-stderr mq-recv -f -g w jbos -- true
	assert_equal "$stderr" "mq-recv: no such topic: jbos (MQ_NO_CREATE is set)"
	[ "$(db_state)" = "$before" ]
	# on a terminal (script(1) gives it one): one note, then the message
	run -0 script -qec "mq-recv -n 1 -g wrokers jobs" /dev/null
	assert_line -n 0 $'mq-recv: created group wrokers on jobs (from the oldest message, 3 messages)\r'
	assert_line -n 1 --regexp $'^jobs:wrokers:1:1:[0-9a-f]+\ta\r$'
	[ "${#lines[@]}" = 2 ]
	# the group is there now: no note, and MQ_NO_CREATE lets it be
	run -0 script -qec "MQ_NO_CREATE=1 mq-recv -n 1 -g wrokers jobs" /dev/null
	assert_output --regexp $'^jobs:wrokers:2:1:[0-9a-f]+\tb\r$'
	run -1 script -qec "mq-recv -w 100ms -g w jbos" /dev/null
	[ "${#lines[@]}" = 1 ]
	assert_line -n 0 $'mq-recv: created topic jbos and group w (empty)\r'
	# not a terminal: no note
	run -0 --separate-stderr mq-recv -n 1 -g other jobs
	assert_equal "$stderr" ""
	MQ_NO_CREATE=0 run -0 mq-recv -n 1 -g zero jobs
}
