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
import typing
import urllib.parse
from dataclasses import MISSING, dataclass, field, fields, replace
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
    (hex digits count 4 bits each; base64 text with both cases 6)."""
    if re.fullmatch(r"[0-9a-fA-F]+", value) and not (re.search(r"[a-f]", value) and re.search(r"[A-F]", value)):
        return 4.0 * len(value)
    if re.fullmatch(r"[A-Za-z0-9+/_-]+=*", value) and re.search(r"[a-z]", value) and re.search(r"[A-Z]", value):
        # base64 (or base64url) text: 6 bits a character whichever of its 64 letters a random string
        # happens to use (about one token of 32 random bytes in 1,000 has no digit: counted by the classes it
        # shows, it read 247 bits and was refused)
        return 6.0 * len(value.rstrip("="))
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


def _choice(*allowed: str):
    """A parser of a setting that takes one of `allowed` (any case, spaces around ignored)."""
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in allowed:
            raise ValueError(f"must be {', '.join(allowed[:-1])} or {allowed[-1]}, got {raw!r}")
        return value
    return parse


def _between(low: int, high: int):
    """A parser of an int setting that takes low..high."""
    def parse(value: int) -> int:
        if not low <= value <= high:
            raise ValueError(f"must be {low}..{high}, got {value}")
        return value
    return parse


def env_name(field_name: str) -> str:
    """The environment variable of a setting: BILLING_ and the field's name in capitals."""
    return f"BILLING_{field_name.upper()}"


def setting(default=None, *, secret: bool = False, parse=None, fallback: str | None = None, default_factory=None):
    """A field of Settings, read by Settings.from_env from env_name(field) as its type says (str,
    int, float, bool, Path; empty = unset = the default). `secret`: may come from a file
    (BILLING_X_FILE, `_env_secret`); `parse`: applied to the value read or defaulted (a normal
    form, or a check whose ValueError gets the variable's name in front); `fallback`: the setting whose variable is read when this one's is unset."""
    meta = {"secret": secret, "parse": parse, "fallback": fallback}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


# The settings by concern, one frozen dataclass each; Settings inherits them all, so every field is
# still `settings.<name>` (and `Settings(<name>=...)`). Each is read from BILLING_<NAME> (from_env);
# no name is written twice.

@dataclass(frozen=True)
class DatabaseSettings:
    database_url: str = setting("postgresql://postgres@127.0.0.1:25432/billing", secret=True)
    # The migrations and function files (a checkout's db/; BILLING_DB_DIR).
    db_dir: Path = setting(default_factory=lambda: Path(os.environ.get(env_name("db_dir"), REPO_ROOT / "db")))
    redis_url: str | None = setting(secret=True)


@dataclass(frozen=True)
class KafkaSettings:
    kafka_bootstrap: str | None = setting()
    kafka_topic: str = setting("billing.events")
    # Kafka client security (compose: SASL_PLAINTEXT with SCRAM-SHA-512); None: plaintext, no auth.
    kafka_security_protocol: str | None = setting()
    kafka_sasl_mechanism: str | None = setting()
    kafka_username: str | None = setting()
    kafka_password: str | None = setting(secret=True)


@dataclass(frozen=True)
class GatewaySettings:
    gateway_url: str = setting("http://127.0.0.1:8099")
    gateway_rate: int = setting(200)
    webhook_secret: str | None = setting(secret=True)
    # The payment provider the worker charges through (docs/providers.md): sim (the simulator's
    # protocol at gateway_url) or stripe (its REST API at stripe_api_base with stripe_api_key;
    # webhooks at /webhooks/stripe signed with stripe_webhook_secret).
    gateway_provider: str = setting("sim", parse=lambda v: v.strip().lower())
    stripe_api_key: str | None = setting(secret=True)
    stripe_api_base: str = setting("https://api.stripe.com")
    stripe_webhook_secret: str | None = setting(secret=True)
    # A default card that expires before the customer's next renewal is announced this many days
    # before that renewal (PaymentMethodExpiring).
    card_expiry_notice_days: int = setting(7)
    # How long a claimed invoice stays with its worker (claim_charges p_lease), and the gateway
    # call's timeout, which must stay well inside the lease.
    charge_lease_seconds: float = setting(300.0)
    gateway_timeout_seconds: float = setting(10.0)
    # How long a charge worker lets payment results gather before recording them in one call
    # (billing.worker.recorder): batches at low rates; 0 records each at once when nothing else runs.
    record_linger_ms: float = setting(100.0)
    # The rate limiter's tuning (docs/limiter.md); None: the limiter's own default.
    limiter_guard_ms: float | None = setting()
    limiter_max_late_ms: float | None = setting()
    limiter_pace_oversubscription: float | None = setting()


@dataclass(frozen=True)
class WorkerSettings:
    # The batch claims per shard group on Citus (docs/scaling.md, "Batch claims"): "auto" takes them
    # when the database is distributed (billing.shard_groups names nodes), "on" always (on a single
    # PostgreSQL: its one group, 0), "off" never (create_due_invoices and claim_charges on the
    # database named by database_url). A worker leases groups for shard_lease_seconds (renewed every
    # third of it), at most shard_max_groups of them, and connects to the node of each with the user,
    # password and database of database_url.
    shard_claims: str = setting("auto", parse=_choice("auto", "on", "off"))
    shard_lease_seconds: float = setting(30.0)
    shard_max_groups: int = setting(10000)
    # `billing worker` serves /metrics on this port when it is set.
    worker_metrics_port: int | None = setting()
    worker_metrics_host: str = setting("127.0.0.1")
    # Retention (docs/events.md): published outbox rows, finished webhook deliveries and stored
    # gateway webhooks older than this are deleted by the worker, in batches.
    retention_days: float = setting(30.0)
    retention_interval_seconds: float = setting(300.0)
    log_level: str = setting("INFO")
    log_json: bool = setting(False)


@dataclass(frozen=True)
class WebhookSettings:
    # Outbound webhooks (docs/events.md): request timeout, whether private and loopback targets
    # are allowed (off in production), the retry backoff and how long a delivery may keep
    # failing before its endpoint is disabled.
    webhook_timeout_seconds: float = setting(10.0)
    webhook_allow_private: bool = setting(False)
    webhook_backoff_seconds: float = setting(5.0)
    webhook_backoff_cap_seconds: float = setting(3600.0)
    webhook_give_up_seconds: float = setting(86400.0)


@dataclass(frozen=True)
class UsageSettings:
    # Usage-based billing (docs/usage.md): the Kafka topic `billing usage consume` reads, its
    # consumer group and dead-letter topic; late events of an ended period are accepted for
    # usage_grace seconds after its end, times up to usage_max_skew seconds ahead of the clock; raw
    # events (and their exactly-once keys) are kept usage_retention days, older ones refused.
    usage_topic: str = setting("billing.usage")
    usage_dead_letter_topic: str = setting("billing.usage.dead")
    usage_group: str = setting("billing-usage")
    usage_grace: float = setting(3600.0)
    usage_max_skew: float = setting(300.0)
    usage_retention: float = setting(100.0)
    # Rating loops the renewal step runs at once (docs/usage.md "Two rating workers"): each call of
    # rate_usage takes cursors no other holds (SKIP LOCKED), so 2 use two cores on the first of the month.
    # On Citus the loops share the worker's shard groups (docs/usage.md "Per shard group (Citus)").
    usage_rating_workers: int = setting(2, parse=_between(1, 16))


@dataclass(frozen=True)
class ApiSettings:
    # `billing serve` (docs/security.md): per API key, requests per second and burst; timeouts
    # for the request head, the body and idle keep-alive connections; requests in flight.
    api_rate_per_key: float = setting(50.0)
    api_burst_per_key: int = setting(100)
    api_header_timeout_seconds: float = setting(10.0)
    api_body_timeout_seconds: float = setting(30.0)
    api_keep_alive_seconds: float = setting(5.0)
    api_max_concurrency: int = setting(256)
    # Connections one client address may hold at once (docs/http-api.md, "Serving limits").
    api_max_connections_per_address: int = setting(32)
    # Cost-aware limits (docs/security.md, "The cost of a request"): each key's budget of cost units
    # per second (a PDF costs 10, an HTML document 3, a console page 1 to 10); requests without a
    # valid credential per client address; the pool of the expensive reads (console, reports) and
    # its statement timeout.
    api_cost_per_key: float = setting(20.0)
    api_unauthenticated_rate_per_address: float = setting(20.0)
    api_unauthenticated_burst_per_address: int = setting(40)
    api_auth_failures_free: int = setting(10)  # failed authentications per address and minute before the backoff
    api_heavy_pool_size: int = setting(3)
    api_heavy_statement_timeout_ms: int = setting(5000)
    # The operator console under /console (docs/console.md): how long a login lasts, and whether
    # its cookies are Secure: "auto" (when the request came over https), "true" (TLS ends at a
    # proxy in front) or "false".
    console_session_hours: float = setting(12.0)
    console_cookie_secure: str = setting("auto", parse=_choice("auto", "true", "false"))


@dataclass(frozen=True)
class IssuerSettings:
    # The issuer printed on invoices and credit notes (docs/invoices.md); "\n" in the address
    # separates its lines (also written as the two characters \n in the variable).
    issuer_name: str = setting("Billing Engine Demo Ltd")
    issuer_address: str = setting("1 Example Street\n75001 Paris\nFrance", parse=lambda v: v.replace("\\n", "\n"))
    issuer_tax_id: str | None = setting()
    issuer_email: str | None = setting()
    # The brand of the emails and the portal.
    issuer_color: str = setting("#1a56db")
    issuer_logo_url: str | None = setting()


@dataclass(frozen=True)
class NotificationSettings:
    # Emails to customers and their portal (docs/customers.md): SMTP (BILLING_SMTP_URL; none: no
    # email is sent, the notifications wait), the sender (else the issuer's email), overriding
    # templates, the portal's public URL (links in the emails) and how long a link lasts.
    smtp_url: str | None = setting()
    smtp_username: str | None = setting()
    smtp_password: str | None = setting(secret=True)
    smtp_ca_file: str | None = setting()
    smtp_timeout_seconds: float = setting(20.0)
    smtp_from: str = setting("billing@localhost", fallback="issuer_email")
    notification_templates: str | None = setting()
    notification_backoff_seconds: float = setting(30.0)
    notification_max_attempts: int = setting(12)
    renewal_notice_days: int = setting(14)
    portal_url: str = setting("http://127.0.0.1:8080/portal", parse=lambda v: v.rstrip("/"))
    portal_link_hours: float = setting(72.0)
    portal_session_minutes: float = setting(60.0)


_READERS = {bool: _env_bool, int: _env_int, float: _env_float}


def _read(f, kind):
    """One setting from the environment (see `setting`)."""
    name, meta = env_name(f.name), f.metadata
    default = f.default_factory() if f.default is MISSING else f.default
    types = [t for t in typing.get_args(kind) if t is not type(None)] or [kind]
    if meta.get("secret"):
        value = _env_secret(name) or default
    elif types[0] in _READERS:
        value = _READERS[types[0]](name, default)
    else:  # str, Path: the text as is
        raw = os.environ.get(name) or (os.environ.get(env_name(meta["fallback"])) if meta.get("fallback") else None)
        value = types[0](raw) if raw else default
    if meta.get("parse") is None or value is None:
        return value
    try:
        return meta["parse"](value)
    except ValueError as exc:
        raise ValueError(f"{name} {exc}") from None


@dataclass(frozen=True)
class Settings(DatabaseSettings, KafkaSettings, GatewaySettings, WorkerSettings, WebhookSettings, UsageSettings,
               ApiSettings, IssuerSettings, NotificationSettings):
    """Every setting of the driver (the groups above), each from BILLING_<NAME>."""

    @classmethod
    def from_env(cls) -> "Settings":
        hints = typing.get_type_hints(cls)
        return cls(**{f.name: _read(f, hints[f.name]) for f in fields(cls)})

    def secret_problems(self) -> list[str]:
        """What `billing serve` / `billing worker` refuse: every configured secret (each webhook
        secret of a rotation list, the passwords inside the database and Redis URLs, the Kafka
        password) must be 32 characters or more and not a known placeholder. An absent secret is
        not a problem here: without a webhook secret the webhook endpoint refuses everything."""
        problems = []
        for i, secret in enumerate(s for s in (self.webhook_secret or "").split(",") if s):
            problems.append(secret_problem(f"{env_name('webhook_secret')} (secret {i + 1})", secret))
        for i, secret in enumerate(s for s in (self.stripe_webhook_secret or "").split(",") if s):
            problems.append(stripe_secret_problem(f"{env_name('stripe_webhook_secret')} (secret {i + 1})", secret))
        if self.stripe_api_key:
            problems.append(stripe_secret_problem(env_name("stripe_api_key"), self.stripe_api_key))
        for what, url in ((f"the password in {env_name('database_url')}", self.database_url),
                          (f"the password in {env_name('redis_url')}", self.redis_url)):
            for password in _url_passwords(url):
                problems.append(secret_problem(what, password))
        if self.kafka_password:
            problems.append(secret_problem(env_name("kafka_password"), self.kafka_password))
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
