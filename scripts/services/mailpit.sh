#!/usr/bin/env bash
# Mailpit (a mail server for tests: SMTP in, an HTTP API to read what arrived) on loopback.
# Installed with the Go toolchain into .cache/mailpit/bin on first use; prints
# "<smtp url> <http url> <CA file>" (its self-signed certificate, to verify STARTTLS); reuses a
# running one; `stop` stops it. `serve SMTP_PORT HTTP_PORT DB` runs one in the foreground (a test's
# private instance).
# Ports: BILLING_MAILPIT_SMTP_PORT / BILLING_MAILPIT_HTTP_PORT; by default a worktree's spare ports
# (BILLING_WT_SPARE_PORT_BASE + 25 / + 26) when it has some, else PostgreSQL's + 5000 / + 5001.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
VERSION="v1.33.1"
if [ -n "${BILLING_WT_SPARE_PORT_BASE:-}" ]; then BASE=$(( BILLING_WT_SPARE_PORT_BASE + 25 )); else BASE=$(( ${BILLING_PG_PORT:-25432} + 5000 )); fi
SMTP_PORT="${BILLING_MAILPIT_SMTP_PORT:-$BASE}"               # 30432 by default
HTTP_PORT="${BILLING_MAILPIT_HTTP_PORT:-$(( BASE + 1 ))}"     # 30433 by default
DIR="$CACHE/mailpit"
BIN="$DIR/bin/mailpit"

if [ "${1:-}" = "stop" ]; then
  if [ -f "$DIR/mailpit.pid" ]; then kill "$(cat "$DIR/mailpit.pid")" 2>/dev/null || true; rm -f "$DIR/mailpit.pid"; fi
  exit 0
fi
if [ "${1:-}" != "serve" ] && [ -n "${BILLING_TEST_SMTP_URL:-}" ] && [ -n "${BILLING_TEST_MAILPIT_URL:-}" ]; then
  echo "$BILLING_TEST_SMTP_URL $BILLING_TEST_MAILPIT_URL ${BILLING_TEST_SMTP_CA_FILE:-$DIR/tls.crt}"; exit 0
fi

mkdir -p "$DIR"
if [ ! -x "$BIN" ] || [ "$(cat "$DIR/version" 2>/dev/null)" != "$VERSION" ]; then
  go_ensure
  log "installing mailpit $VERSION with go install"
  GOBIN="$DIR/bin" GOPATH="$CACHE/go" GOCACHE="$CACHE/go-build" GOFLAGS=-modcacherw \
    go install "github.com/axllent/mailpit@$VERSION" >&2
  echo "$VERSION" > "$DIR/version"
fi
# STARTTLS required, with a self-signed certificate made once; any login accepted (after STARTTLS).
if [ ! -f "$DIR/tls.key" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=127.0.0.1" \
    -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
    -keyout "$DIR/tls.key" -out "$DIR/tls.crt" >/dev/null 2>&1
fi
flags=(--smtp-tls-cert "$DIR/tls.crt" --smtp-tls-key "$DIR/tls.key" --smtp-require-starttls
       --smtp-auth-accept-any --smtp-disable-rdns --max 5000)
if [ "${1:-}" = "serve" ]; then
  exec "$BIN" --smtp "127.0.0.1:$2" --listen "127.0.0.1:$3" --database "$4" "${flags[@]}"
fi
if ! port_open 127.0.0.1 "$SMTP_PORT"; then
  nohup "$BIN" --smtp "127.0.0.1:$SMTP_PORT" --listen "127.0.0.1:$HTTP_PORT" \
    --database "$DIR/mailpit.db" "${flags[@]}" > "$DIR/mailpit.log" 2>&1 &
  echo $! > "$DIR/mailpit.pid"
  wait_port 127.0.0.1 "$SMTP_PORT" 60 || { log "mailpit did not open $SMTP_PORT"; tail -5 "$DIR/mailpit.log" >&2; exit 1; }
  wait_port 127.0.0.1 "$HTTP_PORT" 30 || { log "mailpit did not open $HTTP_PORT"; exit 1; }
fi
echo "smtp://127.0.0.1:$SMTP_PORT http://127.0.0.1:$HTTP_PORT $DIR/tls.crt"
