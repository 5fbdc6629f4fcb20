# The driver image used by docker-compose.yml (`billing serve`, `billing worker`, `billing gateway-sim`).
# Pinned base: a fixed Python patch release on a fixed Debian release. Pin the digest as well where
# the registry is reachable (`docker buildx imagetools inspect python:3.11.14-slim-bookworm`, then
# FROM python:3.11.14-slim-bookworm@sha256:...); it could not be looked up where this file was written.
FROM python:3.11.14-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/billing
WORKDIR /src
# Dependencies only from the lock file, every file checked against its hash.
COPY requirements/runtime.lock requirements/runtime.lock
RUN /opt/billing/bin/pip install --require-hashes --no-deps -r requirements/runtime.lock
# The driver itself runs from its source (no build step, so nothing is fetched without a hash).

FROM python:3.11.14-slim-bookworm
# The invoice PDFs' fonts (docs/customers.md): DejaVu Sans, and WenQuanYi Micro Hei for Chinese
# (zh-CN documents and emails); Debian bookworm's versions, pinned.
RUN apt-get update \
 && apt-get install -y --no-install-recommends fonts-dejavu-core=2.37-6 fonts-wqy-microhei=0.2.0-beta-3.1 \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 billing \
 && useradd --system --uid 10001 --gid billing --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin billing
COPY --from=build /opt/billing /opt/billing
COPY --chown=root:root driver/billing /app/driver/billing
COPY --chown=root:root db /app/db
ENV PATH=/opt/billing/bin:$PATH PYTHONPATH=/app/driver BILLING_DB_DIR=/app/db PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /app
USER 10001:10001
# For `billing serve` (compose turns it off for the other commands): ok or not, no details.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status == 200 else 1)"]
ENTRYPOINT ["python", "-m", "billing.cli"]
