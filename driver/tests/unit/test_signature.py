"""The webhook `v1` signature (billing.signing): building and checking it, without a server, and
every signer and verifier of the house going through it."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from billing import signing
from billing.signing import SIGNATURE_TOLERANCE, STRIPE, SignatureError, sign, signature_header, verify

verify_signature = verify  # the Billing-Signature scheme by default

SECRET = "s" * 40
BODY = b'{"eventId":"e1","idempotencyKey":"k","status":"succeeded"}'
NOW = 1_800_000_000


def header(secret: str = SECRET, t: int = NOW, body: bytes = BODY) -> str:
    return f"t={t},v1={sign(secret, t, body)}"


def test_sign_is_hmac_sha256_of_t_dot_body():
    expected = hmac.new(SECRET.encode(), f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert sign(SECRET, NOW, BODY) == expected


def test_a_valid_signature_passes():
    verify_signature(header(), BODY, [SECRET], NOW)


@pytest.mark.parametrize("skew", [-SIGNATURE_TOLERANCE, SIGNATURE_TOLERANCE])
def test_the_tolerance_is_inclusive_both_ways(skew):
    verify_signature(header(t=NOW + skew), BODY, [SECRET], NOW)


@pytest.mark.parametrize("skew", [-SIGNATURE_TOLERANCE - 1, SIGNATURE_TOLERANCE + 1])
def test_stale_and_future_signatures_fail(skew):
    with pytest.raises(SignatureError) as err:
        verify_signature(header(t=NOW + skew), BODY, [SECRET], NOW)
    assert "away from this server's clock" in err.value.message


def test_a_tampered_body_fails_at_every_byte():
    h = header()
    for i in range(len(BODY)):
        tampered = BODY[:i] + bytes([BODY[i] ^ 1]) + BODY[i + 1:]
        with pytest.raises(SignatureError):
            verify_signature(h, tampered, [SECRET], NOW)


def test_another_secret_fails():
    with pytest.raises(SignatureError):
        verify_signature(header(secret="x" * 40), BODY, [SECRET], NOW)


def test_rotation_accepts_any_configured_secret_and_any_v1():
    old, new = "o" * 40, "n" * 40
    verify_signature(header(secret=old), BODY, [new, old], NOW)
    both = f"t={NOW},v1={'0' * 64},v1={sign(new, NOW, BODY)}"
    verify_signature(both, BODY, [new], NOW)


@pytest.mark.parametrize("bad", [None, "", "v1=abc", f"t={NOW}", "t=abc,v1=00", f"t=-{NOW},v1=00",
                                 "t=1" + "0" * 20 + ",v1=00"])
def test_malformed_headers_fail(bad):
    with pytest.raises(SignatureError) as err:
        verify_signature(bad, BODY, [SECRET], NOW)
    assert "Billing-Signature" in err.value.message


def test_no_secret_configured_refuses_everything():
    with pytest.raises(SignatureError):
        verify_signature(header(), BODY, [], NOW)


def test_the_header_names_its_scheme_in_every_refusal():
    with pytest.raises(SignatureError, match="Stripe-Signature"):
        verify(None, BODY, [SECRET], NOW, scheme=STRIPE)
    with pytest.raises(SignatureError, match="BILLING_STRIPE_WEBHOOK_SECRET"):
        verify(header(), BODY, [], NOW, scheme=STRIPE)
    verify(header(), BODY, [SECRET], NOW, scheme=STRIPE)  # one scheme under two names


def test_signature_header_is_t_and_v1():
    assert signature_header(SECRET, BODY, NOW) == header()


def test_the_providers_verify_through_billing_signing():
    from billing.providers import SimProvider, WebhookRejected
    from billing.providers.stripe import verify_signature as stripe_verify

    sim = SimProvider(None, webhook_secrets=[SECRET])  # parse_webhook never calls the gateway
    (outcome,) = sim.parse_webhook({"billing-signature": header()}, BODY, NOW)
    assert (outcome.kind, outcome.event_id, outcome.idempotency_key, outcome.outcome) == ("charge", "e1", "k", "SUCCEEDED")
    for bad in (header(secret="x" * 40), header(t=NOW - SIGNATURE_TOLERANCE - 1), ""):
        with pytest.raises(WebhookRejected) as err:
            sim.parse_webhook({"billing-signature": bad}, BODY, NOW)
        assert (err.value.status, err.value.code) == (400, "invalid_signature")
    body = b'{"eventId":"e1","idempotencyKey":"k","status":"refunded"}'
    with pytest.raises(WebhookRejected) as err:  # signed, but not a result the SQL API knows
        sim.parse_webhook({"billing-signature": header(body=body)}, body, NOW)
    assert (err.value.status, err.value.code) == (422, "invalid_input")
    stripe_verify(header(), BODY, [SECRET], NOW)
    with pytest.raises(WebhookRejected, match="Stripe-Signature"):
        stripe_verify(header(secret="x" * 40), BODY, [SECRET], NOW)


def test_hmac_lives_in_billing_signing_only():
    """No other module of the driver computes or compares an HMAC: webhook signatures, and the
    console's and the portal's CSRF tokens (signing.csrf_token, signing.same), live in billing.signing."""
    from billing.config import REPO_ROOT

    package = REPO_ROOT / "driver" / "billing"
    users = sorted(str(p.relative_to(package)) for p in package.rglob("*.py") if "import hmac" in p.read_text())
    assert users == ["signing.py"]


def test_every_stored_token_is_hashed_the_one_way():
    """API keys, customer sessions, console and portal sessions, portal links: the database holds the
    SHA-256 of the whole token, computed by signing.token_hash (notifications.links keeps its own
    one-line copy: a base-layer module may not import another, test_layers; pinned equal here)."""
    from billing import signing
    from billing.api.customer_sessions import hash_token
    from billing.api_keys import hash_key
    from billing.console.web import token_hash as console_hash
    from billing.notifications.links import token_hash as link_hash
    from billing.portal.web import token_hash as portal_hash

    token = "cs_42_" + "é" * 43
    expected = hashlib.sha256(token.encode("utf-8")).digest()
    assert signing.token_hash(token) == expected
    assert {f(token) for f in (hash_token, hash_key, console_hash, link_hash, portal_hash)} == {expected}


def test_csrf_tokens_differ_by_purpose_and_compare_any_text():
    assert signing.csrf_token("t", "billing-console-csrf") != signing.csrf_token("t", "billing-portal-csrf")
    assert signing.csrf_token("t", "p") == hmac.new(b"t", b"p", hashlib.sha256).hexdigest()
    assert signing.same("abc", "abc") and not signing.same("abc", "abd")
    assert not signing.same("é", "e")  # no TypeError on text that is not ASCII (a forged form field)
