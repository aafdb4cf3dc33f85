#!/bin/sh
# bench/run.sh: mq's benchmarks, each beside a plain-SQLite baseline.
#
# usage: sh bench/run.sh BUILD_DIR [BENCH ...]
#
# With no BENCH, runs them all.  Benchmarks: send (mq-send bulk load from
# stdin against bench/raw.c).  Each side runs BENCH_RUNS times (default 3)
# and the best (fastest) run is reported.  Everything is written under a
# temporary directory in ${TMPDIR:-/tmp}, removed on exit; the user's
# database is never touched.
#
# Targets are reported as PASS or FAIL, not enforced: the exit status is 0
# unless a command failed (then non-zero, with a message on stderr).
#
# Environment: BENCH_RUNS (runs per side), BENCH_N (messages, default
# 1000000), CC, TMPDIR.
#
# A new benchmark is a function bench_NAME plus its name in BENCHES.

set -eu

BENCHES="send"
RUNS=${BENCH_RUNS:-3}
N=${BENCH_N:-1000000}
CC=${CC:-cc}

die() {
	echo "bench: $*" >&2
	exit 1
}

[ $# -ge 1 ] || die "usage: sh bench/run.sh BUILD_DIR [$(echo $BENCHES | tr ' ' '|') ...]"
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
case $N in ''|*[!0-9]*|0) die "invalid BENCH_N '$N'" ;; esac

TMP=$(mktemp -d "${TMPDIR:-/tmp}/mq-bench.XXXXXX") || die "cannot make a temporary directory"
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Milliseconds since the epoch (GNU date; python3 where %N is missing).
case $(date +%N) in
*[!0-9]*|'')
	command -v python3 >/dev/null || die "need GNU date (+%N) or python3 for a ms clock"
	now_ms() { python3 -c 'import time; print(int(time.time() * 1000))'; } ;;
*)
	now_ms() { t=$(date +%s%N); echo $((t / 1000000)); } ;;
esac

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

echo "mq bench: $(uname -sm), sqlite $(pkg-config --modversion sqlite3)," \
    "$(df -PT "$TMP" | awk 'NR == 2 { print $2 }') at ${TMPDIR:-/tmp}," \
    "synchronous=FULL, WAL"
# shellcheck disable=SC2086 # the list of names is meant to split
[ $# -gt 0 ] || set -- $BENCHES
for b in "$@"; do
	"bench_$b"
done
