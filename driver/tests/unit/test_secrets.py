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
