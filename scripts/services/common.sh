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

# running_pid DATA: the pid of the postmaster of PostgreSQL data directory DATA when one runs (its
# postmaster.pid names a live process working in DATA), else nothing. A stale file (a crash) or a
# pid reused since is not it. postgres.sh and citus.sh (each node) read "is it up, is it mine" here.
running_pid() {
  local data=$1 pid cwd
  [ -f "$data/postmaster.pid" ] || return 0
  pid=$(sed -n 1p "$data/postmaster.pid" 2>/dev/null) || return 0
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 0
  cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null) || cwd=$(cd "$data" && pwd -P)  # no /proc: trust kill -0
  [ "$cwd" = "$(cd "$data" && pwd -P)" ] && echo "$pid"
  return 0
}

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

# go_ensure: a `go` on PATH that can build stripe-mock and mailpit (their go.mod asks for Go 1.22 and
# 1.26). Go 1.21 and later fetch the toolchain a module asks for by themselves (GOTOOLCHAIN=auto,
# from the module proxy); Debian bookworm's golang-go is 1.19, which cannot: then the same toolchain
# module (golang.org/toolchain) is fetched with that go once, into the cache, and put first on PATH.
GO_TOOLCHAIN_VERSION=1.26.0
go_ensure() {
  export PATH="$CACHE/go-toolchain/bin:$PATH:/usr/local/go/bin"
  _go_switches() { command -v go >/dev/null 2>&1 &&
    [ "$(go env GOVERSION 2>/dev/null | sed -E 's/^go1\.([0-9]+).*/\1/;t;s/.*/0/')" -ge 21 ]; }
  _go_switches && return 0
  command -v go >/dev/null 2>&1 || apt_ensure go golang-go
  _go_switches && return 0
  local mod dir
  mod="golang.org/toolchain@v0.0.1-go$GO_TOOLCHAIN_VERSION.linux-$(dpkg --print-architecture)"
  log "fetching Go $GO_TOOLCHAIN_VERSION ($mod) with $(go version | cut -d' ' -f3)"
  dir=$(cd "$CACHE" && GOPATH="$CACHE/go" GOFLAGS=-modcacherw GO111MODULE=on go mod download -json "$mod" |
        sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [ -x "$dir/bin/go" ] || { log "no Go toolchain in '$dir'"; return 1; }
  ln -sfn "$dir" "$CACHE/go-toolchain"
  _go_switches
}
