#!/bin/sh
# bench/pg.sh: mq's benchmarks on PostgreSQL, each beside a raw libpq
# program (bench/rawpg.c) doing the same work against the same server in
# the same run, with a target (issue 12).
#
# usage: sh bench/pg.sh BUILD_DIR [BENCH ...]
#
# Starts a throwaway cluster of its own (t/pgcluster.sh: fsync on,
# synchronous_commit on, Unix socket) in a temporary directory and stops
# it on every exit.  mq runs in a schema of its own, made afresh for each
# benchmark; rawpg in another.  When the build has no PostgreSQL support
# or no server is installed, says so in one line and exits 0.
#
# With no BENCH, runs them all, in this order:
#   send       mq-send -q t < lines (batches of up to 10,000 lines)
#              against rawpg send: 10,000 rows a transaction, one
#              multi-row INSERT each
#   recvack    mq-recv -n 0 -g g t | mq-ack against rawpg delete: WITH c
#              AS (SELECT ... LIMIT 100 FOR UPDATE SKIP LOCKED) DELETE ...
#              RETURNING, a transaction per 100, until empty
#   autoack    mq-recv -n 0 -A -g g t against the same rawpg delete
#   lanes      mq-recv -n 0 -g g l1 l2 l3 | mq-ack, the same messages
#              spread over three topics (strictly in order, and --fair),
#              against recvack's mq-recv of one topic
#   producers  1 and 8 long-lived mq-send fed on pipes, one message in
#              flight each (bench/prod.c), against rawpg commit: 1 and 8
#              clients (forked connections; not pgbench), each one row
#              per transaction
#   wake       producer's write (ticker | mq-send t) to the output line of
#              a waiting mq-recv -f -g g t (bench/outstamp.c), against a
#              raw LISTEN/NOTIFY round trip (rawpg wake: BEGIN, INSERT,
#              pg_notify, COMMIT on one connection; the time from before
#              BEGIN to the notification's arrival on the other)
#   trips      round trips per operation (MQ_PG_TRIPS=1: each program
#              prints its count as it closes), by difference: a send
#              batch, a claim, a settle batch
#
# Each figure is one line, "NAME: mq X UNIT, raw Y UNIT, ratio R (target
# OP T) PASS|FAIL", and a summary at the end counts them and repeats the
# FAIL lines.  The figures and their targets:
#   send           msg/s >= 0.7x rawpg send's
#   recvack        msg/s >= 0.7x rawpg delete's
#   autoack        msg/s >= 0.7x rawpg delete's
#   lanes, lanes-fair    3 lanes' msg/s >= 0.8x one topic's
#   producers-8    8 producers' msg/s >= 0.7x 8 rawpg clients'
#   wake-p50       p50 <= 2x the raw LISTEN/NOTIFY round trip's p50
# trips prints its counts on one line, "trips: send batch N, claim N,
# settle batch N (the sizes)", and the same for larger batches below it;
# they have no target.
# Targets are reported, not enforced.  An mq command that fails is a
# FAIL figure saying how ("not measured: ..."), on stderr too, and the
# run goes on; the exit status is then 1, as it is when anything else
# fails (which stops the run, with a message on stderr).
#
# Noise: throughput figures run each side BENCH_PG_RUNS times, mq and raw
# alternately, and report each side's best run; every run is listed.
# wake takes BENCH_PG_LAT_N samples on each side, the raw half just
# before and half just after mq's, and compares percentiles.  Tables are
# ANALYZEd after each load, mq's and raw's alike, before the timed part.
#
# Environment (sizes; every one a positive integer):
#   BENCH_PG_RUNS       runs per side of the throughput figures (default 3)
#   BENCH_PG_N          lines of send (default 200000)
#   BENCH_PG_RECV_N     messages of recvack, autoack and lanes (default
#                       20000)
#   BENCH_PG_PROD_N     messages per producer of producers (default 500)
#   BENCH_PG_PRODUCERS  producers of the concurrent side (default 8)
#   BENCH_PG_LAT_N      samples per side of wake (default 300, sent at
#                       random 5-20 ms)
#   BENCH_TIMEOUT       seconds any one step may take (default 600)
#   CC, TMPDIR, PG_BINDIR (the server's bin directory, as for
#   t/pgcluster.sh)
#
# A new benchmark is a function bench_NAME plus its name in BENCHES.

set -eu

BENCHES="send recvack autoack lanes producers wake trips"
RUNS=${BENCH_PG_RUNS:-3}
N=${BENCH_PG_N:-200000}
RECV_N=${BENCH_PG_RECV_N:-20000}
PROD_N=${BENCH_PG_PROD_N:-500}
PRODUCERS=${BENCH_PG_PRODUCERS:-8}
LAT_N=${BENCH_PG_LAT_N:-300}
TO=${BENCH_TIMEOUT:-600}
CC=${CC:-cc}
SEND_BATCH=10000	# BATCH_MAX of cmd/mq-send.c, BATCH of bench/rawpg.c
RAW_BATCH=100		# rawpg delete's transactions

die() {
	echo "bench: $*" >&2
	exit 1
}

SRC=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$SRC/lib.sh"

[ $# -ge 1 ] || die "usage: sh bench/pg.sh BUILD_DIR [$(echo "$BENCHES" | tr ' ' '|') ...]"
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
for v in "BENCH_PG_RUNS=$RUNS" "BENCH_PG_N=$N" "BENCH_PG_RECV_N=$RECV_N" \
    "BENCH_PG_PROD_N=$PROD_N" "BENCH_PG_PRODUCERS=$PRODUCERS" \
    "BENCH_PG_LAT_N=$LAT_N" "BENCH_TIMEOUT=$TO"; do
	case ${v#*=} in ''|*[!0-9]*|0*) die "invalid $v: want a positive integer" ;; esac
done
[ "$LAT_N" -ge 2 ] || die "invalid BENCH_PG_LAT_N '$LAT_N': at least 2"

# Not run (exit 0) without PostgreSQL support or a server, as t/suite.sh.
if "$B/mq-lag" -d 'postgresql:///mq?host=/nonexistent' 2>&1 >/dev/null |
    grep -q 'no PostgreSQL support'; then
	echo "bench (postgresql): not run: this build has no PostgreSQL support (make deps installs libpq-dev)"
	exit 0
fi
if [ -n "${PG_BINDIR-}" ]; then
	[ -x "$PG_BINDIR/initdb" ]
else
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
fi || {
	echo "bench (postgresql): not run: no PostgreSQL server (make deps installs postgresql-15)"
	exit 0
}
command -v psql >/dev/null || die "no psql (t/pgcluster.sh needs it)"
pkg-config --exists libpq || die "pkg-config finds no libpq: cannot build bench/rawpg.c"

TMP=
PGDIR=
cleanup() {
	stop_bg
	[ -z "$PGDIR" ] || sh "$SRC/../t/pgcluster.sh" stop "$PGDIR" || :
	[ -z "$TMP" ] || rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

TMP=$(mktemp -d "${TMPDIR:-/tmp}/mq-pgbench.XXXXXX") || die "cannot make a temporary directory"
chmod 711 "$TMP"	# the server may run as nobody (t/pgcluster.sh)
mkdir "$TMP/bin" || die "cannot populate $TMP"
PGDIR=$TMP/pg
sh "$SRC/../t/pgcluster.sh" start "$PGDIR" >"$TMP/env" ||
    die "cannot start a PostgreSQL cluster (t/pgcluster.sh)"
# shellcheck disable=SC1091 # written just now by t/pgcluster.sh
. "$TMP/env"

# adm ARG...: psql as the superuser, into database mq.
adm() {
	psql -X -q -v ON_ERROR_STOP=1 -h "$MQ_PG_DIR" -p "$MQ_PG_PORT" \
	    -U postgres -d mq "$@"
}
# url SCHEMA: role mq's connection, over the socket, in SCHEMA.
url() {
	echo "postgresql:///mq?host=$MQ_PG_DIR&port=$MQ_PG_PORT&user=mq&options=-csearch_path%3D$1"
}
# fresh SCHEMA: SCHEMA made again, empty, owned by role mq.
fresh() {
	adm -c "SET client_min_messages = warning" \
	    -c "DROP SCHEMA IF EXISTS $1 CASCADE" \
	    -c "CREATE SCHEMA $1 AUTHORIZATION mq" ||
	    die "cannot make schema $1"
}
# analyze: fresh statistics for every table, mq's and raw's alike.
analyze() {
	adm -c ANALYZE || die "ANALYZE failed"
}
MQ_URL=$(url mqb)
RAW=$(url rawb)
# MQ_DB points into the cluster, so no command can reach the user's queue.
MQ_DB=$MQ_URL
export MQ_DB
unset MQ_SYNC MQ_PG_TRIPS	# durable defaults; no counts on stderr
fresh rawb

BROKEN=0

# rawpg, linked with libpq, is built (each run) into BUILD_DIR/bench/.
RAWPG=$B/bench/rawpg
mkdir -p "$B/bench" || die "cannot make $B/bench"
# shellcheck disable=SC2046 # pkg-config output is meant to split
"$CC" -O2 -Wall -Wextra $(pkg-config --cflags libpq) -o "$RAWPG" \
    "$SRC/rawpg.c" $(pkg-config --libs libpq) ||
    die "cannot build bench/rawpg.c"
rawpg() {
	bounded "$RAWPG" "$@" || die "rawpg $1 failed"
}


# status ST: an exit status in words.
status() {
	if [ "$1" -eq 124 ] && command -v timeout >/dev/null; then
		echo "timed out after ${TO}s"
	elif [ "$1" -gt 128 ]; then
		echo "killed by SIG$(kill -l $(($1 - 128)) 2>/dev/null || echo $(($1 - 128)))"
	else
		echo "exit status $1"
	fi
}

# broken NAME WHAT: an mq command failed, so figure NAME cannot be
# measured: a FAIL line saying so (and on stderr), and the run goes on.
broken() {
	BROKEN=$((BROKEN + 1))
	echo "bench: $1: $2" >&2
	result "$1" "not measured: $2" 0
}



# stored TOPIC: "COUNT DISTINCT MIN MAX" of the offsets stored in mq's
# msg table for TOPIC, read by the superuser (a check of what mq-send
# reported, independent of mq's own counters).
stored() {
	adm -A -t -F ' ' -c "SELECT count(*), count(DISTINCT m.off),
	    coalesce(min(m.off), 0), coalesce(max(m.off), 0) FROM mqb.msg m
	    JOIN mqb.topic t ON t.id = m.topic WHERE t.name = '$1'"
}

# mq_load NAME N: a fresh mq schema with topic t of N 100-byte messages
# (mq-send -q t < lines), checked, and ANALYZEd; 1 (and a broken NAME
# figure) when mq-send failed.
mq_load() {
	fresh mqb
	_st=0
	bounded "$B/mq-send" -q t <"$(lines "$2")" || _st=$?
	if [ "$_st" != 0 ]; then
		broken "$1" "loading $2 messages: mq-send -q t < lines: $(status "$_st")"
		return 1
	fi
	_s=$(stored t)
	if [ "$_s" != "$2 $2 1 $2" ]; then
		broken "$1" "loading $2 messages: mq-send stored (count, distinct, min, max) $_s"
		return 1
	fi
	analyze
}

# lag_of TOPIC GROUP: the group's lag.
lag_of() {
	"$B/mq-lag" --json "$1" "$2" | sed -n 's/.*"lag":\([0-9]*\).*/\1/p'
}

# wait_consumers COUNT: until COUNT consumers (or more) are listed.
wait_consumers() {
	_w=0
	until [ "$("$B/mq-lag" --json | awk -F'"consumers":' \
	    '{ split($2, a, ","); n += a[1] } END { print n + 0 }')" -ge "$1" ]; do
		_w=$((_w + 1))
		[ "$_w" -lt 400 ] || return 1
		sleep 0.05
	done
}


# send: mq-send -q t < lines against rawpg send.
bench_send() {
	echo "== send: bulk load of $N 100-byte lines from stdin, batches of" \
	    "$SEND_BATCH a transaction; raw: one $SEND_BATCH-row INSERT a" \
	    "transaction; best of $RUNS"
	in=$(lines "$N")
	mq_best='' raw_best='' mq_all='' raw_all='' i=1
	while [ "$i" -le "$RUNS" ]; do
		fresh mqb
		"$B/mq-topic" create t >/dev/null || {
			broken send "mq-topic create t: $(status $?)"
			return 0
		}
		st=0
		tic
		bounded "$B/mq-send" -q t <"$in" || st=$?
		toc
		if [ "$st" != 0 ]; then
			broken send "mq-send -q t < lines: $(status "$st")"
			return 0
		fi
		got=$(stored t)
		if [ "$got" != "$N $N 1 $N" ]; then
			broken send "mq-send stored (count, distinct, min, max) $got, not $N $N 1 $N"
			return 0
		fi
		mq_all="$mq_all $(decimal "$us" 1000000)"
		keep_min mq_best "$us"

		rawpg init "$RAW"
		tic
		bounded "$RAWPG" send "$RAW" <"$in" || die "rawpg send failed"
		toc
		raw_all="$raw_all $(decimal "$us" 1000000)"
		keep_min raw_best "$us"
		i=$((i + 1))
	done
	echo "  seconds of each run: mq-send -q t < lines:$mq_all;" \
	    "rawpg send:$raw_all"
	mq=$(rate "$N" "$mq_best") raw=$(rate "$N" "$raw_best")
	fig send mq "$mq" raw "$raw" msg/s "$(ratio "$mq" "$raw")" '>=' 0.7
}

# consume NAME LABEL CMD...: the common part of recvack and autoack: CMD
# (a function, run with the group as $1) consumes the loaded topic; rawpg
# delete is its baseline.
consume() {
	name=$1 label=$2
	shift 2
	mq_best='' raw_best='' mq_all='' raw_all='' i=1
	while [ "$i" -le "$RUNS" ]; do
		mq_load "$name" "$RECV_N" || return 0
		"$B/mq-topic" group t g >/dev/null || {
			broken "$name" "mq-topic group t g: $(status $?)"
			return 0
		}
		tic
		if ! "$@" g; then
			broken "$name" "$label: $why"
			return 0
		fi
		toc
		l=$(lag_of t g)
		if [ "$l" != 0 ]; then
			broken "$name" "$label left group g a lag of ${l:-unknown}, not 0"
			return 0
		fi
		mq_all="$mq_all $(decimal "$us" 1000000)"
		keep_min mq_best "$us"

		rawpg init "$RAW"
		rawpg load "$RAW" "$RECV_N"
		analyze
		tic
		bounded "$RAWPG" delete "$RAW" "$RAW_BATCH" >"$TMP/raw.out" ||
		    die "rawpg delete failed"
		toc
		n=$(wc -l <"$TMP/raw.out")
		[ "$n" -eq "$RECV_N" ] || die "rawpg delete printed $n lines, not $RECV_N"
		raw_all="$raw_all $(decimal "$us" 1000000)"
		keep_min raw_best "$us"
		i=$((i + 1))
	done
	rm -f "$TMP/raw.out"
	echo "  seconds of each run: mq:$mq_all; rawpg delete:$raw_all"
	mq=$(rate "$RECV_N" "$mq_best") raw=$(rate "$RECV_N" "$raw_best")
	fig "$name" mq "$mq" raw "$raw" msg/s "$(ratio "$mq" "$raw")" '>=' 0.7
}

# recv_ack GROUP [ARG ...]: mq-recv -n 0 -g GROUP t | mq-ack (or ARGS for
# t); why says what failed.
recv_ack() {
	_st=0 _g=$1
	shift
	[ $# -gt 0 ] || set -- t
	{ bounded "$B/mq-recv" -n 0 -g "$_g" "$@"; echo $? >"$TMP/recv.st"; } |
	    bounded "$B/mq-ack" || _st=$?
	_rst=$(cat "$TMP/recv.st")
	if [ "$_rst" != 0 ]; then
		why="mq-recv: $(status "$_rst")"
		return 1
	fi
	if [ "$_st" != 0 ]; then
		why="mq-ack: $(status "$_st")"
		return 1
	fi
}

# recv_auto GROUP: mq-recv -n 0 -A -g GROUP t > /dev/null.
recv_auto() {
	_st=0
	bounded "$B/mq-recv" -n 0 -A -g "$1" t >/dev/null || _st=$?
	[ "$_st" = 0 ] || { why=$(status "$_st"); return 1; }
}

bench_recvack() {
	echo "== recvack: mq-recv -n 0 -g g t | mq-ack over $RECV_N messages;" \
	    "raw: DELETE ... RETURNING $RAW_BATCH a transaction (SKIP LOCKED);" \
	    "best of $RUNS"
	consume recvack "mq-recv -n 0 -g g t | mq-ack" recv_ack
}

bench_autoack() {
	echo "== autoack: mq-recv -n 0 -A -g g t > /dev/null over $RECV_N" \
	    "messages; raw: DELETE ... RETURNING $RAW_BATCH a transaction" \
	    "(SKIP LOCKED); best of $RUNS"
	consume autoack "mq-recv -n 0 -A -g g t" recv_auto
}

# timed NAME VAR GROUP ARG...: recv_ack GROUP ARG..., its time added to
# the list VAR_all and kept in VAR_best when the best; 1 (and a broken
# NAME figure) when it failed.
timed() {
	_n=$1 _v=$2
	shift 2
	tic
	if ! recv_ack "$@"; then
		broken "$_n" "mq-recv -n 0 -g $* | mq-ack: $why"
		return 1
	fi
	toc
	eval "${_v}_all=\"\$${_v}_all $(decimal "$us" 1000000)\""
	keep_min "${_v}_best" "$us"
}

# load3: a fresh schema of topics l1 l2 l3 sharing RECV_N messages, group
# g of each; 1 (said why) when it could not.
load3() {
	fresh mqb
	for l in 1 2 3; do	# the first takes what does not divide
		n=$((RECV_N / 3 + (l == 1 ? RECV_N % 3 : 0)))
		"$B/mq-send" -q "l$l" <"$(lines "$n")" || {
			broken lanes "loading l$l: $(status $?)"
			return 1
		}
		"$B/mq-topic" group "l$l" g >/dev/null || {
			broken lanes "mq-topic group l$l g: $(status $?)"
			return 1
		}
	done
	analyze
}

# lanes_drained: group g of every lane has nothing left; 1 (said) if not.
lanes_drained() {
	for l in l1 l2 l3; do
		[ "$(lag_of "$l" g)" = 0 ] || {
			broken lanes "$l/g was left a lag"
			return 1
		}
	done
}

# lanes: the same messages through mq-recv of one topic, and of three
# lanes with the messages spread over them, strictly and --fair.
bench_lanes() {
	echo "== lanes: mq-recv -n 0 -g g l1 l2 l3 | mq-ack (and --fair) over" \
	    "$RECV_N messages, a third a topic; against the same of one topic;" \
	    "best of $RUNS"
	one_best='' strict_best='' fair_best='' one_all='' strict_all=''
	fair_all='' i=1
	while [ "$i" -le "$RUNS" ]; do
		mq_load lanes "$RECV_N" || return 0
		"$B/mq-topic" group t g >/dev/null || {
			broken lanes "mq-topic group t g: $(status $?)"
			return 0
		}
		timed lanes one g || return 0
		[ "$(lag_of t g)" = 0 ] || {
			broken lanes "t/g was left a lag"
			return 0
		}

		load3 || return 0
		timed lanes strict g l1 l2 l3 || return 0
		lanes_drained || return 0
		load3 || return 0	# each side from the same start
		timed lanes-fair fair g --fair l1 l2 l3 || return 0
		lanes_drained || return 0
		i=$((i + 1))
	done
	lanes_figs "$RECV_N"
}

# producers: K long-lived mq-send processes, each fed one line at a time
# on a pipe and waited for (bench/prod.c), against K rawpg clients.
bench_producers() {
	echo "== producers: long-lived mq-send t, one 100-byte line then its" \
	    "offset, $PROD_N messages each; raw: rawpg commit, one INSERT a" \
	    "transaction; 1 and $PRODUCERS of each; best of $RUNS"
	helper prod
	fresh mqb
	"$B/mq-topic" create t >/dev/null || {
		broken "producers-$PRODUCERS" "mq-topic create t: $(status $?)"
		return 0
	}
	best1='' bestk='' raw1='' rawk='' all1='' allk='' allr1='' allrk='' i=1
	while [ "$i" -le "$RUNS" ]; do
		for k in 1 "$PRODUCERS"; do
			st=0
			out=$(bounded "$TMP/bin/prod" "$k" "$PROD_N" \
			    "$TMP/prod$k.us" "$B/mq-send" t) || st=$?
			if [ "$st" != 0 ]; then
				broken "producers-$PRODUCERS" "$k producers (prod $k $PROD_N mq-send t): $(status "$st")"
				return 0
			fi
			# shellcheck disable=SC2086 # "US COUNT"
			set -- $out
			r=$(rate "$2" "$1")
			if [ "$k" = 1 ]; then
				keep_max best1 "$r"
				all1="$all1 $r"
			else
				keep_max bestk "$r"
				allk="$allk $r"
			fi
			rawpg init "$RAW"
			rm -f "$TMP/raw$k.us"
			out=$(rawpg commit "$RAW" "$k" "$PROD_N" "$TMP/raw$k.us")
			# shellcheck disable=SC2086 # "US COUNT"
			set -- $out
			r=$(rate "$2" "$1")
			if [ "$k" = 1 ]; then
				keep_max raw1 "$r"
				allr1="$allr1 $r"
			else
				keep_max rawk "$r"
				allrk="$allrk $r"
			fi
		done
		i=$((i + 1))
	done
	echo "  msg/s of each run: 1 producer:$all1; rawpg 1 client:$allr1;" \
	    "$PRODUCERS producers:$allk; rawpg $PRODUCERS clients:$allrk"
	for k in 1 "$PRODUCERS"; do
		# shellcheck disable=SC2046 # dist prints "N P50 P90 P99 MAX"
		set -- $(dist "$TMP/prod$k.us")
		printf '  message latency, last run, %d: mq p50 %s ms, p99 %s ms;' \
		    "$k" "$(us2ms "$2")" "$(us2ms "$4")"
		# shellcheck disable=SC2046 # dist prints "N P50 P90 P99 MAX"
		set -- $(dist "$TMP/raw$k.us")
		printf ' raw p50 %s ms, p99 %s ms\n' "$(us2ms "$2")" "$(us2ms "$4")"
	done
	echo "  1 producer: mq $best1 msg/s, raw $raw1 msg/s, ratio" \
	    "$(ratio "$best1" "$raw1") (no target); $PRODUCERS over 1: mq" \
	    "$(ratio "$bestk" "$best1")x, raw $(ratio "$rawk" "$raw1")x"
	fig "producers-$PRODUCERS" mq "$bestk" raw "$rawk" msg/s \
	    "$(ratio "$bestk" "$rawk")" '>=' 0.7
}

# lat_line LABEL FILE: "LABEL: N samples, p50 .. ms, p90, p99, max".
lat_line() {
	# shellcheck disable=SC2046 # dist prints "N P50 P90 P99 MAX"
	set -- "$1" $(dist "$2")
	printf '  %-40s %4d samples, p50 %s ms, p90 %s ms, p99 %s ms, max %s ms\n' \
	    "$1:" "$2" "$(us2ms "$3")" "$(us2ms "$4")" "$(us2ms "$5")" \
	    "$(us2ms "$6")"
}

# wake: a long-lived producer (ticker | mq-send t) and a waiting
# mq-recv -f -g g t whose output goes to outstamp through a fifo: write to
# output line, in us; rawpg wake (half before, half after) beside it.
bench_wake() {
	echo "== wake: ticker | mq-send t (a line every 5-20 ms) to the output" \
	    "line of a waiting mq-recv -f -g g t; $LAT_N messages; raw:" \
	    "LISTEN/NOTIFY round trip (and then a claim, DELETE ... RETURNING)"
	helper ticker outstamp
	us_f=$TMP/wake.us
	fifo=$TMP/wake.fifo
	: >"$us_f"
	: >"$TMP/wake.raw"
	: >"$TMP/wake.claim"
	half=$((LAT_N / 2))
	rawpg init "$RAW"
	rawpg wake "$RAW" "$half" 5 20 "$TMP/wake.raw" "$TMP/wake.claim"
	fresh mqb
	if ! "$B/mq-topic" create t >/dev/null ||
	    ! "$B/mq-topic" group t g >/dev/null; then
		broken wake-p50 "mq-topic could not create topic t or group t/g"
		return 0
	fi
	mkfifo "$fifo" || die "cannot make $fifo"
	"$TMP/bin/outstamp" "$LAT_N" "$us_f" <"$fifo" &
	stamper=$!
	bg_add $stamper
	"$B/mq-recv" -f -g g t >"$fifo" &
	bg_add $!
	if ! wait_consumers 1; then
		stop_bg
		rm -f "$fifo"
		broken wake-p50 "mq-recv -f -g g t did not start (no consumer listed)"
		return 0
	fi
	st=0
	"$TMP/bin/ticker" "$LAT_N" 5 20 | bounded "$B/mq-send" -q t || st=$?
	if [ "$st" != 0 ]; then
		stop_bg
		rm -f "$fifo"
		broken wake-p50 "the producer, ticker | mq-send -q t: $(status "$st")"
		return 0
	fi
	wait_gone "$stamper" 10 || :
	stop_bg
	rm -f "$fifo"
	rawpg wake "$RAW" $((LAT_N - half)) 5 20 "$TMP/wake.raw" \
	    "$TMP/wake.claim"
	lat_line "mq-recv -f, write to output line" "$us_f"
	lat_line "rawpg wake, send to notification" "$TMP/wake.raw"
	lat_line "rawpg wake, send to notify + claim" "$TMP/wake.claim"
	n=$(wc -l <"$us_f")
	mq=$(p50 "$us_f") raw=$(p50 "$TMP/wake.raw")
	if [ "$n" -ne "$LAT_N" ]; then
		echo "  (only $n of $LAT_N lines came out)"
		mq=999999999
	fi
	fig wake-p50 mq "$(us2ms "$mq")" raw "$(us2ms "$raw")" ms \
	    "$(ratio "$mq" "$raw")" '<=' 2
}

# trips_of FILE: the count in the "PROG: N round trips" line of FILE.
trips_of() {
	_n=$(sed -n 's/^[^:]*: \([0-9][0-9]*\) round trips$/\1/p' "$1" | tail -1)
	[ -n "$_n" ] || die "no round trip count in $1: $(cat "$1")"
	echo "$_n"
}

# batches K N: K batches of N lines, 0.2 s apart (each batch one write).
batches() {
	_j=0
	while [ "$_j" -lt "$1" ]; do
		[ "$_j" = 0 ] || sleep 0.2
		seq "$2"
		_j=$((_j + 1))
	done
}

# The trips_* functions run in $(...): what failed goes to $TMP/why.
# send_trips K N: the round trips of mq-send -q t fed K batches of N.
send_trips() {
	batches "$1" "$2" | MQ_PG_TRIPS=1 "$B/mq-send" -q t 2>"$TMP/trips" || {
		echo "mq-send -q t: $(status $?)" >"$TMP/why"
		return 1
	}
	trips_of "$TMP/trips"
}

# recv_trips N GROUP [OPTION]: the round trips of mq-recv -n N; its output
# in $TMP/recv.N.GROUP, which must hold N lines.
recv_trips() {
	_o=$TMP/recv.$1.$2
	MQ_PG_TRIPS=1 "$B/mq-recv" -n "$1" -g "$2" ${3:+"$3"} t >"$_o" \
	    2>"$TMP/trips" || {
		echo "mq-recv -n $1 -g $2 ${3:-}t: $(status $?)" >"$TMP/why"
		return 1
	}
	[ "$(wc -l <"$_o")" -eq "$1" ] || {
		echo "mq-recv -n $1 -g $2 ${3:+$3 }t printed $(wc -l <"$_o")" \
		    "lines, not $1" >"$TMP/why"
		return 1
	}
	trips_of "$TMP/trips"
}

# ack_trips FILE FIRST K N: the round trips of mq-ack fed K batches of N
# receipts, 0.2 s apart, from line FIRST of FILE on.
ack_trips() {
	_j=0 _l=$2
	while [ "$_j" -lt "$3" ]; do
		[ "$_j" = 0 ] || sleep 0.2
		sed -n "${_l},$((_l + $4 - 1))p" "$1"
		_l=$((_l + $4))
		_j=$((_j + 1))
	done | MQ_PG_TRIPS=1 "$B/mq-ack" 2>"$TMP/trips" || {
		echo "mq-ack: $(status $?)" >"$TMP/why"
		return 1
	}
	trips_of "$TMP/trips"
}

# trips: per-operation round trips, each the difference of two runs of
# one program that differ by one operation.
bench_trips() {
	claim=256	# CHUNK of common/follow.c: mq-recv's claims
	echo "== trips: round trips (MQ_PG_TRIPS=1) per operation, by" \
	    "difference: mq-send of 2 batches - of 1, mq-recv -n $((2 * claim))" \
	    "- -n $claim, mq-ack of 2 batches - of 1"
	fresh mqb
	"$B/mq-topic" create t >/dev/null || die "mq-topic create t failed"
	echo "a command failed" >"$TMP/why"
	{
		s11=$(send_trips 1 1) && s21=$(send_trips 2 1) &&
		    s1c=$(send_trips 1 100) && s2c=$(send_trips 2 100) &&
		    { batches 1 $((3 * claim)) | "$B/mq-send" -q t ||
		    { echo "loading: mq-send -q t: $(status $?)" >"$TMP/why"
		    false; }; } &&
		    "$B/mq-topic" group t g >/dev/null &&
		    "$B/mq-topic" group t a >/dev/null &&
		    analyze &&
		    c1=$(recv_trips "$claim" g) &&
		    c2=$(recv_trips $((2 * claim)) g) &&
		    a1=$(recv_trips "$claim" a -A) &&
		    a2=$(recv_trips $((2 * claim)) a -A) &&
		    r=$TMP/recv.$((2 * claim)).g &&
		    k11=$(ack_trips "$r" 1 1 1) && k21=$(ack_trips "$r" 2 2 1) &&
		    k1c=$(ack_trips "$r" 4 1 100) &&
		    k2c=$(ack_trips "$r" 104 2 100)
	} || {
		echo "trips: not measured: $(cat "$TMP/why")"
		echo "bench: trips: $(cat "$TMP/why")" >&2
		BROKEN=$((BROKEN + 1))
		return 0
	}
	echo "  mq-send: 1 batch of 1 line $s11, 2 batches $s21; 1 batch of" \
	    "100 lines $s1c, 2 batches $s2c"
	echo "  mq-recv: -n $claim $c1, -n $((2 * claim)) $c2; with -A $a1, $a2"
	echo "  mq-ack: 1 batch of 1 receipt $k11, 2 batches $k21; 1 batch of" \
	    "100 receipts $k1c, 2 batches $k2c"
	sb=$((s21 - s11)) sbc=$((s2c - s1c))
	cl=$((c2 - c1)) ca=$((a2 - a1))
	kb=$((k21 - k11)) kbc=$((k2c - k1c))
	echo "trips: send batch $sb, claim $cl, settle batch $kb (a batch of 1" \
	    "message, a claim of $claim, a batch of 1 receipt)"
	echo "  send batch of 100 messages $sbc; claim of $claim with -A $ca;" \
	    "settle batch of 100 receipts $kbc: $(ratio $((kbc - kb)) 99) more" \
	    "a receipt"
}

echo "mq bench (postgresql): $(uname -sm), $(getconf _NPROCESSORS_ONLN) CPUs," \
    "$(adm -A -t -c "SELECT 'PostgreSQL ' || current_setting('server_version')
	|| ', fsync ' || current_setting('fsync') || ', synchronous_commit '
	|| current_setting('synchronous_commit') || ', wal_sync_method '
	|| current_setting('wal_sync_method')")," \
    "$(df -PT "$TMP" | awk 'NR == 2 { print $2 }') at ${TMPDIR:-/tmp}," \
    "load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown);" \
    "mq and rawpg over the Unix socket, the same server"
start=$(now_ms)
# shellcheck disable=SC2086 # the list of names is meant to split
[ $# -gt 0 ] || set -- $BENCHES
for b in "$@"; do
	"bench_$b"
done
end=$(now_ms)
echo "== summary (postgresql): $PASSED PASS, $FAILED FAIL${FAILS:+ (FAIL:$FAILS)}" \
    "in $(decimal $((end - start)) 1000 1) s"
[ ! -s "$TMP/fails" ] || sed 's/^/  /' "$TMP/fails"
[ "$BROKEN" = 0 ] || {
	echo "bench: $BROKEN mq command(s) failed: see above" >&2
	exit 1
}
