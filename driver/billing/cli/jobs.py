"""The long-running processes and the whole-system views: `billing worker`, `serve`, `gateway-sim`,
`status`, `demo`."""

from __future__ import annotations

import sys

import click

from billing.cli.base import _refuse_weak_secrets, _run, database_url_option, main
from billing.config import Settings


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
