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
#
# On PostgreSQL the server is also restarted as after a crash (pg_ctl
# restart -m immediate) halfway through, between two sends: every session
# ends at once.  Followers waiting for messages reconnect by themselves;
# one caught in the middle of a claim or a settle ends with 75, as
# documented, and is started again like a killed one.
#
# The moments and victims come from $RANDOM, seeded by seed_random: the
# seed is printed; MQ_TEST_SEED=N replays its choices (not the timing).

load test_helper

N=5000
SLICES=10
CHAOS=15
DRAIN=300
CONSUMERS=4

teardown() {
	kill_bg
}

# start_consumer I: (re)start consumer I in the background.
start_consumer() {
	# shellcheck disable=SC2016 # for the handler's shell to expand
	mq-recv -g g -f -j 2 t -- sh -c 'read -r b; echo "$b" >>handled' \
	    >>"cons.$1.out" 2>&1 3>&- &
	pid[$1]=$!
	echo "${pid[$1]}" >>pids
}

# revive: start again every consumer that ended by itself: with 75 after
# the server's restart (on PostgreSQL; recorded in restarted), or else
# recorded as unexpected.
revive() {
	local i st
	for i in $(seq 0 $((CONSUMERS - 1))); do
		kill -0 "${pid[$i]}" 2>/dev/null && continue
		st=0
		wait "${pid[$i]}" 2>/dev/null || st=$?
		if [ -n "$PG" ] && [ "$st" = 75 ] && [ "$crashed" = 1 ]; then
			echo "consumer $i ended with 75" >>restarted
		else
			echo "consumer $i (pid ${pid[$i]}) ended with $st" >>unexpected
		fi
		start_consumer "$i"
	done
}

# kill_consumer I: SIGKILL consumer I and reap it; any other end than
# that signal (it exited by itself) is recorded.
kill_consumer() {
	local st=0
	# stderr closed: no "Killed" notice from bash
	{ kill -9 "${pid[$1]}"; wait "${pid[$1]}"; } 2>/dev/null || st=$?
	if [ -n "$PG" ] && [ "$st" = 75 ] && [ "$crashed" = 1 ]; then
		echo "consumer $1 ended with 75" >>restarted
	elif [ "$st" != 137 ]; then
		echo "consumer $1 (pid ${pid[$1]}) ended with $st" >>unexpected
	fi
}

# send_slice FROM TO: one mq-send of those numbers; busy (75) means
# nothing was stored (no send is running when the server restarts), so it
# is tried again, a moment later.
send_slice() {
	local try st nums
	mapfile -t nums < <(seq "$1" "$2")
	for try in 1 2 3 4 5 6 7 8 9 10; do
		st=0
		mq-send -q t "${nums[@]}" 2>>send.err || st=$?
		[ "$st" = 0 ] && return 0
		[ "$st" = 75 ] || break
		echo "mq-send $1-$2: busy, try $try" >>busy
		sleep 0.5
	done
	echo "mq-send $1-$2 ended with $st" >>unexpected
}

# released: deliveries released or expired so far (a kill took them).
released() {
	sql "SELECT count(*) FROM events WHERE event IN ('released', 'expired')"
}

# holder VAR: sets VAR to the number of a consumer that holds a message
# now, if one does (a random moment after a send may find them all
# idle, and the chaos must take a message at least once).
holder() {
	local by j t=delivery
	[ -z "$PG" ] || t=deliveries	# runs of leases too
	by=$(sql "SELECT pid FROM $t WHERE state = 1 LIMIT 1")
	for j in $(seq 0 $((CONSUMERS - 1))); do
		if [ -n "$by" ] && [ "${pid[$j]}" = "$by" ]; then
			printf -v "$1" %s "$j"
		fi
	done
}

settled_reviving() {
	revive
	all_settled
}

all_settled() {
	[ "$(sql "SELECT CASE WHEN (SELECT count(*) FROM delivery) = 0 AND
	    (SELECT pos FROM grp) = (SELECT next_off FROM topic) AND
	    (SELECT next_off FROM topic) = $((N + 1)) THEN 1 ELSE 0 END")" = 1 ]
}

@test "kill -9 of consumers at random moments: every message handled at least once, none invented" {
	seed_random
	mq-topic group t g --lease 2s >/dev/null
	: >handled
	: >unexpected
	: >send.err
	crashed=0
	for i in $(seq 0 $((CONSUMERS - 1))); do
		start_consumer "$i"
	done

	start=$(date +%s)
	sent=0 kills=0 slice=$((N / SLICES))
	while [ "$(date +%s)" -lt $((start + CHAOS)) ]; do
		fresh=0
		if [ "$sent" -lt "$N" ] &&
		    [ "$(date +%s)" -ge $((start + sent / slice)) ]; then
			send_slice $((sent + 1)) $((sent + slice))
			sent=$((sent + slice))
			fresh=1
		fi
		# until a kill has taken a message, one just after a send
		# comes while the consumers handle it (later, all may be idle),
		# and goes to one that holds a message, if one does
		took=$(released)
		if [ "$fresh" = 1 ] && [ "$took" = 0 ]; then
			sleep "0.0$((RANDOM % 5 + 1))"
		else
			sleep "0.$((RANDOM % 5 + 1))"
		fi
		if [ -n "$PG" ] && [ "$crashed" = 0 ] &&
		    [ "$(date +%s)" -ge $((start + CHAOS / 2)) ]; then
			pg_crash || fail "the server did not restart"
			crashed=1
		fi
		revive
		i=$((RANDOM % CONSUMERS))
		[ "$took" != 0 ] || holder i
		kill_consumer "$i"
		kills=$((kills + 1))
		start_consumer "$i"
	done
	while [ "$sent" -lt "$N" ]; do
		send_slice $((sent + 1)) $((sent + slice))
		sent=$((sent + slice))
	done
	revive
	handled_in_chaos=$(wc -l <handled)
	released_in_chaos=$(released)

	# drain: nobody is killed any more
	if ! wait_for "$DRAIN" settled_reviving; then
		echo "not settled after ${DRAIN}s of draining:" >&2
		sql "SELECT 'pos', pos, 'next', (SELECT next_off FROM topic) FROM grp;
		    SELECT 'delivery', off, state, attempt, due - $(now_ms),
		        consumer FROM delivery;
		    SELECT 'consumer', id, pid, seen - $(now_ms) FROM consumer" >&2
		pids=$(IFS=,; echo "${pid[*]}")
		ps -o pid,ppid,pgid,stat,wchan:24,etime,args -p "$pids" \
		    --ppid "$pids" >&2 || true
		cat unexpected cons.*.out >&2
		fail "not settled after ${DRAIN}s of draining (seed $SEED)"
	fi
	for i in $(seq 0 $((CONSUMERS - 1))); do
		kill -0 "${pid[$i]}" ||
		    echo "consumer $i (pid ${pid[$i]}) died while draining" >>unexpected
		kill -TERM "${pid[$i]}" 2>/dev/null || true
	done
	for i in $(seq 0 $((CONSUMERS - 1))); do
		if ! finish "${pid[$i]}" 30; then
			echo "consumer $i (pid ${pid[$i]}) still running 30s after SIGTERM" >>unexpected
		elif [ "$ST" != 0 ]; then
			echo "consumer $i ended with $ST on SIGTERM" >>unexpected
		fi
	done

	dups=$(sort handled | uniq -d | wc -l)
	echo "# $kills kills, $handled_in_chaos lines handled and" \
	    "$released_in_chaos deliveries released or expired while killing," \
	    "$(wc -l <handled) lines in all, duplicates: $dups" >&3
	if [ -e busy ]; then
		echo "# busy retries: $(wc -l <busy)" >&3
	fi
	if [ -e restarted ]; then
		echo "# consumers that ended with 75 at the server's restart:" \
		    "$(wc -l <restarted)" >&3
	fi
	[ -z "$PG" ] || [ "$crashed" = 1 ] || fail "the server was not restarted"

	# nothing went wrong along the way
	[ ! -s unexpected ] || fail "$(cat unexpected) (seed $SEED)"
	# the chaos happened: consumers were killed (each kill found its
	# consumer running, else unexpected) while they held messages
	[ "$kills" -gt 0 ] || fail "no consumer was killed (seed $SEED)"
	[ "$handled_in_chaos" -gt 0 ] ||
	    fail "nothing was handled while consumers were killed (seed $SEED)"
	[ "$released_in_chaos" -gt 0 ] ||
	    fail "no kill took a message from a consumer (seed $SEED)"
	# no message from a program but the benign one of a consumer that
	# settled after its lease was lost
	# (and on PostgreSQL, of those that lost the server as it restarted)
	run grep -hvE 'lease was lost|terminating connection|server closed the connection|connection (to server|lost)|the database system is (starting up|shutting down|in recovery)|could not connect|Connection refused|no connection to the server' \
	    cons.*.out send.err
	[ "$status" = 1 ] || fail "messages (grep exit $status): $output (seed $SEED)"
	# the producer stored each message once
	assert_equal "$(sql 'SELECT count(*), min(off), max(off) FROM msg')" "$N|1|$N"
	# every message handled at least once, nothing else handled
	sort -u handled >handled.set
	seq "$N" | sort >sent.set
	comm -13 handled.set sent.set >missing
	comm -23 handled.set sent.set >invented
	[ ! -s missing ] || fail "$(wc -l <missing) messages never handled," \
	    "such as $(head -3 missing | xargs) (seed $SEED)"
	[ ! -s invented ] || fail "$(wc -l <invented) lines that were never" \
	    "sent, such as $(head -3 invented | xargs) (seed $SEED)"
	[ "$(wc -l <handled)" -ge "$N" ] || fail "fewer lines than messages (seed $SEED)"
	# the group settled each message exactly once; no dead letters
	assert_equal "$(sql 'SELECT settled FROM grp')" "$N"
	assert_equal "$(sql 'SELECT count(*) FROM delivery')" 0
	assert_equal "$(sql "SELECT count(*) FROM events WHERE event = 'acked'")" "$N"
	assert_equal "$(sql "SELECT count(*) FROM events WHERE event = 'dead'")" 0
	assert_equal "$(sql "SELECT count(DISTINCT off) FROM events WHERE event = 'delivered'")" "$N"
	db_intact
	# one more look releases nothing and leaves no consumer behind
	run -1 mq-recv -g g t
	assert_equal "$(sql 'SELECT count(*) FROM consumer')" 0
}
