#!/usr/bin/env bats
# SPEC 6: twenty producers and twenty consumers at once.  Offsets come out
# without gaps or duplicates, every message is handled and settled, and no
# "database is locked" escapes: a busy program would exit 75, and none may.

load test_helper

teardown() {
	pkill -KILL -f "mq-recv -g many -f" 2>/dev/null || true
}

@test "20 producers and 20 exec-mode consumers: every message once, no busy failure" {
	mq-topic group t many --lease 10s >/dev/null
	for i in $(seq 20); do
		( mq-recv -g many -f t -- sh -c 'read -r b; echo "$b" >> handled' \
		    2>>errs; echo "$?" >> recv.rc ) >/dev/null 3>&- &
	done
	for i in $(seq 20); do
		( for j in $(seq 20); do
			mq-send -q t "p$i-$j" 2>>errs || echo "send $?" >> send.rc
		  done; echo done >> producers ) >/dev/null 3>&- &
	done
	lines() { [ "$(cat "$1" 2>/dev/null | sort -u | wc -l)" -ge "$2" ]; }
	lagless() { [ "$(mq-lag --json t many | jq .lag)" -eq 0 ]; }
	wait_for 120 test -e producers
	wait_for 120 bash -c '[ "$(wc -l < producers)" -eq 20 ]'
	wait_for 120 lines handled 400
	wait_for 30 lagless
	pkill -TERM -f "mq-recv -g many -f"
	wait_for 30 bash -c '[ "$(wc -l < recv.rc)" -eq 20 ]' 
	[ ! -e send.rc ] || fail "producers failed: $(sort send.rc | uniq -c)"
	run -0 sort -u recv.rc
	assert_output 0
	[ ! -s errs ] || fail "errors: $(head -3 errs)"
	# offsets dense and unique, all 400 bodies there
	run -0 sql 'SELECT min(off), max(off), count(DISTINCT off) FROM msg'
	assert_output '1|400|400'
	run -0 bash -c 'for i in $(seq 20); do for j in $(seq 20); do echo "p$i-$j"; done; done | sort | comm -3 - <(sort -u handled)'
	assert_output ''
	run -0 sql 'SELECT count(*) FROM delivery'
	assert_output 0
	echo "# duplicates: $(sort handled | uniq -d | wc -l)" >&3
	run -0 sql 'PRAGMA integrity_check'
	assert_output ok
}
