"""The OpenAPI description, part one: the routes of the first version (the unprefixed paths, each
served again under /v1 by billing.api.openapi) and the schemas they share. A pure move out of
openapi.py; the assembled document is billing.api.openapi.OPENAPI."""

from __future__ import annotations

_ERROR = {
    "type": "object", "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
        "code": {"type": "string"}, "message": {"type": "string"}}}},
}
_SUBSCRIPTION = {
    "type": "object",
    "required": ["id", "customerId", "planCode", "status", "currentPeriodStart", "currentPeriodEnd",
                 "cancelAtPeriodEnd", "version"],
    "properties": {
        "id": {"type": "integer", "format": "int64"},
        "customerId": {"type": "integer", "format": "int64"},
        "planCode": {"type": "string"},
        "status": {"type": "string", "enum": ["TRIALING", "ACTIVE", "PAST_DUE", "PAUSED", "CANCELED"]},
        "currentPeriodStart": {"type": "string", "format": "date-time"},
        "currentPeriodEnd": {"type": "string", "format": "date-time"},
        "cancelAtPeriodEnd": {"type": "boolean"},
        "version": {"type": "integer", "format": "int64"},
        "quantity": {"type": "integer", "minimum": 1},
        "trialEnd": {"type": ["string", "null"], "format": "date-time"},
        "pausedAt": {"type": ["string", "null"], "format": "date-time"},
        "resumeAt": {"type": ["string", "null"], "format": "date-time"},
        "scheduledPlanCode": {"type": ["string", "null"]},
        "couponCode": {"type": ["string", "null"]},
        "externalId": {"type": ["string", "null"], "description": "Your own id of the subscription (unique)"},
    },
}
_COUPON = {
    "type": "object", "required": ["object", "code", "duration", "timesRedeemed"],
    "properties": {"object": {"const": "coupon"}, "code": {"type": "string"},
                   "percentOff": {"type": ["number", "null"]}, "amountOff": {"type": ["integer", "null"]},
                   "currency": {"type": ["string", "null"]},
                   "duration": {"type": "string", "enum": ["once", "repeating", "forever"]},
                   "durationPeriods": {"type": ["integer", "null"]}, "maxRedemptions": {"type": ["integer", "null"]},
                   "maxRedemptionsPerCustomer": {"type": ["integer", "null"],
                                                 "description": "At most this many redemptions by one customer, "
                                                                "replaced or ended ones too (null: no limit)"},
                   "timesRedeemed": {"type": "integer"}, "redeemBy": {"type": ["string", "null"], "format": "date-time"},
                   "planCodes": {"type": ["array", "null"], "items": {"type": "string"}},
                   "archivedAt": {"type": ["string", "null"], "format": "date-time",
                                  "description": "When it was archived: no new redemption (null: redeemable)"}},
}


def _lifecycle(operation: str, description: str, body: dict | None) -> dict:
    """A POST /subscriptions/{id}/<action> of the lifecycle (docs/lifecycle.md)."""
    request = {"type": "object", "additionalProperties": False, **(body or {"properties": {}})}
    return {"post": {
        "operationId": operation, "parameters": [_ID_PARAM],
        "requestBody": {"required": body is not None and bool(request.get("required")),
                        "content": {"application/json": {"schema": request}}},
        "security": [{"apiKey": []}], "x-scope": "subscriptions:write",
        "responses": {"200": _sub_ok(description), **_errors(400, 401, 403, 404, 409, 413, 415, 422, 429, 503)},
    }}


def _errors(*statuses: int) -> dict:
    text = {400: "Bad input", 401: "No API key, or an unknown or revoked one",
            403: "The API key lacks the scope", 404: "Not found", 409: "Conflict",
            412: "If-Match does not match the version", 413: "Body too large",
            415: "The body is not application/json", 422: "Invalid input for the billing rules",
            429: "Too many requests for this API key (see Retry-After)", 503: "Database unavailable"}
    return {str(s): {"description": text[s], "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
            for s in statuses}


def _sub_ok(description: str) -> dict:
    return {"description": description,
            "headers": {"ETag": {"schema": {"type": "string"}, "description": "The version, quoted"}},
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Subscription"}}}}


_NULLABLE_TIME = {"type": ["string", "null"], "format": "date-time"}
_ENDPOINT = {
    "type": "object", "required": ["object", "id", "url", "eventTypes", "status", "createdAt"],
    "properties": {"object": {"const": "webhook_endpoint"}, "id": {"type": "integer", "format": "int64"},
                   "url": {"type": "string"}, "eventTypes": {"type": "array", "items": {"type": "string"}},
                   "status": {"type": "string", "enum": ["ENABLED", "DISABLED"]},
                   "createdAt": {"type": "string", "format": "date-time"}, "disabledAt": _NULLABLE_TIME,
                   "disabledReason": {"type": ["string", "null"]}, "secret": {"type": "string"}},
}
_PAYMENT_METHOD = {
    "type": "object", "required": ["object", "id", "customerId", "provider", "paymentMethodRef", "expMonth", "expYear",
                                   "isDefault", "status"],
    "properties": {"object": {"const": "payment_method"}, "id": {"type": "integer", "format": "int64"},
                   "customerId": {"type": "integer", "format": "int64"}, "provider": {"type": "string"},
                   "customerRef": {"type": ["string", "null"]},
                   "paymentMethodRef": {"type": ["string", "null"],
                                        "description": "null (as brand, last4, expMonth, expYear, customerRef) for a "
                                                       "key without customers:read or admin"},
                   "brand": {"type": ["string", "null"]}, "last4": {"type": ["string", "null"]},
                   "expMonth": {"type": ["integer", "null"]}, "expYear": {"type": ["integer", "null"]},
                   "isDefault": {"type": "boolean"},
                   "status": {"type": "string", "enum": ["ACTIVE", "DECLINED", "DETACHED"]},
                   "updatedAt": {"type": "string", "format": "date-time"}},
}
_REFUND = {
    "type": "object", "required": ["object", "id", "invoiceId", "amount", "currency", "reason", "status"],
    "properties": {"object": {"const": "refund"}, "id": {"type": "integer", "format": "int64"},
                   "invoiceId": {"type": "integer", "format": "int64"}, "customerId": {"type": "integer", "format": "int64"},
                   "amount": {"type": "integer", "format": "int64"}, "currency": {"type": "string"},
                   "reason": {"type": "string"}, "status": {"type": "string", "enum": ["REQUESTED", "SUCCEEDED", "FAILED"]},
                   "requestedAt": {"type": "string", "format": "date-time"}, "settledAt": _NULLABLE_TIME,
                   "providerReference": {"type": ["string", "null"]}, "failureReason": {"type": ["string", "null"]}},
}
_INVOICE = {
    "type": "object", "required": ["object", "id", "subscriptionId", "customerId", "kind", "status", "amount", "currency"],
    "properties": {"object": {"const": "invoice"}, "id": {"type": "integer", "format": "int64"},
                   "subscriptionId": {"type": "integer", "format": "int64"},
                   "customerId": {"type": "integer", "format": "int64"},
                   "kind": {"type": "string", "enum": ["INITIAL", "RENEWAL", "PRORATION", "PLAN_CHANGE"]},
                   "status": {"type": "string", "enum": ["OPEN", "PAID", "FAILED", "VOID", "REVIEW"]},
                   "periodStart": {"type": "string", "format": "date-time"},
                   "periodEnd": {"type": "string", "format": "date-time"},
                   "subtotal": {"type": "integer", "format": "int64"}, "creditApplied": {"type": "integer", "format": "int64"},
                   "amount": {"type": "integer", "format": "int64"}, "amountRefunded": {"type": "integer", "format": "int64"},
                   "currency": {"type": "string"}, "attemptCount": {"type": "integer"},
                   "nextAttemptAt": _NULLABLE_TIME, "paidAt": _NULLABLE_TIME, "closedAt": _NULLABLE_TIME},
}
_ATTEMPT = {
    "type": "object", "required": ["eventId", "eventType", "attempt", "attemptedAt", "deliveryStatus"],
    "properties": {"object": {"const": "webhook_attempt"}, "eventId": {"type": "string"},
                   "eventType": {"type": "string"}, "outboxId": {"type": "integer"}, "attempt": {"type": "integer"},
                   "attemptedAt": {"type": "string", "format": "date-time"},
                   "statusCode": {"type": ["integer", "null"]}, "error": {"type": ["string", "null"]},
                   "durationMs": {"type": "integer"},
                   "deliveryStatus": {"type": "string", "enum": ["PENDING", "DELIVERED", "FAILED"]}},
}


def _endpoint_ok(description: str) -> dict:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/WebhookEndpoint"}}}}


def _list_ok(description: str, item: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": {
        "type": "object", "required": ["object", "data"],
        "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": {"$ref": f"#/components/schemas/{item}"}}}}}}}


_INVOICE_DOCUMENT = {
    "type": "object",
    "required": ["object", "id", "number", "status", "currency", "customerId", "lines", "subtotal", "taxAmount",
                 "total", "creditApplied", "amountDue", "creditNotes"],
    "properties": {
        "object": {"const": "invoice"}, "id": {"type": "integer"}, "number": {"type": ["string", "null"]},
        "status": {"type": "string"}, "kind": {"type": "string"}, "currency": {"type": "string"},
        "customerId": {"type": "integer"}, "subscriptionId": {"type": "integer"},
        "billTo": {"type": "object", "description": "The customer's billing details (name, e-mail, address, tax id, tax "
                                                    "status); for a key without customers:read or admin only "
                                                    "customerId and taxStatus"},
        "subtotal": {"type": "integer"}, "taxAmount": {"type": "integer"},
        "taxIncluded": {"type": "integer"}, "total": {"type": "integer"}, "creditApplied": {"type": "integer"},
        "amountDue": {"type": "integer"}, "amountRefunded": {"type": "integer"},
        "lines": {"type": "array", "items": {"type": "object", "required": ["line_no", "kind", "description", "amount"]}},
        "creditNotes": {"type": "array", "items": {"type": "object"}},
        # One entry per tax rate and jurisdiction with its base (a change's invoice: its lines' taxes, a
        # reversal's negative at the rate it was sold at; docs/invoices.md).
        "taxes": {"type": "array", "items": {"type": "object", "required": ["rateBp", "inclusive", "base", "amount"],
                                             "properties": {"code": {"type": ["string", "null"]},
                                                            "name": {"type": ["string", "null"]},
                                                            "rateBp": {"type": "integer"},
                                                            "inclusive": {"type": "boolean"},
                                                            "country": {"type": ["string", "null"]},
                                                            "region": {"type": ["string", "null"]},
                                                            "base": {"type": "integer"},
                                                            "amount": {"type": "integer"}}}},
    },
}

_ID_PARAM = {"name": "id", "in": "path", "required": True,
             "schema": {"type": "integer", "format": "int64", "minimum": 1}}
_IF_MATCH = {"name": "If-Match", "in": "header", "required": False, "schema": {"type": "string"},
             "description": 'The ETag of GET (e.g. "3"): the change applies only to that version, else 412'}

_BASE: dict = {
    "openapi": "3.1.0",
    "info": {"title": "billing", "version": "1.1.0",
             "description": "Subscription billing engine over HTTP (docs/http-api.md). Every resource is under /v1; "
                            "the unprefixed paths are deprecated aliases kept for one release (CHANGELOG.md)."},
    "paths": {
        "/subscriptions": {"post": {
            "operationId": "createSubscription",
            "parameters": [{"name": "Idempotency-Key", "in": "header", "required": True,
                            "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x21-\\x7e]+$"}}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "additionalProperties": False, "required": ["customerId", "planCode"],
                "properties": {"customerId": {"type": "integer", "format": "int64", "minimum": 1},
                               "planCode": {"type": "string", "minLength": 1, "maxLength": 100},
                               "trialDays": {"type": "integer", "minimum": 0, "maximum": 730},
                               "couponCode": {"type": "string", "minLength": 1, "maxLength": 64},
                               "quantity": {"type": "integer", "minimum": 1, "maximum": 1000000},
                               "externalId": {"type": "string", "minLength": 1, "maxLength": 255,
                                              "description": "Your own id of the subscription (unique); usable "
                                                             "in /v1 paths wherever its id is"}}}}}},
            "security": [{"apiKey": []}], "x-scope": "subscriptions:write",
            "responses": {"201": _sub_ok("Created"), "200": _sub_ok("The key replays an earlier request"),
                          **_errors(400, 401, 403, 409, 413, 415, 422, 429, 503)},
        }},
        "/subscriptions/{id}": {"get": {
            "operationId": "getSubscription", "parameters": [_ID_PARAM],
            "security": [{"apiKey": []}], "x-scope": "subscriptions:read",
            "responses": {"200": _sub_ok("The subscription"), **_errors(400, 401, 403, 404, 429, 503)},
        }},
        "/subscriptions/{id}/cancel": {"post": {
            "operationId": "cancelSubscription", "parameters": [_ID_PARAM, _IF_MATCH],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "additionalProperties": False, "required": ["atPeriodEnd"],
                "properties": {"atPeriodEnd": {"type": "boolean"}}}}}},
            "security": [{"apiKey": []}], "x-scope": "subscriptions:write",
            "responses": {"200": _sub_ok("Canceled, or flagged to cancel at period end"),
                          **_errors(400, 401, 403, 404, 409, 412, 413, 415, 422, 429, 503)},
        }},
        "/subscriptions/{id}/change-plan": {"post": {
            "operationId": "changePlan", "parameters": [_ID_PARAM, _IF_MATCH],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "additionalProperties": False, "required": ["planCode"],
                "properties": {"planCode": {"type": "string", "minLength": 1, "maxLength": 100},
                               "when": {"type": "string", "enum": ["now", "period_end"]},
                               "prorate": {"type": "boolean"}}}}}},
            "security": [{"apiKey": []}], "x-scope": "subscriptions:write",
            "responses": {"200": _sub_ok("The plan was changed (prorated unless prorate is false), or scheduled"),
                          **_errors(400, 401, 403, 404, 409, 412, 413, 415, 422, 429, 503)},
        }},
        "/subscriptions/{id}/coupon": _lifecycle("applyCoupon", "The coupon applies from the next period invoice", {
            "required": ["couponCode"], "properties": {"couponCode": {"type": "string", "minLength": 1, "maxLength": 64}}}),
        "/subscriptions/{id}/pause": _lifecycle("pauseSubscription", "Paused (the unused rest of the period credited)", {
            "properties": {"resumeAt": {"type": "string", "format": "date-time"}}}),
        "/subscriptions/{id}/resume": _lifecycle("resumeSubscription", "Resumed: a new period from now, billed", None),
        "/subscriptions/{id}/uncancel": _lifecycle("uncancelSubscription", "The cancellation at period end is withdrawn", None),
        "/subscriptions/{id}/reactivate": _lifecycle("reactivateSubscription",
                                                     "Reactivated after dunning: a new period from now, billed", None),
        "/subscriptions/{id}/quantity": _lifecycle("setQuantity", "Seats set (prorated)", {
            "required": ["quantity"], "properties": {"quantity": {"type": "integer", "minimum": 1, "maximum": 1000000}}}),
        "/coupons": {"post": {
            "operationId": "upsertCoupon",
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "additionalProperties": False, "required": ["code", "duration"],
                "properties": {"code": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                               "percentOff": {"type": "number", "exclusiveMinimum": 0, "maximum": 100},
                               "amountOff": {"type": "integer", "minimum": 1},
                               "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
                               "duration": {"type": "string", "enum": ["once", "repeating", "forever"]},
                               "durationPeriods": {"type": "integer", "minimum": 1, "maximum": 120},
                               "maxRedemptions": {"type": "integer", "minimum": 1},
                               "maxRedemptionsPerCustomer": {"type": "integer", "minimum": 1},
                               "redeemBy": {"type": "string", "format": "date-time"},
                               "planCodes": {"type": "array", "items": {"type": "string"}, "minItems": 1}}}}}},
            "security": [{"apiKey": []}], "x-scope": "admin",
            "responses": {"200": {"description": "The coupon", "content": {"application/json": {"schema": _COUPON}}},
                          **_errors(400, 401, 403, 413, 415, 422, 429, 503)},
        }},
        "/customer-sessions": {"post": {
            "operationId": "openCustomerSession",
            "description": "A short-lived token (cs_<customerId>_<secret>) that reads and acts on one customer only "
                           "(docs/security.md, Customer sessions); shown once.",
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "additionalProperties": False, "required": ["customerId"],
                "properties": {"customerId": {"type": "integer", "minimum": 1},
                               "ttlSeconds": {"type": "integer", "minimum": 60, "maximum": 3600}}}}}},
            "security": [{"apiKey": []}], "x-scope": "customer-sessions:write",
            "responses": {"201": {"description": "The session and its token", "content": {"application/json": {
                "schema": {"type": "object", "required": ["object", "customerId", "token", "expiresAt"],
                           "properties": {"object": {"const": "customer_session"}, "customerId": {"type": "integer"},
                                          "token": {"type": "string", "pattern": "^cs_[1-9][0-9]*_[A-Za-z0-9_-]{43}$"},
                                          "expiresAt": {"type": "string", "format": "date-time"}}}}}},
                          **_errors(400, 401, 403, 404, 413, 415, 422, 429, 503)},
        }},
        "/usage-events": {"post": {
            "operationId": "ingestUsageEvents",
            "description": "A batch of at most 1000 CloudEvents 1.0 usage events (subject = the customer id); "
                           "each answered accepted, duplicate (its (customer, source, id) was accepted before) or "
                           "rejected with its reason (docs/usage.md). Body at most 1 MiB.",
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "array", "maxItems": 1000, "minItems": 1, "items": {
                    "type": "object", "required": ["specversion", "id", "source", "type", "time", "subject"],
                    "properties": {"specversion": {"const": "1.0"}, "id": {"type": "string"}, "source": {"type": "string"},
                                   "type": {"type": "string"}, "time": {"type": "string", "format": "date-time"},
                                   "subject": {"type": "string"}, "data": {"type": ["object", "null"]}}}}}}},
            "security": [{"apiKey": []}], "x-scope": "usage:write",
            "responses": {"200": {"description": "One result per event", "content": {"application/json": {"schema": {
                "type": "object", "properties": {
                    "accepted": {"type": "integer"}, "duplicate": {"type": "integer"}, "rejected": {"type": "integer"},
                    "results": {"type": "array", "items": {"type": "object", "properties": {
                        "index": {"type": "integer"}, "id": {"type": ["string", "null"]},
                        "status": {"type": "string", "enum": ["accepted", "duplicate", "rejected"]},
                        "reason": {"type": "string", "enum": ["invalid_event", "invalid_time", "unknown_customer",
                                                              "in_future", "too_old", "not_numeric",
                                                              "missing_property", "invalid_json"]}}}}}}}}},
                          **_errors(400, 401, 403, 413, 415, 422, 429, 503)},
        }},
        "/customers/{id}/usage": {"get": {
            "operationId": "getCustomerUsage",
            "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 1}}],
            "security": [{"apiKey": []}], "x-scope": "subscriptions:read",
            "responses": {"200": {"description": "The open period's usage per meter, from the rollups", "content": {
                "application/json": {"schema": {"type": "object", "properties": {
                    "customerId": {"type": "integer"}, "periodStart": {"type": ["string", "null"]},
                    "periodEnd": {"type": ["string", "null"]},
                    "meters": {"type": "array", "items": {"type": "object", "properties": {
                        "code": {"type": "string"}, "aggregation": {"type": "string"},
                        "value": {"type": ["number", "null"]}, "events": {"type": "integer"}}}}}}}}},
                          **_errors(400, 401, 403, 404, 429, 503)},
        }},
        "/subscriptions/{id}/upcoming-invoice": {"get": {
            "operationId": "getUpcomingInvoice",
            "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 1}}],
            "security": [{"apiKey": []}], "x-scope": "subscriptions:read",
            "responses": {"200": {"description": "The preview of the next invoicing: the next period's fixed price, "
                                                 "the usage so far and late adjustments (docs/usage.md)", "content": {
                "application/json": {"schema": {"type": "object", "properties": {
                    "subscriptionId": {"type": "integer"}, "customerId": {"type": "integer"},
                    "currency": {"type": "string"}, "invoicedAt": {"type": ["string", "null"]},
                    "asOf": {"type": ["string", "null"]}, "subtotal": {"type": "integer"}, "tax": {"type": "integer"},
                    "taxInclusive": {"type": "boolean"}, "total": {"type": "integer"},
                    "lines": {"type": "array", "items": {"type": "object", "properties": {
                        "kind": {"type": "string", "enum": ["PLAN", "USAGE"]}, "planCode": {"type": "string"},
                        "meterCode": {"type": "string"}, "quantity": {"type": "number"},
                        "unitAmount": {"type": "integer"}, "amount": {"type": "integer"}, "late": {"type": "boolean"},
                        "periodStart": {"type": ["string", "null"]}, "periodEnd": {"type": ["string", "null"]}}}}}}}}},
                          **_errors(400, 401, 403, 404, 429, 503)},
        }},
        "/webhooks/payments": {"post": {
            "operationId": "paymentWebhook", "security": [],
            "parameters": [{"name": "Billing-Signature", "in": "header", "required": True, "schema": {"type": "string"},
                            "description": "t=<unix seconds>,v1=<hex HMAC-SHA256 of '<t>.<body>'>[,v1=...]"}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["eventId", "idempotencyKey", "status"],
                "properties": {"eventId": {"type": "string"}, "idempotencyKey": {"type": "string"},
                               "status": {"type": "string", "enum": ["succeeded", "declined"]},
                               "id": {"type": ["string", "null"]}, "declineCode": {"type": ["string", "null"]}}}}}},
            "responses": {"200": {"description": "Received; applied false for a duplicate delivery", "content": {
                "application/json": {"schema": {"type": "object", "properties": {
                    "received": {"type": "boolean"}, "applied": {"type": "boolean"}, "duplicate": {"type": "boolean"}}}}}},
                **_errors(400, 404, 413, 415, 422, 503)},
        }},
        "/webhooks/stripe": {"post": {
            "operationId": "stripeWebhook", "security": [],
            "parameters": [{"name": "Stripe-Signature", "in": "header", "required": True, "schema": {"type": "string"},
                            "description": "t=<unix seconds>,v1=<hex HMAC-SHA256 of '<t>.<body>'>[,v1=...] "
                                           "(docs/providers.md)"}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["id", "type", "data"],
                "properties": {"id": {"type": "string"}, "type": {"type": "string"}, "data": {"type": "object"}}}}}},
            "responses": {"200": {"description": "Received (events not acted upon too)", "content": {
                "application/json": {"schema": {"type": "object", "properties": {
                    "received": {"type": "boolean"}, "outcomes": {"type": "array", "items": {"type": "string"}}}}}}},
                **_errors(400, 404, 413, 415, 422, 503)},
        }},
        "/customers/{id}/payment-method": {"put": {
            "operationId": "setPaymentMethod", "security": [{"apiKey": []}], "x-scope": "subscriptions:write",
            "parameters": [_ID_PARAM],
            "description": "With a server key: the method by its provider references. With a customer session "
                           "(cs_...): only {\"provider\": \"stripe\", \"setupIntentId\": \"seti_...\"}, a SetupIntent "
                           "the provider confirms was made for this customer and succeeded (403 for anything else or "
                           "one it cannot prove, 422 for one not succeeded; docs/security.md).",
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "additionalProperties": False,
                "properties": {"setupIntentId": {"type": "string", "pattern": "^seti_[A-Za-z0-9_]{1,95}$",
                                                 "description": "A customer session's only way (with provider)"},
                               "provider": {"type": "string", "maxLength": 32},
                               "customerRef": {"type": ["string", "null"], "maxLength": 255},
                               "paymentMethodRef": {"type": "string", "maxLength": 255},
                               "brand": {"type": ["string", "null"], "maxLength": 50},
                               "last4": {"type": ["string", "null"], "pattern": "^[0-9]{4}$"},
                               "expMonth": {"type": "integer", "minimum": 1, "maximum": 12},
                               "expYear": {"type": "integer", "minimum": 2000, "maximum": 2200}}}}}},
            "responses": {"200": {"description": "The method, now the customer's default; open invoices waiting "
                                                 "for one are retried at once",
                                  "content": {"application/json": {"schema": {"$ref": "#/components/schemas/PaymentMethod"}}}},
                          **_errors(400, 401, 403, 404, 413, 415, 422, 429, 503)},
        }},
        "/customers/{id}/portal-links": {"post": {
            "operationId": "createPortalLink", "security": [{"apiKey": []}], "x-scope": "subscriptions:write",
            "description": "A single-use, expiring link to the customer portal (docs/customers.md).",
            "parameters": [_ID_PARAM],
            "requestBody": {"required": False, "content": {"application/json": {"schema": {
                "type": "object", "additionalProperties": False,
                "properties": {"next": {"type": "string", "pattern": "^/[A-Za-z0-9/_-]{0,199}$"}}}}}},
            "responses": {"201": {"description": "The link (shown once: only its hash is kept)",
                                  "content": {"application/json": {"schema": {
                                      "type": "object", "additionalProperties": False,
                                      "required": ["object", "customerId", "url", "expiresAt"],
                                      "properties": {"object": {"const": "portal_link"},
                                                     "customerId": {"type": "integer"},
                                                     "url": {"type": "string"},
                                                     "expiresAt": {"type": "string"}}}}}},
                          **_errors(400, 401, 403, 404, 413, 415, 422, 429, 503)},
        }},
        "/invoices/{id}": {
            "get": {
                "operationId": "getInvoice", "security": [{"apiKey": []}], "x-scope": "subscriptions:read",
                "description": "The invoice as a document (docs/invoices.md): /invoices/{id} answers JSON with its lines "
                               "and credit notes, /invoices/{id}.html an HTML page, /invoices/{id}.pdf a PDF.",
                "parameters": [{"name": "id", "in": "path", "required": True,
                                "schema": {"type": "string", "pattern": "^[0-9]{1,18}(\\.(html|pdf))?$"}}],
                "responses": {"200": {"description": "The invoice document",
                                      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/InvoiceDocument"}},
                                                  "text/html": {"schema": {"type": "string"}},
                                                  "application/pdf": {"schema": {"type": "string", "format": "binary"}}}},
                              **_errors(400, 401, 403, 404, 429, 503)},
            },
        },
        "/invoices/{id}/refunds": {
            "post": {
                "operationId": "createRefund", "security": [{"apiKey": []}], "x-scope": "refunds:write",
                "parameters": [_ID_PARAM, {"name": "Idempotency-Key", "in": "header", "required": True,
                                           "schema": {"type": "string", "minLength": 1, "maxLength": 255}}],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "additionalProperties": False, "required": ["amount"],
                    "properties": {"amount": {"type": "integer", "format": "int64", "minimum": 1}}}}}},
                "responses": {"200": {"description": "The refund, REQUESTED (the worker executes it); the same "
                                                     "Idempotency-Key answers the same refund",
                                      "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Refund"}}}},
                              **_errors(400, 401, 403, 404, 409, 413, 415, 422, 429, 503)},
            },
            "get": {"operationId": "listRefunds", "security": [{"apiKey": []}], "x-scope": "subscriptions:read",
                    "parameters": [_ID_PARAM],
                    "responses": {"200": _list_ok("The invoice's refunds, oldest first", "Refund"),
                                  **_errors(400, 401, 403, 429, 503)}},
        },
        "/invoices/{id}/retry": {"post": {
            "operationId": "retryInvoice", "security": [{"apiKey": []}], "x-scope": "admin",
            "description": "Charges an OPEN invoice at the next claim, with the key of its current try "
                           "(docs/sql-api.md, retry_invoice); already due: unchanged.",
            "parameters": [_ID_PARAM],
            "requestBody": {"required": False, "content": {"application/json": {"schema": {
                "type": "object", "additionalProperties": False, "properties": {}}}}},
            "responses": {"200": {"description": "The invoice",
                                  "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Invoice"}}}},
                          **_errors(400, 401, 403, 404, 409, 413, 415, 422, 429, 503)},
        }},
        "/invoices/{id}/void": {"post": {
            "operationId": "voidInvoice", "security": [{"apiKey": []}], "x-scope": "admin",
            "description": "Voids an unpaid OPEN invoice; its subscription is not canceled (docs/sql-api.md, "
                           "void_invoice); VOID already: unchanged.",
            "parameters": [_ID_PARAM],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "additionalProperties": False, "required": ["reason"],
                "properties": {"reason": {"type": "string", "minLength": 1, "maxLength": 500}}}}}},
            "responses": {"200": {"description": "The invoice, VOID",
                                  "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Invoice"}}}},
                          **_errors(400, 401, 403, 404, 409, 413, 415, 422, 429, 503)},
        }},
        "/webhook-endpoints": {
            "post": {
                "operationId": "createWebhookEndpoint", "security": [{"apiKey": []}], "x-scope": "admin",
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "additionalProperties": False, "required": ["url", "eventTypes"],
                    "properties": {"url": {"type": "string", "maxLength": 2048},
                                   "eventTypes": {"type": "array", "minItems": 1, "maxItems": 100,
                                                  "items": {"type": "string"}},
                                   "secret": {"type": "string", "minLength": 16, "maxLength": 256}}}}}},
                "responses": {"201": _endpoint_ok("Created; the only answer that shows the secret"),
                              **_errors(400, 401, 403, 422, 503)},
            },
            "get": {"operationId": "listWebhookEndpoints", "security": [{"apiKey": []}], "x-scope": "admin",
                    "responses": {"200": _list_ok("The endpoints", "WebhookEndpoint"), **_errors(401, 403, 503)}},
        },
        "/webhook-endpoints/{id}": {
            "get": {"operationId": "getWebhookEndpoint", "security": [{"apiKey": []}], "x-scope": "admin", "parameters": [_ID_PARAM],
                    "responses": {"200": _endpoint_ok("The endpoint"), **_errors(400, 401, 403, 404, 503)}},
            "delete": {"operationId": "deleteWebhookEndpoint", "security": [{"apiKey": []}], "x-scope": "admin", "parameters": [_ID_PARAM],
                       "responses": {"200": {"description": "Deleted with its queue and attempts"},
                                     **_errors(400, 401, 403, 404, 503)}},
        },
        "/webhook-endpoints/{id}/attempts": {"get": {
            "operationId": "listWebhookAttempts", "security": [{"apiKey": []}], "x-scope": "admin",
            "parameters": [_ID_PARAM, {"name": "limit", "in": "query", "required": False,
                                       "schema": {"type": "integer", "minimum": 1, "maximum": 1000}}],
            "responses": {"200": _list_ok("Delivery attempts, newest first", "WebhookAttempt"),
                          **_errors(400, 401, 403, 404, 422, 503)},
        }},
        "/admin/audit": {"get": {
            "operationId": "readAudit", "security": [{"apiKey": []}], "x-scope": "admin",
            "parameters": [
                {"name": "beforeId", "in": "query", "required": False,
                 "schema": {"type": "integer", "format": "int64", "minimum": 1}},
                {"name": "limit", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                {"name": "actor", "in": "query", "required": False, "schema": {"type": "string", "maxLength": 200}},
                {"name": "function", "in": "query", "required": False,
                 "schema": {"type": "string", "maxLength": 200}}],
            "responses": {"200": {"description": "Audit entries, newest first", "content": {"application/json": {
                "schema": {"type": "object", "required": ["entries"], "properties": {
                    "entries": {"type": "array", "items": {"type": "object"}},
                    "nextBeforeId": {"type": ["integer", "null"]}}}}}},
                **_errors(400, 401, 403, 429, 503)},
        }},
        "/healthz": {"get": {"operationId": "health", "security": [], "responses": {
            "200": {"description": "The database answers"}, "503": {"description": "It does not"}}}},
        "/openapi.json": {"get": {"operationId": "openapi", "security": [{"apiKey": []}], "x-scope": "admin",
                                  "description": "This document (committed as docs/openapi.json)", "responses": {
            "200": {"description": "The OpenAPI 3.1 document", "content": {"application/json": {"schema": {"type": "object"}}}},
            **_errors(401, 403, 429)}}},
        "/metrics": {"get": {"operationId": "metrics", "security": [{"apiKey": []}], "x-scope": "admin", "responses": {
            "200": {"description": "Prometheus text format", "content": {"text/plain": {"schema": {"type": "string"}}}},
            **_errors(401, 403, 429)}}},
    },
    "components": {
        "schemas": {"Error": _ERROR, "Subscription": _SUBSCRIPTION, "WebhookEndpoint": _ENDPOINT,
                    "WebhookAttempt": _ATTEMPT, "PaymentMethod": _PAYMENT_METHOD, "Refund": _REFUND,
                    "Invoice": _INVOICE, "InvoiceDocument": _INVOICE_DOCUMENT},
        "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer",
                                       "description": "An API key: billing api-key create (docs/security.md)"}},
    },
}
