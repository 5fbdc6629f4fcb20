#!/usr/bin/env bash
# A throwaway PostgreSQL 15 cluster under the cache folder, on loopback, with pgTAP.
# Prints the URL it serves. Reuses a running cluster. `stop` stops it.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PORT="${BILLING_PG_PORT:-25432}"
PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
DATA="$CACHE/postgres"
URL="postgresql://postgres@127.0.0.1:$PORT/postgres"

as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

if [ "${1:-}" = "stop" ]; then
  [ -f "$DATA/PG_VERSION" ] && as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast stop >/dev/null 2>&1 || true
  exit 0
fi

if [ -n "${BILLING_TEST_DATABASE_URL:-}" ]; then echo "$BILLING_TEST_DATABASE_URL"; exit 0; fi

apt_ensure /usr/share/postgresql/15/extension/pgtap.control postgresql-15-pgtap
apt_ensure pg_prove libtap-parser-sourcehandler-pgtap-perl

if port_open 127.0.0.1 "$PORT" && as_pg "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then
  echo "$URL"; exit 0
fi

if [ ! -f "$DATA/PG_VERSION" ]; then
  log "initdb $DATA"
  mkdir -p "$DATA"
  [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$DATA" "$CACHE"
  as_pg "$PGBIN/initdb" -D "$DATA" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
  cat >> "$DATA/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DATA'
max_connections = 300
shared_buffers = 1GB
work_mem = 16MB
maintenance_work_mem = 512MB
fsync = off
synchronous_commit = off
full_page_writes = off
wal_level = minimal
max_wal_senders = 0
max_wal_size = 8GB
checkpoint_timeout = 30min
timezone = 'UTC'
log_min_messages = warning
CONF
fi
# -p: the port asked for now, even when the cluster was made for another one (its postgresql.conf keeps
# the first port: a second checkout or worktree with other ports would otherwise collide with the first).
as_pg "$PGBIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -o "-p $PORT" -w -t 60 start >/dev/null
wait_port 127.0.0.1 "$PORT" 30 || { log "postgres did not open $PORT"; tail -20 "$DATA/server.log" >&2; exit 1; }
echo "$URL"
