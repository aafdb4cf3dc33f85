#!/bin/sh
# run.sh: build the libFuzzer targets in t/fuzz and run each for a
# bounded time, starting from its seed corpus in t/fuzz/corpus/TARGET.
#
# usage: sh t/fuzz/run.sh [-c] [TARGET ...]    (default: every
#                           t/fuzz/fuzz_*.c; "time" means fuzz_time)
#
#   -c            check only, without clang: build each target with $CC
#                 (default cc), no libFuzzer and no sanitizers, with
#                 t/fuzz/replay.c as its main, and pass it each input of
#                 its seed corpus once.  make test runs this, so a target
#                 that no longer builds or links is found there, not at
#                 the next make fuzz.  FUZZ_BUILD defaults to
#                 build/fuzz-check.
#   FUZZ_SECONDS  how long each target runs (default 10)
#   FUZZ_BUILD    where binaries, new inputs, logs and reproducers go
#                 (default build/fuzz; nothing is written in t/fuzz)
#   FUZZ_KEEP=1   add the new interesting inputs libFuzzer finds to the
#                 committed corpus t/fuzz/corpus/TARGET, not to
#                 $FUZZ_BUILD/corpus/TARGET
#   FUZZ_CONTINUE=1  go on after a failure (libFuzzer's -fork=1 with
#                 -ignore_crashes=1) to see all a target finds: each
#                 distinct failure is then listed once, with a reproducer
#   FUZZ_FLAGS    more libFuzzer options, e.g. "-only_ascii=1"
#   CLANG         the compiler (default clang; it must have libFuzzer)
#
# The targets are compiled with the library sources they test (no
# SQLite; not build/libmq.a, which has no fuzzer instrumentation) under
# -fsanitize=fuzzer,address,undefined.  Exits 0 when every target ran
# its time without a crash, leak, sanitizer report or failed invariant;
# otherwise 1, naming each reproducer and the command that replays it.
# Like t/deps.sh, it installs clang (and libbsd-dev) with apt-get when
# run as root and they are missing; otherwise it says what to install.

root=$(cd "$(dirname "$0")/../.." && pwd) || exit 1
check=
if [ "${1-}" = -c ]; then
	check=1
	shift
fi
CLANG=${CLANG:-clang}
[ -z "$check" ] || CLANG=${CC:-cc}
secs=${FUZZ_SECONDS:-10}
build=${FUZZ_BUILD:-$root/build/fuzz${check:+-check}}
case $build in /*) ;; *) build=$PWD/$build ;; esac
case $secs in '' | *[!0-9]*) echo "run.sh: FUZZ_SECONDS: not a number: $secs" >&2; exit 64 ;; esac

# The sources under test: parsing, output, headers, policy, input records,
# errors; none needs SQLite.
LIBSRC="common/err.c common/parse.c common/out.c common/policy.c common/input.c
common/header.c"
WARN="-Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter"
SAN="address,undefined"

# --- what the build needs ------------------------------------------------
missing() {
	[ -n "$check" ] || command -v "$CLANG" >/dev/null || printf 'clang '
	command -v pkg-config >/dev/null || printf 'pkg-config '
	pkg-config --exists libbsd-overlay 2>/dev/null || printf 'libbsd-dev '
}
need=$(missing)
if [ -n "$need" ]; then
	need=${need% }
	if [ "$(id -u)" -ne 0 ]; then
		echo "mq: missing to fuzz mq: $need" >&2
		echo "mq: run: sudo apt-get install -y $need" >&2
		exit 1
	fi
	echo "mq: installing $need"
	export DEBIAN_FRONTEND=noninteractive
	# shellcheck disable=SC2086 # $need is a list of package names
	apt-get install -y -q $need || { apt-get update -q && apt-get install -y -q $need; }
	need=$(missing)
	[ -z "$need" ] || { echo "mq: still missing after apt-get: $need" >&2; exit 1; }
fi

mkdir -p "$build/obj" || exit 1
probe=$build/obj/probe
printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
    >"$probe.c"
if [ -z "$check" ] &&
    ! "$CLANG" -fsanitize=fuzzer,$SAN -o "$probe" "$probe.c" 2>"$probe.err"; then
	cat "$probe.err" >&2
	echo "mq: $CLANG cannot link -fsanitize=fuzzer here; install clang with libFuzzer (Debian: apt-get install -y clang)" >&2
	exit 1
fi

# --- which targets ----------------------------------------------------------
if [ $# -eq 0 ]; then
	for f in "$root"/t/fuzz/fuzz_*.c; do
		t=${f##*/}
		set -- "$@" "${t%.c}"
	done
fi
targets=
for t in "$@"; do
	t=${t%.c}
	case $t in fuzz_*) ;; *) t=fuzz_$t ;; esac
	[ -f "$root/t/fuzz/$t.c" ] || { echo "run.sh: no target t/fuzz/$t.c" >&2; exit 64; }
	targets="$targets $t"
done

# --- build ----------------------------------------------------------------
cflags="-std=c11 -D_DEFAULT_SOURCE -D_GNU_SOURCE $WARN -g -O1 \
-fno-omit-frame-pointer \
$(pkg-config --cflags libbsd-overlay) -I$root/common -I$root/t/fuzz"
libs=$(pkg-config --libs libbsd-overlay)
# Only mq's code gets libFuzzer's coverage instrumentation, so the
# coverage it reports and steers by is mq's, not that of the checks.
# -c: none of it, and replay.c for main.
san="-fsanitize=$SAN -fno-sanitize-recover=undefined"
cov="-fsanitize=fuzzer-no-link $san"
link=-fsanitize=fuzzer,$SAN
extra=
if [ -n "$check" ]; then
	san='' cov='' link='' extra=t/fuzz/replay.c
fi
objs=
for src in $LIBSRC t/fuzz/fuzzutil.c $extra; do
	o=$build/obj/$(basename "$src" .c).o
	f=$cov
	case $src in t/*) f=$san ;; esac
	# shellcheck disable=SC2086 # $cflags and $f are lists of options
	"$CLANG" $cflags $f -c -o "$o" "$root/$src" || exit 1
	objs="$objs $o"
done
for t in $targets; do
	# shellcheck disable=SC2086 # lists of options and objects
	"$CLANG" $cflags $san -c -o "$build/obj/$t.o" \
	    "$root/t/fuzz/$t.c" &&
	"$CLANG" $link -o "$build/$t" "$build/obj/$t.o" \
	    $objs $libs || exit 1
done

# -c: each seed once
if [ -n "$check" ]; then
	status=0
	for t in $targets; do
		seeds=$root/t/fuzz/corpus/$t
		n=$(find "$seeds" -type f 2>/dev/null | wc -l)
		if find "$seeds" -type f -exec "$build/$t" {} + \
		    >"$build/$t.log" 2>&1; then
			echo "fuzz check: $t ok: $n seeds"
		else
			status=1
			echo "fuzz check: $t FAILED on its seeds:" >&2
			head -n 6 "$build/$t.log" >&2
		fi
	done
	exit "$status"
fi

# --- run ------------------------------------------------------------------
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
mode=
[ "${FUZZ_CONTINUE:-0}" = 1 ] &&
	mode="-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1"

# what went wrong with input $2 of target $1, in one line without the
# values, so that inputs failing the same way give the same line
why() {
	"$build/$1" "$2" 2>&1 |
		grep -m 1 -E '^INVARIANT|check failed:|runtime error|ERROR: ' |
		sed -e 's/==[0-9]*==//' \
		    -e '/^INVARIANT/{s/"[^"]*"/"..."/g; s/[0-9][0-9]*/N/g;}'
}

status=0
for t in $targets; do
	seeds=$root/t/fuzz/corpus/$t
	crashes=$build/crashes/$t
	log=$build/$t.log
	mkdir -p "$seeds" "$build/corpus/$t" "$crashes"
	rm -f "$crashes"/*
	if [ "${FUZZ_KEEP:-0}" = 1 ]; then
		set -- "$seeds"
	else
		set -- "$build/corpus/$t" "$seeds"
	fi
	echo "fuzz: $t for ${secs}s"
	t0=$(date +%s)
	# shellcheck disable=SC2086 # $mode and $FUZZ_FLAGS are lists of options
	(cd "$build" && "./$t" -max_total_time="$secs" -timeout=10 \
	    -print_final_stats=1 -artifact_prefix="$crashes/" \
	    $mode ${FUZZ_FLAGS:-} "$@") >"$log" 2>&1
	rc=$?
	took=$(($(date +%s) - t0))
	line=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	[ -n "$runs" ] || runs=$(printf '%s\n' "$line" | sed -n 's/^#\([0-9]*\).*/\1/p')
	cov=$(printf '%s\n' "$line" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
	ft=$(printf '%s\n' "$line" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
	corp=$(printf '%s\n' "$line" | sed -n 's/.*corp: \([0-9]*\).*/\1/p')
	repro=$(find "$crashes" -type f | head -n 1)
	if [ "$rc" -eq 0 ] && [ -z "$repro" ]; then
		echo "fuzz: $t ok: ${runs:-?} runs in ${took}s, cov ${cov:-?} ft ${ft:-?}, corpus ${corp:-?} inputs"
		continue
	fi
	status=1
	echo "fuzz: $t FAILED (exit $rc): ${runs:-?} runs in ${took}s, cov ${cov:-?} ft ${ft:-?}" >&2
	if [ -n "$mode" ]; then
		# each distinct failure once, with one of its reproducers
		for f in "$crashes"/*; do
			[ -f "$f" ] && printf '%s\t%s\n' "$(why "$t" "$f")" "$f"
		done | sort -t "$(printf '\t')" -k 1,1 -u -s | while IFS="$(printf '\t')" read -r msg f; do
			echo "fuzz: $msg" >&2
			echo "fuzz:   reproducer: $f" >&2
		done
		echo "fuzz: $(find "$crashes" -type f | wc -l) failing inputs in $crashes; replay one: $build/$t FILE" >&2
	else
		grep -E '^INVARIANT|check failed:|runtime error|ERROR: |^SUMMARY' "$log" | head -n 6 >&2
		if [ -n "$repro" ]; then
			echo "fuzz: reproducer: $repro" >&2
			echo "fuzz: replay: $build/$t $repro" >&2
		fi
	fi
	echo "fuzz: log: $log" >&2
done
exit "$status"
