"""The `billing` command: click entry points only; the work lives in the modules they call."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from billing.api_keys import SCOPES as _SCOPES
from billing.config import Settings
from billing.logs import setup_logging
from billing.roles import JOBS


@click.group()
@click.option("--log-level", default=None, help="Log level (default: $BILLING_LOG_LEVEL, else INFO).")
@click.option("--log-json/--log-text", default=None,
              help="One JSON object per log line (default: $BILLING_LOG_JSON, else text).")
@click.pass_context
def main(ctx: click.Context, log_level: str | None, log_json: bool | None) -> None:
    """Subscription billing and renewal engine."""
    settings = Settings.from_env().with_overrides(log_level=log_level, log_json=log_json)
    setup_logging(settings.log_level, json_lines=settings.log_json)
    ctx.obj = settings


database_url_option = click.option(
    "--database-url", default=None, help="PostgreSQL URL (default: $BILLING_DATABASE_URL)."
)


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


def _run(module: str, func: str, *args, **kwargs):
    import importlib

    return getattr(importlib.import_module(module), func)(*args, **kwargs)


def _refuse_weak_secrets(settings: Settings, command: str) -> None:
    problems = settings.secret_problems()
    if problems:
        raise click.ClickException(
            f"{command} refuses to start: " + "; ".join(problems)
            + ". Generate secrets with deploy/make-secrets.sh or `python -c 'import secrets; print(secrets.token_urlsafe(32))'` "
              "(docs/security.md).")


@main.command()
@database_url_option
@click.option("--concurrency", type=int, default=None, help="Gateway calls in flight (default: sized from the rate).")
@click.option("--renew/--no-renew", default=True, help="Run the renewal loop.")
@click.option("--charge/--no-charge", default=True, help="Run the charge workers.")
@click.option("--relay/--no-relay", default=True, help="Run the outbox relay.")
@click.option("--webhooks/--no-webhooks", default=True, help="Deliver outbound webhooks.")
@click.option("--retention/--no-retention", default=True,
              help="Delete published events and stored webhooks older than $BILLING_RETENTION_DAYS.")
@click.option("--notifications/--no-notifications", default=True,
              help="Send the emails owed to customers over $BILLING_SMTP_URL (docs/customers.md).")
@click.pass_obj
def worker(settings: Settings, database_url, concurrency, renew, charge, relay, webhooks, retention,
           notifications) -> None:
    """Renewal, charge workers, outbox relay, webhooks and retention in one process. SIGTERM drains and exits 0."""
    settings = settings.with_overrides(database_url=database_url)
    _refuse_weak_secrets(settings, "billing worker")
    sys.exit(_run("billing.worker", "run_worker", settings, concurrency=concurrency,
                  renew=renew, charge=charge, relay=relay, webhooks=webhooks, retention=retention,
                  notifications=notifications) or 0)


@main.command()
@database_url_option
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, type=int, show_default=True)
@click.option("--internal-host", default="127.0.0.1", show_default=True,
              help="Address of the internal listener (never publish it).")
@click.option("--internal-port", default=None, type=int,
              help="Also serve /metrics, /openapi.json and /healthz WITHOUT a key on this port "
                   "(on the public port they need an admin key).")
@click.pass_obj
def serve(settings: Settings, database_url, host, port, internal_host, internal_port) -> None:
    """The HTTP API (API keys required: docs/security.md), /metrics and /healthz."""
    settings = settings.with_overrides(database_url=database_url)
    _refuse_weak_secrets(settings, "billing serve")
    _run("billing.api", "serve", settings, host=host, port=port, internal_host=internal_host,
         internal_port=internal_port)


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


@main.command("report")
@database_url_option
@click.argument("kind", type=click.Choice(["mrr", "churn", "revenue"]))
@click.option("--from", "start", type=click.DateTime(["%Y-%m-%d"]), required=True,
              help="First month of the report (its UTC calendar month).")
@click.option("--to", "end", type=click.DateTime(["%Y-%m-%d"]), required=True, help="Last month (inclusive).")
@click.option("--currency", default=None, help="Only this currency (figures are never summed across currencies).")
@click.option("--at", type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d"]), default=None,
              help="mrr only: MRR and ARR at this instant (UTC when no offset) instead of the monthly movements.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_obj
def report(settings: Settings, database_url, kind, start, end, currency, at, fmt) -> None:
    """Board figures (docs/reports.md): mrr (per month: starting, new, expansion, contraction, churned,
    ending MRR and ARR), churn (logo and revenue churn, voluntary vs dunning, dunning recovery) or
    revenue (recognized straight-line vs invoiced vs cash collected). Read-only."""
    from datetime import timezone

    import psycopg

    from billing.invoices.reports import run

    settings = settings.with_overrides(database_url=database_url)
    if at is not None and at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    try:
        click.echo(run(settings.database_url, kind, start.date(), end.date(), currency, at, fmt))
    except psycopg.Error as exc:
        raise click.ClickException(str(exc).strip()) from None


@main.group("api-key")
def api_key() -> None:
    """HTTP API keys: create (the key is shown once), list, revoke."""


def _cli_actor() -> str:
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # noqa: BLE001 - no user name in some containers
        return "cli:unknown"



@api_key.command("create")
@database_url_option
@click.option("--name", required=True, help="What the key is for (e.g. the calling application).")
@click.option("--scope", "scopes", multiple=True, required=True,
              type=click.Choice(list(_SCOPES)),
              help="Repeat for several; admin allows everything.")
@click.option("--max-quantity", type=click.IntRange(1, 1_000_000), default=None,
              help="Guardrail: the most seats a subscription this key creates or changes may have.")
@click.option("--max-trial-days", type=click.IntRange(0, 730), default=None,
              help="Guardrail: the longest trial this key may give.")
@click.option("--max-refund", type=click.IntRange(1, None), default=None,
              help="Guardrail: the largest refund (minor units) this key may ask for in one request.")
@click.option("--allow-no-proration", is_flag=True, default=False,
              help="Let this key change plans with prorate: false (otherwise only an admin key may).")
@click.pass_obj
def api_key_create(settings: Settings, database_url, name, scopes, max_quantity, max_trial_days, max_refund,
                   allow_no_proration) -> None:
    """Create a key; prints its id and scopes, then the key itself alone on the last line (shown once)."""
    from billing.api_keys import Guardrails, create_key

    settings = settings.with_overrides(database_url=database_url)
    guardrails = Guardrails(max_quantity, max_trial_days, max_refund, allow_no_proration)
    created = create_key(settings.database_url, name, list(scopes), actor=_cli_actor(), guardrails=guardrails)
    limits = guardrails.describe()
    click.echo(f"created API key {created.key_id} ({name}; scopes: {', '.join(scopes)}"
               f"{'; ' + limits if limits else ''})")
    click.echo("the key is shown once; store it now:")
    click.echo(created.key)


@api_key.command("list")
@database_url_option
@click.pass_obj
def api_key_list(settings: Settings, database_url) -> None:
    """Every key: id, name, scopes, created, last used, revoked (never the key)."""
    from billing.api_keys import list_keys

    settings = settings.with_overrides(database_url=database_url)
    rows = list_keys(settings.database_url)
    click.echo(f"{'id':<16} {'scopes':<42} {'created':<20} {'last used':<20} {'revoked':<20} name")
    for r in rows:
        def at(v):
            return v.strftime("%Y-%m-%d %H:%M:%S") if v else "-"

        click.echo(f"{r['id']:<16} {','.join(r['scopes']):<42} {at(r['created_at']):<20} {at(r['last_used_at']):<20} "
                   f"{at(r['revoked_at']):<20} {r['name']}")


@api_key.command("revoke")
@database_url_option
@click.argument("key_id")
@click.pass_obj
def api_key_revoke(settings: Settings, database_url, key_id) -> None:
    """Revoke a key at once (its requests get 401 from then on)."""
    import psycopg

    from billing.api_keys import revoke_key

    settings = settings.with_overrides(database_url=database_url)
    try:
        revoked_at = revoke_key(settings.database_url, key_id, actor=_cli_actor())
    except psycopg.Error as exc:
        raise click.ClickException(exc.diag.message_primary or str(exc)) from exc
    click.echo(f"revoked {key_id} at {revoked_at:%Y-%m-%d %H:%M:%S} UTC")


@main.command("plan-options")
@database_url_option
@click.argument("plan")
@click.option("--to", "targets", multiple=True, metavar="PLAN[:now|:period_end]",
              help="A plan customers on PLAN may move to on the portal (now, prorated: the default; or at period end). "
                   "Repeat it; none: the plan offers no change.")
@click.pass_obj
def plan_options(settings: Settings, database_url, plan, targets) -> None:
    """Set the plan changes customers on PLAN may make on the portal (docs/customers.md)."""
    import psycopg

    from billing.portal.options import parse_option, set_options

    settings = settings.with_overrides(database_url=database_url)
    try:
        options = [parse_option(t) for t in targets]
        count = set_options(settings.database_url, plan, options, actor=_cli_actor())
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--to") from exc
    except psycopg.Error as exc:
        raise click.ClickException(exc.diag.message_primary or str(exc)) from exc
    click.echo(f"{plan}: {count} plan change(s) offered on the portal")


@main.command("gateway-sim")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8099, type=int, show_default=True)
@click.option("--rate", default=None, type=int,
              help="Calls per sliding second before 429 (default: the worker's, $BILLING_GATEWAY_RATE).")
@click.option("--decline-rate", default=0.0, type=float, show_default=True)
@click.option("--timeout-rate", default=0.0, type=float, show_default=True,
              help="Share of calls charged and then left unanswered past the client's timeout.")
@click.option("--error-rate", default=0.0, type=float, show_default=True, help="Share of 5xx answers, not charged.")
@click.option("--latency-ms", default="0-0", show_default=True, help="MIN-MAX latency per call.")
@click.option("--webhook-url", default=None)
@click.option("--webhook-secret", default=None, help="Signs the webhooks (default: $BILLING_WEBHOOK_SECRET).")
@click.option("--webhook-duplicate-rate", default=0.0, type=float, show_default=True)
@click.option("--webhook-delay-ms", default="0-2000", show_default=True,
              help="MIN-MAX delay before each webhook delivery (late, out of order).")
@click.option("--timeout-hold-seconds", default=30.0, type=float, show_default=True,
              help="How long a timed-out call is held before the (unread) answer.")
@click.option("--mode", type=click.Choice(["strict", "observe"]), default="strict", show_default=True,
              help="strict: 429 past the rate; observe: accept everything and count the excess.")
@click.option("--seed", default=0, type=int, show_default=True)
@click.pass_obj
def gateway_sim(settings: Settings, rate: int | None, webhook_secret: str | None, **options) -> None:
    """A payment gateway simulator (docs/gateway.md)."""
    _run("billing.gateway.simulator", "main", rate=settings.gateway_rate if rate is None else rate,
         webhook_secret=webhook_secret or settings.webhook_secret, **options)


@main.group()
def events() -> None:
    """The event stream: replay to Kafka, requeue DEAD events (docs/events.md)."""


@events.command("replay")
@database_url_option
@click.option("--from", "start", required=True, metavar="ID|TIME",
              help="The first outbox id, or an ISO 8601 time (events created at or after it).")
@click.option("--type", "types", multiple=True, help="Only this event type (repeatable).")
@click.pass_obj
def events_replay(settings: Settings, database_url, start, types) -> None:
    """Republish published events to Kafka with their CloudEvents ids, in order per aggregate."""
    settings = settings.with_overrides(database_url=database_url)
    if not settings.kafka_bootstrap:
        raise click.ClickException("replay publishes to Kafka: set BILLING_KAFKA_BOOTSTRAP")
    from billing.events.replay import replay
    from billing.worker.sinks import KafkaSink

    sink = KafkaSink(settings.kafka_bootstrap, settings.kafka_topic)
    try:
        count = replay(settings.database_url, sink, start=start, types=list(types) or None)
    except (ValueError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        sink.close()
    click.echo(f"replayed {count} events to {settings.kafka_topic}")


@events.command("retry-dead")
@database_url_option
@click.option("--type", "types", multiple=True, help="Only this event type (repeatable).")
@click.pass_obj
def events_retry_dead(settings: Settings, database_url, types) -> None:
    """Requeue DEAD events; the relay publishes them again in order per aggregate."""
    settings = settings.with_overrides(database_url=database_url)
    from billing.events.replay import retry_dead

    click.echo(f"requeued {retry_dead(settings.database_url, types=list(types) or None)} DEAD events")


@main.group()
def usage() -> None:
    """Usage-based billing: the Kafka consumer of usage events, partition upkeep (docs/usage.md)."""


@usage.command("consume")
@database_url_option
@click.option("--batch", default=10000, show_default=True, type=click.IntRange(1, 10000),
              help="Messages ingested per database transaction (one statement).")
@click.option("--exit-when-idle", default=None, type=float, metavar="SECONDS",
              help="Stop after this long without a message (default: run until SIGTERM).")
@click.pass_obj
def usage_consume(settings: Settings, database_url, batch, exit_when_idle) -> None:
    """A member of the consumer group on $BILLING_USAGE_TOPIC: each batch ingested in one transaction,
    offsets committed after it, rejected events to $BILLING_USAGE_DEAD_LETTER_TOPIC with the reason."""
    settings = settings.with_overrides(database_url=database_url)
    from billing.clock import SystemClock
    from billing.usage import consume

    try:
        stats = consume(settings, SystemClock(), batch=batch, max_idle_seconds=exit_when_idle)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"usage: {stats.accepted} accepted, {stats.duplicate} duplicate, {stats.rejected} rejected "
               f"({stats.dead_lettered} dead-lettered) in {stats.batches} batches")


@usage.command("maintain")
@database_url_option
@click.pass_obj
def usage_maintain(settings: Settings, database_url) -> None:
    """Make the coming months' partitions of usage_event; drop those past $BILLING_USAGE_RETENTION days."""
    settings = settings.with_overrides(database_url=database_url)
    import psycopg

    from billing.clock import SystemClock
    from billing.db import USAGE_PARTITIONS
    from billing.usage import windows

    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        for name, action in conn.execute(USAGE_PARTITIONS, {"now": SystemClock().now(),
                                                            "retention": windows(settings)["retention"]}):
            click.echo(f"{name}: {action}")


@main.group("import")
def import_() -> None:
    """Bring customers and subscriptions over from another billing system (docs/import.md)."""


_import_options = [
    click.option("--dry-run", is_flag=True, default=False,
                 help="Check everything and report what cannot be mapped; write nothing."),
    click.option("--now", type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"]), default=None,
                 help="The instant of the import (default: now; another one on a simulation database only)."),
    click.option("--batch", type=click.IntRange(1, 10000), default=1000, show_default=True,
                 help="Rows per import call (one transaction each)."),
    click.option("--progress/--no-progress", default=None, help="A progress bar (default: when on a terminal)."),
]


def _with_import_options(f):
    for option in reversed(_import_options):
        f = option(f)
    return database_url_option(f)


def _run_import(settings: Settings, database_url, source, now, dry_run, batch, progress, total=None) -> None:
    from datetime import datetime, timezone

    from billing.importer import run_import

    settings = settings.with_overrides(database_url=database_url)
    now = (now if now.tzinfo else now.replace(tzinfo=timezone.utc)) if now else datetime.now(timezone.utc)
    show = sys.stderr.isatty() if progress is None else progress
    if total:
        with click.progressbar(length=total, label="importing", file=sys.stderr, show_pos=True,
                               hidden=not show) as bar:
            report = run_import(settings.database_url, source, now, dry_run=dry_run, batch=batch,
                                progress=lambda kind, n: bar.update(n))
    else:  # a source read page by page: its size is known at the end only
        done = {"n": 0}

        def tick(kind: str, n: int) -> None:
            done["n"] += n
            if show:
                click.echo(f"\rimporting: {done['n']:,} read ({kind}s)", file=sys.stderr, nl=False)

        report = run_import(settings.database_url, source, now, dry_run=dry_run, batch=batch, progress=tick)
        if show:
            click.echo("", file=sys.stderr)
    click.echo(report.text())
    if not report.ok():
        sys.exit(2)


@import_.command("stripe")
@_with_import_options
@click.pass_obj
def import_stripe(settings: Settings, database_url, dry_run, now, batch, progress) -> None:
    """From a Stripe account through its API ($BILLING_STRIPE_API_KEY at $BILLING_STRIPE_API_BASE): prices as
    plans, coupons, customers with their default card, active and trialing subscriptions in their current
    period; Stripe ids kept as external ids. Resumable: a re-run skips what was imported. Exit status 2 when
    something could not be imported (listed)."""
    from billing.importer.stripe import StripeError, StripeReader, read

    if not settings.stripe_api_key:
        raise click.ClickException("BILLING_STRIPE_API_KEY (or _FILE) is required")
    try:
        _run_import(settings, database_url, read(StripeReader(settings.stripe_api_key, settings.stripe_api_base)),
                    now, dry_run, batch, progress)
    except StripeError as exc:
        raise click.ClickException(str(exc)) from None


@import_.command("csv")
@click.option("--plans", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None)
@click.option("--customers", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None)
@click.option("--subscriptions", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None)
@_with_import_options
@click.pass_obj
def import_csv(settings: Settings, plans, customers, subscriptions, database_url, dry_run, now, batch,
               progress) -> None:
    """From CSV files (format: docs/import.md; samples in docs/import/): plans, customers, subscriptions, each
    optional. Resumable: a re-run skips what was imported. Exit status 2 when something could not be imported."""
    from billing.importer.csvfiles import CsvFormatError, count_rows, read

    total = sum(count_rows(p) for p in (plans, customers, subscriptions))
    try:
        _run_import(settings, database_url, read(plans, customers, subscriptions), now, dry_run, batch, progress, total)
    except CsvFormatError as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@database_url_option
@click.pass_obj
def status(settings: Settings, database_url) -> None:
    """What is due, open, in dunning, failed, unpublished and dead."""
    settings = settings.with_overrides(database_url=database_url)
    _run("billing.status", "show", settings)


@main.command()
@database_url_option
@click.option("--subscriptions", default=20000, type=click.IntRange(1), show_default=True,
              help="Customers, one subscription each, on monthly, weekly and yearly plans in six currencies.")
@click.option("--rate", default=250, type=click.IntRange(1), show_default=True,
              help="The gateway's limit, calls per real second (the simulator answers 429 past it; the "
                   "worker's limiter keeps below it). Keep it below what this machine can charge per second "
                   "(about 250-300 on 2 cores, everything included), or the "
                   "machine, not the limit, sets the pace.")
@click.option("--seed", default=1, type=int, show_default=True,
              help="Seed of every random choice (signups, actions, declines, faults): same seed, same world.")
@click.option("--report", default="demo-report.html", show_default=True, type=click.Path(dir_okay=False),
              help="Where to write the HTML report (the event file goes beside it without Kafka).")
@click.option("--hour-seconds", default=None, type=click.FloatRange(min=0, min_open=True),
              help="Real seconds a simulated hour may last while invoices wait to be charged, so the gateway "
                   "takes at most RATE x HOUR-SECONDS charges per simulated hour. Default: sized so that this "
                   "cap is 1/40 of the subscriptions per hour (500 for 20,000), below the peak.")
@click.option("--step-minutes", default=60, type=click.IntRange(1, 1440), show_default=True,
              help="Simulated minutes per clock step on the peak days (the campaign day and the 1st of October).")
@click.option("--quiet-step-hours", default=6, type=click.IntRange(1, 24), show_default=True,
              help="Simulated hours per clock step on the other days.")
@click.option("--days", default=None, type=click.IntRange(1, 61),
              help="Simulate only the first DAYS days of the window (31 Aug .. 31 Oct 2026); default all of it.")
@click.option("--decline-rate", default=0.06, type=click.FloatRange(0, 1), show_default=True,
              help="Share of first charges declined (dead cards, flaky cards and random declines).")
@click.option("--timeout-rate", default=0.01, type=click.FloatRange(0, 1), show_default=True,
              help="Share of charges made by the gateway whose answer never arrives (the worker sees a timeout).")
@click.option("--error-rate", default=0.01, type=click.FloatRange(0, 1), show_default=True,
              help="Share of calls answered 5xx without charging.")
@click.option("--webhook-duplicate-rate", default=0.10, type=click.FloatRange(0, 1), show_default=True,
              help="Share of gateway webhooks delivered twice (all arrive late, in random order).")
@click.option("--concurrency", default=None, type=click.IntRange(1),
              help="Gateway calls in flight (default: sized from the rate).")
@click.option("--events", default=None, type=click.Path(dir_okay=False),
              help="The JSON-lines event file used without Kafka (default: beside the report).")
@click.option("--emails/--no-emails", default=True, show_default=True,
              help="After the run, send the emails of five customers (one per language) to a Mailpit the demo "
                   "starts (scripts/services/mailpit.sh); the report links to them.")
@click.option("--serve", is_flag=True, default=False,
              help="After the run, keep the HTTP API and its operator console (/console) running on the demo's "
                   "data, and print the console's URL and a read-only key; Ctrl-C stops it.")
@click.option("--serve-host", default="127.0.0.1", show_default=True, help="Address of --serve.")
@click.option("--serve-port", default=8080, type=click.IntRange(1, 65535), show_default=True, help="Port of --serve.")
@click.pass_obj
def demo(settings: Settings, database_url, serve, serve_host, serve_port, **options) -> None:
    """The first-of-the-month peak, end to end on a simulated clock, with a report.

    Drops and recreates its own database (BILLING_DATABASE_URL, or --database-url; "_demo" is
    appended to a name without "demo"), migrates it, and runs the real worker code against a
    gateway simulator: signups from a campaign on 1 September, a month of renewals, plan changes,
    cancellations, declines and dunning, timeouts, 5xx and duplicate webhooks. Redis and Kafka are
    used when BILLING_REDIS_URL / BILLING_KAFKA_BOOTSTRAP are set, else an in-process limiter and
    a JSON-lines event file. Ends with a report (terminal and HTML) and the invariant checks; the
    exit status is 1 when an invariant fails.
    """
    settings = settings.with_overrides(database_url=database_url)
    sys.exit(_run("billing.demo", "run", settings, serve=serve, serve_host=serve_host, serve_port=serve_port,
                  **options) or 0)


if __name__ == "__main__":  # pragma: no cover
    main()
