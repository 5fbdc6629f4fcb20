#!/usr/bin/env bash
# A PostgreSQL 15 primary and a streaming standby on loopback, from the installed binaries, under the
# cache folder (docs/operations.md). Prints the multi-host URL every process of the engine uses:
#   postgresql://postgres@127.0.0.1:P1,127.0.0.1:P2/postgres?target_session_attrs=read-write
# libpq tries each host and keeps the one that accepts writes, so after a failover the same URL
# reaches the new primary.
#
#   postgres-ha.sh                 start both (made on first use; node1 primary, node2 its standby)
#   postgres-ha.sh stop            stop both (fast)
#   postgres-ha.sh promote NODE [--hold]
#                                  promote NODE (node1|node2) as Patroni would: pg_promote, then drop
#                                  synchronous_standby_names on it (no standby is left to wait for);
#                                  --hold: it comes up read-only (default_transaction_read_only) until
#   postgres-ha.sh open NODE       lets the writers in (after `billing db after-failover`)
#   postgres-ha.sh kill NODE       SIGKILL NODE's postmaster and every backend (the machine is lost)
#   postgres-ha.sh primary         print the node that accepts writes (node1|node2|none)
#   postgres-ha.sh rejoin NODE     the lost primary NODE (down) back as the standby of the other node:
#                                  pg_rewind against the new primary (undoing what NODE wrote past
#                                  the point where the timelines split), a replication slot on the new
#                                  primary, then NODE started streaming from it (and, in sync mode,
#                                  named its synchronous standby)
#
# Ports: BILLING_PG_HA_PORT (node1, default 30510) and BILLING_PG_HA_STANDBY_PORT (node2, default
# port+1). BILLING_PG_HA_MODE=sync (default) or async: sync sets synchronous_standby_names on the
# primary, so a COMMIT returns only once the standby has flushed its WAL (no acknowledged write is
# lost by a failover; a commit waits while the standby is away). async lets the primary run ahead
# (a failover loses what was not yet streamed). Durability is on here (fsync, synchronous_commit),
# unlike the fast single test cluster of postgres.sh.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
P1="${BILLING_PG_HA_PORT:-30510}"
P2="${BILLING_PG_HA_STANDBY_PORT:-$((P1 + 1))}"
MODE="${BILLING_PG_HA_MODE:-sync}"
PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
HA="$CACHE/pg-ha"
URL="postgresql://postgres@127.0.0.1:$P1,127.0.0.1:$P2/postgres?target_session_attrs=read-write"

as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
port_of() { if [ "$1" = node1 ]; then echo "$P1"; else echo "$P2"; fi; }
sql() { local port=$1; shift; as_pg "$PGBIN/psql" -X -q -A -t -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "$@"; }
start_node() {
  local node=$1 port
  port=$(port_of "$node")
  if port_open 127.0.0.1 "$port" && as_pg "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$port"; then return 0; fi
  as_pg "$PGBIN/pg_ctl" -D "$HA/$node" -l "$HA/$node.log" -o "-p $port -k $HA" -w -t 60 start >/dev/null
  wait_port 127.0.0.1 "$port" 30 || { log "postgres $node did not open $port"; tail -20 "$HA/$node.log" >&2; exit 1; }
}

case "${1:-start}" in
  stop)
    for node in node1 node2; do
      [ -f "$HA/$node/PG_VERSION" ] && as_pg "$PGBIN/pg_ctl" -D "$HA/$node" -m fast stop >/dev/null 2>&1 || true
    done
    exit 0 ;;
  kill)
    node=${2:?node1 or node2}
    pm=$(head -1 "$HA/$node/postmaster.pid" 2>/dev/null || true)
    [ -n "$pm" ] || { log "$node is not running"; exit 0; }
    # Freeze the postmaster so that it forks nothing more, then SIGKILL its children and itself at
    # once (a backend forked after the list was taken would outlive it, holding the shared memory).
    kill -STOP "$pm" 2>/dev/null || true
    kids=$(grep -l "^PPid:[[:space:]]*$pm\$" /proc/[0-9]*/status 2>/dev/null | cut -d/ -f3 || true)
    kill -KILL $kids "$pm" 2>/dev/null || true
    for _ in $(seq 200); do
      alive=0
      for p in $pm $kids; do kill -0 "$p" 2>/dev/null && alive=1; done
      [ "$alive" = 0 ] && break
      sleep 0.05
    done
    exit 0 ;;
  promote)
    node=${2:?node1 or node2}
    port=$(port_of "$node")
    if [ "${3:-}" = "--hold" ]; then
      # Promoted read-only: clients asking target_session_attrs=read-write keep away until `open`,
      # so that `billing db after-failover` runs before the first write (docs/operations.md).
      echo "default_transaction_read_only = on  # postgres-ha.sh promote --hold" >> "$HA/$node/postgresql.conf"
      sql "$port" "SELECT pg_reload_conf()" >/dev/null
      for _ in $(seq 100); do
        [ "$(sql "$port" "SHOW default_transaction_read_only")" = "on" ] && break; sleep 0.05
      done
    fi
    # What Patroni does on failover: promote (waiting for the end of recovery), then, as the new
    # primary has no standby yet, no synchronous standby to wait for.
    sql "$port" "SELECT pg_promote(true, 60)" >/dev/null
    sql "$port" "ALTER SYSTEM SET synchronous_standby_names = ''" >/dev/null
    sql "$port" "SELECT pg_reload_conf()" >/dev/null
    exit 0 ;;
  open)
    node=${2:?node1 or node2}
    port=$(port_of "$node")
    sed -i '/# postgres-ha.sh promote --hold$/d' "$HA/$node/postgresql.conf"
    sql "$port" "SELECT pg_reload_conf()" >/dev/null
    for _ in $(seq 100); do
      [ "$(PGOPTIONS= sql "$port" "SHOW default_transaction_read_only")" = "off" ] && break; sleep 0.05
    done
    exit 0 ;;
  rejoin)
    node=${2:?node1 or node2}
    other=node2; [ "$node" = node2 ] && other=node1
    port=$(port_of "$node"); oport=$(port_of "$other")
    if as_pg "$PGBIN/pg_ctl" -D "$HA/$node" status >/dev/null 2>&1; then
      log "$node is running: stop (or kill) it before it rejoins"; exit 1
    fi
    [ "$(sql "$oport" "SELECT NOT pg_is_in_recovery()")" = "t" ] || { log "$other is not a primary"; exit 1; }
    sql "$oport" "SELECT pg_create_physical_replication_slot('$node') WHERE NOT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = '$node')" >/dev/null
    # A promoted node writes its new timeline into its control file only at its next checkpoint:
    # until then pg_rewind would read "same timeline, no rewind required" (Patroni checkpoints too).
    sql "$oport" "CHECKPOINT" >/dev/null
    # pg_rewind (PostgreSQL 13+) first finishes a crashed target's recovery in single-user mode, then
    # copies from the new primary every block the target changed after the split (wal_log_hints).
    as_pg "$PGBIN/pg_rewind" -D "$HA/$node" --source-server="host=127.0.0.1 port=$oport user=postgres dbname=postgres" \
      --progress >"$HA/$node.rewind.log" 2>&1 || { log "pg_rewind $node failed"; tail -20 "$HA/$node.rewind.log" >&2; exit 1; }
    touch "$HA/$node/standby.signal"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$HA/$node/standby.signal"
    # After the rewind the target's configuration is the source's (postgresql.auto.conf included):
    # stream from the new primary through its slot, wait for no standby of its own.
    cat >> "$HA/$node/postgresql.auto.conf" <<CONF
primary_conninfo = 'host=127.0.0.1 port=$oport user=postgres application_name=$node'
primary_slot_name = '$node'
synchronous_standby_names = ''
CONF
    start_node "$node"
    for _ in $(seq 300); do
      state=$(sql "$oport" "SELECT state FROM pg_stat_replication WHERE application_name = '$node'" 2>/dev/null || true)
      [ "$state" = streaming ] && break; sleep 0.1
    done
    [ "$state" = streaming ] || { log "$node does not stream from $other ($state)"; tail -20 "$HA/$node.log" >&2; exit 1; }
    if [ "$MODE" = sync ]; then
      sql "$oport" "ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 ($node)'" >/dev/null
      sql "$oport" "SELECT pg_reload_conf()" >/dev/null
    fi
    exit 0 ;;
  primary)
    for node in node1 node2; do
      port=$(port_of "$node")
      if [ "$(sql "$port" "SELECT NOT pg_is_in_recovery()" 2>/dev/null || true)" = "t" ]; then echo "$node"; exit 0; fi
    done
    echo none; exit 0 ;;
  start) ;;
  *) log "usage: $0 [start|stop|promote NODE [--hold]|open NODE|kill NODE|rejoin NODE|primary]"; exit 2 ;;
esac

mkdir -p "$HA"
[ "$(id -u)" -eq 0 ] && chown postgres:postgres "$HA" "$CACHE"
if [ ! -f "$HA/node1/PG_VERSION" ]; then
  log "initdb $HA/node1 (primary, $MODE standby)"
  as_pg "$PGBIN/initdb" -D "$HA/node1" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
  sync_names="'FIRST 1 (node2)'"; [ "$MODE" = async ] && sync_names="''"
  cat >> "$HA/node1/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
max_connections = 200
shared_buffers = 128MB
timezone = 'UTC'
log_min_messages = warning
wal_level = replica
max_wal_senders = 5
max_replication_slots = 5
wal_keep_size = 256MB
hot_standby = on
wal_log_hints = on
wal_receiver_status_interval = 1s
synchronous_commit = on
synchronous_standby_names = $sync_names
CONF
  echo "host replication postgres 127.0.0.1/32 trust" >> "$HA/node1/pg_hba.conf"
fi
if [ -f "$HA/node2/PG_VERSION" ] && [ ! -f "$HA/node2/standby.signal" ]; then
  # node2 was promoted: it is the primary now. node1 must not come back as a second primary; it
  # rejoins as node2's standby only after pg_rewind (`rejoin node1`, docs/operations.md).
  start_node node2
  if [ -f "$HA/node1/standby.signal" ]; then start_node node1; echo "$URL"; exit 0; fi
  log "node2 is the primary (promoted); node1 left down until it is rewound (rejoin node1)"
  echo "$URL"; exit 0
fi
start_node node1
if [ ! -f "$HA/node2/PG_VERSION" ]; then
  log "pg_basebackup node1 -> $HA/node2 (standby)"
  sql "$P1" "SELECT pg_create_physical_replication_slot('node2') WHERE NOT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = 'node2')" >/dev/null
  as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$P1" -U postgres -D "$HA/node2" -X stream -S node2 -R -c fast \
    -d "application_name=node2"
  # -R wrote primary_conninfo and standby.signal. The standby never waits for a standby of its own:
  # once promoted it must accept writes at once (Patroni likewise manages synchronous_standby_names).
  cat >> "$HA/node2/postgresql.conf" <<CONF
synchronous_standby_names = ''
CONF
fi
start_node node2
# Ready when node2 streams (and, in sync mode, is the synchronous standby).
want="streaming"
for _ in $(seq 300); do
  state=$(sql "$P1" "SELECT state || '/' || sync_state FROM pg_stat_replication WHERE application_name = 'node2'" 2>/dev/null || true)
  if [ "$MODE" = sync ] && [ "$state" = "streaming/sync" ]; then break; fi
  if [ "$MODE" = async ] && [ "${state%%/*}" = "$want" ]; then break; fi
  sleep 0.1
done
case "$state" in streaming/*) ;; *) log "node2 is not streaming from node1 ($state)"; tail -20 "$HA/node2.log" >&2; exit 1 ;; esac
echo "$URL"
