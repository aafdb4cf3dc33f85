-- schema.sql: the mq schema on PostgreSQL (common/pg/).  The build embeds
-- this file; the first writer creates it, under an advisory lock, and
-- stamps mq_meta with the version below (the line "-- version: N" is read
-- by the build).  Newer versions are migrated by steps in common/pg/pg.c;
-- a database whose mq_meta says a newer version is refused.
--
-- version: 9
--
-- The same tables as the SQLite schema (../../schema.sql, see mq(5)),
-- with PostgreSQL's types.  Times are milliseconds since the Unix epoch.
-- lease.sql (its tables, views and functions since version 8) and the
-- function send() (send.sql) are made after these.

CREATE TABLE mq_meta (
	key		text PRIMARY KEY,
	value		text NOT NULL
);

-- A topic row is locked (FOR UPDATE) by every append until it commits:
-- offsets are dense and become visible in order.
CREATE TABLE topic (
	id		bigserial PRIMARY KEY,
	name		text NOT NULL UNIQUE,
	created		bigint NOT NULL,
	next_off	bigint NOT NULL DEFAULT 1,
	last_ts		bigint NOT NULL DEFAULT 0,
	msgs		bigint NOT NULL DEFAULT 0,
	bytes		bigint NOT NULL DEFAULT 0,
	retention	bigint,
	dedup_window	bigint NOT NULL DEFAULT 86400000,
	max_size	bigint NOT NULL DEFAULT 1048576,
	gap_below	bigint NOT NULL DEFAULT 0,
	paused_until	bigint,			-- since version 3
	ttl		bigint			-- since version 6
);

CREATE TABLE msg (
	topic		bigint NOT NULL,
	off		bigint NOT NULL,
	ts		bigint NOT NULL,
	due		bigint NOT NULL,
	key		text,
	body		bytea NOT NULL,
	expires		bigint,			-- since version 6
	headers		text,			-- since version 7
	dedup		text,			-- since version 7
	PRIMARY KEY (topic, off)
);
CREATE INDEX msg_key ON msg (topic, key, off) WHERE key IS NOT NULL;
CREATE INDEX msg_delayed ON msg (topic, off) WHERE due > ts;

CREATE TABLE dedup (
	topic		bigint NOT NULL,
	id		text NOT NULL,
	off		bigint NOT NULL,
	ts		bigint NOT NULL,
	PRIMARY KEY (topic, id)
);

-- A group row is locked by a claim that hands out new messages, so its
-- position moves one claim at a time; due deliveries are claimed with
-- FOR UPDATE SKIP LOCKED, by several members at once.
CREATE TABLE grp (
	id		bigserial PRIMARY KEY,
	topic		bigint NOT NULL,
	name		text NOT NULL,
	created		bigint NOT NULL,
	pos		bigint NOT NULL,
	lease		bigint NOT NULL DEFAULT 30000,
	max_attempts	integer NOT NULL DEFAULT 16,
	backoff		text NOT NULL DEFAULT '10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h',
	ordered		integer NOT NULL DEFAULT 0,
	settled		bigint NOT NULL DEFAULT 0,
	delivered	bigint NOT NULL DEFAULT 0,
	failed		bigint NOT NULL DEFAULT 0,
	deadlettered	bigint NOT NULL DEFAULT 0,
	settled_ts	bigint,			-- since version 2
	paused_until	bigint,			-- since version 3
	timeout		bigint,			-- since version 4
	cancelled	bigint NOT NULL DEFAULT 0,	-- since version 5
	lapsed		bigint NOT NULL DEFAULT 0,	-- since version 6
	-- since version 7: idempotent consumption, as in schema.sql
	idem		text,
	idem_window	bigint NOT NULL DEFAULT 86400000,
	duplicates	bigint NOT NULL DEFAULT 0,
	-- since version 7: limits, as in schema.sql
	rate_n		bigint,
	rate_ms		bigint,
	rate_tat	bigint NOT NULL DEFAULT 0,
	per_key		integer NOT NULL DEFAULT 0,
	UNIQUE (topic, name)
);

-- States as in the SQLite schema (schema.sql), 5 included: a row at or
-- after the group's pos, cancelled (5) or rescheduled (0) before it was
-- handed out.
CREATE TABLE delivery (
	grp		bigint NOT NULL,
	off		bigint NOT NULL,
	state		integer NOT NULL,
	due		bigint NOT NULL,
	attempt		integer NOT NULL DEFAULT 0,
	expired		integer NOT NULL DEFAULT 0,
	token		bigint NOT NULL DEFAULT 0,
	consumer	bigint,
	key		text,
	reason		text,
	since		bigint,
	host		text,
	pid		bigint,
	bid		text,			-- since version 7
	PRIMARY KEY (grp, off)
);
CREATE INDEX delivery_due ON delivery (grp, due) WHERE state < 2;
CREATE INDEX delivery_key ON delivery (grp, key, off) WHERE key IS NOT NULL;
CREATE INDEX delivery_consumer ON delivery (consumer)
    WHERE consumer IS NOT NULL;
CREATE INDEX delivery_bid ON delivery (grp, bid) WHERE bid IS NOT NULL;

-- Since version 7: the business ids a group with --idempotent-by acked
-- (schema.sql).
CREATE TABLE consumed (
	grp		bigint NOT NULL,
	bid		text NOT NULL,
	off		bigint NOT NULL,
	ts		bigint NOT NULL,
	PRIMARY KEY (grp, bid)
);

-- A consumer holds the session-level advisory lock (lockkey) while its
-- connection lives: whoever can take it knows the consumer is gone.
CREATE TABLE consumer (
	id		bigserial PRIMARY KEY,
	grp		bigint NOT NULL,
	host		text NOT NULL,
	boot		text NOT NULL,
	pid		bigint NOT NULL,
	start		bigint NOT NULL,
	since		bigint NOT NULL,
	seen		bigint NOT NULL,
	pgid		bigint,
	pgstart		bigint
);

CREATE TABLE history (
	grp		bigint NOT NULL,
	off		bigint NOT NULL,
	ts		bigint NOT NULL,
	n		bigint NOT NULL,
	attempt		integer NOT NULL,
	event		text NOT NULL,
	host		text,
	pid		bigint,
	reason		text,
	since		bigint,
	dhost		text,
	dpid		bigint,
	PRIMARY KEY (grp, off, ts, n)
);

-- Since version 7: how far each application's outbox has been moved
-- (mq-send --from-outbox), as in the SQLite schema.  A mover locks its
-- source's row to the commit: movers of one outbox go one at a time.
CREATE TABLE outbox (
	source		text PRIMARY KEY,
	moved		bigint NOT NULL,
	rows		bigint NOT NULL DEFAULT 0,
	ts		bigint NOT NULL
);

-- Since version 9: the last batch each mq-send appended for other
-- producers of its host (combine.c), so that they can tell, if it died,
-- whether that batch was committed: one row per combining session,
-- written by the append itself.
CREATE TABLE combined (
	token		bigint PRIMARY KEY,	-- the session's, random
	seq		bigint NOT NULL,	-- its batches, counted
	topic		bigint NOT NULL,
	first		bigint NOT NULL,	-- the batch's first offset
	ts		bigint NOT NULL
);
