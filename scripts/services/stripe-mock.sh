#!/usr/bin/env bash
# stripe-mock (Stripe's own mock of its API, which validates every request against Stripe's
# OpenAPI description) on loopback. Installed with the Go toolchain into .cache/stripe-mock/bin on
# first use; prints its URL; reuses a running one; `stop` stops it.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
VERSION="v0.203.0"
PORT="${BILLING_STRIPE_MOCK_PORT:-$(( ${BILLING_PG_PORT:-25432} + 2000 ))}"  # 27432 by default
DIR="$CACHE/stripe-mock"
BIN="$DIR/bin/stripe-mock"
URL="http://127.0.0.1:$PORT"

if [ "${1:-}" = "stop" ]; then
  if [ -f "$DIR/stripe-mock.pid" ]; then kill "$(cat "$DIR/stripe-mock.pid")" 2>/dev/null || true; rm -f "$DIR/stripe-mock.pid"; fi
  exit 0
fi
if [ -n "${BILLING_TEST_STRIPE_MOCK_URL:-}" ]; then echo "$BILLING_TEST_STRIPE_MOCK_URL"; exit 0; fi

mkdir -p "$DIR"
if [ ! -x "$BIN" ] || [ "$(cat "$DIR/version" 2>/dev/null)" != "$VERSION" ]; then
  go_ensure
  log "installing stripe-mock $VERSION with go install"
  GOBIN="$DIR/bin" GOPATH="$CACHE/go" GOCACHE="$CACHE/go-build" GOFLAGS=-modcacherw \
    go install "github.com/stripe/stripe-mock@$VERSION" >&2
  echo "$VERSION" > "$DIR/version"
fi
if ! port_open 127.0.0.1 "$PORT"; then
  # HTTPS on an ephemeral loopback port (stripe-mock always opens one; the tests use HTTP).
  nohup "$BIN" -http-addr "127.0.0.1:$PORT" -https-addr "127.0.0.1:" > "$DIR/stripe-mock.log" 2>&1 &
  echo $! > "$DIR/stripe-mock.pid"
  wait_port 127.0.0.1 "$PORT" 60 || { log "stripe-mock did not open $PORT"; tail -5 "$DIR/stripe-mock.log" >&2; exit 1; }
fi
echo "$URL"
