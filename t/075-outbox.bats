#!/usr/bin/env bats
# 075-outbox.bats: the transactional outbox.  mq-topic outbox-init makes
# the table mq_outbox in the application's own SQLite file (APPDB);
# mq-send --from-outbox APPDB moves its rows into mq, once or following
# it (-f); each row is one message, exactly once, even when the mover is
# killed at any moment.  On PostgreSQL, send() stores a message in the
# caller's transaction.

# shellcheck disable=SC2154 # stderr: set by run --separate-stderr
load test_helper
bats_require_minimum_version 1.5.0

teardown() {
	kill_bg
}

# app SQL: run SQL on the application's database, app.db.
app() {
	sqlite3 -cmd '.timeout 30000' app.db "$1"
}

# one_error PROG: the last run printed exactly one line on stderr, from
# PROG (a usage error adds the synopsis after it).
one_error() {
	local e=${stderr%%$'\n'usage: *}
	[[ $e != *$'\n'* ]] || fail "want one line on stderr, got: $stderr"
	[[ $e == "$1: "* ]] || fail "want a line from $1, got: $stderr"
}

# bodies TOPIC: the bodies of TOPIC's messages, in order of offset, one a
# line.
bodies() {
	sql "SELECT $(txt body) FROM msg WHERE topic = (SELECT id FROM topic
	    WHERE name = '$1') ORDER BY off"
}

# has TOPIC BODY: TOPIC has a message BODY (for wait_for).
has() {
	bodies "$1" 2>/dev/null | grep -qx "$2"
}

# form TEXT: TEXT as PostgreSQL keeps it when it is not UTF-8: U+FFFF
# and its bytes in hex.
form() {
	printf '\357\277\277%s' "$(printf '%s' "$1" | od -An -tx1 | tr -d ' \n')"
}

# app_is SQL VALUE: SQL's result on app.db is VALUE (for wait_for).
app_is() {
	[ "$(app "$1")" = "$2" ]
}

# locked: APPDB's write lock is taken (the sqlite3 shell does not wait).
locked() {
	! sqlite3 app.db "BEGIN IMMEDIATE; ROLLBACK" 2>/dev/null
}

# hold_lock SQL: the application holds APPDB's write lock in a transaction
# that SQL begins, until release_lock commits it.
hold_lock() {
	rm -f hold
	mkfifo hold
	sqlite3 -cmd '.timeout 30000' app.db <hold >/dev/null 2>&1 3>&- &
	echo "$!" >>"$BATS_TEST_TMPDIR/pids"
	exec 4>hold
	echo "$1" >&4
	wait_for 15 locked || fail "the application did not take the lock"
}

release_lock() {
	echo "COMMIT;" >&4
	exec 4>&-
	wait_for 15 eval '! locked' || fail "the application kept the lock"
}

@test "outbox-init makes the outbox table, AUTOINCREMENT, and again changes nothing" {
	run -0 mq-topic outbox-init app.db
	assert_output ""
	run -0 app "SELECT sql FROM sqlite_master WHERE name = 'mq_outbox'"
	assert_output --partial "id	INTEGER PRIMARY KEY AUTOINCREMENT"
	app "INSERT INTO mq_outbox (topic, body) VALUES ('t', 'a')"
	run -0 mq-topic outbox-init app.db
	run -0 app "SELECT id, topic, body FROM mq_outbox"
	assert_output "1|t|a"
	no_db	# mq's database is not APPDB: nothing made there
}

@test "one shot: each row becomes a message of its topic, with its settings, and leaves the outbox" {
	mq-topic outbox-init app.db
	app "INSERT INTO mq_outbox (topic, body) VALUES ('orders', 'order 1042 paid');
	    INSERT INTO mq_outbox (topic, body, key) VALUES ('mail', 'receipt 1042', 'c7');
	    INSERT INTO mq_outbox (topic, body, delay, ttl) VALUES ('orders', 'remind', '5m', 3600000);
	    INSERT INTO mq_outbox (topic, body, dedup) VALUES ('orders', 'once', 'pay-1042')"
	run -0 mq-send --from-outbox app.db
	assert_output "$(printf '1\torders\t1\n2\tmail\t1\n3\torders\t2\n4\torders\t3')"
	run -0 app "SELECT count(*) FROM mq_outbox"
	assert_output 0
	run -0 bodies orders
	assert_output "$(printf 'order 1042 paid\nremind\nonce')"
	run -0 sql "SELECT key FROM msg WHERE key IS NOT NULL"
	assert_output c7
	run -0 sql "SELECT due - ts, expires - ts FROM msg WHERE $(txt body) = 'remind'"
	assert_output "300000|3600000"
	run -0 sql "SELECT off FROM dedup WHERE id = 'pay-1042'"
	assert_output 3
	# the row's id is the dedup id of a row without one, named by its outbox
	run -0 sql "SELECT count(*) FROM dedup WHERE id LIKE '1@%:$PWD/app.db'"
	assert_output 1
	run -0 sql "SELECT moved, rows FROM outbox"
	assert_output "4|4"
	# nothing left: nothing printed, nothing changed
	before=$(db_state)
	run -0 mq-send --from-outbox app.db
	assert_output ""
	assert_equal "$(db_state)" "$before"
	# -q prints nothing
	app "INSERT INTO mq_outbox (topic, body) VALUES ('mail', 'x')"
	run -0 mq-send -q --from-outbox app.db
	assert_output ""
	assert_equal "$(bodies mail | tail -1)" x
}

@test "rows at or below the mark were moved by a mover killed before it deleted them: deleted, not sent again" {
	mq-topic outbox-init app.db
	app "INSERT INTO mq_outbox (topic, body) VALUES ('t', 'a'), ('t', 'b')"
	mq-send -q --from-outbox app.db
	# as a mover killed between mq's commit and its delete leaves them
	app "INSERT INTO mq_outbox (id, topic, body) VALUES (1, 't', 'a'), (2, 't', 'b');
	    INSERT INTO mq_outbox (topic, body) VALUES ('t', 'c')"
	run -0 mq-send --from-outbox app.db
	assert_output "$(printf '3\tt\t3')"
	run -0 bodies t
	assert_output "$(printf 'a\nb\nc')"
	run -0 app "SELECT count(*) FROM mq_outbox"
	assert_output 0
}

@test "an outbox whose path is not UTF-8 moves as any other: its mark is kept, its rows' dedup ids name it" {
	d=$'caf\xe9 100%'
	mkdir "$d"
	mq-topic outbox-init "$d/app.db"
	sqlite3 "$d/app.db" "INSERT INTO mq_outbox (topic, body) VALUES ('t', 'a'), ('t', 'b')"
	run -0 mq-send --from-outbox "$d/app.db"
	assert_output "$(printf '1\tt\t1\n2\tt\t2')"
	# as a mover killed between mq's commit and its delete leaves them:
	# the mark, found again under the same name, deletes them unsent
	sqlite3 "$d/app.db" "INSERT INTO mq_outbox (id, topic, body) VALUES (2, 't', 'b');
	    INSERT INTO mq_outbox (topic, body) VALUES ('t', 'c')"
	run -0 mq-send --from-outbox "$d/app.db"
	assert_output "$(printf '3\tt\t3')"
	run -0 bodies t
	assert_output "$(printf 'a\nb\nc')"
	run -0 sql "SELECT count(*), max(moved), max(rows) FROM outbox"
	assert_output "1|3|3"
	if [ -n "$PG" ]; then
		# text is UTF-8 there: U+FFFF and the bytes in hex, as for a
		# business id (mq(5))
		src="$(hostname):$PWD/$d/app.db"
		run -0 sql "SELECT source FROM outbox"
		assert_output "$(form "$src")"
		run -0 sql "SELECT id FROM dedup ORDER BY off"
		assert_output "$(printf '%s\n' "$(form "1@$src")" \
		    "$(form "2@$src")" "$(form "3@$src")")"
	else
		# SQLite keeps the bytes as they are
		run -0 sql "SELECT hex(source) FROM outbox"
		assert_output "$(printf '%s:%s/app.db' "$(hostname)" "$PWD/$d" | od -An -tx1 | tr -d ' \n' | tr a-f A-F)"
	fi
}

@test "rows at or below the mark are deleted unsent even when their topic's max-size went below their size since" {
	mq-topic outbox-init app.db
	app "INSERT INTO mq_outbox (topic, body) VALUES ('t', 'a long body')"
	mq-send -q --from-outbox app.db
	mq-topic set t max-size=4
	# as a mover killed between mq's commit and its delete leaves it
	app "INSERT INTO mq_outbox (id, topic, body) VALUES (1, 't', 'a long body');
	    INSERT INTO mq_outbox (topic, body) VALUES ('t', 'ok')"
	run -0 mq-send --from-outbox app.db
	assert_output "$(printf '2\tt\t2')"
	run -0 bodies t
	assert_output "$(printf 'a long body\nok')"
	run -0 app "SELECT count(*) FROM mq_outbox"
	assert_output 0
}

@test "an APPDB whose ids went back below the mark (made again) is refused, nothing changed" {
	mq-topic outbox-init app.db
	app "INSERT INTO mq_outbox (topic, body) VALUES ('t', 'a'), ('t', 'b')"
	mq-send -q --from-outbox app.db
	rm -f app.db app.db-wal app.db-shm
	mq-topic outbox-init app.db
	app "INSERT INTO mq_outbox (topic, body) VALUES ('t', 'new')"
	before=$(db_state)
	run -65 --separate-stderr mq-send --from-outbox app.db
	one_error mq-send
	stderr_has "its ids went back to 1, below the 2 moved already"
	assert_equal "$(db_state)" "$before"
	run -0 app "SELECT body FROM mq_outbox"
	assert_output new
}

@test "a bad APPDB or not an outbox: one line, its status, nothing changed" {
	check() {
		local status=$1 what=$2; shift 2
		local sum
		sum=$(md5sum "$what" 2>/dev/null || true)
		run "-$status" --separate-stderr "$@"
		one_error "${1##*/}"
		assert_output ""
		no_db
		assert_equal "$(md5sum "$what" 2>/dev/null || true)" "$sum"
	}
	check 66 none.db mq-send --from-outbox none.db
	stderr_has "cannot open outbox none.db: No such file"
	[ ! -e none.db ]
	echo "not a database at all, not even close, no no no no no no no no no" >junk.db
	check 65 junk.db mq-send --from-outbox junk.db
	stderr_has "not an outbox: junk.db"
	check 65 junk.db mq-topic outbox-init junk.db
	mkdir dir.db
	check 65 dir.db mq-send --from-outbox dir.db
	stderr_has "not a regular file"
	sqlite3 other.db "CREATE TABLE orders (id INTEGER PRIMARY KEY)"
	check 66 other.db mq-send --from-outbox other.db
	stderr_has "no table mq_outbox (mq-topic outbox-init makes it)"
	# ids that a delete would hand out again: refused, by both
	sqlite3 plain.db "CREATE TABLE mq_outbox (id INTEGER PRIMARY KEY,
	    topic TEXT, body BLOB); INSERT INTO mq_outbox VALUES (1, 't', 'a')"
	check 65 plain.db mq-send --from-outbox plain.db
	stderr_has "id is not INTEGER PRIMARY KEY AUTOINCREMENT"
	check 65 plain.db mq-topic outbox-init plain.db
	sqlite3 nobody.db "CREATE TABLE mq_outbox (id INTEGER PRIMARY KEY
	    AUTOINCREMENT, topic TEXT)"
	check 65 nobody.db mq-send --from-outbox nobody.db
	stderr_has "lacks a body column"
	# usage: the rows carry topic and settings
	mq-topic outbox-init app.db
	for args in "t" "-k k" "--dedup x" "--ttl 1s" "--delay 1s" "--whole" "-0"; do
		# shellcheck disable=SC2086 # one option and its argument
		run -64 --separate-stderr mq-send --from-outbox app.db $args
		stderr_has "--from-outbox takes no TOPIC, MESSAGE or message options"
	done
	run -64 --separate-stderr mq-send -f t m
	stderr_has "-f follows an outbox"
	run -64 --separate-stderr mq-topic outbox-init
	stderr_has "outbox-init takes one APPDB"
	no_db
}

@test "a row that cannot be a message stops the move before its batch is stored: 65, names the row" {
	mq-topic outbox-init app.db
	app "INSERT INTO mq_outbox (topic, body) VALUES ('t', 'fine');
	    INSERT INTO mq_outbox (topic, body) VALUES ('no/such', 'x')"
	run -65 --separate-stderr mq-send --from-outbox app.db
	one_error mq-send
	stderr_has "row 2: invalid topic 'no/such'"
	no_db
	run -0 app "SELECT count(*) FROM mq_outbox"
	assert_output 2
	app "DELETE FROM mq_outbox WHERE id = 2;
	    INSERT INTO mq_outbox (topic, body, delay) VALUES ('t', 'x', 'soon')"
	run -65 --separate-stderr mq-send --from-outbox app.db
	stderr_has "row 3: invalid delay 'soon'"
	# what it shows of a bad text is one line
	app "DELETE FROM mq_outbox WHERE id = 3;
	    INSERT INTO mq_outbox (topic, body) VALUES ('a' || char(10) || 'b' || char(27) || '[2J', 'x');
	    INSERT INTO mq_outbox (topic, body, ttl) VALUES ('t', 'x', char(10))"
	run -65 --separate-stderr mq-send --from-outbox app.db
	one_error mq-send
	stderr_has "row 4: invalid topic 'a\\nb\\033[2J'"
	app "DELETE FROM mq_outbox WHERE id = 4"
	run -65 --separate-stderr mq-send --from-outbox app.db
	one_error mq-send
	stderr_has "row 5: invalid ttl '\\n'"
	app "DELETE FROM mq_outbox WHERE id = 5;
	    INSERT INTO mq_outbox (topic, body) VALUES ('t', zeroblob(1048577))"
	run -65 --separate-stderr mq-send --from-outbox app.db
	one_error mq-send
	stderr_has "row 6: message of 1048577 bytes refused: over the size limit"
	run -0 app "SELECT count(*) FROM mq_outbox"
	assert_output 2
	run -0 sql "SELECT (SELECT count(*) FROM topic), (SELECT count(*) FROM msg)"
	assert_output "0|0"
	# times past 9e15 ms (SQLite added them to now and overflowed, a
	# delay due at once; PostgreSQL's interval refused them, 65 naming
	# no row), and a dedup id that is not UTF-8
	app "DELETE FROM mq_outbox WHERE id = 6;
	    INSERT INTO mq_outbox (topic, body, delay) VALUES ('t', 'x', 9223372036854775807)"
	run -65 --separate-stderr mq-send --from-outbox app.db
	one_error mq-send
	stderr_has "row 7: invalid delay: want ms or a duration, up to 9e15"
	app "DELETE FROM mq_outbox WHERE id = 7;
	    INSERT INTO mq_outbox (topic, body, ttl) VALUES ('t', 'x', 50000000000000000)"
	run -65 --separate-stderr mq-send --from-outbox app.db
	stderr_has "row 8: invalid ttl: want ms or a duration, up to 9e15"
	app "DELETE FROM mq_outbox WHERE id = 8;
	    INSERT INTO mq_outbox (topic, body, dedup) VALUES ('t', 'x', CAST(x'ff' AS TEXT))"
	run -65 --separate-stderr mq-send --from-outbox app.db
	stderr_has "row 9: invalid dedup: want 1-1024 bytes of UTF-8"
	app "DELETE FROM mq_outbox WHERE id = 9;
	    INSERT INTO mq_outbox (topic, body, delay) VALUES ('t', 'late', 9000000000000000)"
	run -0 mq-send --from-outbox app.db
	assert_equal "$(bodies t)" "$(printf 'fine\nlate')"
}

@test "-f follows the outbox: a committed row is moved at once; SIGTERM ends it with 0" {
	mq-topic outbox-init app.db
	app "PRAGMA journal_mode = WAL" >/dev/null
	app "INSERT INTO mq_outbox (topic, body) VALUES ('t', 'before')"
	bg out mq-send -f --from-outbox app.db
	pid=$BG
	wait_for 15 has t before
	for i in 1 2 3; do
		after_look "$pid"
		app "INSERT INTO mq_outbox (topic, body) VALUES ('t', 'm$i')"
		wait_for 15 has t "m$i"
	done
	# a rolled-back row is never seen
	app "BEGIN; INSERT INTO mq_outbox (topic, body) VALUES ('t', 'gone'); ROLLBACK"
	app "INSERT INTO mq_outbox (topic, body) VALUES ('t', 'last')"
	wait_for 15 has t last
	kill -TERM "$pid"
	finish "$pid" 15
	assert_equal "$ST" 0
	run -0 bodies t
	assert_output "$(printf 'before\nm1\nm2\nm3\nlast')"
	run -0 cut -f 3 out
	assert_output "$(printf '1\n2\n3\n4\n5')"
	run -0 app "SELECT count(*) FROM mq_outbox"
	assert_output 0
}

@test "a one-shot mover whose delete finds APPDB locked past the busy timeout: 75 and why; the rows it moved go next time, not sent again" {
	mq-topic outbox-init app.db
	app "PRAGMA journal_mode = WAL" >/dev/null
	app "INSERT INTO mq_outbox (topic, body) VALUES ('t', 'a')"
	hold_lock "BEGIN IMMEDIATE;"
	run -75 --separate-stderr env MQ_BUSY_TIMEOUT=10ms mq-send --from-outbox app.db
	one_error mq-send
	stderr_has "cannot delete from outbox app.db: database is locked"
	assert_output "$(printf '1\tt\t1')"	# stored in mq, and said so
	release_lock
	run -0 mq-send --from-outbox app.db
	assert_output ""
	run -0 bodies t
	assert_output a
	run -0 app "SELECT count(*) FROM mq_outbox"
	assert_output 0
}

@test "a rollback-journal APPDB locked while the mover reads: 75 and why, nothing moved" {
	mq-topic outbox-init app.db
	app "INSERT INTO mq_outbox (topic, body) VALUES ('t', 'a')"
	hold_lock "BEGIN EXCLUSIVE;"
	run -75 --separate-stderr env MQ_BUSY_TIMEOUT=10ms mq-send --from-outbox app.db
	one_error mq-send
	stderr_has "cannot read outbox app.db: database is locked"
	release_lock
	run -0 app "SELECT count(*) FROM mq_outbox"
	assert_output 1
}

@test "-f waits out an application's lock held past the busy timeout (WAL: its delete; rollback journal: its open and looks); SIGTERM while it waits: 0, nothing lost or moved twice" {
	mq-topic outbox-init app.db
	app "PRAGMA journal_mode = WAL" >/dev/null
	app "INSERT INTO mq_outbox (topic, body) VALUES ('t', 'a')"
	hold_lock "BEGIN IMMEDIATE;"
	bg out env MQ_BUSY_TIMEOUT=10ms mq-send -f --from-outbox app.db
	pid=$BG
	wait_for 15 has t a
	sleep 1	# its delete waits, far past the busy timeout
	if gone "$pid"; then fail "the follower gave up: $(cat out)"; fi
	release_lock
	wait_for 15 app_is "SELECT count(*) FROM mq_outbox" 0 ||
	    fail "the moved row stayed in the outbox"
	# stopped while it waits: what it moved is in mq, its row goes next time
	hold_lock "INSERT INTO mq_outbox (topic, body) VALUES ('t', 'b');
	    BEGIN IMMEDIATE;"
	wait_for 15 has t b
	kill -TERM "$pid"
	finish "$pid" 15
	assert_equal "$ST" 0
	run -0 cat out
	assert_output "$(printf '1\tt\t1\n2\tt\t2')"
	release_lock
	run -0 mq-send --from-outbox app.db
	assert_output ""
	run -0 bodies t
	assert_output "$(printf 'a\nb')"
	# a rollback journal: the follower's looks wait for the lock too
	rm -f app.db app.db-wal app.db-shm
	mq-topic outbox-init app.db	# ids from 3: the first are moved
	app "INSERT INTO sqlite_sequence (name, seq) VALUES ('mq_outbox', 2)"
	# (started while the application holds the lock: its open waits too)
	hold_lock "BEGIN EXCLUSIVE; INSERT INTO mq_outbox (topic, body) VALUES ('t', 'c');"
	bg out env MQ_BUSY_TIMEOUT=10ms mq-send -f --from-outbox app.db
	pid=$BG
	sleep 1	# far past the busy timeout
	if gone "$pid"; then fail "the follower gave up: $(cat out)"; fi
	release_lock
	wait_for 15 has t c
	kill -TERM "$pid"
	finish "$pid" 15
	assert_equal "$ST" 0
	run -0 bodies t
	assert_output "$(printf 'a\nb\nc')"
}

@test "-f: a file moved to APPDB's path (a restore, a deploy) is followed as a restart would: its rows moved, or refused when its ids went back" {
	mq-topic outbox-init app.db
	app "INSERT INTO mq_outbox (topic, body) VALUES ('t', 'a')"
	bg out mq-send -f --from-outbox app.db
	pid=$BG
	wait_for 15 has t a
	# a new file, its ids after the moved ones, in the old one's place
	mq-topic outbox-init new.db
	sqlite3 new.db "INSERT INTO sqlite_sequence (name, seq) VALUES ('mq_outbox', 1);
	    INSERT INTO mq_outbox (topic, body) VALUES ('t', 'b')"
	mv new.db app.db
	wait_for 15 has t b || fail "the follower kept the old file: $(cat out)"
	run -0 app "SELECT count(*) FROM mq_outbox"
	assert_output 0
	# one whose ids went back: refused, nothing moved
	mq-topic outbox-init new.db
	sqlite3 new.db "INSERT INTO mq_outbox (topic, body) VALUES ('t', 'c')"
	mv new.db app.db
	finish "$pid" 15
	assert_equal "$ST" 65
	run -0 grep -c "its ids went back to 1, below the 2 moved already" out
	run -0 bodies t
	assert_output "$(printf 'a\nb')"
}

@test "a mover killed (SIGKILL) at random points while the app inserts: every row is exactly one message, in order" {
	seed_random
	mq-topic outbox-init app.db
	app "PRAGMA journal_mode = WAL" >/dev/null
	# the application: 400 rows over two topics, some in transactions
	# of several rows, one sqlite3 process per transaction
	bash -c 'for i in $(seq 1 4 400); do
		sqlite3 -cmd ".timeout 30000" app.db "BEGIN;
		    INSERT INTO mq_outbox (topic, body) VALUES (\"t\", \"r$i\");
		    INSERT INTO mq_outbox (topic, body) VALUES (\"u\", \"r$((i + 1))\");
		    INSERT INTO mq_outbox (topic, body) VALUES (\"t\", \"r$((i + 2))\");
		    COMMIT;
		    INSERT INTO mq_outbox (topic, body) VALUES (\"u\", \"r$((i + 3))\");" || exit 1
	done' >app.out 2>&1 3>&- &
	appid=$!
	echo "$appid" >>"$BATS_TEST_TMPDIR/pids"
	kills=0
	while ! gone "$appid" || [ "$kills" -lt 20 ]; do
		if (( RANDOM % 2 )); then
			bg mover.out mq-send -q -f --from-outbox app.db
		else
			bg mover.out mq-send -q --from-outbox app.db
		fi
		sleep "0.0$(( RANDOM % 100 ))"
		kill -9 "$BG" 2>/dev/null || true
		wait "$BG" 2>/dev/null || true
		kills=$((kills + 1))
		[ "$kills" -lt 500 ] || fail "the application did not finish (seed $SEED)"
	done
	finish "$appid" 60
	assert_equal "$ST" 0
	mq-send -q --from-outbox app.db
	run -0 app "SELECT count(*) FROM mq_outbox"
	assert_output 0
	# every row once, each topic's in the order of the outbox ids,
	# offsets dense from 1
	assert_equal "$(bodies t)" "$(for i in $(seq 1 4 400); do echo "r$i"; echo "r$((i + 2))"; done)"
	assert_equal "$(bodies u)" "$(for i in $(seq 1 4 400); do echo "r$((i + 1))"; echo "r$((i + 3))"; done)"
	run -0 sql "SELECT t.name, count(*), min(off), max(off) FROM msg JOIN topic t
	    ON t.id = msg.topic GROUP BY t.name ORDER BY t.name"
	assert_output "$(printf 't|200|1|200\nu|200|1|200')"
	run -0 sql "SELECT moved, rows FROM outbox"
	assert_output "400|400"
	echo "$kills kills (seed $SEED)"
	db_intact
}

@test "PostgreSQL: send() in the caller's transaction: rolled back, no message; committed, stored and a waiting consumer woken" {
	[ -n "$PG" ] || skip "PostgreSQL only: send() is its SQL function"
	mq-send -q t first
	mq-topic group t g >/dev/null
	recv_ack g
	run -0 sql "BEGIN; SELECT send('t', 'not this'); ROLLBACK;"
	run -0 sql "SELECT count(*) FROM msg"
	assert_output 1
	bg got mq-recv -g g -w 60s --format '%o %k %b\n' t
	pid=$BG
	after_look "$pid"
	start=$(now_ms)
	run -0 sql "BEGIN; SELECT send('t', 'order 1042 paid', key => 'o1'); COMMIT;"
	finish "$pid" 60
	assert_equal "$ST" 0
	assert_equal "$(cat got)" "2 o1 order 1042 paid"
	# woken by the commit's NOTIFY, not the 5s look
	[ $(( $(now_ms) - start )) -lt 4000 ] || fail "took $(( $(now_ms) - start ))ms"
	# a bytea body, a dedup id seen before, the topic's size limit
	run -0 sql "SELECT send('t', '\\x00ff'::bytea, dedup => 'd1'), send('t', 'again', dedup => 'd1')"
	assert_output "3|3"
	run -0 sql "SELECT hex(body) FROM msg WHERE off = 3"
	assert_output 00FF
	mq-topic set t max-size=10
	run -1 sql "SELECT send('t', 'eleven byte')"
	[[ $output == *"over the size limit of 10 bytes of topic t"* ]]
	run -0 sql "SELECT send('u', 'new', delay => '1 minute')"
	assert_output 1
	run -0 sql "SELECT due - ts FROM msg WHERE topic = (SELECT id FROM topic
	    WHERE name = 'u')"
	assert_output 60000
}
