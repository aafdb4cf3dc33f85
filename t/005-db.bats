#!/usr/bin/env bats
# Opening the database: which file (-d, $MQ_DB, the XDG default), WAL mode,
# the schema version, and every kind of file mq must refuse without
# touching it (newer schema, not a database, someone else's database,
# read-only, busy), with the documented exit status and one line on stderr.
# shellcheck disable=SC2154 # stderr is set by bats' run --separate-stderr

load test_helper
# shellcheck disable=SC2034 # read by setup() in test_helper.bash
SQLITE_ONLY="opening SQLite files: WAL, file modes, locks (t/100-pg.bats opens PostgreSQL)"

teardown() {
	exec 5>&- 2>/dev/null || true
	kill_bg
	if [ -n "${RO_DIR-}" ]; then
		chmod -R u+w "$RO_DIR" 2>/dev/null || true
		rm -rf "$RO_DIR"
	fi
}

# The schema version this build stamps, as mq-send -V reports it.
schema_version() {
	mq-send -V | sed -n 's/.*(schema \([0-9][0-9]*\)).*/\1/p'
}

# A fingerprint of a database file and of what it holds.
fingerprint() {
	sha256sum <"$1"
	sqlite3 "$1" .dump 'PRAGMA user_version' 'PRAGMA application_id'
}

# one_line_error STATUS: the last run failed with STATUS and said so in
# exactly one line on stderr, prefixed with the program name.
one_line_error() {
	assert_equal "$status" "$1"
	# a usage error adds the synopsis after its one line
	assert_equal "$(printf '%s\n' "${stderr%%$'\n'usage: *}" | wc -l)" 1
	[[ $stderr == mq-*:* ]]
}

@test "-d FILE is used, and beats \$MQ_DB" {
	run -0 mq-send -d other.db t hello
	assert_output 1
	[ -f other.db ]
	[ ! -e "$MQ_DB" ]
	run -0 mq-recv -d other.db -A t
	assert_output hello
	run -0 mq-send --db other.db t again
	assert_output 2
	[ ! -e "$MQ_DB" ]
}

@test "\$MQ_DB is used when there is no -d" {
	export MQ_DB="$BATS_TEST_TMPDIR/elsewhere.db"
	run -0 mq-send t hello
	assert_output 1
	[ -f "$BATS_TEST_TMPDIR/elsewhere.db" ]
	[ ! -e "$BATS_TEST_TMPDIR/mq.db" ]
	run -0 mq-recv -A -d "$BATS_TEST_TMPDIR/elsewhere.db" t
	assert_output hello
}

@test "default database is \$HOME/.local/share/mq/mq.db, directory made on first write" {
	unset MQ_DB XDG_DATA_HOME
	export HOME="$BATS_TEST_TMPDIR/home"
	mkdir "$HOME"
	run -0 mq-send t hello
	[ -f "$HOME/.local/share/mq/mq.db" ]
	run -0 sqlite3 "$HOME/.local/share/mq/mq.db" 'SELECT count(*) FROM msg'
	assert_output 1
	run -0 mq-recv -A t
	assert_output hello
}

@test "the default database's new directories are mode 0700, others follow the umask" {
	sqlite_only "a PostgreSQL database has no file or directory"
	unset MQ_DB XDG_DATA_HOME
	export HOME="$BATS_TEST_TMPDIR/home"
	mkdir "$HOME"
	umask 022
	run -0 mq-send t hello
	for d in .local .local/share .local/share/mq; do
		assert_equal "$(stat -c %a "$HOME/$d")" 700
	done
	run -0 mq-send -d "$BATS_TEST_TMPDIR/other/q.db" t hello
	assert_equal "$(stat -c %a "$BATS_TEST_TMPDIR/other")" 755
}

@test "a new database is 0666 less the umask, and its files follow it" {
	sqlite_only "a PostgreSQL database has no file"
	umask 002
	run -0 mq-send -d "$BATS_TEST_TMPDIR/g.db" t hello
	for f in g.db g.db-wal g.db-shm g.db-mq; do
		assert_equal "$(stat -c %a "$BATS_TEST_TMPDIR/$f")" 664
	done
}

@test "default database follows \$XDG_DATA_HOME" {
	unset MQ_DB
	export HOME="$BATS_TEST_TMPDIR/home" XDG_DATA_HOME="$BATS_TEST_TMPDIR/xdg/data"
	mkdir "$HOME"
	run -0 mq-send t hello
	assert_output 1
	[ -f "$XDG_DATA_HOME/mq/mq.db" ]
	[ ! -e "$HOME/.local" ]
	run -0 mq-recv -A t
	assert_output hello
}

@test "an empty \$MQ_DB falls back to the default path" {
	export MQ_DB='' HOME="$BATS_TEST_TMPDIR/home"
	unset XDG_DATA_HOME
	mkdir "$HOME"
	run -0 mq-send t hello
	assert_output 1
	[ -f "$HOME/.local/share/mq/mq.db" ]
	[ ! -e "$BATS_TEST_TMPDIR/mq.db" ]
}

@test "programs that only read do not create the database or its directory" {
	unset MQ_DB XDG_DATA_HOME
	export HOME="$BATS_TEST_TMPDIR/home"
	mkdir "$HOME"
	run -66 --separate-stderr mq-topic list
	one_line_error 66
	run -66 --separate-stderr mq-ack t:default:1:1:0123abcd
	one_line_error 66
	[ ! -e "$HOME/.local" ]
}

@test "a new database is in WAL mode and stamped with the schema version" {
	run -0 mq-send t hello
	run -0 sql 'PRAGMA journal_mode'
	assert_output wal
	v=$(schema_version)
	[[ $v =~ ^[0-9]+$ ]]
	run -0 sql 'PRAGMA user_version'
	assert_output "$v"
	run -0 sql 'PRAGMA integrity_check'
	assert_output ok
}

@test "a database with a newer schema is refused by every program, untouched" {
	mq-send -q t hello
	mq-recv t >/dev/null
	sql 'PRAGMA user_version = 999'
	local cmd
	before=$(fingerprint "$MQ_DB")
	for cmd in "mq-send t more" "mq-send t" "mq-recv t" "mq-recv -n 0 -A t" \
	    "mq-ack t:default:1:1:0123abcd" "mq-topic list" "mq-topic show t" \
	    "mq-topic set t max-size=10"; do
		# shellcheck disable=SC2086 # $cmd: a command line to split into words
		run -65 --separate-stderr $cmd </dev/null
		one_line_error 65
		[[ $stderr == *999* ]]
		assert_equal "$output" ""
	done
	assert_equal "$(fingerprint "$MQ_DB")" "$before"
}

@test "a file of random bytes is refused with 74 and not modified" {
	local cmd
	head -c 65536 /dev/urandom >"$MQ_DB"
	before=$(sha256sum <"$MQ_DB")
	for cmd in "mq-send t x" "mq-recv t" "mq-ack t:default:1:1:0123abcd" \
	    "mq-topic list"; do
		# shellcheck disable=SC2086 # $cmd: a command line to split into words
		run -74 --separate-stderr $cmd
		one_line_error 74
	done
	assert_equal "$(sha256sum <"$MQ_DB")" "$before"
}

@test "a text file is refused with 74 and not modified" {
	seq 1 5000 >"$MQ_DB"
	before=$(sha256sum <"$MQ_DB")
	run -74 --separate-stderr mq-send t x
	one_line_error 74
	run -74 --separate-stderr mq-recv t
	one_line_error 74
	assert_equal "$(sha256sum <"$MQ_DB")" "$before"
}

@test "another application's SQLite database is refused with 65 and not modified" {
	sql 'CREATE TABLE customer (id INTEGER PRIMARY KEY, name TEXT);
	    INSERT INTO customer (name) VALUES ('"'ada'"'), ('"'bob'"');'
	before=$(fingerprint "$MQ_DB")
	local cmd
	for cmd in "mq-send t x" "mq-recv t" "mq-ack t:default:1:1:0123abcd" \
	    "mq-topic list"; do
		# shellcheck disable=SC2086 # $cmd: a command line to split into words
		run -65 --separate-stderr $cmd
		one_line_error 65
	done
	assert_equal "$(fingerprint "$MQ_DB")" "$before"
	run -0 sql 'SELECT name FROM sqlite_master'
	assert_output customer
}

@test "a database the user cannot write is refused with 77, untouched" {
	# as root permission bits do not apply: run as nobody, on a database
	# in a directory nobody can read but not write
	as_nobody mq-send -V >/dev/null || fail "nobody cannot run mq-send"
	RO_DIR=$(mktemp -d /tmp/mq-ro.XXXXXX)
	export MQ_DB="$RO_DIR/mq.db"
	mq-send -q t hello
	mq-recv t >/dev/null	# offset 1 leased
	mq-send -q t second
	sql 'PRAGMA wal_checkpoint(TRUNCATE)' >/dev/null
	rm -f "$MQ_DB-wal" "$MQ_DB-shm"
	chmod 444 "$MQ_DB"
	chmod 555 "$RO_DIR"
	as_nobody test -r "$MQ_DB" || fail "nobody cannot read $MQ_DB"
	if as_nobody test -w "$MQ_DB"; then
		fail "nobody can write $MQ_DB"
	fi
	before=$(fingerprint "$MQ_DB")
	local cmd
	for cmd in "mq-send t x" "mq-recv t" "mq-recv -A -n 0 t" \
	    "mq-ack t:default:1:1:0123abcd"; do
		# shellcheck disable=SC2086 # $cmd: a command line to split into words
		run -77 --separate-stderr as_nobody $cmd
		one_line_error 77
		assert_equal "$output" ""
	done
	assert_equal "$(fingerprint "$MQ_DB")" "$before"
	run -0 sql 'SELECT count(*) FROM msg'
	assert_output 2
}

# lock_db: hold the write lock of $MQ_DB from a sqlite3 started with bg,
# its pid in LOCK_PID, until unlock_db; returns once the lock is taken.
lock_db() {
	local in="$BATS_TEST_TMPDIR/lock.in"
	mkfifo "$in"
	# sqlite3 opens the fifo itself (bash gives a background command
	# /dev/null as stdin), before fd 5 exists, so that its input ends
	# when fd 5 is closed; fd 5 is read-write, so no open waits
	# shellcheck disable=SC2016 # $1 and $2 are the inner bash's
	bg "$BATS_TEST_TMPDIR/lock.out" \
	    bash -c 'exec sqlite3 "$1" <"$2"' lock_db "$MQ_DB" "$in"
	LOCK_PID=$BG
	exec 5<>"$in"
	printf 'BEGIN IMMEDIATE;\n.system touch %s/locked\n' \
	    "$BATS_TEST_TMPDIR" >&5
	wait_for 60 test -e "$BATS_TEST_TMPDIR/locked" ||
	    { echo "sqlite3 took no lock: $(cat "$BATS_TEST_TMPDIR/lock.out")" >&2; return 1; }
}

# unlock_db: end the sqlite3 of lock_db (its transaction rolls back).
unlock_db() {
	exec 5>&-
	finish "$LOCK_PID" 60 || return
	[ "$ST" -eq 0 ] ||
	    { echo "sqlite3 exit $ST: $(cat "$BATS_TEST_TMPDIR/lock.out")" >&2; return 1; }
}

@test "a busy database gives 75 after MQ_BUSY_TIMEOUT, with nothing written" {
	mq-send -q t first
	lock_db
	export MQ_BUSY_TIMEOUT=200ms
	start=$(now_ms)
	run -75 --separate-stderr mq-send t x
	ms=$(( $(now_ms) - start ))
	one_line_error 75
	assert_equal "$output" ""
	# it waited for the lock, for MQ_BUSY_TIMEOUT at least
	[ "$ms" -ge 200 ] || fail "mq-send gave up after ${ms}ms"
	run -75 --separate-stderr bash -c 'echo y | mq-send t'
	one_line_error 75
	assert_equal "$output" ""
	run -75 --separate-stderr mq-recv t
	one_line_error 75
	assert_equal "$output" ""
	# and not for the default 5s: that would take 15s for these three
	ms=$(( $(now_ms) - start ))
	[ "$ms" -lt 15000 ] || fail "three busy refusals took ${ms}ms"
	unlock_db
	run -0 sql 'SELECT count(*) FROM msg'
	assert_output 1
	# the refused receive took nothing: the message comes at attempt 1
	run -0 mq-recv --format '%o %a %b\n' t
	assert_output '1 1 first'
	run -0 mq-send t after
	assert_output 2
}

@test "invalid MQ_BUSY_TIMEOUT and MQ_SYNC are usage errors (64)" {
	mq-send -q t hello
	for v in abc -1 5x 10q; do
		MQ_BUSY_TIMEOUT=$v run -64 --separate-stderr mq-send t x
		one_line_error 64
		[[ $stderr == *MQ_BUSY_TIMEOUT* ]]
	done
	for v in fast FULL off 1; do
		MQ_SYNC=$v run -64 --separate-stderr mq-send t x
		one_line_error 64
		[[ $stderr == *MQ_SYNC* ]]
		MQ_SYNC=$v run -64 --separate-stderr mq-recv t
		one_line_error 64
	done
	run -0 sql 'SELECT count(*) FROM msg'
	assert_output 1
	MQ_SYNC=normal run -0 mq-send t x
	assert_output 2
	MQ_SYNC=full run -0 mq-send t y
	assert_output 3
	MQ_BUSY_TIMEOUT=250ms run -0 mq-send t z
	assert_output 4
}

@test "an invalid MQ_SYNC or MQ_BUSY_TIMEOUT creates no database file" {
	# The environment is checked before anything touches the disk: a
	# usage error leaves neither an empty mq.db nor its directory behind.
	export MQ_DB="$BATS_TEST_TMPDIR/new/mq.db"
	MQ_SYNC=fast run -64 --separate-stderr mq-send t x
	one_line_error 64
	MQ_BUSY_TIMEOUT=abc run -64 --separate-stderr mq-send t x
	one_line_error 64
	[ ! -e "$MQ_DB" ]
	[ ! -e "$BATS_TEST_TMPDIR/new" ]
}

# all_gone PID...: none of the processes is running.
all_gone() {
	local p
	for p; do
		gone "$p" || return
	done
}

@test "concurrent first writers create the database once, and all succeed" {
	# Eight writers race to create a new file, forty times over.  mq_open
	# reads application_id, user_version and the table count in one
	# snapshot, so a file another process is creating never looks like
	# "not an mq database" (65), and PRAGMA journal_mode=WAL is retried
	# while another creator holds the lock instead of failing busy (75).
	local k i n pids
	for k in $(seq 40); do
		rm -f "$MQ_DB" "$MQ_DB-wal" "$MQ_DB-shm"
		pids=()
		for i in 1 2 3 4 5 6 7 8; do
			bg "out.$i" mq-send -q t "m$i"
			pids+=("$BG")
		done
		wait_for 60 all_gone "${pids[@]}" || fail "round $k: a writer hangs"
		for i in 1 2 3 4 5 6 7 8; do
			ST=0
			wait "${pids[i - 1]}" || ST=$?
			[ "$ST" -eq 0 ] && [ ! -s "out.$i" ] ||
			    fail "round $k: writer $i exit $ST: $(cat "out.$i")"
		done
		n=$(sql 'SELECT count(*) FROM msg')
		[ "$n" = 8 ] || fail "round $k: $n messages stored, not 8"
	done
}

# scratch: a directory the unprivileged user can reach, removed in teardown.
scratch() {
	RO_DIR=$(mktemp -d /tmp/mq-ro.XXXXXX)
	chmod 755 "$RO_DIR"
}

@test "a database in a directory the user may not write: 77, naming the file it could not make" {
	scratch
	run -77 --separate-stderr as_nobody mq-send -d "$RO_DIR/q.db" t x
	one_line_error 77
	[[ $stderr == *"$RO_DIR/q.db: Permission denied"* ]] ||
	    fail "stderr: $stderr"
	[ ! -e "$RO_DIR/q.db" ] || fail "a file was made"
}

@test "a -wal the user may not write: 77, naming the -wal" {
	scratch
	mq-send -q -d "$RO_DIR/q.db" t x
	chmod 777 "$RO_DIR"
	chmod 666 "$RO_DIR/q.db"
	chmod 644 "$RO_DIR/q.db-wal" "$RO_DIR/q.db-shm"
	# (not the sqlite3 shell: closing, it would remove the -wal)
	run -77 --separate-stderr as_nobody mq-send -d "$RO_DIR/q.db" t y
	one_line_error 77
	[[ $stderr == *"$RO_DIR/q.db-wal: Permission denied"* ]] ||
	    fail "stderr: $stderr"
	run -0 mq-replay -d "$RO_DIR/q.db" t
	assert_output "$(printf '1\tx')"
}

# as_member UID CMD...: CMD as user UID, whose own group is UID, also in
# group $GRP (root makes the users up: no entry in /etc/passwd needed).
as_member() {
	local uid=$1
	shift
	nobody_bin
	PATH="$NOBODY_BIN:$PATH" setpriv --reuid="$uid" --regid="$uid" \
	    --groups="$GRP" -- "$@"
}

# wal_and_shm_of_group: q.db's -wal and -shm, made anew, are its mode and
# its group, $GRP; a member other than their maker can write then.
wal_and_shm_of_group() {
	local f

	for f in q.db-wal q.db-shm; do
		[ -e "$RO_DIR/$f" ] || fail "no $f"
		assert_equal "$(stat -c '%a %g' "$RO_DIR/$f")" "660 $GRP"
	done
	run -0 --separate-stderr as_member 65532 mq-send -d "$RO_DIR/q.db" t y
}

@test "the -wal and -shm take the database's mode and group, made by a writer or a reader" {
	# As root SQLite gives new files the database's owner and group
	# itself: the files are made by users of the database's group, in a
	# directory that is not setgid, whose files get their maker's group.
	[ "$(id -u)" -eq 0 ] || skip "making users of a group up needs root"
	GRP=65533
	scratch
	chgrp "$GRP" "$RO_DIR"
	chmod 770 "$RO_DIR"
	mq-send -q -d "$RO_DIR/q.db" t x
	chgrp "$GRP" "$RO_DIR/q.db"
	chmod 660 "$RO_DIR/q.db"
	local cmd
	for cmd in "mq-send -q t x" "mq-replay t" "mq-lag" "mq-topic list"; do
		# (the sqlite3 shell checkpoints and removes them as it closes)
		sqlite3 "$RO_DIR/q.db" 'PRAGMA wal_checkpoint(TRUNCATE)' >/dev/null
		rm -f "$RO_DIR/q.db-wal" "$RO_DIR/q.db-shm"
		# shellcheck disable=SC2086 # $cmd: a command line to split into words
		run -0 --separate-stderr as_member 65534 \
		    env MQ_DB="$RO_DIR/q.db" $cmd
		wal_and_shm_of_group
	done
}

@test "no space or no inode for the database's files: 74, naming the file" {
	[ "$(id -u)" -eq 0 ] || skip "mounting a small tmpfs needs root"
	scratch
	mount -t tmpfs -o size=1m,nr_inodes=3 tmpfs "$RO_DIR" ||
	    skip "cannot mount a tmpfs here"
	# the directory and the database take two inodes, the -wal the last
	run -74 --separate-stderr mq-send -d "$RO_DIR/q.db" t a
	umount "$RO_DIR"
	one_line_error 74
	[[ $stderr == *"$RO_DIR/q.db-shm: No space left on device"* ]] ||
	    fail "stderr: $stderr"
	# a database that worked, whose -shm was removed, on a full disk
	mount -t tmpfs -o size=1m,nr_inodes=5 tmpfs "$RO_DIR"
	run -0 mq-send -d "$RO_DIR/q.db" t a
	rm "$RO_DIR/q.db-shm"
	touch "$RO_DIR/fill"
	run -74 --separate-stderr mq-send -d "$RO_DIR/q.db" t b
	umount "$RO_DIR"
	one_line_error 74
	[[ $stderr == *"q.db-shm: No space left on device"* ]] ||
	    fail "stderr: $stderr"
}

@test "a read-only file system: 77, for a new directory as for a new file" {
	[ "$(id -u)" -eq 0 ] || skip "mounting a read-only tmpfs needs root"
	scratch
	mount -t tmpfs -o ro,size=1m tmpfs "$RO_DIR" ||
	    skip "cannot mount a tmpfs here"
	# (run without -N: the file system is unmounted whatever they do)
	run --separate-stderr mq-send -d "$RO_DIR/q.db" t a
	local st1=$status err1=$stderr
	run --separate-stderr mq-send -d "$RO_DIR/new/q.db" t a
	umount "$RO_DIR"
	assert_equal "$st1" 77
	[[ $err1 == *"$RO_DIR/q.db: Read-only file system" ]] ||
	    fail "stderr: $err1"
	one_line_error 77
	[[ $stderr == *"directory $RO_DIR/new: Read-only file system" ]] ||
	    fail "stderr: $stderr"
}

@test "a database found in another journal mode is switched back to WAL by a writer" {
	mq-send -q t a
	sql 'PRAGMA journal_mode=DELETE' >/dev/null
	assert_equal "$(sql 'PRAGMA journal_mode')" delete
	run -0 mq-send t b
	assert_output 2
	assert_equal "$(sql 'PRAGMA journal_mode')" wal
}

# hot_journal: the test database in rollback mode, with a writer killed
# in the middle of changing every body (a hot journal beside it).
hot_journal() {
	seq 3000 | mq-send -q t
	sql 'PRAGMA journal_mode=DELETE' >/dev/null
	mkfifo hot
	sqlite3 "$MQ_DB" <hot >hot.out 2>&1 3>&- &
	local p=$!
	exec 5>hot
	echo "PRAGMA cache_size=2; BEGIN; UPDATE msg SET body = 'x';" \
	    "SELECT 'held';" >&5
	wait_for 30 grep -q held hot.out
	kill -9 "$p"
	wait "$p" 2>/dev/null || true
	exec 5>&-
	[ -s "$MQ_DB-journal" ] || fail "no hot journal"
}

@test "a reader rolls a hot journal back when it may write the file" {
	hot_journal
	run -0 mq-replay -n 2 t
	assert_output "$(printf '1\t1\n2\t2')"
	[ ! -s "$MQ_DB-journal" ] || fail "the journal is still there"
}

@test "a reader that may not roll a hot journal back says so: 74" {
	hot_journal
	scratch
	cp -p "$MQ_DB" "$MQ_DB-journal" "$RO_DIR/"
	chmod 644 "$RO_DIR"/mq.db*
	before=$(sha256sum "$RO_DIR"/mq.db*)
	run -74 --separate-stderr as_nobody mq-replay -d "$RO_DIR/mq.db" t
	one_line_error 74
	[[ $stderr == *"needs recovery by a writer"* ]] || fail "stderr: $stderr"
	assert_equal "$(sha256sum "$RO_DIR"/mq.db*)" "$before"
}

@test "one message a commit: the WAL starts over after a checkpoint, and stays near 1,000 frames" {
	mq-send t first >/dev/null
	local i off pid in out
	coproc SEND { mq-send t 2>&1; }
	# (bash unsets SEND_PID and SEND once the coprocess has exited: kept
	# before it can)
	pid=$SEND_PID in=${SEND[1]} out=${SEND[0]}
	echo "$pid" >>"$BATS_TEST_TMPDIR/pids"
	for ((i = 1; i <= 2000; i++)); do
		echo "message $i" >&"$in"
		read -r -t 30 off <&"$out" || fail "no offset for message $i"
		[ "$off" = $((i + 1)) ] || fail "message $i: $off"
	done
	# each commit writes two frames or three: some 4,000 in all, so
	# checkpoints every 1,000 frames restart the WAL three times at least
	# (measured while it runs: the last to close empties the WAL)
	local page frames
	page=$(sqlite3 "$MQ_DB" 'PRAGMA page_size')
	frames=$((($(stat -c %s "$MQ_DB-wal") - 32) / (page + 24)))
	[ "$frames" -lt 1500 ] || fail "the WAL grew to $frames frames"
	exec {in}>&-
	wait "$pid" || fail "mq-send exited $?"
	run -0 mq-topic show t
	assert_line 'messages 2001'
}

@test "one message a program: the last to close, having written, empties a WAL of 64 frames or more, so the WAL stays small" {
	sqlite_only "PostgreSQL has no WAL file of ours"
	local i page size
	for ((i = 1; i <= 300; i++)); do
		mq-send -q t "message $i" || fail "mq-send $i exited $?"
	done
	# one program a message finds no WAL index left by the one before:
	# unless one empties it as it closes, nothing ever starts the WAL
	# over, and 300 sends leave some 660 frames (2.7 MB), more at each
	page=$(sqlite3 "$MQ_DB" 'PRAGMA page_size')
	size=$(stat -c %s "$MQ_DB-wal")
	[ "$size" -lt $((100 * (page + 24) + 32)) ] ||
	    fail "the WAL is $size bytes after 300 sends"
	run -0 sql 'SELECT count(*), min(off), max(off) FROM msg'
	assert_output '300|1|300'
	db_intact
}
