#!/bin/sh
# suite.sh: the bats suite on one backend, its skips counted and shown.
#
# usage: sh t/suite.sh sqlite|pg BINDIR TOOLSDIR [BATS-ARGS...]
#
# pg starts a cluster of its own (t/pgcluster.sh) in a temporary
# directory and stops it at the end, whatever happens.  When this build
# has no PostgreSQL support or the server is not installed, it says why
# and runs nothing (make deps installs both).
set -u

backend=$1 bin=$2 tools=$3
shift 3
[ $# -gt 0 ] || set -- t
here=$(dirname "$0")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mq-suite.XXXXXX") || exit 1
chmod 711 "$tmp"	# the server may run as nobody (t/pgcluster.sh)
pgdir=

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	[ -z "$pgdir" ] || sh "$here/pgcluster.sh" stop "$pgdir"
	rm -rf "$tmp"
}
bats=
trap cleanup EXIT
trap '[ -z "$bats" ] || kill -TERM "$bats" 2>/dev/null; exit 130' INT TERM

if [ "$backend" = pg ]; then
	"$bin/mq-send" -d 'postgresql:///x' t x 2>"$tmp/err" >/dev/null
	if grep -q 'no PostgreSQL support' "$tmp/err"; then
		echo "suite (postgresql): not run: this build has no PostgreSQL support (make deps installs libpq-dev)"
		exit 0
	fi
	if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 &&
	    [ -z "${PG_BINDIR-}" ]; then
		echo "suite (postgresql): not run: no PostgreSQL server (make deps installs postgresql-15)"
		exit 0
	fi
	pgdir=$tmp/pg
	sh "$here/pgcluster.sh" start "$pgdir" >"$tmp/env" || exit 1
	# shellcheck source=/dev/null # written by pgcluster.sh start
	. "$tmp/env"
	export MQ_TEST_BACKEND=pg
else
	export MQ_TEST_BACKEND=sqlite
fi

MQ_BIN=$bin MQ_TOOLS=$tools bats --formatter tap "$@" >"$tmp/tap" 2>&1 &
bats=$!
tail -f --pid=$bats "$tmp/tap" 2>/dev/null &
wait $bats
st=$?
wait
n=$(grep -c '^ok \|^not ok ' "$tmp/tap")
failed=$(grep -c '^not ok ' "$tmp/tap")
skipped=$(grep -c '^ok .* # skip' "$tmp/tap")
echo "suite ($backend): $n tests, $failed failed, $skipped skipped"
if [ "$skipped" -gt 0 ]; then
	grep '^ok .* # skip' "$tmp/tap" | sed 's/.* # skip *//' | sort |
	    uniq -c | sed 's/^/  skipped: /'
fi
exit $st
