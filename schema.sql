-- schema.sql: the one source of the mq database schema.
--
-- The build embeds this file; mq creates a new database with it and stamps
-- PRAGMA user_version with the version below (the line "-- version: N" is
-- read by the build).  Older files are brought up to date by the steps in
-- common/sqlite/open.c; a file with a newer version is refused.
--
-- version: 10
--
-- Times are milliseconds since the Unix epoch.  Offsets start at 1 per topic
-- and are never reused, even after a purge.

PRAGMA application_id = 1836130336;	-- 0x6D712020, "mq  "

-- A named append-only log.  next_off is the offset the next message gets;
-- msgs and bytes count what is stored, so monitors need not scan.  last_ts
-- keeps message times non-decreasing with offsets, so a time maps to an
-- offset by binary search without an index on time.
CREATE TABLE topic (
	id		INTEGER PRIMARY KEY,
	name		TEXT NOT NULL UNIQUE,
	created		INTEGER NOT NULL,
	next_off	INTEGER NOT NULL DEFAULT 1,
	last_ts		INTEGER NOT NULL DEFAULT 0,
	msgs		INTEGER NOT NULL DEFAULT 0,
	bytes		INTEGER NOT NULL DEFAULT 0,
	retention	INTEGER,			-- ms; NULL: no age limit
	dedup_window	INTEGER NOT NULL DEFAULT 86400000,
	max_size	INTEGER NOT NULL DEFAULT 1048576,
	-- Since version 2: a purge of settled messages can leave holes in the
	-- offsets, only below this one; from here to next_off all is stored.
	gap_below	INTEGER NOT NULL DEFAULT 0,
	-- since version 6: no group of it is handed anything before this
	-- time (mq-topic set paused=); NULL: not paused
	paused_until	INTEGER,
	-- since version 9: ms a message sent without --ttl lives; NULL: for
	-- ever
	ttl		INTEGER
);

-- The log.  due is when the message may first be delivered (ts unless it
-- was sent with a delay).
CREATE TABLE msg (
	topic		INTEGER NOT NULL,
	off		INTEGER NOT NULL,
	ts		INTEGER NOT NULL,
	due		INTEGER NOT NULL,
	key		TEXT,
	body		BLOB NOT NULL,
	-- since version 9: no group hands it out from this time on (it
	-- lapses); NULL: never
	expires		INTEGER,
	-- since version 10: its headers (mq-send -H), "NAME=VALUE" and a
	-- newline for each, in the order given; NULL: none
	headers		TEXT,
	-- since version 10: the dedup id it was sent with; NULL: none
	dedup		TEXT,
	PRIMARY KEY (topic, off)
) WITHOUT ROWID;
CREATE INDEX msg_key ON msg (topic, key, off) WHERE key IS NOT NULL;
-- Delayed messages only (since version 2), so monitors count them without
-- reading the log.
CREATE INDEX msg_delayed ON msg (topic, off) WHERE due > ts;

-- Idempotent producers: a dedup id seen inside the topic's window maps to
-- the offset it was first stored at.
CREATE TABLE dedup (
	topic		INTEGER NOT NULL,
	id		TEXT NOT NULL,
	off		INTEGER NOT NULL,
	ts		INTEGER NOT NULL,
	PRIMARY KEY (topic, id)
) WITHOUT ROWID;

-- A consumer group: a cursor over one topic.  Every offset below pos has
-- been handed out; the ones not yet settled have a row in delivery.
CREATE TABLE grp (
	id		INTEGER PRIMARY KEY,
	topic		INTEGER NOT NULL,
	name		TEXT NOT NULL,
	created		INTEGER NOT NULL,
	pos		INTEGER NOT NULL,
	lease		INTEGER NOT NULL DEFAULT 30000,
	max_attempts	INTEGER NOT NULL DEFAULT 16,
	backoff		TEXT NOT NULL DEFAULT '10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h',
	ordered		INTEGER NOT NULL DEFAULT 0,
	settled		INTEGER NOT NULL DEFAULT 0,	-- messages settled, ever
	-- counters since version 2, for rates (mq-lag --prometheus)
	delivered	INTEGER NOT NULL DEFAULT 0,	-- deliveries made
	failed		INTEGER NOT NULL DEFAULT 0,	-- deliveries failed
	deadlettered	INTEGER NOT NULL DEFAULT 0,	-- dead letters made
	-- since version 5: when settled last grew (mq-lag --max-idle);
	-- NULL: never
	settled_ts	INTEGER,
	-- since version 6: nothing is handed out before this time
	-- (mq-topic group --pause); NULL: not paused
	paused_until	INTEGER,
	-- since version 7: ms an exec-mode handler may run (mq-topic group
	-- --timeout); NULL: no limit
	timeout		INTEGER,
	-- since version 8: messages settled by mq-topic cancel
	cancelled	INTEGER NOT NULL DEFAULT 0,
	-- since version 9: messages settled because their time to live
	-- ran out before the group handed them out
	lapsed		INTEGER NOT NULL DEFAULT 0,
	-- since version 10: idempotent consumption (mq-topic group
	-- --idempotent-by): what names a message's business id ('dedup',
	-- 'key' or 'field:N'; NULL: off), how long a settled one is
	-- remembered (ms), and the messages settled as duplicates
	idem		TEXT,
	idem_window	INTEGER NOT NULL DEFAULT 86400000,
	duplicates	INTEGER NOT NULL DEFAULT 0,
	-- since version 10: limits (mq-topic group --rate, --per-key):
	-- rate_n deliveries per rate_ms (NULL: no limit), rate_tat when
	-- the next delivery is on schedule (microseconds since the epoch;
	-- the generic cell rate algorithm), and at most per_key
	-- deliveries of one key in flight (0: no limit)
	rate_n		INTEGER,
	rate_ms		INTEGER,
	rate_tat	INTEGER NOT NULL DEFAULT 0,
	per_key		INTEGER NOT NULL DEFAULT 0,
	UNIQUE (topic, name)
);

-- One row per message a group has handed out and not settled.
--   state 0: waiting until due (retry backoff, delay, behind its key)
--   state 1: leased until due, by receipt token (and consumer, if local)
--   state 2: dead letter, with reason
--   state 5: settled before it was handed out (cancelled): the row sits at
--            or after the group's pos, and goes when pos passes it
-- A waiting row (state 0) may also sit at or after pos: a message
-- rescheduled before it was handed out.  pos passes it by, and it is
-- handed out when due.
-- attempt counts deliveries made; expired counts leases that ran out.
-- Since version 3: since, host and pid say when and by whom the current
-- attempt was delivered (history gets them when the attempt ends).
CREATE TABLE delivery (
	grp		INTEGER NOT NULL,
	off		INTEGER NOT NULL,
	state		INTEGER NOT NULL,
	due		INTEGER NOT NULL,
	attempt		INTEGER NOT NULL DEFAULT 0,
	expired		INTEGER NOT NULL DEFAULT 0,
	token		INTEGER NOT NULL DEFAULT 0,
	consumer	INTEGER,
	key		TEXT,
	reason		TEXT,
	since		INTEGER,
	host		TEXT,
	pid		INTEGER,
	-- since version 10: the message's business id, in a group with
	-- --idempotent-by
	bid		TEXT,
	PRIMARY KEY (grp, off)
) WITHOUT ROWID;
CREATE INDEX delivery_due ON delivery (grp, due) WHERE state < 2;
CREATE INDEX delivery_key ON delivery (grp, key, off) WHERE key IS NOT NULL;
CREATE INDEX delivery_consumer ON delivery (consumer) WHERE consumer IS NOT NULL;
CREATE INDEX delivery_bid ON delivery (grp, bid) WHERE bid IS NOT NULL;

-- Idempotent consumption (since version 10): the business ids a group
-- with --idempotent-by has acked, when, and at which offset.  A message
-- with one of them, inside the group's window, is settled as a duplicate
-- instead of handed out.  mq-purge forgets the ones past the window.
CREATE TABLE consumed (
	grp		INTEGER NOT NULL,
	bid		TEXT NOT NULL,
	off		INTEGER NOT NULL,
	ts		INTEGER NOT NULL,
	PRIMARY KEY (grp, bid)
) WITHOUT ROWID;

-- Running consumers.  A lease with a consumer belongs to that process: when
-- the process is gone (same host and boot, pid gone or started at another
-- time; or same host, another boot) its leases are released at once.
CREATE TABLE consumer (
	id		INTEGER PRIMARY KEY,
	grp		INTEGER NOT NULL,
	host		TEXT NOT NULL,
	boot		TEXT NOT NULL,
	pid		INTEGER NOT NULL,
	start		INTEGER NOT NULL,	-- process start time, clock ticks since boot
	since		INTEGER NOT NULL,
	seen		INTEGER NOT NULL,
	-- since version 4: the process group its handlers run in (exec
	-- mode), and when that group's anchor started, so a reaper kills
	-- what is left of it, and only it, before releasing the leases
	pgid		INTEGER,
	pgstart		INTEGER
);

-- Delivery history for --trace (since version 3): one row per attempt
-- that ended (acked, failed, expired, released, dead) with when and by
-- whom it was delivered, and one per redrive.  Written once, when the
-- attempt ends, in the order deliveries settle: a delivery costs one row,
-- appended.  n orders the rows of one millisecond.  Rows go when their
-- message is purged.
CREATE TABLE history (
	grp		INTEGER NOT NULL,
	off		INTEGER NOT NULL,
	ts		INTEGER NOT NULL,	-- when it ended
	n		INTEGER NOT NULL,
	attempt		INTEGER NOT NULL,
	event		TEXT NOT NULL,
	host		TEXT,			-- who ended it
	pid		INTEGER,
	reason		TEXT,
	since		INTEGER,		-- when it was delivered
	dhost		TEXT,			-- and by whom
	dpid		INTEGER,
	PRIMARY KEY (grp, off, ts, n)
) WITHOUT ROWID;

-- Every event of every delivery, one per row, in order by (ts, k, n):
-- deliveries (from history and the leases running now) and how they
-- ended.  What mq-replay --trace prints; handy with sqlite3.
CREATE VIEW events AS
	SELECT grp, off, since AS ts, 0 AS k, n, attempt, 'delivered' AS event,
	    dhost AS host, dpid AS pid, NULL AS reason
	    FROM history WHERE since IS NOT NULL
	UNION ALL
	SELECT grp, off, ts, 1, n, attempt, event, host, pid, reason
	    FROM history
	UNION ALL
	SELECT grp, off, since, 0, 0, attempt, 'delivered', host, pid, NULL
	    FROM delivery WHERE state = 1 AND since IS NOT NULL;

-- Since version 10: how far each application's outbox has been moved
-- (mq-send --from-outbox).  moved is the highest outbox id whose message
-- is stored; it grows in the transaction that stores the messages, so a
-- mover killed before it deleted those rows from the outbox deletes them
-- unsent when it starts again.  source names the outbox: host:path.
CREATE TABLE outbox (
	source		TEXT PRIMARY KEY,
	moved		INTEGER NOT NULL,
	rows		INTEGER NOT NULL DEFAULT 0,	-- moved, ever
	ts		INTEGER NOT NULL		-- when it last moved
) WITHOUT ROWID;
