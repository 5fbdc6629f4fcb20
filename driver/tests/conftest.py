"""Fixtures on real services.

Where the services come from, in order: the URLs in the environment (`BILLING_TEST_DATABASE_URL`,
`BILLING_TEST_REDIS_URL`, `BILLING_TEST_KAFKA_BOOTSTRAP`, which `make test` sets from the service
scripts); testcontainers when a Docker engine answers; else the project's own service scripts,
which start PostgreSQL, Redis and Kafka on loopback under .cache/.

Each test gets a throwaway database cloned from a template migrated once per session, a Redis
database of its own (flushed), and a Kafka topic of its own.

In parallel (pytest-xdist, `make test-py`): each worker is its own session, so its own template
database (named after its pid), its own share of the Redis databases, and servers on free ports;
the Citus cluster is started by the first worker that needs it (a file lock). What cannot share the
machine (`SERIAL` below: timing-sensitive tests, the chaos run) is marked `serial`: the chaos runs
among them (also marked `chaos`: private PostgreSQL, Redis and Kafka of their own, no latency
asserted) run one at a time in a lane of their own beside the parallel pass (`make test-py-chaos`),
the others in a second pass, alone.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from billing.config import REPO_ROOT
from billing.migrate import migrate

SCRIPTS = REPO_ROOT / "scripts" / "services"

# Test files (or single tests) that measure time or load the machine: they run in the serial pass
# of `make test-py`, after the parallel one, never beside other tests (but the chaos runs: below).
# A test is serial only if it asserts the wall clock (a latency, a rate, a deadline of its own) or
# takes both cores; a bounded wait for a condition is not a reason (the parallel pass is the place
# for those). Pure checks of a serial file go to the
# parallel pass: list the file's timing tests one by one, as test_gateway_sim.py's below.
SERIAL = (
    # Several processes and service restarts for minutes; failover and the upgrade also bound
    # the time each part takes to come back (generously: 30 s for a failover that takes 4-9 at load
    # 10). Marked `chaos` too, they run one after another in make test's chaos lane, beside the
    # parallel pass (their own servers on free ports; the upgrade its own database and, in that lane,
    # Redis databases none of the parallel workers use: BILLING_TEST_REDIS_DBS), not in the serial
    # pass: most of their minutes are fault phases and drains of fixed length, waiting, not CPU.
    # chaos/test_rejoin.py and chaos/test_restore.py (a
    # private PostgreSQL pair and a pgBackRest drill, each a few seconds, waits bounded generously,
    # no time asserted) run in the parallel pass.
    "chaos/test_chaos.py",
    "chaos/test_failover.py",
    "chaos/test_kafka_cluster.py",
    "chaos/test_upgrade.py",
    "test_limiter.py",  # rates measured against the wall clock
    # Latencies and rates of the simulator (its other tests, pure logic over loopback, are parallel).
    "test_gateway_sim.py::test_strict_sliding_window_refuses_and_counts",
    "test_gateway_sim.py::test_observe_mode_accepts_and_counts_the_excess",
    "test_gateway_sim.py::test_timeout_after_charging_then_the_replay_tells_the_truth",
    "test_gateway_sim.py::test_latency_and_bad_requests",
    "test_gateway_sim.py::test_extension_points_decide_and_gate_and_the_accepted_calls_are_readable",
    "test_gateway_sim.py::test_arrivals_are_stamped_by_the_kernel_not_by_a_stalled_loop",
    "test_gateway_sim.py::test_the_gate_runs_right_before_the_bytes_and_a_closed_gate_sends_nothing",
    "test_api_security.py::test_slow_and_half_sent_requests_are_closed_within_the_header_timeout",
    "test_charging.py::test_sigkill_mid_charge_charges_nothing_twice_and_claims_come_back",
    # Two worker processes, one SIGKILLed, then a 240 s wait for every invoice PAID: under load (make
    # test beside other work, at f8cf591 and since) ~125 invoices charged at the gateway were left
    # OPEN with their next attempt ~11 minutes on, past the wait (14 s on a quiet machine).
    "test_shard_workers.py::test_a_worker_killed_mid_batch_on_a_single_postgresql_loses_nothing",
    # The same cause (a gateway call past the worker's timeout under load is an UNKNOWN, asked
    # again 15 minutes later): 28 INITIAL invoices left OPEN in the parallel pass once.
    "test_shard_workers.py::test_two_workers_renew_and_charge_on_citus",
    "test_relay.py::test_standby_takes_over_when_the_holder_dies",
    # A private Kafka broker stopped and started again: marked `chaos`, it runs in the chaos lane.
    "test_relay.py::test_survives_a_broker_restart_without_losing_an_event",
    # They count the blocks a claim reads once vacuum has run: another session's snapshot keeps
    # the dead rows alive.
    "test_relay.py::test_claim_skips_dead_index_entries_without_reading_their_rows",
    "test_relay.py::test_webhook_claim_skips_dead_index_entries_without_reading_their_rows",
    "test_recorder.py::test_results_linger_into_one_call_and_close_cuts_the_wait_short",  # 20 ms apart
    # Latencies asserted against a bound: beside three other workers on two cores they measure the load.
    "test_doors.py::test_expensive_requests_of_one_key_do_not_starve_another",
    "test_usage.py::test_current_usage_reads_indexes_not_scans",
    # How long readers wait behind a migration's lock attempts (wall clock).
    "test_migrate.py::test_a_migration_behind_a_long_transaction_gives_way_to_the_workers_then_retries",
)


# The parallel pass's longest files (make test's --durations), longest first. make test-py hands the
# files (classes: --dist loadscope) to the workers in collection order (--no-loadscope-reorder), so
# these start first and no long file starts last to run alone at the end while the other workers
# idle (longest processing time first). The money adversary's two halves are two classes: two workers.
LONGEST_FIRST = (
    # make test at f8cf591 under load (~20; --durations, each file's sum; its Citus setups less the
    # migrations the template saves now): adversary 1,100 s, shard_workers ~530, model 414, fuzz
    # 323, relay_citus ~230, invoices 171, api_security 169, demo 155, api_citus ~100 + its copies,
    # notifications 126, wheel 77, usage 74, pgtap_events 70, import 70, api 62, console browser 60.
    "test_money_adversary.py",
    "test_shard_workers.py",
    "test_model_properties.py",
    "test_fuzz_api.py",
    "test_relay_citus.py",
    "test_invoices.py",
    "test_api_security.py",
    "test_demo.py",
    "test_api_citus.py",
    "test_notifications.py",
    "test_wheel.py",
    "test_usage.py",
    "test_pgtap_events.py",
    "test_import.py",
    "test_api.py",
    "test_console_browser.py",
    "test_least_privilege.py",
    "test_portal_browser.py",
)


def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).parent
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    for item in items:
        rel = Path(str(item.fspath)).relative_to(tests).as_posix() if str(item.fspath).startswith(str(tests)) else ""
        name = f"{rel}::{item.name.split('[')[0]}"
        if any(name.startswith(s) if "::" in s else rel.startswith(s) for s in SERIAL):
            item.add_marker(pytest.mark.serial)
    # Stable: each file's tests keep their order; the same order on every xdist worker.
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(rank)))


@contextlib.contextmanager
def _exclusive(name: str):
    """A lock file under .cache/ held by one pytest process (xdist worker) at a time: the Citus start,
    and migrations (they create and grant the cluster-wide roles and, on Citus, propagate to every
    node: two at once fail with "tuple concurrently updated")."""
    import fcntl

    lock = REPO_ROOT / ".cache" / f"{name}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _xdist_worker() -> tuple[int, int]:
    """(this worker's index, the number of workers): (0, 1) without xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker.removeprefix("gw") or 0), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def _docker_answers() -> bool:
    if os.environ.get("BILLING_TEST_NO_DOCKER") or not shutil.which("docker"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _script(name: str) -> str:
    out = subprocess.run(["bash", str(SCRIPTS / f"{name}.sh")], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


class _Services:
    """Resolves each service once per session, the first time a test needs it."""

    def __init__(self) -> None:
        self._containers: list = []
        self._docker: bool | None = None
        self._cache: dict[str, str] = {}

    def docker(self) -> bool:
        if self._docker is None:
            self._docker = _docker_answers()
        return self._docker

    def _get(self, key: str, env: str, script: str, container) -> str:
        if key not in self._cache:
            if os.environ.get(env):
                self._cache[key] = os.environ[env]
            elif self.docker():
                self._cache[key] = container()
            else:
                self._cache[key] = _script(script)
        return self._cache[key]

    def postgres(self) -> str:
        def container():
            from testcontainers.postgres import PostgresContainer

            c = PostgresContainer("postgres:15", driver=None).start()
            self._containers.append(c)
            return c.get_connection_url()

        return self._get("pg", "BILLING_TEST_DATABASE_URL", "postgres", container)

    def redis(self) -> str:
        def container():
            from testcontainers.redis import RedisContainer

            c = RedisContainer("redis:7").start()
            self._containers.append(c)
            return f"redis://{c.get_container_host_ip()}:{c.get_exposed_port(6379)}/0"

        return self._get("redis", "BILLING_TEST_REDIS_URL", "redis", container)

    def kafka(self) -> str:
        def container():
            from testcontainers.kafka import KafkaContainer

            c = KafkaContainer("confluentinc/cp-kafka:7.6.0").with_kraft().start()
            self._containers.append(c)
            return c.get_bootstrap_server()

        return self._get("kafka", "BILLING_TEST_KAFKA_BOOTSTRAP", "kafka", container)

    def stripe_mock(self) -> str:
        """stripe-mock (no container: the services script installs and starts it on loopback)."""
        if "stripe-mock" not in self._cache:
            self._cache["stripe-mock"] = os.environ.get("BILLING_TEST_STRIPE_MOCK_URL") or _script("stripe-mock")
        return self._cache["stripe-mock"]

    def close(self) -> None:
        for c in self._containers:
            c.stop()


@pytest.fixture(scope="session")
def services():
    s = _Services()
    yield s
    s.close()


def url_for_db(server_url: str, dbname: str) -> str:
    """The same server URL pointing at another database."""
    info = psycopg.conninfo.conninfo_to_dict(server_url)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**info)


@pytest.fixture(scope="session")
def pg_server_url(services) -> str:
    """A superuser URL of the PostgreSQL server (its maintenance database)."""
    return services.postgres()


@functools.cache
def migration_digest() -> str:
    """What a migrated database is made of: every file of db/ but its tests, and the code that
    applies them (migrate, citus, roles). The templates below are named after it, so that every
    pytest session of one tree (make test's parallel pass, its four workers, then its serial pass)
    migrates once, and a change to any of these files makes a new template."""
    digest = hashlib.sha256()
    db_dir = REPO_ROOT / "db"
    files = sorted(p for p in db_dir.rglob("*") if p.is_file() and p.relative_to(db_dir).parts[0] != "tests")
    files += [REPO_ROOT / "driver" / "billing" / f"{name}.py" for name in ("migrate", "citus", "roles")]
    for path in files:
        digest.update(path.relative_to(REPO_ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


@pytest.fixture(scope="session")
def migrated_template(pg_server_url) -> str:
    """A database migrated from db/schema and db/functions; tests clone it. Named after
    `migration_digest()` and kept after the session: the next session of the same tree (another
    xdist worker, the serial pass, the next run) clones it without migrating again. It is ready once
    it refuses connections (the last step of its making); older digests' templates are dropped
    when a new one is made (one still being copied from is left for the next time)."""
    name = f"billing_tpl_{migration_digest()}"
    with _exclusive("template"), psycopg.connect(pg_server_url, autocommit=True) as conn:
        templates = dict(conn.execute("SELECT datname, datallowconn FROM pg_catalog.pg_database "
                                      "WHERE datname LIKE 'billing\\_tpl\\_%'").fetchall())
        if templates.get(name) is not False:
            for old in templates:  # an older tree's, or this one's left half made
                try:
                    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}{}").format(
                        sql.Identifier(old), sql.SQL(" WITH (FORCE)" if old == name else "")))
                except psycopg.Error:
                    pass  # in use by a session of another tree: dropped by a later one
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            with _exclusive("migrate"):
                migrate(url_for_db(pg_server_url, name), REPO_ROOT / "db", simulation=True)
            conn.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(sql.Identifier(name)))
            conn.execute("SELECT count(pg_catalog.pg_terminate_backend(pid)) FROM pg_catalog.pg_stat_activity "
                         "WHERE datname = %s", (name,))
    return name


@pytest.fixture
def db_url(pg_server_url, migrated_template) -> str:
    """A throwaway migrated database of this test's own (superuser URL)."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(migrated_template))
        )
    url = url_for_db(pg_server_url, name)
    yield url
    # Every event the test produced must match its schema in docs/events (the envelope and the
    # data its dataschema names); a test that broke an event fails here, in its teardown.
    problems = _invalid_events(url)
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    if problems:
        pytest.fail("events that do not match their schema (docs/events):\n  " + "\n  ".join(problems))


@pytest.fixture(scope="session")
def citus_server_url() -> str:
    """The coordinator of the three-node Citus cluster on loopback (scripts/services/citus.sh builds
    Citus once, cached, and starts a coordinator and two workers; `BILLING_TEST_CITUS_URL` names a
    cluster of your own instead: its coordinator's maintenance database, the workers reachable with
    the same user)."""
    if os.environ.get("BILLING_TEST_CITUS_URL"):
        return os.environ["BILLING_TEST_CITUS_URL"]
    with _exclusive("citus-start"):  # parallel workers would otherwise race to start the same nodes
        return _script("citus")


@pytest.fixture(scope="session")
def citus_template(citus_server_url) -> str:
    """A Citus database migrated with `--citus`, then made a template on every node
    (scripts/services/citus.sh templatedb): the tests' databases are its copies. Named after
    `migration_digest()` and kept after the session, as the single-node template: make test's
    parallel pass makes it once for its workers, its serial pass and the next run copy it. An older
    digest's template is dropped when a new one is made."""
    if os.environ.get("BILLING_TEST_CITUS_URL"):
        raise pytest.UsageError("citus_db_url makes its databases with scripts/services/citus.sh createdb")
    name = f"ctpl_{migration_digest()}"
    with _exclusive("citus-template"):
        with psycopg.connect(citus_server_url, autocommit=True) as conn:
            # A template is ready once it refuses connections (templatedb's last step).
            templates = dict(conn.execute("SELECT datname, datallowconn FROM pg_catalog.pg_database "
                                          "WHERE datname LIKE 'ctpl\\_%'").fetchall())
        if templates.get(name) is not False:
            for old in templates:  # an older tree's or run's, or this one's left half made
                _citus_sh("dropdb", old, check=False)
            _citus_sh("createdb", name)
            with _exclusive("migrate"):
                migrate(url_for_db(citus_server_url, name), REPO_ROOT / "db", simulation=True, citus=True)
            _citus_sh("templatedb", name)
    return name


def _citus_sh(*args: str, check: bool = True) -> str:
    out = subprocess.run(["bash", str(SCRIPTS / "citus.sh"), *args], check=check, capture_output=True, text=True)
    return out.stdout.strip()


@pytest.fixture
def citus_db_url(citus_server_url, citus_template) -> str:
    """A throwaway migrated database on every node of the Citus cluster (superuser URL of the
    coordinator): a copy of the session's migrated template made on each node (a Citus database
    cannot be cloned on one node alone: the workers hold the shards), a few seconds instead of a
    migration each."""
    name = f"c_{uuid.uuid4().hex[:12]}"
    _citus_sh("clonedb", name, citus_template)
    url = url_for_db(citus_server_url, name)
    yield url
    problems = _invalid_events(url)
    _citus_sh("dropdb", name, check=False)
    if problems:
        pytest.fail("events that do not match their schema (docs/events):\n  " + "\n  ".join(problems))


def _invalid_events(url: str) -> list[str]:
    from billing.events.schemas import catalogue

    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            rows = conn.execute("SELECT payload::text FROM billing.outbox_event ORDER BY id").fetchall()
    except psycopg.Error:
        return []  # a test that dropped or broke its database on purpose has nothing to check
    return catalogue().check_all(row[0] for row in rows)[1]


def _redis_db_range() -> range:
    """The shared Redis's databases this session deals out: 1..15, or `BILLING_TEST_REDIS_DBS` ("16-31":
    make test's chaos lane, which runs beside the parallel pass, takes databases none of its workers use;
    redis.sh starts the server with 64)."""
    first, _, last = os.environ.get("BILLING_TEST_REDIS_DBS", "1-15").partition("-")
    return range(int(first), int(last or first) + 1)


# The session's Redis databases, dealt out among the xdist workers (each cycles through its own).
_redis_dbs = itertools.cycle([db for db in _redis_db_range() if db % _xdist_worker()[1] == _xdist_worker()[0]]
                             or [_redis_db_range()[_xdist_worker()[0] % len(_redis_db_range())]])


@pytest.fixture
def redis_url(services) -> str:
    """A Redis database of this test's own, empty at the start."""
    import redis

    base = services.redis().rsplit("/", 1)[0]
    url = f"{base}/{next(_redis_dbs)}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    try:
        client.flushdb()
    except redis.ConnectionError:
        pass  # a test may have stopped Redis on purpose
    client.close()


@pytest.fixture(scope="session")
def stripe_mock_url(services) -> str:
    """Stripe's own mock server (validates every request against Stripe's OpenAPI description)."""
    return services.stripe_mock()


@pytest.fixture
def stripe_fake(stripe_mock_url):
    """The Stripe fake (stripe-mock behind it) on an event loop of its own thread: the served app
    runs in another thread (or loop) and calls it over HTTP (test_portal_http, test_customer_session_routes)."""
    import asyncio
    import threading

    from .stripe_fake import StripeFake

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    fake = StripeFake(stripe_mock_url)
    asyncio.run_coroutine_threadsafe(fake.start(), loop).result(30)
    yield fake
    asyncio.run_coroutine_threadsafe(fake.close(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


@pytest.fixture(scope="session")
def kafka_bootstrap(services) -> str:
    return services.kafka()


@pytest.fixture
def kafka_topic(kafka_bootstrap) -> str:
    """A Kafka topic of this test's own (3 partitions), created before the test."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"test.{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=3, replication_factor=1)])
    futures[name].result(timeout=60)
    yield name
    try:
        admin.delete_topics([name], operation_timeout=10)
    except Exception:  # noqa: BLE001 - cleanup is best effort; the broker may be down on purpose
        pass


def create_test_key(db_url: str, *scopes: str, name: str = "test") -> str:
    """A real API key in this database (default scope admin); the key itself."""
    from billing.api_keys import create_key

    return create_key(db_url, name, list(scopes or ("admin",)), actor="test").key
