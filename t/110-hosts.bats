#!/usr/bin/env bats
# 110-hosts.bats: many hosts on one PostgreSQL cluster.  Each host is a
# network namespace of its own, joined to this one by a veth pair with
# addresses of a test network (10.213.S.0/24, one /30 per host), and each
# program run on it gets a UTS namespace with the host's name
# (mqhost-NAME), so mq sees a host of another name, as it would on
# another machine (on one host name, a consumer's liveness is also judged
# by its pid: mq-recv(1)).  Producers and consumers there reach the
# server over TCP, with the password from PGPASSFILE.
#
# A registered consumer holds a session-level advisory lock: when its
# connection ends, the server lets go of it, and the next consumer of its
# group to look (once a second) takes its leases back, whatever their
# lease time.  A host killed outright closes its connections at once; a
# host that drops off the network is found out by the server's keepalive
# and TCP user timeout (common/pg/pg.c: idle 10s, then 3 probes 5s apart,
# user timeout 25s), which bounds how long its leases stay held: about
# 25s and the next look, as mq(7) says; 30s at most.
#
# Needs root (network namespaces); skipped, with the reason, without.
# Teardown deletes exactly the namespaces and veths it made, after it
# killed what runs in them and what it started itself.

load test_helper
# shellcheck disable=SC2034 # read by test_helper's setup
PG_ONLY="hosts in network namespaces reach the server over TCP"

# The bound on a vanished host's leases (keepalive and user timeout, above),
# shown with the measured time, and what the test allows before it calls
# it a failure (a loaded machine is slow to run the look, not the timers).
LINK_BOUND=30
LINK_LIMIT=90

teardown() {
	kill_bg || :
	drop_hosts
}

# make_hosts NAME...: a host per NAME (letters): a network namespace, a
# veth pair from here (HOST_ADDR_NAME: this end, where the server is
# reached) to its eth0 (HOST_IP_NAME), loopback up.  Skips the test when
# network namespaces cannot be made here.
make_hosts() {
	local lk lock s i=0 h ns veth err
	[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
	command -v ip >/dev/null || skip "no ip(8) (iproute2)"
	command -v unshare >/dev/null || skip "no unshare(1) (util-linux)"
	command -v flock >/dev/null || skip "no flock(1) (util-linux)"
	# a /24 no address here is in, chosen under a lock, so concurrent
	# runs take different ones (not /run/netns: ip netns add locks that)
	lock=/run/lock/mq-110-hosts.lock
	[ -d /run/lock ] || lock=/tmp/mq-110-hosts.lock
	exec {lk}>>"$lock" || fail "cannot open $lock"
	flock -w 60 "$lk" || { exec {lk}>&-; fail "cannot lock $lock"; }
	for ((s = BATS_ROOT_PID % 200 + 20, i = 0; i < 200; s = s % 250 + 1, i++)); do
		ip -4 -o addr show | grep -q " 10\.213\.$s\." || break
	done
	[ "$i" -lt 200 ] || { exec {lk}>&-; fail "no free subnet in 10.213.0.0/16"; }
	i=0
	# ip netns add mounts /run/netns on itself if it is not a mount yet:
	# drop_hosts undoes that (a chroot's would stay behind on the host)
	mountpoint -q /run/netns 2>/dev/null || : >"$BATS_TEST_TMPDIR/netns-mount"
	for h; do
		ns=mq-hosts-$BATS_ROOT_PID-$BATS_SUITE_TEST_NUMBER-$h
		veth=mq$BATS_ROOT_PID$BATS_SUITE_TEST_NUMBER$h	# 15 at most
		echo "$ns $veth" >>"$BATS_TEST_TMPDIR/hosts"
		# (in a chroot it is made, but cannot be entered)
		if ! err=$({ ip netns add "$ns" &&
		    ip netns exec "$ns" true; } 2>&1); then
			exec {lk}>&-
			skip "cannot make a network namespace here: $err"
		fi
		printf -v "HOST_NS_$h" %s "$ns"
		printf -v "HOST_VETH_$h" %s "$veth"
		printf -v "HOST_ADDR_$h" %s "10.213.$s.$((4 * i + 1))"
		printf -v "HOST_IP_$h" %s "10.213.$s.$((4 * i + 2))"
		if ! { ip link add "$veth" type veth peer name eth0 netns "$ns" &&
		    ip addr add "10.213.$s.$((4 * i + 1))/30" dev "$veth" &&
		    ip link set "$veth" up &&
		    ip -n "$ns" addr add "10.213.$s.$((4 * i + 2))/30" dev eth0 &&
		    ip -n "$ns" link set eth0 up &&
		    ip -n "$ns" link set lo up; }; then
			exec {lk}>&-
			fail "cannot set up host $h"
		fi
		i=$((i + 1))
	done
	exec {lk}>&-
	for h; do
		wait_for 10 reaches "$h" ||
		    fail "host $h cannot reach the server: $(reaches "$h" 2>&1)"
	done
}

# reaches NAME: host NAME reaches the server over TCP, from its address.
reaches() {
	local got
	got=$(on "$1" psql -X -A -t -d "$(host_db "$1")" \
	    -c 'SELECT host(inet_client_addr())') || return 1
	[ "$got" = "$(host_var IP "$1")" ] || { echo "from $got" >&2; return 1; }
}

# host_var KIND NAME: HOST_KIND_NAME.
host_var() {
	local v=HOST_$1_$2
	echo "${!v}"
}

# kill_host NAME: SIGKILL to every process of the host, until none is
# left (a dying parent may have forked).
kill_host() {
	local ns pids
	ns=$(host_var NS "$1")
	for _ in $(seq 100); do
		pids=$(ip netns pids "$ns" 2>/dev/null)
		[ -n "$pids" ] || return 0
		# shellcheck disable=SC2086 # one pid a word
		kill -9 $pids 2>/dev/null
		sleep 0.05
	done
	return 1
}

# no_processes NAME: nothing runs on host NAME.
no_processes() {
	[ -z "$(ip netns pids "$(host_var NS "$1")")" ]
}

# drop_hosts: for teardown: every host make_hosts made, whatever happened:
# its processes killed, its veth pair and namespace deleted.
drop_hosts() {
	local ns veth pids
	[ -e "$BATS_TEST_TMPDIR/hosts" ] || return 0
	while read -r ns veth; do
		[ -e "/run/netns/$ns" ] || continue
		for _ in $(seq 100); do
			pids=$(ip netns pids "$ns" 2>/dev/null)
			[ -n "$pids" ] || break
			# shellcheck disable=SC2086 # one pid a word
			kill -9 $pids 2>/dev/null
			sleep 0.05
		done
		ip link del "$veth" 2>/dev/null
		ip netns del "$ns" 2>/dev/null
	done <"$BATS_TEST_TMPDIR/hosts"
	rm -f "$BATS_TEST_TMPDIR/hosts"
	# the mount of /run/netns ip made, once no namespace is left in it
	if [ -e "$BATS_TEST_TMPDIR/netns-mount" ] &&
	    [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
		umount /run/netns 2>/dev/null || :
	fi
	rm -f "$BATS_TEST_TMPDIR/netns-mount"
}

# host_db NAME: the test's database (its schema, as MQ_DB names it), over
# TCP from host NAME.
host_db() {
	[[ $MQ_DB == *'&options='* ]] || fail "MQ_DB has no options: $MQ_DB"
	echo "postgresql://mq@$(host_var ADDR "$1"):$MQ_PG_PORT/mq?options=${MQ_DB##*&options=}"
}

# host_cmd NAME: in HOST_CMD, the words that run a command on host NAME:
# in its network namespace, in a UTS namespace named mqhost-NAME, with
# MQ_DB over TCP.  The command's pid is the pid of ip(8), which execs it.
host_cmd() {
	# shellcheck disable=SC2016 # $1 and $@ are sh's
	HOST_CMD=(ip netns exec "$(host_var NS "$1")" unshare --uts --
	    sh -c 'echo "$1" >/proc/sys/kernel/hostname && shift && exec "$@"'
	    sh "mqhost-$1" env "MQ_DB=$(host_db "$1")")
}

# on NAME CMD...: run CMD on host NAME.
on() {
	local h=$1
	shift
	host_cmd "$h"
	"${HOST_CMD[@]}" "$@"
}

# on_bg OUT NAME CMD...: bg CMD on host NAME (its pid in BG).
on_bg() {
	local out=$1 h=$2
	shift 2
	host_cmd "$h"
	bg "$out" "${HOST_CMD[@]}" "$@"
}

# handlers: handler.sh LOG [GO [FROM]] notes each delivery in LOG (host,
# offset, attempt, receipt, body), then, from attempt FROM (default 1)
# on, holds it until the file GO exists, and acks it.  produce.sh NAME
# [COUNT] sends NAME-1, NAME-2 ... (for ever without COUNT), printing
# "OFFSET BODY" for each stored.
write_scripts() {
	cat >handler.sh <<'EOF'
body=$(cat)
echo "$(cat /proc/sys/kernel/hostname) $MQ_OFFSET $MQ_ATTEMPT $MQ_RECEIPT $body" >>"$1"
if [ -n "${2-}" ] && [ "$MQ_ATTEMPT" -ge "${3:-1}" ]; then
	while [ ! -e "$2" ]; do sleep 0.2; done
fi
exit 0
EOF
	cat >produce.sh <<'EOF'
i=0
while [ -z "${2-}" ] || [ "$i" -lt "$2" ]; do
	i=$((i + 1))
	off=$(mq-send t "$1-$i") || exit
	echo "$off $1-$i"
	sleep 0.02
done
EOF
}

# leased_by NAME: how many deliveries host NAME holds.
leased_by() {
	sql "SELECT count(*) FROM delivery WHERE state = 1 AND
	    host = 'mqhost-$1'"
}

# leased_is NAME N: host NAME holds N deliveries.
leased_is() {
	[ "$(leased_by "$1")" = "$2" ]
}

# all_acked: every message of t is handed out and settled.
all_acked() {
	sql_is "SELECT (SELECT count(*) FROM delivery) = 0 AND
	    g.pos = t.next_off FROM grp g JOIN topic t ON t.id = g.topic" t
}

# log_has LOG N [ATTEMPT]: LOG has N lines (of that attempt).
log_has() {
	[ "$(awk -v a="${3-}" 'a == "" || $3 == a' "$1" 2>/dev/null |
	    wc -l)" -eq "$2" ]
}

# has_lines FILE N: FILE has N lines or more.
has_lines() {
	[ "$(wc -l <"$1")" -ge "$2" ]
}

# once_each: every message of t was acked exactly once, offsets dense,
# nothing left in delivery.
once_each() {
	run -0 sql "SELECT count(*), min(off), max(off) FROM msg"
	local n=${output%%|*}
	assert_output "$n|1|$n"
	run -0 sql "SELECT off, count(*) FROM history WHERE event = 'acked'
	    GROUP BY off HAVING count(*) <> 1"
	assert_output ""
	run -0 sql "SELECT count(DISTINCT off) FROM history
	    WHERE event = 'acked'"
	assert_output "$n"
	run -0 sql "SELECT count(*) FROM delivery"
	assert_output 0
}

@test "kill -9 every process of one host: its leases go to another host's consumers at once" {
	make_hosts a b c
	write_scripts
	mq-topic group t g --lease 10m >/dev/null
	run -0 on c mq-send t c-0-1 c-0-2 c-0-3 c-0-4 c-0-5 c-0-6 c-0-7 c-0-8
	# host a: two consumers whose handlers never finish, and a producer
	on_bg a1.out a mq-recv -g g -f -j 3 t -- sh "$PWD/handler.sh" "$PWD/a.log" "$PWD/never"
	a1=$BG
	on_bg a2.out a mq-recv -g g -f -j 3 t -- sh "$PWD/handler.sh" "$PWD/a.log" "$PWD/never"
	a2=$BG
	wait_for 20 leased_is a 6 || fail "a holds $(leased_by a): $(cat a1.out a2.out)"
	on_bg a-send.out a sh produce.sh a
	# hosts b and c: two consumers that ack, and a producer of 30
	on_bg b1.out b mq-recv -g g -f -j 4 t -- sh "$PWD/handler.sh" "$PWD/b.log"
	b1=$BG
	on_bg b2.out b mq-recv -g g -f -j 4 t -- sh "$PWD/handler.sh" "$PWD/b.log"
	b2=$BG
	on_bg c-send.out c sh produce.sh c 30
	csend=$BG
	finish "$csend" 60 || fail "c's producer: $(cat c-send.out)"
	assert_equal "$ST" 0
	wait_for 20 has_lines a-send.out 10 || fail "a's producer: $(cat a-send.out)"
	# the consumers of a and b are connected over TCP from their addresses
	for h in a b; do
		run -0 psql_admin -A -t -c "SELECT count(*) FROM pg_stat_activity
		    WHERE application_name = 'mq-recv'
		    AND client_addr = '$(host_var IP "$h")'"
		assert_output 2
	done
	# what a holds is still held: a 10-minute lease
	wait_for 20 sql_is "SELECT count(*) FROM delivery" 6 ||
	    fail "unsettled: $(sql 'SELECT off, state, host FROM delivery')"
	held=$(sql "SELECT off FROM delivery WHERE host = 'mqhost-a' ORDER BY off")
	assert_equal "$(wc -l <<<"$held")" 6

	t0=$(now_ms)
	kill_host a || fail "host a's processes would not die"
	wait_for 20 all_acked || fail "unsettled after 20s: $(sql 'SELECT off, state, host FROM delivery')"
	t1=$(now_ms)
	secs=$(awk -v ms=$((t1 - t0)) 'BEGIN { printf "%.1f", ms / 1000 }')
	echo "# host a killed: its 6 leases handled on b after ${secs}s" >&3

	# a's consumers died of the signal; b's carry on, and stop when told
	for p in "$a1" "$a2"; do
		finish "$p" 10
		assert_equal "$ST" 137
	done
	kill -TERM "$b1" "$b2"
	for p in "$b1" "$b2"; do
		finish "$p" 20 || fail "b: $(cat b1.out b2.out)"
		assert_equal "$ST" 0
	done
	# the six came back as released (consumer gone), attempt 2, acked by b
	run -0 sql "SELECT off FROM history WHERE event = 'released'
	    AND reason = 'consumer gone' AND host = 'mqhost-a' ORDER BY off"
	assert_output "$held"
	run -0 sql "SELECT off FROM history WHERE event = 'acked'
	    AND attempt = 2 AND host = 'mqhost-b' ORDER BY off"
	assert_output "$held"
	run -0 sql "SELECT count(*) FROM history WHERE event = 'acked'
	    AND host <> 'mqhost-b'"
	assert_output 0
	once_each
	# handled on b once each, every stored message; and nothing a
	# producer printed is missing
	run -0 sql "SELECT off || ' ' || convert_from(body, 'UTF8') FROM msg
	    ORDER BY off"
	stored=$output
	# shellcheck disable=SC2016 # awk's fields
	run -0 awk '{ print $2 " " $5 }' b.log
	assert_equal "$(sort -n <<<"$output")" "$stored"
	run -0 comm -23 <(sort a-send.out c-send.out) <(sort <<<"$stored")
	assert_output ""
	assert_equal "$(wc -l <c-send.out)" 30
}

@test "a host whose link drops: its leases come back within the keepalive bound, and it settles none of them" {
	make_hosts a b
	write_scripts
	mq-topic group t g --lease 10m >/dev/null
	run -0 on b mq-send t m1 m2 m3 m4 m5 m6
	# a holds three, until a.go
	on_bg a.out a mq-recv -g g -f -j 3 t -- sh "$PWD/handler.sh" "$PWD/a.log" "$PWD/a.go"
	apid=$BG
	wait_for 20 leased_is a 3 || fail "a holds $(leased_by a): $(cat a.out)"
	held=$(sql "SELECT off FROM delivery WHERE host = 'mqhost-a' ORDER BY off")
	# b acks the rest, and holds what it gets again until b.go
	on_bg b.out b mq-recv -g g -f -j 8 t -- sh "$PWD/handler.sh" "$PWD/b.log" "$PWD/b.go" 2
	bpid=$BG
	wait_for 20 log_has b.log 3 1 || fail "b: $(cat b.out b.log)"
	wait_for 20 sql_is "SELECT count(*) FROM delivery" 3 ||
	    fail "unsettled: $(sql 'SELECT off, state, host FROM delivery')"
	wait_for 20 log_has a.log 3 || fail "a: $(cat a.out a.log)"

	# a's cable is pulled: nothing goes in or out of its eth0
	t0=$(now_ms)
	ip -n "$(host_var NS a)" link set eth0 down
	wait_for "$LINK_LIMIT" log_has b.log 3 2 ||
	    fail "b has not got a's leases after ${LINK_LIMIT}s: $(cat b.log b.out)"
	t1=$(now_ms)
	secs=$(awk -v ms=$((t1 - t0)) 'BEGIN { printf "%.1f", ms / 1000 }')
	echo "# host a's link down: its 3 leases on b after ${secs}s (bound ${LINK_BOUND}s)" >&3
	# shellcheck disable=SC2016 # awk's fields
	run -0 awk '$3 == 2 { print $2 }' b.log
	assert_equal "$(sort -n <<<"$output")" "$held"
	run -0 sql "SELECT off FROM history WHERE event = 'released'
	    AND reason = 'consumer gone' AND host = 'mqhost-a' ORDER BY off"
	assert_output "$held"
	run -0 sql "SELECT off || ' ' || attempt FROM delivery WHERE state = 1
	    AND host = 'mqhost-b' ORDER BY off"
	mapfile -t offs <<<"$held"
	assert_output "$(printf '%s 2\n' "${offs[@]}")"
	b_rows=$(sql "SELECT off, attempt, token, consumer, due FROM delivery
	    ORDER BY off")

	# the link comes back: a's receipts are stale, from a as from here
	ip -n "$(host_var NS a)" link set eth0 up
	t2=$(now_ms)
	mapfile -t receipts < <(awk '{ print $4 }' a.log)
	assert_equal "${#receipts[@]}" 3
	run --separate-stderr on a mq-ack "${receipts[@]}"
	assert_equal "$status" 1
	stderr_has stale
	# a finds it was given up: it exits 75, its handlers die with it;
	# or it carries on, and its handlers' results settle nothing
	if wait_for 60 gone "$apid"; then
		secs=$(awk -v ms=$(($(now_ms) - t2)) 'BEGIN { printf "%.1f", ms / 1000 }')
		finish "$apid" 10
		assert_equal "$ST" 75
		echo "# host a's consumer exited 75 ${secs}s after its link came back: $(tail -1 a.out)" >&3
		wait_for 10 no_processes a ||
		    fail "left on a: $(ip netns pids "$(host_var NS a)")"
	else
		echo "# host a's consumer carries on" >&3
		touch a.go
		sleep 2
	fi
	assert_equal "$(sql "SELECT off, attempt, token, consumer, due FROM delivery
	    ORDER BY off")" "$b_rows"

	# b acks them: each message acked once, three of them by b at attempt 2
	touch b.go
	wait_for 20 all_acked || fail "unsettled: $(sql 'SELECT off, state, host FROM delivery')"
	run -0 sql "SELECT off FROM history WHERE event = 'acked'
	    AND attempt = 2 AND host = 'mqhost-b' ORDER BY off"
	assert_output "$held"
	run -0 sql "SELECT count(*) FROM history WHERE event = 'acked'
	    AND host <> 'mqhost-b'"
	assert_output 0
	once_each
	if ! gone "$apid"; then
		kill -TERM "$apid"
	fi
	kill -TERM "$bpid"
	finish "$bpid" 20 || fail "b: $(cat b.out)"
	assert_equal "$ST" 0
}
