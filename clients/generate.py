"""make client: clients/python/ from docs/openapi.json with openapi-python-client (pinned in the
Makefile, run from a tool venv of its own), then the hand-written helpers (clients/helpers.py:
pagination, retries with the same Idempotency-Key) copied into the package, and the SHA-256 of the
document it was made from (driver/tests/unit/test_python_client.py fails when it is stale).

The deprecated unprefixed routes are left out: the client speaks /v1 only."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = ROOT / "docs" / "openapi.json"
OUT = ROOT / "clients" / "python"


def main(generator: str) -> None:
    raw = DOCUMENT.read_bytes()
    doc = json.loads(raw)
    doc["paths"] = {path: ops for path, ops in
                    ((p, {m: op for m, op in item.items() if not op.get("deprecated")}) for p, item in doc["paths"].items())
                    if ops}
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "openapi.json"
        source.write_text(json.dumps(doc, indent=2, sort_keys=True))
        target = Path(tmp) / "out"
        subprocess.run([generator, "generate", "--path", str(source), "--output-path", str(target), "--meta", "setup",
                        "--config", str(ROOT / "clients" / "openapi-python-client.yaml")], check=True,
                       env={**os.environ, "PYTHONHASHSEED": "0"})  # the generator orders some imports by set order
        shutil.copy(ROOT / "clients" / "helpers.py", target / "billing_client" / "helpers.py")
        (target / "OPENAPI.sha256").write_text(hashlib.sha256(raw).hexdigest() + "\n")
        if OUT.exists():
            shutil.rmtree(OUT)
        shutil.copytree(target, OUT)
    print(f"{OUT.relative_to(ROOT)} generated from {DOCUMENT.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1])
