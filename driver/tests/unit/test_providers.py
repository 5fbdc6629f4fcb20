"""The providers' mapping tables (docs/providers.md), without services: Stripe's answers and
events as the SQL API's outcomes, the simulator's decline codes, and the provider settings."""

from __future__ import annotations

import pytest

from billing.config import Settings
from billing.gateway.client import DECLINED, FAILED, SUCCEEDED, UNKNOWN, ChargeResult
from billing.providers import provider_from_settings
from billing.providers.sim import classify
from billing.providers.stripe import HARD_DECLINES, StripeProvider, intent_result, parse_event, refund_result


def answer(status: int, doc: dict | None) -> ChargeResult:
    return StripeProvider("sk_test_x")._charge_answer("k", status, doc, "")


def card_error(code: str, decline_code: str | None = None) -> dict:
    error = {"type": "card_error", "code": code, "payment_intent": {"id": "pi_1"}}
    if decline_code:
        error["decline_code"] = decline_code
    return {"error": error}


@pytest.mark.parametrize("status,doc,expected", [
    (200, {"id": "pi_1", "status": "succeeded"}, ChargeResult(SUCCEEDED, "pi_1")),
    (402, card_error("card_declined", "insufficient_funds"), ChargeResult(DECLINED, "pi_1", "insufficient_funds")),
    (402, card_error("card_declined", "generic_decline"), ChargeResult(DECLINED, "pi_1", "generic_decline")),
    (402, card_error("card_declined", "stolen_card"), ChargeResult(DECLINED, "pi_1", "stolen_card", True)),
    (402, card_error("card_declined"), ChargeResult(DECLINED, "pi_1", "card_declined")),
    (402, card_error("expired_card"), ChargeResult(DECLINED, "pi_1", "expired_card", True)),
    (402, card_error("processing_error"), ChargeResult(DECLINED, "pi_1", "processing_error")),
    (402, card_error("authentication_required", "authentication_required"),
     ChargeResult(DECLINED, "pi_1", "authentication_required", True)),
    (200, {"id": "pi_1", "status": "requires_action"}, ChargeResult(DECLINED, "pi_1", "authentication_required", True)),
    (200, {"id": "pi_1", "status": "processing"}, ChargeResult(UNKNOWN, "pi_1", "payment intent 'processing'")),
])
def test_stripe_charge_answers(status, doc, expected):
    assert answer(status, doc) == expected


@pytest.mark.parametrize("status,doc", [
    (500, {"error": {"type": "api_error"}}), (503, None), (200, None),
    (400, {"error": {"type": "idempotency_error", "message": "Keys for idempotent requests..."}}),
    (409, {"error": {"type": "invalid_request_error", "message": "in use"}}),
    (400, {"error": {"type": "invalid_request_error", "code": "parameter_missing"}}),
    (401, {"error": {"type": "invalid_request_error"}}),
])
def test_stripe_answers_that_leave_the_charge_open_are_unknown(status, doc):
    assert answer(status, doc).outcome == UNKNOWN


def test_a_declined_intent_is_a_decline_and_undecided_ones_are_unknown():
    failed = {"id": "pi_2", "status": "requires_payment_method",
              "last_payment_error": {"type": "card_error", "code": "card_declined", "decline_code": "lost_card"}}
    assert intent_result(failed) == ChargeResult(DECLINED, "pi_2", "lost_card", True)
    for status in ("requires_confirmation", "requires_capture", "canceled", None):
        assert intent_result({"id": "pi_3", "status": status}).outcome == UNKNOWN


def test_refund_answers():
    assert refund_result({"id": "re_1", "status": "succeeded"}).outcome == SUCCEEDED
    assert refund_result({"id": "re_1", "status": "failed", "failure_reason": "expired_or_canceled_card"}) == \
        refund_result({"id": "re_1", "status": "failed", "failure_reason": "expired_or_canceled_card"})
    assert refund_result({"id": "re_1", "status": "failed"}).outcome == FAILED
    assert refund_result({"id": "re_1", "status": "canceled"}).outcome == FAILED
    assert refund_result({"id": "re_1", "status": "pending"}).outcome == UNKNOWN


def test_stripe_events_become_outcomes():
    def intent_event(kind, **obj):
        return {"id": "evt_1", "type": kind, "data": {"object": {
            "id": "pi_9", "amount": 2990, "currency": "brl",
            "metadata": {"idempotency_key": "ns-inv-1-try-0", "customer_id": "42"}, **obj}}}

    (ok,) = parse_event(intent_event("payment_intent.succeeded"))
    assert (ok.kind, ok.event_id, ok.idempotency_key, ok.outcome, ok.reference) == \
        ("charge", "evt_1", "ns-inv-1-try-0", SUCCEEDED, "pi_9")
    assert (ok.payload["amount"], ok.payload["currency"], ok.payload["customerId"]) == (2990, "BRL", 42)
    (no,) = parse_event(intent_event("payment_intent.payment_failed", last_payment_error={
        "code": "card_declined", "decline_code": "fraudulent"}))
    assert (no.outcome, no.reason, no.hard_decline, no.payload["declineCode"]) == (DECLINED, "fraudulent", True, "fraudulent")
    assert parse_event({"id": "evt_2", "type": "payment_intent.succeeded", "data": {"object": {"metadata": {}}}}) == []
    assert parse_event({"id": "evt_3", "type": "invoice.paid", "data": {"object": {}}}) == []
    refunded = {"id": "evt_4", "type": "charge.refunded", "data": {"object": {"id": "ch_1", "refunds": {"data": [
        {"id": "re_1", "status": "succeeded", "metadata": {"refund_key": "ns-ref-1"}},
        {"id": "re_2", "status": "pending", "metadata": {"refund_key": "ns-ref-2"}},
        {"id": "re_3", "status": "succeeded", "metadata": {}}]}}}}
    assert [(o.kind, o.idempotency_key, o.outcome, o.reference) for o in parse_event(refunded)] == \
        [("refund", "ns-ref-1", SUCCEEDED, "re_1")]


def test_refund_events_and_a_charge_refunded_without_its_refunds():
    refund = {"id": "re_1", "object": "refund", "status": "failed", "failure_reason": "expired_or_canceled_card",
              "metadata": {"refund_key": "ns-ref-7-try-1"}}
    for kind in ("refund.updated", "refund.failed", "charge.refund.updated", "refund.created"):
        (o,) = parse_event({"id": "evt_r", "type": kind, "data": {"object": refund}})
        assert (o.kind, o.idempotency_key, o.outcome, o.reason) == ("refund", "ns-ref-7-try-1", "FAILED",
                                                                  "expired_or_canceled_card")
    canceled = {**refund, "status": "canceled", "failure_reason": None}
    assert parse_event({"id": "e", "type": "refund.updated", "data": {"object": canceled}})[0].outcome == "FAILED"
    pending = {**refund, "status": "pending"}
    assert parse_event({"id": "e", "type": "refund.updated", "data": {"object": pending}}) == []
    theirs = {**refund, "metadata": {}}
    assert parse_event({"id": "e", "type": "refund.updated", "data": {"object": theirs}}) == []
    # API versions from 2022-11-15: the charge does not list its refunds; they are to be read.
    (lookup,) = parse_event({"id": "evt_c", "type": "charge.refunded", "data": {"object": {
        "id": "ch_1", "object": "charge", "payment_intent": "pi_9"}}})
    assert (lookup.kind, lookup.reference) == ("refund_lookup", "pi_9")
    assert parse_event({"id": "evt_c", "type": "charge.refunded", "data": {"object": {"id": "ch_2"}}}) == []


def test_the_simulator_speaks_stripe_s_decline_codes():
    assert classify(ChargeResult(DECLINED, "ch", "stolen_card")).hard_decline
    assert not classify(ChargeResult(DECLINED, "ch", "insufficient_funds")).hard_decline
    assert not classify(ChargeResult(SUCCEEDED, "ch")).hard_decline
    assert {"stolen_card", "lost_card", "fraudulent", "expired_card", "authentication_required"} <= HARD_DECLINES
    assert not {"insufficient_funds", "generic_decline", "try_again_later", "do_not_honor"} & HARD_DECLINES


def test_provider_settings(monkeypatch, tmp_path):
    for name in ("BILLING_GATEWAY_PROVIDER", "BILLING_STRIPE_API_KEY", "BILLING_STRIPE_API_KEY_FILE",
                 "BILLING_STRIPE_WEBHOOK_SECRET", "BILLING_STRIPE_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    assert Settings.from_env().gateway_provider == "sim"
    assert type(provider_from_settings(Settings.from_env())).__name__ == "SimProvider"
    monkeypatch.setenv("BILLING_GATEWAY_PROVIDER", "Stripe")
    with pytest.raises(ValueError, match="BILLING_STRIPE_API_KEY"):
        provider_from_settings(Settings.from_env())
    key = "sk_live_" + "aB3dE5gH7jK9mN1pQ2rS4tU6vW8xY0zZ"
    (tmp_path / "key").write_text(key + "\n")
    monkeypatch.setenv("BILLING_STRIPE_API_KEY_FILE", str(tmp_path / "key"))
    monkeypatch.setenv("BILLING_STRIPE_API_BASE", "http://127.0.0.1:12111")
    settings = Settings.from_env()
    provider = provider_from_settings(settings, timeout=4.0)
    assert (provider.name, provider.api_key, provider.api_base, provider.timeout) == \
        ("stripe", key, "http://127.0.0.1:12111", 4.0)
    assert settings.secret_problems() == []
    monkeypatch.setenv("BILLING_GATEWAY_PROVIDER", "adyen")
    with pytest.raises(ValueError, match="sim, stripe"):
        provider_from_settings(Settings.from_env())


@pytest.mark.parametrize("name,value", [
    ("BILLING_STRIPE_API_KEY", "sk_test_123"), ("BILLING_STRIPE_API_KEY", "sk_live_changeme_" + "x" * 30),
    ("BILLING_STRIPE_WEBHOOK_SECRET", "whsec_test"), ("BILLING_STRIPE_WEBHOOK_SECRET", "whsec_" + "a" * 40),
])
def test_weak_stripe_secrets_are_refused(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    problems = Settings.from_env().secret_problems()
    assert any(name in p for p in problems) and all(value not in p for p in problems)
