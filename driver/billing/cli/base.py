"""The `billing` command's group and what its command modules share: the database URL option, the
lazy call of a module's function, the refusal to start on weak secrets."""

from __future__ import annotations

import click

from billing.config import Settings
from billing.logs import setup_logging


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
