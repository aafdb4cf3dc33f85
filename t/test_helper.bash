# test_helper.bash: loaded by every t/*.bats file.
#
# Tests run the freshly built binaries in $MQ_BIN (set by make test), each
# test with its own database under $BATS_TEST_TMPDIR.  A missing helper
# library fails loudly instead of skipping.

bats_require_minimum_version 1.5.0

bats_load_library bats-support || { echo "bats-support missing: run make deps" >&2; exit 1; }
bats_load_library bats-assert || { echo "bats-assert missing: run make deps" >&2; exit 1; }

: "${MQ_BIN:?run the tests with make test (MQ_BIN names the build directory)}"
[ -x "$MQ_BIN/mq-send" ] || { echo "no mq-send in $MQ_BIN: run make" >&2; exit 1; }
PATH="$MQ_BIN:$PATH"

setup() {
	export MQ_DB="$BATS_TEST_TMPDIR/mq.db"
	unset MQ_SYNC MQ_BUSY_TIMEOUT NO_COLOR
	cd "$BATS_TEST_TMPDIR" || return 1
}

# sql QUERY: run a query on the test database (sqlite3 CLI).
sql() {
	sqlite3 "$MQ_DB" "$@"
}

# sql_is QUERY VALUE: the query prints VALUE (for wait_for: the query runs
# on every try).
sql_is() {
	[ "$(sql "$1")" = "$2" ]
}

# as_nobody CMD...: run CMD as an unprivileged user when we are root,
# where file permissions would not apply.  The binaries are run from a
# copy the user can reach when $MQ_BIN is not (a checkout under /root):
# a leading "$MQ_BIN/" in CMD is rewritten, and names are found there first.
as_nobody() {
	if [ "$(id -u)" -ne 0 ]; then
		"$@"
		return
	fi
	nobody_bin
	case $1 in "$MQ_BIN"/*) set -- "$NOBODY_BIN/${1#"$MQ_BIN"/}" "${@:2}" ;; esac
	PATH="$NOBODY_BIN:$PATH" setpriv --reuid=65534 --regid=65534 \
	    --clear-groups -- "$@"
}

# nobody_bin: NOBODY_BIN, where user 65534 can run the binaries: $MQ_BIN,
# or a copy in this run's temporary directory (made traversable, o+x).
nobody_bin() {
	local tmp
	[ -z "${NOBODY_BIN-}" ] || return 0
	if setpriv --reuid=65534 --regid=65534 --clear-groups -- \
	    test -x "$MQ_BIN/mq-send"; then
		NOBODY_BIN=$MQ_BIN
		return 0
	fi
	NOBODY_BIN=$BATS_RUN_TMPDIR/nobody-bin
	[ -x "$NOBODY_BIN/mq-send" ] && return 0
	chmod 711 "$BATS_RUN_TMPDIR"
	tmp=$(mktemp -d "$BATS_RUN_TMPDIR/nobody-bin.XXXXXX")
	cp "$MQ_BIN"/mq-* "$tmp"/
	chmod 755 "$tmp"
	mv -T "$tmp" "$NOBODY_BIN" 2>/dev/null || rm -rf "$tmp"
}

# wait_for SECONDS CMD...: retry CMD until it succeeds or time runs out.
wait_for() {
	local end=$(( $(date +%s%3N) + $1 * 1000 )); shift
	until "$@"; do
		[ "$(date +%s%3N)" -lt "$end" ] || return 1
		sleep 0.1
	done
}

# now_ms: the time in milliseconds since the epoch.
now_ms() {
	date +%s%3N
}

# bg OUT CMD...: start CMD in the background, stdout and stderr to OUT,
# away from bats' fd 3; its pid in BG and in $BATS_TEST_TMPDIR/pids, for
# a teardown to kill.
bg() {
	local out=$1; shift
	"$@" >"$out" 2>&1 3>&- &
	BG=$!
	echo "$BG" >>"$BATS_TEST_TMPDIR/pids"
}

# gone PID: the process is not running (bash reaps its children itself).
gone() {
	! kill -0 -- "$1" 2>/dev/null
}

# finish PID SECONDS: wait (bounded) for a background process; its exit
# status in ST.
finish() {
	wait_for "$2" gone "$1" || { echo "pid $1 still running after $2s" >&2; return 1; }
	ST=0
	# shellcheck disable=SC2034 # ST is the caller's result
	wait "$1" 2>/dev/null || ST=$?
}

# is_child PID: PID is a child of this shell, running or not yet reaped.  A
# pid that was already reaped (by finish, wait, or bash itself) may have
# been reused by any process on the machine: it is not ours to signal.
is_child() {
	local stat ppid
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	read -r _ ppid _ <<<"${stat##*) }"	# after "PID (COMM) STATE"
	[ "$ppid" = "$BASHPID" ]
}

# kill_bg: for teardown: kill what bg started (and the process groups
# listed in $BATS_TEST_TMPDIR/pgids), waiting with stderr closed so bash
# prints no "Killed" notices.  Only pids that are still children of the
# test's shell are killed: start what you list in pids from the test
# itself (not from a subshell), one pid a line.
kill_bg() {
	local p
	if [ -e "$BATS_TEST_TMPDIR/pids" ]; then
		while read -r p; do
			is_child "$p" || continue
			{ kill -9 "$p"; wait "$p"; } 2>/dev/null || true
		done <"$BATS_TEST_TMPDIR/pids"
	fi
	if [ -e "$BATS_TEST_TMPDIR/pgids" ]; then
		while read -r p; do
			{ kill -9 -- "-$p"; wait "$p"; } 2>/dev/null || true
		done <"$BATS_TEST_TMPDIR/pgids"
	fi
}

# recv_ack GROUP [N] [TOPIC]: receive up to N (default all) messages of
# TOPIC (default t) in GROUP and ack them; fails if there was nothing.
recv_ack() {
	local r
	r=$(mq-recv -g "$1" -n "${2:-0}" --format '%r\n' "${3:-t}") || return 1
	[ -n "$r" ] || return 1
	local -a rs
	mapfile -t rs <<<"$r"
	mq-ack "${rs[@]}"
}

# stderr_has TEXT...: after `run --separate-stderr`, the command's stderr
# contains every TEXT; else fail, showing it.
stderr_has() {
	local t
	for t; do
		# shellcheck disable=SC2154 # stderr is set by run --separate-stderr
		[[ $stderr == *"$t"* ]] ||
		    fail "stderr lacks \"$t\"; stderr was: $stderr"
	done
}

# seed_random: make a random test replayable.  Seeds bash's $RANDOM with
# $MQ_TEST_SEED if that is set, else with a fresh seed; the seed is in
# SEED, printed to fd 3 ("# seed N") and to the test's output, which bats
# shows when the test fails; put it in failure messages too.  Replay a
# failure with the same seed:  MQ_TEST_SEED=N bats t/045-crash.bats
seed_random() {
	SEED=${MQ_TEST_SEED:-$(( (RANDOM << 15 | RANDOM) % 1000000 ))}
	[[ $SEED =~ ^[0-9]+$ ]] || fail "MQ_TEST_SEED must be a number, not '$SEED'"
	RANDOM=$SEED
	echo "# seed $SEED (replay: MQ_TEST_SEED=$SEED)" >&3
	echo "seed $SEED (replay: MQ_TEST_SEED=$SEED)"
}

# jtrue [JQ-OPTION...] FILTER: FILTER gives exactly `true` on the JSON of
# stdin.  jq -e alone exits 0 on empty input, so an output that is missing
# would pass; this fails instead.
jtrue() {
	local in r
	in=$(cat)
	[ -n "$in" ] || fail "jtrue ${*: -1}: no input"
	r=$(jq "$@" <<<"$in") || fail "jtrue ${*: -1}: jq failed on: $in"
	[ "$r" = true ] || fail "jtrue ${*: -1}: ${r:-nothing}, not true, on: $in"
}
