"""The job roles, and login roles by job (docs/security.md): `billing db login-role LOGIN --job api ...`.

`JOB_TIMEOUTS` is THE list of jobs: `billing db migrate` creates their roles from it
(billing.migrate.ROLES), `billing db login-role --job` offers it, the role tests
(driver/tests/test_roles.py) and docs/security.md's table are checked against it. A job `x` is the
role `billing_x` (`JOB_ROLES`); billing_support is the one that reads customers' personal data
(issue 27). The job roles are
NOLOGIN groups holding the EXECUTE grants (db/functions/90_grants.sql). PostgreSQL applies a
role's settings only to the role one logs in as, never to its groups, so the timeouts of a job
are set here on each login role: the strictest statement budget that still fits the job's work.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

# job -> (statement_timeout, lock_timeout, idle_in_transaction_session_timeout)
JOB_TIMEOUTS: dict[str, tuple[str, str, str]] = {
    "api": ("5s", "2s", "10s"),
    "worker": ("60s", "5s", "60s"),
    "relay": ("30s", "5s", "60s"),
    "readonly": ("30s", "2s", "60s"),
    "admin": ("60s", "10s", "300s"),
    "console": ("15s", "2s", "10s"),
    "support": ("15s", "2s", "10s"),
}
JOBS = tuple(JOB_TIMEOUTS)
JOB_ROLES = tuple(f"billing_{job}" for job in JOBS)


class RoleError(RuntimeError):
    pass


def _seconds(value: str) -> int:
    return int(value.rstrip("s"))


def job_timeouts(jobs) -> tuple[str, str, str]:
    """For a login with several jobs, the most generous of each (the longest job must fit)."""
    chosen = [JOB_TIMEOUTS[j] for j in jobs]
    return tuple(max((c[i] for c in chosen), key=_seconds) for i in range(3))  # type: ignore[return-value]


def ensure_login_role(database_url: str, login: str, jobs, *, password: str | None = None) -> str:
    jobs = sorted(set(jobs))
    unknown = set(jobs) - set(JOB_TIMEOUTS)
    if unknown or not jobs:
        raise RoleError(f"unknown job(s) {sorted(unknown)}; use {', '.join(JOB_TIMEOUTS)}")
    statement, lock, idle = job_timeouts(jobs)
    name = sql.Identifier(login)
    with psycopg.connect(database_url, autocommit=True) as conn:
        try:
            with conn.transaction():
                exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (login,)).fetchone()
                if exists is None:
                    conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(name))
                if password is not None:
                    conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(name, sql.Literal(password)))
                for job in jobs:
                    conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(f"billing_{job}"), name))
                for setting, value in (("statement_timeout", statement), ("lock_timeout", lock),
                                       ("idle_in_transaction_session_timeout", idle)):
                    conn.execute(sql.SQL("ALTER ROLE {} SET {} = {}").format(name, sql.Identifier(setting),
                                                                           sql.Literal(value)))
        except psycopg.errors.InsufficientPrivilege as exc:
            raise RoleError(f"{exc.diag.message_primary}: run it as a superuser or a login with CREATEROLE") from exc
        except psycopg.errors.UndefinedObject as exc:
            raise RoleError(f"{exc.diag.message_primary}: run `billing db migrate` first (it creates the job roles)") \
                from exc
    return (f"login role {login}: {', '.join('billing_' + j for j in jobs)}; statement_timeout {statement}, "
            f"lock_timeout {lock}, idle_in_transaction_session_timeout {idle}")
