#!/usr/bin/env bats
# 083-pause.bats: pausing and resuming a group or a topic.  Paused,
# nothing is handed out (a receiver without a wait exits 1, a waiting one
# keeps waiting), mq-lag and mq-topic show say so, and a resume wakes the
# waiting consumers at once; a pause with an end ends by itself.  On both
# backends.

# shellcheck disable=SC2154 # stderr, stderr_lines: set by bats' run --separate-stderr

load test_helper

teardown() {
	kill_bg
}

@test "a paused group hands nothing out; mq-lag and show say so; a resume wakes a waiting consumer" {
	mq-send -q t a b
	run -0 mq-topic group t g --pause forever
	assert_output --partial '; paused for ever'
	run -1 mq-recv -g g t
	run -1 mq-recv -g g t -- true
	run -0 mq-lag t
	assert_line --regexp '^t +g \(paused\) '
	run -0 mq-lag --json t g
	jtrue '.paused == true and .paused_until_ms == null and .lag == 2' <<<"$output"
	# another group of the topic is not paused
	run -0 mq-recv -g other --format '%b' t
	assert_output a
	# a waiting consumer waits, and wakes when the group is resumed
	bg out mq-recv -w 60s -g g --format '%b\n' t
	sleep 0.5
	running() { ! gone "$1"; }
	running "$BG" || fail "the waiting consumer ended while paused: $(cat out)"
	run -0 mq-topic group t g --resume
	refute_output --partial 'paused'
	finish "$BG" 30
	[ "$ST" = 0 ] || fail "exit $ST: $(cat out)"
	assert_equal "$(cat out)" a
	run -0 mq-lag --json t g
	jtrue '.paused == false' <<<"$output"
}

@test "a paused topic pauses every group; a pause with an end ends by itself" {
	mq-send -q t a
	mq-topic group t g >/dev/null
	run -0 mq-topic set t paused=1h
	run -0 mq-topic show t
	assert_line --regexp '^paused until [0-9]{4}-'
	run -1 mq-recv -g g t
	run -1 mq-recv -g new t
	run -0 mq-topic set t paused=no
	run -0 mq-topic show t
	refute_line --partial 'paused'
	run -0 mq-recv -g g --format '%b' t
	assert_output a
	# until a time: over by itself, and a waiter wakes then
	mq-send -q t b
	run -0 mq-topic group t g --pause 1s
	run -1 mq-recv -g g t
	run -0 mq-recv -w 30s -g g --format '%b' t
	assert_output b
}

@test "a pause is checked before anything is changed" {
	mq-send -q t a
	mq-topic group t g >/dev/null
	before=$(db_state)
	run -65 --separate-stderr mq-topic group t g --pause someday
	stderr_has "invalid pause end 'someday': want forever, a duration from now"
	run -65 --separate-stderr mq-topic set t paused=someday
	stderr_has "invalid pause end 'someday'"
	# an end already past would pause nothing
	for past in yesterday now 2020-01-01; do
		run -65 --separate-stderr mq-topic group t g --pause "$past"
		stderr_has "invalid pause end '$past': it is past"
	done
	run -65 --separate-stderr mq-topic set t paused=yesterday
	run -64 --separate-stderr mq-topic group t g --pause
	[ "$(db_state)" = "$before" ]
}
