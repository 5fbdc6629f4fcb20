"""`billing db`: the schema's migrations and the database's aftercare (failover, restore, login roles)."""

from __future__ import annotations

import click

from billing.cli.base import database_url_option, main
from billing.config import Settings
from billing.roles import JOBS


@main.group()
def db() -> None:
    """Database schema management."""


@db.command("migrate")
@database_url_option
@click.option("--simulation/--no-simulation", default=None,
              help="Mark the database as a simulation database (any p_now accepted: demo, tests, benchmarks), "
                   "or clear the mark. Default: leave the mark as it is (a new database is not one).")
@click.option("--citus", is_flag=True, default=False,
              help="The database is a Citus coordinator's: distribute the tables by customer and the "
                   "per-customer functions after migrating (docs/scaling.md).")
@click.option("--lock-timeout", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="Seconds any lock of the run may be waited for (0: forever); past it the run is rolled "
                   "back and tried again, so that a migration never queues the workers behind a long "
                   "transaction (docs/operations.md).")
@click.option("--attempts", type=click.IntRange(min=1), default=10, show_default=True,
              help="Runs in all before giving up when a lock is not granted in time (pauses 0.5 s, doubling, "
                   "at most 10 s).")
@click.pass_obj
def db_migrate(settings: Settings, database_url: str | None, simulation: bool | None, citus: bool,
               lock_timeout: float, attempts: int) -> None:
    """Apply pending migrations, then (re)apply every SQL function. Safe to run concurrently.

    Runs as the owner role billing_owner (the login needs CREATEROLE or superuser the first time,
    to create the roles: docs/security.md)."""
    from billing.migrate import MigrationError, migrate

    settings = settings.with_overrides(database_url=database_url)
    try:
        result = migrate(settings.database_url, settings.db_dir, simulation=simulation, citus=citus,
                         lock_timeout=lock_timeout or None, attempts=attempts)
    except MigrationError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(
        f"migrations applied: {len(result.applied)} ({', '.join(result.applied) or 'none pending'}); "
        f"function files applied: {result.functions}"
        + ("; simulation database (any p_now accepted)" if result.simulation else "")
        + (f"; {result.attempts} attempts (lock waits timed out)" if result.attempts > 1 else "")
    )
    if result.citus is not None:
        placed = result.citus
        click.echo(f"citus: {len(placed.reference)} reference tables, {len(placed.distributed)} distributed by customer, "
                   f"{len(placed.local)} on the coordinator"
                   + (f" ({len(placed.held)} of them held back until the pending tables are keyed by customer: "
                      "docs/scaling.md)" if placed.held else ""))


@db.command("after-failover")
@database_url_option
@click.option("--margin", type=click.IntRange(min=1), default=1_000_000, show_default=True,
              help="How far past its value on the new primary each sequence moves.")
@click.pass_obj
def db_after_failover(settings: Settings, database_url: str | None, margin: int) -> None:
    """After promoting a standby that may have lost writes (asynchronous): move every sequence of
    schema billing past the ids the lost primary could have issued (docs/operations.md)."""
    from billing.after_failover import advance_sequences

    settings = settings.with_overrides(database_url=database_url)
    moved = advance_sequences(settings.database_url, margin=margin)
    click.echo(f"sequences advanced by {margin}: {len(moved)}")


@db.command("after-restore")
@database_url_option
@click.option("--margin", type=click.IntRange(min=1), default=1_000_000, show_default=True,
              help="How far past its restored value each sequence moves.")
@click.option("--outbox-since", type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d %H:%M:%S%z"]), default=None,
              help="Also check the outbox against Kafka ($BILLING_KAFKA_BOOTSTRAP, $BILLING_KAFKA_TOPIC), reading "
                   "from this instant on (with zone; a while before the restore instant).")
@click.pass_obj
def db_after_restore(settings: Settings, database_url: str | None, margin: int, outbox_since) -> None:
    """After a point-in-time restore, before any worker starts: sequences moved ahead, a new key
    namespace, every lease of the past lapsed, and, with --outbox-since, the pending events Kafka
    already holds marked published (docs/operations.md, section 5)."""
    from billing.after_restore import after_restore, check_outbox

    settings = settings.with_overrides(database_url=database_url)
    if outbox_since is not None and not settings.kafka_bootstrap:
        raise click.ClickException("--outbox-since needs BILLING_KAFKA_BOOTSTRAP")
    click.echo(after_restore(settings.database_url, margin=margin).summary())
    if outbox_since is not None:
        click.echo(check_outbox(settings.database_url, settings.kafka_bootstrap, settings.kafka_topic, outbox_since,
                                config=settings.kafka_config()).summary())


@db.command("restore-gap")
@database_url_option
@click.option("--charges", "charges_file", type=click.File("r"), required=True,
              help="The gateway's charges since the restore instant, JSON: a list, or {\"charges\": [...]} as the "
                   "simulator's /v1/ledger answers (idempotencyKey, customerId, amount, currency, status, id).")
@click.option("--since-invoice", type=int, default=None,
              help="The first invoice id made after the restore (printed by `billing db after-restore`).")
@click.pass_obj
def db_restore_gap(settings: Settings, database_url: str | None, charges_file, since_invoice: int | None) -> None:
    """The gateway's succeeded charges the restored database did not make, one JSON object a line,
    with the invoices of the same customer and amount made after the restore (docs/operations.md)."""
    import json
    from dataclasses import asdict

    from billing.after_restore import unmatched_charges

    settings = settings.with_overrides(database_url=database_url)
    data = json.load(charges_file)
    charges = data["charges"] if isinstance(data, dict) else data
    found = unmatched_charges(settings.database_url, charges, since_invoice_id=since_invoice)
    for u in found:
        click.echo(json.dumps(asdict(u), default=str, sort_keys=True))
    click.echo(f"unmatched charges: {len(found)}", err=True)


@db.command("login-role")
@database_url_option
@click.argument("login")
@click.option("--job", "jobs", multiple=True, required=True,
              type=click.Choice(JOBS),
              help="The job role(s) to grant (billing_<job>); repeat for several (a `billing worker` that also "
                   "relays: --job worker --job relay).")
@click.option("--password-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Set the login's password from this file (stored by PostgreSQL as SCRAM).")
@click.pass_obj
def db_login_role(settings: Settings, database_url, login, jobs, password_file) -> None:
    """Create (or update) a LOGIN role for one process: its job roles, and the statement_timeout,
    lock_timeout and idle_in_transaction_session_timeout of its job (docs/security.md)."""
    from billing.roles import RoleError, ensure_login_role

    settings = settings.with_overrides(database_url=database_url)
    password = None
    if password_file:
        from pathlib import Path

        password = Path(password_file).read_text(encoding="utf-8").rstrip("\r\n")
    try:
        summary = ensure_login_role(settings.database_url, login, jobs, password=password)
    except RoleError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(summary)
