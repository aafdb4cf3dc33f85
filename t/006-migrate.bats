#!/usr/bin/env bats
# Schema versions: a database made by an older build is migrated in place,
# its data kept; t/data/schema-v1.sql is the schema of version 1 as it
# shipped.
# shellcheck disable=SC2154 # stderr is set by bats' run --separate-stderr

load test_helper
# shellcheck disable=SC2034 # read by setup() in test_helper.bash
SQLITE_ONLY="the migration of SQLite schema versions (t/100-pg.bats tests PostgreSQL's)"

# The schema version this build stamps, as mq-send -V reports it; fails
# when there is none.
schema_version() {
	local v
	v=$(mq-send -V) || return
	v=$(sed -n 's/.*(schema \([0-9][0-9]*\)).*/\1/p' <<<"$v")
	[[ $v =~ ^[0-9]+$ ]] || { echo "no schema version in mq-send -V" >&2; return 1; }
	echo "$v"
}

# make_v1: $MQ_DB as a version 1 build left it: topic old with offsets 1
# and 2, group g that has settled offset 1.
make_v1() {
	{
		cat "$BATS_TEST_DIRNAME/data/schema-v1.sql"
		cat <<-'SQL'
		PRAGMA user_version = 1;
		PRAGMA journal_mode = WAL;
		INSERT INTO topic (name, created, next_off, last_ts, msgs, bytes)
		    VALUES ('old', 1000, 3, 1000, 2, 10);
		INSERT INTO msg VALUES (1, 1, 1000, 1000, NULL, 'hello');
		INSERT INTO msg VALUES (1, 2, 1000, 1000, 'k', 'world');
		INSERT INTO grp (topic, name, created, pos, settled)
		    VALUES (1, 'g', 1000, 2, 1);
		SQL
	} | sqlite3 -bail "$MQ_DB" >/dev/null
}

@test "a version 1 database is upgraded by the first program that opens it" {
	make_v1
	v=$(schema_version)
	[ "$v" -gt 1 ] || fail "this build's schema version is $v"
	run -0 mq-send old third
	assert_output 3
	run -0 sql 'PRAGMA user_version'
	assert_output "$v"
	run -0 sql 'SELECT delivered, failed, deadlettered FROM grp'
	assert_output '0|0|0'
	run -0 mq-recv -g g -n 0 --format '%o %b\n' old
	assert_output $'2 world\n3 third'
	# every step up to this one: messages take headers (version 10)
	run -0 mq-send -H a=1 old fourth
	run -0 mq-replay --format '%o %H\n' old
	assert_output $'1 \n2 \n3 \n4 a=1'
	run -0 sql 'PRAGMA integrity_check'
	assert_output ok
}

@test "a reader upgrades a version 1 database too, and reads it" {
	make_v1
	v=$(schema_version)
	[ "$v" -gt 1 ] || fail "this build's schema version is $v"
	run -0 mq-replay old
	assert_output $'1\thello\n2\tworld'
	run -0 sql 'PRAGMA user_version'
	assert_output "$v"
	run -0 sql 'SELECT delivered, failed, deadlettered FROM grp'
	assert_output '0|0|0'
}

@test "the counters added in version 2 count deliveries, failures and dead letters" {
	make_v1
	mq-topic group old g --max-attempts 2 >/dev/null
	# offset 1 was settled in version 1: offset 2 comes, twice
	r=$(mq-recv -g g --format '%r\n' old)
	[[ $r == old:g:2:1:* ]] || fail "first receipt: '$r'"
	mq-ack --fail --delay 0 "$r"
	r=$(mq-recv -g g --format '%r\n' old)
	[[ $r == old:g:2:2:* ]] || fail "second receipt: '$r'"
	run -0 --separate-stderr mq-ack --fail --delay 0 "$r"
	[[ $stderr == *"dead letter"* ]]
	run -0 sql 'SELECT off, state, attempt FROM delivery'
	assert_output '2|2|2'
	run -0 sql 'SELECT delivered, failed, deadlettered FROM grp'
	assert_output '2|2|1'
}

@test "version 5: grp.settled_ts from the history's last ack, then kept by every settle" {
	make_v1
	# a v1 history row: offset 1 acked at 1500
	sqlite3 "$MQ_DB" "INSERT INTO history (grp, off, ts, attempt, event)
	    VALUES (1, 1, 1500, 1, 'acked')" ||
	    fail "no version 1 history table to fill"
	mq-topic group old h >/dev/null
	run -0 sql 'SELECT name, settled_ts FROM grp ORDER BY name'
	assert_output $'g|1500\nh|'
	run -0 mq-lag --json old g
	jtrue '.last_settle_ms == 1500' <<<"$output"
	run -0 mq-recv -A -g g old
	run -0 sql "SELECT settled_ts > 1500 FROM grp WHERE name = 'g'"
	assert_output 1
}
