#!/usr/bin/env bats
# 049-faults.bats: a disk that fills up, fails or cuts a write short at any
# moment of a program's work ends it with exit 74 (or 75, busy) and one
# line on stderr, or it gets through with exit 0; either way the database
# stays sound and in WAL mode, holds everything an exit 0 promised, and
# all or nothing of each batch (SPEC 2, Durability; SPEC 4).
#
# The injector is t/faults/faultshim.c, an LD_PRELOAD shim (see its top
# comment): it counts the opens, writes, syncs and truncates a process
# makes on the database's files (DB, -wal, -shm, -journal, -mq) and makes
# the Nth of them fail.  For each workload the test runs it twice without
# a fault (N=0, checked like every case) to count its calls C, then once
# for each N in 1..C and each way to fail: ENOSPC and EIO, once (a retry
# would succeed) or sticky (every call from N on fails: a full disk stays
# full), and, where call N is a write, a short write (half the bytes; SQLite
# writes the rest; sticky: ENOSPC after it).  MQ_FAULT_KINDS="ENOSPC EIO
# EDQUOT short" chooses others.  Each case starts in a
# directory of its own from a copy of a database made without the shim
# (mq.db and mq.db-wal; the -shm and -mq are made anew): cases are
# independent.
#
# Long runs of one call on one file (the -shm grown page by page, a
# checkpoint's page writes, VACUUM's frames) are sampled: of a run of more
# than 3 calls, its first two, its last and one other, drawn with a seed
# (printed; MQ_TEST_SEED=N replays it).  MQ_FAULT_ALL=1 sweeps every N.
#
# After each case, without the shim, check_case checks that:
# - the exit status is 0, 74 or 75 (never a signal, never another); exit
#   0 leaves stderr empty, any other exactly one line that starts "mq-";
# - sqlite3 finds the database sound (integrity_check), in WAL mode, an mq
#   database, its topics' message and byte counts true to what is stored
#   (only mq-send failing to create a database may leave none, or an
#   empty file);
# - the workload's promises hold (check_WORKLOAD): every offset printed
#   reads back (mq-replay) with its body; a batch (argv, or three lines on
#   one stdin) is stored whole or not at all, and what was there before is
#   untouched; an ack that exited 0 stays acked, every message not acked is
#   received again once its lease ran out, nothing unsettled is stuck (the
#   group's lag is what it can receive); a purge or a topic change is done
#   whole or not at all, and done when it exited 0;
# - the database still works: a clean `mq-send t probe` exits 0 with the
#   next offset (no gap, none reused), and leaves it sound and in WAL mode.
# A program that failed after its change was committed (a sync that
# failed after the COMMIT) is not wrong: the change is whole, and exit 74
# promised nothing.  Such cases are counted apart.
#
# Cases run in two phases, MQ_FAULT_JOBS (default 2) at a time: every
# case's program; then, once the leases of the receiving workloads ran
# out, every case's checks.  Each failure names the workload, N, the call
# that failed (as the shim logged it: function, file, flags or
# bytes@offset), how, and what was wrong.  Rerun one case by hand with
#   MQ_FAULT_PREFIX=$MQ_DB MQ_FAULT_AT=N MQ_FAULT_ERRNO=KIND \
#   MQ_FAULT_STICKY=0|1 MQ_FAULT_LOG=log LD_PRELOAD=faultshim.so mq-...

load test_helper
# shellcheck disable=SC2034 # read by setup() in test_helper.bash
SQLITE_ONLY="faults injected into the calls on the database files"

JOBS=${MQ_FAULT_JOBS:-2}
KINDS=${MQ_FAULT_KINDS:-ENOSPC EIO short}	# the shim has EDQUOT too
LEASE=2		# seconds: the lease the receiving workloads take

setup_file() {
	[ -z "$PG" ] || return 0
	local t

	export FT=$BATS_FILE_TMPDIR
	# make builds it (make tools); run by hand, the test does
	SHIM=$(shim faultshim "$FT")
	export SHIM
	# an ASan build refuses to run unless its runtime comes first in the
	# library list; the shim comes first
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
	unset MQ_SYNC MQ_BUSY_TIMEOUT
	for t in new t1 q2 purge; do
		template "$t"
	done
}

teardown() {
	kill_bg
}

# --- the starting databases ----------------------------------------

# template NAME: the database cases of NAME start from, made by make_NAME
# without the shim, copied to $FT/tpl/NAME (mq.db and mq.db-wal only).
template() {
	local prep=$FT/prep/$1

	mkdir -p "$prep" "$FT/tpl/$1"
	(cd "$prep" && MQ_DB=$prep/mq.db "make_$1") ||
	    { echo "cannot make template $1" >&2; return 1; }
	if [ "$1" != new ]; then
		cp "$prep/mq.db" "$prep/mq.db-wal" "$FT/tpl/$1/"
	fi
}

make_new() {
	:	# no database at all: the program creates it
}

make_t1() {
	mq-send -q t old
}

make_q2() {
	mq-send -q t m1 m2
}

make_purge() {
	mq-send -q t m1 m2 m3 m4 && recv_ack g 3
}

# --- the workloads -------------------------------------------------

# wl_template W: TPL, the database workload W starts from.
wl_template() {
	case $1 in
	send-new) TPL=new ;;
	send-argv | send-stdin | topic-*) TPL=t1 ;;
	recv | ack | exec) TPL=q2 ;;
	purge | vacuum) TPL=purge ;;
	*) echo "no workload $1" >&2; return 1 ;;
	esac
}

# wl_setup W: what a case of W does first, without the shim.
wl_setup() {
	case $1 in
	ack)
		mq-recv -g g --lease "${LEASE}s" --format '%r\n' t >receipt ;;
	esac
}

# faulted CMD...: CMD under the shim, with this case's fault (N, KIND,
# STICKY); the shim's log of calls in faults.log.
faulted() {
	MQ_FAULT_PREFIX=$MQ_DB MQ_FAULT_AT=$N MQ_FAULT_ERRNO=$KIND \
	    MQ_FAULT_STICKY=$STICKY MQ_FAULT_LOG=$PWD/faults.log \
	    LD_PRELOAD=$SHIM "$@"
}

# wl_run W: workload W's program, under the shim.
wl_run() {
	local r

	case $1 in
	send-new | send-argv) faulted mq-send t a b c ;;
	send-stdin) faulted mq-send t <<<$'x\ny\nz' ;;
	recv) faulted mq-recv -g g --lease "${LEASE}s" t ;;
	ack) read -r r <receipt; faulted mq-ack "$r" ;;
	exec) faulted mq-recv -n 1 -g g --lease "${LEASE}s" t -- true ;;
	purge) faulted mq-purge t ;;
	vacuum) faulted mq-purge --vacuum t ;;
	topic-create) faulted mq-topic create t2 ;;
	topic-set) faulted mq-topic set t retention=1h dedup-window=5m \
	    max-size=1000 ;;
	topic-group) faulted mq-topic group t g2 --lease 5s --max-attempts 3 ;;
	*) echo "no workload $1" >&2; return 1 ;;
	esac
}

# wl_after W STATUS: right after the program, without the shim: the
# receipt mq-recv printed is acked while its lease holds.
wl_after() {
	local st=0 r

	case $1 in
	recv)
		[ "$2" = 0 ] || return 0
		IFS=$'\t' read -r r _ <out
		mq-ack "$r" >ack.out 2>&1 || st=$?
		echo "$st" >ack.status
		;;
	esac
}

# --- running and checking a case -----------------------------------

# slurp VAR FILE: the whole of FILE (no last newline) in VAR; empty if
# there is no FILE.
slurp() {
	local -n s_=$1

	s_=
	[ -e "$2" ] || return 0
	IFS= read -r -d '' s_ <"$2" || true
	s_=${s_%$'\n'}
}

# nlines TEXT: NL, the lines of TEXT (0 for none).
nlines() {
	local nl=${1//[!$'\n']/}

	NL=0
	[ -z "$1" ] || NL=$((${#nl} + 1))
}

# run_case W N KIND STICKY DIR: phase 1 of a case: its program, in DIR
# (which must not exist yet).
run_case() {
	local w=$1 dir=$5 st=0

	wl_template "$w" || return 1
	cp -R "$FT/tpl/$TPL" "$dir" && cd "$dir" || return 1
	export MQ_DB=$dir/mq.db N=$2 KIND=$3 STICKY=$4
	wl_setup "$w" >setup.out 2>&1 </dev/null || echo "$?" >setup.fail
	wl_run "$w" >out 2>err </dev/null || st=$?
	echo "$st" >status
	wl_after "$w" "$st" </dev/null
}

# check_case W N KIND STICKY DIR: phase 2 of a case: prints one line per
# problem, each naming the workload, N, the call that failed and how.
check_case() {
	local w=$1 dir=$5 pre line fn file what
	local log=()	# the shim's log, for check_body

	cd "$dir" || return 1
	export MQ_DB=$dir/mq.db N=$2 KIND=$3 STICKY=$4
	pre="$w N=$N"
	[ ! -e faults.log ] || mapfile -t log <faults.log
	if [ "$N" != 0 ]; then
		if [ "${#log[@]}" -ge "$N" ]; then
			IFS=$'\t' read -r _ fn file what _ <<<"${log[N - 1]}"
			pre+=" $fn $file $what"
		else
			pre+=" (call not reached)"
		fi
		pre+=" $KIND"
		[ "$STICKY" != 1 ] || pre+=" sticky"
	fi
	check_body "$w" >problems 2>&1
	while IFS= read -r line; do
		printf '%s: %s\n' "$pre" "$line"
	done <problems
	# failed, though what it was to do was done (for the summary)
	[ ! -e applied ] || echo "$pre" >>"$dir/../applied"
}

# check_body W: the checks of a case, in its directory.
check_body() {
	local w=$1 st err NL

	if [ -e setup.fail ]; then
		slurp err setup.out
		echo "setup failed (exit $(<setup.fail)): $err"
		return
	fi
	read -r st <status
	slurp err err
	case $st in
	0 | 74 | 75) ;;
	*)
		if [ "$st" -gt 128 ]; then
			echo "killed by signal $((st - 128)) (exit $st)"
		else
			echo "exit $st, want 0, 74 or 75; stderr: ${err:0:300}"
		fi
		;;
	esac
	nlines "$err"
	if [ "$st" = 0 ]; then
		[ "$NL" = 0 ] || echo "exit 0 with stderr: $err"
	elif [ "$NL" != 1 ] || [[ $err != mq-* ]]; then
		echo "exit $st with $NL lines on stderr, want one line from mq-:" \
		    "${err//$'\n'/\\n}"
	fi

	[ "$st" != 0 ] || synced_wal
	db_state "after the fault"
	if [ "$DB_TABLES" -le 0 ] && { [ "$w" != send-new ] || [ "$st" = 0 ]; }
	then
		if [ "$DB_TABLES" = 0 ]; then
			echo "exit $st left an empty database"
		else
			echo "exit $st left no database"
		fi
	fi
	"check_${w//-/_}" "$st"
	probe
}

# synced_wal: for a program that exited 0: a sync of the WAL that failed
# was followed by one that did not (else what it promised may not be on
# disk).  From the shim's log, in log (check_case's).
synced_wal() {
	local line n fn file failed=

	for line in "${log[@]}"; do
		IFS=$'\t' read -r n fn file _ <<<"$line"
		case $fn in fsync | fdatasync) ;; *) continue ;; esac
		[[ $file == *-wal ]] || continue
		case $line in
		*$'\tFAULT '* | *$'\terror '*) failed=$n ;;
		*) failed= ;;
		esac
	done
	[ -z "$failed" ] || echo "exit 0, but the sync of the WAL at call" \
	    "$failed failed and none after it succeeded"
}

# db_state WHEN: one look with sqlite3: DB_TABLES, the tables of the
# database (-1: there is no file), DB_LAST, the last offset of topic t (0:
# none); prints the problems, each after WHEN: the database is not sound,
# not in WAL mode, not an mq database, or its topics' counts are not true
# (an empty file has none of these: it is no database yet).
db_state() {
	local out line probs=()

	DB_TABLES=-1 DB_LAST=0
	[ -e "$MQ_DB" ] || return 0
	out=$(sqlite3 -batch "$MQ_DB" 2>&1 <<-'SQL'
	SELECT 'tables ' || count(*) FROM sqlite_master;
	SELECT 'problem integrity_check: ' ||
	    group_concat(integrity_check, '; ') FROM pragma_integrity_check
	    HAVING group_concat(integrity_check, '; ') <> 'ok';
	SELECT 'problem journal_mode ' || journal_mode || ', not wal'
	    FROM pragma_journal_mode WHERE journal_mode <> 'wal';
	SELECT 'problem application_id ' || application_id || ', not mq''s'
	    FROM pragma_application_id WHERE application_id <> 1836130336;
	SELECT 'last ' || coalesce(max(m.off), 0)
	    FROM msg m JOIN topic t ON t.id = m.topic WHERE t.name = 't';
	SELECT 'problem topic ' || t.name || ' counts ' || t.msgs ||
	    ' messages of ' || t.bytes || ' bytes; stored: ' || count(m.off) ||
	    ' of ' || total(length(m.body))
	    FROM topic t LEFT JOIN msg m ON m.topic = t.id GROUP BY t.id
	    HAVING t.msgs <> count(m.off) OR t.bytes <> total(length(m.body));
	SQL
	)
	while IFS= read -r line; do
		case $line in
		"tables "*) DB_TABLES=${line#tables } ;;
		"last "*) DB_LAST=${line#last } ;;
		"problem "*) probs+=("${line#problem }") ;;
		*) probs+=("sqlite3: $line") ;;
		esac
	done <<<"$out"
	if ! [[ $DB_TABLES =~ ^[0-9]+$ ]]; then
		echo "$1: sqlite3 cannot read the database: ${out//$'\n'/\\n}"
		DB_TABLES=-1
		return
	fi
	[ "$DB_TABLES" != 0 ] || return 0
	for line in "${probs[@]}"; do
		echo "$1: $line"
	done
}

# probe: the database still takes a message, at the next offset.
probe() {
	local st=0 off err last=$DB_LAST

	off=$(mq-send t probe 2>probe.err) || st=$?
	if [ "$st" != 0 ]; then
		slurp err probe.err
		echo "then mq-send t probe: exit $st: $err"
		return
	fi
	[ "$off" = $((last + 1)) ] ||
	    echo "then mq-send t probe: offset $off after $last"
	db_state "after a probe"
}

# replay: LOG, the messages of topic t, "OFFSET BODY" a line; returns
# mq-replay's status (its stderr in replay.err).
replay() {
	LOG=$(mq-replay --format '%o %b\n' t 2>replay.err)
}

# replay_ok: replay, where topic t must exist; else says so and fails.
replay_ok() {
	local st=0 err

	replay || st=$?
	[ "$st" = 0 ] && return 0
	slurp err replay.err
	echo "mq-replay t: exit $st: $err"
	return 1
}

# receivable: RECV, the messages group g receives now ("OFFSET BODY" a
# line); says so if the group's lag is more than those (a message
# unsettled but not receivable is stuck) or it has dead letters.
receivable() {
	local st=0 lag err NL re='"lag":([0-9]+),.*"dead":([0-9]+),'

	RECV=$(mq-recv -g g -n 0 --format '%o %b\n' t 2>recv.err) || st=$?
	if [ "$st" != 0 ] && [ "$st" != 1 ]; then
		slurp err recv.err
		echo "mq-recv -g g: exit $st: $err"
		return
	fi
	lag=$(mq-lag --json t g 2>&1)
	nlines "$RECV"
	if ! [[ $lag =~ $re ]]; then
		echo "mq-lag --json t g: $lag"
	elif [ "${BASH_REMATCH[1]} ${BASH_REMATCH[2]}" != "$NL 0" ]; then
		echo "group g: lag ${BASH_REMATCH[1]}, dead ${BASH_REMATCH[2]}" \
		    "after receiving '${RECV//$'\n'/, }' (unsettled, but stuck)"
	fi
}

# check_send STATUS BEFORE BODY...: a batch of BODYs sent after the
# messages BEFORE (replay lines; empty: none, and perhaps no database).
check_send() {
	local st=$1 before=$2 base want="" offs="" b new stored=0 printed
	shift 2

	base=${before##*$'\n'}
	base=${base%% *}
	base=${base:-0}
	for b; do
		base=$((base + 1))
		want+="$base $b"$'\n'
		offs+="$base"$'\n'
	done
	want=${want%$'\n'} offs=${offs%$'\n'}
	if [ -z "$before" ]; then
		replay || LOG=""	# no database or no topic: nothing stored
	else
		replay_ok || return 0
	fi
	if [ -n "$before" ] && [[ $LOG != "$before" && $LOG != "$before"$'\n'* ]]
	then
		echo "what was stored before changed: '${LOG//$'\n'/, }'"
		return
	fi
	new=${LOG#"$before"}
	new=${new#$'\n'}
	if [ "$new" = "$want" ]; then
		stored=1
	elif [ -n "$new" ]; then
		echo "batch stored in part or changed: '${new//$'\n'/, }'," \
		    "want '${want//$'\n'/, }' or nothing"
	fi
	if [ "$st" = 0 ]; then
		[ "$stored" = 1 ] ||
		    echo "exit 0 but the batch is not stored: '${new//$'\n'/, }'"
	elif [ "$stored" = 1 ]; then
		: >applied
	fi
	slurp printed out
	if [ "$st" = 0 ] && [ "$printed" != "$offs" ]; then
		echo "exit 0 printed '${printed//$'\n'/ }', want '${offs//$'\n'/ }'"
	elif [ -n "$printed" ] && [ "$stored" = 0 ]; then
		echo "printed '${printed//$'\n'/ }' but the batch is not stored"
	fi
}

check_send_new() {
	check_send "$1" "" a b c
}

check_send_argv() {
	check_send "$1" "1 old" a b c
}

check_send_stdin() {
	check_send "$1" "1 old" x y z
}

# check_recv STATUS: exit 0 printed m1 with a receipt that acks; after the
# lease, m1 comes again unless it was acked so.
check_recv() {
	local out ack re=$'^t:g:[^[:space:]]+\tm1$'

	slurp out out
	if [ "$1" = 0 ]; then
		[[ $out =~ $re ]] ||
		    echo "exit 0 printed '$out', want RECEIPT<TAB>m1"
		slurp ack ack.out
		[ "$(<ack.status)" = 0 ] ||
		    echo "mq-ack of its receipt: exit $(<ack.status): $ack"
	fi
	receivable
	if [ "$1" = 0 ]; then
		[ "$RECV" = "2 m2" ] ||
		    echo "received '${RECV//$'\n'/, }' after the ack, want '2 m2'"
	else
		[ "$RECV" = $'1 m1\n2 m2' ] ||
		    echo "received '${RECV//$'\n'/, }' after the lease, want" \
		        "'1 m1, 2 m2'"
	fi
}

# settled STATUS: m1 was settled by a program that exited STATUS: with 0
# it is never received again; else it is received again, or (the program
# failed after its ack was committed) settled.
settled() {
	local out

	slurp out out
	[ -z "$out" ] || echo "printed '$out'"
	receivable
	if [ "$1" = 0 ]; then
		[ "$RECV" = "2 m2" ] ||
		    echo "received '${RECV//$'\n'/, }' after exit 0, want '2 m2'"
	elif [ "$RECV" = "2 m2" ]; then
		: >applied
	else
		[ "$RECV" = $'1 m1\n2 m2' ] ||
		    echo "received '${RECV//$'\n'/, }' after the lease, want" \
		        "'1 m1, 2 m2' (or '2 m2' if the ack was committed)"
	fi
}

check_ack() {
	settled "$1"
}

check_exec() {
	settled "$1"
}

# check_purge STATUS: 1-3 (settled by g) are deleted whole or not at all,
# and with exit 0 deleted and said so; 4 stays, for g.
check_purge() {
	local out

	replay_ok || return 0
	if [ "$1" = 0 ]; then
		[ "$LOG" = "4 m4" ] ||
		    echo "exit 0 left '${LOG//$'\n'/, }', want '4 m4'"
		slurp out out
		[[ $out == "t: deleted 3 messages"* ]] ||
		    echo "exit 0 printed '$out', want 't: deleted 3 messages...'"
	elif [ "$LOG" = "4 m4" ]; then
		: >applied
	else
		[ "$LOG" = $'1 m1\n2 m2\n3 m3\n4 m4' ] ||
		    echo "left '${LOG//$'\n'/, }', want '4 m4' or all four"
	fi
	receivable
	[ "$RECV" = "4 m4" ] ||
	    echo "group g received '${RECV//$'\n'/, }', want '4 m4'"
}

check_vacuum() {
	check_purge "$1"
}

# show_t: SHOW, topic t as mq-topic show prints it, on one line, without
# its time of creation.
show_t() {
	local out line

	out=$(mq-topic show t 2>&1)
	SHOW=
	while IFS= read -r line; do
		[[ $line == "created "* ]] || SHOW+="$line;"
	done <<<"$out"
}

check_topic_create() {
	local list

	replay_ok || return 0
	[ "$LOG" = "1 old" ] || echo "topic t holds '${LOG//$'\n'/, }'"
	list=$(mq-topic list 2>&1)
	case $list in
	$'t\nt2') [ "$1" = 0 ] || : >applied ;;
	t) [ "$1" != 0 ] || echo "exit 0 but mq-topic list says only t" ;;
	*) echo "mq-topic list says '${list//$'\n'/ }'" ;;
	esac
}

check_topic_set() {
	local old new

	old="topic t;messages 1;bytes 3;next-offset 2;retention none;"
	old+="dedup-window 1d;max-size 1048576;"
	new="topic t;messages 1;bytes 3;next-offset 2;retention 1h;"
	new+="dedup-window 5m;max-size 1000;"
	show_t
	case $SHOW in
	"$new") [ "$1" = 0 ] || : >applied ;;
	"$old") [ "$1" != 0 ] || echo "exit 0 but topic t is '$old'" ;;
	*) echo "topic t is '$SHOW', want '$new' or '$old'" ;;
	esac
}

check_topic_group() {
	local g2

	g2="group g2: position 1, lag 1, in-flight 0, retrying 0, dead 0,"
	g2+=" cancelled 0, lapsed 0, duplicates 0, consumers 0; lease 5s, max-attempts 3,"
	g2+=" unordered, backoff"
	show_t
	case $SHOW in
	*"$g2"*) [ "$1" = 0 ] || : >applied ;;
	*"group g2"*) echo "topic t is '$SHOW': g2 made in part" ;;
	*) [ "$1" != 0 ] || echo "exit 0 but topic t has no g2: '$SHOW'" ;;
	esac
}

# --- sweeping ------------------------------------------------------

# worker PHASE I LIST: PHASE (run or check) of the cases of LIST ("N KIND
# STICKY" a line) on lines I, I + JOBS, ... (from 0).
worker() {
	local k=0 n kind sticky dir

	trap - DEBUG ERR	# bats' traps: slow, and meant for the test
	set +eET
	while read -r n kind sticky; do
		k=$((k + 1))
		[ $(((k - 1) % JOBS)) = "$2" ] || continue
		dir=$CASES/$n.$kind.$sticky
		("$1_case" "$W" "$n" "$kind" "$sticky" "$dir")
		# a case that passed leaves nothing behind
		if [ "$1" = check ] && [ "$n" != 0 ] && [ ! -s "$dir/problems" ]
		then
			rm -rf "$dir"
		fi
	done <"$3"
}

# parallel PHASE LIST: worker PHASE LIST, JOBS at once; prints what they
# printed.
parallel() {
	local i p pids=()

	for ((i = 0; i < JOBS; i++)); do
		worker "$1" "$i" "$2" >"$2.$1.$i" 2>&1 3>&- &
		pids+=("$!")
		echo "$!" >>"$BATS_TEST_TMPDIR/pids"
	done
	for p in "${pids[@]}"; do
		wait "$p" || true
	done
	cat "$2.$1".*
}

# cases_of LOG: the cases for a run that made the calls of LOG: each way
# to fail of KINDS (short only where call N is a write), each once and
# sticky, for every N, or (not MQ_FAULT_ALL=1) for a sample of each run of
# more than 3 calls of one function on one file: its first two, its last
# and one other.
cases_of() {
	awk -F'\t' -v seed="${SEED:-0}" -v all="${MQ_FAULT_ALL:-0}" \
	    -v kinds="$KINDS" '
	{ key[NR] = $2 "\t" $3; fn[NR] = $2 }
	END {
		srand(seed)
		for (i = 1; i <= NR; i = j + 1) {
			for (j = i; j < NR && key[j + 1] == key[i]; j++)
				;
			if (all == 1 || j - i < 3) {
				for (k = i; k <= j; k++)
					pick[k] = 1
			} else {
				pick[i] = pick[i + 1] = pick[j] = 1
				pick[i + 2 + int(rand() * (j - i - 2))] = 1
			}
		}
		nk = split(kinds, kind, " ")
		for (k = 1; k <= NR; k++)
			for (s = 0; s < 2 && pick[k]; s++)
				for (i = 1; i <= nk; i++)
					if (kind[i] != "short" || fn[k] ~ /write/)
						print k, kind[i], s
	}' "$1"
}

# sweep W: sweeps workload W; fails on any problem, naming each.
sweep() {
	export W=$1 CASES=$BATS_TEST_TMPDIR/c
	local list=$BATS_TEST_TMPDIR/cases out=$BATS_TEST_TMPDIR/problems
	local calls again start failed applied n

	start=$(date +%s)
	mkdir -p "$CASES"
	[ "${MQ_FAULT_ALL:-0}" = 1 ] || seed_random >/dev/null
	# N=0, twice: nothing fails; they count the calls and are checked too
	printf '0 ENOSPC 0\n0 ENOSPC 1\n' >"$list.0"
	parallel run "$list.0" >"$BATS_TEST_TMPDIR/run.out"
	calls=$(grep -c . "$CASES/0.ENOSPC.0/faults.log") || true
	again=$(grep -c . "$CASES/0.ENOSPC.1/faults.log") || true
	[ "${calls:-0}" -gt 0 ] || fail "$W: the shim counted no call"
	[ "$calls" = "$again" ] ||
	    echo "# $W: $calls calls in one clean run, $again in another" >&3
	cases_of "$CASES/0.ENOSPC.0/faults.log" >"$list"
	n=$(wc -l <"$list")
	parallel run "$list" >>"$BATS_TEST_TMPDIR/run.out"
	case $W in
	recv | ack | exec) sleep "$LEASE.3" ;;	# every lease ran out
	esac
	{
		parallel check "$list.0"
		parallel check "$list"
	} >"$out"
	failed=$(cut -d: -f1 "$out" | sort -u | grep -c .) || true
	applied=$(grep -c . "$CASES/applied" 2>/dev/null) || true
	echo "# $W: $n cases (N in 1..$calls; ${KINDS// /, }; once, sticky)" \
	    "in $(($(date +%s) - start))s: $failed failed; ${applied:-0}" \
	    "failed after their change was committed" >&3
	[ ! -s "$BATS_TEST_TMPDIR/run.out" ] ||
	    fail "the harness said: $(head -20 "$BATS_TEST_TMPDIR/run.out")"
	[ "$failed" = 0 ] || fail "$W: $failed of $n cases failed:
$(head -60 "$out")"
}

# one_case W N KIND STICKY: runs a case of W in $BATS_TEST_TMPDIR/one
# (made anew) and checks it at once: the problems in PROBLEMS.
one_case() {
	local dir=$BATS_TEST_TMPDIR/one

	rm -rf "$dir"
	(run_case "$@" "$dir")
	PROBLEMS=$(check_case "$@" "$dir")
}

# has TEXT...: PROBLEMS has every TEXT; else fail, showing them.
has() {
	local t

	for t; do
		[[ $PROBLEMS == *"$t"* ]] ||
		    fail "the checks did not say \"$t\"; they said: ${PROBLEMS:-nothing}"
	done
}

@test "the shim counts a send's calls and fails the one it is told to" {
	local dir=$BATS_TEST_TMPDIR/one log n k

	one_case send-argv 0 ENOSPC 0
	assert_equal "$PROBLEMS" ""
	log=$dir/faults.log
	n=$(grep -c . "$log")
	echo "# mq-send t a b c: $n calls:" \
	    "$(cut -f2,3 "$log" | sort | uniq -c | tr -s ' \t\n' ' ')" >&3
	[ "$n" -gt 0 ]
	grep -q $'\topen64\tmq.db\t' "$log"
	grep -q $'\tpwrite64\tmq.db-wal\t' "$log"
	grep -q $'\tfdatasync\tmq.db-wal\t' "$log"
	grep -q $'\topen\tmq.db-mq\t' "$log"
	# the count is the same every time
	one_case send-argv 0 ENOSPC 0
	assert_equal "$(grep -c . "$log")" "$n"
	# the last sync of the WAL fails: the batch is not promised
	k=$(grep $'\tfdatasync\tmq.db-wal\t' "$log" | tail -1 | cut -f1)
	one_case send-argv "$k" EIO 0
	assert_equal "$(cat "$dir/status")" 74
	assert_equal "$(sed -n "${k}p" "$log")" \
	    "$k"$'\tfdatasync\tmq.db-wal\t-\tFAULT EIO'
	assert_equal "$(cat "$dir/out")" ""
	# the first write of a frame is cut short: SQLite writes the rest
	k=$(grep $'\tpwrite64\tmq.db-wal\t4096@' "$log" | head -1 | cut -f1)
	one_case send-argv "$k" short 0
	assert_equal "$(sed -n "${k}p" "$log" | cut -f5)" "FAULT short 2048"
	assert_equal "$(sed -n "$((k + 1))p" "$log" | cut -f2,4,5)" \
	    $'pwrite64\t2048@'"$(($(sed -n "${k}p" "$log" | cut -f4 |
	        cut -d@ -f2) + 2048))"$'\t2048'
	# sticky: every call from there fails (from the -mq file's sizing:
	# the engine goes on without it, and fails at the WAL)
	k=$(grep $'\tftruncate\tmq.db-mq\t' "$log" | cut -f1)
	one_case send-argv "$k" ENOSPC 1
	assert_equal "$(cat "$dir/status")" 74
	[ "$(grep -c 'FAULT ENOSPC$' "$log")" -gt 1 ]
	run ! grep -v 'FAULT ENOSPC$' <(sed -n "$k,\$p" "$log")
	# its children run without it
	# shellcheck disable=SC2016 # for sh to expand
	run -0 env MQ_FAULT_PREFIX="$dir/mq.db" LD_PRELOAD="$SHIM" \
	    sh -c 'echo "[$LD_PRELOAD]"'
	assert_output "[]"
}

@test "a -journal that cannot be made as a send creates the database: 74, naming it" {
	local dir=$BATS_TEST_TMPDIR/one k kind why

	one_case send-new 0 ENOSPC 0
	k=$(grep -m 1 $'\topen64\tmq.db-journal\t' "$dir/faults.log" | cut -f1)
	[ -n "$k" ] || fail "no -journal was opened: $(cat "$dir/faults.log")"
	for kind in ENOSPC EIO; do
		one_case send-new "$k" "$kind" 0
		assert_equal "$PROBLEMS" ""
		assert_equal "$(cat "$dir/status")" 74
		why="No space left on device"
		[ "$kind" = ENOSPC ] || why="Input/output error"
		# not the "no such file" of SQLite's read-only retry
		assert_equal "$(cat "$dir/err")" \
		    "mq-send: cannot set WAL mode: $dir/mq.db-journal: $why"
	done
}

@test "a switch to WAL that the file does not show: 74, saying the mode it stays in" {
	local dir=$BATS_TEST_TMPDIR/one k

	one_case send-new 0 ENOSPC 0
	# the check reads the header through SQLite's descriptor: no other
	# connection opens the file, whose failure would fail a good switch
	assert_equal "$(grep -c $'\topen64\tmq.db\t' "$dir/faults.log")" 1
	# page 1 with the WAL mark, written in rollback mode: SQLite's pragma
	# still answers "wal"
	k=$(grep -m 1 $'\tpwrite64\tmq.db\t4096@0\t' "$dir/faults.log" |
	    cut -f1)
	[ -n "$k" ] || fail "no write of page 1: $(cat "$dir/faults.log")"
	one_case send-new "$k" EIO 0
	# (its checks include a clean send after it, which switches the file)
	assert_equal "$PROBLEMS" ""
	assert_equal "$(cat "$dir/status")" 74
	assert_equal "$(cat "$dir/err")" \
	    "mq-send: cannot set WAL mode: $dir/mq.db: the file stays in rollback-journal mode"
}

@test "a first send syncs each directory it makes into its parent; a failed sync is 74" {
	local top=$BATS_TEST_TMPDIR/top log=$BATS_TEST_TMPDIR/dirs.log k

	mkdir "$top"
	MQ_FAULT_PREFIX=$top/a/b/mq.db MQ_FAULT_DIRS=1 MQ_FAULT_LOG=$log \
	    LD_PRELOAD=$SHIM mq-send -q -d "$top/a/b/mq.db" t x
	# top gets a, a gets b, b gets mq.db: each synced once it has
	run -0 grep -E $'\t(fsync|fdatasync)\t(top|a|b)\t' "$log"
	assert_equal "$(cut -f3 <<<"$output" | head -n 3 | tr '\n' ' ')" \
	    "top a b "
	k=$(grep -m 1 $'\tfsync\ta\t' "$log" | cut -f1)
	rm -rf "$top" "$log"
	mkdir "$top"
	run -74 --separate-stderr env MQ_FAULT_PREFIX="$top/a/b/mq.db" \
	    MQ_FAULT_DIRS=1 MQ_FAULT_AT="$k" MQ_FAULT_ERRNO=EIO \
	    LD_PRELOAD="$SHIM" mq-send -d "$top/a/b/mq.db" t x
	# shellcheck disable=SC2154 # set by run --separate-stderr
	assert_equal "$stderr" \
	    "mq-send: cannot sync directory $top/a: Input/output error"
	assert_output ""
}

# The harness's own test: what the checks must catch, they do.  A case
# that passed is spoilt afterwards, or run with a stand-in program that
# does what a broken one would.
@test "the checks fail on a lost body, a lie, a bad exit, a wrong mode" {
	local dir=$BATS_TEST_TMPDIR/one bin=$BATS_TEST_TMPDIR/bin

	# a stored body changed after a clean send
	rm -rf "$dir"
	(run_case send-argv 0 ENOSPC 0 "$dir")
	sqlite3 "$dir/mq.db" "UPDATE msg SET body = CAST('zz' AS BLOB)
	    WHERE off = 3"
	PROBLEMS=$(check_case send-argv 0 ENOSPC 0 "$dir")
	has "send-argv N=0: batch stored in part or changed: '2 a, 3 zz, 4 c'," \
	    "want '2 a, 3 b, 4 c' or nothing" \
	    "send-argv N=0: after the fault: topic t counts 4 messages of 6" \
	    "bytes; stored: 4 of 7.0"
	# a clean send's database put back in rollback-journal mode
	one_case send-argv 0 ENOSPC 0
	sqlite3 "$dir/mq.db" 'PRAGMA journal_mode=DELETE' >/dev/null
	PROBLEMS=$(check_case send-argv 0 ENOSPC 0 "$dir")
	has "after the fault: journal_mode delete, not wal"
	# a clean send, as if it had ignored a failed sync of the WAL
	one_case send-argv 0 ENOSPC 0
	sed -i '/\tfdatasync\tmq.db-wal\t/s/\tok$/\tFAULT EIO/' "$dir/faults.log"
	PROBLEMS=$(check_case send-argv 0 ENOSPC 0 "$dir")
	has "exit 0, but the sync of the WAL at call" \
	    "failed and none after it succeeded"

	# stand-ins, first in PATH: an mq-ack that ignores its work (and any
	# failure) and exits 0; mq-sends that say two lines and exit 1, die of
	# SIGSEGV, or store part of their batch
	mkdir -p "$bin"
	printf '#!/bin/sh\nexit 0\n' >"$bin/mq-ack"
	printf '#!/bin/sh\necho "mq-send: no" >&2; echo more >&2; exit 1\n' \
	    >"$bin/mq-send"
	chmod +x "$bin"/*
	rm -rf "$dir"
	(PATH=$bin:$PATH run_case ack 3 EIO 0 "$dir")
	sleep "$LEASE.3"	# the receipt's lease runs out
	PROBLEMS=$(check_case ack 3 EIO 0 "$dir")
	has "received '1 m1, 2 m2' after exit 0, want '2 m2'"
	PATH=$bin:$PATH one_case send-argv 5 EIO 0
	has "exit 1, want 0, 74 or 75" "exit 1 with 2 lines on stderr"
	printf '#!/bin/sh\nkill -SEGV $$\n' >"$bin/mq-send"
	PATH=$bin:$PATH one_case send-argv 5 EIO 0
	has "killed by signal 11 (exit 139)"
	printf '#!/bin/sh\n%s/mq-send t a b\n' "$MQ_BIN" >"$bin/mq-send"
	PATH=$bin:$PATH one_case send-argv 5 EIO 0
	has "exit 0 printed '2 3', want '2 3 4'" \
	    "batch stored in part or changed: '2 a, 3 b'"
}

@test "faults while mq-send t a b c creates the database" {
	sweep send-new
}

@test "faults in mq-send t a b c" {
	sweep send-argv
}

@test "faults in mq-send t reading three lines from stdin" {
	sweep send-stdin
}

@test "faults in mq-recv (its receipt acked cleanly)" {
	sweep recv
}

@test "faults in mq-ack (of a receipt taken cleanly)" {
	sweep ack
}

@test "faults in mq-recv -n 1 -g g t -- true" {
	sweep exec
}

@test "faults in mq-purge" {
	sweep purge
}

@test "faults in mq-purge --vacuum" {
	sweep vacuum
}

@test "faults in mq-topic create" {
	sweep topic-create
}

@test "faults in mq-topic set" {
	sweep topic-set
}

@test "faults in mq-topic group" {
	sweep topic-group
}
