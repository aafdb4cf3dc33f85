#!/bin/sh
# pgcluster.sh: a throwaway PostgreSQL cluster for the tests and the
# benchmark, in a directory of its own.
#
# usage: sh t/pgcluster.sh start DIR    start it; print the shell lines
#                                       that point the suite at it
#        sh t/pgcluster.sh crash DIR    restart it as after a crash
#                                       (pg_ctl restart -m immediate)
#        sh t/pgcluster.sh stop DIR     stop it, by the pid in its pid file
#
# The server listens on a Unix socket in DIR and on every address on a
# free TCP port (the many-hosts test reaches it from network namespaces).
# It runs as the invoking user, or as nobody when that is root (the server
# refuses to run as root).  Local connections are trusted; TCP ones need
# the password of role mq, which PGPASSFILE (DIR/pgpass) holds.  Role mq
# has only what mq(7) says an mq role needs: it may connect to database
# mq, and it owns the schemas the tests make for it.
set -eu

BINDIR=${PG_BINDIR:-}
if [ -z "$BINDIR" ]; then
	for d in /usr/lib/postgresql/*/bin; do
		[ -x "$d/initdb" ] && BINDIR=$d
	done
fi

as_owner() {
	if [ "$(id -u)" -eq 0 ]; then
		setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"
	else
		"$@"
	fi
}


start() {
	dir=$1
	[ -n "$BINDIR" ] || { echo "pgcluster: no initdb (postgresql-15)" >&2; exit 1; }
	mkdir -p "$dir"
	chmod 755 "$dir"
	[ "$(id -u)" -ne 0 ] || chown 65534:65534 "$dir"
	as_owner "$BINDIR/initdb" -D "$dir/data" -U postgres -A trust \
	    -E UTF8 --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1 ||
	    { cat "$dir/initdb.log" >&2; exit 1; }
	port=$(( 20000 + $$ % 20000 ))
	while bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null; do
		port=$((port + 1))
	done
	cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '*'
port = $port
unix_socket_directories = '$dir'
fsync = on
max_connections = 300
shared_buffers = 128MB
log_min_messages = warning
CONF
	cat >"$dir/data/pg_hba.conf" <<CONF
local all all trust
host all postgres 0.0.0.0/0 reject
host all all 0.0.0.0/0 scram-sha-256
CONF
	as_owner "$BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
	    -t 60 start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
	pw=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
	psql -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres \
	    -d postgres >/dev/null <<SQL
CREATE ROLE mq LOGIN PASSWORD '$pw';
CREATE DATABASE mq;
SQL
	umask 077
	echo "*:$port:mq:mq:$pw" >"$dir/pgpass"
	cat <<ENV
export MQ_PG_DIR='$dir' MQ_PG_PORT=$port MQ_PG_BIN='$BINDIR'
export PGPASSFILE='$dir/pgpass'
ENV
}

crash() {
	as_owner "$BINDIR/pg_ctl" -D "$1/data" -l "$1/server.log" -w -t 60 \
	    -m immediate restart >/dev/null
}

stop() {
	dir=$1
	[ -f "$dir/data/postmaster.pid" ] || return 0
	pid=$(head -1 "$dir/data/postmaster.pid")
	kill -INT "$pid" 2>/dev/null || return 0
	i=0
	while kill -0 "$pid" 2>/dev/null && [ $i -lt 300 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	kill -9 "$pid" 2>/dev/null || true
}

case ${1-} in
start) start "$2" ;;
crash) crash "$2" ;;
stop) stop "$2" ;;
*) echo "usage: sh t/pgcluster.sh start|crash|stop DIR" >&2; exit 64 ;;
esac
