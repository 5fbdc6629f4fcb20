"""Secrets from the environment or from files, and the ones `billing serve` / `billing worker`
refuse (billing.config; docs/security.md). Pure logic: no services."""

from __future__ import annotations

import urllib.parse

import pytest

from billing.config import Settings, secret_problem

GOOD = "3vT9q-Lk2pW8xZr4Nb7Yc1Md6Fg0Hj5S"  # 32 characters, random-looking


def test_no_secret_has_a_default(monkeypatch):
    for name in ("BILLING_WEBHOOK_SECRET", "BILLING_WEBHOOK_SECRET_FILE", "BILLING_KAFKA_PASSWORD",
                 "BILLING_REDIS_URL", "BILLING_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    s = Settings.from_env()
    assert s.webhook_secret is None and s.kafka_password is None and s.redis_url is None
    assert urllib.parse.urlsplit(s.database_url).password is None  # the local default has no password


def test_a_secret_may_come_from_a_file(monkeypatch, tmp_path):
    path = tmp_path / "webhook"
    path.write_text(GOOD + "\n")
    monkeypatch.delenv("BILLING_WEBHOOK_SECRET", raising=False)
    monkeypatch.setenv("BILLING_WEBHOOK_SECRET_FILE", str(path))
    assert Settings.from_env().webhook_secret == GOOD  # the trailing newline of `echo > file` dropped
    db = tmp_path / "db"
    db.write_text(f"postgresql://billing_api:{GOOD}@db/billing")
    monkeypatch.setenv("BILLING_DATABASE_URL_FILE", str(db))
    monkeypatch.delenv("BILLING_DATABASE_URL", raising=False)
    s = Settings.from_env()
    assert s.database_url.endswith("@db/billing") and s.secret_problems() == []


def test_both_the_variable_and_its_file_is_an_error(monkeypatch, tmp_path):
    path = tmp_path / "s"
    path.write_text(GOOD)
    monkeypatch.setenv("BILLING_WEBHOOK_SECRET", GOOD)
    monkeypatch.setenv("BILLING_WEBHOOK_SECRET_FILE", str(path))
    with pytest.raises(ValueError, match="not both"):
        Settings.from_env()


def test_an_unreadable_file_is_an_error(monkeypatch, tmp_path):
    monkeypatch.delenv("BILLING_WEBHOOK_SECRET", raising=False)
    monkeypatch.setenv("BILLING_WEBHOOK_SECRET_FILE", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="BILLING_WEBHOOK_SECRET_FILE"):
        Settings.from_env()


@pytest.mark.parametrize("value", ["change-me", "CHANGEME", "secret", "password", "whsec_test", "...",
                                   "x" * 64, "abcabcabcabcabcabcabcabcabcabcabc", "your-secret-goes-here-0123456789abcdef",
                                   "example-0123456789abcdefghijklmnopq"])
def test_placeholders_are_refused_whatever_their_length(value):
    assert "placeholder" in secret_problem("S", value)


def test_short_secrets_are_refused():
    assert "shorter than 32" in secret_problem("S", GOOD[:31])
    assert secret_problem("S", GOOD) is None


def test_every_configured_secret_is_checked_and_none_is_shown():
    s = Settings(webhook_secret=f"{GOOD},change-me", database_url="postgresql://u:billing@h/db",
                 redis_url="redis://:short@h:6379/0", kafka_password="kafka")
    problems = s.secret_problems()
    assert len(problems) == 4, problems
    assert "change-me" not in " ".join(problems)  # the problem, never the value
    assert Settings(database_url="postgresql://postgres@127.0.0.1:5432/billing").secret_problems() == []
    assert Settings(database_url=f"host=db user=u password={GOOD} dbname=billing").secret_problems() == []
    assert Settings(database_url="host=db user=u password=billing dbname=billing").secret_problems() != []


def test_kafka_security_settings_reach_the_client_config():
    s = Settings(kafka_security_protocol="SASL_SSL", kafka_sasl_mechanism="SCRAM-SHA-512",
                 kafka_username="billing_relay", kafka_password=GOOD)
    assert s.kafka_config() == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                "sasl.username": "billing_relay", "sasl.password": GOOD}
    assert Settings().kafka_config() == {}


def test_api_keys_are_random_hashed_and_carry_their_id():
    from billing.api.security import hash_key, key_id_of, looks_like_key, new_api_key

    keys = [new_api_key() for _ in range(500)]
    assert len({k.key for k in keys}) == 500
    for k in keys:  # the secret is URL-safe base64 and may itself contain "_"
        assert looks_like_key(k.key) and key_id_of(k.key) == k.key_id and len(k.key_hash) == 32
        assert len(k.key) - len(k.key_id) - 1 >= 43  # 32 random bytes
    assert hash_key("bk_abcdefgh_x") != hash_key("bk_abcdefgh_y") and key_id_of("not a key") == ""


# -- issue 27, finding 8: long but guessable secrets, passwords in a URL's query, webhook secrets --

@pytest.mark.parametrize("value", ["passwordpasswordpasswordpassword1", "12345678901234567890123456789012",
                                   "abcdefghijklmnopqrstuvwxyzabcdef", "qwertyuiopasdfghjklzxcvbnmqwerty",
                                   "billingbillingbilling2026billing!"])
def test_long_but_guessable_secrets_are_refused(value):
    problem = secret_problem("S", value)
    assert problem is not None and value not in problem


def test_random_secrets_and_passphrases_pass():
    import secrets as stdlib_secrets

    for _ in range(20):
        assert secret_problem("S", stdlib_secrets.token_urlsafe(32)) is None
        assert secret_problem("S", stdlib_secrets.token_hex(16)) is None
    assert secret_problem("S", "correct horse battery staple under violet lanterns") is None


def test_a_password_in_the_database_urls_query_is_checked():
    assert Settings(database_url="postgresql://billing_api@db/billing?password=billing").secret_problems() != []
    assert Settings(database_url="postgresql://db/billing?sslmode=require&password=passwordpasswordpassword12"
                    ).secret_problems() != []
    assert Settings(database_url=f"postgresql://u@db/billing?password={GOOD}").secret_problems() == []
    # both forms: each is judged
    assert len(Settings(database_url=f"postgresql://u:{GOOD}@db/billing?password=short").secret_problems()) == 1
    assert Settings(redis_url="redis://db:6379/0?password=redis").secret_problems() != []


def test_operator_webhook_secrets_need_32_bytes_of_entropy():
    import secrets as stdlib_secrets

    from billing.config import charset_bits, webhook_secret_problem

    assert webhook_secret_problem("a" * 16) is not None
    assert webhook_secret_problem("s" * 64) is not None
    assert webhook_secret_problem(GOOD) is not None  # 32 random-looking characters: about 190 bits, not 256
    assert webhook_secret_problem("whsec_" + "ab" * 40) is not None
    assert webhook_secret_problem(stdlib_secrets.token_urlsafe(32)) is None  # 256 bits
    # a random token without a digit (make test drew this one): base64 all the same
    assert webhook_secret_problem("SDhaPJPjQkfXbBjsqhU-nFppsw-wvysjeXZysVVSEjQ") is None
    assert all(charset_bits(stdlib_secrets.token_urlsafe(32)) >= 256 for _ in range(20000))
    assert all(webhook_secret_problem(stdlib_secrets.token_urlsafe(32)) is None for _ in range(50))
    assert webhook_secret_problem(stdlib_secrets.token_urlsafe(31)) is not None  # 248 bits
    assert webhook_secret_problem("whsec_" + stdlib_secrets.token_urlsafe(32)) is None
    assert webhook_secret_problem(stdlib_secrets.token_hex(32)) is None  # 64 hex characters
    assert webhook_secret_problem(stdlib_secrets.token_hex(31)) is not None
