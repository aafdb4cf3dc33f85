#!/usr/bin/env bats
# The examples of README.md and of the EXAMPLES sections of the man pages
# still work: each is extracted when the test runs (so one added later is
# covered without editing this file) and run on the test's database, in
# order, as someone following the page would.  An example fails when it
# is a usage error, not found, an internal error or a signal, or when its
# shell says it could not run something; exit 1 (nothing received, a
# threshold crossed) is an answer, not a failure.

load test_helper

# How long an example may take (it should end at once: this only bounds
# a hang), and how long one that runs for ever (a follower, a loop) runs
# before timeout(1) ends it: long enough to start and to reject its
# options, short enough for some fifteen of them.
EX_LIMIT=60
EX_ENDLESS=3

teardown() {
	# an example still running: its process group (timeout(1) leads it)
	if [ -n "${EX_PID-}" ] && is_child "$EX_PID"; then
		kill -9 -- "-$EX_PID" 2>/dev/null || true
	fi
	kill_bg
}

# extract FILE: the example blocks of FILE, one record a line, fields
# separated by \037: "B" (a block starts), "L LINENO TEXT" (one of its
# lines, escapes undone), "E LINENO MESSAGE" (something the extractor
# cannot read: the test fails).  README.md: its indented code blocks (4
# spaces or a tab, after a blank line) and fenced blocks of shell; a man
# page: the .Bd -literal blocks of its EXAMPLES section.
extract() {
	case $1 in
	*.md) awk '
		BEGIN { S = "\037"; prevblank = 1 }
		fence == 1 && /^ ? ? ?```/ { fence = 0; prevblank = 1; next }
		fence == 2 && /^ ? ? ?```/ { fence = 0; prevblank = 1; next }
		fence == 1 { print "L" S NR S $0; next }
		fence == 2 { next }
		/^ ? ? ?```/ {
			info = $0; sub(/^ *```[ \t]*/, "", info)
			fence = info ~ /^(sh|bash|shell|console)?[ \t]*$/ ? 1 : 2
			if (fence == 1) print "B"
			code = 0; next
		}
		code && /^(    |\t)/ {
			for (; pend > 0; pend--) print "L" S (NR - pend) S ""
			sub(/^(    |\t)/, ""); print "L" S NR S $0; next
		}
		code && /^[ \t]*$/ { pend++; next }
		code { code = 0; pend = 0 }
		prevblank && /^(    |\t)/ {
			code = 1; pend = 0; print "B"
			sub(/^(    |\t)/, ""); print "L" S NR S $0; next
		}
		{ prevblank = $0 ~ /^[ \t]*$/ }
		' "$1" ;;
	*) awk '
		BEGIN {
			S = "\037"
			# the named characters the pages use in literal text
			named["aq"] = "\047"; named["dq"] = "\""
			named["ga"] = "`"; named["ti"] = "~"
			named["ha"] = "^"; named["rs"] = "\\"
		}
		# mdoc escapes undone in one pass, so that \e( stays \(
		function unesc(s,   out, i, c, nm) {
			out = ""
			while ((i = index(s, "\\")) > 0) {
				out = out substr(s, 1, i - 1)
				c = substr(s, i + 1, 1)
				if (c == "e") { out = out "\\"; s = substr(s, i + 2) }
				else if (c == "-") { out = out "-"; s = substr(s, i + 2) }
				else if (c == "&") { s = substr(s, i + 2) }
				else if (c == "(" && (substr(s, i + 2, 2) in named)) {
					out = out named[substr(s, i + 2, 2)]
					s = substr(s, i + 4)
				} else {
					bad = bad " \\" c
					s = substr(s, i + 2)
				}
			}
			return out s
		}
		/^\.Sh / { ex = $0 ~ /^\.Sh EXAMPLES/; lit = 0; next }
		ex && /^\.Bd -literal/ { lit = 1; print "B"; next }
		lit && /^\.Ed/ { lit = 0; next }
		lit && /^\.\\"/ { next }
		lit && /^\./ { print "E" S NR S "a macro in a literal block: " $0; next }
		lit {
			bad = ""; t = unesc($0)
			if (bad != "") print "E" S NR S "unknown escape" bad
			print "L" S NR S t
		}
		' "$1" ;;
	esac
}

# collect FILE: the examples of FILE in EX_LINE (FILE:LINE), EX_CMD (the
# command), EX_PRE (assignments made earlier in its block, such as
# tab=$(printf '\t'), run before it) and EX_SKIP (why it is not run, or
# empty); extractor errors in EX_ERR.
collect() {
	local file=$1 tag no text
	EX_LINE=() EX_CMD=() EX_PRE=() EX_SKIP=() EX_ERR=()
	B_NO=() B_TEXT=()
	while IFS=$'\037' read -r tag no text; do
		case $tag in
		B) block "$file"; B_NO=() B_TEXT=() ;;
		L) B_NO+=("$no"); B_TEXT+=("$text") ;;
		E) EX_ERR+=("$file:$no: $text") ;;
		*) EX_ERR+=("$file: extractor printed '$tag'") ;;
		esac
	done < <(extract "$file")
	block "$file"
}

# block FILE: the examples of the block in B_NO/B_TEXT.  Where some lines
# start with "$ ", those are the commands and the others their sample
# output; else the lines are joined into complete shell commands
# (bash -n says when one is complete: a trailing \ or |, a loop, a quote
# open over lines).  A systemd unit is not a command.
block() {
	local i n=${#B_NO[@]} acc='' start='' pre='' prompt=0 first=''
	[ "$n" -gt 0 ] || return 0
	for ((i = 0; i < n; i++)); do
		[[ ${B_TEXT[i]} == '$ '* ]] && prompt=1
		[ -n "$first" ] || first=${B_TEXT[i]}
	done
	if [[ $first =~ ^\[[A-Za-z]+\]$ ]]; then
		add "$1:${B_NO[0]}" "$(printf '%s\n' "${B_TEXT[@]}")" '' \
		    'a systemd unit, not a command'
		return 0
	fi
	for ((i = 0; i < n; i++)); do
		local t=${B_TEXT[i]}
		if [ "$prompt" = 1 ] && [ -z "$acc" ]; then
			[[ $t == '$ '* ]] || continue	# sample output
			t=${t#'$ '}
		fi
		[ -n "$acc" ] || [ -n "${t//[[:space:]]/}" ] || continue
		[ -n "$acc" ] || start=${B_NO[i]}
		acc+=$t$'\n'
		[[ $t == *\\ ]] && continue
		bash -n <<<"$acc" 2>/dev/null || continue
		add "$1:$start" "${acc%$'\n'}" "$pre" ''
		# a plain assignment is also set for the rest of the block,
		# but for those add skips (a crontab's PATH and MQ_DB: the
		# test's PATH has the build, and its database is its own)
		if [[ $acc =~ ^[A-Za-z_][A-Za-z0-9_]*=(\$\([^\(\)]*\)|[^[:space:]]*)$'\n'$ &&
		    ! $acc =~ ^(PATH|SHELL|MAILTO|MQ_DB)= ]]; then
			pre+=$acc
		fi
		acc=''
	done
	# incomplete at the end of the block: run it, so that it fails
	[ -z "$acc" ] || add "$1:$start" "${acc%$'\n'}" "$pre" ''
}

# add WHERE CMD PRE SKIP: one example; a crontab line becomes its command
# (with crontab's \% undone), and setup that is not mq is skipped.
add() {
	local cmd=$2 why=$4
	local cron='^(@[a-z]+|[0-9*][0-9*/,-]*([[:space:]]+[0-9A-Za-z*][0-9A-Za-z*/,-]*){4})[[:space:]]+(.*)'
	if [ -z "$why" ] && [[ $cmd =~ $cron ]]; then
		cmd=${BASH_REMATCH[3]}
		cmd=${cmd//\\%/%}
	fi
	[ -n "$why" ] || why=$(not_mq "$cmd")
	EX_LINE+=("$1") EX_CMD+=("$cmd") EX_PRE+=("$3") EX_SKIP+=("$why")
}

# not_mq CMD: why CMD is skipped, or nothing when it is run.  This is the
# whole list: setup that is not mq, or that would leave the test's
# temporary directory and database.
not_mq() {
	case $1 in
	# building, testing and installing mq itself
	make|make\ *) echo 'builds or installs mq' ;;
	# reading a page
	man\ *) echo 'reads a man page' ;;
	# the PostgreSQL server's own setup (t/pgcluster.sh does it here)
	createuser\ *|createdb\ *|psql\ *) echo 'PostgreSQL server setup' ;;
	# choosing a database, in a shell or at the top of a crontab: the
	# test's own database is the one used
	MQ_DB=*|export\ MQ_DB=*) echo 'chooses a database; the test uses its own' ;;
	# the environment of a crontab: the test's PATH has the build
	PATH=*|SHELL=*|MAILTO=*) echo 'crontab environment' ;;
	# administration as root and package installs
	sudo\ *|apt-get\ *|apt\ *|dnf\ *|yum\ *) echo 'runs as root or installs packages' ;;
	# a copy of a SQLite file: PostgreSQL is backed up with pg_dump
	mq-topic\ backup\ *) [ -z "$PG" ] || echo 'backs up a SQLite file (pg_dump here)' ;;
	esac
}

# endless CMD: CMD runs until something stops it (so timeout(1) does,
# and that counts as working): it follows a file, a topic or an outbox,
# loops for ever, watches, or leaves a job in the background (which the
# run waits for).
endless() {
	local follow='mq-(recv|replay|send)([[:space:]][^|;&]*)?[[:space:]](-f|--follow)([[:space:]]|$)'
	[[ $1 =~ $follow ]] && return 0
	[[ $1 =~ (^|[[:space:]])tail[[:space:]]+-[fF]([[:space:]]|$) ]] && return 0
	[[ $1 =~ while[[:space:]]+(:|true|sleep[[:space:]]) ]] && return 0
	[[ $1 == *--watch* ]] && return 0
	[[ $1 =~ [^\&]\&[[:space:]]*$ ]] && return 0
	return 1
}

# stubs DIR: the placeholders the examples use, on PATH: each reads its
# stdin and exits 0.  handler passes its input on, as the pages say (the
# receipts of what it handled, for mq-ack).  An example that names a
# command missing here fails (127): add a stub when it is a placeholder.
stubs() {
	local s
	mkdir -p "$1"
	for s in process process-job bill-order ship-order handle-order \
	    send-mail render reprocess-order upload; do
		printf '#!/bin/sh\ncat >/dev/null\nexit 0\n' >"$1/$s"
	done
	printf '#!/bin/sh\nexec cat\n' >"$1/handler"
	chmod +x "$1"/*
}

# fixtures DIR: the files the examples read, in DIR (absolute paths under
# /var are rewritten to DIR/var).
fixtures() {
	mkdir -p "$1/var/log/shop" "$1/var/lib/node_exporter"
	printf 'GET /a 200\nGET /b 404\n' >"$1/var/log/app.log"
	printf 'order 1044: 1 pen\n' >"$1/var/log/shop/orders.log"
	printf 'order 1\norder 2\norder 3\n' >"$1/orders.txt"
	printf '\377\330\377\340 not really a JPEG\n' >"$1/photo-17.jpg"
}

# rewrite CMD: CMD with /var/... in the work directory and
# /usr/local/bin/X the stub X.
rewrite() {
	local c=$1 out='' re='(^|[[:space:]=<>|;(`"'\''])/(var|usr/local/bin)/'
	while [[ $c =~ $re ]]; do
		out+=${c%%"${BASH_REMATCH[0]}"*}${BASH_REMATCH[1]}
		c=${c#*"${BASH_REMATCH[0]}"}
		if [ "${BASH_REMATCH[2]}" = var ]; then
			out+=$WORK/var/
		else
			out+=$STUBS/
		fi
	done
	printf '%s' "$out$c"
}

# real_receipts CMD: CMD with each sample receipt (TOPIC:GROUP:OFF:TRY:
# TOKEN) replaced by the one an earlier example received for the same
# delivery, when there is one: $ mq-ack orders:shipping:1:1:e05097db
# after $ mq-recv -g shipping orders acks what that printed.
real_receipts() {
	local c=$1 out=$1 real
	local re='([A-Za-z0-9._-]+:[A-Za-z0-9._-]+:[0-9]+:[0-9]+):[0-9a-f]{8}'
	while [[ $c =~ $re ]]; do
		c=${c#*"${BASH_REMATCH[0]}"}
		real=$(grep -oE "${BASH_REMATCH[1]//./\\.}:[0-9a-f]{8}" "$WORK/.received" | tail -n 1)
		[ -z "$real" ] || out=${out//"${BASH_REMATCH[0]}"/"$real"}
	done
	printf '%s' "$out"
}

# broken: why the last run (status ST, stderr in $WORK/.err) did not
# work, or nothing.
broken() {
	local end=$1 line prev=''
	case $ST in
	0|1) ;;
	124) [ "$end" = 1 ] || { echo "did not end within ${EX_LIMIT}s"; return; } ;;
	64) echo 'usage error (64)'; return ;;
	70) echo 'internal error (70)'; return ;;
	126|127) echo "not found or not runnable ($ST)"; return ;;
	*) [ "$ST" -le 128 ] || { echo "killed by signal $((ST - 128))"; return; } ;;
	esac
	while IFS= read -r line; do
		# one ended by the timeout worked if it said nothing wrong
		if [ "$ST" = 124 ] && [[ $line =~ ^mq-[a-z]+:\  ]]; then
			echo "$line"; return
		fi
		if [[ $prev =~ ^mq-[a-z]+:\  && $line == usage:* ]]; then
			echo "usage error: $prev"; return
		fi
		case $line in
		mq-*:*'unknown option'*|mq-*:*'unrecognized option'*|\
		mq-*:*invalid*|mq-*:*'requires an argument'*|\
		mq-*:*ambiguous*)
			echo "usage error: $line"; return ;;
		# the shell could not run something (not found, a syntax
		# error, a file to redirect from missing)
		bash:*|sh:*|*'No such file or directory'*)
			echo "$line"; return ;;
		# sqlite3 could not run a query of mq(5) (a column renamed):
		# it exits 1, which is an answer for the mq programs
		Error:*|'Parse error'*|'Runtime error'*)
			echo "$line"; return ;;
		esac
		prev=$line
	done <"$WORK/.err"
	[ "$ST" = 0 ] || [ "$ST" = 1 ] || [ "$ST" = 124 ] || echo "exit $ST"
}

# run_example CMD ENDLESS: run CMD with bash in $WORK, on the test's
# database, bounded by timeout(1) (which leads a process group of its
# own, so it ends whatever the example started); then wait for what the
# example left in the background.  With pipefail, so that a failing
# command is not hidden by the next in its pipeline (mq-replay old |
# cut -f2- | mq-send -e -q new).  Status in ST, output in $WORK/.out and
# $WORK/.err.
run_example() {
	local limit=$EX_LIMIT
	[ "$2" = 0 ] || limit=$EX_ENDLESS
	# shellcheck disable=SC2016 # $mq_example_status: for that bash
	timeout -k 5 "$limit" bash -c 'set -o pipefail
'"$1"'
mq_example_status=$?; wait; exit "$mq_example_status"' </dev/null \
	    >"$WORK/.out" 2>"$WORK/.err" 3>&- &
	EX_PID=$!
	ST=0
	wait "$EX_PID" || ST=$?
	EX_PID=
	cat "$WORK/.out" >>"$WORK/.received"
}

# examples FILE: run the examples of FILE in order on one database, in
# a fresh directory; print what ran and what was skipped (fd 3); fail
# with the source of each example that did not work, and when none ran.
examples() {
	local file=$BATS_TEST_DIRNAME/../$1 i cmd why end ran=0 skipped=0 made m
	local -a failed=()
	[ -f "$file" ] || fail "no $1"
	collect "$file"
	WORK=$BATS_TEST_TMPDIR/work STUBS=$BATS_TEST_TMPDIR/stubs
	mkdir -p "$WORK"
	stubs "$STUBS"
	fixtures "$WORK"
	: >"$WORK/.received"
	cd "$WORK" || return 1
	PATH=$STUBS:$PATH
	unset MQ_NO_CREATE
	for ((i = 0; i < ${#EX_CMD[@]}; i++)); do
		cmd=${EX_CMD[i]} why=${EX_SKIP[i]}
		if [ -n "$why" ]; then
			echo "# skipped: ${EX_LINE[i]#"$BATS_TEST_DIRNAME/../"}: ${cmd%%$'\n'*} ($why)" >&3
			skipped=$((skipped + 1))
			continue
		fi
		cmd=$(real_receipts "$(rewrite "$cmd")")
		end=0
		if endless "$cmd"; then end=1; fi
		# a receipt the example acts on ($receipt, from a loop in the
		# pages) is a live one of its own, so that it can work
		# shellcheck disable=SC2016 # the text $receipt, not its value
		if [[ $cmd == *'$receipt'* || $cmd == *'${receipt'* ]] &&
		    ! [[ $cmd =~ (^|[^A-Za-z0-9_])receipt=|read[^|\;]*receipt ]]; then
			mq-send -q example-receipts x
			receipt=$(mq-recv -g examples --lease 1h --format '%r' example-receipts) ||
			    fail "no receipt for ${EX_LINE[i]}"
			export receipt
		fi
		run_example "${EX_PRE[i]}$cmd" "$end"
		# An example that reads a database, topic, group or message the
		# page has not made yet (mq-lag first thing on the page, mq-purge
		# --dead -g billing orders where no order was sent, mq-replay
		# --trace 4711 orders) exits 66: the user it is written for has
		# one.  So does a threshold of mq-lag that names a group nobody
		# made (64, "--max-lag: no such topic: logs": a typo in a cron
		# line is a usage error there).  Make what is missing, as that
		# user would have, and run the example again: it must work then.
		made=
		for _ in 1 2 3 4; do
			[ "$ST" = 66 ] || { [ "$ST" = 64 ] &&
			    grep -q '^mq-lag: --max-[a-z]*: no such' "$WORK/.err"; } ||
			    break
			m=$(make_missing) || break
			made+="${made:+, }$m"
			run_example "${EX_PRE[i]}$cmd" "$end"
		done
		unset receipt
		ran=$((ran + 1))
		why=$(broken "$end")
		if [ -n "$why" ]; then
			failed+=("${EX_LINE[i]#"$BATS_TEST_DIRNAME/../"}: $why"$'\n'"    ${cmd//$'\n'/$'\n'    }"$'\n'"    stderr: $(head -c 2000 "$WORK/.err")")
		fi
		[ -z "$made" ] || echo "# ${EX_LINE[i]#"$BATS_TEST_DIRNAME/../"}: $made first" >&3
		# MQ_TEST_VERBOSE=1: each example's status and output
		if [ -n "${MQ_TEST_VERBOSE-}" ]; then
			echo "# ran ${EX_LINE[i]#"$BATS_TEST_DIRNAME/../"} (exit $ST): ${cmd//$'\n'/$'\n'#   }" >&3
			sed 's/^/#   > /' "$WORK/.out" "$WORK/.err" | head -n 8 >&3
		fi
	done
	echo "# $1: $ran examples run, $skipped skipped" >&3
	[ "${#EX_ERR[@]}" -eq 0 ] || fail "$(printf 'cannot read: %s\n' "${EX_ERR[@]}")"
	[ "$ran" -gt 0 ] || fail "$1: no example found to run (is the extractor broken?)"
	[ "${#failed[@]}" -eq 0 ] || fail "$(printf '%s\n\n' "${failed[@]}")"
}

# make_missing: after an exit 66, make the database, topic or group its
# stderr says is missing, or send messages up to the offset it names (or
# one with the key or dedup id it names); print what was made.
make_missing() {
	local line re_t='no such topic: ([^ ]+)$' re_g='no such group: ([^/ ]+)/([^ ]+)$'
	local re_m='no message at offset ([0-9]+) of ([^ ]+)$'
	local re_k="no message with (key|dedup id) '([^']+)' in ([^ ]+)$"
	line=$(grep -m 1 'no such\|no message at offset\|no message with\|no mq schema' "$WORK/.err") || return 1
	if [[ $line =~ $re_m ]] && [ "${BASH_REMATCH[1]}" -le 100000 ]; then
		seq "${BASH_REMATCH[1]}" | mq-send -q "${BASH_REMATCH[2]}" || return 1
		echo "sent ${BASH_REMATCH[1]} messages to ${BASH_REMATCH[2]}"
	elif [[ $line =~ $re_k ]]; then
		if [ "${BASH_REMATCH[1]}" = key ]; then
			mq-send -q -k "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}" x
		else
			mq-send -q --dedup "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}" x
		fi || return 1
		echo "sent a message with ${BASH_REMATCH[1]} ${BASH_REMATCH[2]} to ${BASH_REMATCH[3]}"
	elif [[ $line == *'cannot open database'* || $line == *'no mq schema'* ]]; then
		mq-topic create example-scratch && mq-topic delete example-scratch || return 1
		echo 'made the database'
	elif [[ $line =~ $re_g ]]; then
		mq-topic group "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" >/dev/null || return 1
		echo "made group ${BASH_REMATCH[1]}/${BASH_REMATCH[2]}"
	elif [[ $line =~ $re_t ]]; then
		mq-topic create "${BASH_REMATCH[1]}" >/dev/null || return 1
		echo "made topic ${BASH_REMATCH[1]}"
	else
		return 1
	fi
}

@test "README.md: every example works" {
	examples README.md
}

@test "mq(7): every example works" {
	examples man/mq.7
}

@test "mq-send(1): every example works" {
	examples man/mq-send.1
}

@test "mq-recv(1): every example works" {
	examples man/mq-recv.1
}

@test "mq-ack(1): every example works" {
	examples man/mq-ack.1
}

@test "mq-replay(1): every example works" {
	examples man/mq-replay.1
}

@test "mq-lag(1): every example works" {
	examples man/mq-lag.1
}

@test "mq-purge(1): every example works" {
	examples man/mq-purge.1
}

@test "mq-topic(1): every example works" {
	examples man/mq-topic.1
}

@test "mq(5): every example works" {
	sqlite_only "the examples of mq(5) read the SQLite file with sqlite3"
	# the pages's mq.db, in the directory the examples run in: message 1
	# of t, a dead letter, message 7 of orders settled in a group
	mkdir -p "$BATS_TEST_TMPDIR/work"
	export MQ_DB=$BATS_TEST_TMPDIR/work/mq.db
	mq-send -q t hello
	seq 7 | mq-send -q orders
	mq-topic group orders g --max-attempts 1 >/dev/null
	r=$(mq-recv -g g --format '%r' orders)
	mq-ack --fail --reason 'no stock' "$r"
	mq-recv -g g -n 0 --format '%r\n' orders | mq-ack
	examples man/mq.5
	assert_equal "$(cat "$BATS_TEST_TMPDIR/work/body.bin")" hello
}

@test "each page with examples has a test above" {
	local tested
	tested=$(sed -n 's/^@test "\([a-z.-]*\)(\([0-9]\)): every example works" {$/\1.\2/p' \
	    "$BATS_TEST_FILENAME" | sort)
	run -0 bash -c "cd '$BATS_TEST_DIRNAME/../man' &&
	    grep -l '^\.Sh EXAMPLES' *.[0-9] | sort"
	assert_output "$tested"
}
