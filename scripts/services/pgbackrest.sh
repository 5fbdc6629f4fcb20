#!/usr/bin/env bash
# Backups and point-in-time recovery with pgBackRest (Debian's `pgbackrest`, installed when missing):
# a PostgreSQL 15 cluster that archives every WAL segment into a pgBackRest repository, full backups,
# and restores to a chosen instant into a FRESH cluster beside it (docs/operations.md, section 5).
# Everything lives under the cache folder ($BILLING_CACHE_DIR, default .cache) in pitr/.
#
#   pgbackrest.sh [start]          start the archived cluster (made on first use: initdb, archive_mode,
#                                  stanza-create); prints its URL
#   pgbackrest.sh backup [TYPE]    a backup (full by default; diff, incr), started at once (start-fast)
#   pgbackrest.sh check            switch to a new WAL segment and wait until it is archived (what the
#                                  restore may reach is what the repository holds)
#   pgbackrest.sh restore TIME     restore the latest backup taken before TIME, replay the archived WAL
#                                  up to TIME (a timestamp with zone, '2026-12-05 04:40:01.123+00') and
#                                  promote: a new cluster in pitr/restored, started on the restore port;
#                                  prints its URL. The archived cluster is left as it is.
#   pgbackrest.sh info             pgbackrest info
#   pgbackrest.sh stop             stop both clusters (fast)
#
# Ports: BILLING_PITR_PORT (the archived cluster, default 30520), BILLING_PITR_RESTORE_PORT (the
# restored one, default port+1).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
P1="${BILLING_PITR_PORT:-30520}"
P2="${BILLING_PITR_RESTORE_PORT:-$((P1 + 1))}"
PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
DIR="$CACHE/pitr"
CONF="$DIR/pgbackrest.conf"
STANZA=billing

apt_ensure pgbackrest pgbackrest

as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
sql() { local port=$1; shift; as_pg "$PGBIN/psql" -X -q -A -t -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "$@"; }
brest() { as_pg pgbackrest --config="$CONF" --stanza="$STANZA" "$@"; }
start_dir() {
  local data=$1 port=$2
  if port_open 127.0.0.1 "$port" && as_pg "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$port"; then return 0; fi
  as_pg "$PGBIN/pg_ctl" -D "$data" -l "$data.log" -o "-p $port -k $DIR" -w -t 300 start >/dev/null
  wait_port 127.0.0.1 "$port" 60 || { log "postgres $data did not open $port"; tail -20 "$data.log" >&2; exit 1; }
}
stop_dir() {
  [ -f "$1/postmaster.pid" ] && as_pg "$PGBIN/pg_ctl" -D "$1" -m fast -w -t 60 stop >/dev/null 2>&1 || true
}

case "${1:-start}" in
  stop)
    stop_dir "$DIR/restored"; stop_dir "$DIR/primary"; exit 0 ;;
  backup)
    brest --type="${2:-full}" backup; exit 0 ;;
  check)
    brest check; exit 0 ;;
  info)
    brest info; exit 0 ;;
  restore)
    target=${2:?a timestamp with time zone}
    stop_dir "$DIR/restored"
    rm -rf "$DIR/restored" "$DIR/restored.log"
    mkdir -p "$DIR/restored"; chmod 700 "$DIR/restored"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$DIR/restored"
    # pgBackRest picks the newest backup that ended before the target, then the archived WAL is
    # replayed up to it; promoted at the target (a new timeline: the restored cluster never archives over the original's).
    brest --pg1-path="$DIR/restored" --type=time --target="$target" --target-action=promote \
      --archive-mode=off \
      --recovery-option="restore_command=pgbackrest --config=$CONF --stanza=$STANZA --pg1-path=$DIR/restored archive-get %f \"%p\"" \
      restore
    # The copy must not archive into the repository (archive-mode=off above) nor take the port of
    # the original.
    echo "port = $P2" >> "$DIR/restored/postgresql.auto.conf"
    start_dir "$DIR/restored" "$P2"
    for _ in $(seq 600); do
      [ "$(sql "$P2" "SELECT NOT pg_is_in_recovery()" 2>/dev/null || true)" = "t" ] && break; sleep 0.1
    done
    [ "$(sql "$P2" "SELECT NOT pg_is_in_recovery()")" = "t" ] || { log "restore did not end"; tail -20 "$DIR/restored.log" >&2; exit 1; }
    echo "postgresql://postgres@127.0.0.1:$P2/postgres"
    exit 0 ;;
  start) ;;
  *) log "usage: $0 [start|backup [full|diff|incr]|check|restore TIME|info|stop]"; exit 2 ;;
esac

mkdir -p "$DIR/repo" "$DIR/log" "$DIR/lock" "$DIR/spool"
if [ "$(id -u)" -eq 0 ]; then chown postgres:postgres "$CACHE"; chown -R postgres:postgres "$DIR"; fi
cat > "$CONF" <<CONF
[global]
repo1-path=$DIR/repo
repo1-retention-full=2
log-path=$DIR/log
lock-path=$DIR/lock
spool-path=$DIR/spool
log-level-console=warn
log-level-file=info
compress-type=lz4
start-fast=y
archive-timeout=60

[$STANZA]
pg1-path=$DIR/primary
pg1-port=$P1
pg1-socket-path=$DIR
pg1-user=postgres
CONF
[ "$(id -u)" -eq 0 ] && chown postgres:postgres "$CONF"
if [ ! -f "$DIR/primary/PG_VERSION" ]; then
  log "initdb $DIR/primary (WAL archived by pgBackRest into $DIR/repo)"
  as_pg "$PGBIN/initdb" -D "$DIR/primary" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
  cat >> "$DIR/primary/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
max_connections = 100
shared_buffers = 64MB
timezone = 'UTC'
log_min_messages = warning
wal_level = replica
archive_mode = on
archive_command = 'pgbackrest --config=$CONF --stanza=$STANZA archive-push %p'
max_wal_senders = 3
CONF
  start_dir "$DIR/primary" "$P1"
  brest stanza-create >/dev/null
else
  start_dir "$DIR/primary" "$P1"
fi
echo "postgresql://postgres@127.0.0.1:$P1/postgres"
