#!/usr/bin/env bats
# 044-powercut-all.bats: a power cut at any moment takes back nothing that
# any mq program reported done (SPEC 2, Durability: "Exit status 0 from any
# program that wrote means the write is committed and synced"; mq(7),
# DURABILITY: what each program syncs before it reports success).
#
# t/047 proves it for the offsets of concurrent mq-send; this file does it
# for every program that reports success after a write, one workload a
# test: mq-send (argument batches, streams, stdin batches, -0, -k, -q,
# --dedup), mq-recv and mq-ack (ack, --fail, --dead, exhausted attempts,
# receipts from a pipe, across a checkpoint), mq-recv -A, mq-recv exec
# mode, mq-replay and mq-replay -f (also of commits whose writer ran with
# MQ_SYNC=normal: the reader must sync them), mq-purge (settled,
# --before-offset, --dead, in chunks, --vacuum), mq-topic (create, set,
# group, delete, group-delete) and mq-replay -g (moves, --dead redrives).
#
# How.  A workload makes a database (not recorded), copies it as the
# initial state, then runs its steps under the power-cut shim
# (t/powercut/pcshim.c), some at once so that their commits share syncs.
# Each step is one process with a tag of its own; what it prints to stdout
# is an event of the log.  A step that exits 0 is followed by a marker line
# "@exit" printed, under the shim and with the step's tag, by a process
# started after the step was reaped: so the exit has its place in the
# log's one order, after everything the step (and its children: exec
# mode's handlers) did.  From the outputs and the exits come the facts,
# each a thing reported done at an event of the log: an offset printed by
# mq-send is stored with its body; a message printed by mq-recv or
# mq-replay is stored; after `mq-ack RECEIPT` exited 0 the delivery is
# acked (no delivery row, the group's position past it), failed (waiting,
# its attempt recorded) or dead (state 2); a message printed by mq-recv -A
# is acked; after an exec-mode mq-recv exited 0, what its handlers took is
# settled by their status (and with -j 1 each result is settled before the
# next handler starts: mq-recv(1)); after mq-purge exited 0 what it
# deleted stays deleted (SPEC: exit 0 means committed and synced; mq(7):
# each chunk is synced) and nothing else goes; after mq-topic or
# mq-replay -g exited 0 the setting, position or redrive is there.  A fact
# holds at every cut after its event, or until a later step that may
# legitimately undo it starts (a receive after a retry, a move after a
# move).  Then for every cut point before a sync and at the end (sampled
# when there are more than MAX_CUTS: the end, then the first cut after
# each fact's event, then the others, at random from the seed),
# t/powercut/powercut.c rebuilds the files in three modes (unsynced
# writes dropped, kept, torn) and sqlite3 checks integrity_check, mq's own
# counters (messages, bytes, next offset, deliveries below the position)
# and every fact valid at that cut.  A problem also seen at the end in the
# kept mode (the files the processes left) is no power cut's doing: the
# summary says how many.
#
# Checks that the checks can fail: in every workload, the log rebuilt
# with every sync ignored (powercut build -n) must, at the end in the
# dropped mode, report every fact the initial state lacks, and nothing
# else; in the mq-send workload, its reports moved to the start of their
# step must all be lost at the next cut; and the last test runs real
# programs with MQ_SYNC=normal and must see what they reported lost.
#
# MQ_POWERCUT_SYNC=normal runs every workload with MQ_SYNC=normal: the
# tests must then fail.  MQ_POWERCUT_MAX_CUTS=N checks up to N cut points
# per workload (0: all).  MQ_TEST_SEED=N replays the sampling and the torn
# writes (not the timing of the workloads).

load test_helper
# shellcheck disable=SC2034 # read by setup() in test_helper.bash
SQLITE_ONLY="power cuts replayed on the database files (PostgreSQL's durability is the server's; t/045 restarts it)"

MAX_CUTS=${MQ_POWERCUT_MAX_CUTS:-60}
STEP_TIMEOUT=60	# seconds for any one step

# a handler for exec mode: prints H, offset, attempt and body, then exits
# 0 for bodies ok*, 65 (dead letter) for bad*, 3 (retry) for the others
# shellcheck disable=SC2016 # for the handler's shell to expand
HANDLER=(sh -c 'IFS= read -r b
printf "H\t%s\t%s\t%s\n" "$MQ_OFFSET" "$MQ_ATTEMPT" "$b"
case $b in ok*) exit 0 ;; bad*) exit 65 ;; *) exit 3 ;; esac')

setup_file() {
	[ -z "$PG" ] || return 0
	local src=$BATS_TEST_DIRNAME/powercut cc=${CC:-cc}

	# make builds them (make tools); run by hand, the test does
	if [ -e "${MQ_TOOLS:-}/pcshim.so" ] && [ -e "$MQ_TOOLS/powercut" ]; then
		cp "$MQ_TOOLS/pcshim.so" "$MQ_TOOLS/powercut" "$BATS_FILE_TMPDIR/"
	else
		"$cc" -O2 -Wall -Wextra -shared -fPIC \
		    -o "$BATS_FILE_TMPDIR/pcshim.so" "$src/pcshim.c" -ldl
		"$cc" -O2 -Wall -Wextra -o "$BATS_FILE_TMPDIR/powercut" \
		    "$src/powercut.c"
	fi
	export SHIM=$BATS_FILE_TMPDIR/pcshim.so
	export POWERCUT=$BATS_FILE_TMPDIR/powercut
	# an ASan build refuses to run unless its runtime comes first in the
	# library list; the shim comes first
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
}

teardown() {
	kill_bg
}

# --- recording -------------------------------------------------------

# workload NAME: the files of workload NAME in $W, its database
# $W/run/mq.db (MQ_DB); the seed for sampling and torn writes in SEED
# (seed_random).
workload() {
	WL=$1
	W=$BATS_TEST_TMPDIR/$1
	mkdir -p "$W/run" "$W/init" "$W/out"
	export MQ_DB=$W/run/mq.db
	: >"$W/err"
	: >"$W/status"
	: >"$W/sent"
	: >"$W/settle"
	seed_random >/dev/null
}

# record_start: the database as it is now is the initial state (a power
# cut keeps it whole); from now on the steps are recorded.
record_start() {
	local f
	for f in "$MQ_DB" "$MQ_DB-wal"; do
		[ ! -e "$f" ] || cp "$f" "$W/init/"
	done
	export POWERCUT_LOG=$W/log POWERCUT_PREFIX=$MQ_DB
	if [ -n "${MQ_POWERCUT_SYNC:-}" ]; then
		export MQ_SYNC=$MQ_POWERCUT_SYNC
	fi
}

# rec TAG CMD...: one step: CMD under the shim with tag TAG (one process
# a tag), stdout appended to $W/out/TAG, stderr to $W/err.  When CMD
# exits 0, a marker line "@exit" is printed under the shim with the same
# tag, by a process started after CMD was reaped: the exit's place in the
# log.  Returns CMD's status (also appended to $W/status).
rec() {
	local tag=$1 st=0
	shift
	POWERCUT_TAG=$tag LD_PRELOAD=$SHIM timeout -k 5 "$STEP_TIMEOUT" "$@" \
	    >>"$W/out/$tag" 2>>"$W/err" || st=$?
	if [ "$st" = 0 ]; then
		POWERCUT_TAG=$tag LD_PRELOAD=$SHIM env echo @exit >/dev/null
	fi
	printf '%s\t%s\n' "$tag" "$st" >>"$W/status"
	return "$st"
}

# send [-o OPTION]... TAG TOPIC BODY...: a one-shot mq-send of the bodies,
# as arguments; its n-th output line is the offset of the n-th body.
send() {
	local opts=() tag topic i=0 b
	while [ "$1" = -o ]; do
		opts+=("$2")
		shift 2
	done
	tag=$1 topic=$2
	shift 2
	for b; do
		i=$((i + 1))
		printf '%s\t%s\t%s\t%s\n' "$tag" "$i" "$topic" "$b" >>"$W/sent"
	done
	rec "$tag" mq-send "${opts[@]}" "$topic" "$@" </dev/null
}

# send_stdin TAG TOPIC [OPTION...] < LINES: mq-send reading its messages
# from stdin (one a line, or -0), as fast as they come.
send_stdin() {
	local tag=$1 topic=$2 i=0 b opts=()
	shift 2
	opts=("$@")
	cat >"$W/in.$tag"
	if [[ " ${opts[*]} " == *" -0 "* ]]; then
		mapfile -d '' -t lines <"$W/in.$tag"
	else
		mapfile -t lines <"$W/in.$tag"
	fi
	for b in "${lines[@]}"; do
		i=$((i + 1))
		printf '%s\t%s\t%s\t%s\n' "$tag" "$i" "$topic" "$b" >>"$W/sent"
	done
	rec "$tag" mq-send "${opts[@]}" "$topic" <"$W/in.$tag"
}

# stream TAG TOPIC BODY...: one long-lived mq-send fed through a pipe, each
# body written once the offset of the one before came back, with a pause
# of 0-30ms between them.
stream() {
	local tag=$1 topic=$2 i=0 b pid in out st=0
	shift 2
	coproc SEND { POWERCUT_TAG=$tag LD_PRELOAD=$SHIM exec mq-send "$topic" \
	    2>>"$W/err"; }
	pid=$SEND_PID in=${SEND[1]} out=${SEND[0]}
	for b; do
		i=$((i + 1))
		printf '%s\t%s\t%s\t%s\n' "$tag" "$i" "$topic" "$b" >>"$W/sent"
		echo "$b" >&"$in"
		read -r -t 30 _ <&"$out" || {
			echo "$tag: no offset for $b" >>"$W/err"
			break
		}
		sleep "0.0$((RANDOM % 4))"
	done
	exec {in}>&-
	wait "$pid" || st=$?
	if [ "$st" = 0 ]; then
		POWERCUT_TAG=$tag LD_PRELOAD=$SHIM env echo @exit >/dev/null
	fi
	printf '%s\t%s\n' "$tag" "$st" >>"$W/status"
}

# settle TAG MODE RECEIPT...: mq-ack of the receipts as arguments; MODE is
# ack, fail (--fail --delay 1h: waiting), retry (--fail --delay 0: waiting
# until the next receive, step $UNTIL), dead (--dead), or exhaust (--fail
# at the group's last attempt: a dead letter).
settle() {
	local tag=$1 mode=$2 r
	shift 2
	for r; do
		receipt "$tag" "$mode" "$r"
	done
	ack_opts "$tag" "$mode"
	rec "$tag" mq-ack "${ACK_OPTS[@]}" "$@" </dev/null
}

# settle_stdin TAG MODE < RECEIPTS: one mq-ack reading the receipts from
# a pipe, written 2ms apart (so it settles them in several batches).
settle_stdin() {
	local tag=$1 mode=$2 r rs
	mapfile -t rs
	for r in "${rs[@]}"; do
		receipt "$tag" "$mode" "$r"
	done
	ack_opts "$tag" "$mode"
	for r in "${rs[@]}"; do
		echo "$r"
		sleep 0.002
	done | rec "$tag" mq-ack "${ACK_OPTS[@]}"
}

# ack_opts TAG MODE: mq-ack's options for MODE in ACK_OPTS
ack_opts() {
	case $2 in
	fail) ACK_OPTS=(--fail --delay 1h --reason "step $1") ;;
	retry | exhaust) ACK_OPTS=(--fail --delay 0) ;;
	dead) ACK_OPTS=(--dead --reason "step $1") ;;
	*) ACK_OPTS=() ;;
	esac
}

# receipt TAG MODE RECEIPT: step TAG settles RECEIPT as MODE.
receipt() {
	local IFS=:
	# shellcheck disable=SC2086 # split on the colons
	set -- "$1" "$2" $3
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" \
	    "$6" "${UNTIL:-}" >>"$W/settle"
}

# in_bg FUNCTION ARG...: runs FUNCTION in the background (listed for
# teardown); wait_bg waits for all.
in_bg() {
	"$@" 3>&- &
	BGPIDS+=("$!")
	echo "$!" >>"$BATS_TEST_TMPDIR/pids"
}

wait_bg() {
	local p
	for p in "${BGPIDS[@]}"; do
		finish "$p" $((STEP_TIMEOUT * 3)) || return 1
	done
	BGPIDS=()
}

# --- facts -----------------------------------------------------------

# record_end: recording stops; the outputs, steps, sends and settles are
# loaded into $W/expect.db, with the facts every workload has: every
# offset an mq-send printed is stored with its body (msg); every message
# that an `mq-send -q` exited 0 for is stored (body); every message of the
# initial state that is still there at the end was there all along (msg,
# event -1).  Fails when a step did not exit 0.
record_end() {
	local s
	unset POWERCUT_LOG POWERCUT_PREFIX MQ_SYNC
	mkdir "$W/final" "$W/probe"
	cp "$MQ_DB" "$MQ_DB-wal" "$W/final/"
	cp "$W/init/"* "$W/probe/"
	[ -s "$W/log" ] || fail "$WL: nothing was recorded"
	# EVENT PID TAG N C1 C2 C3 C4: N counts the lines of TAG (0: a
	# marker), C1.. the tab-separated fields of the line
	"$POWERCUT" outputs "$W/log" | awk -F '\t' -v OFS='\t' '
	    $4 == "@exit" { print $1, $2, $3, 0, "@exit", "", "", ""; next }
	    { n[$3]++; c4 = $7; for (i = 8; i <= NF; i++) c4 = c4 "\t" $i
	      print $1, $2, $3, n[$3], $4, $5, $6, c4 }' >"$W/out.tsv"
	# EVENT TAG TOPIC GROUP OFFSET ATTEMPT BODY: the lines RECEIPT, tab,
	# body that mq-recv printed
	awk -F '\t' -v OFS='\t' '$5 ~ /^[^:]+:[^:]+:[0-9]+:[0-9]+:[0-9a-f]+$/ {
	    split($5, r, ":"); print $1, $3, r[1], r[2], r[3], r[4], $6 }' \
	    "$W/out.tsv" >"$W/recv.tsv"
	# TAG FIRST: the first event of each step
	"$POWERCUT" dump "$W/log" | awk -F '\t' -v OFS='\t' \
	    '$4 != "-" && !($4 in f) { f[$4] = $1; print $4, $1 }' \
	    >"$W/first.tsv"
	sqlite3 "$W/expect.db" <<-SQL
	CREATE TABLE out (ev INTEGER, pid INTEGER, tag TEXT, n INTEGER,
	    c1 TEXT, c2 TEXT, c3 TEXT, c4 TEXT);
	CREATE TABLE first (tag TEXT, ev INTEGER);
	CREATE TABLE recv (ev INTEGER, tag TEXT, topic TEXT, grp TEXT,
	    off INTEGER, attempt INTEGER, body TEXT);
	CREATE TABLE status (tag TEXT, st INTEGER);
	CREATE TABLE sent (tag TEXT, n INTEGER, topic TEXT, body TEXT);
	CREATE TABLE settle (tag TEXT, mode TEXT, topic TEXT, grp TEXT,
	    off INTEGER, attempt INTEGER, untl TEXT);
	.mode tabs
	.import $W/out.tsv out
	.import $W/first.tsv first
	.import $W/recv.tsv recv
	.import $W/status status
	.import $W/sent sent
	.import $W/settle settle
	-- a step: its first event, and the marker of its exit 0 if any
	CREATE TABLE step AS SELECT f.tag, f.ev AS first,
	    (SELECT max(ev) FROM out o WHERE o.tag = f.tag AND o.c1 = '@exit')
	    AS exit FROM first f;
	-- kind: msg (topic, off, val: body), body (topic, val), gone (topic,
	-- off), acked (topic, grp, off), waiting (topic, grp, off, val:
	-- attempt), dead (topic, grp, off [, val: attempt]), notdead (topic,
	-- grp, off), pos (topic, grp, val), topic (topic, val: settings),
	-- notopic (topic), group (topic, grp, val: settings), nogroup (topic,
	-- grp).  Valid for cuts after ev, up to and with until (NULL: for
	-- ever); fresh: the initial state lacks it; tag: the step that
	-- reported it, if one did.
	CREATE TABLE fact (kind TEXT NOT NULL, ev INTEGER NOT NULL,
	    until INTEGER, topic TEXT NOT NULL, grp TEXT, off INTEGER, val,
	    what TEXT NOT NULL, fresh INTEGER NOT NULL DEFAULT 1, tag TEXT);
	ATTACH '$W/probe/mq.db' AS i;
	INSERT INTO fact (kind, ev, topic, off, val, what, tag)
	    SELECT 'msg', o.ev, s.topic, CAST(o.c1 AS INTEGER), s.body,
	        'mq-send ' || s.tag || ' printed it at event ' || o.ev, s.tag
	    FROM sent s JOIN out o ON o.tag = s.tag AND o.n = s.n;
	INSERT INTO fact (kind, ev, topic, off, val, what, fresh)
	    SELECT 'msg', -1, t.name, m.off, CAST(m.body AS TEXT),
	        'in the initial state', 0
	    FROM i.msg m JOIN i.topic t ON t.id = m.topic;
	SQL
	sqlite3 "$W/final/mq.db" "ATTACH '$W/expect.db' AS x;
	    DELETE FROM x.fact WHERE ev = -1 AND NOT EXISTS (SELECT 1 FROM msg m
	        JOIN topic t ON t.id = m.topic WHERE t.name = x.fact.topic AND
	        m.off = x.fact.off)" || return 1
	# every step exited 0 and said nothing on stderr (but $STDERR_OK)
	s=$(sqlite3 "$W/expect.db" "SELECT group_concat(tag || ' exit ' || st,
	    ', ') FROM status WHERE st <> 0")
	[ -z "$s" ] || fail "$WL: steps failed: $s; $(head -5 "$W/err")"
	s=$(grep -v -E -e "${STDERR_OK:-^\$}" "$W/err" | head -5)
	[ -z "$s" ] || fail "$WL: steps said on stderr: $s"
	# every body sent got its offset
	s=$(sqlite3 "$W/expect.db" "SELECT group_concat(s.tag || '#' || s.n,
	    ' ') FROM sent s LEFT JOIN out o ON o.tag = s.tag AND o.n = s.n
	    WHERE o.ev IS NULL")
	[ -z "$s" ] || fail "$WL: no offset printed for $s"
}

# facts SQL: adds facts (SQL on $W/expect.db, the initial state attached
# as i).
facts() {
	sqlite3 "$W/expect.db" "ATTACH '$W/probe/mq.db' AS i; $1"
}

# settle_facts: the facts of the settles of mq-ack steps that exited 0.
settle_facts() {
	facts "INSERT INTO fact (kind, ev, until, topic, grp, off, val, what)
	    SELECT CASE a.mode WHEN 'ack' THEN 'acked' WHEN 'fail' THEN
	        'waiting' WHEN 'retry' THEN 'waiting' ELSE 'dead' END, s.exit,
	        (SELECT first FROM step WHERE tag = a.untl), a.topic, a.grp,
	        a.off, CASE WHEN a.mode IN ('fail', 'retry', 'exhaust') THEN
	        a.attempt END, 'mq-ack ' || a.tag || ' (' || a.mode ||
	        ') exited 0 at event ' || s.exit
	    FROM settle a JOIN step s ON s.tag = a.tag
	    WHERE s.exit IS NOT NULL"
}

# recv_facts: every message an mq-recv printed (RECEIPT, tab, body) was
# stored with that body when it was printed.
recv_facts() {
	facts "INSERT INTO fact (kind, ev, topic, off, val, what)
	    SELECT 'msg', ev, topic, off, body, 'mq-recv ' || tag ||
	        ' printed it at event ' || ev FROM recv"
}

# pad FRAMES: fills the WAL up to FRAMES frames (of a 4096-byte page:
# 4120 bytes each) with commits of sqlite3 to topic pad's row, so that a
# checkpoint (at 1000) comes soon after the recording starts.  No sync
# (the initial state is copied), no checkpoint on close.
pad() {
	local have i
	mq-topic create pad >/dev/null
	have=$((($(wc -c <"$MQ_DB-wal") - 32) / 4120))
	{
		echo ".dbconfig no_ckpt_on_close on"
		echo "PRAGMA synchronous=OFF; PRAGMA wal_autocheckpoint=0;"
		for ((i = have; i < $1; i++)); do
			echo "UPDATE topic SET created = created + 1 WHERE name = 'pad';"
		done
	} | sqlite3 "$MQ_DB" >/dev/null
	[ "$(wc -c <"$MQ_DB-wal")" = $(($1 * 4120 + 32)) ] ||
	    fail "pad: the WAL is $(wc -c <"$MQ_DB-wal") bytes, not $1 frames"
}

# --- checking --------------------------------------------------------

# check_state DIR CUT: one line per problem of the database in DIR for a
# power cut at CUT: each fact line starts with [KIND].  The facts are in
# $EXPECT, or $W/expect.db.
check_state() {
	check_sql "$1" "$2" | sqlite3 2>&1 | grep -v '^@mode '
}

# check_sql DIR CUT: the sqlite3 commands that check DIR/mq.db (after a
# line "@mode DIR"): each problem a line, an error a line.
check_sql() {
	cat <<-SQL
	.open $1/mq.db
	.output /dev/null
	.dbconfig no_ckpt_on_close on
	.output
	.print @mode $1
	ATTACH '${EXPECT:-$W/expect.db}' AS x;
	SELECT 'integrity_check: ' || group_concat(integrity_check, '; ')
	    FROM pragma_integrity_check
	    HAVING group_concat(integrity_check, '; ') <> 'ok';
	-- mq's own counters, which the transaction that changes a topic keeps
	-- in step with it
	SELECT 'topic ' || t.name || ' counts ' || t.msgs || ' messages of ' ||
	    t.bytes || ' bytes, next offset ' || t.next_off || ', holds ' ||
	    count(m.off) || ' of ' || coalesce(sum(length(m.body)), 0) ||
	    ' bytes up to offset ' || coalesce(max(m.off), 0)
	    FROM topic t LEFT JOIN msg m ON m.topic = t.id GROUP BY t.id
	    HAVING t.msgs <> count(m.off) OR
	        t.bytes <> coalesce(sum(length(m.body)), 0) OR
	        t.next_off <= coalesce(max(m.off), 0);
	SELECT 'group ' || g.name || ': a delivery at ' || d.off ||
	    ', not below its position ' || g.pos
	    FROM delivery d JOIN grp g ON g.id = d.grp WHERE d.off >= g.pos;
	CREATE TEMP VIEW f AS SELECT * FROM x.fact
	    WHERE ev < $2 AND (until IS NULL OR $2 <= until);
	SELECT '[' || f.kind || '] ' || f.what || ': offset ' || f.off ||
	    ' of ' || f.topic || ' ' || CASE WHEN m.off IS NULL THEN 'lost'
	    ELSE 'stored with body ' || quote(CAST(m.body AS TEXT)) ||
	        ', not ' || quote(f.val) END
	    FROM f LEFT JOIN topic t ON t.name = f.topic
	    LEFT JOIN msg m ON m.topic = t.id AND m.off = f.off
	    WHERE f.kind = 'msg' AND
	        (m.off IS NULL OR CAST(m.body AS TEXT) IS NOT f.val);
	SELECT '[' || f.kind || '] ' || f.what || ': no message ' ||
	    quote(f.val) || ' in ' || f.topic
	    FROM f WHERE f.kind = 'body' AND NOT EXISTS (SELECT 1 FROM msg m
	        JOIN topic t ON t.id = m.topic
	        WHERE t.name = f.topic AND CAST(m.body AS TEXT) = f.val);
	SELECT '[' || f.kind || '] ' || f.what || ': offset ' || f.off ||
	    ' of ' || f.topic || ' is back, with body ' ||
	    quote(CAST(m.body AS TEXT))
	    FROM f JOIN topic t ON t.name = f.topic
	    JOIN msg m ON m.topic = t.id AND m.off = f.off
	    WHERE f.kind = 'gone';
	SELECT '[' || f.kind || '] ' || f.what || ': ' || f.topic || '/' ||
	    f.grp || ' offset ' || f.off || CASE
	    WHEN g.id IS NULL THEN ': no such group'
	    WHEN d.off IS NULL THEN ': no delivery, position ' || g.pos
	    ELSE ': delivery state ' || d.state || ', attempt ' || d.attempt ||
	        ', position ' || g.pos END ||
	    CASE WHEN f.val IS NOT NULL THEN ' (want attempt ' || f.val || ')'
	    ELSE '' END
	    FROM f LEFT JOIN topic t ON t.name = f.topic
	    LEFT JOIN grp g ON g.topic = t.id AND g.name = f.grp
	    LEFT JOIN delivery d ON d.grp = g.id AND d.off = f.off
	    WHERE f.kind IN ('acked', 'waiting', 'dead', 'notdead') AND
	        (g.id IS NULL OR CASE f.kind
	        WHEN 'acked' THEN d.off IS NOT NULL OR g.pos <= f.off
	        WHEN 'waiting' THEN d.off IS NULL OR d.state <> 0 OR
	            d.attempt IS NOT f.val
	        WHEN 'dead' THEN d.off IS NULL OR d.state <> 2 OR
	            (f.val IS NOT NULL AND d.attempt IS NOT f.val)
	        ELSE d.state IS 2 END);
	SELECT '[' || f.kind || '] ' || f.what || ': ' || f.topic || '/' ||
	    f.grp || CASE WHEN g.id IS NULL THEN ': no such group'
	    ELSE ': position ' || g.pos || ', not ' || f.val END
	    FROM f LEFT JOIN topic t ON t.name = f.topic
	    LEFT JOIN grp g ON g.topic = t.id AND g.name = f.grp
	    WHERE f.kind = 'pos' AND g.pos IS NOT f.val;
	SELECT '[' || f.kind || '] ' || f.what || ': topic ' || f.topic ||
	    CASE WHEN t.id IS NULL THEN ' missing'
	    ELSE ' has ' || quote(coalesce(t.retention, 'none') || ' ' ||
	        t.dedup_window || ' ' || t.max_size) || ', not ' ||
	        quote(f.val) END
	    FROM f LEFT JOIN topic t ON t.name = f.topic
	    WHERE f.kind = 'topic' AND (t.id IS NULL OR
	        coalesce(t.retention, 'none') || ' ' || t.dedup_window || ' ' ||
	        t.max_size IS NOT f.val);
	SELECT '[' || f.kind || '] ' || f.what || ': topic ' || f.topic ||
	    ' is there'
	    FROM f JOIN topic t ON t.name = f.topic WHERE f.kind = 'notopic';
	SELECT '[' || f.kind || '] ' || f.what || ': group ' || f.topic ||
	    '/' || f.grp || CASE WHEN g.id IS NULL THEN ' missing'
	    ELSE ' has ' || quote(g.lease || ' ' || g.max_attempts || ' ' ||
	        g.ordered || ' ' || g.backoff) || ', not ' || quote(f.val) END
	    FROM f LEFT JOIN topic t ON t.name = f.topic
	    LEFT JOIN grp g ON g.topic = t.id AND g.name = f.grp
	    WHERE f.kind = 'group' AND (g.id IS NULL OR g.lease || ' ' ||
	        g.max_attempts || ' ' || g.ordered || ' ' || g.backoff IS NOT
	        f.val);
	SELECT '[' || f.kind || '] ' || f.what || ': group ' || f.topic ||
	    '/' || f.grp || ' is there'
	    FROM f JOIN topic t ON t.name = f.topic
	    JOIN grp g ON g.topic = t.id AND g.name = f.grp
	    WHERE f.kind = 'nogroup';
	SQL
}

# check_cut CUT KIND [-n]: rebuilds the files a power cut at CUT leaves,
# in each mode, and prints one line per problem (-n: as if nothing had
# been synced, the dropped mode only).
# shellcheck disable=SC2153 # SEED is set by seed_random (test_helper)
check_cut() {
	local out=$W/cut m modes=dropped,kept,torn opts=()
	if [ "${3:-}" = -n ]; then
		opts=(-n)
		modes=dropped
	fi
	rm -rf "$out"
	{ "$POWERCUT" build "${opts[@]}" -s "$SEED" "$W/log" "$W/init" "$1" \
	    "$modes" "$out" 2>&1 || echo "powercut build failed"
	} | sed "s/^/cut $1 ($2): /"
	# one sqlite3 for the three states: each line after "@mode DIR" is
	# about DIR's mode
	for m in ${modes//,/ }; do
		check_sql "$out/$m" "$1"
	done | sqlite3 2>&1 | awk -v c="cut $1 ($2)" \
	    '$1 == "@mode" { n = split($2, p, "/"); m = p[n]; next }
	    { print c ", " m ": " $0 }'
}

# check_cuts: checks the cut points before every sync and at the end
# (at most MAX_CUTS of them: the end, then those just after an
# acknowledgment, the first cut after each fact's event, then the others,
# each kind at random from SEED),
# prints a summary to fd 3, and fails on any problem.  Then the
# self-check: at the end, with every sync ignored, the dropped mode (the
# initial state) must show every fresh fact made during the recording as
# a problem, and nothing else.
check_cuts() {
	local total crit checked cut kind end nfacts summary want got kept log
	# a message printed is fresh when the initial state lacks it
	facts "UPDATE fact SET fresh = NOT EXISTS (SELECT 1 FROM i.msg m
	    JOIN i.topic t ON t.id = m.topic WHERE t.name = fact.topic AND
	    m.off = fact.off AND CAST(m.body AS TEXT) IS fact.val)
	    WHERE kind = 'msg' AND ev >= 0"
	"$POWERCUT" cuts -k before-sync,end "$W/log" >"$W/cuts.all"
	total=$(wc -l <"$W/cuts.all")
	sqlite3 "$W/expect.db" ".mode tabs" \
	    "CREATE TABLE cut (c INTEGER, kind TEXT)" \
	    ".import $W/cuts.all cut" \
	    "SELECT c, kind, CASE WHEN c = (SELECT max(c) FROM cut) THEN 0
	        WHEN c IN (SELECT (SELECT min(c) FROM cut WHERE c > e.ev)
	            FROM (SELECT DISTINCT ev FROM fact) e) THEN 1
	        ELSE 2 END FROM cut" >"$W/cuts.marked"
	crit=$(awk -F '\t' '$3 <= 1' "$W/cuts.marked" | wc -l)
	# the end, then the first cut after each fact's event, then the
	# others; each group in a random order from SEED
	awk -F '\t' -v OFS='\t' -v seed="$SEED" \
	    'BEGIN { srand(seed) } { print $3, rand(), $1, $2 }' \
	    "$W/cuts.marked" | sort -k1,1n -k2,2g |
	    awk -F '\t' -v OFS='\t' -v max="$MAX_CUTS" \
	    'max == 0 || NR <= max { print $3, $4 }' | sort -n >"$W/cuts"
	: >"$W/problems"
	checked=0
	while read -r cut kind; do
		check_cut "$cut" "$kind" >>"$W/problems"
		checked=$((checked + 1))
	done <"$W/cuts"
	nfacts=$(sqlite3 "$W/expect.db" "SELECT group_concat(n || ' ' || kind,
	    ', ') FROM (SELECT kind, count(*) AS n FROM fact GROUP BY kind
	    ORDER BY kind)")
	log=$("$POWERCUT" stats "$W/log" | awk '$1 == "events" { e = $2 }
	    $1 == "mq.db-wal" { s = $7 } $1 == "mq.db" { w = $3 }
	    END { print e " events, " s " syncs of the WAL, " w \
	        " writes of the database (checkpoints)" }')
	summary="$WL: log of $log; checked $checked of $total cut points x 3 modes ($crit"
	summary+=" just after an acknowledgment; seed $SEED): $(wc -l \
	    <"$W/problems") problems; facts: $nfacts"
	end=$(sqlite3 "$W/expect.db" "SELECT max(c) FROM cut")
	kept=$(grep -c "^cut $end (end), kept: " "$W/problems" || true)
	if [ "$kept" -gt 0 ]; then
		summary+="; $kept of them at the end in the kept mode, the state"
		summary+=" the processes left: lost without any power cut"
	fi
	echo "# $summary" >&3
	echo "$summary"
	# the self-check (reported before the problems)
	check_cut "$end" end -n >"$W/problems.n"
	want=$(sqlite3 "$W/expect.db" "SELECT count(*) FROM fact
	    WHERE ev >= 0 AND fresh AND (until IS NULL OR until >= $end)")
	got=$(grep -c "^cut $end (end), dropped: \[" "$W/problems.n" || true)
	echo "# $WL self-check: with every sync ignored, $got problems at the" \
	    "end (dropped), for $want fresh facts" >&3
	[ "$want" -gt 0 ] || fail "$WL: no fresh fact to lose"
	if [ "$got" != "$want" ] || [ "$(wc -l <"$W/problems.n")" != "$want" ]
	then
		fail "$WL self-check: with every sync ignored, want $want lost" \
		    "facts at the end, got:
$(head -20 "$W/problems.n")"
	fi

	[ "$checked" -gt 0 ] || fail "$WL: no cut point to check"
	if [ -s "$W/problems" ]; then
		fail "$WL: $(wc -l <"$W/problems") problems (MQ_TEST_SEED=$SEED;" \
		    "rebuild a cut with: $POWERCUT build -v -s $SEED $W/log" \
		    "$W/init CUT MODE DIR); the first of each kind:
$(awk '{ k = $0; sub(/^cut [0-9]+ \([a-z-]+\)(, [a-z]+)?: /, "", k)
    sub(/: (lost|stored|no |delivery|position|is back|has |missing).*/, "", k)
    if (!(k in seen)) { seen[k]; print } }' "$W/problems" | head -20)"
	fi
}

# --- the workloads ---------------------------------------------------

# batches: six one-shot mq-send of three arguments each
batches() {
	local i
	for i in 1 2 3 4 5 6; do
		send "a$i" s "A$i-1" "A$i-2" "A$i-3"
	done
}

# stdin_batches: mq-send reading stdin: 300 lines, NUL-separated, keyed
stdin_batches() {
	seq -f C-%g 1 300 | send_stdin c1 s
	printf 'C0-%s\0' 1 2 3 | send_stdin c2 s -0
	printf 'CK-%s\n' 1 2 3 | send_stdin c3 s -k key1
}

@test "mq-send: argument batches, -q, --dedup, stdin batches and streams, at once" {
	workload send
	mq-topic create s >/dev/null
	mq-send -q s init-1 init-2
	record_start
	BGPIDS=()
	in_bg batches
	in_bg stream b1 s B1-{1..12}
	in_bg stream b2 s B2-{1..12}
	in_bg stdin_batches
	wait_bg
	# -q: only the exit says the messages are stored
	rec q1 mq-send -q s Q-1 Q-2 </dev/null
	# --dedup: the second send stores nothing and prints the first offset
	send -o --dedup -o id1 d1 s D-1
	send -o --dedup -o id1 d2 s D-1
	record_end
	facts "INSERT INTO fact (kind, ev, topic, val, what, tag)
	    SELECT 'body', s.exit, 's', b.column1, 'mq-send -q exited 0 at '
	        || 'event ' || s.exit, s.tag
	    FROM step s, (VALUES ('Q-1'), ('Q-2')) b WHERE s.tag = 'q1'"
	check_cuts
	early
}

# early: the checks see a report made before its sync.  Had an mq-send
# step (any but d2, whose message d1 stored) reported its messages at its
# first event (opening the database), the first cut after that, before
# any sync that could cover them, must in the dropped mode show every one
# of them lost.
early() {
	local tag first cut want got n=0
	while read -r tag first; do
		cut=$(awk -v f="$first" '$1 > f { print $1; exit }' "$W/cuts.all")
		cp "$W/expect.db" "$W/early.db"
		sqlite3 "$W/early.db" "DELETE FROM fact WHERE tag IS NOT '$tag';
		    UPDATE fact SET ev = $first"
		want=$(sqlite3 "$W/early.db" "SELECT count(*) FROM fact")
		rm -rf "$W/cut"
		"$POWERCUT" build -s "$SEED" "$W/log" "$W/init" "$cut" dropped \
		    "$W/cut" || fail "powercut build failed"
		got=$(EXPECT=$W/early.db check_state "$W/cut/dropped" "$cut" |
		    grep -c '^\[' || true)
		[ "$got" = "$want" ] || fail "early $tag (first event $first," \
		    "cut $cut): $got of its $want reports lost, not all"
		n=$((n + want))
	done < <(sqlite3 -separator ' ' "$W/expect.db" "SELECT tag, first FROM
	    step WHERE tag IN (SELECT tag FROM fact) AND tag <> 'd2'
	    ORDER BY first")
	echo "# $WL: reports moved to the start of their step: all $n lost" \
	    "at the next cut (dropped)" >&3
}

# consume_g1: five rounds of: receive 4 in group g1, ack 2, fail 1 (retry
# in an hour), dead-letter 1.
consume_g1() {
	local i rs
	for i in 1 2 3 4 5; do
		rec "r1-$i" mq-recv -n 4 -g g1 a </dev/null || return
		mapfile -t rs < <(tail -n 4 "$W/out/r1-$i" | cut -f1)
		settle "k1-$i" ack "${rs[0]}" "${rs[1]}"
		settle "f1-$i" fail "${rs[2]}"
		settle "x1-$i" dead "${rs[3]}"
	done
}

# consume_g2: everything in group g2, acked by one mq-ack from a pipe.
consume_g2() {
	rec r2 mq-recv -n 0 -g g2 a </dev/null || return
	cut -f1 "$W/out/r2" | settle_stdin k2 ack
}

# consume_gx: group gx (2 attempts): 3 received and failed for a retry at
# once; then all received: the 3 again (attempt 2) failed for good (dead
# letters), the others acked.
consume_gx() {
	local rs
	rec rx1 mq-recv -n 3 -g gx a </dev/null || return
	mapfile -t rs < <(cut -f1 "$W/out/rx1")
	UNTIL=rx2 settle fx1 retry "${rs[@]}"
	rec rx2 mq-recv -n 0 -g gx a </dev/null || return
	mapfile -t rs < <(cut -f1 "$W/out/rx2" | grep ':2:[0-9a-f]*$')
	settle fx2 exhaust "${rs[@]}"
	mapfile -t rs < <(cut -f1 "$W/out/rx2" | grep ':1:[0-9a-f]*$')
	settle kx2 ack "${rs[@]}"
}

@test "mq-recv and mq-ack: acks, fails, dead letters, exhausted attempts, a checkpoint" {
	workload ack
	STDERR_OK='^mq-ack: a:gx:[0-9]+:2:[0-9a-f]+: attempts exhausted: now a dead letter$'
	mq-send -q a a-{1..40}
	mq-topic group a gx --max-attempts 2 >/dev/null
	pad 990
	record_start
	BGPIDS=()
	in_bg consume_g1
	in_bg consume_g2
	in_bg consume_gx
	wait_bg
	record_end
	recv_facts
	settle_facts
	check_cuts
}

# autoack TAG GROUP N: mq-recv -A of N messages, printing offset and body.
autoack() {
	rec "$1" mq-recv -A -n "$3" -g "$2" --format '%o\t%b\n' aa </dev/null
}

# autoack_rounds: five rounds of 3 in group ga, then three of 4 in group
# gc with the default output (the body alone).
autoack_rounds() {
	local i
	for i in 1 2 3 4 5; do
		autoack "ga-$i" ga 3 || return
	done
	for i in 1 2 3; do
		rec "gc-$i" mq-recv -A -n 4 -g gc aa </dev/null || return
	done
}

@test "mq-recv -A: what it printed is acked and stored, in every later state" {
	workload autoack
	mq-send -q aa aa-{1..30}
	mq-topic group aa gb --from latest >/dev/null
	record_start
	BGPIDS=()
	# a follower of what the producer sends, and one-shot receivers
	in_bg rec gb mq-recv -A -f -n 20 -g gb --format '%o\t%b\n' aa
	in_bg stream p aa P-{1..20}
	in_bg autoack_rounds
	wait_bg
	record_end
	# lines OFFSET, tab, BODY; or BODY alone (group gc: a message of the
	# initial state)
	facts "CREATE TEMP VIEW printed AS SELECT o.ev, o.tag,
	        CASE WHEN o.tag LIKE 'gc-%' THEN 'gc' WHEN o.tag LIKE 'ga-%'
	        THEN 'ga' ELSE 'gb' END AS grp,
	        CASE WHEN o.tag LIKE 'gc-%' THEN (SELECT m.off FROM i.msg m
	            WHERE CAST(m.body AS TEXT) = o.c1)
	        ELSE CAST(o.c1 AS INTEGER) END AS off,
	        CASE WHEN o.tag LIKE 'gc-%' THEN o.c1 ELSE o.c2 END AS body
	    FROM out o WHERE o.n > 0 AND o.tag NOT LIKE 'p';
	    INSERT INTO fact (kind, ev, topic, grp, off, val, what)
	        SELECT 'acked', ev, 'aa', grp, off, NULL, 'mq-recv -A ' || tag ||
	            ' printed it at event ' || ev FROM printed
	        UNION ALL
	        SELECT 'msg', ev, 'aa', NULL, off, body, 'mq-recv -A ' || tag ||
	            ' printed it at event ' || ev FROM printed"
	run -0 sqlite3 "$W/expect.db" "SELECT count(*), count(off) FROM fact
	    WHERE kind = 'acked'"
	assert_output "47|47"
	check_cuts
}

# exec_j1 N: N runs of exec mode, one handler at a time, 5 messages each.
exec_j1() {
	local i
	for i in $(seq "$1"); do
		rec "e1-$i" mq-recv -n 5 -g ge1 e -- "${HANDLER[@]}" </dev/null ||
		    return
	done
}

# exec_facts: after an exec-mode mq-recv exited 0, every message its
# handlers took is settled by their status: ok* acked, bad* a dead letter,
# others waiting for a retry; with one handler at a time (tags e1-*), a
# handler's result is also settled before the next handler of the run
# starts (mq-recv(1), Exec mode: "A handler's result is settled and
# synced before the next message is claimed in its slot").
exec_facts() {
	facts "CREATE TEMP VIEW h AS SELECT o.ev, o.tag, CAST(o.c2 AS INTEGER)
	        AS off, CAST(o.c3 AS INTEGER) AS attempt, o.c4 AS body,
	        CASE WHEN o.c4 LIKE 'ok%' THEN 'acked' WHEN o.c4 LIKE 'bad%'
	        THEN 'dead' ELSE 'waiting' END AS kind,
	        CASE WHEN o.tag LIKE 'e1-%' THEN 'ge1' ELSE 'g' || o.tag END
	        AS grp
	    FROM out o WHERE o.c1 = 'H';
	    INSERT INTO fact (kind, ev, topic, grp, off, val, what)
	        SELECT h.kind, s.exit, 'e', h.grp, h.off, CASE WHEN h.kind <>
	            'acked' THEN h.attempt END, 'mq-recv ' || h.tag ||
	            ' (exec) exited 0 at event ' || s.exit || ', its handler ' ||
	            'had ' || h.body
	        FROM h JOIN step s ON s.tag = h.tag WHERE s.exit IS NOT NULL;
	    INSERT INTO fact (kind, ev, topic, grp, off, val, what)
	        SELECT h.kind, n.ev, 'e', h.grp, h.off, CASE WHEN h.kind <>
	            'acked' THEN h.attempt END, 'mq-recv ' || h.tag ||
	            ' (exec -j 1) started the next handler at event ' || n.ev ||
	            ', after the one that had ' || h.body
	        FROM h JOIN h n ON n.tag = h.tag AND n.ev = (SELECT min(ev)
	            FROM h x WHERE x.tag = h.tag AND x.ev > h.ev)
	        WHERE h.tag LIKE 'e1-%'"
}

@test "mq-recv exec mode: what its handlers settled is settled after it exits 0" {
	local i
	workload exec
	for i in $(seq 40); do
		if ((i % 5 == 0)); then
			echo "bad-$i"
		elif ((i % 7 == 0)); then
			echo "retry-$i"
		else
			echo "ok-$i"
		fi
	done | mq-send -q e
	mq-topic group e ge1 >/dev/null
	mq-topic group e ge2 >/dev/null
	mq-topic group e ge3 --from latest >/dev/null
	mq-send -q e ok-41 ok-42
	record_start
	# fewer messages (2) than handler slots (3)
	rec e3 mq-recv -n 0 -j 3 -g ge3 e -- "${HANDLER[@]}" </dev/null
	BGPIDS=()
	in_bg exec_j1 4
	in_bg rec e2 mq-recv -n 0 -j 3 -g ge2 e -- "${HANDLER[@]}"
	in_bg stream p e ok-p{1..10}
	wait_bg
	record_end
	exec_facts
	run -0 sqlite3 "$W/expect.db" "SELECT count(*) FROM out WHERE c1 = 'H'"
	[ "$output" -ge 62 ] || fail "the handlers took $output messages, not 62 or more"
	check_cuts
}

# replays: one-shot reads of the log while it grows: all of it, a range,
# a --format.
replays() {
	local i
	for i in 1 2 3 4; do
		rec "ra-$i" mq-replay r </dev/null || return
		rec "rb-$i" mq-replay --from-offset 5 --to-offset 30 \
		    --format '%o\t%b\n' r </dev/null || return
		sleep 0.05
	done
}

# replay_facts: every line OFFSET, tab, BODY that an mq-replay printed is
# stored (topic TOPIC).
replay_facts() {
	facts "INSERT INTO fact (kind, ev, topic, off, val, what)
	    SELECT 'msg', ev, '$1', CAST(c1 AS INTEGER), c2, 'mq-replay ' ||
	        tag || ' printed it at event ' || ev
	    FROM out WHERE n > 0 AND tag LIKE 'r%'"
}

@test "mq-replay and mq-replay -f: what they printed is stored, in every later state" {
	workload replay
	mq-send -q r r-{1..20}
	record_start
	BGPIDS=()
	in_bg rec rf mq-replay -f -n 50 r
	in_bg stream p r P-{21..50}
	in_bg replays
	wait_bg
	record_end
	replay_facts r
	run -0 sqlite3 "$W/expect.db" "SELECT count(*) FROM out WHERE tag = 'rf'
	    AND n > 0"
	assert_output 50
	check_cuts
}

# The commits read here are made by an mq-send with MQ_SYNC=normal, which
# never syncs them: a reader that prints them must sync them first (mq(7),
# DURABILITY: "Before it prints anything it waits for the sync of every
# commit it may have seen, or syncs the WAL itself").  The producer's own
# offsets are no facts: MQ_SYNC=normal may lose them.
@test "readers of commits their writer did not sync: what mq-replay and mq-recv printed stays" {
	workload reader
	mq-send -q r r-{1..5}
	mq-topic group r gp >/dev/null
	mq-topic group r ga >/dev/null
	record_start
	BGPIDS=()
	in_bg rec rf mq-replay -f -n 30 r
	in_bg rec gp mq-recv -f -n 30 -g gp r
	in_bg rec ga mq-recv -A -f -n 30 -g ga --format '%o\t%b\n' r
	MQ_SYNC=normal in_bg stream p r P-{6..30}
	wait_bg
	record_end
	# the producer never synced while it sent (as it ends, the last to
	# close may checkpoint the WAL, which syncs): the readers did
	local sent
	run -0 "$POWERCUT" outputs "$W/log"
	# shellcheck disable=SC2016 # awk's fields
	sent=$(awk -F'\t' '$3 == "p" && $4 != "@exit" { e = $1 }
	    END { print e + 0 }' <<<"$output")
	[ "$sent" -gt 0 ] || fail "mq-send p printed nothing"
	run -0 "$POWERCUT" dump "$W/log"
	# shellcheck disable=SC2016 # awk's fields
	run -0 awk -F'\t' -v sent="$sent" '
	    $4 == "p" && $5 == "sync" && $1 < sent { early++ }
	    $4 != "p" && $5 == "sync" { readers++ }
	    END { print early + 0, readers + 0 }' <<<"$output"
	[[ $output == '0 '* ]] || fail "mq-send p synced while it sent ($output)"
	[[ $output != *' 0' ]] || fail "no reader synced"
	facts "DELETE FROM fact WHERE what LIKE 'mq-send p %'"
	replay_facts r
	recv_facts
	facts "INSERT INTO fact (kind, ev, topic, grp, off, val, what)
	    SELECT 'acked', ev, 'r', 'ga', CAST(c1 AS INTEGER), NULL,
	        'mq-recv -A ga printed it at event ' || ev
	    FROM out WHERE tag = 'ga' AND n > 0
	    UNION ALL
	    SELECT 'msg', ev, 'r', NULL, CAST(c1 AS INTEGER), c2,
	        'mq-recv -A ga printed it at event ' || ev
	    FROM out WHERE tag = 'ga' AND n > 0"
	check_cuts
}

# fact_at TAG KIND TOPIC [GROUP [OFFSET [VALUE [UNTIL]]]]: a fact made by
# step TAG's exit 0 (none when it did not), valid until step UNTIL starts.
fact_at() {
	facts "INSERT INTO fact (kind, ev, until, topic, grp, off, val, what)
	    SELECT '$2', s.exit, (SELECT first FROM step WHERE tag = '${7:-}'),
	        '$3', NULLIF('${4:-}', ''), NULLIF('${5:-}', ''),
	        NULLIF('${6:-}', ''), 'step $1 exited 0 at event ' || s.exit
	    FROM step s WHERE s.tag = '$1' AND s.exit IS NOT NULL"
}

# gone_at TAG TOPIC: every message of TOPIC in the initial state that is
# gone at the end was deleted by step TAG, and stays deleted once it
# exited 0.
gone_at() {
	facts "ATTACH '$W/final/mq.db' AS e;
	    INSERT INTO fact (kind, ev, topic, off, what)
	    SELECT 'gone', s.exit, t.name, m.off, 'mq-purge ' || s.tag ||
	        ' exited 0 at event ' || s.exit
	    FROM step s, i.msg m JOIN i.topic t ON t.id = m.topic
	    WHERE s.tag = '$1' AND s.exit IS NOT NULL AND t.name = '$2' AND
	        NOT EXISTS (SELECT 1 FROM e.msg x JOIN e.topic y ON y.id = x.topic
	            WHERE y.name = t.name AND x.off = m.off)"
}

@test "mq-purge: settled, --before-offset, --dead, in chunks, --vacuum: what it deleted stays deleted" {
	local rs
	workload purge
	mq-send -q p p-{1..60}
	recv_ack pg 30 p
	mq-send -q p2 q-{1..40}
	mq-send -q pd d-{1..10}
	mapfile -t rs < <(mq-recv -n 10 -g pgd --format '%r\n' pd)
	mq-ack --dead "${rs[@]:0:5}"
	mq-ack "${rs[@]:5}"
	seq -f c-%g 4500 | MQ_SYNC=normal mq-send -q pc
	record_start
	BGPIDS=()
	in_bg stream pp p PP-{1..20}
	rec u1 mq-purge p </dev/null
	rec u2 mq-purge --before-offset 21 p2 </dev/null
	rec u3 mq-purge --dead -g pgd pd </dev/null
	rec u4 mq-purge -f --before-offset 4001 pc </dev/null
	rec u5 mq-purge --vacuum </dev/null
	wait_bg
	send v1 p after-vacuum
	record_end
	gone_at u1 p
	gone_at u2 p2
	gone_at u3 pd
	gone_at u4 pc
	for i in 1 2 3 4 5; do
		fact_at u3 notdead pd pgd "$i"
	done
	run -0 cat "$W/out/u1" "$W/out/u2" "$W/out/u3" "$W/out/u4"
	assert_output --regexp '^p: deleted 30 messages \([^)]*\)
p2: deleted 20 messages \([^)]*\)
pd: deleted 10 messages \([^)]*\), 5 dead letters
pc: deleted 4000 messages \([^)]*\)$'
	run -0 sqlite3 "$W/expect.db" "SELECT group_concat(n, ' ') FROM
	    (SELECT count(*) AS n FROM fact WHERE kind = 'gone' GROUP BY topic
	    ORDER BY topic)"
	assert_output "30 20 4000 10"	# p p2 pc pd
	check_cuts
}

# admin_steps: mq-topic and mq-replay -g, one after the other.
admin_steps() {
	local rs
	rec t1 mq-topic create nt retention=7d max-size=2k </dev/null &&
	rec t2 mq-topic set m retention=1d dedup-window=1h </dev/null &&
	rec t3 mq-topic group m ng --lease 2m --max-attempts 5 \
	    --backoff '5s 1m' --ordered </dev/null &&
	rec t4 mq-topic group m mg3 --lease 45s </dev/null &&
	rec t5 mq-replay -g mg1 --from-offset 3 m </dev/null &&
	rec t6 mq-replay -g mg3 --latest m </dev/null &&
	rec t7 mq-replay -g mg2 --dead m </dev/null &&
	rec t8 mq-topic delete --force old </dev/null &&
	rec t9 mq-topic group-delete --force m gdel </dev/null &&
	rec t10 mq-recv -n 2 -g mg1 m </dev/null || return
	mapfile -t rs < <(cut -f1 "$W/out/t10")
	settle t11 ack "${rs[@]}"
}

@test "mq-topic and mq-replay -g: changes, moves and redrives stay once they exited 0" {
	local rs pos i
	workload admin
	mq-send -q m m-{1..20}
	recv_ack mg1 10 m
	mapfile -t rs < <(mq-recv -n 4 -g mg2 --format '%r\n' m)
	mq-ack --dead "${rs[@]}"
	mq-topic group m mg3 >/dev/null
	mq-recv -n 2 -g gdel m >/dev/null
	mq-send -q old o-1 o-2 o-3
	mq-recv -g og old >/dev/null
	record_start
	BGPIDS=()
	in_bg stream pm m PM-{1..15}
	admin_steps
	wait_bg
	record_end
	recv_facts
	settle_facts
	fact_at t1 topic nt '' '' '604800000 86400000 2048'
	fact_at t2 topic m '' '' '86400000 3600000 1048576'
	fact_at t3 group m ng '' '120000 5 1 5s 1m'
	fact_at t4 group m mg3 '' \
	    '45000 16 0 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h'
	fact_at t5 pos m mg1 '' 3 t10
	pos=$(sed -n 's|^m/mg3: position 1 -> \([0-9]*\): .*|\1|p' "$W/out/t6")
	[ -n "$pos" ] || fail "mq-replay --latest said: $(cat "$W/out/t6")"
	fact_at t6 pos m mg3 '' "$pos"
	for i in 1 2 3 4; do
		fact_at t7 notdead m mg2 "$i"
	done
	fact_at t8 notopic old
	fact_at t9 nogroup m gdel
	# 3 and 4 were acked in mg1 before it moved back too
	facts "UPDATE fact SET fresh = 0 WHERE kind = 'acked'"
	run -0 cat "$W/out/t7"
	assert_output 'm/mg2: 4 dead letters redriven'
	run -0 sqlite3 "$W/expect.db" "SELECT group_concat(kind || ' ' || off)
	    FROM fact WHERE kind = 'acked'"
	assert_output 'acked 3,acked 4'
	check_cuts
}

# The checks against a real loss: the same kind of work, every program
# run with MQ_SYNC=normal (no sync but by checkpoints, and none comes
# here): a power cut at the end that drops what was not synced must take
# back every offset printed, every settle and every auto-ack, and the
# checks must say so; the state the processes left (kept) has them all.
@test "MQ_SYNC=normal: the checks see the power cut take back what was reported" {
	local rs end
	workload nosync
	mq-send -q n n-{1..10}
	mq-topic group n ng >/dev/null
	record_start
	export MQ_SYNC=normal
	send n1 n N1-1 N1-2 N1-3
	printf 'N2-%s\n' 1 2 3 4 | send_stdin n2 n
	rec r1 mq-recv -n 3 -g ng n </dev/null
	mapfile -t rs < <(cut -f1 "$W/out/r1")
	settle k1 ack "${rs[0]}" "${rs[1]}"
	settle f1 fail "${rs[2]}"
	rec a1 mq-recv -A -n 2 -g na --format '%o\t%b\n' n </dev/null
	record_end
	recv_facts
	settle_facts
	facts "INSERT INTO fact (kind, ev, topic, grp, off, what)
	    SELECT 'acked', ev, 'n', 'na', CAST(c1 AS INTEGER),
	        'mq-recv -A a1 printed it at event ' || ev
	    FROM out WHERE tag = 'a1' AND n > 0"
	facts "UPDATE fact SET fresh = NOT EXISTS (SELECT 1 FROM i.msg m
	    JOIN i.topic t ON t.id = m.topic WHERE t.name = fact.topic AND
	    m.off = fact.off) WHERE kind = 'msg'"
	run -0 "$POWERCUT" stats "$W/log"
	[[ $output != *' sync '[1-9]* ]] || fail "something synced: $output"
	run -0 "$POWERCUT" cuts -k end "$W/log"
	end=${output%%$'\t'*}
	check_cut "$end" end >"$W/problems"
	echo "# nosync: at the end: $(grep -c ', dropped: \[' "$W/problems")" \
	    "problems dropped, $(grep -c ', torn: \[' "$W/problems") torn," \
	    "$(grep -c ', kept: ' "$W/problems") kept" >&3
	run -0 grep -c "^cut $end (end), dropped: \[" "$W/problems"
	assert_output 12	# 7 offsets, 2 acks, 1 fail, 2 auto-acks
	run -0 grep -c "^cut $end (end), dropped: \[msg\] mq-send .* lost$" \
	    "$W/problems"
	assert_output 7
	run -1 grep ', kept: ' "$W/problems"
}
