#!/usr/bin/env bats
# 045-crash.bats: kill -9 consumers at random moments while a producer
# sends; nothing may be lost, nothing invented, the database stays sound.
#
# Four exec-mode consumers (two handlers each) append every body they are
# given to one file, one short line per write on an O_APPEND file, so lines
# never mix.  For CHAOS seconds one of them is killed with SIGKILL at a
# random moment and restarted; the producer sends N messages in slices
# meanwhile.  Then the consumers are left alone until every message is
# acked (at most DRAIN seconds).  A killed consumer's handlers run on
# (their own process group) and finish in milliseconds; its leases are
# reclaimed at once by the others, so the lease hardly matters.

load test_helper

N=5000
SLICES=10
CHAOS=15
DRAIN=75
CONSUMERS=4

teardown() {
	kill_bg
}

# start_consumer I: (re)start consumer I in the background.
start_consumer() {
	mq-recv -g g -f -j 2 t -- sh -c 'read -r b; echo "$b" >>handled' \
	    >>"cons.$1.out" 2>&1 3>&- &
	pid[$1]=$!
	echo "${pid[$1]}" >>pids
}

# kill_consumer I: SIGKILL consumer I and reap it; any other end than
# that signal (it exited by itself) is recorded.
kill_consumer() {
	local st=0
	kill -9 "${pid[$1]}" 2>/dev/null || true
	wait "${pid[$1]}" 2>/dev/null || st=$?
	[ "$st" = 137 ] || echo "consumer $1 (pid ${pid[$1]}) ended with $st" >>unexpected
}

# send_slice FROM TO: one mq-send of those numbers; busy (75) means
# nothing was stored, so it is tried again.
send_slice() {
	local try st
	for try in 1 2 3 4 5; do
		st=0
		mq-send -q t $(seq "$1" "$2") 2>>send.err || st=$?
		[ "$st" = 0 ] && return 0
		[ "$st" = 75 ] || break
		echo "mq-send $1-$2: busy, try $try" >>busy
	done
	echo "mq-send $1-$2 ended with $st" >>unexpected
}

all_settled() {
	[ "$(sql "SELECT (SELECT count(*) FROM delivery) = 0 AND
	    (SELECT pos FROM grp) = (SELECT next_off FROM topic) AND
	    (SELECT next_off FROM topic) = $((N + 1))")" = 1 ]
}

@test "kill -9 of consumers at random moments: every message handled at least once, none invented" {
	mq-topic group t g --lease 2s >/dev/null
	: >handled
	: >unexpected
	for i in $(seq 0 $((CONSUMERS - 1))); do
		start_consumer "$i"
	done

	start=$(date +%s)
	sent=0 kills=0 slice=$((N / SLICES))
	while [ "$(date +%s)" -lt $((start + CHAOS)) ]; do
		if [ "$sent" -lt "$N" ] &&
		    [ "$(date +%s)" -ge $((start + sent / slice)) ]; then
			send_slice $((sent + 1)) $((sent + slice))
			sent=$((sent + slice))
		fi
		sleep "0.$((RANDOM % 5 + 1))"
		i=$((RANDOM % CONSUMERS))
		kill_consumer "$i"
		kills=$((kills + 1))
		start_consumer "$i"
	done
	while [ "$sent" -lt "$N" ]; do
		send_slice $((sent + 1)) $((sent + slice))
		sent=$((sent + slice))
	done
	handled_in_chaos=$(wc -l <handled)

	# drain: nobody is killed any more
	if ! wait_for "$DRAIN" all_settled; then
		echo "not settled after ${DRAIN}s of draining:" >&2
		sql "SELECT 'pos', pos, 'next', (SELECT next_off FROM topic) FROM grp;
		    SELECT 'delivery', off, state, attempt, due - $(date +%s%3N),
		        consumer FROM delivery;
		    SELECT 'consumer', id, pid, seen - $(date +%s%3N) FROM consumer" >&2
		pids=$(IFS=,; echo "${pid[*]}")
		ps -o pid,ppid,pgid,stat,wchan:24,etime,args -p "$pids" \
		    --ppid "$pids" >&2 || true
		cat unexpected cons.*.out >&2
		false
	fi
	for i in $(seq 0 $((CONSUMERS - 1))); do
		kill -0 "${pid[$i]}" ||
		    echo "consumer $i (pid ${pid[$i]}) died while draining" >>unexpected
		kill -TERM "${pid[$i]}" 2>/dev/null || true
	done
	for i in $(seq 0 $((CONSUMERS - 1))); do
		st=0
		wait_for 20 gone "${pid[$i]}"
		wait "${pid[$i]}" || st=$?
		[ "$st" = 0 ] || echo "consumer $i ended with $st on SIGTERM" >>unexpected
	done

	dups=$(sort handled | uniq -d | wc -l)
	echo "# $kills kills, $handled_in_chaos lines handled while killing," \
	    "$(wc -l <handled) in all, duplicates: $dups" >&3
	[ -e busy ] && echo "# busy retries: $(wc -l <busy)" >&3

	# nothing went wrong along the way
	if [ -s unexpected ]; then cat unexpected >&2; false; fi
	# no message from a program but the benign one of a consumer that
	# settled after its lease was lost
	cat cons.*.out send.err | grep -v 'lease was lost' >errors || true
	if [ -s errors ]; then cat errors >&2; false; fi
	# the producer stored each message once
	[ "$(sql 'SELECT count(*), min(off), max(off) FROM msg')" = "$N|1|$N" ]
	# every message handled at least once, nothing else handled
	sort -u handled >handled.set
	seq "$N" | sort >sent.set
	missing=$(comm -13 handled.set sent.set | wc -l)
	invented=$(comm -23 handled.set sent.set | wc -l)
	[ "$missing" = 0 ] || { echo "$missing messages never handled" >&2; false; }
	[ "$invented" = 0 ] || { echo "$invented lines that were never sent" >&2; false; }
	[ "$(wc -l <handled)" -ge "$N" ]
	# the group settled each message exactly once; no dead letters
	[ "$(sql 'SELECT settled FROM grp')" = "$N" ]
	[ "$(sql 'SELECT count(*) FROM delivery')" = 0 ]
	[ "$(sql "SELECT count(*) FROM history WHERE event = 'acked'")" = "$N" ]
	[ "$(sql "SELECT count(DISTINCT off) FROM history WHERE event = 'delivered'")" = "$N" ]
	[ "$(sql 'PRAGMA integrity_check')" = ok ]
	# one more look releases nothing and leaves no consumer behind
	run -1 mq-recv -g g t
	[ "$(sql 'SELECT count(*) FROM consumer')" = 0 ]
}
