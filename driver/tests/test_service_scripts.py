"""The service scripts (scripts/services/*.sh) on a fresh cache of their own, on free ports.

They write only under their cache folder, never into the directory they are run from (the
checkout's root under make): Kafka's log4j config once made a folder literally named
`${sys:kafka.logs.dir}` there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from billing.config import REPO_ROOT

from .chaos.harness import PrivateServices

SCRIPTS = REPO_ROOT / "scripts" / "services"
KAFKA_LIBS = Path(os.environ.get("BILLING_KAFKA_LIBS", REPO_ROOT / ".cache" / "kafka" / "libs"))


def _run(script: str, *args: str, env: dict[str, str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPTS / script), *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def _kafka_env(services: PrivateServices) -> dict[str, str]:
    assert (KAFKA_LIBS / ".complete").exists(), f"the Kafka jars are missing ({KAFKA_LIBS}): make services"
    return {**services.env(), "BILLING_KAFKA_LIBS": str(KAFKA_LIBS)}


def test_kafka_logs_go_to_the_cache_not_the_working_directory(tmp_path):
    services = PrivateServices(tmp_path / "cache")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = _kafka_env(services)
    try:
        out = _run("kafka.sh", env=env, cwd=cwd)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip().splitlines()[-1] == services.kafka_bootstrap
    finally:
        _run("kafka.sh", "stop", env=env, cwd=cwd)
    assert (services.base / "kafka" / "logs" / "server.log").exists()

    # The three-node cluster's storage tool, run before its brokers (its own log4j start).
    cluster = {**env, "BILLING_KAFKA_CLUSTER_PORTS": "1,2,3", "BILLING_KAFKA_CLUSTER_CONTROLLER_PORTS": "4,5,6"}
    try:
        out = _run("kafka-cluster.sh", "format", env=cluster, cwd=cwd)
        assert out.returncode == 0, out.stderr[-2000:]
    finally:
        _run("kafka-cluster.sh", "stop", env=cluster, cwd=cwd)  # nothing to stop: format starts no broker
    for n in (1, 2, 3):
        assert (services.base / "kafka-cluster" / f"data{n}" / "meta.properties").exists()
        assert (services.base / "kafka-cluster" / f"logs{n}" / "server.log").exists()

    assert sorted(p.name for p in cwd.iterdir()) == []


def _postgres(services: PrivateServices, *args: str, port: int | None = None) -> subprocess.Popen:
    env = {**services.env(), "BILLING_PG_PORT": str(port or services.pg_port)}
    return subprocess.Popen(["bash", str(SCRIPTS / "postgres.sh"), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _done(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=240)
    return proc.returncode, out.strip(), err


def test_postgres_starts_once_reuses_its_own_cluster_and_refuses_what_is_not_its_own():
    # Under /tmp, not pytest's tmp_path (mode 700): PostgreSQL runs as the postgres user when we are root.
    mine = PrivateServices()
    theirs = PrivateServices()
    try:
        # Two starts side by side (make test's stages each run `make services`): one cluster, both
        # print its URL.
        both = [_postgres(mine), _postgres(mine)]
        for rc, out, err in map(_done, both):
            assert rc == 0, err[-2000:]
            assert out.splitlines()[-1] == mine.pg_url
        pid_file = mine.base / "postgres" / "postmaster.pid"
        pid = pid_file.read_text().split("\n")[0]
        assert pid_file.read_text().split("\n")[3] == str(mine.pg_port)

        # Again: the running one, not restarted.
        rc, out, err = _done(_postgres(mine))
        assert (rc, out.splitlines()[-1]) == (0, mine.pg_url), err[-2000:]
        assert pid_file.read_text().split("\n")[0] == pid

        # The same data directory asked for on another port: refused, naming the port it runs on.
        other_port = mine.redis_port  # free: this test starts no Redis
        rc, out, err = _done(_postgres(mine, port=other_port))
        assert rc != 0 and out == ""
        assert f"runs already (pid {pid}) on port {mine.pg_port}" in err
        assert pid_file.read_text().split("\n")[0] == pid

        # Another cache whose port is held by this cluster: refused (it printed this cluster's URL).
        rc, out, err = _done(_postgres(theirs, port=mine.pg_port))
        assert rc != 0 and out == ""
        assert f"port {mine.pg_port} is taken by another process" in err
        assert not (theirs.base / "postgres").exists()
        _done(_postgres(mine, "stop"))
        assert not pid_file.exists()
    finally:
        _done(_postgres(mine, "stop"))
        shutil.rmtree(mine.base, ignore_errors=True)
        shutil.rmtree(theirs.base, ignore_errors=True)


CITUS_STAGE = REPO_ROOT / ".cache" / "citus" / "stage"


def _citus(services: PrivateServices, ports: tuple[int, int, int], *args: str) -> subprocess.Popen:
    env = {**services.env(), "BILLING_CITUS_PORT": str(ports[0]), "BILLING_CITUS_WORKER1_PORT": str(ports[1]),
           "BILLING_CITUS_WORKER2_PORT": str(ports[2])}
    return subprocess.Popen(["bash", str(SCRIPTS / "citus.sh"), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _with_citus_build(services: PrivateServices) -> None:
    """The checkout's Citus build (make citus) lent to a private cache: no six-minute build."""
    assert (CITUS_STAGE / ".built").exists(), f"Citus is not built ({CITUS_STAGE}): make citus"
    (services.base / "citus").mkdir(parents=True, exist_ok=True)
    (services.base / "citus" / "stage").symlink_to(CITUS_STAGE)


def test_citus_reuses_its_own_nodes_and_refuses_what_is_not_its_own():
    # citus.sh reads "is it up, is it mine" from each node's postmaster.pid, as postgres.sh (house8):
    # before, a port answering PostgreSQL was taken for its node.
    mine = PrivateServices()
    theirs = PrivateServices()
    ports = (mine.pg_port, mine.redis_port, mine.kafka_port)  # free: this test starts none of those
    try:
        _with_citus_build(mine)
        _with_citus_build(theirs)
        rc, out, err = _done(_citus(mine, ports))
        assert rc == 0, err[-2000:]
        assert out.splitlines()[-1] == f"postgresql://postgres@127.0.0.1:{ports[0]}/postgres"
        pid_files = [mine.base / "citus" / node / "postmaster.pid" for node in ("coordinator", "worker1", "worker2")]
        pids = [f.read_text().split("\n")[0] for f in pid_files]
        assert [f.read_text().split("\n")[3] for f in pid_files] == [str(p) for p in ports]

        # Again: the running nodes, none restarted.
        rc, out, err = _done(_citus(mine, ports))
        assert rc == 0, err[-2000:]
        assert [f.read_text().split("\n")[0] for f in pid_files] == pids

        # The same coordinator asked for on another port: refused, naming the port it runs on.
        other = mine.kafka_controller_port
        rc, out, err = _done(_citus(mine, (other, ports[1], ports[2])))
        assert rc != 0 and out == ""
        assert f"runs already (pid {pids[0]}) on port {ports[0]}" in err
        assert [f.read_text().split("\n")[0] for f in pid_files] == pids

        # Another cache whose coordinator port is held by this cluster's coordinator: refused (it took
        # that node for its own).
        rc, out, err = _done(_citus(theirs, (ports[0], theirs.pg_port, theirs.redis_port)))
        assert rc != 0 and out == ""
        assert f"port {ports[0]} is taken by another process" in err
        assert not (theirs.base / "citus" / "coordinator").exists()
        _done(_citus(mine, ports, "stop"))
        assert not any(f.exists() for f in pid_files)
    finally:
        _done(_citus(mine, ports, "stop"))
        _done(_citus(theirs, (ports[0], theirs.pg_port, theirs.redis_port), "stop"))
        shutil.rmtree(mine.base, ignore_errors=True)
        shutil.rmtree(theirs.base, ignore_errors=True)
