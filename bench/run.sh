#!/bin/sh
# bench/run.sh: mq's benchmarks, each beside a plain-SQLite program doing
# the same work (or another baseline measured in the same run), with a
# target.
#
# usage: sh bench/run.sh BUILD_DIR [BENCH ...]
#
# With no BENCH, runs them all, in this order:
#   producers  1 and 8 long-lived mq-send fed on pipes, one message in
#              flight each (bench/prod.c): msg/s of 1 against a raw
#              producer fed the same way (rawq pipe: a line, one FULL
#              commit, its offset); of 8 against 1.  A bare loop of such
#              commits (rawq commit, no pipe) is listed beside them
#   send       seq-style bulk load from stdin against bench/raw.c
#   recvack    mq-recv -n 0 | mq-ack against rawq lease (lease 100, commit,
#              delete them, commit)
#   autoack    mq-recv -n 0 -A against rawq delete (DELETE ... RETURNING
#              100 a transaction)
#   idem       mq-recv -n 0 | mq-ack in a group with --idempotent-by
#              field:1 (every id new) against the same in a plain group:
#              the cost of idempotent consumption
#   lanes      mq-recv -n 0 | mq-ack of three lanes, the same messages
#              spread over three topics (strictly in order, and --fair),
#              against the same of one topic
#   exec       mq-recv -n N -j 4 -- true against xargs -P 4 -n 1 true
#   follow     producer's write to mq-recv -f's output line, against one
#              raw FULL commit (rawq commit at the same random spacing)
#   followack  the same with mq-recv -f -A
#   latency    producer's write to the start of mq-recv -f's handler,
#              against one raw commit plus one spawn of the same handler
#              (bench/spawnlat.c)
#   idle       100 idle followers of other topics while a producer makes
#              1,000 commits: their CPU, and the producer's rate against
#              its rate with no followers; then their CPU in silence
#   rss        peak RSS of mq-send, mq-replay and mq-recv -A streaming
#              1,000,000 messages (bench/maxrss.c, wait4's ru_maxrss)
#   lag        mq-lag (table, --json, --prometheus) and a claim+ack of 10
#              with a 10,000,000-message topic against a 1,000 one
#   purge      mq-purge of 1,000,000 settled messages while a producer runs
#              one mq-send every 10 ms: the latency that producer sees
#
# Each figure is one line, "NAME: mq X UNIT, raw Y UNIT, ratio R (target
# OP T) PASS|FAIL" (the baseline is named when it is not a raw program),
# and a summary at the end counts them and repeats the FAIL lines.  The
# figures and their targets:
#   producers-1    1 producer's msg/s >= 0.9x rawq pipe's
#   producers-8    8 producers' msg/s >= 3x 1 producer's
#   send           msg/s >= 0.8x raw.c's
#   recvack        msg/s >= 0.7x rawq lease's
#   autoack        msg/s >= 0.8x rawq delete's
#   idem           msg/s >= 0.5x the plain group's (a cost, not a target
#                  of the issue: each message looks its id up, each ack
#                  stores it)
#   lanes, lanes-fair    3 lanes' msg/s >= 0.8x one topic's
#   exec           xargs's time / mq's time >= 1.0
#   follow-p50     p50 <= 1.5x the raw commit's p50
#   follow-p99     p99 <= 3x the raw commit's p99
#   followack-p50  p50 <= 2.5x the raw commit's p50
#   latency-p50    p50 <= 1.5x (raw commit p50 + spawn p50)
#   idle-cpu       followers' CPU < 5% of one core over the producer's runs
#   idle-rate      producer's msg/s with followers >= 0.9x without
#   idle-silent    followers' CPU < 5% of one core with no message at all
#   rss-send, rss-replay, rss-recv    peak RSS < 16 MB (raw beside it)
#   lag, lag-json, lag-prom, claim-ack    time on the large topic <= 1.3x
#                  time on the 1,000-message one
#   purge          worst send latency during mq-purge < 200 ms, none failed
# Targets are reported, not enforced: the exit status is 0 unless a
# command failed (then non-zero, with a message on stderr).
#
# Noise: throughput figures (producers, send, recvack, autoack, lanes,
# exec, and the idle producer's rates) run each side BENCH_RUNS times, mq
# and its baseline alternately, and report each side's best run; every
# run is listed.  Latency figures (follow, followack, latency) take one
# distribution of BENCH_LAT_N samples on each side, the baseline measured
# half just before and half just after mq so both see the same machine,
# and compare percentiles.  lag takes the best of BENCH_BEST runs of each
# command, small and large databases alternating.  CPU times (idle) are
# totals over the measured runs, judged on the larger of utime + stime
# (clock ticks) and /proc/PID/schedstat (ns: a hundred processes that
# each ran under one tick show 0 ticks).
#
# Everything is written under a temporary directory in ${TMPDIR:-/tmp},
# removed on exit, with background processes (tracked by pid) stopped
# even on failure; MQ_DB points there, so the user's database is never
# touched.  The small C helpers (bench/*.c) are compiled into it.
#
# Environment (sizes; every one a positive integer):
#   BENCH_RUNS       runs per side of the throughput figures (default 5)
#   BENCH_PROD_N     messages per producer of producers (default 2000)
#   BENCH_PRODUCERS  producers of the concurrent side (default 8)
#   BENCH_N          lines of send (default 1000000)
#   BENCH_RECV_N     messages of recvack, autoack and lanes (default 100000)
#   BENCH_EXEC_N     messages (handlers) of exec (default 2000)
#   BENCH_LAT_N      samples per side of follow, followack, latency
#                    (default 500, sent at random 5-20 ms)
#   BENCH_FOLLOWERS  idle followers of idle (default 100)
#   BENCH_IDLE_N     producer commits of idle (default 1000)
#   BENCH_IDLE       seconds of silence of idle (default 5)
#   BENCH_RSS_N      messages of rss (default 1000000)
#   BENCH_LAG_N      messages of the large topic of lag (default 10000000)
#   BENCH_BEST       runs of each command of lag, best taken (default 9)
#   BENCH_PURGE_N    messages purged by purge (default 1000000)
#   BENCH_TIMEOUT    seconds any one step may take (default 600)
#   CC, TMPDIR
#
# A new benchmark is a function bench_NAME plus its name in BENCHES.

set -eu

BENCHES="producers send recvack autoack idem lanes exec follow followack latency idle rss lag purge"
RUNS=${BENCH_RUNS:-5}
PROD_N=${BENCH_PROD_N:-2000}
PRODUCERS=${BENCH_PRODUCERS:-8}
N=${BENCH_N:-1000000}
RECV_N=${BENCH_RECV_N:-100000}
EXEC_N=${BENCH_EXEC_N:-2000}
LAT_N=${BENCH_LAT_N:-500}
FOLLOWERS=${BENCH_FOLLOWERS:-100}
IDLE_N=${BENCH_IDLE_N:-1000}
IDLE=${BENCH_IDLE:-5}
RSS_N=${BENCH_RSS_N:-1000000}
LAG_N=${BENCH_LAG_N:-10000000}
BEST=${BENCH_BEST:-9}
PURGE_N=${BENCH_PURGE_N:-1000000}
TO=${BENCH_TIMEOUT:-600}
CC=${CC:-cc}

die() {
	echo "bench: $*" >&2
	exit 1
}

SRC=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$SRC/lib.sh"

[ $# -ge 1 ] || die "usage: sh bench/run.sh BUILD_DIR [$(echo "$BENCHES" | tr ' ' '|') ...]"
B=$1
shift
case $B in /*) ;; *) B=$(pwd)/$B ;; esac
[ -x "$B/mq-send" ] || die "no mq-send in $B: build first (make B=$B)"
for b in "$@"; do
	case " $BENCHES " in
	*" $b "*) ;;
	*) die "unknown benchmark '$b': want one of: $BENCHES" ;;
	esac
done
for v in "BENCH_RUNS=$RUNS" "BENCH_PROD_N=$PROD_N" \
    "BENCH_PRODUCERS=$PRODUCERS" "BENCH_N=$N" "BENCH_RECV_N=$RECV_N" \
    "BENCH_EXEC_N=$EXEC_N" "BENCH_LAT_N=$LAT_N" "BENCH_FOLLOWERS=$FOLLOWERS" \
    "BENCH_IDLE_N=$IDLE_N" "BENCH_IDLE=$IDLE" "BENCH_RSS_N=$RSS_N" \
    "BENCH_LAG_N=$LAG_N" "BENCH_BEST=$BEST" "BENCH_PURGE_N=$PURGE_N" \
    "BENCH_TIMEOUT=$TO"; do
	case ${v#*=} in ''|*[!0-9]*|0*) die "invalid $v: want a positive integer" ;; esac
done
[ "$LAG_N" -ge 10000 ] || die "invalid BENCH_LAG_N '$LAG_N': at least 10000"
[ "$LAT_N" -ge 2 ] || die "invalid BENCH_LAT_N '$LAT_N': at least 2"

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


# sqlhelper NAME ...: helper, linked with SQLite.
sqlhelper() {
	for _h; do
		[ -x "$TMP/bin/$_h" ] && continue
		# shellcheck disable=SC2046 # pkg-config output is meant to split
		"$CC" -O2 -o "$TMP/bin/$_h" "$SRC/$_h.c" \
		    $(pkg-config --cflags --libs sqlite3) ||
		    die "cannot build bench/$_h.c"
	done
}



# load DB N: a database with topic t of N 100-byte messages and group g.
load() {
	rm -f "$1" "$1"-*
	gen "$2" | bounded "$B/mq-send" -q -d "$1" t || die "cannot load $2 messages"
	bounded "$B/mq-topic" -d "$1" group t g >/dev/null || die "cannot create group g"
}

# lag_of DB TOPIC GROUP: the group's lag.
lag_of() {
	"$B/mq-lag" -d "$1" --json "$2" "$3" | sed -n 's/.*"lag":\([0-9]*\).*/\1/p'
}

# wait_consumers DB COUNT: until COUNT consumers (or more) are listed.
wait_consumers() {
	_w=0
	until [ "$("$B/mq-lag" -d "$1" --json | awk -F'"consumers":' \
	    '{ split($2, a, ","); n += a[1] } END { print n + 0 }')" -ge "$2" ]; do
		_w=$((_w + 1))
		[ "$_w" -lt 400 ] || die "the consumers did not start"
		sleep 0.05
	done
}


# raw_commits OUT COUNT: COUNT one-message FULL commits at random 5-20 ms
# (rawq commit), the latency of each appended to OUT in microseconds.
raw_commits() {
	rm -f "$TMP"/rawc.db*
	"$TMP/bin/rawq" commit "$TMP/rawc.db" "$2" 5 20 "$1" >/dev/null ||
	    die "rawq commit failed"
}

# producers: K long-lived mq-send processes, each fed one line at a time
# on a pipe and waited for (bench/prod.c).
# us_rate WHAT COMMAND ...: runs COMMAND, which prints "US COUNT", and
# sets r to its msg/s and r_us to US.
us_rate() {
	_what=$1
	shift
	_out=$(bounded "$@") || die "$_what failed"
	# shellcheck disable=SC2086 # "US COUNT"
	set -- $_out
	r=$(rate "$2" "$1") r_us=$1
}

bench_producers() {
	echo "== producers: long-lived mq-send t, one 100-byte line then its" \
	    "offset, $PROD_N messages each; best of $RUNS"
	helper prod
	sqlhelper rawq
	best1='' bestk='' bestraw='' all1='' allk='' allraw=''
	allloop='' i=1
	while [ "$i" -le "$RUNS" ]; do
		db=$TMP/db/prod.db
		rm -f "$db" "$db"-*
		us_rate "1 producer" "$TMP/bin/prod" 1 "$PROD_N" \
		    "$TMP/prod1.us" "$B/mq-send" -d "$db" t
		keep_max best1 "$r"
		all1="$all1 $r"
		wal1=$({ wc -c <"$db-wal"; } 2>/dev/null || echo 0)
		rm -f "$db" "$db"-*
		us_rate "$PRODUCERS producers" "$TMP/bin/prod" "$PRODUCERS" \
		    "$PROD_N" "$TMP/prodk.us" "$B/mq-send" -d "$db" t
		keep_max bestk "$r"
		allk="$allk $r"
		walk=$({ wc -c <"$db-wal"; } 2>/dev/null || echo 0)
		rm -f "$TMP"/rawc.db*
		us_rate "rawq pipe" "$TMP/bin/prod" 1 "$PROD_N" - \
		    "$TMP/bin/rawq" pipe "$TMP/rawc.db"
		keep_max bestraw "$r"
		allraw="$allraw $r"
		rm -f "$TMP"/rawc.db*
		us_rate "rawq commit" "$TMP/bin/rawq" commit "$TMP/rawc.db" \
		    "$PROD_N"
		allloop="$allloop $r"
		i=$((i + 1))
	done
	echo "  msg/s of each run: 1 producer:$all1; $PRODUCERS producers:$allk;" \
	    "rawq pipe:$allraw; rawq commit (no pipe, not a target):$allloop"
	# shellcheck disable=SC2046 # dist prints "N P50 P90 P99 MAX"
	set -- $(dist "$TMP/prod1.us")
	printf '  line to offset, last run: 1 producer p50 %s ms, p99 %s ms;' \
	    "$(us2ms "$2")" "$(us2ms "$4")"
	# shellcheck disable=SC2046 # dist prints "N P50 P90 P99 MAX"
	set -- $(dist "$TMP/prodk.us")
	printf ' %d producers p50 %s ms, p99 %s ms\n' "$PRODUCERS" \
	    "$(us2ms "$2")" "$(us2ms "$4")"
	echo "  the -wal file after the last run: 1 producer" \
	    "$(decimal "$wal1" 1048576 1) MB; $PRODUCERS producers" \
	    "$(decimal "$walk" 1048576 1) MB"
	fig producers-1 mq "$best1" raw "$bestraw" msg/s \
	    "$(ratio "$best1" "$bestraw")" '>=' 0.9
	fig "producers-$PRODUCERS" mq "$bestk" "1 producer" "$best1" msg/s \
	    "$(ratio "$bestk" "$best1")" '>=' 3
}

# send: mq-send -q t < file (100-byte lines) against raw.c.
bench_send() {
	echo "== send: bulk load of $N 100-byte lines from stdin," \
	    "best of $RUNS runs"
	in=$(lines "$N")
	sqlhelper raw
	mq_best='' raw_best='' mq_all='' raw_all='' i=1
	while [ "$i" -le "$RUNS" ]; do
		rm -f "$TMP"/mq.db* "$TMP"/raw.db*
		tic
		bounded "$B/mq-send" -q -d "$TMP/mq.db" t <"$in" || die "mq-send failed"
		toc
		mq_all="$mq_all $(decimal "$us" 1000000)"
		keep_min mq_best "$us"
		# every line stored, none twice
		got=$("$B/mq-topic" -d "$TMP/mq.db" show t | awk '$1 == "messages" { print $2 }')
		[ "$got" = "$N" ] || die "mq-send stored ${got:-no} messages, not $N"

		rm -f "$TMP"/mq.db*
		tic
		bounded "$TMP/bin/raw" "$TMP/raw.db" <"$in" || die "raw failed"
		toc
		raw_all="$raw_all $(decimal "$us" 1000000)"
		keep_min raw_best "$us"
		i=$((i + 1))
	done
	rm -f "$TMP"/raw.db*
	echo "  seconds of each run: mq-send -q t < lines:$mq_all;" \
	    "raw.c:$raw_all"
	mq=$(rate "$N" "$mq_best") raw=$(rate "$N" "$raw_best")
	fig send mq "$mq" raw "$raw" msg/s "$(ratio "$mq" "$raw")" '>=' 0.8
}

# recv_ack DB ARGS...: mq-recv -n 0 ARGS | mq-ack on DB, timed (us).
recv_ack() {
	_db=$1
	shift
	tic
	{ bounded "$B/mq-recv" -d "$_db" -n 0 "$@"; echo $? >"$TMP/recv.st"; } |
	    bounded "$B/mq-ack" -d "$_db" || die "mq-ack failed"
	toc
	[ "$(cat "$TMP/recv.st")" = 0 ] || die "mq-recv $* failed"
}

# recvack: mq-recv -n 0 | mq-ack against rawq lease.
bench_recvack() {
	echo "== recvack: mq-recv -n 0 -g g t | mq-ack over $RECV_N messages;" \
	    "raw: lease 100, commit, delete them, commit; best of $RUNS"
	sqlhelper rawq
	db=$TMP/db/recv.db
	mq_best='' raw_best='' mq_all='' raw_all='' i=1
	while [ "$i" -le "$RUNS" ]; do
		load "$db" "$RECV_N"
		recv_ack "$db" -g g t
		l=$(lag_of "$db" t g)
		[ "$l" = 0 ] || die "group g has lag ${l:-unknown}, not 0"
		mq_all="$mq_all $(decimal "$us" 1000000)"
		keep_min mq_best "$us"

		rm -f "$TMP"/rawl.db*
		"$TMP/bin/rawq" load "$TMP/rawl.db" "$RECV_N" || die "rawq load failed"
		tic
		bounded "$TMP/bin/rawq" lease "$TMP/rawl.db" 100 >/dev/null ||
		    die "rawq lease failed"
		toc
		raw_all="$raw_all $(decimal "$us" 1000000)"
		keep_min raw_best "$us"
		i=$((i + 1))
	done
	rm -f "$db" "$db"-* "$TMP"/rawl.db*
	echo "  seconds of each run: mq:$mq_all; rawq lease:$raw_all"
	mq=$(rate "$RECV_N" "$mq_best") raw=$(rate "$RECV_N" "$raw_best")
	fig recvack mq "$mq" raw "$raw" msg/s "$(ratio "$mq" "$raw")" '>=' 0.7
}

# idem: recvack in a group with --idempotent-by field:1 against a plain
# one, the same messages (each its own id).
bench_idem() {
	echo "== idem: mq-recv -n 0 -g g t | mq-ack over $RECV_N messages," \
	    "g --idempotent-by field:1 against a plain g; best of $RUNS"
	db=$TMP/db/idem.db
	p_best='' i_best='' p_all='' i_all='' i=1
	while [ "$i" -le "$RUNS" ]; do
		for how in plain idem; do
			load "$db" "$RECV_N"
			[ "$how" = plain ] || bounded "$B/mq-topic" -d "$db" group \
			    t g --idempotent-by field:1 >/dev/null ||
			    die "cannot set --idempotent-by"
			recv_ack "$db" -g g t
			l=$(lag_of "$db" t g)
			[ "$l" = 0 ] || die "group g has lag ${l:-unknown}, not 0"
			if [ "$how" = plain ]; then
				p_all="$p_all $(decimal "$us" 1000000)"
				keep_min p_best "$us"
			else
				i_all="$i_all $(decimal "$us" 1000000)"
				keep_min i_best "$us"
			fi
		done
		i=$((i + 1))
	done
	rm -f "$db" "$db"-*
	echo "  seconds of each run: idempotent:$i_all; plain:$p_all"
	mq=$(rate "$RECV_N" "$i_best") raw=$(rate "$RECV_N" "$p_best")
	fig idem mq "$mq" "plain group" "$raw" msg/s "$(ratio "$mq" "$raw")" \
	    '>=' 0.5
}

# autoack: mq-recv -n 0 -A against rawq delete.
bench_autoack() {
	echo "== autoack: mq-recv -n 0 -A -g g t > /dev/null over $RECV_N" \
	    "messages; raw: DELETE ... RETURNING 100 a commit; best of $RUNS"
	sqlhelper rawq
	db=$TMP/db/auto.db
	mq_best='' raw_best='' mq_all='' raw_all='' i=1
	while [ "$i" -le "$RUNS" ]; do
		load "$db" "$RECV_N"
		tic
		bounded "$B/mq-recv" -d "$db" -n 0 -A -g g t >/dev/null ||
		    die "mq-recv -A failed"
		toc
		l=$(lag_of "$db" t g)
		[ "$l" = 0 ] || die "group g has lag ${l:-unknown}, not 0"
		mq_all="$mq_all $(decimal "$us" 1000000)"
		keep_min mq_best "$us"

		rm -f "$TMP"/rawd.db*
		"$TMP/bin/rawq" load "$TMP/rawd.db" "$RECV_N" || die "rawq load failed"
		tic
		bounded "$TMP/bin/rawq" delete "$TMP/rawd.db" 100 >/dev/null ||
		    die "rawq delete failed"
		toc
		raw_all="$raw_all $(decimal "$us" 1000000)"
		keep_min raw_best "$us"
		i=$((i + 1))
	done
	rm -f "$db" "$db"-* "$TMP"/rawd.db*
	echo "  seconds of each run: mq:$mq_all; rawq delete:$raw_all"
	mq=$(rate "$RECV_N" "$mq_best") raw=$(rate "$RECV_N" "$raw_best")
	fig autoack mq "$mq" raw "$raw" msg/s "$(ratio "$mq" "$raw")" '>=' 0.8
}

# load3 DB: a new DB of topics l1 l2 l3 sharing RECV_N messages, group g
# of each.
load3() {
	rm -f "$1" "$1"-*
	for l in 1 2 3; do	# the first takes what does not divide
		n=$((RECV_N / 3 + (l == 1 ? RECV_N % 3 : 0)))
		gen "$n" | bounded "$B/mq-send" -q -d "$1" "l$l" ||
		    die "cannot load l$l"
		bounded "$B/mq-topic" -d "$1" group "l$l" g >/dev/null ||
		    die "cannot create group l$l/g"
	done
}

# lanes_drained DB: group g of every lane has nothing left.
lanes_drained() {
	for l in 1 2 3; do
		[ "$(lag_of "$1" "l$l" g)" = 0 ] || die "l$l/g has lag, not 0"
	done
}

# lanes: the same messages through mq-recv of one topic, and of three
# lanes with the messages spread over them, strictly and --fair.
bench_lanes() {
	echo "== lanes: mq-recv -n 0 -g g l1 l2 l3 | mq-ack (and --fair) over" \
	    "$RECV_N messages, a third a topic; against the same of one topic;" \
	    "best of $RUNS"
	db=$TMP/db/lanes1.db db3=$TMP/db/lanes3.db
	one_best='' strict_best='' fair_best='' one_all='' strict_all=''
	fair_all='' i=1
	while [ "$i" -le "$RUNS" ]; do
		load "$db" "$RECV_N"
		recv_ack "$db" -g g t
		[ "$(lag_of "$db" t g)" = 0 ] || die "t/g has lag, not 0"
		one_all="$one_all $(decimal "$us" 1000000)"
		keep_min one_best "$us"

		load3 "$db3"
		recv_ack "$db3" -g g l1 l2 l3
		strict_all="$strict_all $(decimal "$us" 1000000)"
		keep_min strict_best "$us"
		lanes_drained "$db3"
		load3 "$db3"	# each side from the same start, as one topic's
		recv_ack "$db3" -g g --fair l1 l2 l3
		fair_all="$fair_all $(decimal "$us" 1000000)"
		keep_min fair_best "$us"
		lanes_drained "$db3"
		i=$((i + 1))
	done
	rm -f "$db" "$db"-* "$db3" "$db3"-*
	lanes_figs "$RECV_N"
}

# exec: a handler per message, 4 at once, against xargs doing the same.
bench_exec() {
	echo "== exec: mq-recv -n $EXEC_N -j 4 -g g t -- true against" \
	    "seq $EXEC_N | xargs -P 4 -n 1 true; best of $RUNS"
	db=$TMP/db/exec.db
	mq_best='' x_best='' mq_all='' x_all='' i=1
	while [ "$i" -le "$RUNS" ]; do
		load "$db" "$EXEC_N"
		tic
		bounded "$B/mq-recv" -d "$db" -n "$EXEC_N" -j 4 -g g t -- true ||
		    die "mq-recv -- true failed"
		toc
		l=$(lag_of "$db" t g)
		[ "$l" = 0 ] || die "group g has lag ${l:-unknown}, not 0"
		mq_all="$mq_all $(decimal "$us" 1000000)"
		keep_min mq_best "$us"

		seq "$EXEC_N" >"$TMP/exec.in"
		tic
		bounded xargs -P 4 -n 1 true <"$TMP/exec.in" || die "xargs failed"
		toc
		x_all="$x_all $(decimal "$us" 1000000)"
		keep_min x_best "$us"
		i=$((i + 1))
	done
	rm -f "$db" "$db"-*
	echo "  seconds of each run: mq:$mq_all; xargs:$x_all"
	fig exec mq "$(decimal "$mq_best" 1000000)" xargs \
	    "$(decimal "$x_best" 1000000)" s "$(ratio "$x_best" "$mq_best")" \
	    '>=' 1.0
}

# out_latency NAME [OPTION]: a long-lived producer (ticker | mq-send) and
# mq-recv -f [OPTION] -g g t whose output goes to outstamp through a fifo:
# write to output line, in us, into $TMP/NAME.us; the raw commit latency
# (half before, half after) into $TMP/NAME.raw.
out_latency() {
	name=$1
	shift
	db=$TMP/db/$name.db
	us_f=$TMP/$name.us
	raw_f=$TMP/$name.raw
	fifo=$TMP/$name.fifo
	helper ticker outstamp
	sqlhelper rawq
	: >"$us_f"
	: >"$raw_f"
	raw_commits "$raw_f" $((LAT_N / 2))
	"$B/mq-topic" -d "$db" create t >/dev/null || die "cannot create t"
	"$B/mq-topic" -d "$db" group t g >/dev/null || die "cannot create t/g"
	mkfifo "$fifo" || die "cannot make $fifo"
	"$TMP/bin/outstamp" "$LAT_N" "$us_f" <"$fifo" &
	stamper=$!
	bg_add $stamper
	"$B/mq-recv" -d "$db" -f -g g "$@" t >"$fifo" &
	bg_add $!
	wait_consumers "$db" 1
	"$TMP/bin/ticker" "$LAT_N" 5 20 | bounded "$B/mq-send" -q -d "$db" t ||
	    die "the producer failed"
	wait_gone "$stamper" 10 || :
	stop_bg
	raw_commits "$raw_f" $((LAT_N - LAT_N / 2))
	rm -f "$fifo"
}

# lat_line LABEL FILE: "LABEL: N samples, p50 .. ms, p90, p99, max".
lat_line() {
	# shellcheck disable=SC2046 # dist prints "N P50 P90 P99 MAX"
	set -- "$1" $(dist "$2")
	printf '  %-34s %4d samples, p50 %s ms, p90 %s ms, p99 %s ms, max %s ms\n' \
	    "$1:" "$2" "$(us2ms "$3")" "$(us2ms "$4")" "$(us2ms "$5")" \
	    "$(us2ms "$6")"
}

p99() {
	dist "$1" | awk '{ print $4 }'
}

# follow: producer's write to mq-recv -f's output line (a lease).
bench_follow() {
	echo "== follow: ticker | mq-send t (a line every 5-20 ms) to the output" \
	    "line of mq-recv -f -g g t; $LAT_N messages; raw: one FULL commit"
	out_latency follow
	lat_line "mq-recv -f, write to output line" "$TMP/follow.us"
	lat_line "rawq commit, one message" "$TMP/follow.raw"
	n=$(wc -l <"$TMP/follow.us")
	[ "$n" -eq "$LAT_N" ] || echo "  (only $n of $LAT_N lines came out)"
	mq=$(p50 "$TMP/follow.us") raw=$(p50 "$TMP/follow.raw")
	[ "$n" -eq "$LAT_N" ] || mq=999999999
	fig follow-p50 mq "$(us2ms "$mq")" raw "$(us2ms "$raw")" ms \
	    "$(ratio "$mq" "$raw")" '<=' 1.5
	mq=$(p99 "$TMP/follow.us") raw=$(p99 "$TMP/follow.raw")
	[ "$n" -eq "$LAT_N" ] || mq=999999999
	fig follow-p99 mq "$(us2ms "$mq")" raw "$(us2ms "$raw")" ms \
	    "$(ratio "$mq" "$raw")" '<=' 3
}

# followack: the same with -A (its ack synced before the line is out).
bench_followack() {
	echo "== followack: ticker | mq-send t to the output line of" \
	    "mq-recv -f -A -g g t; $LAT_N messages; raw: one FULL commit"
	out_latency followack -A
	lat_line "mq-recv -f -A, write to output line" "$TMP/followack.us"
	lat_line "rawq commit, one message" "$TMP/followack.raw"
	n=$(wc -l <"$TMP/followack.us")
	[ "$n" -eq "$LAT_N" ] || echo "  (only $n of $LAT_N lines came out)"
	mq=$(p50 "$TMP/followack.us") raw=$(p50 "$TMP/followack.raw")
	[ "$n" -eq "$LAT_N" ] || mq=999999999
	fig followack-p50 mq "$(us2ms "$mq")" raw "$(us2ms "$raw")" ms \
	    "$(ratio "$mq" "$raw")" '<=' 2.5
}

# latency: a waiting exec-mode consumer (mq-recv -f -n 0 -- bench/stamp)
# and one long-running mq-send fed by bench/ticker (a line every 5-20 ms,
# at random, carrying its send time): send to handler start, against a
# raw commit plus a spawn of stamp alone (bench/spawnlat.c), each
# measured half before and half after.
bench_latency() {
	db=$TMP/db/lat.db
	us_f=$TMP/lat.us
	echo "== latency: send to handler start, mq-recv -f -n 0 -g g t --" \
	    "stamp, $LAT_N messages at random 5-20 ms; raw: one FULL commit" \
	    "+ one spawn of stamp"
	helper ticker stamp spawnlat
	sqlhelper rawq
	: >"$us_f"
	: >"$TMP/lat.raw"
	: >"$TMP/lat.spawn"
	half=$((LAT_N / 2))
	raw_commits "$TMP/lat.raw" "$half"
	"$TMP/bin/spawnlat" "$half" 5 20 "$TMP/bin/stamp" "$TMP/lat.spawn" ||
	    die "spawnlat failed"
	"$B/mq-topic" -d "$db" create t >/dev/null || die "cannot create t"
	"$B/mq-topic" -d "$db" group t g >/dev/null || die "cannot create t/g"
	"$B/mq-recv" -d "$db" -f -n 0 -g g t -- "$TMP/bin/stamp" "$us_f" &
	bg_add $!
	wait_consumers "$db" 1
	"$TMP/bin/ticker" "$LAT_N" 5 20 | bounded "$B/mq-send" -q -d "$db" t ||
	    die "the producer failed"
	_w=0
	while [ "$(wc -l <"$us_f")" -lt "$LAT_N" ] && [ "$_w" -lt 200 ]; do
		sleep 0.05
		_w=$((_w + 1))
	done
	stop_bg
	raw_commits "$TMP/lat.raw" $((LAT_N - half))
	"$TMP/bin/spawnlat" $((LAT_N - half)) 5 20 "$TMP/bin/stamp" \
	    "$TMP/lat.spawn" || die "spawnlat failed"
	lat_line "mq-recv -f -- stamp, to its start" "$us_f"
	lat_line "rawq commit, one message" "$TMP/lat.raw"
	lat_line "spawnlat, one spawn of stamp" "$TMP/lat.spawn"
	n=$(wc -l <"$us_f")
	[ "$n" -eq "$LAT_N" ] || echo "  (only $n of $LAT_N handlers ran)"
	mq=$(p50 "$us_f")
	[ "$n" -eq "$LAT_N" ] || mq=999999999
	raw=$(($(p50 "$TMP/lat.raw") + $(p50 "$TMP/lat.spawn")))
	fig latency-p50 mq "$(us2ms "$mq")" "raw commit + spawn" \
	    "$(us2ms "$raw")" ms "$(ratio "$mq" "$raw")" '<=' 1.5
}

# cpu_of PID ...: utime + stime of the PIDs, summed, in clock ticks, and
# their time on a CPU from /proc/PID/schedstat in us (0 without it).
cpu_of() {
	_st=
	_ss=
	for _p; do
		_st="$_st /proc/$_p/stat"
		[ ! -r "/proc/$_p/schedstat" ] || _ss="$_ss /proc/$_p/schedstat"
	done
	# shellcheck disable=SC2086 # lists of files
	_t=$(awk '{ sub(/.*\) /, ""); t += $12 + $13 } END { print t + 0 }' $_st)
	_s=0
	# shellcheck disable=SC2086 # a list of files
	[ -z "$_ss" ] ||
	    _s=$(awk '{ t += $1 } END { printf "%d", t / 1000 }' $_ss)
	echo "$_t $_s"
}

# idle: FOLLOWERS followers (mq-recv -f -g g tN, other topics) while one
# long-lived producer commits IDLE_N messages to topic p, one a commit;
# the producer also runs with no followers, alternately, RUNS times each.
bench_idle() {
	db=$TMP/db/idle.db
	echo "== idle: $FOLLOWERS followers (mq-recv -f -g g tN) of quiet topics" \
	    "while one producer commits $IDLE_N messages to its own; best of $RUNS"
	[ -r /proc/self/stat ] || die "no /proc: cannot read CPU times"
	helper prod
	tck=$(getconf CLK_TCK)
	"$B/mq-topic" -d "$db" create p >/dev/null || die "cannot create p"
	k=1
	while [ "$k" -le "$FOLLOWERS" ]; do
		"$B/mq-topic" -d "$db" create "t$k" >/dev/null || die "cannot create t$k"
		k=$((k + 1))
	done
	best0='' best1='' all0='' all1='' ticks=0 sched=0 span=0 i=1
	while [ "$i" -le "$RUNS" ]; do
		us_rate "the producer" "$TMP/bin/prod" 1 "$IDLE_N" - \
		    "$B/mq-send" -d "$db" p
		keep_max best0 "$r"
		all0="$all0 $r"

		pids=
		k=1
		while [ "$k" -le "$FOLLOWERS" ]; do
			"$B/mq-recv" -d "$db" -f -g g "t$k" >/dev/null &
			bg_add $!
			pids="$pids $!"
			k=$((k + 1))
		done
		wait_consumers "$db" "$FOLLOWERS"
		# settle, then start at a random moment, so the followers'
		# periodic wakes fall anywhere in the producer's run
		sleep "$(awk -v s="$(now_ns)" \
		    'BEGIN { srand(s % 1000000007); printf "%.2f", 1 + rand() }')"
		# shellcheck disable=SC2046,SC2086 # a list of pids; "TICKS US"
		set -- $(cpu_of $pids)
		c0=$1 s0=$2
		us_rate "the producer" "$TMP/bin/prod" 1 "$IDLE_N" - \
		    "$B/mq-send" -d "$db" p
		span=$((span + r_us))
		keep_max best1 "$r"
		all1="$all1 $r"
		# shellcheck disable=SC2046,SC2086 # a list of pids; "TICKS US"
		set -- $(cpu_of $pids)
		ticks=$((ticks + $1 - c0)) sched=$((sched + $2 - s0))
		if [ "$i" = 1 ]; then
			# shellcheck disable=SC2046,SC2086 # pids; "TICKS US"
			set -- $(cpu_of $pids)
			c0=$1 s0=$2
			sleep "$IDLE"
			# shellcheck disable=SC2046,SC2086 # pids; "TICKS US"
			set -- $(cpu_of $pids)
			silent_ticks=$(($1 - c0)) silent_sched=$(($2 - s0))
		fi
		for p in $pids; do
			kill -0 "$p" 2>/dev/null || die "a follower exited early"
		done
		stop_bg
		i=$((i + 1))
	done
	echo "  producer msg/s of each run: no followers:$all0;" \
	    "$FOLLOWERS followers:$all1"
	idle_fig idle-cpu "$ticks" "$sched" "$span" "during the producer's runs"
	fig idle-rate mq "$best1" "no followers" "$best0" msg/s \
	    "$(ratio "$best1" "$best0")" '>=' 0.9
	idle_fig idle-silent "$silent_ticks" "$silent_sched" $((IDLE * 1000000)) \
	    "over $IDLE s with no message"
}

# idle_fig NAME TICKS SCHED_US SPAN_US WHEN: the followers' share of one
# core, judged on the larger of utime + stime (clock ticks, each process's
# truncated, so a hundred processes that ran under a tick each show 0) and
# /proc/PID/schedstat's time on a CPU (ns).
idle_fig() {
	_pt=$(awk -v t="$2" -v k="$tck" -v s="$4" \
	    'BEGIN { printf "%.2f", 100 * t / k / (s / 1e6) }')
	_ps=$(awk -v u="$3" -v s="$4" 'BEGIN { printf "%.2f", 100 * u / s }')
	_p=$(awk -v a="$_pt" -v b="$_ps" 'BEGIN { print (a > b ? a : b) }')
	result "$1" "$FOLLOWERS followers $_p% of a core $5 (schedstat $(us2ms "$3") ms, $2 ticks, in $(decimal "$4" 1000000) s) (target < 5%)" \
	    "$(awk -v p="$_p" 'BEGIN { print (p < 5 ? 1 : 0) }')"
}

# rss: peak RSS of each program streaming RSS_N messages, beside the raw
# program doing the same work (bench/maxrss.c: wait4's ru_maxrss).
bench_rss() {
	db=$TMP/db/rss.db
	echo "== rss: peak RSS streaming $RSS_N messages (wait4 ru_maxrss);" \
	    "raw: raw.c, rawq scan, rawq delete"
	helper maxrss
	sqlhelper raw rawq
	in=$(lines "$RSS_N")
	m=$TMP/bin/maxrss
	rm -f "$db" "$db"-* "$TMP"/rawr.db*
	"$m" "$TMP/rss.send" "$B/mq-send" -q -d "$db" t <"$in" ||
	    die "mq-send failed"
	"$B/mq-topic" -d "$db" group t g >/dev/null || die "cannot create group g"
	"$m" "$TMP/rss.replay" "$B/mq-replay" -d "$db" t >/dev/null ||
	    die "mq-replay failed"
	"$m" "$TMP/rss.recv" "$B/mq-recv" -d "$db" -n 0 -A -g g t >/dev/null ||
	    die "mq-recv -A failed"
	l=$(lag_of "$db" t g)
	[ "$l" = 0 ] || die "group g has lag ${l:-unknown}, not 0"
	"$m" "$TMP/rawrss.send" "$TMP/bin/raw" "$TMP/rawr.db" <"$in" ||
	    die "raw failed"
	"$m" "$TMP/rawrss.replay" "$TMP/bin/rawq" scan "$TMP/rawr.db" >/dev/null ||
	    die "rawq scan failed"
	"$m" "$TMP/rawrss.recv" "$TMP/bin/rawq" delete "$TMP/rawr.db" 100 \
	    >/dev/null || die "rawq delete failed"
	rm -f "$db" "$db"-* "$TMP"/rawr.db*
	for w in send replay recv; do
		read -r kb t <"$TMP/rss.$w"
		read -r rkb rt <"$TMP/rawrss.$w"
		case $w in
		send) what="mq-send -q t < lines; raw.c" ;;
		replay) what="mq-replay t > /dev/null; rawq scan" ;;
		recv) what="mq-recv -n 0 -A > /dev/null; rawq delete 100" ;;
		esac
		echo "  $what: mq $(decimal "$t" 1000000) s, raw $(decimal "$rt" 1000000) s"
		result "rss-$w" "mq $(decimal "$kb" 1024 1) MB, raw $(decimal "$rkb" 1024 1) MB, ratio $(ratio "$kb" "$rkb") (target: mq < 16 MB)" \
		    $((kb < 16 * 1024 ? 1 : 0))
	done
}

# lag_load DB BIG: 10 topics (topic0..topic9), topic0 of BIG messages, the
# others of 1,000; 3 groups each, every group with 500 acked and 100 in
# flight; g2 also has 5 dead letters and g3 10 deliveries waiting for a
# retry.  Group gc of topic0, at its start, is for claims.
lag_load() {
	_k=0
	while [ "$_k" -lt 10 ]; do
		_t=topic$_k
		_n=1000
		[ "$_k" -gt 0 ] || _n=$2
		gen "$_n" | bounded "$B/mq-send" -q -d "$1" "$_t" ||
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
	bounded "$B/mq-topic" -d "$1" group topic0 gc >/dev/null ||
	    die "cannot create topic0/gc"
	# Whatever WAL the setup leaves is read whole by each program that
	# opens the database idle (SQLite rebuilds its index): 1.5 ms for
	# 4 MB, which before sq_wal_close it could be, swung the ratios
	# from 0.5 to 1.6.  Both databases start with none.
	LAG_WAL=$({ wc -c <"$1-wal"; } 2>/dev/null || echo 0)
	sqlite3 "$1" 'PRAGMA wal_checkpoint(TRUNCATE)' >/dev/null ||
	    die "cannot checkpoint $1"
}

# lag: mq-lag's three outputs and a claim+ack of 10 messages
# (mq-recv -n 10 | mq-ack, through sh -c), best of BEST, with topic0 of
# 1,000 and of LAG_N messages, the same groups and delivery state: costs
# should follow topics, groups and deliveries, not the size of the log.
# Runs alternate between the two databases (BEST in rounds of 3).  The
# targets are on wall time; CPU time (user + system) is shown beside it,
# as it is less disturbed by other load on the machine.
bench_lag() {
	small=1000
	echo "== lag: mq-lag and claim+ack of 10 on 10 topics x 3 groups" \
	    "(500 acked, 100 in flight, some dead or retrying), topic0 of" \
	    "$small vs $LAG_N messages, best of $BEST"
	helper besttime
	for n in $small $LAG_N; do
		db=$TMP/db/lag$n.db
		t0=$(now_ms)
		lag_load "$db" "$n"
		t1=$(now_ms)
		echo "  setup, topic0 of $n messages: $(decimal $((t1 - t0)) 1000) s;" \
		    "its -wal of $(decimal "$LAG_WAL" 1048576 1) MB checkpointed"
		for f in table json prometheus claim; do
			eval "wall_${f}_$n= cpu_${f}_$n= all_${f}_$n="
		done
	done
	before=$(lag_of "$TMP/db/lag$LAG_N.db" topic0 gc)
	# shellcheck disable=SC2016 # expanded by sh -c
	claim='"$1" -d "$3" -n 10 -g gc topic0 | "$2" -d "$3"'
	done_runs=0
	while [ "$done_runs" -lt "$BEST" ]; do
		k=$((BEST - done_runs))
		[ "$k" -le 3 ] || k=3
		for n in $small $LAG_N; do
			db=$TMP/db/lag$n.db
			for f in table json prometheus claim; do
				case $f in
				table) set -- "$B/mq-lag" -d "$db" ;;
				claim) set -- sh -c "$claim" sh "$B/mq-recv" \
				    "$B/mq-ack" "$db" ;;
				*) set -- "$B/mq-lag" -d "$db" "--$f" ;;
				esac
				out=$("$TMP/bin/besttime" "$k" "$@") ||
				    die "$f on $db failed"
				# shellcheck disable=SC2086 # "WALL CPU RUN..."
				set -- $out
				eval "keep_min wall_${f}_$n $1; keep_min cpu_${f}_$n $2"
				shift 2
				eval "all_${f}_$n=\"\$all_${f}_$n $*\""
			done
		done
		done_runs=$((done_runs + k))
	done
	after=$(lag_of "$TMP/db/lag$LAG_N.db" topic0 gc)
	[ $((before - after)) -eq $((10 * BEST)) ] ||
	    die "claim+ack settled $((before - after)) messages, not $((10 * BEST))"
	printf '  %-26s %12s %12s %12s %12s\n' "best of $BEST" "mq-lag" \
	    "--json" "--prometheus" "claim+ack"
	# shellcheck disable=SC2154 # a, b, c, d are set by eval
	for k in wall cpu; do
		for n in $small $LAG_N; do
			eval "a=\$${k}_table_$n b=\$${k}_json_$n" \
			    "c=\$${k}_prometheus_$n d=\$${k}_claim_$n"
			printf '  %-26s %9s ms %9s ms %9s ms %9s ms\n' \
			    "$k, topic0 of $n" "$(decimal "$a" 1000 2)" \
			    "$(decimal "$b" 1000 2)" "$(decimal "$c" 1000 2)" \
			    "$(decimal "$d" 1000 2)"
		done
		l=
		for f in table json prometheus claim; do
			eval "a=\$${k}_${f}_$small b=\$${k}_${f}_$LAG_N"
			l="$l $(printf '%12s' "$(ratio "$b" "$a")x")"
		done
		printf '  %-26s%s\n' "$k, ratio" "$l"
	done
	for f in table json prometheus claim; do
		eval "echo \"  wall of each run, $f (us): $small:\$all_${f}_$small;" \
		    "$LAG_N:\$all_${f}_$LAG_N\""
	done
	for f in table json prometheus claim; do
		eval "a=\$wall_${f}_$small b=\$wall_${f}_$LAG_N"
		case $f in
		table) name=lag ;;
		prometheus) name='lag-prom' ;;
		claim) name='claim-ack' ;;
		*) name="lag-$f" ;;
		esac
		fig "$name" "$LAG_N-msg topic" "$(us2ms "$b")" "$small-msg topic" \
		    "$(us2ms "$a")" ms "$(ratio "$b" "$a")" '<=' 1.3
	done
	rm -f "$TMP"/db/lag*
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
	lag=$(lag_of "$db" t g)
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
	# shellcheck disable=SC2046 # awk prints "BASE_MS BASE_FAIL DURING_FAIL"
	set -- $(awk -v p0="$p0" -v p1="$p1" -v dir="$TMP" '
		{ us = sprintf("%d", ($2 - $1) / 1000) }
		NR == 1 { first = $1 }
		$2 < p0 { print us > (dir "/base.us"); if ($3) fb++ }
		$1 < p1 && $2 > p0 { print us > (dir "/during.us"); if ($3) fd++ }
		END { printf "%d %d %d\n", (p0 - first) / 1e6, fb, fd }' "$out")
	base_ms=$1 base_fail=$2 during_fail=$3
	printf '  mq-purge t: %s s, deleted %s messages\n' \
	    "$(decimal $(((p1 - p0) / 1000000)) 1000)" "${deleted:-0}"
	# shellcheck disable=SC2046 # dist prints "N P50 P90 P99 MAX"
	set -- $(dist "$TMP/base.us")
	base_n=$1 base_worst=$5
	printf '  producer, no purge (%s s):  %4d sends, p50 %s ms, p99 %s ms,' \
	    "$(decimal "$base_ms" 1000 1)" "$1" "$(us2ms "$2")" "$(us2ms "$4")"
	printf ' worst %s ms, %d failed\n' "$(us2ms "$5")" "$base_fail"
	# shellcheck disable=SC2046 # dist prints "N P50 P90 P99 MAX"
	set -- $(dist "$TMP/during.us")
	printf '  producer, during the purge: %4d sends, p50 %s ms, p99 %s ms,' \
	    "$1" "$(us2ms "$2")" "$(us2ms "$4")"
	printf ' worst %s ms, %d failed\n' "$(us2ms "$5")" "$during_fail"
	echo "  (at the no-purge rate, ~$((base_n * ((p1 - p0) / 1000000) / base_ms))" \
	    "sends would have fit in the purge's time)"
	result purge "worst send latency during the purge $(us2ms "$5") ms, with no purge $(us2ms "$base_worst") ms, $during_fail failed (target < 200 ms, none failed)" \
	    $(($5 < 200000 && during_fail == 0 ? 1 : 0))
	rm -f "$db" "$db"-*
}

echo "mq bench: $(uname -sm), $(getconf _NPROCESSORS_ONLN) CPUs, sqlite $(pkg-config --modversion sqlite3)," \
    "$(df -PT "$TMP" | awk 'NR == 2 { print $2 }') at ${TMPDIR:-/tmp}," \
    "load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown);" \
    "mq durable defaults; raw programs synchronous=FULL, WAL"
start=$(now_ms)
# shellcheck disable=SC2086 # the list of names is meant to split
[ $# -gt 0 ] || set -- $BENCHES
for b in "$@"; do
	"bench_$b"
done
end=$(now_ms)
echo "== summary: $PASSED PASS, $FAILED FAIL${FAILS:+ (FAIL:$FAILS)}" \
    "in $(decimal $((end - start)) 1000 1) s"
[ ! -s "$TMP/fails" ] || sed 's/^/  /' "$TMP/fails"
