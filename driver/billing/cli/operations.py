"""The operator's commands: `billing report`, `api-key`, `plan-options`, `plan-self-serve`, `events`, `usage`."""

from __future__ import annotations

import click

from billing.api_keys import SCOPES as _SCOPES
from billing.cli.base import database_url_option, main
from billing.config import Settings


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


@main.command("plan-self-serve")
@database_url_option
@click.argument("plan")
@click.argument("state", type=click.Choice(["on", "off"]))
@click.pass_obj
def plan_self_serve(settings: Settings, database_url, plan, state) -> None:
    """Say whether customers may sign up to PLAN themselves (a customer session's signup; docs/security.md).
    Off waits for the signups in flight: none is made after it returns."""
    from datetime import datetime, timezone

    import psycopg

    from billing import db

    settings = settings.with_overrides(database_url=database_url)
    try:
        with psycopg.connect(settings.database_url) as conn, conn.transaction():
            conn.execute(db.SET_ACTOR, {"actor": _cli_actor()})
            conn.execute(db.SET_PLAN_SELF_SERVE, {"code": plan, "self_serve": state == "on",
                                                  "now": datetime.now(timezone.utc)})
    except psycopg.Error as exc:
        raise click.ClickException(exc.diag.message_primary or str(exc)) from exc
    click.echo(f"{plan}: customers {'may' if state == 'on' else 'may not'} sign up to it themselves")


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
@click.option("--batch", default=20000, show_default=True, type=click.IntRange(1, 50000),
              help="Messages ingested per database transaction (one statement).")
@click.option("--exit-when-idle", default=None, type=float, metavar="SECONDS",
              help="Stop after this long without a message (default: run until SIGTERM).")
@click.option("--pipeline/--no-pipeline", default=True, show_default=True,
              help="Poll and read the next batch while this one's statement runs (--no-pipeline: one after the other).")
@click.pass_obj
def usage_consume(settings: Settings, database_url, batch, exit_when_idle, pipeline) -> None:
    """A member of the consumer group on $BILLING_USAGE_TOPIC: each batch ingested in one transaction,
    offsets committed after it, rejected events to $BILLING_USAGE_DEAD_LETTER_TOPIC with the reason."""
    settings = settings.with_overrides(database_url=database_url)
    from billing.clock import SystemClock
    from billing.usage import consume

    try:
        stats = consume(settings, SystemClock(), batch=batch, max_idle_seconds=exit_when_idle, pipeline=pipeline)
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
