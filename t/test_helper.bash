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

# The backend under test: SQLite, or PostgreSQL when MQ_TEST_BACKEND=pg
# (t/suite.sh starts a cluster with t/pgcluster.sh and sets MQ_PG_*).  A
# file about SQLite itself sets SQLITE_ONLY to the reason before its
# tests, and a test about it calls sqlite_only REASON: on PostgreSQL they
# are skipped, with the reason, and t/suite.sh counts the skips; PG_ONLY
# likewise for a file about PostgreSQL.
PG=
if [ "${MQ_TEST_BACKEND-sqlite}" = pg ]; then
	: "${MQ_PG_DIR:?MQ_TEST_BACKEND=pg needs the cluster of t/pgcluster.sh (run make test)}"
	PG=1
fi

setup() {
	unset MQ_SYNC MQ_BUSY_TIMEOUT NO_COLOR
	cd "$BATS_TEST_TMPDIR" || return 1
	if [ -z "$PG" ]; then
		[ -z "${PG_ONLY-}" ] || skip "PostgreSQL only: $PG_ONLY"
		export MQ_DB="$BATS_TEST_TMPDIR/mq.db"
		return 0
	fi
	[ -z "${SQLITE_ONLY-}" ] || skip "SQLite only: $SQLITE_ONLY"
	# a schema of its own, owned by role mq (t/pgcluster.sh)
	PG_SCHEMA=t_${BATS_ROOT_PID:-$$}_$BATS_SUITE_TEST_NUMBER
	fresh_schema || return 1
	export MQ_DB="postgresql://mq@/mq?host=$MQ_PG_DIR&port=$MQ_PG_PORT&options=-csearch_path%3D$PG_SCHEMA"
}

# fresh_schema: (PostgreSQL) the test's schema, empty but for hex(),
# which queries share with SQLite.
fresh_schema() {
	psql_admin -c "SET client_min_messages = warning;
	    DROP SCHEMA IF EXISTS $PG_SCHEMA CASCADE;
	    CREATE SCHEMA $PG_SCHEMA AUTHORIZATION mq;
	    CREATE FUNCTION $PG_SCHEMA.hex(bytea) RETURNS text IMMUTABLE
	    LANGUAGE sql AS 'SELECT upper(encode(\$1, ''hex''))'" >/dev/null
}

# drop_db: the test's database is gone: its files, or its tables.
drop_db() {
	if [ -n "$PG" ]; then
		fresh_schema
	else
		rm -f "$MQ_DB" "$MQ_DB-wal" "$MQ_DB-shm" "$MQ_DB-mq"
	fi
}

# db_state: every row of every table, to compare before and after.
db_state() {
	local t
	for t in topic grp delivery dedup consumer history msg; do
		echo "== $t"
		sql "SELECT * FROM $t ORDER BY 1, 2"
	done
}

# pg_crash: restart the cluster as after a crash (t/pgcluster.sh crash).
# The new server must not inherit this shell's descriptors: bats would
# wait for its output pipes to close until the server ended.
pg_crash() {
	(
		for fd in /proc/"$BASHPID"/fd/*; do
			fd=${fd##*/}
			if [ "$fd" -gt 2 ]; then eval "exec $fd>&-"; fi
		done
		exec sh "$BATS_TEST_DIRNAME/pgcluster.sh" crash "$MQ_PG_DIR"
	) </dev/null >/dev/null 2>&1
}

# sqlite_only REASON: skip this test on PostgreSQL.
sqlite_only() {
	[ -z "$PG" ] || skip "SQLite only: $1"
}

# psql_admin ARGS...: psql as the cluster's superuser, on database mq.
psql_admin() {
	psql -X -q -v ON_ERROR_STOP=1 -h "$MQ_PG_DIR" -p "$MQ_PG_PORT" \
	    -U postgres -d mq "$@"
}

# unlease_all: on PostgreSQL, every run of lease made delivery rows, as
# mq's own writes do before they change a delivery (lease.sql).
unlease_all() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$MQ_DB" -c "SELECT
	    count(unlease(id, 0, 9223372036854775807, 9223372036854775807,
	    false)) FROM grp" >/dev/null
}

# sql QUERY: run a query on the test database (sqlite3 CLI, or psql as
# role mq, printing rows as sqlite3 does: columns joined by |).  On
# PostgreSQL a plain mq-recv's leases may be runs in table lease, not rows
# of delivery, and their acks rows of acks, not of history
# (common/pg/lease.sql): a query reads them from the views deliveries and
# histories, which show both as rows (FROM ONLY delivery: the table
# alone); one that changes delivery rows makes the runs rows first, as
# mq's own writes do.
sql() {
	local q=$1

	if [ -n "$PG" ]; then
		case $q in
		*'UPDATE delivery'*|*'DELETE FROM delivery'*|*'INSERT INTO delivery'*)
			unlease_all || return ;;
		*)
			q=$(printf '%s\n' "$q" | sed -E \
			    's/(FROM|JOIN) delivery\b/\1 deliveries/g
			    s/(FROM|JOIN) history\b/\1 histories/g') ;;
		esac
		psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$MQ_DB" -c "$q"
	else
		# A reader meets a lock for a moment when the last connection
		# of a program that just exited checkpoints and removes the
		# WAL: wait for it as mq's own programs do.
		sqlite3 -cmd '.timeout 30000' "$MQ_DB" "$@"
	fi
}

# shim NAME DIR: the path of the LD_PRELOAD shim t/faults/NAME.c, as
# make tools built it, or built into DIR when run by hand.  (An ASan
# build runs with a shim before its runtime only with
# ASAN_OPTIONS=verify_asan_link_order=0.)
shim() {
	local so=$2/$1.so
	if [ -e "${MQ_TOOLS:-}/$1.so" ]; then
		so=$MQ_TOOLS/$1.so
	else
		"${CC:-cc}" -shared -fPIC -O2 -Wall -Wextra -o "$so" \
		    "$BATS_TEST_DIRNAME/faults/$1.c" -ldl || return 1
	fi
	echo "$so"
}

# undo_pg_step9: SQL that takes away what the PostgreSQL schema step to
# version 9 adds (table combined, common/pg/combine.c).
undo_pg_step9() {
	echo 'DROP TABLE combined;'
}

# undo_pg_step8: SQL that takes away what the PostgreSQL schema step to
# version 8 adds (runs of lease and their acks, common/pg/lease.sql): the
# acks become history rows, the view events reads history and delivery
# alone again.  (No run may be in flight.)
undo_pg_step8() {
	echo "INSERT INTO history SELECT * FROM histories EXCEPT
	    SELECT * FROM ONLY history;
	    DROP FUNCTION events_at(bigint, bigint); DROP VIEW events;
	    DROP FUNCTION unlease(bigint, bigint, bigint, bigint, boolean);
	    DROP VIEW deliveries; DROP VIEW leased; DROP TABLE lease;
	    DROP VIEW histories; DROP TABLE acks;
	    CREATE VIEW events AS SELECT grp, off, since AS ts, 0 AS k, n,
	    attempt, 'delivered' AS event, dhost AS host, dpid AS pid,
	    NULL::text AS reason FROM ONLY history WHERE since IS NOT NULL
	    UNION ALL SELECT grp, off, ts, 1, n, attempt, event, host, pid,
	    reason FROM ONLY history UNION ALL SELECT grp, off, since, 0, 0,
	    attempt, 'delivered', host, pid, NULL FROM ONLY delivery WHERE
	    state = 1 AND since IS NOT NULL;"
}

# undo_step10: SQL that takes away what the schema step to SQLite 10,
# PostgreSQL 7 adds (headers, the outbox, idempotency, limits), to make
# a database of the schema before it.
undo_step10() {
	local c
	for c in msg.headers msg.dedup grp.idem grp.idem_window \
	    grp.duplicates grp.rate_n grp.rate_ms grp.rate_tat grp.per_key; do
		echo "ALTER TABLE ${c%.*} DROP COLUMN ${c#*.};"
	done
	echo 'DROP INDEX delivery_bid; ALTER TABLE delivery DROP COLUMN bid;'
	echo 'DROP TABLE consumed; DROP TABLE outbox;'
}

# db_intact: SQLite's integrity check passes.  (A PostgreSQL server
# keeps its own files sound; the tests check what mq stored instead.)
db_intact() {
	[ -n "$PG" ] || assert_equal "$(sql 'PRAGMA integrity_check')" ok
}

# txt COLUMN: an SQL expression for a blob column as text, in either
# dialect.
txt() {
	if [ -n "$PG" ]; then
		echo "convert_from($1, 'UTF8')"
	else
		echo "CAST($1 AS TEXT)"
	fi
}

# holds OUT BODY: the offset in file OUT (an mq-send's output) holds
# BODY.
holds() {
	local off
	off=$(cat "$1")
	[[ $off =~ ^[0-9]+$ ]] || fail "$1: not an offset: '$off'"
	run -0 sql "SELECT $(txt body) FROM msg WHERE off = $off"
	assert_output "$2"
}

# no_db: the database was not created: no file, or no mq tables in the
# test's schema.
no_db() {
	if [ -n "$PG" ]; then
		[ "$(psql_admin -A -t -c "SELECT count(*) FROM pg_tables
		    WHERE schemaname = '$PG_SCHEMA'")" = 0 ]
	else
		[ ! -e "$MQ_DB" ]
	fi
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

# switches PID: PID's voluntary context switches: the times it slept.
switches() {
	awk '$1 == "voluntary_ctxt_switches:" { print $2 }' "/proc/$1/status"
}

# moved PID N: PID has slept and woken since it had N switches.
moved() {
	[ "$(switches "$1")" != "$2" ]
}

# after_look PID: returns just after the waiting PID woke (and went back
# to sleep): a safety look, when nothing else happens.  The next one is
# a second away (five on PostgreSQL).
after_look() {
	local n
	n=$(switches "$1")
	[ -n "$n" ] || fail "pid $1 is gone"
	wait_for 10 moved "$1" "$n"
}

# in_time DEADLINE WHAT: for a look that must find nothing before
# DEADLINE (now_ms), run just before: it ended in time, or the machine was
# too slow for the test to judge WHAT, and the test is skipped, saying so
# (t/suite.sh counts the skips), instead of failing or passing on nothing.
in_time() {
	local late=$(( $(now_ms) - $1 ))
	[ "$late" -lt 0 ] || skip "too slow to judge $2: the look ended ${late}ms too late"
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
# itself (not from a subshell), one pid a line.  A group is killed only
# while it is ours (our_groups).
kill_bg() {
	local p
	if [ -e "$BATS_TEST_TMPDIR/pids" ]; then
		while read -r p; do
			is_child "$p" || continue
			{ kill -9 "$p"; wait "$p"; } 2>/dev/null || true
		done <"$BATS_TEST_TMPDIR/pids"
	fi
	if [ -e "$BATS_TEST_TMPDIR/pgids" ]; then
		our_groups <"$BATS_TEST_TMPDIR/pgids"
		for p in "${OURS[@]}"; do
			{ kill -9 -- "-$p"; wait "$p"; } 2>/dev/null || true
		done
	fi
}

# our_groups: of the process groups on stdin, one a line, those still this
# test's, in OURS (so not to be called in a subshell): the leader is a
# child of this shell, or a member has the test's BATS_TEST_TMPDIR in its
# environment (all the test starts inherits it, and keeps it once its
# parent is gone, as a handler whose mq-recv was killed does).  A group
# number reused by some other process on the machine has neither.
our_groups() {
	local p f st
	local -A want=() mine=()
	while read -r p; do
		[[ $p =~ ^[0-9]+$ ]] || continue
		if is_child "$p"; then mine[$p]=1; else want[$p]=1; fi
	done
	if [ ${#want[@]} -gt 0 ]; then
		for f in /proc/[0-9]*/stat; do
			{ read -r st <"$f"; } 2>/dev/null || continue
			st=${st##*) }		# STATE PPID PGRP ...
			st=${st#* * }
			p=${st%% *}
			if [ -z "${want[$p]-}" ] || [ -n "${mine[$p]-}" ]; then
				continue
			fi
			if grep -qsxzF "BATS_TEST_TMPDIR=$BATS_TEST_TMPDIR" \
			    "${f%stat}environ"; then
				mine[$p]=1
			fi
		done
	fi
	OURS=("${!mine[@]}")
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
