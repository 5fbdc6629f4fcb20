"""Settings from the environment; command-line flags may override them.

The one place where the driver reads its `BILLING_*` environment variables, and where each
setting's default is written: the command line's options default to None ("as the settings say").
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

# The repository root when running from a checkout; db/ lives there.
REPO_ROOT = Path(__file__).resolve().parents[2]


def _env_float(name: str, default: float | None) -> float | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be a number, got {raw!r}") from exc


def _env_int(name: str, default: int | None) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from exc


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "t", "yes", "y", "on"):
        return True
    if value in ("0", "false", "f", "no", "n", "off"):
        return False
    raise ValueError(f"{name} must be a boolean, got {raw!r}")


@dataclass(frozen=True)
class Settings:
    database_url: str = "postgresql://postgres@127.0.0.1:55432/billing"
    redis_url: str | None = None
    kafka_bootstrap: str | None = None
    kafka_topic: str = "billing.events"
    gateway_url: str = "http://127.0.0.1:8099"
    gateway_rate: int = 200
    webhook_secret: str | None = None
    # How long a claimed invoice stays with its worker (claim_charges p_lease), and the gateway
    # call's timeout, which must stay well inside the lease.
    charge_lease_seconds: float = 300.0
    gateway_timeout_seconds: float = 10.0
    # The rate limiter's tuning (docs/limiter.md); None: the limiter's own default.
    limiter_guard_ms: float | None = None
    limiter_max_late_ms: float | None = None
    limiter_pace_oversubscription: float | None = None
    # `billing worker` serves /metrics on this port when it is set.
    worker_metrics_port: int | None = None
    worker_metrics_host: str = "127.0.0.1"
    # Outbound webhooks (docs/events.md): request timeout, whether private and loopback targets
    # are allowed (off in production), the retry backoff and how long a delivery may keep
    # failing before its endpoint is disabled.
    webhook_timeout_seconds: float = 10.0
    webhook_allow_private: bool = False
    webhook_backoff_seconds: float = 5.0
    webhook_backoff_cap_seconds: float = 3600.0
    webhook_give_up_seconds: float = 86400.0
    # The admin routes (/webhook-endpoints) need `Authorization: Bearer <this>`; unset: refused.
    admin_token: str | None = None
    # Retention (docs/events.md): published outbox rows, finished webhook deliveries and stored
    # gateway webhooks older than this are deleted by the worker, in batches.
    retention_days: float = 30.0
    retention_interval_seconds: float = 300.0
    log_level: str = "INFO"
    log_json: bool = False
    db_dir: Path = field(default_factory=lambda: Path(os.environ.get("BILLING_DB_DIR", REPO_ROOT / "db")))

    @classmethod
    def from_env(cls) -> "Settings":
        env = os.environ
        return cls(
            database_url=env.get("BILLING_DATABASE_URL") or cls.database_url,
            redis_url=env.get("BILLING_REDIS_URL") or None,
            kafka_bootstrap=env.get("BILLING_KAFKA_BOOTSTRAP") or None,
            kafka_topic=env.get("BILLING_KAFKA_TOPIC") or cls.kafka_topic,
            gateway_url=env.get("BILLING_GATEWAY_URL") or cls.gateway_url,
            gateway_rate=_env_int("BILLING_GATEWAY_RATE", cls.gateway_rate),
            webhook_secret=env.get("BILLING_WEBHOOK_SECRET") or None,
            charge_lease_seconds=_env_float("BILLING_CHARGE_LEASE_SECONDS", cls.charge_lease_seconds),
            gateway_timeout_seconds=_env_float("BILLING_GATEWAY_TIMEOUT_SECONDS", cls.gateway_timeout_seconds),
            limiter_guard_ms=_env_float("BILLING_LIMITER_GUARD_MS", cls.limiter_guard_ms),
            limiter_max_late_ms=_env_float("BILLING_LIMITER_MAX_LATE_MS", cls.limiter_max_late_ms),
            limiter_pace_oversubscription=_env_float("BILLING_LIMITER_PACE_OVERSUBSCRIPTION",
                                                     cls.limiter_pace_oversubscription),
            worker_metrics_port=_env_int("BILLING_WORKER_METRICS_PORT", cls.worker_metrics_port),
            worker_metrics_host=env.get("BILLING_WORKER_METRICS_HOST") or cls.worker_metrics_host,
            webhook_timeout_seconds=_env_float("BILLING_WEBHOOK_TIMEOUT_SECONDS", cls.webhook_timeout_seconds),
            webhook_allow_private=_env_bool("BILLING_WEBHOOK_ALLOW_PRIVATE", cls.webhook_allow_private),
            webhook_backoff_seconds=_env_float("BILLING_WEBHOOK_BACKOFF_SECONDS", cls.webhook_backoff_seconds),
            webhook_backoff_cap_seconds=_env_float("BILLING_WEBHOOK_BACKOFF_CAP_SECONDS", cls.webhook_backoff_cap_seconds),
            webhook_give_up_seconds=_env_float("BILLING_WEBHOOK_GIVE_UP_SECONDS", cls.webhook_give_up_seconds),
            admin_token=env.get("BILLING_ADMIN_TOKEN") or None,
            retention_days=_env_float("BILLING_RETENTION_DAYS", cls.retention_days),
            retention_interval_seconds=_env_float("BILLING_RETENTION_INTERVAL_SECONDS", cls.retention_interval_seconds),
            log_level=env.get("BILLING_LOG_LEVEL") or cls.log_level,
            log_json=_env_bool("BILLING_LOG_JSON", cls.log_json),
        )

    def with_overrides(self, **kwargs) -> "Settings":
        return replace(self, **{k: v for k, v in kwargs.items() if v is not None})
