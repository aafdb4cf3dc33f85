#!/usr/bin/env bats
# --help of every program: the synopsis, one line per option (the same
# options as its man page), "See mq-xxx(1)."; and usage errors: one line
# saying what is wrong, then the synopsis, on stderr, 64.  No database is
# touched, so the same on both backends.
# shellcheck disable=SC2154 # stderr is set by bats' run --separate-stderr

load test_helper

PROGS=(mq-send mq-recv mq-ack mq-replay mq-lag mq-purge mq-topic)

# man_opts PAGE: the options of the man page's .It Fl items (-x and
# --long), sorted, one a line.
man_opts() {
	sed -n 's/^\.It Fl /Fl /p' "$1" |
	    grep -o 'Fl [^ ]*' | sed 's/^Fl //; s/^\\-/--/; s/^[^-]/-&/' |
	    sort -u
}

# help_opts PROG: the options of PROG --help, likewise: the first column
# of the lines after the synopsis.
help_opts() {
	"$1" --help | awk 'NF == 0 { o = 1; next } o && /^ +-/' |
	    sed 's/^ *//; s/  .*//' | grep -oE '(^|, )--?[A-Za-z0-9][A-Za-z0-9-]*' |
	    sed 's/^, //' | sort -u
}

# synopsis PROG: the usage lines of PROG --help.
synopsis() {
	"$1" --help | sed '/^$/,$d'
}

# usage_error PROG ARGS...: exit 64, nothing on stdout; on stderr one line
# "PROG: ...", then the synopsis.
usage_error() {
	run -64 --separate-stderr "$@"
	assert_output ""
	[[ ${stderr_lines[0]} == "$1: "?* ]] ||
	    fail "$*: want one line from $1 first, got: $stderr"
	[[ ${stderr_lines[1]-} == "usage: "* ]] ||
	    fail "$*: want the usage on the second line, got: $stderr"
	assert_equal "${stderr#*$'\n'}" "$(synopsis "$1")"
}

@test "--help and -h: the synopsis, the options, the man page; stdout, 0" {
	local p
	for p in "${PROGS[@]}"; do
		run -0 --separate-stderr "$p" --help
		assert_equal "$stderr" ""
		[[ ${lines[0]} == "usage: $p "* ]] || fail "$p --help: $output"
		assert_equal "${lines[-1]}" "See $p(1)."
		[[ $output == *$'\n\n'* ]] || fail "$p --help: no blank line"
		run -0 awk 'length > 80' <<<"$output"
		assert_output ""
		help=$("$p" --help)
		run -0 --separate-stderr "$p" -h
		assert_equal "$output" "$help"
	done
	no_db
}

@test "--help lists the options of the man page, and only those" {
	local p
	for p in "${PROGS[@]}"; do
		run -0 man_opts "$BATS_TEST_DIRNAME/../man/$p.1"
		assert_line -- --help
		assert_line -- -h
		man=$output
		run -0 help_opts "$p"
		assert_line -- --version
		assert_equal "$output" "$man"
	done
}

@test "the option lists are read right: one left out is seen" {
	help=$(help_opts mq-send)
	sed '/^\.It Fl \\-whole$/d' "$BATS_TEST_DIRNAME/../man/mq-send.1" \
	    >mq-send.1
	run -0 man_opts mq-send.1
	assert_line -- --dedup-field
	assert_line -- -0
	refute_line -- --whole
	[[ $output != "$help" ]] || fail "--whole left out, yet the same"
}

@test "a missing operand: one line saying so, then the synopsis, 64" {
	usage_error mq-send
	assert_equal "${stderr_lines[0]}" "mq-send: missing TOPIC"
	usage_error mq-recv
	assert_equal "${stderr_lines[0]}" "mq-recv: missing TOPIC"
	usage_error mq-replay
	usage_error mq-replay -g g
	usage_error mq-topic
	usage_error mq-topic show
	usage_error mq-topic group t
	# these take no operand they must have: an option's argument instead
	usage_error mq-ack --extend
	usage_error mq-lag --max-lag
	usage_error mq-purge -g
	usage_error mq-recv -n
	usage_error mq-send --db
	no_db
}

@test "an unknown option: one line saying so, then the synopsis, 64" {
	local p
	for p in "${PROGS[@]}"; do
		usage_error "$p" --frob t
		[[ ${stderr_lines[0]} == *--frob* ]] || fail "$p: $stderr"
		usage_error "$p" -Z t
		[[ ${stderr_lines[0]} == *Z* ]] || fail "$p: $stderr"
	done
	usage_error mq-topic group --frob t g
	usage_error mq-send --quiet=yes t
	no_db
}

@test "a bad number: one line saying so, then the synopsis, 64" {
	usage_error mq-recv -n x t
	assert_equal "${stderr_lines[0]}" \
	    "mq-recv: invalid count 'x': want a number from 0 to 1000000000"
	usage_error mq-recv -n -1 t
	usage_error mq-recv -j 0 -- t true
	usage_error mq-send --dedup-field x t
	usage_error mq-ack --extend soon t:default:1:1:0123abcd
	usage_error mq-replay --from-offset 0 t
	usage_error mq-replay -n x t
	usage_error mq-lag --max-lag x
	usage_error mq-lag --watch=50ms
	usage_error mq-purge --before-offset x t
	usage_error mq-topic create t max-size=x
	usage_error mq-topic group --max-attempts x t g
	no_db
}
