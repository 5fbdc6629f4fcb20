#!/usr/bin/env bash
# A throwaway PostgreSQL 15 cluster under the cache folder, on loopback, with pgTAP.
# Prints the URL it serves. Reuses a running cluster. `stop` stops it.
#
# "Is it up, is it mine" is read from the cluster's own postmaster.pid: its postmaster alive (a
# process whose working directory is this data directory), on the port asked for, answering on its
# own socket. A port answering PostgreSQL is not enough: that was another checkout's cluster (whose
# URL this printed), or this one's started again on a data directory already running. Refused
# with a message: this data directory running on another port; the port held by another process.
# Starts are serialized (a lock file beside the data directory: make test's stages each run
# `make services`, side by side).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PORT="${BILLING_PG_PORT:-25432}"
PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
DATA="$CACHE/postgres"
URL="postgresql://postgres@127.0.0.1:$PORT/postgres"

as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# One start or stop at a time; the servers must not inherit the lock's descriptor (9>&-).
lock() { exec 9>"$CACHE/postgres.lock" && flock 9; }

if [ "${1:-}" = "stop" ]; then
  lock
  [ -f "$DATA/PG_VERSION" ] && as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast stop >/dev/null 2>&1 9>&- || true
  exit 0
fi

if [ -n "${BILLING_TEST_DATABASE_URL:-}" ]; then echo "$BILLING_TEST_DATABASE_URL"; exit 0; fi

apt_ensure /usr/share/postgresql/15/extension/pgtap.control postgresql-15-pgtap
apt_ensure pg_prove libtap-parser-sourcehandler-pgtap-perl

lock
if own_cluster "$DATA" "$PORT" cluster BILLING_PG_PORT "scripts/services/postgres.sh stop"; then  # (common.sh)
  echo "$URL"; exit 0
fi

if [ ! -f "$DATA/PG_VERSION" ]; then
  log "initdb $DATA"
  mkdir -p "$DATA"
  [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$DATA" "$CACHE"
  as_pg "$PGBIN/initdb" -D "$DATA" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null 9>&-
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
as_pg "$PGBIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -o "-p $PORT" -w -t 60 start >/dev/null 9>&-
wait_port 127.0.0.1 "$PORT" 30 || { log "postgres did not open $PORT"; tail -20 "$DATA/server.log" >&2; exit 1; }
echo "$URL"
