"""`billing import`: customers and subscriptions from another billing system (docs/import.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from billing.cli.base import database_url_option, main
from billing.config import Settings


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
