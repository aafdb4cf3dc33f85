#!/usr/bin/env bats
# Schema versions: a database made by an older build is migrated in place,
# its data kept; t/data/schema-v1.sql is the schema of version 1 as it
# shipped.

load test_helper

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
	} | sqlite3 "$MQ_DB" >/dev/null
}

@test "a version 1 database is upgraded by the first program that opens it" {
	make_v1
	run -0 mq-send old third
	assert_output 3
	run -0 sql 'PRAGMA user_version'
	assert_output "$(mq-send -V | sed -n 's/.*(schema \([0-9]*\)).*/\1/p')"
	run -0 sql 'SELECT delivered, failed, deadlettered FROM grp'
	assert_output '0|0|0'
	run -0 mq-recv -g g -n 0 --format '%o %b\n' old
	assert_output $'2 world\n3 third'
	run -0 sql 'PRAGMA integrity_check'
	assert_output ok
}

@test "a reader upgrades a version 1 database too, and reads it" {
	make_v1
	run -0 mq-replay old
	assert_output $'1\thello\n2\tworld'
	run -0 sql 'PRAGMA user_version'
	[ "$output" -gt 1 ]
}

@test "the counters added in version 2 count deliveries, failures and dead letters" {
	make_v1
	mq-topic group old g --max-attempts 2 >/dev/null
	r=$(mq-recv -g g old | cut -f1)
	mq-ack --fail --delay 0 "$r"
	r=$(mq-recv -g g old | cut -f1)
	run -0 --separate-stderr mq-ack --fail --delay 0 "$r"
	[[ $stderr == *"dead letter"* ]]
	run -0 sql 'SELECT delivered, failed, deadlettered FROM grp'
	assert_output '2|2|1'
}
