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

# own_cluster DATA PORT NAME PORT_VAR STOP: "is it up, is it mine" for the PostgreSQL cluster in DATA
# (postgres.sh; each node of citus.sh). 0: its postmaster runs on PORT and answers on its own socket
# (reuse it; still starting: waited for). 1: none runs and PORT is free (start it). Refused with a
# message (exit 1): DATA running on another port; PORT held by another process (a port answering
# PostgreSQL is not enough: that was another checkout's cluster). NAME, PORT_VAR and STOP word the
# messages. Needs as_pg and PGBIN of the caller.
own_cluster() {
  local data=$1 port=$2 name=$3 port_var=$4 stop=$5 pid ran_port
  pid=$(running_pid "$data")
  if [ -n "$pid" ]; then
    ran_port=$(sed -n 4p "$data/postmaster.pid")
    if [ "$ran_port" != "$port" ]; then
      log "the $name in $data runs already (pid $pid) on port $ran_port, not $port (another $port_var?):"
      log "use that port, or stop it first ($stop)"
      exit 1
    fi
    # Up, or still starting (recovery after a crash, a loaded machine): its own socket answers when ready.
    for _ in $(seq 1 600); do
      if as_pg "$PGBIN/pg_isready" -q -h "$data" -p "$port" 9>&- && port_open 127.0.0.1 "$port"; then return 0; fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    log "the $name in $data (pid $pid, port $port) does not answer"; tail -20 "$data/server.log" >&2 || true; exit 1
  fi
  if port_open 127.0.0.1 "$port"; then
    log "port $port is taken by another process, not the $name in $data (another checkout's services?):"
    log "choose another $port_var, or stop what holds it"
    exit 1
  fi
  return 1
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
