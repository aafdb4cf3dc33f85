#!/usr/bin/env bats
# mq-recv (printing mode): output formats, counts, waiting, exit status,
# consumer groups (fan-out, competing members), auto-ack, leases and
# redelivery, --from latest.

load test_helper

teardown() {
	local p
	for p in ${BG_PIDS-}; do
		kill "$p" 2>/dev/null || true
	done
}

one_line_error() {
	assert_equal "$status" "$1"
	assert_equal "$(printf '%s\n' "$stderr" | wc -l)" 1
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
	run -0 bash -c 'mq-recv t | cut -f2-'
	assert_output 'héllo €'
}

@test "-n N takes up to N, -n 0 takes all, in offset order" {
	mq-send -q t $(seq 1 300)
	run -0 bash -c 'mq-recv -n 2 t | cut -f2'
	assert_output $'1\n2'
	run -0 bash -c 'mq-recv --count 3 t | cut -f2'
	assert_output $'3\n4\n5'
	# -n 0: all that is available, more than one internal chunk
	run -0 bash -c 'mq-recv -n 0 t | cut -f2'
	assert_output "$(seq 6 300)"
	run -1 mq-recv -n 0 t
	# -n larger than what is there: what is there, status 0
	mq-send -q t x y
	run -0 bash -c 'mq-recv -n 10 t | cut -f2'
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
	assert_equal "$stderr" ""
}

@test "-w waits for a message sent later" {
	mq-send -q t first
	mq-recv -A t >/dev/null
	(sleep 0.5; mq-send -q t late) 3>&- &
	BG_PIDS=$!
	run -0 mq-recv -A -w 10s t
	assert_output late
	wait "$BG_PIDS"
	BG_PIDS=
}

@test "-w 1s with nothing returns 1 after about a second" {
	mq-send -q t first
	mq-recv -A t >/dev/null
	start=$(now_ms)
	run -1 --separate-stderr mq-recv -w 1s t
	elapsed=$(( $(now_ms) - start ))
	assert_output ""
	assert_equal "$stderr" ""
	[ "$elapsed" -ge 950 ]
	[ "$elapsed" -lt 6000 ]
}

@test "a waiting consumer wakes soon after a send, not on a timer" {
	# SPEC: "Waiting consumers wake within milliseconds of a send".
	# (Until 67c8ef2 they woke on the 1s safety tick of common/wait.c.)
	mq-send -q t start
	mq-recv -A t >/dev/null
	mq-recv -A -n 0 -f t >out 3>&- &
	BG_PIDS=$!
	total=0
	for i in 1 2 3 4 5; do
		sleep 0.1	# let the consumer go back to waiting
		start=$(now_ms)
		mq-send -q t "m$i"
		wait_for 10 grep -qx "m$i" out
		total=$(( total + $(now_ms) - start ))
	done
	run -0 cat out
	assert_output "$(printf 'm%s\n' 1 2 3 4 5)"
	# five sends; on a 1s timer they take about 4.5s to arrive in all
	[ "$total" -lt 2500 ] || fail "5 messages took ${total}ms to arrive"
}

@test "every group receives every message (fan-out)" {
	mq-send -q t a b c
	run -0 bash -c 'mq-recv -g one -n 0 t | cut -f2'
	assert_output $'a\nb\nc'
	run -0 bash -c 'mq-recv -g two -n 0 t | cut -f2'
	assert_output $'a\nb\nc'
	run -0 bash -c 'mq-recv --group three -n 0 -A t'
	assert_output $'a\nb\nc'
	run -1 mq-recv -g one t
	run -1 mq-recv -g two t
}

@test "two members of a group never hold the same message (-n 0 at once)" {
	seq 500 | mq-send -q t
	mq-recv -n 0 t >r1 3>&- &
	p1=$!
	mq-recv -n 0 t >r2 3>&- &
	p2=$!
	wait "$p1" || [ $? -eq 1 ]
	wait "$p2" || [ $? -eq 1 ]
	cut -f1 r1 | cut -d: -f3 | sort >o1
	cut -f1 r2 | cut -d: -f3 | sort >o2
	run -0 comm -12 o1 o2
	assert_output ""
	run -0 bash -c 'sort -n o1 o2'
	assert_output "$(seq 500)"
	run -0 bash -c 'cat r1 r2 | cut -f2 | sort -n'
	assert_output "$(seq 500)"
}

@test "two members taking small batches in a loop share the work, no overlap" {
	seq 400 | mq-send -q t
	worker() {
		local rc
		while :; do
			mq-recv -n 5 t >>"$1" && continue
			rc=$?
			[ "$rc" -eq 1 ] && return 0
			echo "mq-recv exit $rc" >>failed
			return 1
		done
	}
	worker w1 3>&- &
	p1=$!
	worker w2 3>&- &
	p2=$!
	wait "$p1"
	wait "$p2"
	[ ! -e failed ] || fail "$(cat failed)"
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
	run -0 bash -c 'mq-recv -g g2 --json t | jq -r .receipt'
	[[ $output =~ ^t:g2:1:1:[0-9a-f]{8}$ ]]
	run -0 bash -c 'mq-recv -g g3 --json t | jq -r .time'
	[[ $output =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$ ]]
}

@test "--json: a body that is not UTF-8 is base64 with \"base64\":true" {
	printf 'ok\377\000\376end' >body
	mq-send -q --whole t <body
	run -0 bash -c 'mq-recv --json t | jq -r .base64'
	assert_output true
	mq-recv -g g2 --json t | jq -r .body | base64 -d >decoded
	cmp body decoded
	run -0 bash -c 'mq-recv -g g3 --json t | jq -r .size'
	assert_output "$(wc -c <body)"
}

@test "--json: control characters in a UTF-8 body are JSON escapes" {
	mq-send -q --whole t < <(printf 'a\tb\nc\001"\\')
	run -0 bash -c 'mq-recv --json t | jq -j .body | od -An -c | tr -s " "'
	assert_output "$(printf 'a\tb\nc\001"\\' | od -An -c | tr -s ' ')"
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
	run -1 mq-recv t
	run -1 mq-recv --lease 1s -n 0 t
	run -0 sql 'SELECT count(*) FROM delivery'
	assert_output 0
	run -0 mq-recv --auto-ack -g other -0 -n 0 t
	assert_output "$(printf 'a\0b\tc\0')"
}

@test "an acked message is not redelivered; an unacked one is, after its lease, as attempt 2" {
	mq-send -q t keep drop
	run -0 mq-recv --lease 3s -n 0 --format '%r %o %a\n' t
	assert_equal "${lines[0]#* }" '1 1'
	assert_equal "${lines[1]#* }" '2 1'
	mq-ack "${lines[1]%% *}"
	# inside the lease: nothing
	run -1 mq-recv -n 0 t
	# after it: offset 1 again, attempt 2, and never offset 2
	wait_for 15 bash -c 'mq-recv -n 0 --format "%o %a %b\n" t >>redelivered'
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
	    "-- .bad" "t extra"; do
		run -64 --separate-stderr mq-recv $args
		one_line_error 64
	done
	[ ! -e "$MQ_DB" ]
	run -0 --separate-stderr mq-recv --help
	[[ $output == "usage: mq-recv"* ]]
	assert_equal "$stderr" ""
}
