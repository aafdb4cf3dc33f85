#!/usr/bin/env bats
# 047-powercut.bats: a power cut at any moment keeps every message whose
# offset mq-send printed, in a sound database (SPEC 2, Durability: exit 0
# and a printed offset mean committed and synced).
#
# This is a property test: it does not care how mq gets its messages to
# disk (a sync in every COMMIT, or a sync after the lock by one process for
# several), only that nothing printed can be lost.  The harness is in
# t/powercut/: pcshim.c, an LD_PRELOAD shim that logs every write (offset
# and data), truncate and sync of the database files, and every write to
# stdout, in one global order; powercut.c, which rebuilds from that log the
# files a power cut at a given event could leave.  See their top comments.
#
# setup_file makes a database with topic t, fills the WAL near its
# autocheckpoint (so one happens while recording: database writes, syncs
# and a WAL restart in the log), copies mq.db and mq.db-wal as the initial
# state, then runs PRODUCERS producers under the shim, MSGS messages each,
# one message a commit: one-shot `mq-send t BODY` loops, long-lived
# `mq-send t` fed line by line through a coprocess that waits for each
# offset, and long-lived ones fed through a fifo at a slow pace.  The tests
# then rebuild the files at every sync (the cut just before it: the most
# printed for that durable state) and at the end, in three modes (unsynced
# writes dropped, kept, torn at random from MQ_TEST_SEED), open each with
# sqlite3 and check integrity_check, every offset printed before the cut
# present with its producer's body, no other row, offsets dense.
#
# MQ_POWERCUT_SYNC=normal runs the recorded producers with MQ_SYNC=normal
# (no sync at commit): the cut test must then fail, naming lost offsets.

load test_helper
# shellcheck disable=SC2034 # read by setup() in test_helper.bash
SQLITE_ONLY="power cuts replayed on the database files"

PRODUCERS=8	# one-shot, coprocess, fifo, one-shot, coprocess, fifo ...
MSGS=24		# messages per producer
PAD_FRAMES=750	# WAL frames before recording (autocheckpoint at 1000)
MAX_CUTS=400	# more cut points than this are sampled evenly

setup_file() {
	[ -z "$PG" ] || return 0
	local src=$BATS_TEST_DIRNAME/powercut cc=${CC:-cc} i pids=()

	export PC=$BATS_FILE_TMPDIR
	# make builds them (make tools); run by hand, the test does
	if [ -e "${MQ_TOOLS:-}/pcshim.so" ] && [ -e "$MQ_TOOLS/powercut" ]; then
		cp "$MQ_TOOLS/pcshim.so" "$MQ_TOOLS/powercut" "$PC/"
	else
		"$cc" -O2 -Wall -Wextra -shared -fPIC -o "$PC/pcshim.so" \
		    "$src/pcshim.c" -ldl
		"$cc" -O2 -Wall -Wextra -o "$PC/powercut" "$src/powercut.c"
	fi
	export POWERCUT=$PC/powercut

	# the initial state: not recorded
	mkdir "$PC/run" "$PC/init"
	export MQ_DB=$PC/run/mq.db
	unset MQ_SYNC MQ_BUSY_TIMEOUT
	mq-topic create t >/dev/null
	pad "$PC/run/mq.db-wal" "$PAD_FRAMES"
	cp "$MQ_DB" "$MQ_DB-wal" "$PC/init/"
	# counted on a copy: sqlite3 would checkpoint the original on close
	mkdir "$PC/probe"
	cp "$PC/init/"* "$PC/probe/"
	PAD_MSGS=$(sqlite3 "$PC/probe/mq.db" \
	    "SELECT count(*) FROM msg m JOIN topic t ON t.id = m.topic
	    WHERE t.name = 'pad'") || return 1
	echo "$PAD_MSGS" >"$PC/pad.count"

	# the recording
	export POWERCUT_LOG=$PC/log POWERCUT_PREFIX=$MQ_DB
	export SHIM=$PC/pcshim.so
	# an ASan build (make test-asan) refuses to run unless its runtime
	# comes first in the library list; the shim comes first
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
	if [ -n "${MQ_POWERCUT_SYNC:-}" ]; then
		export MQ_SYNC=$MQ_POWERCUT_SYNC
	fi
	: >"$PC/sent"
	for i in $(seq "$PRODUCERS"); do
		case $((i % 3)) in
		1) oneshot "$i" ;;
		2) coprocess "$i" ;;
		0) fifo "$i" ;;
		esac 3>&- &
		pids+=("$!")
		echo "$!" >>"$PC/pids"
	done
	for i in "${pids[@]}"; do
		wait_for 300 gone "$i" || {
			echo "producer pid $i still running after 300s" >&2
			return 1
		}
	done
	: >"$PC/pids"	# all gone: a pid reaped may be someone else's now
	unset MQ_SYNC POWERCUT_LOG POWERCUT_PREFIX

	# what was printed when: EVENT PID TAG OFFSET
	"$POWERCUT" outputs "$PC/log" >"$PC/outputs"
	# offset, body, producer, the event that printed it
	sqlite3 "$PC/expect.db" \
	    "CREATE TABLE sent (off INTEGER, body TEXT, who TEXT);
	    CREATE TABLE printed (ev INTEGER, pid INTEGER, tag TEXT, off INTEGER);" \
	    ".mode tabs" ".import $PC/sent sent" ".import $PC/outputs printed" \
	    "CREATE TABLE expect (off INTEGER PRIMARY KEY, body TEXT NOT NULL,
	        who TEXT NOT NULL, ev INTEGER NOT NULL);
	    INSERT OR IGNORE INTO expect SELECT s.off, s.body, s.who, p.ev
	        FROM sent s JOIN printed p ON p.off = s.off AND p.tag = s.who;"
}

teardown_file() {
	local p

	[ -e "$BATS_FILE_TMPDIR/pids" ] || return 0
	# only those not reaped yet: a reaped pid may be someone else's now
	while read -r p; do
		is_child "$p" || continue
		{ kill -9 "$p"; wait "$p"; } 2>/dev/null || true
	done <"$BATS_FILE_TMPDIR/pids"
}

# pad WAL FRAMES: sends to topic pad, one message a commit, until the WAL
# holds FRAMES frames (of a 4096-byte page: 4120 bytes each).
pad() {
	local n=0 off pid in out
	coproc PAD { MQ_SYNC=normal exec mq-send pad; }
	pid=$PAD_PID in=${PAD[1]} out=${PAD[0]}
	while [ "$(wc -c <"$1")" -lt $(($2 * 4120 + 32)) ]; do
		n=$((n + 1))
		echo "pad$n" >&"$in"
		read -r -t 60 off <&"$out" || {
			echo "mq-send pad: no offset for pad$n" >&2
			return 1
		}
	done
	exec {in}>&-
	wait "$pid"
}

# traced TAG CMD...: CMD under the shim; stderr to $PC/err.
traced() {
	POWERCUT_TAG=$1 LD_PRELOAD=$SHIM "${@:2}" 2>>"$PC/err"
}

# sent K I OFF: producer K sent body pK-I and was told offset OFF.
sent() {
	printf '%s\tp%s-%s\tp%s\n' "$3" "$1" "$2" "$1" >>"$PC/sent"
}

# oneshot K: producer K, one mq-send per message.
oneshot() {
	local i off st
	for i in $(seq "$MSGS"); do
		st=0
		off=$(traced "p$1" mq-send t "p$1-$i") || st=$?
		if [ "$st" = 0 ]; then
			sent "$1" "$i" "$off"
		else
			echo "p$1-$i: mq-send exit $st" >>"$PC/fail"
		fi
	done
}

# coprocess K: producer K, one long-lived mq-send, each line written after
# the offset of the one before came back.
coprocess() {
	local i off pid in out
	coproc SEND { traced "p$1" exec mq-send t; }
	pid=$SEND_PID in=${SEND[1]} out=${SEND[0]}
	echo "$pid" >>"$PC/pids"
	for i in $(seq "$MSGS"); do
		echo "p$1-$i" >&"$in"
		if read -r -t 60 off <&"$out"; then
			sent "$1" "$i" "$off"
		else
			echo "p$1-$i: no offset from mq-send" >>"$PC/fail"
			break
		fi
		sleep "0.0$((RANDOM % 4))"
	done
	exec {in}>&-
	wait "$pid" || echo "p$1: mq-send exit $?" >>"$PC/fail"
}

# fifo K: producer K, one long-lived mq-send reading a fifo written a line
# every 10-40ms without waiting for offsets.
fifo() {
	local i=0 off pid fd
	mkfifo "$PC/in.$1"
	POWERCUT_TAG=p$1 LD_PRELOAD=$SHIM mq-send t <"$PC/in.$1" \
	    >"$PC/out.$1" 2>>"$PC/err" &
	pid=$!
	echo "$pid" >>"$PC/pids"
	exec {fd}>"$PC/in.$1"
	for i in $(seq "$MSGS"); do
		echo "p$1-$i" >&"$fd"
		sleep "0.0$((RANDOM % 4 + 1))"
	done
	exec {fd}>&-
	wait "$pid" || echo "p$1: mq-send exit $?" >>"$PC/fail"
	i=0
	while read -r off; do
		i=$((i + 1))
		sent "$1" "$i" "$off"
	done <"$PC/out.$1"
}

@test "the shim saw the WAL written and synced, and every offset printed" {
	run -0 "$POWERCUT" stats "$PC/log"
	echo "# log: $(echo "$output" | tr '\n' ';')" >&3
	[ ! -e "$PC/fail" ] || fail "producers failed: $(head -5 "$PC/fail")"
	[ ! -s "$PC/err" ] || fail "producers said: $(head -5 "$PC/err")"
	want=$((PRODUCERS * MSGS))
	assert_equal "$(wc -l <"$PC/sent")" "$want"
	# every offset told to a producer, once, is an output event of the log
	assert_equal "$(sqlite3 "$PC/expect.db" \
	    "SELECT count(*), count(DISTINCT off) FROM sent")" "$want|$want"
	assert_equal "$(sqlite3 "$PC/expect.db" \
	    "SELECT count(*), count(DISTINCT off) FROM printed")" "$want|$want"
	assert_equal "$(sqlite3 "$PC/expect.db" "SELECT count(*) FROM expect")" \
	    "$want"
	# the WAL was written and synced through the shim
	wal=$(echo "$output" | grep '^mq.db-wal ')
	[[ $wal =~ \ write\ [1-9] ]] || fail "no write of the WAL in the log: $wal"
	if [ -z "${MQ_POWERCUT_SYNC:-}" ]; then
		[[ $wal =~ \ sync\ [1-9] ]] || fail "no sync of the WAL in the log: $wal"
	fi
	if [[ $(echo "$output" | grep '^mq.db ') =~ \ write\ ([1-9][0-9]*) ]]; then
		echo "# checkpoints wrote ${BASH_REMATCH[1]} pages while recording" >&3
	else
		echo "# no checkpoint while recording" >&3
	fi
}

# check_cut [-n] CUT KIND: rebuilds the files a power cut at CUT leaves, in
# each mode, and prints one line per problem found (-n: as if nothing had
# been synced).
check_cut() {
	local out=$BATS_TEST_TMPDIR/cut m opts=()
	if [ "$1" = -n ]; then
		opts=(-n)
		shift
	fi
	rm -rf "$out"
	{ "$POWERCUT" build "${opts[@]}" -s "$SEED" "$PC/log" "$PC/init" "$1" \
	    dropped,kept,torn "$out" 2>&1 || echo "powercut build failed"
	} | sed "s/^/cut $1 ($2): /"
	for m in dropped kept torn; do
		sqlite3 -bail "$out/$m/mq.db" 2>&1 <<-SQL | sed "s/^/cut $1 ($2), $m: /"
		.output /dev/null
		.dbconfig no_ckpt_on_close on
		.output
		ATTACH '$PC/expect.db' AS x;
		SELECT 'integrity_check: ' || group_concat(integrity_check, '; ')
		    FROM pragma_integrity_check
		    HAVING group_concat(integrity_check, '; ') <> 'ok';
		SELECT 'no topic t' WHERE NOT EXISTS
		    (SELECT 1 FROM topic WHERE name = 't');
		SELECT 'offset ' || e.off || ' (body ' || e.body || ', printed to '
		    || e.who || ' at event ' || e.ev || '): ' ||
		    CASE WHEN m.off IS NULL THEN 'lost'
		    ELSE 'stored with body ' || quote(CAST(m.body AS TEXT)) END
		    FROM x.expect e LEFT JOIN msg m ON m.off = e.off AND
		        m.topic = (SELECT id FROM topic WHERE name = 't')
		    WHERE e.ev < $1 AND
		        (m.off IS NULL OR CAST(m.body AS TEXT) IS NOT e.body);
		SELECT 'offset ' || m.off || ' stored with body ' ||
		    quote(CAST(m.body AS TEXT)) || ': ' ||
		    CASE WHEN e.off IS NULL THEN 'no producer was told it'
		    ELSE 'its producer sent ' || e.body END
		    FROM msg m LEFT JOIN x.expect e ON e.off = m.off
		    WHERE m.topic = (SELECT id FROM topic WHERE name = 't') AND
		        (e.off IS NULL OR CAST(m.body AS TEXT) IS NOT e.body);
		SELECT 'offsets not dense: ' || count(*) || ' messages from ' ||
		    min(off) || ' to ' || max(off) FROM msg
		    WHERE topic = (SELECT id FROM topic WHERE name = 't')
		    HAVING count(*) > 0 AND (min(off) <> 1 OR max(off) <> count(*));
		SELECT 'topic pad: ' || count(*) || ' messages, not $PAD_MSGS'
		    FROM msg WHERE topic = (SELECT id FROM topic WHERE name = 'pad')
		    HAVING count(*) <> $PAD_MSGS;
		SQL
	done
}

@test "a power cut at any sync loses no printed offset: dropped, kept, torn" {
	SEED=${MQ_TEST_SEED:-$RANDOM}
	PAD_MSGS=$(cat "$PC/pad.count")
	"$POWERCUT" cuts -k before-sync,end "$PC/log" >cuts.txt
	total=$(wc -l <cuts.txt)
	if [ "$total" -gt "$MAX_CUTS" ]; then
		# evenly spread, the end always
		awk -v n="$total" -v k="$MAX_CUTS" \
		    'int((NR - 1) * k / n) != int(NR * k / n) || NR == n' \
		    cuts.txt >cuts.sample
		mv cuts.sample cuts.txt
	fi
	: >problems
	checked=0
	while read -r cut kind; do
		check_cut "$cut" "$kind" >>problems
		checked=$((checked + 1))
	done <cuts.txt
	echo "# checked $checked of $total cut points x 3 modes" \
	    "(dropped, kept, torn; seed $SEED): $(wc -l <problems) problems" >&3
	[ "$checked" -gt 0 ] || fail "no cut point to check"
	if [ -s problems ]; then
		fail "$(wc -l <problems) problems (MQ_TEST_SEED=$SEED; rebuild a" \
		    "cut with: $POWERCUT build -v -s $SEED $PC/log $PC/init CUT" \
		    "MODE DIR), such as:
$(head -20 problems)"
	fi
}

# The harness's own test: the same log with its syncs taken away (as if
# mq never synced) must lose, at the end, every offset printed in the
# dropped mode and none in the kept one.  A check that cannot fail here
# could not see a lost message either.
@test "the checks fail when nothing was synced: every printed offset lost" {
	SEED=${MQ_TEST_SEED:-$RANDOM}
	PAD_MSGS=$(cat "$PC/pad.count")
	run -0 "$POWERCUT" cuts -k end "$PC/log"
	end=${output%%$'\t'*}
	check_cut -n "$end" end >problems
	want=$((PRODUCERS * MSGS))
	run -0 grep -c "^cut $end (end), dropped: offset [0-9]* (body p[0-9]*-[0-9]*, printed to p[0-9]* at event [0-9]*): lost$" problems
	assert_output "$want"
	run -0 grep -c ", dropped: " problems
	assert_output "$want"
	# nothing from the kept mode (it is the end state), nor outside a mode;
	# what the torn mode finds is left to chance
	run -1 grep -v -e ", dropped: " -e ", torn: " problems
}
