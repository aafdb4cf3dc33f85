#!/usr/bin/env bats
# mq-send: messages from arguments (one transaction) and from stdin (lines,
# -0, --whole, -e), offsets printed after commit, size limits, names, keys,
# usage errors, and many producers at once.
# shellcheck disable=SC2154 # stderr is set by bats' run --separate-stderr

load test_helper

teardown() {
	exec 5>&- 2>/dev/null || true
	kill_bg
}

one_line_error() {
	assert_equal "$status" "$1"
	# a usage error adds the synopsis after its one line
	assert_equal "$(printf '%s\n' "${stderr%%$'\n'usage: *}" | wc -l)" 1
	[[ $stderr == mq-send:* ]]
}

# bodies TOPIC: every body of TOPIC in offset order, hex, one a line.
bodies() {
	sql "SELECT hex(body) FROM msg WHERE topic =
	    (SELECT id FROM topic WHERE name = '$1') ORDER BY off"
}

@test "argument messages: offsets 1 2 3 printed, bodies stored in order" {
	run -0 --separate-stderr mq-send t one 'two words' three
	assert_output $'1\n2\n3'
	assert_equal "$stderr" ""
	run -0 mq-recv -A -n 0 t
	assert_output $'one\ntwo words\nthree'
}

@test "offsets continue across runs and topics count apart" {
	run -0 mq-send t a b
	assert_output $'1\n2'
	run -0 mq-send t c
	assert_output 3
	run -0 mq-send u x
	assert_output 1
	run -0 bash -c 'printf "d\ne\n" | mq-send t'
	assert_output $'4\n5'
	run -0 sql 'SELECT count(*) FROM msg'
	assert_output 6
}

@test "-q prints nothing but stores" {
	run -0 mq-send -q t a b
	assert_output ""
	run -0 bash -c 'printf "c\n" | mq-send --quiet t'
	assert_output ""
	run -0 sql 'SELECT count(*) FROM msg'
	assert_output 3
}

@test "argument messages are one transaction: one too large, none stored" {
	mq-topic create t max-size=10
	run -65 --separate-stderr mq-send t ok 12345678901 fine
	one_line_error 65
	assert_output ""
	run -0 sql 'SELECT count(*) FROM msg'
	assert_output 0
	run -0 mq-send t ok 1234567890 fine
	assert_output $'1\n2\n3'
}

# The stdin tests here and in t/030-mq-ack.bats also guard the sanitizer
# build (make asan; MQ_BIN=$PWD/build-asan): reading stdin must not pass
# the input buffer, still NULL before the first read, to memchr, which
# UBSan reports as a runtime error that stops mq-send and mq-ack at once.
@test "stdin: one message per line, last line without newline too" {
	run -0 bash -c 'printf "a\nb c\n\td\ne" | mq-send t'
	assert_output $'1\n2\n3\n4'
	run -0 bodies t
	assert_output "$(printf '%s\n' 61 622063 0964 65)"
}

@test "-0: NUL-terminated records from stdin, newlines kept in bodies" {
	run -0 bash -c 'printf "a\nb\0c d\0" | mq-send -0 t'
	assert_output $'1\n2'
	run -0 bodies t
	assert_output $'610A62\n632064'
}

@test "--whole: arbitrary bytes round-trip exactly" {
	{
		head -c 4096 /dev/urandom
		printf '\0\n\377\376\r\n\0'
		head -c 4096 /dev/urandom
	} >in.bin
	run -0 bash -c 'mq-send --whole t <in.bin'
	assert_output 1
	mq-recv -A --format '%B' t >out.bin
	cmp in.bin out.bin
	run -0 sql 'SELECT count(*) FROM msg'
	assert_output 1
	run -0 sql 'SELECT length(body) FROM msg'
	assert_output "$(wc -c <in.bin)"
}

@test "--whole: empty input is one empty message" {
	run -0 bash -c 'mq-send --whole t </dev/null'
	assert_output 1
	run -0 sql 'SELECT length(body) FROM msg'
	assert_output 0
}

@test "-e decodes what mq-recv printed: line output round-trips byte-exact" {
	printf 'tab\there' >b1
	printf 'new\nline\\back\\slash' >b2
	printf 'nul\0and\001ctl\377\376bytes' >b3
	printf 'h\303\251llo \342\202\254 ' >b4
	# shellcheck disable=SC1003 # the last \\ is printf's, no quote escaped
	printf '\\n is not a newline\\' >b5
	for f in b1 b2 b3 b4; do
		mq-send -q --whole t <"$f"
	done
	mq-send -q t ''		# an empty body
	mq-send -q --whole t <b5
	run -0 bash -c 'set -o pipefail; mq-recv -n 0 t | cut -f2- | mq-send -e t2'
	assert_output "$(seq 6)"
	run -0 sql 'SELECT count(*) FROM msg'
	assert_output 12
	assert_equal "$(bodies t2)" "$(bodies t)"
}

@test "-e with arguments decodes them too; an invalid escape is refused (65)" {
	# With arguments, -e stores each body with its decoded length:
	# 'a\tb' is the three bytes a TAB b, with no trailing byte left over
	# from the length of the escaped text.
	run -0 mq-send -e t 'a\tb' 'c\\d'
	assert_output $'1\n2'
	run -0 bodies t
	assert_output $'610962\n635C64'
	# shellcheck disable=SC1003 # 'bad\' is a trailing backslash, no quote escaped
	run -65 --separate-stderr mq-send -e t 'ok' 'bad\'
	one_line_error 65
	assert_output ""
	run -0 sql 'SELECT count(*) FROM msg'
	assert_output 2
}

@test "a message over 1 MiB from stdin is refused (65), nothing stored" {
	run -65 --separate-stderr bash -c 'head -c 2000000 /dev/zero | mq-send --whole t'
	one_line_error 65
	assert_output ""
	run -0 sql 'SELECT count(*) FROM msg'
	assert_output 0
	run -65 --separate-stderr bash -c 'head -c 2000000 /dev/zero | tr "\0" a | mq-send t'
	one_line_error 65
	assert_output ""
	run -0 sql 'SELECT count(*) FROM msg'
	assert_output 0
	# exactly the limit is fine
	run -0 bash -c 'head -c 1048576 /dev/zero | mq-send --whole t'
	assert_output 1
	run -0 sql 'SELECT count(*), max(length(body)) FROM msg'
	assert_output '1|1048576'
}

@test "max-size of the topic is enforced: 10 accepted, 11 refused" {
	mq-topic create t max-size=10
	run -65 --separate-stderr mq-send t 12345678901
	one_line_error 65
	run -65 --separate-stderr bash -c 'printf 12345678901 | mq-send --whole t'
	one_line_error 65
	run -65 --separate-stderr bash -c 'printf "12345678901\n" | mq-send t'
	one_line_error 65
	run -0 sql 'SELECT count(*) FROM msg'
	assert_output 0
	run -0 mq-send t 1234567890
	assert_output 1
	run -0 bash -c 'printf 1234567890 | mq-send --whole t'
	assert_output 2
	run -0 bash -c 'printf "1234567890\n" | mq-send t'
	assert_output 3
}

# producer P: send p$P-1 ... p$P-200, the offsets to out.$P; even P from
# arguments, ten a run, odd P from stdin, a hundred a run.
producer() {
	local i msgs
	if [ $(($1 % 2)) -eq 0 ]; then
		for i in $(seq 0 10 190); do
			mapfile -t msgs < <(seq -f "p$1-%g" $((i + 1)) $((i + 10)))
			mq-send t "${msgs[@]}" >>"out.$1" || return
		done
	else
		seq -f "p$1-%g" 1 100 | mq-send t >>"out.$1" || return
		seq -f "p$1-%g" 101 200 | mq-send t >>"out.$1"
	fi
}

@test "8 producers at once: offsets 1..N exactly once, every body stored once" {
	local p pids=()
	mq-send -q t warmup	# the database exists before the race
	for p in 1 2 3 4 5 6 7 8; do
		bg "err.$p" producer "$p"
		pids+=("$BG")
	done
	for p in 1 2 3 4 5 6 7 8; do
		finish "${pids[p - 1]}" 300 || fail "producer $p hangs"
		[ "$ST" -eq 0 ] && [ ! -s "err.$p" ] ||
		    fail "producer $p exit $ST: $(cat "err.$p")"
	done
	run -0 bash -c 'cat out.* | sort -n'
	assert_output "$(seq 2 1601)"
	run -0 sql 'SELECT count(*), min(off), max(off) FROM msg'
	assert_output '1601|1|1601'
	run -0 sql "SELECT count(DISTINCT body) FROM msg WHERE hex(body) LIKE '70%'"
	assert_output 1600
	run -0 sql 'SELECT next_off, msgs FROM topic'
	assert_output '1602|1601'
}

@test "a slow stream: each line is committed while the input stays open" {
	mkfifo in
	# mq-send opens the fifo itself (bash gives a background command
	# /dev/null as stdin), before fd 5 exists, so that its input ends
	# when fd 5 is closed; fd 5 is read-write, so no open waits
	bg out bash -c 'exec mq-send t <in 2>err'
	pid=$BG
	exec 5<>in
	echo a >&5
	# bounded: the line must be receivable long before the input ends
	wait_for 60 grep -qx 1 out || fail "line a not committed: $(cat out err)"
	run -0 mq-recv -A t
	assert_output a
	# still reading: the commit did not wait for EOF
	gone "$pid" && fail "mq-send ended before its input: $(cat out err)"
	echo b >&5
	exec 5>&-
	finish "$pid" 60
	assert_equal "$ST" 0
	run -0 cat out
	assert_output $'1\n2'
	run -0 cat err
	assert_output ""
	run -0 mq-recv -A t
	assert_output b
}

@test "invalid topic names are usage errors (64), nothing created" {
	long=$(printf 'a%.0s' $(seq 129))
	for name in '' -x .x "$long" a/b 'a b' 'a:b' 'é'; do
		run -64 --separate-stderr mq-send -- "$name" x
		one_line_error 64
		[[ $stderr == *"topic name"* ]]
	done
	no_db
	run -0 mq-send "${long:1}" x
	assert_output 1
	run -0 mq-send A-Za_z.0-9 x
	assert_output 1
	run -0 mq-send _x x
	assert_output 1
	run -0 sql 'SELECT count(*) FROM topic'
	assert_output 3
}

@test "-k KEY is stored with every message and shown in --json" {
	run -0 mq-send -k user-42 t a b
	assert_output $'1\n2'
	run -0 bash -c 'set -o pipefail; mq-recv -n 0 --json t | jq -r .key'
	assert_output $'user-42\nuser-42'
	run -0 bash -c 'echo c | mq-send --key "k 2" t'
	assert_output 3
	run -0 bash -c 'set -o pipefail; mq-recv --json t | jq -r .key'
	assert_output 'k 2'
	mq-send -q t nokey
	run -0 bash -c 'set -o pipefail; mq-recv --json t | jq -c .key'
	assert_output null
	run -64 --separate-stderr mq-send -k '' t x
	one_line_error 64
	run -0 sql 'SELECT count(*) FROM msg'
	assert_output 4
}

@test "usage errors: no topic, unknown option (64, usage on stderr)" {
	run -64 --separate-stderr mq-send
	assert_output ""
	[[ $stderr == *"usage: mq-send"* ]]
	run -64 --separate-stderr mq-send --no-such-option t x
	assert_output ""
	[[ $stderr == *"usage: mq-send"* ]]
	run -64 --separate-stderr mq-send -Z t x
	[[ $stderr == *"usage: mq-send"* ]]
	run -64 --separate-stderr mq-send -k
	[[ $stderr == *"usage: mq-send"* ]]
	no_db
}

@test "-h and --help print usage on stdout and exit 0" {
	run -0 --separate-stderr mq-send -h
	[[ $output == "usage: mq-send"* ]]
	assert_equal "$stderr" ""
	run -0 --separate-stderr mq-send --help
	[[ $output == "usage: mq-send"* ]]
	assert_equal "$stderr" ""
	no_db
}

@test "--at now delivers at once; --at today and yesterday are in the past" {
	run -0 mq-send --at now t a
	assert_output 1
	mq-send -q --at today t b
	mq-send -q --at yesterday t c
	run -0 mq-recv -A -n 0 t
	assert_output $'a\nb\nc'
	run -65 --separate-stderr mq-send --at noon t d
	one_line_error 65
}

@test "--delay and --at exclude each other (64); -0/--whole take no arguments" {
	run -64 --separate-stderr mq-send --delay 1s --at @2000000000 t x
	one_line_error 64
	run -64 --separate-stderr mq-send --at @2000000000 --delay 1s t x
	one_line_error 64
	run -64 --separate-stderr mq-send -0 t x
	one_line_error 64
	run -64 --separate-stderr mq-send --whole t x
	one_line_error 64
	run -64 --separate-stderr mq-send --delay soon t x
	one_line_error 64
	no_db
}

@test "-- ends options: a message may start with a dash" {
	run -0 mq-send -- t -n --help
	assert_output $'1\n2'
	run -0 mq-recv -A -n 0 t
	assert_output $'-n\n--help'
}
