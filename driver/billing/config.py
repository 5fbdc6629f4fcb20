"""Settings from the environment; command-line flags may override them.

The one place where the driver reads its `BILLING_*` environment variables, and where each
setting's default is written: the command line's options default to None ("as the settings say").

Secrets (the database and Redis URLs, which may hold passwords, the webhook secrets, the Stripe
API key, the Kafka password) have no default and may come from a file: `BILLING_X_FILE=/run/secrets/x` instead of
`BILLING_X` (as Docker and Kubernetes secrets are mounted; setting both is an error).
`Settings.secret_problems` says which secrets `billing serve` and `billing worker` refuse:
shorter than 32 characters, or a known placeholder (docs/security.md).
"""

from __future__ import annotations

import math
import os
import re
import urllib.parse
from dataclasses import dataclass, field, replace
from pathlib import Path

# The repository root when running from a checkout; db/ lives there.
REPO_ROOT = Path(__file__).resolve().parents[2]


def event_schema_dir() -> Path | None:
    """BILLING_EVENT_SCHEMA_DIR: a folder of event schemas to use instead of the package's own
    (billing/events/catalogue, the same files as docs/events)."""
    raw = os.environ.get("BILLING_EVENT_SCHEMA_DIR")
    return Path(raw) if raw else None


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


def _env_secret(name: str) -> str | None:
    """BILLING_X, or the content of the file BILLING_X_FILE names (one trailing newline dropped)."""
    raw = os.environ.get(name) or None
    path = os.environ.get(f"{name}_FILE") or None
    if raw is not None and path is not None:
        raise ValueError(f"set {name} or {name}_FILE, not both")
    if path is None:
        return raw
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{name}_FILE: cannot read {path}: {exc.strerror}") from exc
    text = text[:-1] if text.endswith("\n") else text
    text = text[:-1] if text.endswith("\r") else text
    return text or None


MIN_SECRET_LENGTH = 32
# Values people leave in configuration files; refused whatever their length.
_PLACEHOLDERS = re.compile(
    r"change[-_ ]?me|replace[-_ ]?me|placeholder|your[-_ ]?(?:secret|password|key)|example|dummy|"
    r"^(?:secret|password|passwd|billing|postgres|redis|kafka|admin|default|test|whsec_test|\.\.\.)$",
    re.IGNORECASE)
# The refusal list: words that make a long secret guessable whatever surrounds them (zxcvbn knows
# the common passwords and dictionary words; these are the project's own and the usual fillers).
_REFUSED_WORDS = ("billing", "postgres", "redis", "kafka", "stripe", "whsec", "secret", "password", "passwd",
                  "letmein", "qwerty", "admin", "changeme", "default", "webhook", "token")
# zxcvbn's estimate of the guesses an attacker needs, as log10: 24 is about 80 bits. A random
# 32-character secret scores about 32; "passwordpasswordpasswordpassword1" 4.
MIN_GUESSES_LOG10 = 24.0
# Operator-supplied webhook endpoint secrets: at least 32 bytes of entropy (docs/security.md).
MIN_WEBHOOK_SECRET_BITS = 256


def guesses_log10(value: str) -> float:
    """zxcvbn's estimate (log10 of the guesses) for the first 100 characters (it is quadratic)."""
    from zxcvbn import zxcvbn

    return float(zxcvbn(value[:100], user_inputs=list(_REFUSED_WORDS))["guesses_log10"])


def charset_bits(value: str) -> float:
    """An upper bound of a string's entropy from its length and the character classes it uses
    (hex digits count 4 bits each; base64 6)."""
    if re.fullmatch(r"[0-9a-fA-F]+", value) and not (re.search(r"[a-f]", value) and re.search(r"[A-F]", value)):
        return 4.0 * len(value)
    size = 0
    for pattern, n in ((r"[a-z]", 26), (r"[A-Z]", 26), (r"[0-9]", 10), (r"[-_]", 2), (r"[^A-Za-z0-9_-]", 32)):
        if re.search(pattern, value):
            size += n
    return len(value) * math.log2(max(size, 2))


def secret_problem(what: str, value: str) -> str | None:
    """Why `value` is not an acceptable secret, or None (never says the value itself): a known
    placeholder, too few distinct characters, shorter than 32, or guessable (zxcvbn's estimate
    below MIN_GUESSES_LOG10: repeats, sequences, keyboard walks, dictionary words)."""
    if _PLACEHOLDERS.search(value):
        return f"{what} is a known placeholder"
    if len(set(value)) < 6:
        return f"{what} looks like a placeholder (too few distinct characters)"
    if len(value) < MIN_SECRET_LENGTH:
        return f"{what} is shorter than {MIN_SECRET_LENGTH} characters"
    if guesses_log10(value) < MIN_GUESSES_LOG10:
        return f"{what} is guessable (repeats, sequences or common words: use a random secret)"
    return None


def webhook_secret_problem(value: str) -> str | None:
    """Why an operator-supplied webhook endpoint secret is refused: 32 bytes of entropy or more
    (a 43-character base64 or 64-character hex random string), and a good secret otherwise."""
    bare = _STRIPE_PREFIX.sub("", value, count=1)
    problem = secret_problem("the secret", bare)
    if problem:
        return problem
    if charset_bits(bare) < MIN_WEBHOOK_SECRET_BITS:
        return (f"the secret carries less than {MIN_WEBHOOK_SECRET_BITS // 8} bytes of entropy "
                "(use 32 random bytes: 43 base64 or 64 hex characters)")
    return None


_STRIPE_PREFIX = re.compile(r"^(?:sk|rk)_(?:live|test)_|^whsec_")


def stripe_secret_problem(what: str, value: str) -> str | None:
    """A Stripe key or webhook secret: the part after its well-known prefix (sk_live_, whsec_...)
    must itself be a good secret (a prefix adds no secrecy)."""
    return secret_problem(what, _STRIPE_PREFIX.sub("", value, count=1)) or secret_problem(what, value)


def _url_passwords(url: str | None) -> list[str]:
    """Every password a database or Redis URL carries: the URL's own (user:password@), a
    `password=` query parameter (libpq reads it; it overrides the other), and a key=value
    connection string's `password=`."""
    if not url:
        return []
    found: list[str] = []
    if "://" in url:
        parts = urllib.parse.urlsplit(url)
        if parts.password:
            found.append(urllib.parse.unquote(parts.password))
        for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
            if key.lower() in ("password", "pass", "passwd"):
                found.append(value)
        return found
    for m in re.finditer(r"(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", url):  # key=value connection string
        found.append(m.group(1).strip("'"))
    return found


def _url_password(url: str | None) -> str | None:
    passwords = _url_passwords(url)
    return passwords[0] if passwords else None


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


def _shard_claims(raw: str | None) -> str:
    value = (raw or "auto").strip().lower()
    if value not in ("auto", "on", "off"):
        raise ValueError(f"BILLING_SHARD_CLAIMS must be auto, on or off, got {raw!r}")
    return value


def _console_cookie_secure(raw: str | None) -> str:
    value = (raw or "auto").strip().lower()
    if value not in ("auto", "true", "false"):
        raise ValueError(f"BILLING_CONSOLE_COOKIE_SECURE must be auto, true or false, got {raw!r}")
    return value


@dataclass(frozen=True)
class Settings:
    database_url: str = "postgresql://postgres@127.0.0.1:25432/billing"
    redis_url: str | None = None
    kafka_bootstrap: str | None = None
    kafka_topic: str = "billing.events"
    # Kafka client security (compose: SASL_PLAINTEXT with SCRAM-SHA-512); None: plaintext, no auth.
    kafka_security_protocol: str | None = None
    kafka_sasl_mechanism: str | None = None
    kafka_username: str | None = None
    kafka_password: str | None = None
    gateway_url: str = "http://127.0.0.1:8099"
    gateway_rate: int = 200
    webhook_secret: str | None = None
    # The payment provider the worker charges through (docs/providers.md): sim (the simulator's
    # protocol at gateway_url) or stripe (its REST API at stripe_api_base with stripe_api_key;
    # webhooks at /webhooks/stripe signed with stripe_webhook_secret).
    gateway_provider: str = "sim"
    stripe_api_key: str | None = None
    stripe_api_base: str = "https://api.stripe.com"
    stripe_webhook_secret: str | None = None
    # A default card that expires before the customer's next renewal is announced this many days
    # before that renewal (PaymentMethodExpiring).
    card_expiry_notice_days: int = 7
    # How long a claimed invoice stays with its worker (claim_charges p_lease), and the gateway
    # call's timeout, which must stay well inside the lease.
    charge_lease_seconds: float = 300.0
    gateway_timeout_seconds: float = 10.0
    # The batch claims per shard group on Citus (docs/scaling.md, "Batch claims"): "auto" takes them
    # when the database is distributed (billing.shard_groups names nodes), "on" always (on a single
    # PostgreSQL: its one group, 0), "off" never (create_due_invoices and claim_charges on the
    # database named by database_url). A worker leases groups for shard_lease_seconds (renewed every
    # third of it), at most shard_max_groups of them, and connects to the node of each with the user,
    # password and database of database_url.
    shard_claims: str = "auto"
    shard_lease_seconds: float = 30.0
    shard_max_groups: int = 10000
    # How long a charge worker lets payment results gather before recording them in one call
    # (billing.worker.recorder): batches at low rates; 0 records each at once when nothing else runs.
    record_linger_ms: float = 100.0
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
    # Retention (docs/events.md): published outbox rows, finished webhook deliveries and stored
    # gateway webhooks older than this are deleted by the worker, in batches.
    retention_days: float = 30.0
    retention_interval_seconds: float = 300.0
    # Usage-based billing (docs/usage.md): the Kafka topic `billing usage consume` reads, its
    # consumer group and dead-letter topic; late events of an ended period are accepted for
    # usage_grace seconds after its end, times up to usage_max_skew seconds ahead of the clock; raw
    # events (and their exactly-once keys) are kept usage_retention days, older ones refused.
    usage_topic: str = "billing.usage"
    usage_dead_letter_topic: str = "billing.usage.dead"
    usage_group: str = "billing-usage"
    usage_grace: float = 3600.0
    usage_max_skew: float = 300.0
    usage_retention: float = 100.0
    log_level: str = "INFO"
    log_json: bool = False
    # `billing serve` (docs/security.md): per API key, requests per second and burst; timeouts
    # for the request head, the body and idle keep-alive connections; requests in flight.
    api_rate_per_key: float = 50.0
    api_burst_per_key: int = 100
    api_header_timeout_seconds: float = 10.0
    api_body_timeout_seconds: float = 30.0
    api_keep_alive_seconds: float = 5.0
    api_max_concurrency: int = 256
    # Connections one client address may hold at once (docs/http-api.md, "Serving limits").
    api_max_connections_per_address: int = 32
    # Cost-aware limits (docs/security.md, "The cost of a request"): each key's budget of cost units
    # per second (a PDF costs 10, an HTML document 3, a console page 1 to 10); requests without a
    # valid credential per client address; the pool of the expensive reads (console, reports) and
    # its statement timeout.
    api_cost_per_key: float = 20.0
    api_unauthenticated_rate_per_address: float = 20.0
    api_unauthenticated_burst_per_address: int = 40
    api_auth_failures_free: int = 10  # failed authentications per address and minute before the backoff
    api_heavy_pool_size: int = 3
    api_heavy_statement_timeout_ms: int = 5000
    # The operator console under /console (docs/console.md): how long a login lasts, and whether
    # its cookies are Secure: "auto" (when the request came over https), "true" (TLS ends at a
    # proxy in front) or "false".
    console_session_hours: float = 12.0
    console_cookie_secure: str = "auto"
    # The issuer printed on invoices and credit notes (docs/invoices.md); "\n" in the address
    # separates its lines.
    issuer_name: str = "Billing Engine Demo Ltd"
    issuer_address: str = "1 Example Street\n75001 Paris\nFrance"
    issuer_tax_id: str | None = None
    issuer_email: str | None = None
    # Emails to customers and their portal (docs/customers.md): SMTP (BILLING_SMTP_URL; none: no
    # email is sent, the notifications wait), the sender, the brand, overriding templates, the
    # portal's public URL (links in the emails) and how long a link lasts.
    issuer_color: str = "#1a56db"
    issuer_logo_url: str | None = None
    smtp_url: str | None = None
    smtp_username: str | None = None
    smtp_password: str | None = None
    smtp_ca_file: str | None = None
    smtp_timeout_seconds: float = 20.0
    smtp_from: str = "billing@localhost"
    notification_templates: str | None = None
    notification_backoff_seconds: float = 30.0
    notification_max_attempts: int = 12
    renewal_notice_days: int = 14
    portal_url: str = "http://127.0.0.1:8080/portal"
    portal_link_hours: float = 72.0
    portal_session_minutes: float = 60.0
    db_dir: Path = field(default_factory=lambda: Path(os.environ.get("BILLING_DB_DIR", REPO_ROOT / "db")))

    @classmethod
    def from_env(cls) -> "Settings":
        env = os.environ
        return cls(
            database_url=_env_secret("BILLING_DATABASE_URL") or cls.database_url,
            redis_url=_env_secret("BILLING_REDIS_URL"),
            kafka_bootstrap=env.get("BILLING_KAFKA_BOOTSTRAP") or None,
            kafka_topic=env.get("BILLING_KAFKA_TOPIC") or cls.kafka_topic,
            kafka_security_protocol=env.get("BILLING_KAFKA_SECURITY_PROTOCOL") or None,
            kafka_sasl_mechanism=env.get("BILLING_KAFKA_SASL_MECHANISM") or None,
            kafka_username=env.get("BILLING_KAFKA_USERNAME") or None,
            kafka_password=_env_secret("BILLING_KAFKA_PASSWORD"),
            gateway_url=env.get("BILLING_GATEWAY_URL") or cls.gateway_url,
            gateway_rate=_env_int("BILLING_GATEWAY_RATE", cls.gateway_rate),
            webhook_secret=_env_secret("BILLING_WEBHOOK_SECRET"),
            gateway_provider=(env.get("BILLING_GATEWAY_PROVIDER") or cls.gateway_provider).strip().lower(),
            stripe_api_key=_env_secret("BILLING_STRIPE_API_KEY"),
            stripe_api_base=env.get("BILLING_STRIPE_API_BASE") or cls.stripe_api_base,
            stripe_webhook_secret=_env_secret("BILLING_STRIPE_WEBHOOK_SECRET"),
            card_expiry_notice_days=_env_int("BILLING_CARD_EXPIRY_NOTICE_DAYS", cls.card_expiry_notice_days),
            charge_lease_seconds=_env_float("BILLING_CHARGE_LEASE_SECONDS", cls.charge_lease_seconds),
            gateway_timeout_seconds=_env_float("BILLING_GATEWAY_TIMEOUT_SECONDS", cls.gateway_timeout_seconds),
            record_linger_ms=_env_float("BILLING_RECORD_LINGER_MS", cls.record_linger_ms),
            shard_claims=_shard_claims(env.get("BILLING_SHARD_CLAIMS")),
            shard_lease_seconds=_env_float("BILLING_SHARD_LEASE_SECONDS", cls.shard_lease_seconds),
            shard_max_groups=_env_int("BILLING_SHARD_MAX_GROUPS", cls.shard_max_groups),
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
            retention_days=_env_float("BILLING_RETENTION_DAYS", cls.retention_days),
            retention_interval_seconds=_env_float("BILLING_RETENTION_INTERVAL_SECONDS", cls.retention_interval_seconds),
            usage_topic=env.get("BILLING_USAGE_TOPIC") or cls.usage_topic,
            usage_dead_letter_topic=env.get("BILLING_USAGE_DEAD_LETTER_TOPIC") or cls.usage_dead_letter_topic,
            usage_group=env.get("BILLING_USAGE_GROUP") or cls.usage_group,
            usage_grace=_env_float("BILLING_USAGE_GRACE", cls.usage_grace),
            usage_max_skew=_env_float("BILLING_USAGE_MAX_SKEW", cls.usage_max_skew),
            usage_retention=_env_float("BILLING_USAGE_RETENTION", cls.usage_retention),
            log_level=env.get("BILLING_LOG_LEVEL") or cls.log_level,
            log_json=_env_bool("BILLING_LOG_JSON", cls.log_json),
            api_rate_per_key=_env_float("BILLING_API_RATE_PER_KEY", cls.api_rate_per_key),
            api_burst_per_key=_env_int("BILLING_API_BURST_PER_KEY", cls.api_burst_per_key),
            api_header_timeout_seconds=_env_float("BILLING_API_HEADER_TIMEOUT_SECONDS", cls.api_header_timeout_seconds),
            api_body_timeout_seconds=_env_float("BILLING_API_BODY_TIMEOUT_SECONDS", cls.api_body_timeout_seconds),
            api_keep_alive_seconds=_env_float("BILLING_API_KEEP_ALIVE_SECONDS", cls.api_keep_alive_seconds),
            api_max_concurrency=_env_int("BILLING_API_MAX_CONCURRENCY", cls.api_max_concurrency),
            api_max_connections_per_address=_env_int("BILLING_API_MAX_CONNECTIONS_PER_ADDRESS",
                                                     cls.api_max_connections_per_address),
            api_cost_per_key=_env_float("BILLING_API_COST_PER_KEY", cls.api_cost_per_key),
            api_unauthenticated_rate_per_address=_env_float("BILLING_API_UNAUTHENTICATED_RATE_PER_ADDRESS",
                                                            cls.api_unauthenticated_rate_per_address),
            api_unauthenticated_burst_per_address=_env_int("BILLING_API_UNAUTHENTICATED_BURST_PER_ADDRESS",
                                                           cls.api_unauthenticated_burst_per_address),
            api_auth_failures_free=_env_int("BILLING_API_AUTH_FAILURES_FREE", cls.api_auth_failures_free),
            api_heavy_pool_size=_env_int("BILLING_API_HEAVY_POOL_SIZE", cls.api_heavy_pool_size),
            api_heavy_statement_timeout_ms=_env_int("BILLING_API_HEAVY_STATEMENT_TIMEOUT_MS",
                                                    cls.api_heavy_statement_timeout_ms),
            console_session_hours=_env_float("BILLING_CONSOLE_SESSION_HOURS", cls.console_session_hours),
            console_cookie_secure=_console_cookie_secure(env.get("BILLING_CONSOLE_COOKIE_SECURE")),
            issuer_name=env.get("BILLING_ISSUER_NAME") or cls.issuer_name,
            issuer_address=(env.get("BILLING_ISSUER_ADDRESS") or cls.issuer_address).replace("\\n", "\n"),
            issuer_tax_id=env.get("BILLING_ISSUER_TAX_ID") or None,
            issuer_email=env.get("BILLING_ISSUER_EMAIL") or None,
            issuer_color=env.get("BILLING_ISSUER_COLOR") or cls.issuer_color,
            issuer_logo_url=env.get("BILLING_ISSUER_LOGO_URL") or None,
            smtp_url=env.get("BILLING_SMTP_URL") or None,
            smtp_username=env.get("BILLING_SMTP_USERNAME") or None,
            smtp_password=_env_secret("BILLING_SMTP_PASSWORD"),
            smtp_ca_file=env.get("BILLING_SMTP_CA_FILE") or None,
            smtp_timeout_seconds=_env_float("BILLING_SMTP_TIMEOUT_SECONDS", cls.smtp_timeout_seconds),
            smtp_from=env.get("BILLING_SMTP_FROM") or env.get("BILLING_ISSUER_EMAIL") or cls.smtp_from,
            notification_templates=env.get("BILLING_NOTIFICATION_TEMPLATES") or None,
            notification_backoff_seconds=_env_float("BILLING_NOTIFICATION_BACKOFF_SECONDS", cls.notification_backoff_seconds),
            notification_max_attempts=_env_int("BILLING_NOTIFICATION_MAX_ATTEMPTS", cls.notification_max_attempts),
            renewal_notice_days=_env_int("BILLING_RENEWAL_NOTICE_DAYS", cls.renewal_notice_days),
            portal_url=(env.get("BILLING_PORTAL_URL") or cls.portal_url).rstrip("/"),
            portal_link_hours=_env_float("BILLING_PORTAL_LINK_HOURS", cls.portal_link_hours),
            portal_session_minutes=_env_float("BILLING_PORTAL_SESSION_MINUTES", cls.portal_session_minutes),
        )

    def secret_problems(self) -> list[str]:
        """What `billing serve` / `billing worker` refuse: every configured secret (each webhook
        secret of a rotation list, the passwords inside the database and Redis URLs, the Kafka
        password) must be 32 characters or more and not a known placeholder. An absent secret is
        not a problem here: without a webhook secret the webhook endpoint refuses everything."""
        problems = []
        for i, secret in enumerate(s for s in (self.webhook_secret or "").split(",") if s):
            problems.append(secret_problem(f"BILLING_WEBHOOK_SECRET (secret {i + 1})", secret))
        for i, secret in enumerate(s for s in (self.stripe_webhook_secret or "").split(",") if s):
            problems.append(stripe_secret_problem(f"BILLING_STRIPE_WEBHOOK_SECRET (secret {i + 1})", secret))
        if self.stripe_api_key:
            problems.append(stripe_secret_problem("BILLING_STRIPE_API_KEY", self.stripe_api_key))
        for what, url in (("the password in BILLING_DATABASE_URL", self.database_url),
                          ("the password in BILLING_REDIS_URL", self.redis_url)):
            for password in _url_passwords(url):
                problems.append(secret_problem(what, password))
        if self.kafka_password:
            problems.append(secret_problem("BILLING_KAFKA_PASSWORD", self.kafka_password))
        return [p for p in problems if p]

    def kafka_config(self) -> dict:
        """librdkafka settings for the configured security (empty: plaintext without auth)."""
        conf = {}
        if self.kafka_security_protocol:
            conf["security.protocol"] = self.kafka_security_protocol
        if self.kafka_sasl_mechanism:
            conf["sasl.mechanism"] = self.kafka_sasl_mechanism
        if self.kafka_username:
            conf["sasl.username"] = self.kafka_username
        if self.kafka_password:
            conf["sasl.password"] = self.kafka_password
        return conf

    def with_overrides(self, **kwargs) -> "Settings":
        return replace(self, **{k: v for k, v in kwargs.items() if v is not None})
