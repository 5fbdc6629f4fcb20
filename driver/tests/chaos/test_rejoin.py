"""Issue 31: the lost primary comes back as a standby of the new one (pg_rewind), never as a second
primary (docs/operations.md, "Running a primary and a standby").

A primary and a synchronous standby (postgres-ha.sh). The standby is stopped and the primary writes
alone (a commit with synchronous_commit = local, as a commit in flight at a crash would be): a row
the standby never receives. The primary is SIGKILLed, the standby started again and promoted; the
new primary writes. `postgres-ha.sh rejoin node1` rewinds the old primary (the diverging row undone),
starts it as a standby streaming from the new primary through a slot, and makes it the synchronous
standby: a commit on the new primary is then on both nodes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from billing.config import REPO_ROOT

from .harness import PGBIN, free_ports

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(180)]

SCRIPT = REPO_ROOT / "scripts" / "services" / "postgres-ha.sh"


def test_the_lost_primary_is_rewound_and_rejoins_as_the_synchronous_standby(capsys):
    base = Path(tempfile.mkdtemp(prefix="billing-rejoin-"))
    os.chmod(base, 0o755)
    p1, p2 = free_ports(2)
    env = {**os.environ, "BILLING_CACHE_DIR": str(base), "BILLING_PG_HA_PORT": str(p1),
           "BILLING_PG_HA_STANDBY_PORT": str(p2), "BILLING_PG_HA_MODE": "sync"}
    node = {"node1": f"postgresql://postgres@127.0.0.1:{p1}/postgres",
            "node2": f"postgresql://postgres@127.0.0.1:{p2}/postgres"}
    t0 = time.monotonic()
    timeline: list[str] = []

    def ha(*args: str) -> str:
        out = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, f"postgres-ha.sh {' '.join(args)}: {out.stderr[-2000:]}"
        timeline.append(f"{time.monotonic() - t0:5.1f} s  postgres-ha.sh {' '.join(args)}")
        return out.stdout.strip()

    def one(url: str, sql: str):
        with psycopg.connect(url, autocommit=True) as conn:
            return conn.execute(sql).fetchone()

    def run(url: str, sql: str) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql)

    def pg_ctl(name: str, *args: str) -> None:
        cmd = [str(PGBIN / "pg_ctl"), "-D", str(base / "pg-ha" / name), *args]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=60)

    try:
        ha()
        run(node["node1"], "CREATE TABLE t (x text PRIMARY KEY); INSERT INTO t VALUES ('before')")
        assert one(node["node2"], "SELECT count(*) FROM t")[0] == 1
        pg_ctl("node2", "-m", "fast", "-w", "stop")
        with psycopg.connect(node["node1"], autocommit=True) as conn:
            conn.execute("SET synchronous_commit = local")
            conn.execute("INSERT INTO t VALUES ('diverged'); CHECKPOINT")
        ha("kill", "node1")
        pg_ctl("node2", "-w", "-t", "60", "-l", str(base / "pg-ha" / "node2.log"), "-o", f"-p {p2} -k {base / 'pg-ha'}",
               "start")
        ha("promote", "node2")
        run(node["node2"], "INSERT INTO t SELECT 'after-' || g FROM generate_series(1, 1000) g")
        assert ha("primary") == "node2"
        ha("rejoin", "node1")
        run(node["node2"], "INSERT INTO t VALUES ('synchronous')")  # waits for node1 (FIRST 1 (node1))
        state = one(node["node2"], "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = 'node1'")
        deadline = time.monotonic() + 20
        while one(node["node1"], "SELECT count(*) FROM t WHERE x = 'synchronous'")[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.1)  # the commit is flushed on node1; replay follows within moments
        with psycopg.connect(node["node1"], autocommit=True) as conn:
            rows = {r for (r,) in conn.execute("SELECT x FROM t").fetchall()}
        in_recovery = one(node["node1"], "SELECT pg_is_in_recovery()")[0]
        read_only = one(node["node1"], "SHOW transaction_read_only")[0]
        # Started again through the script, both come up in their roles (node1 a standby).
        ha("stop")
        ha()
        assert ha("primary") == "node2"
        again = one(node["node2"], "SELECT state FROM pg_stat_replication WHERE application_name = 'node1'")
        with capsys.disabled():
            print("\nrejoin (pg_rewind)\n  " + "\n  ".join(timeline), flush=True)
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(base, ignore_errors=True)

    assert state == ("streaming", "sync")
    assert in_recovery is True and read_only == "on"
    assert "diverged" not in rows, "the row only the lost primary had must be undone by the rewind"
    assert {"before", "after-1", "after-1000", "synchronous"} <= rows and len(rows) == 1002
    assert again == ("streaming",)
