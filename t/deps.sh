#!/bin/sh
# deps.sh: what building and testing mq needs, beyond a C compiler.
#   deps.sh check    exit 0 if all is there; else run "install"
#   deps.sh install  apt-get install what is missing (as root), or print
#                    the exact command to run
PKGS="libsqlite3-dev libbsd-dev bats bats-support bats-assert jq mandoc tmux prometheus"

missing() {
	for p in $PKGS; do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null |
		    grep -q 'install ok installed' || printf '%s ' "$p"
	done
}

need=$(missing)
[ -z "$need" ] && exit 0
case "$1" in
check|install) ;;
*) echo "usage: deps.sh check|install" >&2; exit 64 ;;
esac
if [ "$(id -u)" -eq 0 ]; then
	echo "deps: installing $need"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y $need || { apt-get update && apt-get install -y $need; }
	need=$(missing)
	[ -z "$need" ] || { echo "deps: still missing: $need" >&2; exit 1; }
else
	echo "deps: missing packages: $need" >&2
	echo "deps: run: sudo apt-get install -y $need" >&2
	exit 1
fi
