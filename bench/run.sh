#!/bin/sh
# bench/run.sh: mq's benchmarks, each beside a baseline or a target.
#
# usage: sh bench/run.sh BUILD_DIR [BENCH ...]
#
# With no BENCH, runs them all:
#   send     mq-send bulk load from stdin against bench/raw.c (plain SQLite)
#   purge    mq-purge of 1,000,000 settled messages while a producer runs
#            one mq-send every 10 ms: the latency that producer sees
#   lag      mq-lag (table, --json, --prometheus) on 10 topics x 3 groups,
#            10,000 messages against 10,000,000
#   latency  send to handler start of a waiting exec-mode consumer, and the
#            CPU of idle followers
# Each side of send runs BENCH_RUNS times (default 3) and the best
# (fastest) run is reported.  Everything is written under a temporary
# directory in ${TMPDIR:-/tmp}, removed on exit, with background processes
# stopped even on failure; each benchmark has its own database there and
# MQ_DB points there too, so the user's database is never touched.  Small
# C helpers (bench/*.c) are compiled into that directory.
#
# Targets are reported as PASS or FAIL, not enforced: the exit status is 0
# unless a command failed (then non-zero, with a message on stderr).
#
# Environment: BENCH_RUNS (runs per side), BENCH_N (messages of send,
# default 1000000), BENCH_PURGE_N (messages purged, default 1000000),
# BENCH_LAG_N (messages of the larger lag database, default 10000000),
# BENCH_LAT_N (messages of latency, default 500), BENCH_IDLE (seconds of
# silence for the idle CPU, default 10), BENCH_TIMEOUT (seconds any one
# step may take, default 600), CC, TMPDIR.
#
# A new benchmark is a function bench_NAME plus its name in BENCHES.

set -eu

BENCHES="send purge lag latency"
RUNS=${BENCH_RUNS:-3}
N=${BENCH_N:-1000000}
PURGE_N=${BENCH_PURGE_N:-1000000}
LAG_N=${BENCH_LAG_N:-10000000}
LAT_N=${BENCH_LAT_N:-500}
IDLE=${BENCH_IDLE:-10}
TO=${BENCH_TIMEOUT:-600}
CC=${CC:-cc}

die() {
	echo "bench: $*" >&2
	exit 1
}

[ $# -ge 1 ] || die "usage: sh bench/run.sh BUILD_DIR [$(echo "$BENCHES" | tr ' ' '|') ...]"
B=$1
shift
case $B in /*) ;; *) B=$(pwd)/$B ;; esac
SRC=$(cd "$(dirname "$0")" && pwd)
for b in "$@"; do
	case " $BENCHES " in
	*" $b "*) ;;
	*) die "unknown benchmark '$b': want one of: $BENCHES" ;;
	esac
done
case $RUNS in ''|*[!0-9]*|0) die "invalid BENCH_RUNS '$RUNS'" ;; esac
for v in "BENCH_N=$N" "BENCH_PURGE_N=$PURGE_N" "BENCH_LAG_N=$LAG_N" \
    "BENCH_LAT_N=$LAT_N" "BENCH_IDLE=$IDLE" "BENCH_TIMEOUT=$TO"; do
	case ${v#*=} in ''|*[!0-9]*|0) die "invalid $v" ;; esac
done
[ "$LAG_N" -ge 10000 ] || die "invalid BENCH_LAG_N '$LAG_N': at least 10000"

# Background processes of the running benchmark (bg_add PID), stopped by
# stop_bg and on any exit: SIGTERM, then SIGKILL after 3s.
BG=
bg_add() {
	BG="$BG $1"
}
stop_bg() {
	[ -n "$BG" ] || return 0
	# shellcheck disable=SC2086 # a list of pids
	kill $BG 2>/dev/null || :
	_i=0
	while [ "$_i" -lt 30 ]; do
		_alive=
		for _p in $BG; do
			kill -0 "$_p" 2>/dev/null && _alive="$_alive $_p"
		done
		[ -n "$_alive" ] || break
		sleep 0.1
		_i=$((_i + 1))
	done
	# shellcheck disable=SC2086
	[ -z "$_alive" ] || kill -9 $_alive 2>/dev/null || :
	for _p in $BG; do
		wait "$_p" 2>/dev/null || :
	done
	BG=
}
TMP=
cleanup() {
	stop_bg
	[ -z "$TMP" ] || rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

TMP=$(mktemp -d "${TMPDIR:-/tmp}/mq-bench.XXXXXX") || die "cannot make a temporary directory"
mkdir "$TMP/db" "$TMP/bin" || die "cannot populate $TMP"
# Databases live alone in $TMP/db (followers watch their directory); MQ_DB
# points there so a command without -d cannot reach the user's database.
MQ_DB=$TMP/db/default.db
export MQ_DB

# Nanoseconds since the epoch (GNU date; python3 where %N is missing).
case $(date +%N) in
*[!0-9]*|'')
	command -v python3 >/dev/null || die "need GNU date (+%N) or python3 for a ns clock"
	now_ns() { python3 -c 'import time; print(time.time_ns())'; } ;;
*)
	now_ns() { date +%s%N; } ;;
esac
now_ms() { _t=$(now_ns); echo $((_t / 1000000)); }

# bounded CMD [ARG ...]: runs CMD, killed after BENCH_TIMEOUT seconds.
if command -v timeout >/dev/null; then
	bounded() { timeout "$TO" "$@"; }
else
	bounded() { "$@"; }
fi

# helper NAME ...: compiles bench/NAME.c into $TMP/bin/NAME.
helper() {
	for _h; do
		"$CC" -O2 -o "$TMP/bin/$_h" "$SRC/$_h.c" ||
		    die "cannot build bench/$_h.c"
	done
}

# dist FILE: count, p50, p90, p99 and max of the integers in FILE, one a
# line (nearest rank), as "N P50 P90 P99 MAX"; "0 0 0 0 0" when empty.
dist() {
	sort -n "$1" | awk '{ v[NR] = $1 }
	function r(p,  i) { i = int(p * NR / 100); if (i < p * NR / 100) i++
		return v[i < 1 ? 1 : i] }
	END { if (NR == 0) print "0 0 0 0 0"
	      else print NR, r(50), r(90), r(99), v[NR] }'
}

# us2ms US: microseconds as milliseconds with 1 decimal.
us2ms() {
	awk -v u="$1" 'BEGIN { printf "%.1f", u / 1000 }'
}

# timed IN CMD [ARG ...]: runs CMD with stdin from IN (stdout discarded);
# sets ms to its wall time.  A failing CMD ends the run.
timed() {
	_in=$1
	shift
	_t0=$(now_ms)
	if ! "$@" <"$_in" >/dev/null; then
		die "command failed: $*"
	fi
	_t1=$(now_ms)
	ms=$((_t1 - _t0))
	[ "$ms" -gt 0 ] || ms=1
}

# decimal A B [PLACES]: A / B as a decimal with PLACES (default 3) digits.
decimal() {
	_p=${3:-3}
	_s=1
	_i=0
	while [ "$_i" -lt "$_p" ]; do _s=$((_s * 10)); _i=$((_i + 1)); done
	_q=$(($1 * _s / $2))
	printf '%d.%0*d' $((_q / _s)) "$_p" $((_q % _s))
}

# line LABEL COUNT MS ALL: one result line, messages/s and seconds.
line() {
	printf '  %-28s %9d msg/s  %8s s   (runs: %s)\n' "$1" \
	    $(($2 * 1000 / $3)) "$(decimal "$3" 1000)" "$4"
}

# target TEXT OK: a target line, PASS when OK is 1.
target() {
	if [ "$2" = 1 ]; then
		echo "  target: $1: PASS"
	else
		echo "  target: $1: FAIL"
	fi
}

# send: mq-send -q t < file (1,000,000 100-byte lines) against raw.c.
bench_send() {
	echo "== send: bulk load of $N 100-byte lines from stdin," \
	    "best of $RUNS runs"
	in=$TMP/lines
	awk -v n="$N" 'BEGIN {
		pad = "abcdefghijklmnopqrstuvwxyz0123456789"
		pad = pad pad pad
		pad = substr(pad, 1, 90)
		for (i = 1; i <= n; i++)
			printf "%s%010d\n", pad, i
	}' >"$in" || die "cannot write $in"
	# shellcheck disable=SC2046 # pkg-config output is meant to split
	"$CC" -O2 -o "$B/raw" "$SRC/raw.c" $(pkg-config --cflags --libs sqlite3) ||
	    die "cannot build bench/raw.c"

	mq_best=0 raw_best=0 mq_all='' raw_all='' i=1
	while [ "$i" -le "$RUNS" ]; do
		rm -f "$TMP"/mq.db* "$TMP"/raw.db*
		timed "$in" "$B/mq-send" -q -d "$TMP/mq.db" t
		mq_all="$mq_all${mq_all:+ }$(decimal "$ms" 1000)"
		[ "$mq_best" -gt 0 ] && [ "$mq_best" -le "$ms" ] || mq_best=$ms
		# every line stored, none twice
		got=$("$B/mq-topic" -d "$TMP/mq.db" show t | awk '$1 == "messages" { print $2 }')
		[ "$got" = "$N" ] || die "mq-send stored ${got:-no} messages, not $N"

		rm -f "$TMP"/mq.db*
		timed "$in" "$B/raw" "$TMP/raw.db"
		raw_all="$raw_all${raw_all:+ }$(decimal "$ms" 1000)"
		[ "$raw_best" -gt 0 ] && [ "$raw_best" -le "$ms" ] || raw_best=$ms
		i=$((i + 1))
	done
	rm -f "$TMP"/raw.db*

	line "mq-send -q t < lines" "$N" "$mq_best" "$mq_all"
	line "raw.c (plain SQLite)" "$N" "$raw_best" "$raw_all"
	# ratio of rates, mq/raw = raw time / mq time
	echo "  ratio mq/raw: $(decimal "$raw_best" "$mq_best")"
	target "ratio >= 0.5" $(( raw_best * 2 >= mq_best ? 1 : 0 ))
}

# purge: builds a topic of PURGE_N messages settled by its one group, then
# runs mq-purge while a producer runs one mq-send per message every 10 ms
# (bench/sendlat.c, latency measured around fork to wait): the worst
# latency that producer sees during the purge, against a baseline period
# with no purge just before it.
bench_purge() {
	db=$TMP/db/purge.db
	out=$TMP/sendlat.out
	base=3
	echo "== purge: mq-purge of $PURGE_N settled messages while a producer" \
	    "runs mq-send every 10 ms"
	helper sendlat
	t0=$(now_ms)
	seq "$PURGE_N" | bounded "$B/mq-send" -q -d "$db" t ||
	    die "cannot load $PURGE_N messages"
	bounded "$B/mq-topic" -d "$db" group t g >/dev/null ||
	    die "cannot create group g"
	bounded "$B/mq-replay" -d "$db" -g g --latest t >/dev/null ||
	    die "cannot move group g to the end"
	t1=$(now_ms)
	lag=$("$B/mq-lag" -d "$db" --json t g | sed -n 's/.*"lag":\([0-9]*\).*/\1/p')
	[ "$lag" = 0 ] || die "group g has lag ${lag:-unknown}, not 0"
	echo "  setup: seq $PURGE_N | mq-send -q t; mq-topic group t g;" \
	    "mq-replay -g g --latest t: $(decimal $((t1 - t0)) 1000) s; lag 0"

	"$TMP/bin/sendlat" 10 "$out" "$B/mq-send" -q -d "$db" t &
	bg_add $!
	sleep "$base"
	p0=$(now_ns)
	bounded "$B/mq-purge" -d "$db" t >"$TMP/purge.out" || die "mq-purge failed"
	p1=$(now_ns)
	sleep 0.5
	stop_bg
	deleted=$(awk '$2 == "deleted" { print $3 }' "$TMP/purge.out")

	# base: sends done before the purge; during: sends overlapping it
	: >"$TMP/base.us"
	: >"$TMP/during.us"
	# shellcheck disable=SC2046
	set -- $(awk -v p0="$p0" -v p1="$p1" -v dir="$TMP" '
		{ us = sprintf("%d", ($2 - $1) / 1000) }
		NR == 1 { first = $1 }
		$2 < p0 { print us > (dir "/base.us"); if ($3) fb++ }
		$1 < p1 && $2 > p0 { print us > (dir "/during.us"); if ($3) fd++ }
		END { printf "%d %d %d\n", (p0 - first) / 1e6, fb, fd }' "$out")
	base_ms=$1 base_fail=$2 during_fail=$3
	printf '  mq-purge t: %s s, deleted %s messages\n' \
	    "$(decimal $(((p1 - p0) / 1000000)) 1000)" "${deleted:-0}"
	# shellcheck disable=SC2046
	set -- $(dist "$TMP/base.us")
	base_n=$1
	printf '  producer, no purge (%s s):  %4d sends, p50 %s ms, p99 %s ms,' \
	    "$(decimal "$base_ms" 1000 1)" "$1" "$(us2ms "$2")" "$(us2ms "$4")"
	printf ' worst %s ms, %d failed\n' "$(us2ms "$5")" "$base_fail"
	# shellcheck disable=SC2046
	set -- $(dist "$TMP/during.us")
	printf '  producer, during the purge: %4d sends, p50 %s ms, p99 %s ms,' \
	    "$1" "$(us2ms "$2")" "$(us2ms "$4")"
	printf ' worst %s ms, %d failed\n' "$(us2ms "$5")" "$during_fail"
	echo "  (at the no-purge rate, ~$((base_n * ((p1 - p0) / 1000000) / base_ms))" \
	    "sends would have fit in the purge's time)"
	target "worst send latency during the purge < 200 ms" \
	    $(($5 < 200000 && during_fail == 0 ? 1 : 0))
}

# lag_load DB PER: 10 topics of PER messages (topic0..topic9), 3 groups
# each, every group with 500 acked and 100 in flight; g2 also has 5 dead
# letters and g3 10 deliveries waiting for a retry.
lag_load() {
	_k=0
	while [ "$_k" -lt 10 ]; do
		_t=topic$_k
		seq "$2" | bounded "$B/mq-send" -q -d "$1" "$_t" ||
		    die "cannot load $_t"
		for _g in g1 g2 g3; do
			bounded "$B/mq-recv" -d "$1" -A -n 500 -g "$_g" "$_t" \
			    >/dev/null || die "cannot receive from $_t/$_g"
			bounded "$B/mq-recv" -d "$1" -n 100 -g "$_g" "$_t" \
			    >/dev/null || die "cannot receive from $_t/$_g"
		done
		"$B/mq-recv" -d "$1" -n 5 -g g2 "$_t" |
		    "$B/mq-ack" -d "$1" --dead >/dev/null || die "cannot dead-letter"
		"$B/mq-recv" -d "$1" -n 10 -g g3 "$_t" |
		    "$B/mq-ack" -d "$1" --fail >/dev/null || die "cannot fail"
		_k=$((_k + 1))
	done
	_n=$("$B/mq-lag" -d "$1" --json | wc -l)
	[ "$_n" -eq 30 ] || die "mq-lag shows $_n rows, not 30"
}

# lag: mq-lag's three outputs, best of 5, on 10,000 and LAG_N messages
# with the same groups and the same delivery state: its cost should follow
# topics, groups and deliveries, not the size of the log.  The target is
# on wall time; CPU time (user + system) is shown beside it, as it is less
# disturbed by other load on the machine.
bench_lag() {
	small=10000
	echo "== lag: mq-lag on 10 topics x 3 groups (500 acked, 100 in flight," \
	    "some dead or retrying), $small vs $LAG_N messages, best of 5"
	helper besttime
	for n in $small $LAG_N; do
		db=$TMP/db/lag$n.db
		t0=$(now_ms)
		lag_load "$db" $((n / 10))
		t1=$(now_ms)
		echo "  setup $n messages: $(decimal $((t1 - t0)) 1000) s"
		for f in table json prometheus; do
			case $f in
			table) set -- ;;
			*) set -- "--$f" ;;
			esac
			# shellcheck disable=SC2034 # read by the evals below
			r=$("$TMP/bin/besttime" 5 "$B/mq-lag" -d "$db" "$@") ||
			    die "mq-lag $* failed"
			# shellcheck disable=SC2016
			eval "set -- \$r; wall_${f}_$n=\$1 cpu_${f}_$n=\$2; shift 2;" \
			    'all_'"${f}_$n"'=$*'
		done
	done
	ok=1
	printf '  %-26s %12s %12s %12s\n' "best of 5" "mq-lag" "--json" \
	    "--prometheus"
	# shellcheck disable=SC2154 # a, b, c are set by eval
	for k in wall cpu; do
		for n in $small $LAG_N; do
			eval "a=\$${k}_table_$n b=\$${k}_json_$n c=\$${k}_prometheus_$n"
			printf '  %-26s %9s ms %9s ms %9s ms\n' "$k, $n messages" \
			    "$(decimal "$a" 1000 2)" "$(decimal "$b" 1000 2)" \
			    "$(decimal "$c" 1000 2)"
		done
		l=
		for f in table json prometheus; do
			eval "a=\$${k}_${f}_$small b=\$${k}_${f}_$LAG_N"
			l="$l $(printf '%12s' "$(decimal "$b" "$a" 2)x")"
			[ "$k" = cpu ] || [ "$b" -le $((2 * a)) ] || ok=0
		done
		printf '  %-26s%s\n' "$k, ratio" "$l"
	done
	for f in table json prometheus; do
		eval "echo \"  wall of each run, $f (us): $small: \$all_${f}_$small;" \
		    "$LAG_N: \$all_${f}_$LAG_N\""
	done
	target "$LAG_N messages within 2x of $small (wall), every output" "$ok"
}

# cpu PID: utime + stime of PID in clock ticks; wakes PID: its voluntary
# context switches (times it slept and woke).
cpu() {
	sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'
}
wakes() {
	awk '$1 == "voluntary_ctxt_switches:" { print $2 }' "/proc/$1/status"
}

# latency: a waiting exec-mode consumer (mq-recv -f -n 0 -- bench/stamp)
# and one long-running mq-send fed by bench/ticker (a line every 5-20 ms,
# at random, carrying its send time): send to handler start.  Then the
# CPU of two followers (printing, exec mode) over BENCH_IDLE s of silence.
bench_latency() {
	db=$TMP/db/lat.db
	us=$TMP/lat.us
	echo "== latency: send to handler start, mq-recv -f -n 0 -g g t --" \
	    "stamp, $LAT_N messages at random 5-20 ms"
	helper ticker stamp
	"$B/mq-topic" -d "$db" create t >/dev/null || die "cannot create t"
	"$B/mq-topic" -d "$db" group t g >/dev/null || die "cannot create t/g"
	: >"$us"
	"$B/mq-recv" -d "$db" -f -n 0 -g g t -- "$TMP/bin/stamp" "$us" &
	bg_add $!
	# ready when it has joined as a consumer
	_w=0
	until "$B/mq-lag" -d "$db" --json t g | grep -q '"consumers":1'; do
		_w=$((_w + 1))
		[ "$_w" -lt 100 ] || die "the consumer did not start"
		sleep 0.05
	done
	"$TMP/bin/ticker" "$LAT_N" 5 20 | bounded "$B/mq-send" -q -d "$db" t ||
	    die "the producer failed"
	_w=0
	while [ "$(wc -l <"$us")" -lt "$LAT_N" ] && [ "$_w" -lt 200 ]; do
		sleep 0.05
		_w=$((_w + 1))
	done
	stop_bg
	# shellcheck disable=SC2046
	set -- $(dist "$us")
	printf '  %d of %d handled: p50 %s ms, p90 %s ms, p99 %s ms, max %s ms\n' \
	    "$1" "$LAT_N" "$(us2ms "$2")" "$(us2ms "$3")" "$(us2ms "$4")" \
	    "$(us2ms "$5")"
	target "p50 < 2 ms" $(($1 == LAT_N && $2 < 2000 ? 1 : 0))
	target "p99 < 10 ms" $(($1 == LAT_N && $4 < 10000 ? 1 : 0))

	echo "== idle: CPU of waiting followers over $IDLE s with no message"
	[ -r /proc/self/stat ] || die "no /proc: cannot read CPU times"
	db=$TMP/db/idle.db
	"$B/mq-topic" -d "$db" create t2 >/dev/null || die "cannot create t2"
	"$B/mq-recv" -d "$db" -f -n 0 -g idle t2 >/dev/null &
	p1=$!
	bg_add $p1
	"$B/mq-recv" -d "$db" -f -n 0 -g idle-exec t2 -- "$TMP/bin/stamp" \
	    "$TMP/idle.us" &
	p2=$!
	bg_add $p2
	sleep 1
	tck=$(getconf CLK_TCK)
	c1=$(cpu $p1) c2=$(cpu $p2) w1=$(wakes $p1) w2=$(wakes $p2)
	sleep "$IDLE"
	if ! kill -0 $p1 2>/dev/null || ! kill -0 $p2 2>/dev/null; then
		die "a follower exited early"
	fi
	d1=$(($(cpu $p1) - c1)) d2=$(($(cpu $p2) - c2))
	v1=$(($(wakes $p1) - w1)) v2=$(($(wakes $p2) - w2))
	stop_bg
	printf '  %-40s %s%% of a core (%d ticks of 1/%d s), %d wakeups\n' \
	    "mq-recv -f -n 0 -g idle t2:" "$(decimal $((d1 * 100)) $((tck * IDLE)) 2)" \
	    "$d1" "$tck" "$v1"
	printf '  %-40s %s%% of a core (%d ticks of 1/%d s), %d wakeups\n' \
	    "mq-recv -f -n 0 -g idle-exec t2 -- cmd:" \
	    "$(decimal $((d2 * 100)) $((tck * IDLE)) 2)" "$d2" "$tck" "$v2"
	target "each under 1% of a core" \
	    $((d1 * 100 < tck * IDLE && d2 * 100 < tck * IDLE ? 1 : 0))
}

echo "mq bench: $(uname -sm), $(getconf _NPROCESSORS_ONLN) CPUs, sqlite $(pkg-config --modversion sqlite3)," \
    "$(df -PT "$TMP" | awk 'NR == 2 { print $2 }') at ${TMPDIR:-/tmp}," \
    "synchronous=FULL, WAL"
# shellcheck disable=SC2086 # the list of names is meant to split
[ $# -gt 0 ] || set -- $BENCHES
for b in "$@"; do
	"bench_$b"
done
