# The two commands: `make demo` (the main job on embedded defaults) and `make test`.
# Both set up what they need: the virtual environment, the packages and the services on loopback.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CACHE := .cache
SERVICES_ENV := $(CACHE)/services.env
PGTAP_DB ?= billing_pgtap
# pgTAP files on one PostgreSQL run one at a time: each runs in its own transaction and rolls back, but
# files run side by side in one database meet on shared rows (the invoice numbering counter a claim
# takes with SKIP LOCKED and holds to its file's end: 510 found its invoice unclaimed) and on the
# planner's statistics (770's plans). ~30 s serially. The usage suites (710-740, 890) no longer
# deadlock side by side: making a month's partition locks usage_event ACCESS EXCLUSIVE to the file's
# end, and two files that had read it each waited for the other; each now takes the partitions' lock
# first (db/tests/fixtures/usage_partitions_lock.sql), so they run one after another among themselves.
# A whole run at -j 4 passed once (house7, load 10), but the two meetings above remain possible. On Citus they run $(PGTAP_CITUS_JOBS) at a time
# (minutes serially), the suites that meet listed in CITUS_SERIAL.
PGTAP_JOBS ?= 1
PGTAP_CITUS_JOBS ?= 4
PYTEST_ARGS ?=

.PHONY: help deps venv chromium poppler fonts services services-stop citus citus-stop db-migrate test test-fast test-quick test-sql test-citus test-py test-py-parallel test-py-chaos test-py-serial demo bench-renewal bench-signup bench-pdf bench-relay bench-charge bench-citus bench-citus-engine bench-first-of-month bench-http bench-retention clean schema-snapshot audit audit-online lock bench-scale bench-usage bench-usage-rating bench-usage-rating-citus bench-usage-ingest bench-usage-reads bench-usage-statement openapi client bench-relay-citus

help:
	@echo "make demo   - the first-of-the-month peak on a simulated clock, with a report"
	@echo "make test   - the lock file audit, pgTAP and pytest suites against real PostgreSQL, Redis and Kafka"
	@echo "make test-quick - the fast tier and a few quick suites, in parallel (the loop while developing)"
	@echo "make audit  - offline check of requirements/runtime.lock (hashes, advisory floors)"
	@echo "make services / services-stop - bring the loopback services up / down"

# What the machine needs (Debian packages, a Go that can build stripe-mock and mailpit, Citus), installed
# once when missing, before make test's stages run side by side (scripts/services/deps.sh).
deps:
	@bash scripts/services/deps.sh

$(BIN)/.installed: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[test]"
	@touch $@

venv: $(BIN)/.installed

# Each script prints the URL it serves; the URLs go to .cache/services.env for the other targets
# (written whole, then renamed: make test's side-by-side stages each run this target and read the file).
services:
	@mkdir -p $(CACHE)
	@pg=$$(bash scripts/services/postgres.sh) && \
	 rd=$$(bash scripts/services/redis.sh) && \
	 kf=$$(bash scripts/services/kafka.sh) && \
	 sm=$$(bash scripts/services/stripe-mock.sh) && \
	 read -r smtp mailpit smtpca <<< "$$(bash scripts/services/mailpit.sh)" && \
	 { echo "export BILLING_TEST_DATABASE_URL=$$pg"; \
	   echo "export BILLING_TEST_REDIS_URL=$$rd"; \
	   echo "export BILLING_TEST_KAFKA_BOOTSTRAP=$$kf"; \
	   echo "export BILLING_TEST_STRIPE_MOCK_URL=$$sm"; \
	   echo "export BILLING_TEST_SMTP_URL=$$smtp"; \
	   echo "export BILLING_TEST_MAILPIT_URL=$$mailpit"; \
	   echo "export BILLING_TEST_SMTP_CA_FILE=$$smtpca"; } > $(SERVICES_ENV).$$$$ && mv -f $(SERVICES_ENV).$$$$ $(SERVICES_ENV) && \
	 echo "postgres: $$pg" && echo "redis:    $$rd" && echo "kafka:    $$kf" && echo "stripe-mock: $$sm" && \
	 echo "mailpit:  $$smtp $$mailpit"

services-stop:
	-bash scripts/services/mailpit.sh stop
	-bash scripts/services/stripe-mock.sh stop
	-bash scripts/services/kafka.sh stop
	-bash scripts/services/redis.sh stop
	-bash scripts/services/postgres.sh stop

# Migrations create and grant the cluster-wide roles (and, on Citus, propagate to every node): two at
# once can fail with "tuple concurrently updated". make test runs test-sql and test-citus beside
# pytest's parallel pass, whose workers migrate their templates under the lock file .cache/migrate.lock
# (driver/tests/conftest.py _exclusive): the stages' migrations take the same lock.
MIGRATE_LOCKED = flock $(CACHE)/migrate.lock

# pgTAP: a fresh database built from the migrations, then every file in db/tests, $(PGTAP_JOBS) at a time,
# those of PGTAP_LAST last, after a VACUUM: they read every row of the tables (862 recomputes the MRR
# over all service lines at ~300 instants), and the files before leave their rolled-back rows as dead
# tuples (the usage suites thousands of service lines; autovacuum visits a database once a minute):
# 862 took 74-110 s after them, 6-12 s after the VACUUM (house8, load ~10).
PGTAP_LAST := 862_mrr_aggregate.sql
test-sql: venv services
	@started=$$(date +%s) && source $(SERVICES_ENV) && \
	 base=$${BILLING_TEST_DATABASE_URL%/*} && url="$$base/$(PGTAP_DB)" && \
	 psql -q "$$BILLING_TEST_DATABASE_URL" -v ON_ERROR_STOP=1 \
	   -c "DROP DATABASE IF EXISTS $(PGTAP_DB) WITH (FORCE)" -c "CREATE DATABASE $(PGTAP_DB)" && \
	 $(MIGRATE_LOCKED) $(BIN)/billing --log-level WARNING db migrate --simulation --database-url "$$url" && \
	 psql -q "$$url" -v ON_ERROR_STOP=1 -c "CREATE EXTENSION IF NOT EXISTS pgtap" && \
	 pg_prove -j $(PGTAP_JOBS) --dbname "$$url" $$(ls db/tests/*.sql | grep -vxF -f <(printf 'db/tests/%s\n' $(PGTAP_LAST))) && \
	 psql -q "$$url" -v ON_ERROR_STOP=1 -c "VACUUM (ANALYZE)" && \
	 pg_prove --dbname "$$url" $(addprefix db/tests/,$(PGTAP_LAST)) && \
	 echo "test-sql: $$(( $$(date +%s) - started )) s"

# Citus (docs/scaling.md): a coordinator and two workers on loopback, Citus built once from the vendored
# source into .cache/citus/. test-citus: a fresh database migrated with --citus, then the pgTAP suites
# listed in db/tests/citus.list (the ones the engine passes on Citus today; docs/scaling.md says why
# the others do not yet), $(PGTAP_CITUS_JOBS) at a time (each in its own transaction, rolled back), then the
# Citus-only ones of db/tests/citus/ one after the other (they commit through dblink and release every
# shard lease, so they must not overlap).
CITUS_DB ?= billing_pgtap_citus
citus:
	@bash scripts/services/citus.sh

citus-stop:
	-bash scripts/services/citus.sh stop

# Suites of citus.list run after the parallel pass, one at a time: 850 and 860 both write the api_key
# reference table, 310 and 721 tax rates, plans and meters (reference tables); two such transactions at
# once can meet in a distributed deadlock on the cluster (each pgTAP file is one transaction).
# 510 expects each claim to take its own invoice: a neighbour file holding the same year's numbering
# counter to its end makes the claim skip an unnumbered invoice (claims never wait for the counter).
# 202 writes plans and tries DELETEs on the plan (a reference table) that its trigger refuses on every node.
# 830 writes plans and coupons (reference tables) as 310 does; 851 writes plans.
CITUS_SERIAL := 850_security.sql 860_console.sql 310_signups.sql 721_usage_rating_set.sql 510_charging.sql \
	202_plan_never_deleted.sql 830_coupon_per_customer.sql 851_plan_self_serve.sql
test-citus: venv
	@started=$$(date +%s) && bash scripts/services/citus.sh >/dev/null && \
	 url=$$(bash scripts/services/citus.sh createdb $(CITUS_DB)) && \
	 $(MIGRATE_LOCKED) $(BIN)/billing --log-level WARNING db migrate --simulation --citus --database-url "$$url" && \
	 psql -q "$$url" -v ON_ERROR_STOP=1 -c "CREATE EXTENSION IF NOT EXISTS pgtap" && \
	 pg_prove -j $(PGTAP_CITUS_JOBS) --dbname "$$url" $$(grep -v '^#' db/tests/citus.list | grep -vxF -f <(printf '%s\n' $(CITUS_SERIAL)) | sed 's|^|db/tests/|') && \
	 pg_prove --dbname "$$url" $(addprefix db/tests/,$(CITUS_SERIAL)) db/tests/citus/*.sql && \
	 echo "test-citus: $$(( $$(date +%s) - started )) s"

# The fast tier: pure logic, no services (driver/tests/unit), first, so a broken pure function fails in seconds.
test-fast: venv
	@$(BIN)/python -m pytest -q driver/tests/unit

# Debian's chromium and chromedriver, for the console's browser tests (installed when missing).
chromium:
	@bash scripts/services/chromium.sh >/dev/null

# Debian's fonts-wqy-microhei: invoice PDFs in Chinese (docs/customers.md; installed when missing).
fonts:
	@bash scripts/services/fonts.sh >/dev/null

# Debian's poppler-utils: pdftotext reads the invoice PDFs back in the tests (installed when missing).
poppler:
	@bash scripts/services/poppler.sh >/dev/null

# pytest in two passes: the suites on $(PYTEST_WORKERS) workers (pytest-xdist, a file per worker at a
# time, or a class: the money adversary's two halves; each worker has its own template databases,
# Redis databases and ports; the longest files first, driver/tests/conftest.py LONGEST_FIRST), then
# the tests marked `serial` (driver/tests/conftest.py SERIAL: timing-sensitive, or loading the machine) alone.
# The serial tests also marked `chaos` (the chaos run, the two failovers, the three-broker Kafka, the
# upgrade under load, the relay's broker restart: private servers on free ports, fixed fault phases
# and drains, no latency asserted) run one at a time in a lane of their own beside the parallel pass (test-py-chaos; the
# shared Redis's databases 16-31, which no parallel worker uses), not in the serial pass: ~4 minutes
# of a quiet host's serial pass, mostly waiting.
# test-py-parallel, test-py-chaos and test-py-serial are the passes on their own (make test runs the
# parallel pass and the chaos lane side by side after the pgTAP stages, the serial pass after everything).
# The console's browser tests leave a screenshot of each page in .cache/artifacts/console/.
PYTEST_WORKERS ?= 4
PYTEST_DIST := --dist loadscope --no-loadscope-reorder
# Exit status 5 is "no test selected" (PYTEST_ARGS naming a file without serial tests): not a failure.
PYTEST_PARALLEL = $(BIN)/python -m pytest --ignore=driver/tests/unit -n $(PYTEST_WORKERS) $(PYTEST_DIST) -m "not serial" \
	$(PYTEST_ARGS) || [ $$? = 5 ]
PYTEST_SERIAL = $(BIN)/python -m pytest --ignore=driver/tests/unit -p no:xdist -m "serial and not chaos" $(PYTEST_ARGS) || [ $$? = 5 ]
PYTEST_CHAOS = BILLING_TEST_REDIS_DBS=16-31 $(BIN)/python -m pytest --ignore=driver/tests/unit -p no:xdist \
	-m "serial and chaos" $(PYTEST_ARGS) || [ $$? = 5 ]
test-py: venv services chromium poppler fonts
	@started=$$(date +%s) && \
	 $(MAKE) --no-print-directory -j2 --output-sync=target test-py-parallel test-py-chaos && \
	 parallel=$$(( $$(date +%s) - started )) && \
	 $(MAKE) --no-print-directory test-py-serial && \
	 echo "test-py: $$(( $$(date +%s) - started )) s (parallel pass and chaos lane $$parallel s, serial pass $$(( $$(date +%s) - started - parallel )) s)"

test-py-parallel: venv services chromium poppler fonts
	@source $(SERVICES_ENV) && { $(PYTEST_PARALLEL); }

test-py-chaos: venv services
	@source $(SERVICES_ENV) && { $(PYTEST_CHAOS); }

test-py-serial: venv services chromium poppler fonts
	@source $(SERVICES_ENV) && { $(PYTEST_SERIAL); }

# The loop while developing: the fast tier, then a few quick suites of the HTTP API, the console, the
# roles and the schema on $(PYTEST_WORKERS) workers (about a minute). `make test` before a merge.
QUICK_SUITES := test_api.py test_webhooks.py test_console_http.py test_roles.py test_events_ops.py test_recorder.py \
	test_status.py test_sql_schema_drift.py test_outbound_webhooks.py
test-quick: venv services
	@started=$$(date +%s) && $(BIN)/python -m pytest -q driver/tests/unit && \
	 source $(SERVICES_ENV) && $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) $(PYTEST_DIST) -m "not serial" \
	   $(addprefix driver/tests/,$(QUICK_SUITES)) $(PYTEST_ARGS) && \
	 echo "test-quick: $$(( $$(date +%s) - started )) s"

# Each stage in turn (stopping at the first that fails), then the time of each. The stages joined by
# "+" run side by side (make -j, each one's output printed whole when it ends). deps first installs
# what the machine lacks (so no two stages run apt-get at once), audit the virtual environment they all
# use, services starts the loopback servers (test-sql and the pytest passes would start them twice at
# once). Then the unit tier and pgTAP on one PostgreSQL and on the Citus cluster, side by side (their
# own databases, one transaction per file); then pytest's parallel pass ($(PYTEST_WORKERS) workers, a
# database per test) and beside it the chaos lane (the chaos runs one at a time: mostly waiting, on
# servers of their own); last, alone, its serial pass (the timing-sensitive tests). The
# parallel pass could also run beside the pgTAP stages (the Makefile allows it: the stages' migrations
# share .cache/migrate.lock, citus.sh's start is locked), but every stage is CPU-bound on this 2-core
# machine: side by side they gained at most ~30 s and made every timeout of the parallel pass tighter.
TEST_STAGES := deps audit services test-fast+test-sql+test-citus test-py-parallel+test-py-chaos test-py-serial
STAGE_TIMES := $(CACHE)/stage-times
test:
	@mkdir -p $(CACHE) && : > $(STAGE_TIMES) && started=$$(date +%s) && for stage in $(TEST_STAGES); do \
	   jobs=$$(echo $${stage//+/ } | wc -w); \
	   group=$$(date +%s); \
	   $(MAKE) --no-print-directory -j$$jobs --output-sync=target $$(printf 'timed-%s ' $${stage//+/ }) || \
	     { echo "make test: $$stage failed"; cat $(STAGE_TIMES); exit 1; }; \
	   [ $$jobs = 1 ] || printf '  %-11s %5d s  (the %d above, side by side)\n' "" $$(( $$(date +%s) - group )) \
	     $$(echo $${stage//+/ } | wc -w) >> $(STAGE_TIMES); \
	 done; echo "make test: the time of each stage"; cat $(STAGE_TIMES); \
	 printf '  %-11s %5d s\n' total $$(( $$(date +%s) - started ))

# One stage, its time added to $(STAGE_TIMES) for make test's summary.
timed-%:
	@started=$$(date +%s) && $(MAKE) --no-print-directory $* && \
	 printf '  %-11s %5d s\n' $* $$(( $$(date +%s) - started )) >> $(STAGE_TIMES)

# The lock file: pinned, hashed, above every advisory floor of deploy/advisories.tsv. Offline; it
# says what it cannot know. `audit-online` asks pip-audit (needs the network).
audit: venv
	@$(BIN)/python scripts/audit_lock.py

audit-online: venv
	@$(BIN)/pip install -q "pip-audit>=2.7" && $(BIN)/pip-audit --strict --require-hashes --disable-pip -r requirements/runtime.lock

# Regenerate requirements/runtime.lock from pyproject.toml (needs the network).
lock: venv
	@$(BIN)/pip install -q "pip-tools>=7.4" && $(BIN)/pip-compile -q --generate-hashes --strip-extras --allow-unsafe \
	   --no-emit-find-links --no-emit-index-url --output-file requirements/runtime.lock pyproject.toml

demo: venv
	@pg=$$(bash scripts/services/postgres.sh) && kf=$$(bash scripts/services/kafka.sh) && \
	 export BILLING_DATABASE_URL=$${BILLING_DATABASE_URL:-$${pg%/*}/billing_demo} && \
	 export BILLING_KAFKA_BOOTSTRAP=$${BILLING_KAFKA_BOOTSTRAP:-$$kf} && \
	 $(BIN)/billing demo $(DEMO_ARGS)

bench-pdf: venv poppler
	@$(BIN)/python -m bench.pdf.run $(BENCH_ARGS)

bench-renewal: venv services
	@source $(SERVICES_ENV) && $(BIN)/python -m bench.renewal.run $(BENCH_ARGS)

bench-signup: venv services
	@source $(SERVICES_ENV) && $(BIN)/python -m bench.signup.run $(BENCH_ARGS)

# The operator's reads (console pages, search, MRR reports) on a generated database (bench/scale).
bench-scale: venv services
	@source $(SERVICES_ENV) && $(BIN)/python -m bench.scale.run $(BENCH_ARGS)

bench-relay: venv services
	@source $(SERVICES_ENV) && $(BIN)/python -m bench.relay.run $(BENCH_ARGS)

# The relay per shard group on Citus next to the single-node relay (bench/relay/citus.py, issue 32).
bench-relay-citus: venv services
	@source $(SERVICES_ENV) && bash scripts/services/citus.sh >/dev/null && \
	 $(BIN)/python -m bench.relay.citus $(BENCH_ARGS)

bench-retention: venv services
	@source $(SERVICES_ENV) && $(BIN)/python -m bench.retention.run $(BENCH_ARGS)

bench-usage: venv services
	@source $(SERVICES_ENV) && $(BIN)/python -m bench.usage.run $(BENCH_ARGS)

bench-usage-rating: venv services
	@source $(SERVICES_ENV) && $(BIN)/python -m bench.usage.rating $(BENCH_ARGS)

# The usage rating on Citus: per shard group beside one subscription at a time, copies of one database
bench-usage-rating-citus: venv
	@bash scripts/services/citus.sh >/dev/null && $(BIN)/python -m bench.usage.rating_citus $(BENCH_ARGS)

# Usage ingestion through Kafka and HTTP beside the baseline's and a naive consumer; current usage at 2M/20M events
bench-usage-ingest: venv services
	@source $(SERVICES_ENV) && $(BIN)/python -m bench.usage.ingest $(BENCH_ARGS)

bench-usage-reads: venv services
	@source $(SERVICES_ENV) && $(BIN)/python -m bench.usage.reads $(BENCH_ARGS)

# The ingestion statement alone (Kafka's and HTTP's calls, a batch of one) beside main's, same run
bench-usage-statement: venv services
	@source $(SERVICES_ENV) && $(BIN)/python -m bench.usage.statement $(BENCH_ARGS)

bench-charge: venv services
	@source $(SERVICES_ENV) && $(BIN)/python -m bench.charge.run $(BENCH_ARGS)

bench-first-of-month: venv services
	@source $(SERVICES_ENV) && $(BIN)/python -m bench.first_of_month.run $(BENCH_ARGS)

# Per-shard claims on the Citus cluster next to one PostgreSQL (bench/citus_claim, docs/scaling.md).
bench-citus: venv services
	@source $(SERVICES_ENV) && bash scripts/services/citus.sh >/dev/null && \
	 citus_url=$$(bash scripts/services/citus.sh createdb billing_bench_citus) && \
	 psql -q "$$BILLING_TEST_DATABASE_URL" -c "DROP DATABASE IF EXISTS billing_bench_single WITH (FORCE)" -c "CREATE DATABASE billing_bench_single" && \
	 $(BIN)/python -m bench.citus_claim.run --citus-url "$$citus_url" --single-url "$${BILLING_TEST_DATABASE_URL%/*}/billing_bench_single" $(BENCH_ARGS)

# The engine's per-shard claims (db/functions/16_shards.sql, 41_renewal_rows.sql, 51_charge_claims.sql, 58_refund_claims.sql) on the cluster and on one PostgreSQL.
bench-citus-engine: venv services
	@source $(SERVICES_ENV) && bash scripts/services/citus.sh >/dev/null && \
	 $(BIN)/python -m bench.citus_claim.engine --single-url "$$BILLING_TEST_DATABASE_URL" $(BENCH_ARGS)

bench-http: venv
	@$(BIN)/python -m bench.http_client.run $(BENCH_ARGS)

clean: services-stop
	rm -rf $(CACHE) $(VENV)

# The OpenAPI document (docs/openapi.json) from billing.api.openapi; test_api_v1 fails when it is stale.
openapi: venv
	@$(BIN)/python -c "from billing.api.openapi import write; write()"

# The Python client (clients/python/) generated from docs/openapi.json by openapi-python-client, run from
# a tool venv of its own (never the project's); unit/test_python_client.py fails when it is stale.
OPENAPI_CLIENT_VERSION ?= 0.26.2
client: openapi
	@test -x $(CACHE)/openapi-client-venv/bin/openapi-python-client || \
	 { python3 -m venv $(CACHE)/openapi-client-venv && \
	   $(CACHE)/openapi-client-venv/bin/pip install -q "openapi-python-client==$(OPENAPI_CLIENT_VERSION)"; }
	@$(BIN)/python clients/generate.py $(CACHE)/openapi-client-venv/bin/openapi-python-client

# Regenerate db/schema.snapshot (the drift test compares a migrated database with it).
schema-snapshot: venv services
	@source $(SERVICES_ENV) && base=$${BILLING_TEST_DATABASE_URL%/*} && url="$$base/billing_snapshot" && \
	 psql -q "$$BILLING_TEST_DATABASE_URL" -c "DROP DATABASE IF EXISTS billing_snapshot WITH (FORCE)" -c "CREATE DATABASE billing_snapshot" && \
	 $(BIN)/billing --log-level WARNING db migrate --simulation --database-url "$$url" && \
	 psql -XAtq -d "$$url" -f db/snapshot.sql > db/schema.snapshot && \
	 psql -q "$$BILLING_TEST_DATABASE_URL" -c "DROP DATABASE billing_snapshot" && echo "db/schema.snapshot written"
