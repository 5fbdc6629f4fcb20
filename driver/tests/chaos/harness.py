"""Plumbing of the chaos run: private services, the billing processes, and the faults.

Everything here is private to one run: PostgreSQL, Redis and Kafka are started by the project's
own service scripts under a throwaway state directory and on free loopback ports, so killing and
restarting them disturbs nobody else. Every process the run starts is tracked by its pid and is
only ever stopped by that pid.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from billing.config import REPO_ROOT

SCRIPTS = REPO_ROOT / "scripts" / "services"
PGBIN = Path(os.environ.get("PGBIN", "/usr/lib/postgresql/15/bin"))
BILLING = str(Path(sys.executable).with_name("billing"))


def free_ports(n: int) -> list[int]:
    """`n` distinct loopback ports that were free a moment ago."""
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def wait_port(port: int, seconds: float, host: str = "127.0.0.1") -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.3):
            return True
    except OSError:
        return False


class PrivateServices:
    """PostgreSQL, Redis and Kafka of this run only, through scripts/services/*.sh."""

    def __init__(self, base: Path | None = None) -> None:
        self.base = Path(base or tempfile.mkdtemp(prefix="billing-chaos-"))
        self.base.mkdir(parents=True, exist_ok=True)
        # PostgreSQL runs as the postgres user when we are root: it must be able to reach its dir.
        os.chmod(self.base, 0o755)
        self.pg_port, self.redis_port, self.kafka_port, self.kafka_controller_port = free_ports(4)
        self.pg_url = f"postgresql://postgres@127.0.0.1:{self.pg_port}/postgres"
        self.redis_url = f"redis://127.0.0.1:{self.redis_port}/0"
        self.kafka_bootstrap = f"127.0.0.1:{self.kafka_port}"

    def database_url(self, name: str) -> str:
        """The URL of database `name` on this run's PostgreSQL."""
        return self.pg_url.rsplit("/", 1)[0] + "/" + name

    # -- the scripts ------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("BILLING_TEST_")}
        env.update(
            BILLING_CACHE_DIR=str(self.base),
            BILLING_PG_PORT=str(self.pg_port),
            BILLING_REDIS_PORT=str(self.redis_port),
            BILLING_KAFKA_PORT=str(self.kafka_port),
            BILLING_KAFKA_CONTROLLER_PORT=str(self.kafka_controller_port),
        )
        libs = REPO_ROOT / ".cache" / "kafka" / "libs"
        if (libs / ".complete").exists():
            env["BILLING_KAFKA_LIBS"] = str(libs)
        return env

    def _script(self, name: str, *args: str, timeout: float = 240) -> str:
        out = subprocess.run(
            ["bash", str(SCRIPTS / f"{name}.sh"), *args], env=self.env(), capture_output=True, text=True,
            timeout=timeout,
        )
        if out.returncode != 0:
            raise RuntimeError(f"{name}.sh {' '.join(args)} failed ({out.returncode}): {out.stderr[-2000:]}")
        lines = out.stdout.strip().splitlines()
        return lines[-1] if lines else ""

    def start_postgres(self) -> str:
        url = self._script("postgres")
        assert url == self.pg_url, f"postgres.sh served {url}, expected {self.pg_url}"
        return url

    def start_redis(self) -> str:
        url = self._script("redis")
        assert url == self.redis_url, url
        return url

    def stop_redis(self) -> None:
        self._script("redis", "stop")
        deadline = time.monotonic() + 10
        while port_open(self.redis_port) and time.monotonic() < deadline:
            time.sleep(0.05)

    def start_kafka(self) -> str:
        boot = self._script("kafka")
        assert boot == self.kafka_bootstrap, boot
        return boot

    def stop_kafka(self) -> None:
        self._script("kafka", "stop")

    def restart_kafka(self) -> None:
        self.stop_kafka()
        self.start_kafka()

    def _pg_ctl(self, *args: str) -> None:
        cmd = [str(PGBIN / "pg_ctl"), "-D", str(self.base / "postgres"), *args]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def restart_postgres(self) -> None:
        """`pg_ctl restart -m fast`: every session is cut, the server comes back on the same port."""
        self._pg_ctl("-m", "fast", "-w", "-t", "60", "-l", str(self.base / "postgres" / "server.log"), "restart")
        if not wait_port(self.pg_port, 30):
            raise RuntimeError("postgres did not come back after the restart")

    def start_all(self) -> None:
        # Kafka's JVM is the slow one: start it while PostgreSQL and Redis come up.
        errors: list[BaseException] = []

        def _kafka() -> None:
            try:
                self.start_kafka()
            except BaseException as exc:  # noqa: BLE001 - reported by the caller
                errors.append(exc)

        kafka = threading.Thread(target=_kafka, daemon=True)
        kafka.start()
        try:
            self.start_postgres()
            self.start_redis()
        finally:  # a failure here must not leave Kafka starting behind the caller's teardown
            kafka.join(timeout=240)
        if errors:
            raise errors[0]

    def stop_all(self) -> None:
        for name in ("kafka", "redis", "postgres"):
            try:
                self._script(name, "stop", timeout=60)
            except Exception:  # noqa: BLE001 - best effort at teardown
                pass

    def remove(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


class HaServices(PrivateServices):
    """PrivateServices whose PostgreSQL is a primary and a streaming standby (postgres-ha.sh,
    `mode` sync or async), reached through one multi-host URL with target_session_attrs=read-write."""

    def __init__(self, mode: str = "sync", base: Path | None = None) -> None:
        super().__init__(base)
        self.mode = mode
        self.pg_standby_port, self.pg_spare_port = free_ports(2)
        self.hosts = f"127.0.0.1:{self.pg_port},127.0.0.1:{self.pg_standby_port}"
        self.pg_url = self.database_url("postgres")
        self.primary, self.standby = "node1", "node2"
        self.ports = {"node1": self.pg_port, "node2": self.pg_standby_port}

    def database_url(self, name: str) -> str:
        return f"postgresql://postgres@{self.hosts}/{name}?target_session_attrs=read-write"

    def node_url(self, node: str, name: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.ports[node]}/{name}"

    def env(self) -> dict[str, str]:
        env = super().env()
        env.update(BILLING_PG_HA_PORT=str(self.pg_port), BILLING_PG_HA_STANDBY_PORT=str(self.pg_standby_port),
                   BILLING_PG_HA_MODE=self.mode)
        return env

    def start_postgres(self) -> str:
        url = self._script("postgres-ha")
        assert url == self.pg_url, f"postgres-ha.sh served {url}, expected {self.pg_url}"
        return url

    def stall_replication(self) -> int:
        """SIGSTOP the primary's walsender (a network stall): the primary runs on, the standby
        receives nothing more. The pid stopped (it dies with the primary)."""
        import psycopg

        with psycopg.connect(self.node_url(self.primary), autocommit=True) as conn:
            pid = conn.execute("SELECT pid FROM pg_stat_replication WHERE application_name = %s",
                               (self.standby,)).fetchone()[0]
        os.kill(pid, signal.SIGSTOP)
        return pid

    def kill_primary(self) -> None:
        """SIGKILL the primary's postmaster and every backend: the machine is lost."""
        self._script("postgres-ha", "kill", self.primary)

    def promote_standby(self, hold: bool = False) -> None:
        """As Patroni would: promote the standby; it becomes the primary (the old one stays down).
        `hold`: read-only until `open_primary` (the writers keep away meanwhile)."""
        self._script("postgres-ha", "promote", self.standby, *(["--hold"] if hold else []))
        self.primary, self.standby = self.standby, self.primary

    def open_primary(self) -> None:
        self._script("postgres-ha", "open", self.primary)

    def read_lost_primary(self, node: str, database: str, queries: list[str]) -> list[list[tuple]]:
        """Start the dead node's data directory alone on a spare port (it recovers what it had
        committed), run `queries`, stop it. Only after the run: it is outside the URL's hosts."""
        import psycopg

        data = self.base / "pg-ha" / node
        (data / "standby.signal").unlink(missing_ok=True)
        as_pg = (lambda cmd: ["runuser", "-u", "postgres", "--", *cmd]) if os.geteuid() == 0 else (lambda cmd: cmd)
        pg_ctl = [str(PGBIN / "pg_ctl"), "-D", str(data)]
        start = as_pg([*pg_ctl, "-l", str(self.base / "pg-ha" / f"{node}.lost.log"), "-o",
                       f"-p {self.pg_spare_port} -c synchronous_standby_names=''", "-w", "-t", "60", "start"])
        for attempt in range(20):  # the killed backends may still be leaving the shared memory
            if subprocess.run(start, capture_output=True, timeout=120).returncode == 0:
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"the lost primary's data directory did not start: see {node}.lost.log")
        try:
            with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.pg_spare_port}/{database}",
                                 autocommit=True) as conn:
                return [conn.execute(q).fetchall() for q in queries]
        finally:
            subprocess.run(as_pg([*pg_ctl, "-m", "fast", "-w", "stop"]), capture_output=True, timeout=60)

    def stop_all(self) -> None:
        for name in ("kafka", "redis", "postgres-ha"):
            try:
                self._script(name, "stop", timeout=60)
            except Exception:  # noqa: BLE001 - best effort at teardown
                pass


@dataclass
class Proc:
    """One process of the system under test; only ever signalled by its own pid."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_dir: Path
    popen: subprocess.Popen | None = None
    starts: int = 0
    kills: int = 0
    logs: list[Path] = field(default_factory=list)

    def start(self) -> None:
        assert not self.alive(), f"{self.name} is already running"
        self.starts += 1
        path = self.log_dir / f"{self.name}.{self.starts}.log"
        self.logs.append(path)
        with open(path, "ab") as log:
            self.popen = subprocess.Popen(
                self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=str(REPO_ROOT),
            )

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def kill(self) -> bool:
        """SIGKILL; True when it was running."""
        if not self.alive():
            return False
        os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)
        self.kills += 1
        return True

    def stop(self, timeout: float = 20) -> int | None:
        """SIGTERM, then SIGKILL past `timeout`; the exit code."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            try:
                os.kill(self.popen.pid, signal.SIGTERM)
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)
        return self.popen.returncode

    def tail(self, lines: int = 40) -> str:
        if not self.logs:
            return ""
        try:
            text = self.logs[-1].read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def grep_logs(self, needle: str) -> list[str]:
        hits = []
        for path in self.logs:
            try:
                hits += [line for line in path.read_text(errors="replace").splitlines() if needle in line]
            except OSError:
                pass
        return hits


@dataclass
class FaultLog:
    """What the run did to the system, for the figures."""

    counts: dict[str, int] = field(default_factory=dict)
    timeline: list[tuple[float, str]] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, detail: str = "", *, injected: bool = True) -> None:
        """Put an event on the timeline; `injected` ones (our faults) are counted in the figures."""
        with self.lock:
            if injected:
                self.counts[kind] = self.counts.get(kind, 0) + 1
            self.timeline.append((round(time.monotonic() - self.t0, 1), f"{kind} {detail}".strip()))


# The relay's leadership lock (billing.worker.relay.RELAY_LOCK_KEY): pg_locks shows it as objid.
RELAY_LOCK_OBJID = 0x62696C72

# Each worker runs with PGAPPNAME=chaos-<name>, so pg_stat_activity tells which process a backend serves.
_IN_CLAIM = """
SELECT application_name FROM pg_stat_activity
 WHERE state = 'active' AND application_name LIKE 'chaos-worker-%%'
   AND (query LIKE '%%claim_charges%%' OR query LIKE '%%create_due_invoices%%' OR query LIKE '%%claim_outbox_events%%')
"""
_RELAY_LEADER = """
SELECT a.application_name,
       (SELECT count(*) FROM billing.outbox_event WHERE status = 'PENDING' AND lease_until > now()) AS leased
  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.objid = %s AND l.granted AND a.application_name LIKE 'chaos-worker-%%'
"""
_CHARGING = """
SELECT a.worker FROM billing.payment_attempt a JOIN billing.invoice i ON i.id = a.invoice_id
 WHERE i.status = 'OPEN' AND i.next_attempt_at > now() AND a.attempt_number = i.attempt_count
   AND a.result_claim IS DISTINCT FROM a.claim_count
 GROUP BY a.worker
"""


class WorkerKiller(threading.Thread):
    """SIGKILLs a worker every `every` seconds and restarts it `down` seconds later.

    Each round picks a moment: `mid-claim` (its backend is running claim_charges,
    create_due_invoices or claim_outbox_events right now), `mid-charge` (it holds leased
    invoices whose gateway call has no recorded result yet), `mid-publish` (it is the relay
    leader with events claimed and not yet marked), or `random`. When the moment does not come
    within a few seconds, a random worker is killed instead (counted as random).
    """

    MODES = ("random", "mid-claim", "mid-charge", "mid-publish")

    def __init__(self, workers: list[Proc], faults: FaultLog, rng: random.Random, *, db_url: str | None = None,
                 every: tuple[float, float] = (0.8, 2.5), down: tuple[float, float] = (0.2, 1.5)) -> None:
        super().__init__(daemon=True, name="worker-killer")
        self.workers, self.faults, self.rng, self.every, self.down = workers, faults, rng, every, down
        self.db_url = db_url
        self.stop_event = threading.Event()
        self.errors: list[BaseException] = []
        self.by_mode: dict[str, int] = {}
        self._conn = None

    def _query(self, query: str, params=None) -> list[tuple]:
        import psycopg

        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.db_url, autocommit=True, connect_timeout=2)
            return self._conn.execute(query, params).fetchall()
        except psycopg.Error:
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            return []

    def _by_app(self, app: str) -> Proc | None:
        return next((w for w in self.workers if f"chaos-{w.name}" == app and w.alive()), None)

    def _by_worker_id(self, worker_id: str) -> Proc | None:
        pid = worker_id.rsplit(":", 1)[-1]
        return next((w for w in self.workers if str(w.pid) == pid and w.alive()), None)

    def _find(self, mode: str, seconds: float = 3.0) -> Proc | None:
        if self.db_url is None or mode == "random":
            return None
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.stop_event.is_set():
            if mode == "mid-claim":
                rows = self._query(_IN_CLAIM)
                hits = [w for w in (self._by_app(r[0]) for r in rows) if w]
            elif mode == "mid-publish":
                rows = self._query(_RELAY_LEADER, (RELAY_LOCK_OBJID,))
                hits = [w for w in (self._by_app(r[0]) for r in rows if r[1] > 0) if w]
            else:
                rows = self._query(_CHARGING)
                hits = [w for w in (self._by_worker_id(r[0]) for r in rows) if w]
            if hits:
                return self.rng.choice(hits)
            time.sleep(0.01 if mode == "mid-claim" else 0.05)
        return None

    def run(self) -> None:
        try:
            while not self.stop_event.wait(self.rng.uniform(*self.every)):
                alive = [w for w in self.workers if w.alive()]
                if not alive:
                    continue
                mode = self.rng.choice(self.MODES)
                victim = self._find(mode)
                if victim is None:
                    mode, victim = "random", self.rng.choice(alive)
                if victim.kill():
                    self.by_mode[mode] = self.by_mode.get(mode, 0) + 1
                    self.faults.add("worker SIGKILL", f"{victim.name} {mode}")
                if self.stop_event.wait(self.rng.uniform(*self.down)):
                    break
                victim.start()
        except BaseException as exc:  # noqa: BLE001 - surfaced by the test
            self.errors.append(exc)
        finally:
            for w in self.workers:
                if not w.alive():
                    w.start()
            if self._conn is not None:
                self._conn.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=30)
