#!/usr/bin/env bash
# A three-node Citus cluster on loopback: a coordinator and two workers, each a PostgreSQL 15 cluster
# under the cache folder with `shared_preload_libraries = 'citus'`.
#
#   citus.sh              build Citus if needed, start the three nodes, print the coordinator's URL
#   citus.sh build        only build and install the extension (cached under .cache/citus/)
#   citus.sh createdb DB  (re)create database DB on every node with the extension, workers registered
#   citus.sh dropdb DB    drop database DB on every node
#   citus.sh templatedb DB  make DB a template on every node (no connection allowed or left)
#   citus.sh clonedb DB TPL  (re)create DB on every node as a copy of the template TPL
#   citus.sh stop         stop the three nodes
#
# Citus is not packaged by Debian and its package repository is not reachable here, so it is built from
# the vendored source (VENDOR, release 13.2.2). The build is kept in .cache/citus/stage and copied into
# PostgreSQL's folders when they lack it, so only the first run pays the ~6 minutes.
#
# The build headers are pinned to the version of the PostgreSQL server already installed: installing
# Debian's newest postgresql-server-dev-15 would upgrade the server package under every running cluster
# of the machine (new connections then fail to load plpgsql.so).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
# The vendored source (BILLING_CITUS_VENDOR, else shared/vendor beside the checkout or beside one of
# its parents: ../shared/vendor from the main checkout, ../../shared/vendor from a worktree, else the
# workspace's /work/shared/vendor for a clone made elsewhere).
VENDOR="${BILLING_CITUS_VENDOR:-}"
if [ -z "$VENDOR" ]; then
  d="$ROOT"
  while :; do
    d=$(dirname "$d")
    if [ -f "$d/shared/vendor/citus-13.2.2.tar.gz" ]; then VENDOR="$d/shared/vendor"; break; fi
    if [ "$d" = "/" ]; then VENDOR=/work/shared/vendor; break; fi
  done
fi
if [ "${1:-}" != "stop" ] && [ ! -f "$VENDOR/citus-13.2.2.tar.gz" ] && [ ! -f "$CACHE/citus/stage/.built" ]; then
  log "no Citus source: set BILLING_CITUS_VENDOR to the folder holding citus-13.2.2.tar.gz and its patch"; exit 1
fi
# pgTAP and pg_prove: make test-citus runs the suites on the cluster (also when run before make test-sql).
if [ "${1:-}" != "stop" ]; then
  apt_ensure /usr/share/postgresql/15/extension/pgtap.control postgresql-15-pgtap
  apt_ensure pg_prove libtap-parser-sourcehandler-pgtap-perl
fi
CITUS_VERSION=13.2.2
COORD_PORT="${BILLING_CITUS_PORT:-25545}"
WORKER_PORTS=("${BILLING_CITUS_WORKER1_PORT:-25546}" "${BILLING_CITUS_WORKER2_PORT:-25547}")
BASE="$CACHE/citus"
STAGE="$BASE/stage"
URL_BASE="postgresql://postgres@127.0.0.1:$COORD_PORT"

as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
sudo_() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

build() {
  mkdir -p "$BASE"
  if [ ! -f "$STAGE/.built" ]; then
    local server_version
    server_version=$(dpkg-query -W -f='${Version}' postgresql-15)
    apt_ensure /usr/include/postgresql/15/server/postgres.h "postgresql-server-dev-15=$server_version"
    apt_ensure /usr/include/lz4.h liblz4-dev
    apt_ensure /usr/include/zstd.h libzstd-dev
    apt_ensure /usr/include/krb5.h libkrb5-dev
    apt_ensure /usr/include/openssl/ssl.h libssl-dev
    local src="$BASE/citus-$CITUS_VERSION" t0=$SECONDS
    log "building Citus $CITUS_VERSION from $VENDOR (about 6 minutes, once)"
    rm -rf "$src" "$STAGE"
    tar xzf "$VENDOR/citus-$CITUS_VERSION.tar.gz" -C "$BASE"
    # PostgreSQL 15.20's headers export have_createdb_privilege, which Citus 13.2.2 defines itself.
    if grep -q have_createdb_privilege /usr/include/postgresql/15/server/commands/dbcommands.h; then
      (cd "$src" && patch -s -p1 < "$VENDOR/citus-pg15.20.patch")
    fi
    # with_llvm=no: no JIT bitcode (clang per file); the servers here run without JIT for it.
    (cd "$src" && ./configure -q --without-libcurl >"$BASE/configure.log" 2>&1 &&
      make -s -j"$(nproc)" with_llvm=no >"$BASE/make.log" 2>&1 &&
      make -s install with_llvm=no DESTDIR="$STAGE" >>"$BASE/make.log" 2>&1) ||
      { log "Citus build failed, see $BASE/configure.log and $BASE/make.log"; tail -20 "$BASE/make.log" >&2; exit 1; }
    echo "$((SECONDS - t0))" > "$STAGE/.build_seconds"
    touch "$STAGE/.built"
    rm -rf "$src"
    log "Citus built in $((SECONDS - t0)) s"
  fi
  # Copy the staged files into PostgreSQL's folders where they differ (atomic rename per file).
  local f rel
  while IFS= read -r -d '' f; do
    rel=${f#"$STAGE"}
    if ! cmp -s "$f" "$rel" 2>/dev/null; then
      sudo_ mkdir -p "$(dirname "$rel")"
      sudo_ cp "$f" "$rel.tmp.$$" && sudo_ mv -f "$rel.tmp.$$" "$rel"
    fi
  done < <(find "$STAGE/usr" -type f -print0)
}

# start_node DATA PORT: "is it up, is it mine" read from the node's own postmaster.pid, as postgres.sh
# does (own_cluster, common.sh; house8: before, a port answering PostgreSQL was taken for the node,
# another checkout's cluster on that port, whose URL this printed).
start_node() {
  local data=$1 port=$2
  own_cluster "$data" "$port" "citus node" "BILLING_CITUS_*PORT" "scripts/services/citus.sh stop" && return 0
  if [ ! -f "$data/PG_VERSION" ]; then
    log "initdb $data"
    mkdir -p "$data"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$data" "$BASE" "$CACHE"
    as_pg "$PGBIN/initdb" -D "$data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
    cat >> "$data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$data'
shared_preload_libraries = 'citus'
max_connections = 300
shared_buffers = 256MB
work_mem = 16MB
fsync = off
synchronous_commit = off
full_page_writes = off
wal_level = logical
max_wal_size = 4GB
checkpoint_timeout = 30min
timezone = 'UTC'
log_min_messages = warning
jit = off
citus.shard_count = ${BILLING_CITUS_SHARD_COUNT:-8}
citus.max_adaptive_executor_pool_size = 4
CONF
  fi
  # -p: the port asked for now, even when the node was made for another one (as in postgres.sh).
  as_pg "$PGBIN/pg_ctl" -D "$data" -l "$data/server.log" -o "-p $port" -w -t 60 start >/dev/null
  wait_port 127.0.0.1 "$port" 30 || { log "citus node did not open $port"; tail -20 "$data/server.log" >&2; exit 1; }
}

stop_all() {
  local d
  for d in "$BASE/coordinator" "$BASE/worker1" "$BASE/worker2"; do
    [ -f "$d/PG_VERSION" ] && as_pg "$PGBIN/pg_ctl" -D "$d" -m fast stop >/dev/null 2>&1 || true
  done
}

psql_at() { PGOPTIONS="-c client_min_messages=warning" psql -XAtq -v ON_ERROR_STOP=1 "postgresql://postgres@127.0.0.1:$1/$2" "${@:3}"; }

# createdb DB: the database on every node, the extension in each, the workers registered on the coordinator.
createdb_all() {
  local db=$1 port
  for port in "$COORD_PORT" "${WORKER_PORTS[@]}"; do
    psql_at "$port" postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >/dev/null
    psql_at "$port" "$db" -c "CREATE EXTENSION citus" >/dev/null
  done
  psql_at "$COORD_PORT" "$db" -c "SELECT citus_set_coordinator_host('127.0.0.1', $COORD_PORT)" >/dev/null
  for port in "${WORKER_PORTS[@]}"; do
    psql_at "$COORD_PORT" "$db" -c "SELECT citus_add_node('127.0.0.1', $port)" >/dev/null
  done
  echo "$URL_BASE/$db"
}

# templatedb DB: DB (made by createdb and migrated) becomes a template on every node: no new
# connection, none left (Citus's maintenance daemon and cached connections included; the daemon is
# not started again while connections are refused), so clonedb can copy it.
templatedb_all() {
  local db=$1 port
  for port in "$COORD_PORT" "${WORKER_PORTS[@]}"; do
    psql_at "$port" postgres -c "ALTER DATABASE $db WITH ALLOW_CONNECTIONS false" \
      -c "SELECT count(pg_catalog.pg_terminate_backend(pid)) FROM pg_catalog.pg_stat_activity WHERE datname = '$db'" >/dev/null
  done
}

# clonedb DB TEMPLATE: DB copied from the template TEMPLATE on every node, the same copy on each (the
# coordinator's metadata names the workers' shards, which the workers' copies hold): a migrated Citus
# database in about a second a node instead of a migration's tens of seconds.
clonedb_all() {
  local db=$1 template=$2 port
  for port in "$COORD_PORT" "${WORKER_PORTS[@]}"; do
    psql_at "$port" postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db TEMPLATE $template" >/dev/null
  done
  echo "$URL_BASE/$db"
}

# dropdb DB: the database gone from every node (a test's throwaway database).
dropdb_all() {
  local db=$1 port
  for port in "$COORD_PORT" "${WORKER_PORTS[@]}"; do
    psql_at "$port" postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null || true
  done
}

case "${1:-start}" in
  build) build ;;
  stop) stop_all ;;
  createdb) createdb_all "${2:?database name}" ;;
  dropdb) dropdb_all "${2:?database name}" ;;
  templatedb) templatedb_all "${2:?database name}" ;;
  clonedb) clonedb_all "${2:?database name}" "${3:?template database name}" ;;
  start)
    # One start at a time (make test's test-citus and pytest's Citus fixture may ask at once); the
    # servers must not inherit the lock's descriptor (9>&-), or they would hold it for good.
    mkdir -p "$BASE" && exec 9>"$BASE/start.lock" && flock 9
    build
    start_node "$BASE/coordinator" "$COORD_PORT" 9>&-
    start_node "$BASE/worker1" "${WORKER_PORTS[0]}" 9>&-
    start_node "$BASE/worker2" "${WORKER_PORTS[1]}" 9>&-
    echo "$URL_BASE/postgres"
    ;;
  *) echo "usage: $0 [start|build|createdb DB|dropdb DB|templatedb DB|clonedb DB TPL|stop]" >&2; exit 2 ;;
esac
