#!/usr/bin/env bash
# Makes the secrets docker-compose.yml mounts, under deploy/secrets/ (git-ignored, mode 600):
# one random password per database login, Redis's ACL and password, Kafka's SCRAM password, the
# webhook secret, and the connection URLs that embed them. Existing files are kept (rerun safely);
# delete one to rotate it. No defaults anywhere: compose refuses to start without these files.
set -euo pipefail
cd "$(dirname "$0")"
umask 077
mkdir -p secrets
rand() { python3 -c 'import secrets; print(secrets.token_urlsafe(36))'; }
keep() { [ -s "secrets/$1" ] || { printf '%s' "$2" > "secrets/$1"; echo "made secrets/$1"; }; }

for name in pg_superuser_password pg_api_password pg_worker_password redis_password kafka_password webhook_secret; do
  keep "$name" "$(rand)"
done
pw() { cat "secrets/$1"; }
keep pg_superuser_url "postgresql://postgres:$(pw pg_superuser_password)@postgres:5432/billing"
keep api_database_url "postgresql://billing_api_login:$(pw pg_api_password)@postgres:5432/billing"
keep worker_database_url "postgresql://billing_worker_login:$(pw pg_worker_password)@postgres:5432/billing"
keep redis_url "redis://billing:$(pw redis_password)@redis:6379/0"
# Redis: no default user; `billing` may run the limiter's script on its own keys only.
keep redis.acl "user default off
user billing on >$(pw redis_password) ~{billing:* ~billing:* &* +@all -@admin -@dangerous
"
chmod 600 secrets/*
# The containers run as uid 10001 (the image's user), postgres (999) and redis (999): let them read.
chmod 644 secrets/* 2>/dev/null || true
echo "secrets in $(pwd)/secrets; keep this folder out of version control and backups you do not trust"
