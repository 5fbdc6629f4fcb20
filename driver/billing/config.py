"""Settings from the environment (CONTRACT section 5); command-line flags may override them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

# The repository root when running from a checkout; db/ lives there.
REPO_ROOT = Path(__file__).resolve().parents[2]


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be a number, got {raw!r}") from exc


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from exc


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
        )

    def with_overrides(self, **kwargs) -> "Settings":
        return replace(self, **{k: v for k, v in kwargs.items() if v is not None})
