#!/usr/bin/env bats
# 100-pg.bats: what is PostgreSQL's own: naming the database (URL,
# postgres://, keyword string), the schema (made on first use, versioned,
# a newer one or someone else's refused), installations side by side in
# one database, errors and their exit statuses, passwords never shown,
# a build without libpq and a libpq that cannot be loaded.  The rest of
# the suite runs on PostgreSQL too (make test), with the same tests as on
# SQLite.
# shellcheck disable=SC2154 # stderr is set by bats' run --separate-stderr

load test_helper
# shellcheck disable=SC2034 # read by setup() in test_helper.bash
PG_ONLY="the PostgreSQL backend itself"

teardown() {
	kill_bg
}

one_line_error() {
	assert_equal "$status" "$1"
	# a usage error adds the synopsis after its one line
	assert_equal "$(printf '%s\n' "${stderr%%$'\n'usage: *}" | wc -l)" 1
	[[ $stderr == mq-*:* ]] || fail "not one line from mq: $stderr"
}

# as_schema NAME: MQ_DB for schema NAME of the test cluster (made, owned
# by role mq).
as_schema() {
	psql_admin -c "CREATE SCHEMA IF NOT EXISTS $1 AUTHORIZATION mq" \
	    >/dev/null 2>&1
	echo "postgresql://mq@/mq?host=$MQ_PG_DIR&port=$MQ_PG_PORT&options=-csearch_path%3D$1"
}

# dump: what the test's schema holds, to compare before and after.
dump() {
	psql_admin -A -t -c "SELECT tablename FROM pg_tables
	    WHERE schemaname = '$PG_SCHEMA' ORDER BY 1"
	if sql 'SELECT 1 FROM mq_meta' >/dev/null 2>&1; then
		sql "SELECT key, value FROM mq_meta ORDER BY key;
		    SELECT name, next_off, msgs FROM topic ORDER BY name;
		    SELECT off, hex(body) FROM msg ORDER BY topic, off"
	fi
}

# hold SQL: a psql session runs SQL in a transaction, and holds it open,
# its locks taken, until release.
hold() {
	mkfifo lock
	psql -X -q -d "$MQ_DB" <lock >lock.out 2>&1 3>&- &
	echo "$!" >>pids
	exec 4>lock
	echo "BEGIN; $1 SELECT 'locked';" >&4
	wait_for 30 grep -q locked lock.out
}

release() {
	echo "COMMIT;" >&4
	exec 4>&-
}

# ack_waits: an mq-ack waits for a lock.
ack_waits() {
	[ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE
	    application_name = 'mq-ack' AND wait_event_type = 'Lock'")" = 1 ]
}

# ack_held RECEIPT...: mq-ack RECEIPT..., once it waits for what hold took,
# released; its status in ST, its output in ack.out.
ack_held() {
	bg ack.out mq-ack "$@"
	wait_for 30 ack_waits || fail "the ack did not wait: $(cat ack.out)"
	release
	finish "$BG" 30
}

@test "first use makes the schema: mq_meta names the app and its version" {
	no_db
	run -0 mq-send t hello
	assert_output 1
	run -0 sql "SELECT value FROM mq_meta WHERE key IN ('app', 'version')
	    ORDER BY key"
	assert_output $'mq\n9'
	# readers do not make it
	PG_SCHEMA=empty_$PG_SCHEMA
	export MQ_DB
	MQ_DB=$(as_schema "$PG_SCHEMA")
	run --separate-stderr mq-lag
	one_line_error 66
	stderr_has "no mq schema"
	no_db
}

@test "a version 1 schema is migrated by the first program that opens it, a reader too" {
	mq-send -q t one two
	run -0 mq-recv -g g --format '%r' t
	mq-ack "$output"
	acked=$(sql "SELECT ts FROM history WHERE event = 'acked'")
	[ -n "$acked" ]
	mq-topic group t h >/dev/null
	# as version 1 left it: no grp.settled_ts, no paused_until, no
	# grp.timeout, no grp.cancelled, no time to live, no headers, no
	# outbox nor send(), no lease nor acks (acks in history, the view
	# events over history and delivery alone), no combined
	sql "$(undo_pg_step9) $(undo_pg_step8)
	    DROP FUNCTION send(text, bytea, text, interval,
	    timestamptz, text, interval); DROP FUNCTION send(text, text, text,
	    interval, timestamptz, text, interval);
	    $(undo_step10)
	    ALTER TABLE grp DROP COLUMN settled_ts;
	    ALTER TABLE grp DROP COLUMN paused_until;
	    ALTER TABLE grp DROP COLUMN timeout;
	    ALTER TABLE grp DROP COLUMN cancelled;
	    ALTER TABLE grp DROP COLUMN lapsed;
	    ALTER TABLE topic DROP COLUMN ttl;
	    ALTER TABLE msg DROP COLUMN expires;
	    ALTER TABLE topic DROP COLUMN paused_until;
	    UPDATE mq_meta SET value = '1' WHERE key = 'version'"
	run -0 mq-lag --json t
	assert_equal "${#lines[@]}" 2
	# shellcheck disable=SC2016 # $ts is jq's
	jtrue --argjson ts "$acked" '.group == "g" and .last_settle_ms == $ts' <<<"${lines[0]}"
	jtrue '.group == "h" and .last_settle_ms == null' <<<"${lines[1]}"
	run -0 sql "SELECT value FROM mq_meta WHERE key = 'version'"
	assert_output 9
	run -0 sql 'SELECT count(*) FROM grp WHERE timeout IS NULL AND cancelled = 0 AND lapsed = 0'
	assert_output 2
	run -0 sql "SELECT count(*) FROM outbox"
	assert_output 0
	run -0 sql "SELECT count(*) FROM combined"
	assert_output 0
	run -0 sql "BEGIN; SELECT send('t', 'three'); ROLLBACK"
	assert_output 3
	# and kept from then on; messages carry headers again
	run -0 mq-recv -A -g h t
	run -0 mq-send -H a=1 t three
	run -0 mq-replay --format '%o %H\n' t
	assert_output $'1 \n2 \n3 a=1'
	run -0 mq-lag --json t h
	jtrue '.last_settle_ms > 0' <<<"$output"
}

@test "a newer schema is refused (65), one line, nothing changed" {
	mq-send -q t one
	sql "UPDATE mq_meta SET value = '99' WHERE key = 'version'"
	before=$(dump)
	run --separate-stderr mq-send t two
	one_line_error 65
	stderr_has "schema version 99 is newer"
	run --separate-stderr mq-recv -g g t
	one_line_error 65
	assert_equal "$(dump)" "$before"
}

@test "a schema that holds other tables and no mq_meta is refused (65), nothing made" {
	sql 'CREATE TABLE customer (id int PRIMARY KEY, name text)'
	before=$(dump)
	run --separate-stderr mq-send t hello
	one_line_error 65
	stderr_has "not an mq database"
	assert_equal "$(dump)" "$before"
}

@test "installations in two schemas of one database do not meet, nor do their consumers' locks" {
	a=$(as_schema "a_$PG_SCHEMA")
	b=$(as_schema "b_$PG_SCHEMA")
	run -0 mq-send -d "$a" t a1 a2
	run -0 mq-send -d "$b" t b1
	assert_output 1
	run -0 mq-recv -d "$b" -g g -n 0 --format '%b\n' t
	assert_output b1
	# consumer 1 of each holds its advisory lock: neither waits on the other
	bg a.out mq-recv -d "$a" -g g -f --format '%b\n' -A t
	pa=$BG
	bg b.out mq-recv -d "$b" -g h -f --format '%b\n' -A t
	pb=$BG
	wait_for 10 grep -qx a2 a.out || fail "a: $(cat a.out)"
	run -0 mq-send -d "$b" t b2
	wait_for 10 grep -qx b2 b.out || fail "b: $(cat b.out)"
	run -0 psql -X -A -t -d "$a" -c 'SELECT count(*) FROM consumer'
	assert_output 1
	kill -TERM "$pa" "$pb"
	finish "$pa" 10
	finish "$pb" 10
}

@test "a URL, postgres:// and a keyword string name the same database" {
	mq-send -q t one
	url="postgres://mq@/mq?host=$MQ_PG_DIR&port=$MQ_PG_PORT&options=-csearch_path%3D$PG_SCHEMA"
	run -0 mq-send -d "$url" t two
	assert_output 2
	kw="host=$MQ_PG_DIR port=$MQ_PG_PORT dbname=mq user=mq options=-csearch_path=$PG_SCHEMA"
	MQ_DB=$kw run -0 mq-send t three
	assert_output 3
	run -0 mq-recv -g g -n 0 --format '%b\n' t
	assert_output $'one\ntwo\nthree'
}

@test "a password is never printed: errors show it masked" {
	bad="postgresql://mq:s3cr3t-pw@127.0.0.1:$MQ_PG_PORT/mq?connect_timeout=5"
	PGPASSFILE=/dev/null run --separate-stderr mq-send -d "$bad" t x
	one_line_error 77
	stderr_has "mq:***@127.0.0.1"
	[[ $stderr != *s3cr3t* ]] || fail "password shown: $stderr"
	kw="host=127.0.0.1 port=$MQ_PG_PORT dbname=mq user=mq password='s3cr3t pw'"
	PGPASSFILE=/dev/null run --separate-stderr mq-lag -d "$kw"
	one_line_error 77
	stderr_has "password=***"
	[[ $stderr != *s3cr3t* ]] || fail "password shown: $stderr"
}

@test "TCP with the password from PGPASSFILE, not from the URL" {
	[ -r "$PGPASSFILE" ] || fail "no PGPASSFILE from t/pgcluster.sh"
	tcp="postgresql://mq@127.0.0.1:$MQ_PG_PORT/mq?options=-csearch_path%3D$PG_SCHEMA"
	run -0 mq-send -d "$tcp" t over-tcp
	assert_output 1
	run -0 mq-recv -d "$tcp" -g g --format '%b\n' -A t
	assert_output over-tcp
}

@test "no server: 75 (try again), one line; no such database: 66" {
	port=1
	run --separate-stderr mq-send -d "postgresql://mq@127.0.0.1:$port/mq" t x
	one_line_error 75
	stderr_has "cannot connect"
	run --separate-stderr mq-send -d "postgresql://mq@/nosuchdb?host=$MQ_PG_DIR&port=$MQ_PG_PORT" t x
	one_line_error 66
}

@test "no permission: 77, one line, nothing changed" {
	mq-send -q t one
	psql_admin -c "DROP ROLE IF EXISTS mq_nobody; CREATE ROLE mq_nobody LOGIN" >/dev/null
	before=$(dump)
	url="postgresql://mq_nobody@/mq?host=$MQ_PG_DIR&port=$MQ_PG_PORT&options=-csearch_path%3D$PG_SCHEMA"
	run --separate-stderr mq-send -d "$url" t two
	one_line_error 77
	stderr_has "permission denied"
	run --separate-stderr mq-recv -d "$url" -g g t
	one_line_error 77
	assert_equal "$(dump)" "$before"
}

@test "a session-level advisory lock marks a live consumer; a dead one's leases come back at once" {
	mq-topic group t g --lease 1h >/dev/null
	mq-send -q t one two
	# a member that holds a lease and is killed
	bg held.out mq-recv -g g -f -j 1 t -- sleep 3600
	victim=$BG
	wait_for 10 sql_is "SELECT count(*) FROM delivery WHERE state = 1" 1
	run -0 sql "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
	    AND granted AND classid = (SELECT value::oid FROM mq_meta
	    WHERE key = 'lockspace')"
	assert_output 1
	kill -9 "$victim"
	finish "$victim" 10
	# the next consumer to look finds its lock free: not an hour's lease
	run -0 mq-recv -g g -n 2 -w 5 --format '%b\n' -A t
	assert_output $'one\ntwo'
	run -0 sql "SELECT count(*) FROM consumer"
	assert_output 0
}

@test "a build without libpq says so for a PostgreSQL database: one line, 64" {
	src=$BATS_TEST_DIRNAME/..
	make -s -C "$src" B="$BATS_TEST_TMPDIR/nopg" PG=no \
	    "$BATS_TEST_TMPDIR/nopg/mq-send" >make.out 2>&1 ||
	    fail "build: $(cat make.out)"
	run --separate-stderr "$BATS_TEST_TMPDIR/nopg/mq-send" t x
	one_line_error 64
	stderr_has "no PostgreSQL support"
	run --separate-stderr "$BATS_TEST_TMPDIR/nopg/mq-send" -d "host=/tmp dbname=mq" t x
	one_line_error 64
	run -0 "$BATS_TEST_TMPDIR/nopg/mq-send" -d "$BATS_TEST_TMPDIR/x.db" t x
	assert_output 1
}

@test "a libpq that cannot be loaded (MQ_LIBPQ) says so: one line, 64, nothing written; SQLite never loads it" {
	export MQ_LIBPQ=/nonexistent/libpq.so.5
	run --separate-stderr mq-send t x
	one_line_error 64
	stderr_has "mq-send: cannot load /nonexistent/libpq.so.5 (the PostgreSQL client library): " \
	    "No such file"
	run --separate-stderr mq-recv -g g t
	one_line_error 64
	# a library without the functions mq calls (a libpq older than 14)
	MQ_LIBPQ=libsqlite3.so.0 run --separate-stderr mq-send \
	    -d "host=$MQ_PG_DIR port=$MQ_PG_PORT dbname=mq user=mq" t x
	one_line_error 64
	stderr_has "undefined symbol: PQ"
	no_db
	run -0 mq-send -d "$BATS_TEST_TMPDIR/x.db" t x
	assert_output 1
	run -0 mq-recv -d "$BATS_TEST_TMPDIR/x.db" -g g -A --format '%b\n' t
	assert_output x
	unset MQ_LIBPQ
	run -0 mq-send t x
	assert_output 1
}

@test "moving a topic from SQLite: mq-replay | mq-send -0 copies bodies byte-exact; groups are set where they were" {
	old=$BATS_TEST_TMPDIR/old.db
	# bodies with NUL, newline, tab, bytes that are not UTF-8, and empty
	printf 'one\0two\nlines\0a\ttab\0\377\376\0\0last\0' |
	    mq-send -d "$old" -0 -q t
	mq-send -d "$old" -q t six seven eight
	mq-topic -d "$old" group t g >/dev/null
	mq-recv -d "$old" -g g -n 3 -A t >/dev/null
	# the recipe of mq(7): the bodies, then each group's position
	mq-replay -d "$old" --format '%B\0' t | mq-send -0 -q t
	run -0 sql "SELECT count(*) FROM msg"
	assert_output 9
	mq-topic group t g >/dev/null
	mq-replay -g g --from-offset 4 t >/dev/null
	# the same offsets and bodies, byte for byte; the same backlog
	cmp <(mq-replay -d "$old" -0 t) <(mq-replay -0 t)
	run -0 mq-recv -d "$old" -g g -n 0 --format '%o %a %b\n' t
	want=$output
	assert_equal "${#lines[@]}" 6
	run -0 mq-recv -g g -n 0 --format '%o %a %b\n' t
	assert_equal "$output" "$want"
}

@test "a writer holding a topic's row: mq-lag answers, a sender waits MQ_BUSY_TIMEOUT and gets 75" {
	mq-send -q t one
	hold "SELECT FROM topic WHERE name = 't' FOR UPDATE;"
	run -0 mq-lag t
	assert_line --partial "t "
	MQ_BUSY_TIMEOUT=200ms run --separate-stderr mq-send t two
	one_line_error 75
	release
	run -0 mq-send t two
	assert_output 2
}

@test "--vacuum runs VACUUM (ANALYZE) on mq's tables" {
	seq 100 | mq-send -q t
	mq-recv -n 0 -A t >/dev/null
	run -0 sql "SELECT count(*) FROM pg_stat_user_tables
	    WHERE schemaname = current_schema() AND relname = 'msg'
	    AND last_vacuum IS NOT NULL"
	assert_output 0
	run -0 mq-purge --vacuum t
	run -0 sql "SELECT count(*) FROM msg"
	assert_output 0
	run -0 sql "SELECT count(*) FROM pg_stat_user_tables
	    WHERE schemaname = current_schema() AND relname = 'msg'
	    AND last_vacuum IS NOT NULL"
	assert_output 1
}

@test "a password is masked in every form of the connection string, and a malformed one is 64" {
	for db in "host=127.0.0.1 port=$MQ_PG_PORT dbname=mq user=mq password=pw\\ s3cr3t" \
	    "host=127.0.0.1 port=$MQ_PG_PORT dbname=mq user=mq password=pw&s3cr3t" \
	    "host=127.0.0.1 port=$MQ_PG_PORT dbname=mq user=mq sslpassword=s3cr3t password=s3cr3t" \
	    "postgresql://mq@127.0.0.1:$MQ_PG_PORT/mq?password=s3cr3t&connect_timeout=5"; do
		PGPASSFILE=/dev/null run --separate-stderr mq-lag -d "$db"
		one_line_error 77
		[[ $stderr != *s3cr3t* ]] || fail "password shown: $stderr"
	done
	run --separate-stderr mq-lag -d "postgresql://mq:s3cr%zzet@127.0.0.1:$MQ_PG_PORT/mq"
	one_line_error 64
	[[ $stderr != *s3cr* ]] || fail "password shown: $stderr"
	run --separate-stderr mq-lag -d "postgresql://mq@127.0.0.1:$MQ_PG_PORT/mq?nosuch=1"
	one_line_error 64
}

# trips ARGS...: the round trips the command made (MQ_PG_TRIPS), its
# stdout to the file out.
trips() {
	MQ_PG_TRIPS=1 "$@" >out 2>trips.err || fail "$*: $(cat trips.err)"
	sed -n 's/^mq-[a-z]*: \([0-9]*\) round trips$/\1/p' trips.err
}

@test "round trips, by difference: a send batch 1, a claim 2 (of a group as this consumer left it), an ack batch 2" {
	mq-topic create t >/dev/null
	a=$(trips mq-send t x)
	b=$(trips mq-send t x y)	# one batch of two
	seq 600 | mq-send -q t
	mq-topic group t g >/dev/null
	mq-topic group t h >/dev/null
	c1=$(trips mq-recv -n 256 -g g t)
	c2=$(trips mq-recv -n 512 -g h t)	# two claims of 256
	cut -f1 out >receipts
	assert_equal "$((b - a))" 0
	assert_equal "$((c2 - c1))" 2
	k1=$(trips mq-ack "$(sed -n 1p receipts)")
	k2=$(trips mq-ack "$(sed -n 2p receipts)" "$(sed -n 3p receipts)")
	assert_equal "$((k2 - k1))" 0
	# a pause between two receipts on stdin: two batches
	k3=$(trips sh -c "(sed -n 4p receipts; sleep 0.3; sed -n 5p receipts) |
	    mq-ack")
	assert_equal "$((k3 - k1))" 2
	assert_equal "$(sql "SELECT count(*) FROM history WHERE event = 'acked'")" 5
	s1=$(trips sh -c "printf 'a\nb\n' | mq-send t")
	s2=$(trips sh -c "(echo a; sleep 0.3; echo b) | mq-send t")
	assert_equal "$((s2 - s1))" 1
}

@test "claims of a topic filled before wait for one flush of the WAL, not one a claim; an auto-ack still waits for each" {
	# a claim waits for the flush up to where the WAL was when it read
	# the topic's end, which the claim before wrote past: each claim of
	# a stream waited for a flush of the one before it
	seq 1000 | mq-send -q t
	MQ_PG_TRIPS=1 mq-recv -n 1000 -g g t >out 2>trips.err ||
	    fail "$(cat trips.err)"
	assert_equal "$(wc -l <out)" 1000
	assert_equal "$(sed -n 's/^mq-recv: \([0-9]*\) flushes asked$/\1/p' trips.err)" 1
	# four claims of 256, each an auto-ack: four
	MQ_PG_TRIPS=1 mq-recv -n 1000 -A -g a t >out 2>trips.err ||
	    fail "$(cat trips.err)"
	assert_equal "$(wc -l <out)" 1000
	assert_equal "$(sed -n 's/^mq-recv: \([0-9]*\) flushes asked$/\1/p' trips.err)" 4
}

@test "a claim that finds retries due and new messages together hands out no more than it was asked for" {
	# (the second round trip of a claim reads new messages for the
	# whole claim before it knows how many retries are due: those read
	# are dropped then; ASan saw the excess written past mq-recv's
	# buffer)
	mq-topic create t >/dev/null
	seq 300 | mq-send -q t
	bg out mq-recv -f -g g --format '%r\t%b\n' t
	pid=$BG
	got() { [ "$(wc -l <out)" -ge "$1" ]; }
	wait_for 10 got 300 || fail "$(wc -l <out) of 300"
	mq-topic group t g --pause 1h >/dev/null
	head -20 out | cut -f1 | mq-ack --fail --delay 0
	seq 301 600 | mq-send -q t
	mq-topic group t g --resume >/dev/null
	wait_for 10 got 620 || fail "$(wc -l <out) of 620"
	sleep 0.5
	! gone "$pid" || fail "mq-recv ended: $(tail -2 out)"
	assert_equal "$(wc -l <out)" 620
	assert_equal "$(cut -f2 out | sort -n | uniq | wc -l)" 600
}

# idx NAME COLUMN: pg_stat_user_indexes.COLUMN of index NAME of the
# test's schema.
idx() {
	sql "SELECT $2 FROM pg_stat_user_indexes WHERE schemaname =
	    current_schema() AND indexrelname = '$1'"
}

@test "a claim reads the group's due deliveries, not all of them, whatever the statistics were when it planned" {
	# plans are generic, made once a session: a consumer that started
	# while the tables were empty keeps the plan it made then.  The due
	# rows' statement took the primary key's range of offsets for narrow
	# and read every delivery of the group, in flight or not, at each
	# claim (20000 here; 50 ms a claim at 100000, under the group's lock)
	mq-topic group t g >/dev/null
	sql "ALTER TABLE delivery SET (autovacuum_enabled = false);
	    ANALYZE delivery" >/dev/null
	seq 20000 | mq-send -q t
	mq-recv -g g -n 20000 --lease 1h t >out
	head -1 out | cut -f1 | mq-ack --fail --delay 0
	# what the programs before read is reported as their backends end
	stable() {
		pkey=$(idx delivery_pkey idx_tup_read)
		sleep 0.5
		[ "$pkey" -gt 0 ] && [ "$pkey" = "$(idx delivery_pkey idx_tup_read)" ]
	}
	wait_for 10 stable || fail "the reads before were never all reported"
	due=$(idx delivery_due idx_scan)
	run -0 mq-recv -g g -n 5 --format '%o %a' t
	assert_output '1 2'
	# the claim's backend reports its reads as it ends
	moved() { [ "$(idx delivery_due idx_scan)" != "$due" ]; }
	wait_for 10 moved || fail "no reads of delivery_due were reported"
	read_now=$(( $(idx delivery_pkey idx_tup_read) - pkey ))
	[ "$read_now" -lt 1000 ] ||
	    fail "the claim read $read_now rows of delivery by its primary key"
}

@test "an ack that waits for its row's lock settles the lease it names, and only that one" {
	# the acks found their rows, then deleted them by ctid: a row
	# changed meanwhile was passed by (a lease extended under it: a live
	# receipt said stale), or, on a server whose TID scans do not
	# recheck (minor releases without PostgreSQL's late-2025 fix "Add
	# missing EPQ recheck for TID Scan"), deleted as it is now (a lease
	# taken again by another consumer: gone, and the receipt said stale)
	mq-send -q t one two
	run -0 mq-recv -g g -n 2 --format '%r\n' t
	r1=${lines[0]} r2=${lines[1]}
	unlease_all	# delivery rows, not a run of lease (lease.sql)
	# one's lease extended; two's taken by another attempt
	hold "UPDATE delivery SET due = due + 60000 WHERE off = 1;
	    UPDATE delivery SET attempt = attempt + 1, token = token + 1
	    WHERE off = 2;"
	ack_held "$r1" "$r2"
	[ "$ST" = 1 ] || fail "exit $ST: $(cat ack.out)"
	assert_equal "$(cat ack.out)" "mq-ack: stale receipt $r2: nothing changed"
	assert_equal "$(sql "SELECT off, attempt FROM delivery")" "2|2"
	assert_equal "$(sql "SELECT off FROM history WHERE event = 'acked'")" 1
}

@test "an append's notification carries the end it flushed, none when its commits do not wait for the flush" {
	mq-topic create t >/dev/null
	chan=mq_$(sql "SELECT value FROM mq_meta WHERE key = 'lockspace'")_$(sql "SELECT id FROM topic WHERE name = 't'")
	# psql shows what it heard after its statement: listen for 3 seconds
	bg heard psql -X -d "$MQ_DB" -c "LISTEN $chan" -c "SELECT pg_sleep(3)"
	sleep 1
	mq-send -q t a b c
	[[ $MQ_DB == *options=* ]] || fail "no options in $MQ_DB"
	MQ_DB="$MQ_DB%20-csynchronous_commit%3Doff" mq-send -q t d
	finish "$BG" 10
	# (psql names no payload when it is empty)
	assert_equal "$(grep -c '^Asynchronous notification' heard)" 2
	grep -q 'with payload "4"' heard || fail "$(cat heard)"
	[ "$(grep -c 'with payload' heard)" = 1 ] || fail "$(cat heard)"
}

@test "a notification that fails after the commit is a warning: the write is done, exit 0, and a waiter finds it" {
	# pg_notify made to fail, as when the server's notification queue is
	# full: a function of that name in the test's schema, searched first
	# (the schema goes with the test)
	mq-topic group t o --ordered >/dev/null
	sql "CREATE FUNCTION pg_notify(text, text) RETURNS void LANGUAGE sql
	    AS \$\$ SELECT 1 / 0 \$\$" >/dev/null
	[[ $MQ_DB == *options=-csearch_path%3D* ]] || fail "$MQ_DB"
	broken="$MQ_DB%2Cpg_catalog"
	bg out mq-recv -f -g w --format '%b\n' t
	joined() {
		[ "$(sql "SELECT count(*) FROM grp WHERE name = 'w'")" = 1 ]
	}
	wait_for 10 joined
	# an append (its NOTIFY after its flush)
	MQ_DB=$broken run -0 --separate-stderr mq-send -k k t one two
	assert_output $'1\n2'
	assert_equal "$(wc -l <<<"$stderr")" 1
	assert_regex "$stderr" '^mq-send: cannot notify waiters .*: .*division by zero$'
	# a settle that frees an ordered key (its NOTIFY after its commit)
	run -0 mq-recv -g o --format '%r' t
	MQ_DB=$broken run -0 --separate-stderr mq-ack "$output"
	assert_regex "$stderr" '^mq-ack: cannot notify waiters .*division by zero$'
	assert_equal "$(sql "SELECT count(*) FROM history WHERE event = 'acked'")" 1
	# the waiter, told nothing, finds them at its next look
	wait_for 15 grep -qx two out || fail "not found: $(cat out)"
	assert_equal "$(cat out)" $'one\ntwo'
}

@test "a claim that finds nothing reads a row or two for the next due time, not every lease in flight" {
	# the next due time (a retry's, or now for rows left above the
	# claim's bound) was one min() over both conditions: it read every
	# lease of the group through delivery_due at each claim that handed
	# out nothing (20 ms at 50000 in flight), under the group's lock:
	# here a new message whose key waits for one in flight
	mq-topic group t g --ordered >/dev/null
	seq 20000 | mq-send -q t
	mq-send -q -k k t a
	mq-recv -g g -n 20001 --lease 1h t >/dev/null
	mq-send -q -k k t b
	sql "ANALYZE delivery" >/dev/null
	# entries read by the indexes of delivery
	reads() {
		echo $(( $(idx delivery_due idx_tup_read) +
		    $(idx delivery_pkey idx_tup_read) ))
	}
	reported() {
		was=$(reads)
		sleep 0.5
		[ "$was" = "$(reads)" ]
	}
	wait_for 10 reported || fail "the reads before were never all reported"
	scans=$(idx delivery_due idx_scan)
	run -1 mq-recv -g g t
	scanned() { [ "$(idx delivery_due idx_scan)" != "$scans" ]; }
	wait_for 10 scanned || fail "no reads of delivery_due were reported"
	read_now=$(( $(reads) - was ))
	[ "$read_now" -lt 1000 ] ||
	    fail "a claim of nothing read $read_now entries of delivery's indexes"
}

# runs of lease (common/pg/lease.sql): a plain mq-recv's claim of new
# messages in a plain group writes one row per run, not a delivery row
# each; everything else sees them as delivery rows

@test "a plain mq-recv leases a run in one row; acks settle its messages one at a time, once" {
	mq-send -q t a b c d
	run -0 mq-recv -n 3 --format '%r\n' t
	rs=("${lines[@]}")
	assert_equal "$(sql "SELECT lo, hi, acked FROM lease")" "1|4|000"
	assert_equal "$(sql "SELECT count(*) FROM ONLY delivery")" 0
	# seen as three leases in flight, by mq-lag and the listing
	assert_equal "$(sql "SELECT off, state, attempt FROM deliveries
	    ORDER BY off" | tr '\n' ' ')" "1|1|1 2|1|1 3|1|1 "
	run -0 mq-lag --messages --state inflight t default
	assert_equal "${#lines[@]}" 4
	assert_equal "$(mq-lag --json t | grep -o '"in_flight":[0-9]*')" '"in_flight":3'
	run -0 mq-ack "${rs[1]}"
	assert_equal "$(sql "SELECT acked FROM lease")" 010
	run -1 --separate-stderr mq-ack "${rs[1]}"
	assert_equal "$stderr" "mq-ack: stale receipt ${rs[1]}: nothing changed"
	assert_equal "$(mq-lag --json t | grep -o '"in_flight":[0-9]*')" '"in_flight":2'
	# the trace tells the delivery of each, and the ack of 2
	run -0 mq-replay --trace 3 t
	assert_line --partial delivered
	refute_line --partial acked
	run -0 mq-replay --trace 2 t
	assert_line --partial acked
	run -0 mq-ack "${rs[0]}" "${rs[2]}"
	assert_equal "$(sql "SELECT count(*) FROM lease")" 0
	assert_equal "$(sql "SELECT settled FROM grp")" 3
	assert_equal "$(sql "SELECT off FROM history WHERE event = 'acked'
	    ORDER BY off" | tr '\n' ' ')" "1 2 3 "
}

@test "a run whose lease runs out comes back at attempt 2, less what was acked" {
	mq-send -q t a b c
	run -0 mq-recv -n 0 --lease 1s --format '%r\n' t
	mq-ack "${lines[1]}"
	again() { mq-recv -n 0 --format '%o %a\n' t >>again; }
	wait_for 60 again
	assert_equal "$(cat again)" "$(printf '1 2\n3 2')"
	assert_equal "$(sql "SELECT count(*) FROM lease")" 0
	assert_equal "$(sql "SELECT off FROM history WHERE event = 'expired'
	    ORDER BY off" | tr '\n' ' ')" "1 3 "
}

@test "a failure, a cancel or a move touching a run makes it delivery rows first; the rest still ack" {
	mq-send -q t a b c d e f
	run -0 mq-recv -n 0 --format '%r\n' t
	rs=("${lines[@]}")
	run -0 mq-ack --fail --delay 1h "${rs[1]}"
	assert_equal "$(sql "SELECT count(*) FROM lease")" 0
	assert_equal "$(sql "SELECT off, state FROM delivery ORDER BY off" |
	    tr '\n' ' ')" "1|1 2|0 3|1 4|1 5|1 6|1 "
	run -0 mq-ack "${rs[0]}" "${rs[2]}"
	# a cancel of one of the next run's
	mq-send -q t g h
	run -0 mq-recv -n 0 --format '%r\n' t
	gs=("${lines[@]}")
	assert_equal "$(sql "SELECT lo, hi FROM lease")" "7|9"
	run -0 mq-topic cancel -f t 8
	assert_equal "$(sql "SELECT count(*) FROM lease")" 0
	run -0 mq-ack "${gs[0]}"
	# a move of the group past them all: nothing in flight is left
	run -0 mq-replay -g default --latest t
	assert_equal "$(sql "SELECT count(*) FROM deliveries WHERE state = 1")" 0
	run -1 mq-ack "${rs[3]}"
}

@test "a group made ordered while a run is leased: the next claim makes it rows, and a key waits for its message in it" {
	mq-send -q -k k t a
	run -0 mq-recv -g g --format '%r\n' t
	r=$output
	assert_equal "$(sql "SELECT count(*) FROM lease")" 1
	mq-topic group t g --ordered >/dev/null
	mq-send -q -k k t b
	run -1 mq-recv -g g -n 0 t
	assert_equal "$(sql "SELECT count(*) FROM lease")" 0
	assert_equal "$(sql "SELECT off, state, key FROM delivery
	    ORDER BY off" | tr '\n' ' ')" "1|1|k 2|0|k "
	run -0 mq-ack "$r"
	run -0 mq-recv -g g --format '%o\n' t
	assert_output 2
}

@test "a claim of a group made ordered that meets a run an ack holds starts over: it never deadlocks with the ack" {
	mq-send -q -k k t a b
	run -0 mq-recv -n 0 t
	deadlocks() {
		sql "SELECT deadlocks FROM pg_stat_database WHERE
		    datname = current_database()"
	}
	d0=$(deadlocks)
	mq-topic group t default --ordered >/dev/null
	mq-send -q -k j t c
	# as an ack: the run's row first, then the group's
	hold "UPDATE lease SET newly = B'10', acked = B'10';"
	bg recv.out mq-recv -n 1 -w 30s --format '%o\n' t
	sleep 1
	echo "UPDATE grp SET settled = settled + 1;" >&4
	sleep 1
	release
	finish "$BG" 30
	[ "$ST" = 0 ] || fail "exit $ST: $(cat recv.out)"
	assert_equal "$(cat recv.out)" 3
	run -0 cat lock.out
	refute_output --partial deadlock
	sleep 1.5	# the server's statistics, flushed once a second
	assert_equal "$(deadlocks)" "$d0"
}

@test "an ack waiting for a run that another ack is settling settles only what is left" {
	mq-send -q t a b c
	run -0 mq-recv -n 0 --format '%r\n' t
	rs=("${lines[@]}")
	# another ack of 1, as mq-ack's own statement leaves the row
	hold "UPDATE lease SET newly = B'100', acked = B'100';"
	ack_held "${rs[0]}" "${rs[1]}"
	[ "$ST" = 1 ] || fail "exit $ST: $(cat ack.out)"
	assert_equal "$(cat ack.out)" "mq-ack: stale receipt ${rs[0]}: nothing changed"
	assert_equal "$(sql "SELECT acked FROM lease")" 110
	assert_equal "$(sql "SELECT settled FROM grp")" 1
}

@test "an ack waiting for a run being made delivery rows settles the rows" {
	mq-send -q t a b c
	run -0 mq-recv -n 0 --format '%r\n' t
	rs=("${lines[@]}")
	hold "SELECT unlease(id, 0, 100, 9223372036854775807, false) FROM grp;"
	ack_held "${rs[@]}"
	[ "$ST" = 0 ] || fail "exit $ST: $(cat ack.out)"
	assert_equal "$(sql "SELECT count(*) FROM lease")" 0
	assert_equal "$(sql "SELECT count(*) FROM delivery")" 0
	assert_equal "$(sql "SELECT settled FROM grp")" 3
}

@test "purge keeps a run's messages in flight, and drops the acks of those it deletes; --force drops them and their receipts go stale" {
	mq-send -q t a b c
	run -0 mq-recv -n 2 --format '%r\n' t
	rs=("${lines[@]}")
	mq-ack "${rs[0]}"
	assert_equal "$(sql "SELECT lo, offs FROM acks")" "1|10"
	run -0 mq-purge t
	assert_equal "$(sql "SELECT off FROM msg ORDER BY off" | tr '\n' ' ')" "2 3 "
	# the ack of 1 goes with its message
	assert_equal "$(sql "SELECT count(*) FROM acks")" 0
	run -0 mq-purge --force --before-offset 3 t
	assert_equal "$(sql "SELECT off FROM msg ORDER BY off" | tr '\n' ' ')" "3 "
	assert_equal "$(sql "SELECT count(*) FROM lease")" 0
	assert_equal "$(sql "SELECT count(*) FROM acks")" 0
	run -1 mq-ack "${rs[1]}"
}
