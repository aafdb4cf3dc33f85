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

# as_nobody CMD...: run CMD as an unprivileged user when we are root,
# where file permissions would not apply.
as_nobody() {
	if [ "$(id -u)" -eq 0 ]; then
		setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"
	else
		"$@"
	fi
}

# wait_for SECONDS CMD...: retry CMD until it succeeds or time runs out.
wait_for() {
	local end=$(( $(date +%s) + $1 )); shift
	until "$@"; do
		[ "$(date +%s)" -lt "$end" ] || return 1
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
	wait "$1" 2>/dev/null || ST=$?
}

# kill_bg: for teardown: kill what bg started (and the process groups
# listed in $BATS_TEST_TMPDIR/pgids), waiting with stderr closed so bash
# prints no "Killed" notices.
kill_bg() {
	local p
	for p in $(cat "$BATS_TEST_TMPDIR/pids" 2>/dev/null); do
		{ kill -9 "$p"; wait "$p"; } 2>/dev/null || true
	done
	for p in $(cat "$BATS_TEST_TMPDIR/pgids" 2>/dev/null); do
		{ kill -9 -- "-$p"; wait "$p"; } 2>/dev/null || true
	done
}

# recv_ack GROUP [N] [TOPIC]: receive up to N (default all) messages of
# TOPIC (default t) in GROUP and ack them; fails if there was nothing.
recv_ack() {
	local r
	r=$(mq-recv -g "$1" -n "${2:-0}" --format '%r\n' "${3:-t}") || return 1
	[ -n "$r" ] || return 1
	mq-ack $r
}
