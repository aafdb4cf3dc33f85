-- lease.sql: runs of leases, the views over them and the events view
-- (common/pg/).  The build embeds this file; it is run after schema.sql
-- when the schema is made, and as the step from version 7 to 8 (pg.c).
-- A released step may not change: a later version adds its own.

-- Since version 8: runs of new offsets that a claim of a plain group (not
-- ordered, no --per-key, no --idempotent-by) hands out to a plain mq-recv
-- (no consumer registered, no -A), one row a run instead of a delivery
-- row each.  Each offset from lo to hi - 1 whose bit in acked (bit i for
-- offset lo + i) is 0 is in flight at attempt 1, as a delivery row of
-- state 1 with this due, token, since, host and pid would be: the view
-- deliveries shows them so.  An ack sets their bits (newly: the bits it
-- set), and the run goes once all are set.  Every other write that could
-- touch a run first turns it into delivery rows (unlease()).
CREATE TABLE lease (
	grp		bigint NOT NULL,
	lo		bigint NOT NULL,
	hi		bigint NOT NULL,
	due		bigint NOT NULL,
	token		bigint NOT NULL,
	since		bigint NOT NULL,
	host		text,
	pid		bigint,
	acked		bit varying NOT NULL,
	newly		bit varying NOT NULL,
	PRIMARY KEY (grp, lo)
);
CREATE INDEX lease_due ON lease (grp, due);

CREATE VIEW leased AS
	SELECT l.grp, o.off, 1 AS state, l.due, 1 AS attempt, 0 AS expired,
	    l.token, NULL::bigint AS consumer, m.key, NULL::text AS reason,
	    l.since, l.host, l.pid, NULL::text AS bid
	    FROM lease l JOIN grp g ON g.id = l.grp
	    CROSS JOIN LATERAL generate_series(l.lo, l.hi - 1) AS o(off)
	    LEFT JOIN msg m ON m.topic = g.topic AND m.off = o.off
	    WHERE get_bit(l.acked, (o.off - l.lo)::int) = 0;

-- Every delivery, as if each run of lease were its delivery rows.
CREATE VIEW deliveries AS
	SELECT grp, off, state, due, attempt, expired, token, consumer, key,
	    reason, since, host, pid, bid FROM delivery
	UNION ALL
	SELECT * FROM leased;

-- The runs of group g that hold an offset from a to b - 1, due at or
-- before d, made delivery rows; with s, not the ones another transaction
-- has locked (an ack under way).  Returns how many rows it made.
CREATE FUNCTION unlease(g bigint, a bigint, b bigint, d bigint, s boolean)
    RETURNS bigint LANGUAGE sql AS $$
	WITH k1 AS (SELECT lo FROM lease WHERE grp = g AND lo < b AND hi > a
	    AND due <= d AND s FOR UPDATE SKIP LOCKED),
	k2 AS (SELECT lo FROM lease WHERE grp = g AND lo < b AND hi > a
	    AND due <= d AND NOT s FOR UPDATE),
	l AS (DELETE FROM lease WHERE grp = g AND lo IN (SELECT lo FROM k1
	    UNION ALL SELECT lo FROM k2) RETURNING *),
	i AS (INSERT INTO delivery (grp, off, state, due, attempt, token,
	    key, since, host, pid)
	    SELECT l.grp, o.off, 1, l.due, 1, l.token, m.key, l.since, l.host,
	    l.pid FROM l JOIN grp ON grp.id = l.grp
	    CROSS JOIN LATERAL generate_series(l.lo, l.hi - 1) AS o(off)
	    LEFT JOIN msg m ON m.topic = grp.topic AND m.off = o.off
	    WHERE get_bit(l.acked, (o.off - l.lo)::int) = 0
	    ON CONFLICT (grp, off) DO NOTHING RETURNING 1)
	SELECT count(*) FROM i
$$;

-- The acks of the runs of lease: one row per ack statement and run, not
-- a history row per message.  The offsets lo + i whose bit i in offs is 1
-- were acked at ts by host and pid, at attempt 1, having been delivered
-- at since to dhost and dpid; offset lo + i has history number n + i.
-- A purge clears the bits of the messages it deletes, and the row goes
-- with its last bit.  The view histories shows them as rows of history.
CREATE TABLE acks (
	grp		bigint NOT NULL,
	lo		bigint NOT NULL,
	offs		bit varying NOT NULL,
	ts		bigint NOT NULL,
	n		bigint NOT NULL,
	host		text,
	pid		bigint,
	since		bigint,
	dhost		text,
	dpid		bigint
);
CREATE INDEX acks_lo ON acks (grp, lo);

CREATE VIEW histories AS
	SELECT grp, off, ts, n, attempt, event, host, pid, reason, since,
	    dhost, dpid FROM history
	UNION ALL
	SELECT a.grp, a.lo + i, a.ts, a.n + i, 1, 'acked', a.host, a.pid,
	    NULL, a.since, a.dhost, a.dpid FROM acks a CROSS JOIN LATERAL generate_series(0,
	    length(a.offs) - 1) AS i WHERE get_bit(a.offs, i) = 1;

-- What happened to each message: the history, and the deliveries in
-- flight.  (Version 7 had it of history and delivery alone.)
CREATE OR REPLACE VIEW events AS
	SELECT grp, off, since AS ts, 0 AS k, n, attempt, 'delivered' AS event,
	    dhost AS host, dpid AS pid, NULL::text AS reason
	    FROM histories WHERE since IS NOT NULL
	UNION ALL
	SELECT grp, off, ts, 1, n, attempt, event, host, pid, reason
	    FROM histories
	UNION ALL
	SELECT grp, off, since, 0, 0, attempt, 'delivered', host, pid, NULL
	    FROM deliveries WHERE state = 1 AND since IS NOT NULL;

-- The events of offset o of group g, as the view events has them, read
-- by index: a run of lease, and so a row of acks, holds at most 1024
-- offsets (deliver.c).
CREATE FUNCTION events_at(g bigint, o bigint) RETURNS SETOF events
    LANGUAGE sql STABLE AS $$
	WITH h AS (SELECT grp, off, ts, n, attempt, event, host, pid, reason,
	    since, dhost, dpid FROM history WHERE grp = g AND off = o
	    UNION ALL
	    SELECT a.grp, o, a.ts, a.n + o - a.lo, 1, 'acked', a.host, a.pid,
	    NULL, a.since, a.dhost, a.dpid FROM acks a WHERE a.grp = g AND a.lo <= o AND
	    a.lo > o - 1024 AND CASE WHEN o - a.lo < length(a.offs) THEN
	    get_bit(a.offs, (o - a.lo)::int) = 1 ELSE false END)
	SELECT grp, off, since, 0, n, attempt, 'delivered', dhost, dpid,
	    NULL::text FROM h WHERE since IS NOT NULL
	UNION ALL
	SELECT grp, off, ts, 1, n, attempt, event, host, pid, reason FROM h
	UNION ALL
	SELECT grp, off, since, 0, 0, attempt, 'delivered', host, pid, NULL
	    FROM deliveries WHERE grp = g AND off = o AND state = 1 AND
	    since IS NOT NULL
$$;
