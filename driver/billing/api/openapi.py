"""The OpenAPI 3.1 description of the HTTP API (served at /openapi.json; the fuzzing step reads it)."""

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
                   "customerRef": {"type": ["string", "null"]}, "paymentMethodRef": {"type": "string"},
                   "brand": {"type": ["string", "null"]}, "last4": {"type": ["string", "null"]},
                   "expMonth": {"type": "integer"}, "expYear": {"type": "integer"}, "isDefault": {"type": "boolean"},
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
        "billTo": {"type": "object"}, "subtotal": {"type": "integer"}, "taxAmount": {"type": "integer"},
        "taxIncluded": {"type": "integer"}, "total": {"type": "integer"}, "creditApplied": {"type": "integer"},
        "amountDue": {"type": "integer"}, "amountRefunded": {"type": "integer"},
        "lines": {"type": "array", "items": {"type": "object", "required": ["line_no", "kind", "description", "amount"]}},
        "creditNotes": {"type": "array", "items": {"type": "object"}},
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
                                                              "missing_property"]}}}}}}}}},
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
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "additionalProperties": False,
                "required": ["provider", "paymentMethodRef", "expMonth", "expYear"],
                "properties": {"provider": {"type": "string", "maxLength": 32},
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


# -- /v1 (issue 28): the new resources, the lists, and every route above again under /v1 -------------

_NULLABLE_TEXT = {"type": ["string", "null"]}
_CUSTOMER = {
    "type": "object", "required": ["object", "id", "timezone", "taxStatus", "createdAt"],
    "properties": {"object": {"const": "customer"}, "id": {"type": "integer", "format": "int64"},
                   "timezone": {"type": "string"}, "name": _NULLABLE_TEXT, "email": _NULLABLE_TEXT,
                   "address": _NULLABLE_TEXT, "city": _NULLABLE_TEXT, "postalCode": _NULLABLE_TEXT,
                   "region": _NULLABLE_TEXT, "country": _NULLABLE_TEXT, "taxId": _NULLABLE_TEXT,
                   "taxStatus": {"type": "string", "enum": ["TAXABLE", "EXEMPT", "REVERSE_CHARGE"]},
                   "locale": {"type": "string"}, "externalId": _NULLABLE_TEXT,
                   "createdAt": {"type": "string", "format": "date-time"},
                   "updatedAt": {"type": "string", "format": "date-time"}},
}
_PLAN = {
    "type": "object", "required": ["object", "id", "code", "priceAmount", "currency", "billingInterval", "intervalCount"],
    "properties": {"object": {"const": "plan"}, "id": {"type": "integer", "format": "int64"}, "code": {"type": "string"},
                   "priceAmount": {"type": "integer", "format": "int64"}, "currency": {"type": "string"},
                   "billingInterval": {"type": "string"}, "intervalCount": {"type": "integer"},
                   "billingDay": {"type": ["integer", "null"]}, "priceEffectiveFrom": _NULLABLE_TIME,
                   "externalId": _NULLABLE_TEXT,
                   "archivedAt": {**_NULLABLE_TIME, "description": "When it was archived: no new subscription or plan "
                                                                   "change to it; its subscriptions renew (null: offered)"},
                   "createdAt": {"type": "string", "format": "date-time"}},
}
_TAX_RATE = {
    "type": "object", "required": ["object", "code", "country", "name", "rateBp", "inclusive", "active"],
    "properties": {"object": {"const": "tax_rate"}, "code": {"type": "string"}, "country": {"type": "string"},
                   "region": _NULLABLE_TEXT, "name": {"type": "string"}, "rateBp": {"type": "integer"},
                   "inclusive": {"type": "boolean"}, "active": {"type": "boolean"}},
}
_CREDIT_NOTE = {
    "type": "object", "required": ["object", "id", "customerId", "invoiceId", "number", "reason", "total", "currency"],
    "properties": {"object": {"const": "credit_note"}, "id": {"type": "integer", "format": "int64"},
                   "customerId": {"type": "integer", "format": "int64"}, "invoiceId": {"type": "integer", "format": "int64"},
                   "number": {"type": "string"}, "reason": {"type": "string"},
                   "refundId": {"type": ["integer", "null"]}, "subtotal": {"type": "integer"},
                   "taxAmount": {"type": "integer"}, "total": {"type": "integer"}, "currency": {"type": "string"},
                   "issuedAt": {"type": "string", "format": "date-time"}},
}
_EVENT = {
    "type": "object", "required": ["object", "id", "seq", "type", "aggregateType", "aggregateId", "createdAt", "payload"],
    "properties": {"object": {"const": "event"}, "id": {"type": "string", "format": "uuid"},
                   "seq": {"type": "integer", "format": "int64"}, "type": {"type": "string"},
                   "aggregateType": {"type": "string"}, "aggregateId": {"type": "integer", "format": "int64"},
                   "customerId": {"type": "integer", "format": "int64"},
                   "createdAt": {"type": "string", "format": "date-time"},
                   "payload": {"type": "object", "description": "The CloudEvent as published (docs/events.md)"}},
}
_REPORT = {
    "type": "object", "required": ["object", "report", "data"],
    "properties": {"object": {"const": "report"}, "report": {"type": "string", "enum": ["mrr", "churn", "revenue"]},
                   "at": {"type": "string", "format": "date-time"}, "from": {"type": "string", "format": "date"},
                   "to": {"type": "string", "format": "date"},
                   "data": {"type": "array", "items": {"type": "object", "description": "One row per month and currency "
                                                                                         "(docs/reports.md), camelCase"}}},
}
_LINE = {"type": "object", "description": "An invoice line as in the document (docs/invoices.md)"}
_SUBSCRIPTION_ITEM = {"allOf": [{"$ref": "#/components/schemas/Subscription"},
                                {"type": "object", "properties": {"object": {"const": "subscription"}}}]}

_LIMIT = {"name": "limit", "in": "query", "required": False,
          "description": "Rows per page (default 10)", "schema": {"type": "integer", "minimum": 1, "maximum": 100}}


def _cursors(numeric: bool = True) -> list[dict]:
    schema = {"type": "integer", "format": "int64", "minimum": 1} if numeric else \
        {"type": "string", "minLength": 1, "maxLength": 100}
    return [_LIMIT,
            {"name": "starting_after", "in": "query", "required": False, "schema": schema,
             "description": "The nextCursor of the page before: the rows after it (older)"},
            {"name": "ending_before", "in": "query", "required": False, "schema": schema,
             "description": "The previousCursor of the page after: the rows before it (newer); not with starting_after"}]


def _query(name: str, schema: dict, description: str = "") -> dict:
    return {"name": name, "in": "query", "required": False, "schema": schema, **({"description": description} if description else {})}


_ID_QUERY = {"type": "integer", "format": "int64", "minimum": 1}
_TIME_QUERY = {"type": "string", "format": "date-time"}


def _page_ok(description: str, item: dict | str) -> dict:
    items = {"$ref": f"#/components/schemas/{item}"} if isinstance(item, str) else item
    return {"description": description, "content": {"application/json": {"schema": {
        "type": "object", "required": ["object", "data", "hasMore", "nextCursor", "previousCursor"],
        "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": items},
                       "hasMore": {"type": "boolean", "description": "More rows past this page in its direction"},
                       "nextCursor": {"type": ["string", "null"], "description": "starting_after for the next page"},
                       "previousCursor": {"type": ["string", "null"],
                                          "description": "ending_before for the page before"}}}}}}


def _ok(description: str, schema: str, status: str = "200") -> dict:
    return {status: {"description": description,
                     "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}}


def _list_op(operation: str, scope: str, description: str, item, params: list[dict], numeric: bool = True) -> dict:
    return {"get": {"operationId": operation, "security": [{"apiKey": []}], "x-scope": scope,
                    "description": description, "parameters": _cursors(numeric) + params,
                    "responses": {"200": _page_ok(description, item), **_errors(400, 401, 403, 404, 422, 429, 503)}}}


def _body(required: list[str], properties: dict) -> dict:
    return {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "additionalProperties": False, "required": required, "properties": properties}}}}


_CUSTOMER_DETAILS = {
    "name": {"type": ["string", "null"], "maxLength": 500}, "email": {"type": ["string", "null"], "maxLength": 500},
    "address": {"type": ["string", "null"], "maxLength": 500}, "city": {"type": ["string", "null"], "maxLength": 500},
    "postalCode": {"type": ["string", "null"], "maxLength": 500}, "region": {"type": ["string", "null"], "maxLength": 500},
    "country": {"type": ["string", "null"], "maxLength": 500}, "taxId": {"type": ["string", "null"], "maxLength": 500},
    "taxStatus": {"type": ["string", "null"], "enum": ["TAXABLE", "EXEMPT", "REVERSE_CHARGE", None]},
}
_CODE_PARAM = {"name": "code", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1, "maxLength": 255},
               "description": "The plan's code, or your external id of it"}
# Under /v1, a customer's or a subscription's id in a path may be your external id instead (anything
# that is not all digits).
_REF_PARAM = {"name": "id", "in": "path", "required": True,
              "description": "Our id (digits), or your external id (anything else)",
              "schema": {"oneOf": [{"type": "integer", "format": "int64", "minimum": 1},
                                   {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "[^0-9]"}]}}

_ARCHIVED_QUERY = _query("archived", {"type": "string", "enum": ["true", "false"]},
                         "true: only the archived ones; false: only those still offered")
_EMPTY_BODY = {"required": False, "content": {"application/json": {"schema": {
    "type": "object", "additionalProperties": False, "properties": {}}}}}

_V1_PATHS: dict = {
    "/v1/customers": {
        **_list_op("listCustomers", "customers:read", "Customers, newest first", "Customer",
                   [_query("email", {"type": "string", "maxLength": 320}, "Exactly this email, case-insensitive"),
                    _query("external_id", {"type": "string", "maxLength": 255}, "The customer of this external id")]),
        "post": {"operationId": "createCustomer", "security": [{"apiKey": []}], "x-scope": "customers:write",
                 "description": "Creates a customer under your own id, with its billing details.",
                 "requestBody": _body(["id"], {"id": {"type": "integer", "format": "int64", "minimum": 1},
                                               "externalId": {"type": "string", "minLength": 1, "maxLength": 255},
                                               "timezone": {"type": ["string", "null"], "maxLength": 64},
                                               **_CUSTOMER_DETAILS}),
                 "responses": {**_ok("Created", "Customer", "201"), **_errors(400, 401, 403, 409, 413, 415, 422, 429, 503)}},
    },
    "/v1/customers/{id}": {
        "get": {"operationId": "getCustomer", "security": [{"apiKey": []}], "x-scope": "customers:read",
                "parameters": [_REF_PARAM],
                "responses": {**_ok("The customer", "Customer"), **_errors(400, 401, 403, 404, 429, 503)}},
        "post": {"operationId": "updateCustomer", "security": [{"apiKey": []}], "x-scope": "customers:write",
                 "description": "Sets the billing details given (a field absent keeps its value; null clears it).",
                 "parameters": [_REF_PARAM], "requestBody": _body([], _CUSTOMER_DETAILS),
                 "responses": {**_ok("The customer", "Customer"), **_errors(400, 401, 403, 404, 413, 415, 422, 429, 503)}},
    },
    "/v1/customers/{id}/payment-methods": {"get": {
        "operationId": "listPaymentMethods", "security": [{"apiKey": []}], "x-scope": "subscriptions:read",
        "parameters": [_REF_PARAM],
        "responses": {"200": _page_ok("The customer's payment methods, the default first (one page)", "PaymentMethod"),
                      **_errors(400, 401, 403, 404, 429, 503)}}},
    "/v1/customers/{id}/payment-methods/{method_id}": {"get": {
        "operationId": "getPaymentMethod", "security": [{"apiKey": []}], "x-scope": "subscriptions:read",
        "parameters": [_REF_PARAM, {"name": "method_id", "in": "path", "required": True,
                                    "schema": {"type": "integer", "format": "int64", "minimum": 1}}],
        "responses": {**_ok("The customer's payment method", "PaymentMethod"), **_errors(400, 401, 403, 404, 429, 503)}}},
    "/v1/plans": {
        **_list_op("listPlans", "subscriptions:read", "Plans, newest first", "Plan", [_ARCHIVED_QUERY]),
        "post": {"operationId": "createPlan", "security": [{"apiKey": []}], "x-scope": "catalog:write",
                 "requestBody": _body(["code", "priceAmount", "currency", "billingInterval"], {
                     "code": {"type": "string", "minLength": 1, "maxLength": 100},
                     "priceAmount": {"type": "integer", "format": "int64", "minimum": 0},
                     "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
                     "billingInterval": {"type": "string", "enum": ["DAY", "WEEK", "MONTH", "YEAR"]},
                     "intervalCount": {"type": "integer", "minimum": 1, "maximum": 1000},
                     "billingDay": {"type": "integer", "minimum": 1, "maximum": 31},
                     "externalId": {"type": "string", "minLength": 1, "maxLength": 255}}),
                 "responses": {**_ok("Created", "Plan", "201"), **_errors(400, 401, 403, 409, 413, 415, 422, 429, 503)}},
    },
    "/v1/plans/{code}": {"get": {
        "operationId": "getPlan", "security": [{"apiKey": []}], "x-scope": "subscriptions:read", "parameters": [_CODE_PARAM],
        "responses": {**_ok("The plan", "Plan"), **_errors(400, 401, 403, 404, 429, 503)}}},
    "/v1/plans/{code}/prices": {"post": {
        "operationId": "newPlanPrice", "security": [{"apiKey": []}], "x-scope": "catalog:write",
        "description": "A new price for the periods that start at or after effectiveFrom (default now; never in the "
                       "past); earlier periods keep theirs.",
        "parameters": [_CODE_PARAM],
        "requestBody": _body(["priceAmount"], {"priceAmount": {"type": "integer", "format": "int64", "minimum": 0},
                                               "effectiveFrom": {"type": "string", "format": "date-time"}}),
        "responses": {**_ok("The plan with its new price", "Plan"), **_errors(400, 401, 403, 404, 413, 415, 422, 429, 503)}}},
    "/v1/plans/{code}/archive": {"post": {
        "operationId": "archivePlan", "security": [{"apiKey": []}], "x-scope": "catalog:write",
        "description": "Archives the plan: no new subscription or plan change to it; the subscriptions on it continue "
                       "and renew. Archived already: unchanged.",
        "parameters": [_CODE_PARAM], "requestBody": _EMPTY_BODY,
        "responses": {**_ok("The plan, archived", "Plan"), **_errors(400, 401, 403, 404, 413, 415, 422, 429, 503)}}},
    "/v1/coupons": _list_op("listCoupons", "catalog:write", "Coupons by code, descending", "Coupon", [_ARCHIVED_QUERY],
                            numeric=False),
    "/v1/coupons/{code}/archive": {"post": {
        "operationId": "archiveCoupon", "security": [{"apiKey": []}], "x-scope": "catalog:write",
        "description": "Archives the coupon: no new redemption; the subscriptions that redeemed it keep their "
                       "discount. Archived already: unchanged.",
        "parameters": [{"name": "code", "in": "path", "required": True,
                        "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}}],
        "requestBody": _EMPTY_BODY,
        "responses": {**_ok("The coupon, archived", "Coupon"), **_errors(400, 401, 403, 404, 413, 415, 422, 429, 503)}}},
    "/v1/tax-rates": {
        **_list_op("listTaxRates", "subscriptions:read", "Tax rates by code, descending", "TaxRate", [], numeric=False),
        "post": {"operationId": "upsertTaxRate", "security": [{"apiKey": []}], "x-scope": "catalog:write",
                 "description": "Creates or updates a tax rate; it applies to invoices created afterwards.",
                 "requestBody": _body(["code", "country", "name", "rateBp", "inclusive"], {
                     "code": {"type": "string", "minLength": 1, "maxLength": 64},
                     "country": {"type": "string", "pattern": "^[A-Z]{2}$"},
                     "region": {"type": ["string", "null"], "maxLength": 64},
                     "name": {"type": "string", "minLength": 1, "maxLength": 200},
                     "rateBp": {"type": "integer", "minimum": 0, "maximum": 10000},
                     "inclusive": {"type": "boolean"}, "active": {"type": "boolean"}}),
                 "responses": {**_ok("The tax rate", "TaxRate"), **_errors(400, 401, 403, 413, 415, 422, 429, 503)}},
    },
    "/v1/subscriptions": {**_list_op("listSubscriptions", "subscriptions:read", "Subscriptions, newest first",
                                     _SUBSCRIPTION_ITEM, [
        _query("customer_id", _ID_QUERY), _query("status", {"type": "string", "enum": list(_SUBSCRIPTION["properties"]["status"]["enum"])}),
        _query("plan_code", {"type": "string", "maxLength": 100}),
        _query("external_id", {"type": "string", "maxLength": 255}, "The subscription of this external id"),
        _query("created_from", _TIME_QUERY, "Created at or after"), _query("created_to", _TIME_QUERY, "Created before")])},
    "/v1/subscriptions/batch": {"post": {
        "operationId": "createSubscriptions", "security": [{"apiKey": []}], "x-scope": "subscriptions:write",
        "description": "Signups in bulk: up to 1000 in one call, each what POST /v1/subscriptions makes of it under its "
                       "own idempotencyKey (per API key, as that route's header); a key used before answers its "
                       "subscription (replayed). All or nothing: 409 / 422 name the first row refused. Body at most 1 MiB.",
        "requestBody": _body(["signups"], {"signups": {"type": "array", "minItems": 1, "maxItems": 1000, "items": {
            "type": "object", "additionalProperties": False, "required": ["idempotencyKey", "customerId", "planCode"],
            "properties": {"idempotencyKey": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x21-\\x7e]+$"},
                           "customerId": {"type": "integer", "format": "int64", "minimum": 1},
                           "planCode": {"type": "string", "minLength": 1, "maxLength": 100},
                           "trialDays": {"type": "integer", "minimum": 0, "maximum": 730},
                           "couponCode": {"type": "string", "minLength": 1, "maxLength": 64},
                           "quantity": {"type": "integer", "minimum": 1, "maximum": 1000000},
                           "externalId": {"type": "string", "minLength": 1, "maxLength": 255}}}}}),
        "responses": {"200": _page_ok("One row per signup, in order: created now or replayed", {
            "type": "object", "required": ["object", "idempotencyKey", "subscriptionId", "customerId", "outcome"],
            "properties": {"object": {"const": "signup"}, "idempotencyKey": {"type": "string"},
                           "subscriptionId": {"type": "integer", "format": "int64"},
                           "customerId": {"type": "integer", "format": "int64"},
                           "outcome": {"type": "string", "enum": ["created", "replayed"]}}}),
                      **_errors(400, 401, 403, 404, 409, 413, 415, 422, 429, 503)}}},
    "/v1/invoices": _list_op("listInvoices", "subscriptions:read", "Invoices, newest first", "Invoice", [
        _query("customer_id", _ID_QUERY), _query("subscription_id", _ID_QUERY),
        _query("status", {"type": "string", "enum": list(_INVOICE["properties"]["status"]["enum"])}),
        _query("period_from", _TIME_QUERY, "Period starting at or after"),
        _query("period_to", _TIME_QUERY, "Period starting before")]),
    "/v1/invoices/{id}/lines": {"get": {
        "operationId": "listInvoiceLines", "security": [{"apiKey": []}], "x-scope": "subscriptions:read",
        "parameters": [_ID_PARAM],
        "responses": {"200": _page_ok("The invoice's lines (one page)", _LINE), **_errors(400, 401, 403, 404, 429, 503)}}},
    "/v1/credit-notes": _list_op("listCreditNotes", "subscriptions:read", "Credit notes, newest first", "CreditNote", [
        _query("customer_id", _ID_QUERY), _query("invoice_id", _ID_QUERY)]),
    "/v1/refunds": _list_op("listAllRefunds", "subscriptions:read", "Refunds, newest first", "Refund", [
        _query("customer_id", _ID_QUERY), _query("invoice_id", _ID_QUERY)]),
    "/v1/events": _list_op("listEvents", "customers:read", "Events still kept in the outbox, newest first", "Event", [
        _query("type", {"type": "string", "maxLength": 100}), _query("customer_id", _ID_QUERY),
        _query("from", _TIME_QUERY, "Created at or after"), _query("to", _TIME_QUERY, "Created before")]),
    "/v1/events/{id}": {"get": {
        "operationId": "getEvent", "security": [{"apiKey": []}], "x-scope": "customers:read",
        "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}}],
        "responses": {**_ok("The event", "Event"), **_errors(401, 403, 404, 429, 503)}}},
    "/v1/reports/mrr": {"get": {
        "operationId": "reportMrr", "security": [{"apiKey": []}], "x-scope": "reports:read",
        "parameters": [_query("at", _TIME_QUERY, "The instant (default now)")],
        "responses": {**_ok("MRR and ARR per currency at that instant", "Report"),
                      **_errors(400, 401, 403, 422, 429, 503)}}},
}
# A customer's usage alerts (docs/usage.md "Usage alerts"; billing.api.routes.usage_alerts)
_USAGE_ALERT = {
    "type": "object", "required": ["object", "id", "customerId", "meterCode", "threshold", "createdAt"],
    "properties": {"object": {"const": "usage_alert"}, "id": {"type": "integer", "format": "int64"},
                   "customerId": {"type": "integer", "format": "int64"}, "meterCode": {"type": "string"},
                   "threshold": {"type": "number", "exclusiveMinimum": 0},
                   "firedFor": {**_NULLABLE_TIME, "description": "The start of the open period it last fired in (null: never)"},
                   "createdAt": {"type": "string", "format": "date-time"},
                   "updatedAt": {"type": "string", "format": "date-time"},
                   "deleted": {"type": "boolean", "description": "DELETE's answer: the alert deleted"}},
}
_THRESHOLD = {"type": "number", "exclusiveMinimum": 0, "maximum": 1e15,
              "description": "The meter's value in the customer's open period that fires UsageThresholdReached"}
_ALERT_ID = {"name": "alert_id", "in": "path", "required": True, "schema": {"type": "integer", "format": "int64", "minimum": 1}}
_V1_PATHS["/v1/customers/{id}/usage-alerts"] = {
    "get": {"operationId": "listUsageAlerts", "security": [{"apiKey": []}], "x-scope": "subscriptions:read",
            "parameters": [_REF_PARAM],
            "responses": {"200": _page_ok("The customer's usage alerts by meter and threshold (one page: at most 100)",
                                          "UsageAlert"), **_errors(400, 401, 403, 404, 429, 503)}},
    "post": {"operationId": "createUsageAlert", "security": [{"apiKey": []}], "x-scope": "subscriptions:write",
             "description": "A threshold on a meter: UsageThresholdReached once per open period when the meter's value "
                            "reaches it. The same threshold on the meter again is the same alert (200). At most 100 a customer.",
             "parameters": [_REF_PARAM],
             "requestBody": _body(["meterCode", "threshold"], {"meterCode": {"type": "string", "minLength": 1, "maxLength": 64},
                                                               "threshold": _THRESHOLD}),
             "responses": {**_ok("Created", "UsageAlert", "201"), **_ok("The alert (set before)", "UsageAlert"),
                           **_errors(400, 401, 403, 404, 413, 415, 422, 429, 503)}},
}
_V1_PATHS["/v1/customers/{id}/usage-alerts/{alert_id}"] = {
    "get": {"operationId": "getUsageAlert", "security": [{"apiKey": []}], "x-scope": "subscriptions:read",
            "parameters": [_REF_PARAM, _ALERT_ID],
            "responses": {**_ok("The usage alert", "UsageAlert"), **_errors(400, 401, 403, 404, 429, 503)}},
    "post": {"operationId": "updateUsageAlert", "security": [{"apiKey": []}], "x-scope": "subscriptions:write",
             "description": "A new threshold (it may fire again in the current period).",
             "parameters": [_REF_PARAM, _ALERT_ID], "requestBody": _body(["threshold"], {"threshold": _THRESHOLD}),
             "responses": {**_ok("The usage alert", "UsageAlert"), **_errors(400, 401, 403, 404, 409, 413, 415, 422, 429, 503)}},
    "delete": {"operationId": "deleteUsageAlert", "security": [{"apiKey": []}], "x-scope": "subscriptions:write",
               "parameters": [_REF_PARAM, _ALERT_ID],
               "responses": {**_ok("The alert deleted (deleted: true)", "UsageAlert"), **_errors(400, 401, 403, 404, 429, 503)}},
}
for _name, _what in (("churn", "Churn per month and currency"), ("revenue", "Revenue per month and currency")):
    _V1_PATHS[f"/v1/reports/{_name}"] = {"get": {
        "operationId": f"report{_name.capitalize()}", "security": [{"apiKey": []}], "x-scope": "reports:read",
        "parameters": [_query("from", {"type": "string", "format": "date"}, "First month (default this month)"),
                       _query("to", {"type": "string", "format": "date"}, "Last month (default today)")],
        "responses": {**_ok(_what, "Report"), **_errors(400, 401, 403, 422, 429, 503)}}}

# Never under /v1: the health check, the metrics and the gateways' signed webhooks (their URLs are
# configured at the gateway).
UNVERSIONED = ("/healthz", "/metrics", "/openapi.json", "/webhooks/payments", "/webhooks/stripe")


def _by_reference(path: str, item: dict) -> dict:
    """/v1/customers/{id}... and /v1/subscriptions/{id}...: the id may be an external id."""
    if not path.startswith(("/customers/{id}", "/subscriptions/{id}")):
        return item
    return {method: {**op, "parameters": [_REF_PARAM if p is _ID_PARAM or (p.get("in") == "path" and p["name"] == "id")
                                          else p for p in op.get("parameters", [])]}
            for method, op in item.items()}


def _versioned(paths: dict) -> dict:
    out: dict = {}
    for path, item in paths.items():
        if path in UNVERSIONED:
            continue
        out["/v1" + path] = _by_reference(path, item)
    for path, item in paths.items():
        if path in UNVERSIONED:
            out[path] = item
            continue
        out[path] = {method: {**op, "operationId": op["operationId"] + "Unversioned", "deprecated": True,
                              "description": f"Deprecated alias of /v1{path} (removed in the next release)."
                                             + (" " + op["description"] if op.get("description") else "")}
                     for method, op in item.items()}
    return out


OPENAPI: dict = {
    **_BASE,
    "paths": {path: {**_versioned(_BASE["paths"]).get(path, {}), **_V1_PATHS.get(path, {})}
              for path in {**_V1_PATHS, **_versioned(_BASE["paths"])}},
    "components": {**_BASE["components"], "schemas": {
        **_BASE["components"]["schemas"], "Customer": _CUSTOMER, "Plan": _PLAN, "TaxRate": _TAX_RATE,
        "Coupon": _COUPON, "CreditNote": _CREDIT_NOTE, "Event": _EVENT, "Report": _REPORT,
        "UsageAlert": _USAGE_ALERT}},
}


DOCUMENT = "docs/openapi.json"


def render() -> str:
    """The committed form of the document (sorted keys, two-space indent, a final newline)."""
    import json

    return json.dumps(OPENAPI, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


ROUTES_BEGIN = "<!-- routes: generated by make openapi from billing.api.openapi; do not edit -->"
ROUTES_END = "<!-- end of routes -->"


def routes_table() -> str:
    """The table of docs/http-api.md, "Every route": each operation that is not deprecated, with
    its scope and what it answers, as the document says."""
    rows = ["| method | path | scope | answers |", "|---|---|---|---|"]
    for path, item in OPENAPI["paths"].items():
        for method, op in item.items():
            if op.get("deprecated"):
                continue
            ok = next((r for status, r in op["responses"].items() if status.startswith("2")), {})
            what = (op.get("description") or ok.get("description") or "").replace("|", "\\|").replace("\n", " ")
            scope = op.get("x-scope", "none" if not op.get("security") else "any key")
            rows.append(f"| {method.upper()} | `{path}` | `{scope}` | {what} |")
    return "\n".join(rows)


def with_routes_table(markdown: str) -> str:
    head, found, rest = markdown.partition(ROUTES_BEGIN)
    if not found:
        raise ValueError(f"docs/http-api.md lacks the line {ROUTES_BEGIN}")
    _, found, tail = rest.partition(ROUTES_END)
    if not found:
        raise ValueError(f"docs/http-api.md lacks the line {ROUTES_END}")
    return f"{head}{ROUTES_BEGIN}\n{routes_table()}\n{ROUTES_END}{tail}"


def write() -> None:
    """make openapi: docs/openapi.json, and the route table of docs/http-api.md."""
    from billing.config import REPO_ROOT

    (REPO_ROOT / DOCUMENT).write_text(render())
    doc = REPO_ROOT / "docs" / "http-api.md"
    doc.write_text(with_routes_table(doc.read_text()))
    print(f"{DOCUMENT} and the route table of docs/http-api.md written")
