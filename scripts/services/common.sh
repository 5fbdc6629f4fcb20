# Shared by the service scripts: where state lives and how to wait for a port.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${BILLING_CACHE_DIR:-$ROOT/.cache}"
mkdir -p "$CACHE"

# Default ports (PostgreSQL 25432, Redis 26379, Kafka 29092/29093) sit below Linux's ephemeral range
# (32768-60999): a busy machine's outgoing connections can hold a port inside it and make a restart fail
# with "Address already in use" (seen here with the old 55432).
log() { echo "[services] $*" >&2; }

# wait_port HOST PORT SECONDS
wait_port() {
  local host=$1 port=$2 secs=$3 i
  for ((i = 0; i < secs * 10; i++)); do
    if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# apt_ensure CMD PACKAGE...: install Debian packages when CMD/file is missing.
apt_ensure() {
  local probe=$1; shift
  if [ -e "$probe" ] || command -v "$probe" >/dev/null 2>&1; then return 0; fi
  log "installing $* from Debian"
  local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  if ! $sudo apt-get install -y -q "$@" >/dev/null 2>&1; then
    $sudo apt-get update -q >/dev/null 2>&1 || true
    $sudo apt-get install -y -q "$@" >/dev/null
  fi
}
