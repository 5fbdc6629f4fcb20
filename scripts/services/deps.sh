#!/usr/bin/env bash
# Everything `make test` needs from the machine, installed once, up front, when missing: a bare Debian
# bookworm host of this kind (the CI's `.ci/run` on a clean clone) gets it in one apt-get call.
# Each service script still installs its own part when missing (apt_ensure), but make test runs
# test-sql and test-citus side by side: two of them installing at once would meet on dpkg's lock, and
# citus.sh reads the installed postgresql-15's version before postgres.sh would have installed it.
# Prints nothing when all is there (a few file probes); `make deps` alone runs it.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# probe (a file or a command) and the Debian package that provides it
NEEDS=(
  /usr/lib/postgresql/15/bin/pg_ctl postgresql-15                       # the servers (pg_rewind too), psql
  /usr/share/postgresql/15/extension/pgtap.control postgresql-15-pgtap  # pgTAP
  pg_prove libtap-parser-sourcehandler-pgtap-perl
  redis-server redis-server
  java openjdk-17-jre-headless                                          # Kafka's broker (scripts/kafka/pom.xml)
  mvn maven                                                             # fetches the broker's jars once
  pgbackrest pgbackrest                                                 # chaos/test_restore
  chromium chromium chromedriver chromium-driver                        # the console's browser tests
  pdftotext poppler-utils
  /usr/share/fonts/truetype/wqy/wqy-microhei.ttc fonts-wqy-microhei
  /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf fonts-dejavu-core
  openssl openssl                                                       # mailpit's certificate
  git git                                                               # chaos/test_upgrade: the previous release
  cc build-essential                                                    # Citus, built once from the vendored source
  /usr/include/lz4.h liblz4-dev /usr/include/zstd.h libzstd-dev
  /usr/include/krb5.h libkrb5-dev /usr/include/openssl/ssl.h libssl-dev
)
missing=()
for ((i = 0; i < ${#NEEDS[@]}; i += 2)); do
  probe=${NEEDS[i]}
  [ -e "$probe" ] || command -v "$probe" >/dev/null 2>&1 || missing+=("${NEEDS[i + 1]}")
done
# python3 -m venv (Makefile): Debian's python3 has no ensurepip without python3-venv.
PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null 2>&1 || missing+=(python3)
"$PY" -c "import ensurepip" >/dev/null 2>&1 || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing from Debian: ${missing[*]}"
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
# Citus is compiled against the server headers of the very version installed (citus.sh pins them).
if [ ! -f "$CACHE/citus/stage/.built" ] && [ ! -f /usr/include/postgresql/15/server/postgres.h ]; then
  apt_ensure /usr/include/postgresql/15/server/postgres.h \
    "postgresql-server-dev-15=$(dpkg-query -W -f='${Version}' postgresql-15)"
fi
# Go, for stripe-mock and mailpit (go install, once): a release that can switch to the toolchain their
# go.mod asks for (go_ensure in common.sh); Debian bookworm's own (1.19) cannot.
go_ensure
# Citus, built once from the vendored source (~6 minutes on a bare host): here, before the stages run
# side by side, not under a pytest worker's Citus fixture (whose test would wait for the build past
# its timeout) nor beside the pytest pass.
bash "$(dirname "${BASH_SOURCE[0]}")/citus.sh" build
