"""The webhook `v1` signature: building and checking it, without a server."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from billing.api.validation import ApiError
from billing.api.webhooks import SIGNATURE_TOLERANCE, sign, verify_signature

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
    with pytest.raises(ApiError) as err:
        verify_signature(header(t=NOW + skew), BODY, [SECRET], NOW)
    assert err.value.status == 400 and err.value.code == "invalid_signature"


def test_a_tampered_body_fails_at_every_byte():
    h = header()
    for i in range(len(BODY)):
        tampered = BODY[:i] + bytes([BODY[i] ^ 1]) + BODY[i + 1:]
        with pytest.raises(ApiError):
            verify_signature(h, tampered, [SECRET], NOW)


def test_another_secret_fails():
    with pytest.raises(ApiError):
        verify_signature(header(secret="x" * 40), BODY, [SECRET], NOW)


def test_rotation_accepts_any_configured_secret_and_any_v1():
    old, new = "o" * 40, "n" * 40
    verify_signature(header(secret=old), BODY, [new, old], NOW)
    both = f"t={NOW},v1={'0' * 64},v1={sign(new, NOW, BODY)}"
    verify_signature(both, BODY, [new], NOW)


@pytest.mark.parametrize("bad", [None, "", "v1=abc", f"t={NOW}", "t=abc,v1=00", f"t=-{NOW},v1=00",
                                 "t=1" + "0" * 20 + ",v1=00"])
def test_malformed_headers_fail(bad):
    with pytest.raises(ApiError) as err:
        verify_signature(bad, BODY, [SECRET], NOW)
    assert err.value.status == 400


def test_no_secret_configured_refuses_everything():
    with pytest.raises(ApiError):
        verify_signature(header(), BODY, [], NOW)
