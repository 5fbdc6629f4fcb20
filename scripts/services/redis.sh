#!/usr/bin/env bash
# Redis on loopback, no persistence. Prints its URL; reuses a running one; `stop` stops it.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PORT="${BILLING_REDIS_PORT:-26379}"
DIR="$CACHE/redis"
URL="redis://127.0.0.1:$PORT/0"

if [ "${1:-}" = "stop" ]; then
  if [ -f "$DIR/redis.pid" ]; then kill "$(cat "$DIR/redis.pid")" 2>/dev/null || true; rm -f "$DIR/redis.pid"; fi
  exit 0
fi
if [ -n "${BILLING_TEST_REDIS_URL:-}" ]; then echo "$BILLING_TEST_REDIS_URL"; exit 0; fi

apt_ensure redis-server redis-server
mkdir -p "$DIR"
if ! port_open 127.0.0.1 "$PORT"; then
  redis-server --bind 127.0.0.1 --port "$PORT" --save "" --appendonly no --daemonize yes \
    --pidfile "$DIR/redis.pid" --logfile "$DIR/redis.log" --dir "$DIR" --databases 64 >/dev/null
  wait_port 127.0.0.1 "$PORT" 20 || { log "redis did not open $PORT"; exit 1; }
fi
echo "$URL"
