#!/usr/bin/env bats
# SPEC 6: twenty producers and twenty consumers at once.  Offsets come out
# without gaps or duplicates, every message is handled and settled, and no
# "database is locked" escapes: a busy program would exit 75, and none may.

load test_helper

# The consumers (bg: pids) and the producers (each a process group of its
# own, so that its mq-send goes with it: pgids) are killed in teardown if
# still there.
teardown() {
	kill_bg
}

@test "20 producers and 20 exec-mode consumers: every message once, no busy failure" {
	mq-topic group t many --lease 10s >/dev/null
	# a consumer's handler notes the body and its mq-recv (its parent)
	cons=()
	for i in $(seq 20); do
		# shellcheck disable=SC2016 # for the handler's shell to expand
		bg "recv.$i.out" mq-recv -g many -f t -- \
		    sh -c 'read -r b; echo "$b $PPID" >>handled'
		cons+=("$BG")
	done
	# all twenty are there before anything is sent
	wait_for 60 sql_is 'SELECT count(*) FROM consumer' 20

	# a producer sends its 20 messages with one mq-send each; a failed
	# send is noted and makes it exit 1
	cat >producer <<-'EOF'
		#!/bin/sh
		rc=0
		for j in $(seq 20); do
			mq-send -q t "p$1-$j" 2>>"send.$1.err" ||
			    { echo "p$1-$j: mq-send exited $?" >>send.rc; rc=1; }
		done
		exit $rc
	EOF
	chmod +x producer
	prods=()
	for i in $(seq 20); do
		setsid -w ./producer "$i" >/dev/null 3>&- &
		prods+=("$!")
		echo "$!" >>pgids
	done
	for p in "${prods[@]}"; do
		finish "$p" 120
		[ "$ST" = 0 ] || fail "a producer failed: $(cat send.rc send.*.err)"
	done

	# every body handled, nothing left
	bodies() {
		[ "$(cut -d' ' -f1 handled 2>/dev/null | sort -u | wc -l)" -ge "$1" ]
	}
	lagless() {
		[ "$(mq-lag --json t many | jq .lag)" = 0 ]
	}
	wait_for 120 bodies 400
	wait_for 60 lagless

	# the consumers all ran to the end, and stop cleanly on SIGTERM
	for p in "${cons[@]}"; do
		kill -0 "$p" || fail "consumer $p ended early: $(cat recv.*.out)"
		kill -TERM "$p"
	done
	for p in "${cons[@]}"; do
		finish "$p" 60
		[ "$ST" = 0 ] || fail "consumer $p exited $ST: $(cat recv.*.out)"
	done
	[ ! -e send.rc ] || fail "producers failed: $(cat send.rc)"
	# no program said anything: no busy, no "database is locked"
	run -0 cat recv.*.out send.*.err
	assert_output ''

	# offsets dense and unique, all 400 bodies there
	run -0 sql 'SELECT min(off), max(off), count(DISTINCT off), count(*) FROM msg'
	assert_output '1|400|400|400'
	for i in $(seq 20); do
		for j in $(seq 20); do
			echo "p$i-$j"
		done
	done | sort >sent
	cut -d' ' -f1 handled | sort -u >got
	run -0 comm -3 sent got
	assert_output ''
	# every one settled once; the consumers competed for them
	run -0 sql 'SELECT count(*) FROM delivery'
	assert_output 0
	run -0 sql 'SELECT settled FROM grp'
	assert_output 400
	run -0 sql "SELECT count(*) FROM events WHERE event = 'acked'"
	assert_output 400
	run -0 sql 'SELECT count(*) FROM consumer'
	assert_output 0
	consumers=$(cut -d' ' -f2 handled | sort -u | wc -l)
	echo "# handled by $consumers consumers; duplicates:" \
	    "$(cut -d' ' -f1 handled | sort | uniq -d | wc -l)" >&3
	[ "$consumers" -ge 2 ] || fail "only $consumers consumer handled messages"
	db_intact
}
