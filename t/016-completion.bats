#!/usr/bin/env bats
# 016-completion.bats: the bash completion (completions/mq.bash) reads
# topic and group names from the database the command line names, a
# quoted or escaped -d path too, and completes [[TOPIC/]GROUP=] after the
# thresholds of mq-lag.  The fish file at least loads, where fish is.

load test_helper

# complete WORD...: the replies of the bash completion for the command
# line WORD... (the last word is the one being completed), one a line.
complete_line() {
	PATH=$PATH bash -c '
	    source "$1"; shift
	    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
	    COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
	    _mq "$1" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
	    printf "%s\n" "${COMPREPLY[@]}"' complete \
	    "$BATS_TEST_DIRNAME/../completions/mq.bash" "$@"
}

@test "bash: -d with blanks, quoted or escaped, names the database whose topics are completed" {
	sqlite_only "a database file's path with blanks"
	mkdir "my db"
	MQ_DB="$PWD/my db/x.db" mq-topic group jobs workers >/dev/null
	run -0 complete_line mq-recv -d "'$PWD/my db/x.db'" ""
	assert_output jobs
	run -0 complete_line mq-recv -d "\"$PWD/my db/x.db\"" ""
	assert_output jobs
	run -0 complete_line mq-recv -d "${PWD// /\\ }/my\\ db/x.db" -g ""
	assert_output workers
	# the default database is empty: nothing
	run -0 complete_line mq-recv ""
	assert_output ""
}

@test "bash: thresholds complete GROUP= and TOPIC/GROUP=, --max-silence TOPIC=" {
	mq-topic group jobs workers >/dev/null
	mq-topic group logs archive >/dev/null
	run -0 complete_line mq-lag --max-lag ""
	assert_equal "$(sort <<<"$output")" "$(printf '%s\n' archive= jobs/workers= logs/archive= workers=)"
	run -0 complete_line mq-lag --max-idle wo
	assert_output workers=
	run -0 complete_line mq-lag --max-silence ""
	assert_output "$(printf '%s\n' jobs= logs=)"
	run -0 complete_line mq-lag --mes
	assert_output --messages
}

@test "bash: mq-recv TOPIC: more topics (lanes) or --; --fair" {
	mq-topic group jobs workers >/dev/null
	mq-topic group logs archive >/dev/null
	run -0 complete_line mq-recv -g workers jobs ""
	assert_output "$(printf '%s\n' jobs logs --)"
	run -0 complete_line mq-recv jobs logs ""
	assert_line -n 2 -- --
	run -0 complete_line mq-recv --fa
	assert_output --fair
}

# argopts PROG: the options PROG's --help shows with an argument.
argopts() {
	"$1" --help | sed -n 's/^ *\(-[A-Za-z0-9], \)\{0,1\}\(--[a-z-]*\) [A-Za-z[].*/\2/p'
}

@test "bash: mq-topic cancel and delay: the commands, their options, topics, the topic's groups" {
	mq-topic group jobs workers >/dev/null
	mq-topic group logs archive >/dev/null
	run -0 complete_line mq-topic ca
	assert_output cancel
	run -0 complete_line mq-topic ba
	assert_output backup
	run -0 complete_line mq-topic delay --a
	assert_output --at
	run -0 complete_line mq-topic cancel --a
	assert_output ''
	run -0 complete_line mq-topic cancel --dr
	assert_output --dry-run
	run -0 complete_line mq-topic cancel -f ""
	assert_equal "$(sort <<<"$output")" "$(printf '%s\n' jobs logs)"
	run -0 complete_line mq-topic cancel jobs -g ""
	assert_output workers
}

@test "bash: after every option that takes an argument, and its argument, the operands go on" {
	mq-topic group jobs workers >/dev/null
	local p o n=0
	for p in mq-send mq-recv mq-replay mq-purge; do
		for o in $(argopts "$p"); do
			[ "$o" != --db ] || continue
			run -0 complete_line "$p" "$o" x ""
			[ "$output" = jobs ] || fail "$p $o x <TAB>: '$output', not jobs"
			n=$((n + 1))
		done
	done
	for o in $(argopts mq-topic); do
		[ "$o" != --db ] || continue
		case $o in
		--group|--key|--dedup|--at|--delay)	# cancel, delay
			run -0 complete_line mq-topic delay "$o" x ""
			[ "$output" = jobs ] || fail "mq-topic delay $o x <TAB>: '$output', not jobs" ;;
		*)
			run -0 complete_line mq-topic group "$o" x jobs ""
			[ "$output" = workers ] || fail "mq-topic group $o x jobs <TAB>: '$output', not workers" ;;
		esac
		n=$((n + 1))
	done
	[ "$n" -gt 20 ] || fail "only $n options found in the --help output"
}

@test "fish: the completions load" {
	command -v fish >/dev/null || skip "no fish here"
	run -0 fish -c "source '$BATS_TEST_DIRNAME/../completions/mq.fish'"
	assert_output ""
}
