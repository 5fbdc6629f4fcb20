"""Writes the JSON Schemas of docs/events/ (one per event type and version) from the definitions
below, and the same files into the package (driver/billing/events/catalogue/, what `billing serve`
reads with importlib.resources; driver/tests/unit/test_event_catalogue.py checks the two agree). The schemas are the reference; this script only keeps them consistent with each other.
Run it after changing a definition: `python docs/events/generate.py`. A breaking change of a
type's data bumps its version (here and in billing._event_version); the old file stays.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGED = HERE.parents[1] / "driver" / "billing" / "events" / "catalogue"
DRAFT = "https://json-schema.org/draft/2020-12/schema"

INSTANT = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$",
           "description": "An instant in UTC, with microseconds."}
ID = {"type": "integer", "minimum": 1}
MINOR = {"type": "integer", "minimum": 0, "description": "An amount in the currency's smallest unit."}


def nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


INVOICE = {
    "invoiceId": ID,
    "subscriptionId": ID,
    "customerId": ID,
    "kind": {"enum": ["INITIAL", "RENEWAL", "PRORATION", "PLAN_CHANGE", "USAGE"]},
    "status": {"enum": ["OPEN", "PAID", "FAILED", "VOID", "REVIEW"]},
    "periodStart": INSTANT,
    "periodEnd": INSTANT,
    "subtotal": {"type": "integer", "description": "An amount in the currency's smallest unit; negative only on a "
                 "change's PRORATION invoice whose net fell but whose tax rose more (its amount is positive: 0910)"},
    "creditApplied": MINOR,
    "amount": MINOR,
    "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
    "attemptCount": {"type": "integer", "minimum": 0},
    "paidAt": nullable(INSTANT),
    "gatewayReference": nullable({"type": "string"}),
    "quantity": {"type": "integer", "minimum": 1, "description": "Seats billed."},
    "discountAmount": {**MINOR, "description": "Coupon discount taken off the plan line (subtotal is after it)."},
    "couponCode": nullable({"type": "string"}),
}

SUBSCRIPTION = {
    "subscriptionId": ID,
    "customerId": ID,
    "planCode": {"type": "string", "minLength": 1},
    "status": {"enum": ["TRIALING", "ACTIVE", "PAST_DUE", "PAUSED", "CANCELED"]},
    "currentPeriodStart": INSTANT,
    "currentPeriodEnd": INSTANT,
    "canceledAt": nullable(INSTANT),
    "reason": {"enum": [None, "REQUESTED", "PERIOD_END", "DUNNING_EXHAUSTED"]},
    "cancelAtPeriodEnd": {"type": "boolean"},
    "version": {"type": "integer", "minimum": 1},
    "quantity": {"type": "integer", "minimum": 1, "description": "Seats."},
    "trialEnd": nullable(INSTANT),
    "pausedAt": nullable(INSTANT),
    "resumeAt": nullable(INSTANT),
    "scheduledPlanCode": nullable({"type": "string", "minLength": 1}),
    "couponCode": nullable({"type": "string", "minLength": 1}),
}

REFUND = {
    "refundId": ID,
    "invoiceId": ID,
    "customerId": ID,
    "amount": {"type": "integer", "minimum": 1, "description": "An amount in the currency's smallest unit."},
    "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
    "reason": {"enum": ["REQUESTED", "DUPLICATE_CHARGE", "SUBSCRIPTION_CANCELED", "INVOICE_VOID", "INVOICE_FAILED"]},
    "status": {"enum": ["REQUESTED", "SUCCEEDED", "FAILED"]},
    "idempotencyKey": {"type": "string", "pattern": "^[a-z0-9]+-ref-[1-9][0-9]*(-try-[1-9][0-9]*)?$",
                       "description": "<namespace>-ref-<refund id>, then -try-<n> once a key the provider never saw was replaced."},
    "provider": {"type": "string"},
    "providerReference": nullable({"type": "string"}),
    "failureReason": nullable({"type": "string"}),
    "requestedAt": INSTANT,
    "settledAt": nullable(INSTANT),
}

PAYMENT_METHOD = {
    "customerId": ID,
    "paymentMethodId": ID,
    "provider": {"type": "string"},
    "brand": nullable({"type": "string"}),
    "last4": nullable({"type": "string", "pattern": "^[0-9]{4}$"}),
    "expMonth": {"type": "integer", "minimum": 1, "maximum": 12},
    "expYear": {"type": "integer"},
    "isDefault": {"type": "boolean"},
    "status": {"enum": ["ACTIVE", "DECLINED", "DETACHED"]},
}

ENDPOINT = {
    "endpointId": ID,
    "url": {"type": "string"},
    "status": {"const": "DISABLED"},
    "disabledAt": INSTANT,
    "reason": {"type": "string"},
    "eventId": {"type": "string", "description": "The CloudEvents id of the event it could not take."},
}


def obj(props: dict, *, const: dict | None = None, extra_required: tuple = (), optional: tuple = ()) -> dict:
    props = dict(props)
    props.update(const or {})
    return {"type": "object", "properties": props,
            "required": sorted((set(props) | set(extra_required)) - set(optional)), "additionalProperties": False}


def change(schema: dict) -> dict:
    return {"type": "object", "properties": {"before": schema, "after": schema},
            "required": ["before", "after"], "additionalProperties": False}


CATALOGUE: dict[str, tuple[str, str, dict]] = {
    # type: (subject, when, data schema)
    "InvoiceCreated": ("invoice/<id>", "an invoice is created (signup, renewal, proration); a credit may pay it at once",
                       obj(INVOICE)),
    "InvoicePaid": ("invoice/<id>", "an invoice is paid, by the gateway or fully by credit",
                    obj(INVOICE, const={"status": {"const": "PAID"}, "paidAt": INSTANT})),
    "InvoicePaymentFailed": ("invoice/<id>", "a charge was declined (`final` says whether dunning goes on)",
                             obj({**INVOICE, "failureReason": nullable({"type": "string"}),
                                  "nextAttemptAt": nullable(INSTANT), "final": {"type": "boolean"},
                                  "hardDecline": {"type": "boolean", "description": "The decline needs a new "
                                                  "payment method: the schedule stops (absent before issue 12)."}},
                                 optional=("hardDecline",))),
    "InvoiceActionRequired": ("invoice/<id>", "a charge needs the customer's authentication (3-D Secure): not a "
                                              "decline; the invoice stays OPEN and its dunning waits until "
                                              "`actionExpiresAt` (docs/customers.md)",
                              obj({**INVOICE, "actionExpiresAt": INSTANT,
                                   "paymentReference": nullable({"type": "string"}),
                                   "provider": {"type": "string"}})),
    "InvoicePaymentMethodRequired": ("invoice/<id>", "an invoice cannot be charged until the customer gives a usable "
                                                     "payment method (none recorded with a real provider, the "
                                                     "default one expired, or a hard decline); it waits, OPEN",
                                     obj({**INVOICE, "reason": {"enum": ["NO_PAYMENT_METHOD", "PAYMENT_METHOD_EXPIRED",
                                                                         "HARD_DECLINE"]},
                                          "declineCode": nullable({"type": "string"}), "provider": {"type": "string"}})),
    "RefundRequested": ("invoice/<id>", "a refund of (part of) a charge is asked (through the API, or by the engine "
                                        "for money not owed); the worker executes it",
                        obj(REFUND, const={"status": {"const": "REQUESTED"}})),
    "RefundSucceeded": ("invoice/<id>", "the provider refunded the money", obj(REFUND, const={"status": {"const": "SUCCEEDED"}, "settledAt": INSTANT})),
    "RefundFailed": ("invoice/<id>", "the provider refused the refund for good (the amount may be asked again)",
                     obj(REFUND, const={"status": {"const": "FAILED"}, "settledAt": INSTANT})),
    "RefundReview": ("invoice/<id>", "a refund's fate stayed unknown until its key expired at the provider: it is "
                                     "never sent again, a person settles it",
                     obj({**REFUND, "reviewReason": {"const": "KEY_EXPIRED"}}, const={"status": {"const": "REQUESTED"}})),
    "RefundReviewRequired": ("invoice/<id>", "a provider's refund event disagreed with the refund its key names "
                                             "(refund id, amount, currency or charge), lacked one of them, or "
                                             "reported a refund failed after it had succeeded: kept, not applied "
                                             "(a failure after success is looked up at the provider by the worker)",
                             obj({**REFUND, "reviewReason": {"enum": ["WEBHOOK_MISMATCH", "WEBHOOK_INCOMPLETE",
                                                                      "FAILED_AFTER_SUCCEEDED"]},
                                  "detail": {"type": "string"}, "webhookEventId": {"type": "string"},
                                  "eventRefundId": nullable({"type": "string"})})),
    "PaymentMethodUpdated": ("customer/<id>", "a payment method is set (it becomes the default; the invoices retried "
                                              "at once are listed) or detached",
                             obj({**PAYMENT_METHOD, "retriedInvoiceIds": {"type": "array", "items": ID}})),
    "PaymentMethodExpiring": ("customer/<id>", "the default card expires before the customer's next renewal, which is "
                                               "at most the configured number of days away (once per card)",
                              obj({**PAYMENT_METHOD, "expiresAt": INSTANT, "renewalAt": INSTANT})),
    "UsageThresholdReached": ("customer/<id>", "a usage alert's meter reached its threshold in the customer's open "
                                               "period (once per period; docs/usage.md)",
                              obj({"customerId": ID, "alertId": ID, "meterCode": {"type": "string"},
                                   "threshold": {"type": "number"}, "value": {"type": "number"},
                                   "periodStart": INSTANT, "periodEnd": INSTANT})),
    "InvoiceFailed": ("invoice/<id>", "the dunning schedule is exhausted: the invoice will not be charged again",
                      obj(INVOICE, const={"status": {"const": "FAILED"}})),
    "InvoiceVoided": ("invoice/<id>", "an OPEN invoice is voided because its subscription ended, or by an operator "
                                      "(void_invoice; `reason` says why); its credit is restored",
                      obj({**INVOICE, "reason": {"type": "string", "minLength": 1, "description": "The operator's "
                                                 "reason (void_invoice); absent when the engine voided it."}},
                          const={"status": {"const": "VOID"}}, optional=("reason",))),
    "RefundDue": ("invoice/<id>", "money was collected that is not owed (a duplicate charge, a payment on a "
                                  "subscription canceled before the invoice was declined, a success on a VOID or "
                                  "FAILED invoice); `amount` is what to give back",
                  obj({**INVOICE, "reason": {"enum": ["DUPLICATE_CHARGE", "SUBSCRIPTION_CANCELED", "INVOICE_VOID",
                                                      "INVOICE_FAILED"]},
                       "idempotencyKey": {"type": "string"}})),
    "InvoiceWrittenOff": ("invoice/<id>", "dunning ended on an invoice kept collectible after its subscription was "
                                          "canceled in dunning: the served period it billed is written off",
                          obj({**INVOICE, "reason": {"const": "DUNNING_EXHAUSTED"}},
                              const={"status": {"const": "FAILED"}})),
    "InvoicePaymentReview": ("invoice/<id>", "a payment's fate stayed unknown until its key expired at the gateway "
                                             "(KEY_EXPIRED), or the gateway holds a successful charge of other "
                                             "parameters under its key (KEY_CONFLICT): the invoice is in REVIEW, a "
                                             "person decides",
                             obj({**INVOICE, "reason": {"enum": ["KEY_EXPIRED", "KEY_CONFLICT"]}},
                                 const={"status": {"const": "REVIEW"}})),
    "PaymentReviewRequired": ("invoice/<id>", "a successful gateway webhook disagreed with its attempt (amount, "
                                              "currency or customer): kept, not applied",
                              obj({**INVOICE, "reason": {"const": "WEBHOOK_MISMATCH"}, "detail": {"type": "string"},
                                   "webhookEventId": {"type": "string"}, "idempotencyKey": {"type": "string"}})),
    "CreditNoteIssued": ("invoice/<id>", "a numbered credit note is issued for a finalized invoice: VOID (the "
                                         "invoice was voided), REFUND (a refund of its charge succeeded) or "
                                         "UNSERVED (an unpaid invoice cut at a cancellation: the time not served)",
                         obj({"creditNoteId": ID, "number": {"type": "string", "pattern": "^CN-[0-9]{4}-[0-9]{6,}$"},
                              "invoiceId": ID, "invoiceNumber": {"type": "string"}, "customerId": ID,
                              "reason": {"enum": ["VOID", "REFUND", "UNSERVED"]}, "refundId": nullable(ID),
                              "subtotal": {"type": "integer", "description": "An amount in the currency's smallest "
                                           "unit; negative when the credited invoice's subtotal was (0910)"},
                              "total": MINOR,
                              "taxAmount": {"type": "integer", "description": "An amount in the currency's smallest "
                                            "unit; negative when the credited invoice's tax was: a change's invoice "
                                            "that gave back more tax than its new line bears (0840)"},
                              "currency": {"type": "string", "pattern": "^[A-Z]{3}$"}, "issuedAt": INSTANT})),
    "SubscriptionCreated": ("subscription/<id>", "a subscription is created (its INITIAL invoice follows, or, "
                                                 "TRIALING, comes when the trial ends)",
                            obj(SUBSCRIPTION, const={"status": {"enum": ["ACTIVE", "TRIALING"]}})),
    "SubscriptionTrialWillEnd": ("subscription/<id>", "a trial ends within the configured notice (3 days by "
                                                      "default; `trialEnd` says when)",
                                 obj(SUBSCRIPTION, const={"status": {"const": "TRIALING"}, "trialEnd": INSTANT})),
    "SubscriptionPaused": ("subscription/<id>", "a subscription is paused (after its SubscriptionUpdated); nothing "
                                                "is billed until it resumes (`resumeAt`, or on request)",
                           obj(SUBSCRIPTION, const={"status": {"const": "PAUSED"}, "pausedAt": INSTANT})),
    "SubscriptionResumed": ("subscription/<id>", "a paused subscription resumes (after its SubscriptionUpdated): a "
                                                 "new period starts and is billed",
                            obj(SUBSCRIPTION, const={"status": {"enum": ["ACTIVE", "PAST_DUE"]}})),
    "SubscriptionUpdated": ("subscription/<id>", "its plan, status, cancel-at-period-end flag, seats, scheduled plan, "
                                                 "resume date or coupon changed (not for a cancellation); `changes` "
                                                 "holds each changed field before and after",
                            obj({**SUBSCRIPTION, "changes": {
                                "type": "object", "minProperties": 1, "additionalProperties": False,
                                "properties": {"planCode": change(SUBSCRIPTION["planCode"]),
                                               "status": change(SUBSCRIPTION["status"]),
                                               "cancelAtPeriodEnd": change(SUBSCRIPTION["cancelAtPeriodEnd"]),
                                               "quantity": change(SUBSCRIPTION["quantity"]),
                                               "scheduledPlanCode": change(SUBSCRIPTION["scheduledPlanCode"]),
                                               "resumeAt": change(SUBSCRIPTION["resumeAt"]),
                                               "couponCode": change(SUBSCRIPTION["couponCode"])}}})),
    "SubscriptionPastDue": ("subscription/<id>", "a declined renewal puts an ACTIVE subscription in dunning",
                            obj(SUBSCRIPTION, const={"status": {"const": "PAST_DUE"}})),
    "SubscriptionRecovered": ("subscription/<id>", "a PAST_DUE subscription has nothing left unpaid and is ACTIVE again",
                              obj(SUBSCRIPTION, const={"status": {"const": "ACTIVE"}})),
    "SubscriptionPlanReverted": ("subscription/<id>", "an upgrade's PRORATION invoice failed: the subscription is "
                                                      "back on the plan it paid for (its SubscriptionUpdated follows)",
                                 obj({**SUBSCRIPTION, "invoiceId": ID, "revertedPlanCode": {"type": "string"}})),
    "SubscriptionCanceled": ("subscription/<id>", "a subscription ends: now, at period end, or by dunning",
                             obj(SUBSCRIPTION, const={"status": {"const": "CANCELED"}, "canceledAt": INSTANT})),
    "WebhookEndpointDisabled": ("webhook_endpoint/<id>", "an outbound webhook endpoint kept failing for a day and "
                                                         "was disabled (no more deliveries to it)",
                                obj(ENDPOINT)),
}

VERSIONS = {name: 1 for name in CATALOGUE}


def schema_of(name: str) -> dict:
    subject, when, data = CATALOGUE[name]
    version = VERSIONS[name]
    return {"$schema": DRAFT, "$id": f"urn:billing:events:{name}:v{version}",
            "title": f"{name} v{version}: the data of the event",
            "description": f"Subject {subject}. Fires when {when}.", **data}


ENVELOPE = {
    "$schema": DRAFT, "$id": "urn:billing:events:envelope:v1",
    "title": "The CloudEvents 1.0 envelope of every event (Kafka message value, webhook body)",
    "type": "object",
    "properties": {
        "specversion": {"const": "1.0"},
        "id": {"type": "string", "pattern": "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"},
        "source": {"const": "billing"},
        "type": {"enum": sorted(CATALOGUE)},
        "subject": {"type": "string", "pattern": "^(invoice|subscription|webhook_endpoint|customer)/[1-9][0-9]*$"},
        "time": INSTANT,
        "datacontenttype": {"const": "application/json"},
        "dataschema": {"type": "string", "pattern": "^urn:billing:events:[A-Za-z]+:v[1-9][0-9]*$"},
        "data": {"type": "object"},
    },
    "required": ["specversion", "id", "source", "type", "subject", "time", "datacontenttype", "dataschema", "data"],
    "additionalProperties": False,
}


def main() -> None:
    for folder in (HERE, PACKAGED):
        (folder / "envelope.v1.json").write_text(json.dumps(ENVELOPE, indent=2) + "\n")
        for name in CATALOGUE:
            path = folder / f"{name}.v{VERSIONS[name]}.json"
            path.write_text(json.dumps(schema_of(name), indent=2) + "\n")
        print(f"{len(CATALOGUE)} schemas written to {folder}")
    # Earlier versions kept in docs/events (a breaking change leaves the old file): the package too.
    for path in HERE.glob("*.json"):
        (PACKAGED / path.name).write_bytes(path.read_bytes())


if __name__ == "__main__":
    main()
