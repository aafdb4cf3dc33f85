#!/bin/sh
# deps.sh: what building, testing and linting mq needs beyond a C
# compiler, make, pkg-config and SQLite, and getting it.
#
# usage: sh t/deps.sh check|install build|test|lint|all
#
#   build  libsqlite3-dev libbsd-dev libpq-dev      (make, make demo)
#   test   build's, and bats bats-support bats-assert jq tmux prometheus
#          postgresql-15 iproute2                    (make test)
#   lint   mandoc shellcheck                        (make lint)
#   all    all of these                             (make deps)
#
# check    exit 0 if all is there; else say what is missing and the one
#          apt-get command that installs it, and exit 1.  libpq-dev,
#          postgresql-15 and iproute2 are optional here: without them
#          make builds the SQLite-only toolkit and make test runs the
#          suite on SQLite only, and each says so.
# install  the same, but as root run that command (apt-get install -y)
#          and exit 0 once everything is there, the optional ones too.
#
# What is there is asked of the tools themselves (pkg-config, the PATH,
# the bats library path), not of dpkg, so a hand-built SQLite or bats
# counts; the package names are Debian's.

BUILD="libsqlite3-dev libbsd-dev libpq-dev"
OPTIONAL="libpq-dev postgresql-15 iproute2"
TEST="bats bats-support bats-assert jq tmux prometheus postgresql-15 iproute2"
LINT="mandoc shellcheck"

# has PACKAGE: what PACKAGE provides is usable here.
has() {
	case $1 in
	libsqlite3-dev) pkg-config --exists sqlite3 ;;
	libbsd-dev) pkg-config --exists libbsd-overlay ;;
	libpq-dev) pkg-config --exists libpq ;;
	postgresql-15) ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 ;;
	iproute2) command -v ip >/dev/null ;;
	bats-support | bats-assert) has_bats_lib "$1" ;;
	prometheus) command -v promtool >/dev/null ;;
	*) command -v "$1" >/dev/null ;;
	esac
}

# has_bats_lib NAME: bats_load_library would find NAME.
has_bats_lib() {
	IFS=:
	for d in ${BATS_LIB_PATH:-/usr/lib/bats:/usr/local/lib/bats}; do
		[ -f "$d/$1/load.bash" ] && { unset IFS; return 0; }
	done
	unset IFS
	return 1
}

missing() {
	for p in $PKGS; do
		has "$p" || printf '%s ' "$p"
	done
}

usage() {
	echo "usage: sh t/deps.sh check|install build|test|lint|all" >&2
	exit 64
}

[ $# -eq 2 ] || usage
case $1 in check | install) ;; *) usage ;; esac
case $2 in
build) PKGS=$BUILD what="to build mq" ;;
test) PKGS="$BUILD $TEST" what="to build and test mq" ;;
lint) PKGS=$LINT what="for make lint" ;;
all) PKGS="$BUILD $TEST $LINT" what="to build, test and lint mq" ;;
*) usage ;;
esac

need=$(missing)
[ -z "$need" ] && exit 0
need=${need% }
sudo=
[ "$(id -u)" -eq 0 ] || sudo="sudo "
if [ "$1" = check ] || [ -n "$sudo" ]; then
	required=
	for p in $need; do
		case " $OPTIONAL " in
		*" $p "*) echo "mq: without $p: no PostgreSQL support or tests" \
		    "(${sudo}apt-get install -y $p adds it)" >&2 ;;
		*) required="$required $p" ;;
		esac
	done
	[ -n "$required" ] || exit 0
fi
if [ -n "$sudo" ]; then
	echo "mq: missing $what: $need" >&2
	echo "mq: run: sudo apt-get install -y $need" >&2
	exit 1
fi
if [ "$1" = check ]; then
	echo "mq: missing $what: $need" >&2
	echo "mq: run: apt-get install -y $need  (or: make deps)" >&2
	exit 1
fi
echo "mq: installing $need"
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086 # $need is a list of package names
apt-get install -y -q $need || { apt-get update -q && apt-get install -y -q $need; }
need=$(missing)
[ -z "$need" ] || { echo "mq: still missing after apt-get: $need" >&2; exit 1; }
