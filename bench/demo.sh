#!/bin/sh
# bench/demo.sh: a first tour of mq, run by `make demo`.
#
# usage: sh bench/demo.sh BUILD_DIR [DATABASE]
#
# Runs on a database of its own in a new temporary directory, removed at
# the end, so it never touches the user's queue (not even $MQ_DB).  Given
# DATABASE (make demo DEMO_DB=FILE), it uses that file instead, and only
# its topic "demo", which it deletes first so the tour can be run again
# and the result kept for a look afterwards.  Prints each command
# ("$ ...") after a short "# ..." note, then the command's output.  Exits 0
# when every step did what it says; non-zero otherwise.

set -eu

die() {
	echo "demo: $*" >&2
	exit 1
}

[ $# -eq 1 ] || [ $# -eq 2 ] || die "usage: sh bench/demo.sh BUILD_DIR [DATABASE]"
B=$1
case $B in /*) ;; *) B=$(pwd)/$B ;; esac
[ -x "$B/mq-send" ] || die "no mq-send in $B: run make first"
PATH=$B:$PATH
export PATH
tab=$(printf '\t')

say() {
	echo
	echo "# $*"
}

# run 'COMMAND LINE': shows it, then runs it through the shell.
run() {
	echo "\$ $1"
	eval "$1" || die "failed (status $?): $1"
}

if [ -n "${2:-}" ]; then
	MQ_DB=$2
	export MQ_DB
	echo "# mq demo on $MQ_DB (every command also takes -d FILE)"
	say "start clean: delete the demo topic if an earlier run left it"
	echo "\$ mq-topic delete --force demo"
	if err=$(mq-topic delete --force demo 2>&1); then
		echo "deleted"
	else
		st=$?
		[ "$st" -eq 66 ] || die "mq-topic delete failed (status $st): $err"
		echo "(none yet: status 66, no such topic)"
	fi
else
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/mq-demo.XXXXXX") || die "cannot make a temporary directory"
	trap 'rm -rf "$tmp"' EXIT
	trap 'exit 130' INT TERM
	MQ_DB=$tmp/mq.db
	export MQ_DB
	echo "# mq demo on a database of its own: $MQ_DB"
	echo "# (removed at the end; make demo DEMO_DB=FILE keeps one.  The"
	echo "# programs use \$MQ_DB, else ~/.local/share/mq/mq.db, or -d FILE)"
fi

say "send three messages from arguments: one transaction, one offset each"
run 'mq-send demo "hello, world" "resize photo-17.jpg" "mail the weekly report"'

say "send more from a pipe, one message per line"
run 'seq 3 | sed "s/^/job /" | mq-send demo'

say "fan-out: two consumer groups, each receives every message."
echo "# Group workers runs a handler per message (exec mode): the body on"
echo "# stdin, metadata in MQ_* variables; exit 0 acks, 65 dead-letters,"
echo "# anything else retries later."
run "mq-recv -g workers -n 0 demo -- sh -c 'echo \"worker: #\$MQ_OFFSET attempt \$MQ_ATTEMPT: \$(cat)\"'"

say "group audit gets the same messages, printed as RECEIPT<TAB>BODY; a"
echo "# shell loop handles each and passes its receipt on to mq-ack"
run "mq-recv -g audit -n 0 demo |
    while IFS='$tab' read -r receipt body; do
        echo \"audit: \$body\" >&2
        echo \"\$receipt\"
    done | mq-ack"

say "nothing left for workers: mq-recv exits 1 when it gets no message"
echo "\$ mq-recv -g workers demo"
if mq-recv -g workers demo; then
	die "workers got a message twice"
else
	st=$?
	[ "$st" -eq 1 ] || die "mq-recv failed (status $st)"
	echo "(status 1: no message)"
fi

say "the topic, its groups and their lag"
run 'mq-topic show demo'

# every group settled every message
mq-topic show demo | awk '
	$1 == "messages" { n = $2 }
	$1 == "group" { g++; if ($0 !~ /lag 0,/) bad = bad " " $2 }
	END { if (n != 6 || g != 2 || bad != "") {
		print "demo: expected 6 messages, 2 groups, lag 0; unsettled:" bad \
		    > "/dev/stderr"; exit 1 } }' || exit 1
echo
echo "# done.  Next: mq-send demo hi; mq-recv demo; mq-recv --help"
