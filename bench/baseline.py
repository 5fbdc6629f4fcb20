"""The baseline of a side-by-side benchmark: the project's own code at a named commit.

    tree = baseline_tree("b48c8dd")      # .cache/bench-baseline/<full sha>/{driver,db,bench}
    env = tree_env(tree)                 # PYTHONPATH=<tree>/driver: `billing` is that commit's

The benchmarks run the baseline and the current tree the same way (their own processes, their
own databases migrated from their own db/), one after the other in the same run, so both see the
same host. The tree is extracted once with `git archive` and reused.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
import io
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# main when issue 17 ("Faster where it matters") was filed: the figures it quotes are this code's.
DEFAULT_BASELINE = "b48c8dda94751671213d8a84aa0e623b33c46d00"


def baseline_tree(ref: str = DEFAULT_BASELINE) -> Path:
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{ref}^{{commit}}"],
                         check=True, capture_output=True, text=True).stdout.strip()
    dest = ROOT / ".cache" / "bench-baseline" / sha
    if (dest / ".complete").exists():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", sha, "driver", "db", "bench"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    (dest / ".complete").write_text(sha + "\n")
    return dest


def tree_env(tree: Path | None) -> dict[str, str]:
    """The environment that makes `import billing` load `tree`'s driver (None: the current tree)."""
    env = dict(os.environ)
    driver = (tree or ROOT) / "driver"
    env["PYTHONPATH"] = str(driver) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system, threads included) a process has used, from /proc (0 when gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def proc_rss_kb(pid: int) -> tuple[int, int]:
    """(current RSS, peak RSS) of a process in kB, from /proc/<pid>/status ((0, 0) when gone)."""
    cur = peak = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                cur = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1])
    except OSError:
        pass
    return cur, peak


def host_load() -> str:
    """Load average and the kernel's CPU pressure (share of time some task waited for a CPU)."""
    one, five, fifteen = os.getloadavg()
    parts = [f"load {one:.1f}/{five:.1f}/{fifteen:.1f} on {os.cpu_count()} CPUs"]
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0].split()
        parts.append(f"CPU pressure {some[1].split('=')[1]}% (avg10)")
    except (OSError, IndexError):
        pass
    return ", ".join(parts)
