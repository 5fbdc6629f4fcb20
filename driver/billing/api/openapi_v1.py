"""The OpenAPI description, part two: the resources and lists only /v1 has (issue 28), and the
usage alerts and reports. A pure move out of openapi.py; the assembled document is
billing.api.openapi.OPENAPI."""

from __future__ import annotations

from billing.api.openapi_first import _ID_PARAM, _INVOICE, _NULLABLE_TIME, _SUBSCRIPTION, _errors  # noqa: F401

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
                   "selfServe": {"type": "boolean", "description": "Customers may sign up to it themselves (a "
                                                                   "customer session's signup; false: 403 for one)"},
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
                     "externalId": {"type": "string", "minLength": 1, "maxLength": 255},
                     "selfServe": {"type": "boolean", "description": "Customers may sign up to it themselves with a "
                                                                    "customer session (default false)"}}),
                 "responses": {**_ok("Created", "Plan", "201"), **_errors(400, 401, 403, 409, 413, 415, 422, 429, 503)}},
    },
    "/v1/plans/{code}": {"get": {
        "operationId": "getPlan", "security": [{"apiKey": []}], "x-scope": "subscriptions:read", "parameters": [_CODE_PARAM],
        "responses": {**_ok("The plan", "Plan"), **_errors(400, 401, 403, 404, 429, 503)}},
        "patch": {
        "operationId": "updatePlan", "security": [{"apiKey": []}], "x-scope": "catalog:write",
        "description": "Says whether customers may sign up to the plan themselves with a customer session "
                       "(selfServe); the signups in flight are waited for, so none is made after a switch-off. "
                       "The same value again: unchanged.",
        "parameters": [_CODE_PARAM],
        "requestBody": _body(["selfServe"], {"selfServe": {"type": "boolean"}}),
        "responses": {**_ok("The plan", "Plan"), **_errors(400, 401, 403, 404, 413, 415, 422, 429, 503)}}},
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
