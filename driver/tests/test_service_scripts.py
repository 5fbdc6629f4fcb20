"""The service scripts (scripts/services/*.sh) on a fresh cache of their own, on free ports.

They write only under their cache folder, never into the directory they are run from (the
checkout's root under make): Kafka's log4j config once made a folder literally named
`${sys:kafka.logs.dir}` there.
"""

from __future__ import annotations

import os
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
