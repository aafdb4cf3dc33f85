# bench/lib.sh: what bench/run.sh and bench/pg.sh share: clocks,
# distributions, ratios and the figure lines with their PASS/FAIL count.
# Sourced first thing after die(); TMP, SRC, CC and TO are read when
# its functions run.
# shellcheck shell=sh

# Nanoseconds since the epoch (GNU date; python3 where %N is missing).
case $(date +%N) in
*[!0-9]*|'')
	command -v python3 >/dev/null || die "need GNU date (+%N) or python3 for a ns clock"
	now_ns() { python3 -c 'import time; print(time.time_ns())'; } ;;
*)
	now_ns() { date +%s%N; } ;;
esac
now_ms() { _t=$(now_ns); echo $((_t / 1000000)); }

# tic, then toc: us is the wall time between them, in microseconds.
tic() {
	_tic=$(now_ns)
}
toc() {
	_toc=$(now_ns)
	us=$(((_toc - _tic) / 1000))
	[ "$us" -gt 0 ] || us=1
}

# bounded CMD [ARG ...]: runs CMD, killed after BENCH_TIMEOUT seconds.
if command -v timeout >/dev/null; then
	bounded() { timeout "$TO" "$@"; }
else
	bounded() { "$@"; }
fi

# helper NAME ...: compiles bench/NAME.c into $TMP/bin/NAME (once).
helper() {
	for _h; do
		[ -x "$TMP/bin/$_h" ] && continue
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

# us2ms US: microseconds as milliseconds with 2 decimals.
us2ms() {
	awk -v u="$1" 'BEGIN { printf "%.2f", u / 1000 }'
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

# rate COUNT US: COUNT per second over US microseconds.
rate() {
	echo $(($1 * 1000000 / $2))
}

# ratio A B: A / B with 2 decimals.
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'
}

# keep_min VAR VALUE, keep_max VAR VALUE: VAR becomes VALUE if it is
# empty or VALUE is better.
keep_min() {
	eval "_k=\${$1:-}"
	if [ -z "$_k" ] || [ "$2" -lt "$_k" ]; then eval "$1=\$2"; fi
}
keep_max() {
	eval "_k=\${$1:-}"
	if [ -z "$_k" ] || [ "$2" -gt "$_k" ]; then eval "$1=\$2"; fi
}

# Figures.  result NAME TEXT OK prints "NAME: TEXT PASS" (OK 1) or FAIL,
# and counts it.
PASSED=0 FAILED=0 FAILS=
result() {
	if [ "$3" = 1 ]; then
		PASSED=$((PASSED + 1))
		printf '%s: %s PASS\n' "$1" "$2"
	else
		FAILED=$((FAILED + 1))
		FAILS="$FAILS $1"
		printf '%s: %s FAIL\n' "$1" "$2" | tee -a "$TMP/fails"
	fi
}

# fig NAME LABEL VALUE BASE_LABEL BASE_VALUE UNIT RATIO OP TARGET: a figure
# line, PASS when RATIO OP TARGET holds (OP: >=, <=, <, >).
fig() {
	_ok=$(awk -v r="$7" -v op="$8" -v t="$9" 'BEGIN {
		print (op == ">=" ? r >= t : op == "<=" ? r <= t : \
		    op == "<" ? r < t : r > t) ? 1 : 0 }')
	result "$1" "$2 $3 $6, $4 $5 $6, ratio $7 (target $8 $9)" "$_ok"
}

# lanes_figs N: the figures of lanes (bench/run.sh, bench/pg.sh), from
# the runs of N messages in one_*, strict_* and fair_* (best and all, us).
# shellcheck disable=SC2154 # those are the caller's
lanes_figs() {
	echo "  seconds of each run: one topic:$one_all; 3 lanes:$strict_all;" \
	    "3 lanes --fair:$fair_all"
	one=$(rate "$1" "$one_best")
	strict=$(rate "$1" "$strict_best") fair=$(rate "$1" "$fair_best")
	fig lanes "3 lanes" "$strict" "1 topic" "$one" msg/s \
	    "$(ratio "$strict" "$one")" '>=' 0.8
	fig lanes-fair "3 lanes --fair" "$fair" "1 topic" "$one" msg/s \
	    "$(ratio "$fair" "$one")" '>=' 0.8
}

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
	# shellcheck disable=SC2086 # a list of pids
	[ -z "$_alive" ] || kill -9 $_alive 2>/dev/null || :
	for _p in $BG; do
		wait "$_p" 2>/dev/null || :
	done
	BG=
}

# gen N: N lines of 100 bytes (90 letters, the line number in 10 digits).
gen() {
	awk -v n="$1" 'BEGIN {
		pad = "abcdefghijklmnopqrstuvwxyz0123456789"
		pad = pad pad pad
		pad = substr(pad, 1, 90)
		for (i = 1; i <= n; i++)
			printf "%s%010d\n", pad, i
	}'
}

# lines N: the name of a file of gen N, written once.
lines() {
	_f=$TMP/lines.$1
	[ -f "$_f" ] || gen "$1" >"$_f" || die "cannot write $_f"
	echo "$_f"
}

# wait_gone PID SECONDS: until PID has exited (it is a child: reaped).
wait_gone() {
	_w=0
	while kill -0 "$1" 2>/dev/null; do
		_w=$((_w + 1))
		[ "$_w" -lt $(($2 * 20)) ] || return 1
		sleep 0.05
	done
	wait "$1" 2>/dev/null || :
}

# p50 FILE, p99 FILE: the percentile, in us.
p50() {
	dist "$1" | awk '{ print $2 }'
}
