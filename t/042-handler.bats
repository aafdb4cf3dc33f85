#!/usr/bin/env bats
# 042-handler.bats: why a handler failed, and a limit on how long it may
# run (exec mode).  A failed handler's stderr still reaches mq-recv's and
# its last 2 KiB are the failure's reason: in the history (--trace), the
# listing and the dead letter.  --timeout stops a handler with what it
# started (SIGTERM, then SIGKILL) and fails its delivery.  A worker that
# says what it does: -v, the first ^C on a terminal; --max-time and
# --empty-ok for cron-run workers.  On both backends.

# shellcheck disable=SC2154 # stderr, stderr_lines: set by bats' run --separate-stderr
# shellcheck disable=SC2016 # handlers' scripts in single quotes: theirs to expand

load test_helper

teardown() {
	kill_bg
}

# dead_or_gone PID: the process no longer runs (a zombie is not running;
# a grandchild of ours is reaped by whoever adopted it).
dead_or_gone() {
	local st
	st=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
	[[ ${st##*) } == Z* ]]
}

@test "a failed handler's stderr reaches ours and is the failure's reason, and the dead letter's" {
	mq-topic group t g --max-attempts 2 --backoff 10ms >/dev/null
	mq-send -q t m
	cat >h <<-'EOF'
	#!/bin/sh
	echo "working on $(cat)" >&2
	echo "error: disk full" >&2
	exit 3
	EOF
	chmod +x h
	run -0 --separate-stderr mq-recv -n 2 -w 30s -g g t -- ./h
	# both attempts' stderr passed through, as it came
	assert_equal "$stderr" "working on m
error: disk full
working on m
error: disk full"
	assert_equal "$(sql "SELECT reason FROM history WHERE event = 'failed' ORDER BY attempt")" "handler exited 3: working on m
error: disk full
handler exited 3: working on m
error: disk full"
	assert_equal "$(sql 'SELECT state, reason FROM delivery')" "2|attempts exhausted (2): handler exited 3: working on m
error: disk full"
	# --trace shows it on one line, escaped; the listing has it whole
	run -0 mq-replay --trace 1 t
	assert_line --partial 'failed     '
	assert_line --partial 'handler exited 3: working on m\nerror: disk full'
	run -0 mq-lag --messages --json t g
	jtrue '.state == "dead" and .reason == "attempts exhausted (2): handler exited 3: working on m\nerror: disk full"' <<<"$output"
}

@test "the reason keeps the last 2 KiB of stderr, as text; exit 65 and a signal say so too; a success keeps nothing" {
	mq-topic group t g >/dev/null
	mq-send -q t long bin rejected killed fine
	cat >h <<-'EOF'
	#!/bin/bash
	case $(cat) in
	long)	head -c 5000 /dev/zero | tr '\0' x >&2; echo END >&2; exit 1 ;;
	bin)	printf 'bad \377\001 bytes\n' >&2; exit 1 ;;
	rejected) echo "cannot parse" >&2; exit 65 ;;
	killed)	echo "about to die" >&2; kill -9 $$ ;;
	fine)	echo "all good" >&2; exit 0 ;;
	esac
	EOF
	chmod +x h
	run -0 --separate-stderr mq-recv -n 5 -g g t -- ./h
	r=$(sql 'SELECT reason FROM delivery WHERE off = 1')
	[[ $r == "handler exited 1: x"*"xEND" ]] || fail "reason: ${r:0:40}...${r: -10}"
	# the last 2048 bytes, less the newline at the end, after 18 bytes
	[ "${#r}" = $((18 + 2047)) ] || fail "reason of ${#r} characters"
	assert_equal "$(sql 'SELECT reason FROM delivery WHERE off = 2')" "handler exited 1: bad ?? bytes"
	assert_equal "$(sql 'SELECT state, reason FROM delivery WHERE off = 3')" "2|rejected by handler (exit 65): cannot parse"
	assert_equal "$(sql 'SELECT reason FROM delivery WHERE off = 4')" "handler killed by signal 9: about to die"
	assert_equal "$(sql 'SELECT count(*) FROM delivery WHERE off = 5')" 0
	assert_equal "$(sql "SELECT count(*) FROM history WHERE off = 5 AND reason IS NOT NULL")" 0
	[[ $stderr == *"all good"* ]]
}

@test "--timeout: a handler past it gets SIGTERM with what it started; the delivery fails and follows the backoff" {
	mq-topic group t g --backoff 1h >/dev/null
	mq-send -q t m
	# shellcheck disable=SC2016 # $$ and $! are the handler's
	printf '%s\n' '#!/bin/sh' \
	    'cut -d" " -f5 /proc/$$/stat >>pgids' \
	    'sleep 300 & echo $! >child' \
	    'echo started >&2' 'sleep 300' >slow
	chmod +x slow
	t0=$(now_ms)
	bg out mq-recv -n 1 -g g --timeout 500ms t -- ./slow
	finish "$BG" 60
	[ "$ST" = 0 ] || fail "mq-recv exit $ST: $(cat out)"
	# it was stopped, not waited for: well under the 300s it would take
	[ $(( $(now_ms) - t0 )) -lt 60000 ]
	wait_for 30 dead_or_gone "$(cat child)" || fail "its child still runs"
	assert_equal "$(sql 'SELECT state, attempt FROM delivery')" "0|1"
	assert_equal "$(sql 'SELECT reason FROM delivery')" "timeout after 500ms: started"
	[ "$(sql 'SELECT due FROM delivery')" -ge $((t0 + 3600000)) ]
}

@test "--timeout: a handler that ignores SIGTERM gets SIGKILL after the grace time" {
	mq-topic group t g >/dev/null
	mq-send -q t m
	# shellcheck disable=SC2016 # $$ is the handler shell's
	printf '%s\n' '#!/bin/sh' \
	    'cut -d" " -f5 /proc/$$/stat >>pgids' \
	    "trap '' TERM" 'echo $$ >handler' 'sleep 300 & wait; sleep 300' >stubborn
	chmod +x stubborn
	bg out mq-recv -n 1 -g g --timeout 200ms t -- ./stubborn
	finish "$BG" 60
	[ "$ST" = 0 ] || fail "mq-recv exit $ST: $(cat out)"
	wait_for 30 dead_or_gone "$(cat handler)"
	assert_equal "$(sql 'SELECT reason FROM delivery')" "timeout after 200ms"
}

@test "--timeout: what a stopped handler started and left behind, ignoring SIGTERM, gets SIGKILL" {
	mq-topic group t g >/dev/null
	mq-send -q t m
	# shellcheck disable=SC2016 # $! is the handler's
	printf '%s\n' '#!/bin/sh' \
	    "(trap '' TERM; exec sleep 300) & echo \$! >left" 'sleep 300' >leaves
	chmod +x leaves
	bg out mq-recv -n 1 -g g --timeout 300ms t -- ./leaves
	finish "$BG" 60
	[ "$ST" = 0 ] || fail "mq-recv exit $ST: $(cat out)"
	# the handler went at the SIGTERM; what it left may not run on
	# while the message is handed out again
	wait_for 30 dead_or_gone "$(cat left)" || fail "what it left still runs"
	assert_equal "$(sql 'SELECT reason FROM delivery')" "timeout after 300ms"
}

@test "--timeout: a handler that writes stderr without end is still stopped" {
	mq-topic group t g >/dev/null
	mq-send -q t m
	printf '%s\n' '#!/bin/sh' 'exec yes flood >&2' >flood
	chmod +x flood
	# our stderr read slower than the handler writes (bash's read goes a
	# byte at a time): there is always more to pass on
	# shellcheck disable=SC2016 # for that bash
	setsid bash -c 'mq-recv -n 1 -g g --timeout 1s t -- ./flood 2>&1 \
	    >/dev/null | while IFS= read -r l; do :; done
	    exit "${PIPESTATUS[0]}"' >out 2>&1 3>&- &
	BG=$!
	echo "$BG" >>"$BATS_TEST_TMPDIR/pgids"	# mq-recv and its reader
	finish "$BG" 60 || fail "mq-recv did not stop its handler"
	[ "$ST" = 0 ] || fail "mq-recv exit $ST"
	[[ $(sql "SELECT reason FROM delivery") == "timeout after 1s: "*flood* ]]
}

@test "the group's --timeout (mq-topic) holds when mq-recv gives none; mq-recv's own wins" {
	mq-topic group t g --timeout 300ms >/dev/null
	mq-topic group t h --timeout 100ms >/dev/null
	mq-send -q t m
	printf '%s\n' '#!/bin/sh' 'exec sleep 300' >slow
	chmod +x slow
	bg out mq-recv -n 1 -g g t -- ./slow
	finish "$BG" 60
	[ "$ST" = 0 ] || fail "mq-recv exit $ST: $(cat out)"
	assert_equal "$(sql "SELECT reason FROM delivery d JOIN grp g ON g.id = d.grp
	    WHERE g.name = 'g'")" "timeout after 300ms"
	run -0 mq-recv -g h --timeout 60s t -- sh -c 'sleep 0.5; cat'
	assert_output m
	[ "$(sql "SELECT settled FROM grp WHERE name = 'h'")" = 1 ]
	# and none lifts the group's limit
	mq-topic group t i --timeout 100ms >/dev/null
	run -0 mq-recv -g i --timeout none t -- sh -c 'sleep 0.5; cat'
	assert_output m
	[ "$(sql "SELECT settled FROM grp WHERE name = 'i'")" = 1 ]
}

@test "--timeout: not without a command, not zero; a handler within it is not touched" {
	run -64 --separate-stderr mq-recv --timeout 1s t
	assert_equal "${stderr_lines[0]}" "mq-recv: --timeout needs a command"
	run -64 --separate-stderr mq-recv --timeout 0 t -- true
	assert_equal "${stderr_lines[0]}" "mq-recv: invalid timeout: must be above zero"
	no_db
	mq-send -q t m
	run -0 mq-recv -g g --timeout 60s t -- sh -c 'sleep 0.2; cat'
	assert_output m
	[ "$(sql 'SELECT settled FROM grp')" = 1 ]
}

# --- a worker that says what it does -------------------------------------

@test "-v: one line per settled message: acked, retry in, dead letter" {
	mq-topic group t g --max-attempts 2 --backoff 30s >/dev/null
	mq-send -q t ok bad rej
	run -0 --separate-stderr mq-recv -v -n 0 -g g t -- sh -c \
	    'case $(cat) in ok) exit 0;; bad) exit 1;; rej) exit 65;; esac'
	assert_equal "$stderr" "t/g #1 attempt 1: exit 0 -> acked
t/g #2 attempt 1: exit 1 -> retry in 30s
t/g #3 attempt 1: exit 65 -> dead letter"
	run -64 --separate-stderr mq-recv -v t
	assert_equal "${stderr_lines[0]}" "mq-recv: -v needs a command"
}

@test "--empty-ok: an empty queue is 0, not 1, in both modes" {
	mq-topic group t g >/dev/null
	run -1 mq-recv -g g t
	run -0 mq-recv --empty-ok -g g t
	run -1 mq-recv -g g t -- true
	run -0 mq-recv --empty-ok -g g t -- true
	run -0 mq-recv --empty-ok -w 100ms -g g t
	mq-send -q t m
	run -0 mq-recv --empty-ok -g g t
	assert_output --regexp $'^t:g:1:1:[0-9a-f]+\tm$'
}

@test "--max-time: a following worker takes nothing after it, lets its handler finish, and exits" {
	mq-topic group t g >/dev/null
	run -1 mq-recv -f --max-time 1s -g g t
	mq-send -q t m1 m2
	# the first handler runs until the file go is there
	bg out mq-recv -f -j 1 --max-time 3s -g g t -- sh -c \
	    'cat >>seen; echo >>seen; until [ -e go ]; do sleep 0.1; done'
	wait_for 30 test -s seen
	t0=$(now_ms)
	past() { [ $(( $(now_ms) - t0 )) -ge 4000 ]; }
	wait_for 30 past
	touch go
	finish "$BG" 30
	[ "$ST" = 0 ] || fail "exit $ST: $(cat out)"
	assert_equal "$(cat seen)" m1
	assert_equal "$(sql 'SELECT settled FROM grp')" 1
	run -0 mq-recv -g g --format '%o\n' t
	assert_output 2
	# a bad or zero one is a usage error
	run -64 --separate-stderr mq-recv --max-time soon t
	assert_equal "${stderr_lines[0]}" "mq-recv: invalid max-time 'soon': want a duration such as 250ms, 30s, 5m, 2h or 7d"
	run -64 --separate-stderr mq-recv --max-time 0 t
	assert_equal "${stderr_lines[0]}" "mq-recv: invalid max-time: must be above zero"
}

@test "the first ^C on a terminal says what it waits for; the handler finishes and is settled" {
	mq-topic group t g >/dev/null
	mq-send -q t m
	# script(1) gives mq-recv a terminal; its pid goes to rpid
	bg out script -qec "sh -c 'echo \$\$ >rpid; exec mq-recv -f -g g t -- sh -c \"touch started; until [ -e go ]; do sleep 0.1; done\"'" /dev/null
	wait_for 30 test -e started
	kill -INT "$(cat rpid)"
	stopping() { grep -q 'stopping' out; }
	wait_for 30 stopping
	touch go
	finish "$BG" 30
	grep -q $'^mq-recv: stopping: waiting for 1 handler; \\^C again to kill them\r$' out ||
	    fail "$(cat -A out)"
	assert_equal "$(sql 'SELECT settled FROM grp')" 1
}
