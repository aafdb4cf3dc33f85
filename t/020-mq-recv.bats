#!/usr/bin/env bats
# mq-recv (printing mode): output formats, counts, waiting, exit status,
# consumer groups (fan-out, competing members), auto-ack, leases and
# redelivery, --from latest.
# shellcheck disable=SC2154 # stderr is set by bats' run --separate-stderr

load test_helper

teardown() {
	exec 6>&- 7>&- 8<&- 2>/dev/null || true
	kill_bg
}

one_line_error() {
	assert_equal "$status" "$1"
	# a usage error adds the synopsis after its one line
	assert_equal "$(printf '%s\n' "${stderr%%$'\n'usage: *}" | wc -l)" 1
	[[ $stderr == mq-recv:* ]]
}

@test "default output is RECEIPT<TAB>BODY, one message" {
	mq-send -q t hello world
	run -0 --separate-stderr mq-recv t
	assert_equal "$stderr" ""
	[ "${#lines[@]}" -eq 1 ]
	re=$'^t:default:1:1:[0-9a-f]{8}\thello$'
	[[ $output =~ $re ]]
	run -0 mq-recv -g g2 t
	re=$'^t:g2:1:1:[0-9a-f]{8}\thello$'
	[[ $output =~ $re ]]
}

@test "bodies with tab, newline, backslash, control bytes stay on one line, escaped" {
	mq-send -q --whole t < <(printf 'a\tb\nc\\d\re\001f\0g\377')
	run -0 mq-recv t
	[ "${#lines[@]}" -eq 1 ]
	assert_equal "${output#*$'\t'}" 'a\tb\nc\\d\re\001f\000g\377'
	# valid UTF-8 passes as is
	mq-send -q t 'héllo €'
	run -0 bash -c 'set -o pipefail; mq-recv t | cut -f2-'
	assert_output 'héllo €'
}

@test "-n N takes up to N, -n 0 takes all, in offset order" {
	mapfile -t msgs < <(seq 1 300)
	mq-send -q t "${msgs[@]}"
	run -0 bash -c 'set -o pipefail; mq-recv -n 2 t | cut -f2'
	assert_output $'1\n2'
	run -0 bash -c 'set -o pipefail; mq-recv --count 3 t | cut -f2'
	assert_output $'3\n4\n5'
	# -n 0: all that is available, more than one internal chunk
	run -0 bash -c 'set -o pipefail; mq-recv -n 0 t | cut -f2'
	assert_output "$(seq 6 300)"
	run -1 mq-recv -n 0 t
	# -n larger than what is there: what is there, status 0
	mq-send -q t x y
	run -0 bash -c 'set -o pipefail; mq-recv -n 10 t | cut -f2'
	assert_output $'x\ny'
}

@test "nothing to receive: exit 1, nothing on stdout or stderr" {
	run -1 --separate-stderr mq-recv t	# topic does not exist yet
	assert_output ""
	assert_equal "$stderr" ""
	mq-send -q t a
	mq-recv t >/dev/null			# leased for 30s
	run -1 --separate-stderr mq-recv t
	assert_output ""
	assert_equal "$stderr" ""
	run -1 --separate-stderr mq-recv -n 0 -A t
	assert_output ""
	assert_equal "$stderr" ""
}

@test "-w waits for a message sent later" {
	mq-send -q t first
	mq-recv -A t >/dev/null
	bg out mq-recv -A -w 60s t
	pid=$BG
	# let it start waiting; with nothing there it must not return
	sleep 1
	gone "$pid" && fail "mq-recv -w returned before the send: $(cat out)"
	mq-send -q t late
	finish "$pid" 60
	assert_equal "$ST" 0
	run -0 cat out
	assert_output late
}

@test "-w 1s with nothing returns 1 after about a second" {
	mq-send -q t first
	mq-recv -A t >/dev/null
	start=$(now_ms)
	bg out mq-recv -w 1s t
	# bounded, generously for a slow machine: it does return
	finish "$BG" 30
	elapsed=$(( $(now_ms) - start ))
	assert_equal "$ST" 1
	run -0 cat out		# stdout and stderr
	assert_output ""
	[ "$elapsed" -ge 950 ] || fail "returned after ${elapsed}ms"
}

@test "a waiting consumer wakes soon after a send, not on a timer" {
	# SPEC: "Waiting consumers wake within milliseconds of a send".
	# (Until 67c8ef2 they woke on the 1s safety tick of common/wait.c.)
	# The consumer writes to a fifo, so the test sees each line the moment
	# it comes; each latency is from the end of mq-send (the commit) to
	# then.  Each send comes just after one of the consumer's safety
	# looks: on that timer, it would take most of a second (five on
	# PostgreSQL), every time; woken by the send, a few ms.  The first of
	# up to three under 500ms passes: two stalls of a slow machine are
	# forgiven, a timer is not.
	local i line pid ms=()
	mq-send -q t start
	mq-recv -A t >/dev/null
	mkfifo out
	# mq-recv opens the fifo itself, before fd 6 exists; fd 6 is
	# read-write, so no open waits
	bg err bash -c 'exec mq-recv -A -n 0 -f t >out'
	pid=$BG
	exec 6<>out
	sleep 1		# asleep in its wait
	for i in 1 2 3; do
		after_look "$pid"
		mq-send -q t "m$i"
		start=$(now_ms)
		read -r -t 60 line <&6 || fail "m$i did not come: $(cat err)"
		ms+=($(( $(now_ms) - start )))
		assert_equal "$line" "m$i"
		[ "${ms[-1]}" -ge 500 ] || break
	done
	[ "${ms[-1]}" -lt 500 ] ||
	    fail "messages took ${ms[*]}ms to arrive (safety look: 1s)"
	gone "$BG" && fail "the consumer ended: $(cat err)"
	run -0 cat err
	assert_output ""
}

@test "every group receives every message (fan-out)" {
	mq-send -q t a b c
	run -0 bash -c 'set -o pipefail; mq-recv -g one -n 0 t | cut -f2'
	assert_output $'a\nb\nc'
	run -0 bash -c 'set -o pipefail; mq-recv -g two -n 0 t | cut -f2'
	assert_output $'a\nb\nc'
	run -0 bash -c 'mq-recv --group three -n 0 -A t'
	assert_output $'a\nb\nc'
	run -1 mq-recv -g one t
	run -1 mq-recv -g two t
}

# gate: a fifo that the commands of gated wait on, held open read-write
# on fd 7 so that no open waits; open_gate lets N of them go at once.
gate() {
	mkfifo gate
	exec 7<>gate
}

open_gate() {
	local i
	for i in $(seq "$1"); do
		echo go >&7
	done
}

# gated CMD...: wait for the gate, then run CMD (a program in place of
# this shell, so that the pid bg tracks is the program's).
gated() {
	read -r _ <gate
	[ "$(type -t "$1")" != file ] || exec "$@"
	"$@"
}

@test "two members of a group never hold the same message (-n 0 at once)" {
	# many chunks of claims, so that the two race on a good many of them
	seq 10000 | mq-send -q t
	gate
	bg r1 gated mq-recv -n 0 t
	p1=$BG
	bg r2 gated mq-recv -n 0 t
	p2=$BG
	open_gate 2
	# each gets some, or all, or none (1) if the other was quicker: one
	# waiting on the other's lock may well find nothing left after it
	finish "$p1" 120
	[[ $ST == [01] ]] || fail "member 1 exit $ST: $(cat r1)"
	finish "$p2" 120
	[[ $ST == [01] ]] || fail "member 2 exit $ST: $(cat r2)"
	cut -f1 r1 | cut -d: -f3 | sort >o1
	cut -f1 r2 | cut -d: -f3 | sort >o2
	run -0 comm -12 o1 o2
	assert_output ""
	# and between them every message, once: something was received
	run -0 sort -n o1 o2
	assert_output "$(seq 10000)"
	run -0 bash -c 'cat r1 r2 | cut -f2 | sort -n'
	assert_output "$(seq 10000)"
}

# claimed: some message of topic t is leased.
claimed() {
	[ "$(sql 'SELECT count(*) FROM delivery WHERE state = 1')" -gt 0 ]
}

@test "a member stuck on its output holds only what it took: another gets the rest" {
	# Member 1 writes to a fifo nobody reads, so it stops, blocked, on a
	# chunk it has claimed and not yet printed (1000 bodies of 1K are far
	# more than a pipe holds, and than mq-recv claims at once); member 2
	# runs meanwhile.  Both hold messages at once, never the same one.
	local i body
	body=$(printf '%01000d' 0)
	for i in $(seq 1000); do
		echo "$i $body"
	done | mq-send -q t
	mkfifo p1
	# mq-recv opens the fifo itself, before fd 6 exists; fd 6 is
	# read-write, so no open waits
	bg err1 bash -c 'exec mq-recv -n 0 t >p1'
	p1=$BG
	exec 6<>p1
	wait_for 60 claimed || fail "member 1 took nothing: $(cat err1)"
	gone "$p1" && fail "member 1 ended: $(cat err1)"
	run -0 --separate-stderr mq-recv -n 0 t
	assert_equal "$stderr" ""
	printf '%s\n' "$output" >r2
	# now read what member 1 has claimed, on a read end opened before fd
	# 6 closes (a fifo without readers would kill member 1 with SIGPIPE);
	# member 1 ends when there is no more, and so does cat
	exec 8<p1
	exec 6>&-
	timeout 120 cat <&8 >r1
	exec 8<&-
	finish "$p1" 60
	assert_equal "$ST" 0
	run -0 cat err1
	assert_output ""
	[ -s r1 ] || fail "member 1 printed nothing"
	cut -f1 r1 | cut -d: -f3 | sort >o1
	cut -f1 r2 | cut -d: -f3 | sort >o2
	run -0 comm -12 o1 o2
	assert_output ""
	run -0 sort -n o1 o2
	assert_output "$(seq 1000)"
}

# worker OUT: receive batches of 5 into OUT until there are none; fails
# when mq-recv fails other than with "nothing" (1).
worker() {
	local rc
	while :; do
		rc=0
		mq-recv -n 5 t >>"$1" || rc=$?
		case $rc in
		0) ;;
		1) return 0 ;;
		*) echo "mq-recv exit $rc"; return 1 ;;
		esac
	done
}

@test "two members taking small batches in a loop share the work, no overlap" {
	seq 400 | mq-send -q t
	gate
	bg log1 gated worker w1
	p1=$BG
	bg log2 gated worker w2
	p2=$BG
	open_gate 2
	finish "$p1" 300
	assert_equal "$ST" 0
	finish "$p2" 300
	assert_equal "$ST" 0
	run -0 cat log1 log2
	assert_output ""
	# both took part: each loop takes 80 runs of mq-recv for all 400
	[ -s w1 ] && [ -s w2 ] || fail "one member got nothing"
	run -0 bash -c 'cat w1 w2 | cut -f1 | cut -d: -f3 | sort -n'
	assert_output "$(seq 400)"
	run -0 bash -c 'cat w1 w2 | cut -f2 | sort -n'
	assert_output "$(seq 400)"
}

@test "--json: one object a line, metadata, UTF-8 body as a string" {
	mq-send -q -k k1 t 'héllo "you"'
	run -0 mq-recv --json t
	[ "${#lines[@]}" -eq 1 ]
	run -0 jq -r '[.topic, .group, .offset, .attempt, .key, .size, .body,
	    (.base64 // false)] | map(tostring) | join("|")' <<<"$output"
	assert_output "t|default|1|1|k1|$(printf %s 'héllo "you"' | wc -c)|héllo \"you\"|false"
	run -0 bash -c 'set -o pipefail; mq-recv -g g2 --json t | jq -r .receipt'
	[[ $output =~ ^t:g2:1:1:[0-9a-f]{8}$ ]]
	run -0 bash -c 'set -o pipefail; mq-recv -g g3 --json t | jq -r .time'
	[[ $output =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$ ]]
}

@test "--json: a body that is not UTF-8 is base64 with \"base64\":true" {
	printf 'ok\377\000\376end' >body
	mq-send -q --whole t <body
	run -0 bash -c 'set -o pipefail; mq-recv --json t | jq -r .base64'
	assert_output true
	run -0 bash -c 'set -o pipefail; mq-recv -g g2 --json t | jq -r .body | base64 -d >decoded'
	cmp body decoded
	run -0 bash -c 'set -o pipefail; mq-recv -g g3 --json t | jq -r .size'
	assert_output "$(wc -c <body)"
}

@test "--json: control characters in a UTF-8 body are JSON escapes" {
	# shellcheck disable=SC1003 # the last \\ is printf's, no quote escaped
	printf 'a\tb\nc\001"\\' >body
	mq-send -q --whole t <body
	run -0 mq-recv --json t
	# one line, with no raw control byte on it
	assert_equal "${#lines[@]}" 1
	[[ $output != *[$'\t\001']* ]] || fail "raw control bytes: $output"
	run -0 bash -c 'set -o pipefail; mq-recv -g g2 --json t | jq -j .body >out'
	cmp body out
}

@test "--format with %o %a %k %b and escapes" {
	mq-send -q -k K t 'x y' 'a	b'
	run -0 mq-recv -n 0 --format '%o %a %k %b\n' t
	assert_output $'1 1 K x y\n2 1 K a\\tb'
	mq-send -q t nokey
	run -0 mq-recv --format '[%k]%%%T/%g %s\t%B\n' -g g t
	assert_output $'[K]%t/g 3\tx y'
	run -0 mq-recv --format '%r\n' -g g t
	[[ $output =~ ^t:g:2:1:[0-9a-f]{8}$ ]]
}

@test "an invalid --format is a usage error (64)" {
	mq-send -q t a
	# shellcheck disable=SC1003 # 'ok\' is a trailing backslash, no quote escaped
	for fmt in '%q' '%' 'x%' 'ok\' '\q' '%Z\n'; do
		run -64 --separate-stderr mq-recv --format "$fmt" t
		one_line_error 64
		assert_output ""
	done
	# nothing was taken
	run -0 mq-recv --format '%o %a\n' t
	assert_output '1 1'
}

@test "-0: RECEIPT<TAB>raw body, NUL-terminated" {
	mq-send -q --whole t < <(printf 'line1\nline2\tx')
	mq-send -q t second
	mq-recv -0 -n 0 t >out
	run -0 bash -c 'tr "\0" "\n" <out | cut -f1 | grep -c "^t:default:[0-9]:1:"'
	assert_output 2
	run -0 bash -c 'sed -z "s/^[^\t]*\t//" out | od -An -c | tr -s " "'
	assert_output "$(printf 'line1\nline2\tx\0second\0' | od -An -c | tr -s ' ')"
}

@test "-A prints bodies only and settles: not redelivered" {
	mq-send -q t a 'b	c'
	run -0 --separate-stderr mq-recv -A -n 0 t
	assert_output $'a\nb\\tc'
	assert_equal "$stderr" ""
	run -0 sql 'SELECT settled FROM grp'
	assert_output 2
	run -1 mq-recv t
	run -1 mq-recv --lease 1s -n 0 t
	run -0 sql 'SELECT count(*) FROM delivery'
	assert_output 0
	run -0 mq-recv --auto-ack -g other -0 -n 0 t
	assert_output "$(printf 'a\0b\tc\0')"
}

@test "an acked message is not redelivered; an unacked one is, after its lease, as attempt 2" {
	mq-send -q t keep drop
	# 5s: long enough that "inside the lease" holds on a slow machine
	run -0 mq-recv --lease 5s -n 0 --format '%r %o %a\n' t
	assert_equal "${#lines[@]}" 2
	assert_equal "${lines[0]#* }" '1 1'
	assert_equal "${lines[1]#* }" '2 1'
	mq-ack "${lines[1]%% *}"
	# inside the lease: nothing
	run -1 mq-recv -n 0 t
	# after it: offset 1 again, attempt 2, and never offset 2
	wait_for 60 bash -c 'mq-recv -n 0 --format "%o %a %b\n" t >>redelivered'
	run -0 cat redelivered
	assert_output '1 2 keep'
	run -1 mq-recv -n 0 t
}

@test "--from latest: a new group skips what is already there" {
	mq-send -q t old1 old2
	run -1 mq-recv -g late --from latest t
	mq-send -q t new1
	run -0 mq-recv -A -g late -n 0 t
	assert_output new1
	run -0 mq-recv -A -g early -n 0 t
	assert_output $'old1\nold2\nnew1'
	run -0 mq-recv -A -g late2 --from earliest -n 0 t
	assert_output $'old1\nold2\nnew1'
	run -64 --separate-stderr mq-recv --from middle t
	one_line_error 64
}

@test "--from latest does not move an existing group" {
	mq-send -q t a
	run -0 mq-recv -A -g g t
	assert_output a
	mq-send -q t b c
	run -0 mq-recv -A -g g --from latest -n 0 t
	assert_output $'b\nc'
}

@test "usage errors (64): no topic, bad option values, unknown option" {
	run -64 --separate-stderr mq-recv
	[[ $stderr == *"usage: mq-recv"* ]]
	run -64 --separate-stderr mq-recv --bogus t
	[[ $stderr == *"usage: mq-recv"* ]]
	for args in "-n -1 t" "-n x t" "-w soon t" "--lease 0 t" "-g .bad t" \
	    "-- .bad" "t t" "t .bad" "t -- "; do
		# shellcheck disable=SC2086 # $args: options to split into words
		run -64 --separate-stderr mq-recv $args
		one_line_error 64
	done
	no_db
	run -0 --separate-stderr mq-recv --help
	[[ $output == "usage: mq-recv"* ]]
	assert_equal "$stderr" ""
}

@test "-A: what could not be written is given back, not acked: exit 74" {
	seq 5000 | mq-send -q t
	# each message a long line (100 copies of its body), into a file that
	# may not grow past 1 MiB: the database's own files stay far below
	fmt=$(printf '%%b%.0s' $(seq 100))
	# shellcheck disable=SC2016 # $1 is the inner shell's
	run -74 --separate-stderr bash -c \
	    'trap "" XFSZ; ulimit -f 1024; mq-recv -n 0 -A --format "$1\n" t >out' \
	    _ "$fmt"
	assert_equal "$stderr" "mq-recv: write error: File too large"
	[ "$(stat -c %s out)" -eq 1048576 ] || fail "out is $(stat -c %s out) bytes"
	# whole lines in the file are settled; the rest is still there
	written=$(grep -c . out)
	[ "$written" -gt 0 ] || fail "nothing was written"
	run -0 mq-recv -n 0 -A t
	assert_equal "$((written - 1 + ${#lines[@]}))" 5000
	# the last, partial, line is one of those given back
	full=$(printf "${lines[0]}%.0s" $(seq 100))
	partial=$(tail -n 1 out)
	[[ $full == "$partial"* ]] ||
	    fail "first given back: ${lines[0]}, partial line: $partial"
	db_intact
}

@test "without -A, the leases of what could not be written are released at once" {
	seq 5000 | mq-send -q t
	mq-topic group t default --lease 1h >/dev/null
	fmt=$(printf '%%b%.0s' $(seq 100))
	# shellcheck disable=SC2016 # $1 is the inner shell's
	run -74 --separate-stderr bash -c \
	    'trap "" XFSZ; ulimit -f 1024; mq-recv -n 0 --format "$1\n" t >out' \
	    _ "$fmt"
	assert_equal "$stderr" "mq-recv: write error: File too large"
	written=$(grep -c . out)
	[ "$written" -gt 0 ] || fail "nothing was written"
	# leased for an hour: only what was written is still held
	run -0 mq-lag --json t default
	jtrue ".in_flight == $((written - 1))" <<<"$output"
	run -0 mq-recv -n 0 --format '%o\n' t
	assert_equal "$((written - 1 + ${#lines[@]}))" 5000
}

@test "a reader that went away (closed pipe): exit 74, nothing said, the rest given back" {
	seq 20000 | mq-send -q t
	# shellcheck disable=SC2016 # PIPESTATUS is the inner shell's
	run -0 bash -c 'mq-recv -n 0 -A t | head -1; echo "${PIPESTATUS[0]}" >rc'
	assert_output 1
	assert_equal "$(cat rc)" 74
	run -0 mq-lag --json t default
	# what the pipe took before head left is settled; not all of it
	jtrue '.lag > 0 and .lag < 20000' <<<"$output"
}
