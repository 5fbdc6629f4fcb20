"""The `billing` command: click entry points only; the work lives in the modules they call.

`main` is the group (base.py); each module of this package adds one family of commands to it:
database.py `db`, jobs.py the processes (`worker`, `serve`, `gateway-sim`) and whole-system views
(`status`, `demo`), operations.py `report`, `api-key`, `plan-options`, `events`, `usage`, imports.py
`import`.
"""

from __future__ import annotations

from billing.cli import database, imports, jobs, operations  # noqa: F401 - each registers its commands
from billing.cli.base import main

__all__ = ["database", "imports", "jobs", "main", "operations"]
