-- send.sql: send(), mq's append as an SQL function on PostgreSQL, so an
-- application can send in its own transaction: the message exists if and
-- only if that transaction commits (a transactional outbox without the
-- outbox).  The build embeds this file; it is run, CREATE OR REPLACE,
-- when the schema is made and after every migration, so the function is
-- always this one.  mq-send --from-outbox stores each row through it.
--
-- It appends as common/pg/deliver.c does: the topic's row is locked
-- (FOR UPDATE) before next_off is read and stays locked to the commit,
-- so offsets are dense and become visible in order; times never go back
-- (mq_rule_stamp of policy.c); a dedup id seen inside the topic's window
-- stores nothing and returns the first offset; the topic's max-size and
-- ttl hold; a new topic is made as on a first send; followers are woken
-- by NOTIFY at the commit.  The C append keeps its own statements: it
-- stores a batch of up to 10000 messages in one statement and round
-- trip, where this function stores one message a call.
--
-- The function runs with the search_path it was made with (that of the
-- installation), whatever the caller's.  It returns the offset.

CREATE OR REPLACE FUNCTION send(topic text, body bytea,
    key text DEFAULT NULL, delay interval DEFAULT NULL,
    at timestamptz DEFAULT NULL, dedup text DEFAULT NULL,
    ttl interval DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
	_t	record;
	_now	bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
	_ts	bigint;
	_due	bigint;
	_off	bigint;
	_ttl	bigint;
	_ls	text;
BEGIN
	IF send.topic IS NULL OR send.topic !~ '^[A-Za-z0-9_][A-Za-z0-9._-]*$'
	    OR length(send.topic) > 128 THEN
		RAISE EXCEPTION 'invalid topic name "%": use 1-128 of A-Z a-z 0-9 . _ -, not starting with - or .', send.topic
		    USING ERRCODE = '22023';
	END IF;
	IF send.body IS NULL THEN
		RAISE EXCEPTION 'message refused: no body (NULL)'
		    USING ERRCODE = '22004';
	END IF;
	IF octet_length(send.key) NOT BETWEEN 1 AND 1024 THEN
		RAISE EXCEPTION 'invalid key: want 1-1024 bytes of UTF-8'
		    USING ERRCODE = '22023';
	END IF;
	IF octet_length(send.dedup) NOT BETWEEN 1 AND 1024 THEN
		RAISE EXCEPTION 'invalid dedup id: want 1-1024 bytes'
		    USING ERRCODE = '22023';
	END IF;
	IF send.delay IS NOT NULL AND send.at IS NOT NULL THEN
		RAISE EXCEPTION 'delay and at exclude each other'
		    USING ERRCODE = '22023';
	END IF;
	IF send.delay < interval '0' THEN
		RAISE EXCEPTION 'invalid delay: below zero' USING ERRCODE = '22023';
	END IF;
	_ttl := (extract(epoch FROM send.ttl) * 1000)::bigint;
	IF _ttl < 1 THEN
		RAISE EXCEPTION 'invalid ttl: must be above zero'
		    USING ERRCODE = '22023';
	END IF;
	SELECT value INTO _ls FROM mq_meta WHERE mq_meta.key = 'lockspace';
	SELECT * INTO _t FROM topic t WHERE t.name = send.topic FOR UPDATE;
	IF NOT FOUND THEN
		INSERT INTO topic (name, created) VALUES (send.topic, _now)
		    ON CONFLICT (name) DO NOTHING;
		IF FOUND THEN
			PERFORM pg_notify('mq_' || _ls || '_0', '');
		END IF;
		SELECT * INTO _t FROM topic t WHERE t.name = send.topic
		    FOR UPDATE;
	END IF;
	IF octet_length(send.body) > _t.max_size THEN
		RAISE EXCEPTION 'message of % bytes refused: over the size limit of % bytes of topic %',
		    octet_length(send.body), _t.max_size, send.topic
		    USING ERRCODE = '22001';
	END IF;
	IF send.dedup IS NOT NULL THEN
		SELECT d.off INTO _off FROM dedup d WHERE d.topic = _t.id
		    AND d.id = send.dedup AND d.ts > _now - _t.dedup_window;
		IF FOUND THEN
			RETURN _off;
		END IF;
	END IF;
	_ts := greatest(_now, _t.last_ts);
	_due := greatest(_ts, CASE
	    WHEN send.delay IS NOT NULL THEN
		_now + (extract(epoch FROM send.delay) * 1000)::bigint
	    WHEN send.at IS NOT NULL THEN
		(extract(epoch FROM send.at) * 1000)::bigint
	    ELSE _ts END);
	_off := _t.next_off;
	IF send.dedup IS NOT NULL THEN
		INSERT INTO dedup (topic, id, off, ts)
		    VALUES (_t.id, send.dedup, _off, _now)
		    ON CONFLICT (topic, id) DO UPDATE SET off = EXCLUDED.off,
		    ts = EXCLUDED.ts;
	END IF;
	INSERT INTO msg (topic, off, ts, due, key, body, expires, dedup)
	    VALUES (_t.id, _off, _ts, _due, send.key, send.body,
	    _ts + coalesce(_ttl, _t.ttl), send.dedup);
	UPDATE topic SET next_off = next_off + 1, msgs = msgs + 1,
	    bytes = bytes + octet_length(send.body),
	    last_ts = greatest(last_ts, _ts) WHERE id = _t.id;
	PERFORM pg_notify('mq_' || _ls || '_' || _t.id, '');
	RETURN _off;
END
$$;

-- A text body, stored as its UTF-8 bytes.
CREATE OR REPLACE FUNCTION send(topic text, body text,
    key text DEFAULT NULL, delay interval DEFAULT NULL,
    at timestamptz DEFAULT NULL, dedup text DEFAULT NULL,
    ttl interval DEFAULT NULL)
RETURNS bigint LANGUAGE sql SET search_path FROM CURRENT AS $$
	SELECT send($1, convert_to($2, 'UTF8'), $3, $4, $5, $6, $7)
$$;
