"""The one place where the driver's SQL lives: each query is one call to a function of the SQL API,
named here and grouped by area (driver/tests/unit/test_sql_home.py fails on an SQL string in any
other module, bar the migration machinery it lists, and on a query here nobody runs).

The driver never writes tables itself. Errors raised by the SQL API carry the contract's SQLSTATEs
(BL404, BL409, BL422); `contract_error` turns them into `ContractError` for the callers.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

# -- SQL API calls ---------------------------------------------------------------------------
# Every time-dependent call passes p_now explicitly, so the demo and the tests drive the clock.

CREATE_DUE_INVOICES = "SELECT billing.create_due_invoices(%(batch)s, %(now)s) AS handled"
FINALIZE_INVOICES = "SELECT billing.finalize_invoices(%(batch)s, %(now)s) AS finalized"
# Usage in arrears (db/functions/72_usage_rating.sql; alerts: 74_usage_preview.sql): one row per subscription looked at.
CHECK_USAGE_ALERTS = "SELECT billing.check_usage_alerts(%(batch)s, %(now)s) AS fired"
# A customer's usage alerts over HTTP (billing.api.routes.usage_alerts)
LIST_USAGE_ALERTS = "SELECT * FROM billing.list_usage_alerts(%(customer_id)s)"
SET_USAGE_ALERT = "SELECT * FROM billing.set_usage_alert(%(customer_id)s, %(meter_code)s, %(threshold)s, %(now)s)"
UPDATE_USAGE_ALERT = "SELECT * FROM billing.update_usage_alert(%(customer_id)s, %(alert_id)s, %(threshold)s, %(now)s)"
DELETE_USAGE_ALERT = "SELECT * FROM billing.delete_usage_alert(%(customer_id)s, %(alert_id)s, %(now)s)"
RATE_USAGE = ("SELECT count(*) AS looked, count(invoice_id) AS invoiced"
              " FROM billing.rate_usage(%(batch)s, %(now)s, make_interval(secs => %(grace)s), %(follow)s)")
CLAIM_CHARGES = (
    "SELECT invoice_id, attempt_id, idempotency_key, customer_id, amount, currency, lookup, customer_ref, "
    "payment_method_ref FROM billing.claim_charges(%(worker)s, %(batch)s, %(lease)s::interval, %(now)s, %(provider)s)"
)
# Batch claims per shard group on Citus (db/functions/16_shards.sql and the *_in_shard functions, docs/scaling.md): the
# groups and their nodes, the worker's leases (on the coordinator), then claim and work in one call
# on the node that holds the group.
SHARD_GROUPS = "SELECT shard_group, node_name, node_port FROM billing.shard_groups(%(now)s)"
LEASE_SHARD_GROUPS = (
    "SELECT shard_group, lease_until, node_name, node_port "
    "FROM billing.lease_shard_groups(%(worker)s, %(max_groups)s, %(lease)s::interval, %(now)s)"
)
RENEW_IN_SHARD = "SELECT billing.renew_in_shard(%(worker)s, %(group)s, %(batch)s, %(now)s) AS handled"
# The usage rating per shard group (docs/usage.md "Per shard group"): the claim and the rating on the
# group's node, the customers' usage locks on the coordinator in between (billing.worker.renewal).
CLAIM_USAGE_IN_SHARD = ("SELECT customer_id, subscription_id FROM billing.claim_usage_in_shard("
                        "%(worker)s, %(group)s, %(batch)s, %(now)s, make_interval(secs => %(grace)s), %(follow)s)")
LOCK_USAGE_CUSTOMERS = "SELECT customer_id FROM billing.lock_usage_customers(%(customers)s::bigint[])"
RATE_USAGE_IN_SHARD = ("SELECT count(*) AS rated, count(invoice_id) AS invoiced FROM billing.rate_usage_in_shard("
                       "%(worker)s, %(group)s, %(customers)s::bigint[], %(subscriptions)s::bigint[], %(now)s, "
                       "make_interval(secs => %(grace)s))")
CHARGE_CLAIMS_IN_SHARD = (
    "SELECT invoice_id, attempt_id, idempotency_key, customer_id, amount, currency, lookup, customer_ref, "
    "payment_method_ref FROM billing.charge_claims_in_shard(%(worker)s, %(group)s, %(batch)s, %(lease)s::interval, "
    "%(now)s, %(provider)s)"
)
REFUND_CLAIMS_IN_SHARD = (
    "SELECT * FROM billing.refund_claims_in_shard(%(worker)s, %(group)s, %(batch)s, %(lease)s::interval, %(now)s)"
)
# Refunds (db/functions/57_refunds.sql, 58_refund_claims.sql): the worker claims and records; the API requests and lists.
CLAIM_REFUNDS = "SELECT * FROM billing.claim_refunds(%(worker)s, %(batch)s, %(lease)s::interval, %(now)s)"
# Refunds an event said failed after they succeeded: looked up at the provider (59_refund_webhooks).
CLAIM_REFUND_RECHECKS = "SELECT * FROM billing.claim_refund_rechecks(%(batch)s, %(lease)s::interval, %(now)s)"
RECORD_REFUND_RESULT = (
    "SELECT * FROM billing.record_refund_result(%(key)s, %(outcome)s, %(reference)s, %(reason)s, %(now)s)"
)
REFUND_INVOICE = "SELECT * FROM billing.refund_invoice(%(invoice_id)s, %(amount)s, %(request_key)s, %(now)s)"
LIST_REFUNDS = "SELECT * FROM billing.list_refunds(%(invoice_id)s)"
# An operator's invoice actions (db/functions/63_invoice_actions.sql).
RETRY_INVOICE = "SELECT * FROM billing.retry_invoice(%(invoice_id)s, %(now)s)"
VOID_INVOICE = "SELECT * FROM billing.void_invoice(%(invoice_id)s, %(reason)s, %(now)s)"
# Invoice documents and reports (db/functions/60_invoices.sql, 62_invoice_document.sql, 75_reports.sql).
GET_INVOICE_DOCUMENT = "SELECT billing.get_invoice_document(%(invoice_id)s) AS document"
REPORT_MRR = "SELECT * FROM billing.report_mrr(%(at)s)"
REPORT_MRR_MOVEMENTS = "SELECT * FROM billing.report_mrr_movements(%(from)s, %(to)s)"
REPORT_CHURN = "SELECT * FROM billing.report_churn(%(from)s, %(to)s)"
REPORT_REVENUE = "SELECT * FROM billing.report_revenue(%(from)s, %(to)s)"
# The run's figures over the whole database (db/functions/79_figures.sql): the demo's report.
FIGURES_BY_HOUR = "SELECT figure, hour, key, n FROM billing.figures_by_hour()"
FIGURES_COUNTS = "SELECT figure, key, key2, n FROM billing.figures_counts()"
FIGURES_REVENUE = "SELECT * FROM billing.figures_revenue()"
# What the demo's invariants read (db/functions/78_witness.sql): plain reads of the tables, no rule
# of the engine, so the checks stay an independent witness (billing.demo.invariants, documents, runner).
WITNESS_CHARGED_TWICE = "SELECT invoice_id, n FROM billing.witness_charged_twice()"
WITNESS_INVOICES = "SELECT * FROM billing.witness_invoices()"
WITNESS_PERIODS = "SELECT * FROM billing.witness_periods()"
WITNESS_RESTARTS = "SELECT subscription_id, period_start FROM billing.witness_restarts()"
WITNESS_STATES = "SELECT aggregate, id FROM billing.witness_states()"
# (the outbox left behind: every PENDING event is in the backlog whatever the instant)
WITNESS_OUTBOX_LEFT = "SELECT backlog AS pending, dead FROM billing.outbox_stats()"
WITNESS_CASH = "SELECT currency, cash FROM billing.witness_cash()"
WITNESS_REFUNDS = "SELECT idempotency_key, status FROM billing.witness_refunds()"
WITNESS_SAMPLE_INVOICES = "SELECT sample, invoice_id FROM billing.witness_sample_invoices()"
# The demo's usage invariants (billing.demo.usage): the usage tables read plainly (db/functions/80_usage_witness.sql).
WITNESS_USAGE_EVENTS = "SELECT customer_id, source, event_id, event_time FROM billing.witness_usage_events(%(event_type)s)"
WITNESS_USAGE_COUNTS = "SELECT customer_id, keys, counted FROM billing.witness_usage_counts(%(meter)s)"
WITNESS_USAGE_RATINGS = "SELECT * FROM billing.witness_usage_ratings(%(meter)s)"
# The demo's API product: its meter and its plans' graduated per-request charges (billing.demo.usage).
DEMO_USAGE_METER = "SELECT (billing.upsert_meter(%(code)s, %(type)s, 'count', NULL, '{}'::jsonb, %(now)s)).code"
DEMO_USAGE_CHARGE = ("SELECT (billing.upsert_plan_charge(%(plan)s, %(meter)s, 'graduated', NULL, NULL, %(tiers)s::jsonb, "
                     "%(included)s, NULL, NULL, %(now)s)).plan_id")
# Payment methods (db/functions/52_payment_methods.sql).
SET_PAYMENT_METHOD = (
    "SELECT * FROM billing.set_payment_method(%(customer_id)s, %(provider)s, %(customer_ref)s, "
    "%(payment_method_ref)s, %(brand)s, %(last4)s, %(exp_month)s, %(exp_year)s, %(now)s)"
)
ANNOUNCE_EXPIRING_PAYMENT_METHODS = (
    "SELECT billing.announce_expiring_payment_methods(%(days)s, %(batch)s, %(now)s) AS announced"
)
# Invoices that waited for a payment method past their dunning span (db/functions/50_charging.sql).
GIVE_UP_WAITING_INVOICES = "SELECT billing.give_up_waiting_invoices(%(batch)s, %(now)s) AS given_up"
RECORD_PAYMENT_RESULT = (
    "SELECT * FROM billing.record_payment_result(%(key)s, %(outcome)s, %(reference)s, %(reason)s, %(now)s)"
)
APPLY_GATEWAY_WEBHOOK = (
    "SELECT billing.apply_gateway_webhook(%(event_id)s, %(key)s, %(outcome)s, %(reference)s, "
    "%(payload)s::jsonb, %(now)s, %(hard_decline)s) AS outcome"
)
MARK_OUTBOX_PUBLISHED = "SELECT billing.mark_outbox_published(%(ids)s::bigint[], %(now)s) AS marked"
MARK_OUTBOX_FAILED = "SELECT billing.mark_outbox_failed(%(id)s, %(error)s, %(now)s)"
# The demo's catalog: plans it sells, so customers may choose them themselves (self_serve, 0850).
UPSERT_PLAN = (
    "SELECT * FROM billing.upsert_plan(%(code)s, %(price)s, %(currency)s, %(interval)s, %(count)s, "
    "p_self_serve => true)"
)
CANCEL_SUBSCRIPTION = (
    "SELECT * FROM billing.cancel_subscription(%(id)s, %(at_period_end)s, %(now)s, %(expected_version)s)"
)
CHANGE_PLAN = "SELECT * FROM billing.change_plan(%(id)s, %(plan_code)s, %(now)s, %(expected_version)s)"

# -- Bulk import (db/functions/21_external_ids.sql, 22_import.sql, docs/import.md): batches of JSON rows.
IMPORT_CUSTOMERS = ("SELECT external_id, customer_id, outcome, problem "
                    "FROM billing.import_customers(%(rows)s::jsonb, %(now)s, %(dry_run)s)")
IMPORT_SUBSCRIPTIONS = ("SELECT external_id, subscription_id, customer_id, outcome, problem "
                        "FROM billing.import_subscriptions(%(rows)s::jsonb, %(now)s, %(dry_run)s)")
IMPORT_PLAN = ("SELECT id, code FROM billing.upsert_plan(%(code)s, %(price)s, %(currency)s, %(interval)s, %(count)s, "
               "%(now)s, NULL, %(external_id)s)")
IMPORT_COUPON = ("SELECT code FROM billing.upsert_coupon(%(code)s, %(percent_off)s::numeric, %(amount_off)s::bigint, "
                 "%(currency)s::text, %(duration)s::text, %(duration_periods)s::integer, %(max_redemptions)s::integer, "
                 "%(redeem_by)s::timestamptz, NULL::text[])")
IMPORT_PAYMENT_METHOD = (
    "SELECT id FROM billing.set_payment_method(%(customer_id)s, %(provider)s, %(customer_ref)s, %(payment_method_ref)s, "
    "%(brand)s, %(last4)s, %(exp_month)s, %(exp_year)s, %(now)s)")

# -- The relay: the payload as text (it is published as is, never parsed), key = aggregate id.
# The claims return the events in the outbox's order (billing._outbox_order, db/functions/64_outbox.sql):
# the relay keeps the claim's own order (its ordinality), it never orders events itself.
CLAIM_OUTBOX_EVENTS_RAW = (
    "SELECT id, aggregate_type, aggregate_id, payload::text, ordinality "
    "FROM billing.claim_outbox_events(%(batch)s, %(lease)s::interval, %(now)s) WITH ORDINALITY ORDER BY ordinality"
)

# -- Operators (db/functions/70_stats.sql).
OUTBOX_STATS = "SELECT * FROM billing.outbox_stats(%(now)s)"
STATUS_SUMMARY = "SELECT * FROM billing.status_summary(%(now)s)"

# -- The HTTP API: the subscription row plus its plan's code. `created` is exact: the SQL API sets
# subscription.created_at = now() in the creating transaction, and now() is this statement's
# transaction time, so it is true only when this very call inserted the row (201 vs 200).
_API_SUBSCRIPTION = ("SELECT s.*, billing.plan_code(s.plan_id) AS plan_code, "
                     "billing.plan_code(s.scheduled_plan_id) AS scheduled_plan_code{extra} FROM billing.{call} s")
API_CREATE_SUBSCRIPTION = _API_SUBSCRIPTION.format(
    extra=", s.created_at = now() AS created",
    call="create_subscription(%(key)s, %(customer_id)s, %(plan_code)s, %(now)s, %(trial_days)s, %(coupon_code)s, "
         "%(quantity)s, %(external_id)s)")
API_GET_SUBSCRIPTION = _API_SUBSCRIPTION.format(extra="", call="get_subscription(%(id)s)")
# Which of these plan codes a customer session may sign up to (plan.self_serve, migration 0850), locked
# FOR SHARE until the signup's transaction ends (a switch-off waits for it, or it for the switch-off).
API_LOCK_SELF_SERVE_PLANS = "SELECT billing.lock_self_serve_plans(%(codes)s::text[]) AS codes"
# A plan's self_serve switched (PATCH /v1/plans/{code}, `billing plans self-serve`).
SET_PLAN_SELF_SERVE = "SELECT * FROM billing.set_plan_self_serve(%(code)s, %(self_serve)s, %(now)s)"
API_CANCEL_SUBSCRIPTION = _API_SUBSCRIPTION.format(
    extra="", call="cancel_subscription(%(id)s, %(at_period_end)s, %(now)s, %(expected_version)s)")
API_CHANGE_PLAN = _API_SUBSCRIPTION.format(
    extra="", call="change_plan(%(id)s, %(plan_code)s, %(now)s, %(expected_version)s, %(when)s, %(prorate)s)")
# A customer session's plan change: the portal's (only a change the operator offers, prorated; 37_portal.sql).
API_PORTAL_CHANGE_PLAN = _API_SUBSCRIPTION.format(
    extra="", call="portal_change_plan(%(customer_id)s, %(id)s, %(plan_code)s, %(now)s)")
# The lifecycle (db/functions/33_calendar.sql to 36_lifecycle_api.sql, docs/lifecycle.md).
API_APPLY_COUPON = _API_SUBSCRIPTION.format(extra="", call="apply_coupon(%(id)s, %(code)s, %(now)s)")
API_PAUSE_SUBSCRIPTION = _API_SUBSCRIPTION.format(extra="", call="pause_subscription(%(id)s, %(resume_at)s, %(now)s)")
API_RESUME_SUBSCRIPTION = _API_SUBSCRIPTION.format(extra="", call="resume_subscription(%(id)s, %(now)s)")
API_UNCANCEL_SUBSCRIPTION = _API_SUBSCRIPTION.format(extra="", call="uncancel_subscription(%(id)s, %(now)s)")
API_REACTIVATE_SUBSCRIPTION = _API_SUBSCRIPTION.format(extra="", call="reactivate_subscription(%(id)s, %(now)s)")
API_SET_QUANTITY = _API_SUBSCRIPTION.format(extra="", call="set_quantity(%(id)s, %(quantity)s, %(now)s)")
UPSERT_COUPON = ("SELECT * FROM billing.upsert_coupon(%(code)s, %(percent_off)s, %(amount_off)s, %(currency)s, "
                 "%(duration)s, %(duration_periods)s, %(max_redemptions)s, %(redeem_by)s, %(plan_codes)s::text[], "
                 "%(max_per_customer)s)")
HEALTH = "SELECT 1"
# Outbound webhook endpoints (db/functions/66_webhooks.sql).
CREATE_WEBHOOK_ENDPOINT = "SELECT * FROM billing.create_webhook_endpoint(%(url)s, %(types)s::text[], %(secret)s, %(now)s)"
LIST_WEBHOOK_ENDPOINTS = "SELECT * FROM billing.list_webhook_endpoints()"
GET_WEBHOOK_ENDPOINT = "SELECT * FROM billing.get_webhook_endpoint(%(id)s)"
DELETE_WEBHOOK_ENDPOINT = "SELECT * FROM billing.delete_webhook_endpoint(%(id)s)"
LIST_WEBHOOK_ATTEMPTS = "SELECT * FROM billing.list_webhook_attempts(%(id)s, %(limit)s)"

# -- Security (db/functions/85_security.sql, docs/security.md). The actor of the audit log is a
# transaction-local setting: a mutation sets it in its own transaction, first.
# The actor proof (billing._actor, 87_sessions.sql) is the hash of the credential the request
# carried: key:<hex>, console:<hex> or customer:<id>:<hex>; '' for none (the actor is then only a
# description the caller gives, never a key's name).
SET_ACTOR = "SELECT set_config('billing.actor', %(actor)s, true)"


class Actor(str):
    """An audit actor name with the proof of the credential behind it (SET_ACTOR_PROOF): the
    database names a key from the proof, never from the name (db/functions/87_sessions.sql)."""

    proof: str = ""


SET_ACTOR_PROOF = "SELECT set_config('billing.actor_proof', %(proof)s, true)"
AUTHENTICATE_API_KEY = ("SELECT key_id, scopes, max_quantity, max_trial_days, max_refund, allow_no_proration "
                        "FROM billing.authenticate_api_key(%(hash)s)")
CREATE_API_KEY = ("SELECT * FROM billing.create_api_key(%(id)s, %(name)s, %(hash)s, %(scopes)s::text[], "
                  "%(max_quantity)s, %(max_trial_days)s, %(max_refund)s, %(allow_no_proration)s)")
# Customer sessions and failed authentications (87_sessions.sql).
OPEN_CUSTOMER_SESSION = ("SELECT * FROM billing.open_customer_session(%(customer_id)s, %(hash)s, "
                         "%(ttl)s::interval, %(now)s)")
CUSTOMER_SESSION = "SELECT * FROM billing.customer_session(%(customer_id)s, %(hash)s, %(now)s)"
RECORD_AUTH_FAILURE = "SELECT billing.record_auth_failure(%(key_id)s, %(address)s, %(route)s, %(now)s) AS audited"
APPLY_REFUND_WEBHOOK = ("SELECT billing.apply_refund_webhook(%(event_id)s, %(key)s, %(outcome)s, %(refund_id)s, "
                        "%(amount)s, %(currency)s, %(charge)s, %(reason)s, %(now)s) AS outcome")
LIST_API_KEYS = "SELECT * FROM billing.list_api_keys()"
REVOKE_API_KEY = "SELECT * FROM billing.revoke_api_key(%(id)s)"
READ_AUDIT = "SELECT * FROM billing.read_audit(%(before)s, %(limit)s, %(actor)s, %(function)s)"
EXPIRE_IDEMPOTENCY_KEYS = (
    "SELECT billing.expire_idempotency_keys(%(max_age)s::interval, %(batch)s, %(now)s) AS expired")

# -- The demo (billing.demo). Its signups, one statement each for a whole step, calling the SQL
# API once per row: the customers (with their time zones) first, then each subscription at its
# own instant, in the order given.
DEMO_SIGNUP_CUSTOMERS = (
    "SELECT count(billing.upsert_customer(u.customer_id, u.timezone)) AS n "
    "FROM unnest(%(customer_ids)s::bigint[], %(timezones)s::text[]) AS u(customer_id, timezone)"
)
# The demo's emails (billing.demo.emails): a sample of customers, one per language, is emailed.
DEMO_EMAIL_SAMPLE = ("SELECT customer_id FROM billing.notification WHERE status = 'PENDING' GROUP BY customer_id "
                     "ORDER BY count(DISTINCT kind) DESC, customer_id LIMIT %(n)s")
DEMO_EMAIL_LOCALE = "SELECT (billing.set_customer_preferences(%(id)s, %(locale)s, NULL, %(now)s)).id"
DEMO_EMAIL_SKIP_OTHERS = ("UPDATE billing.notification SET status = 'SKIPPED', "
                          "last_error = 'demo: only a sample of customers is emailed' "
                          "WHERE status = 'PENDING' AND customer_id <> ALL(%(ids)s::bigint[])")
DEMO_EMAILS_PENDING = ("SELECT count(*) AS n FROM billing.notification WHERE status = 'PENDING' "
                       "AND customer_id = ANY(%(ids)s::bigint[])")
DEMO_EMAIL_RECIPIENTS = "SELECT id, email FROM billing.customer WHERE id = ANY(%(ids)s::bigint[])"
DEMO_CUSTOMER_DETAILS = (
    "SELECT count(billing.set_customer_details(u.id, u.name, u.email, u.address, u.city, u.postal_code, u.region, "
    "u.country, u.tax_id, u.tax_status)) AS n "
    "FROM unnest(%(ids)s::bigint[], %(names)s::text[], %(emails)s::text[], %(addresses)s::text[], %(cities)s::text[], "
    "%(postal_codes)s::text[], %(regions)s::text[], %(countries)s::text[], %(tax_ids)s::text[], %(statuses)s::text[]) "
    "AS u(id, name, email, address, city, postal_code, region, country, tax_id, tax_status)"
)
DEMO_TAX_RATE = ("SELECT * FROM billing.upsert_tax_rate(%(code)s, %(country)s, %(region)s, %(name)s, %(bp)s, "
                 "%(inclusive)s)")
DEMO_SIGNUP_SUBSCRIPTIONS = (
    "SELECT u.customer_id, (billing.create_subscription(u.key, u.customer_id, u.plan_code, u.at, u.trial_days, "
    "u.coupon, u.quantity)).id AS id "
    "FROM unnest(%(keys)s::text[], %(customer_ids)s::bigint[], %(plan_codes)s::text[], %(ats)s::timestamptz[], "
    "%(trial_days)s::integer[], %(coupons)s::text[], %(quantities)s::integer[]) "
    "WITH ORDINALITY AS u(key, customer_id, plan_code, at, trial_days, coupon, quantity, n) ORDER BY u.n"
)
DEMO_CAMPAIGN_COUPON = ("SELECT * FROM billing.upsert_coupon(%(code)s, 20, NULL, NULL, 'repeating', 2, NULL, "
                        "%(until)s, NULL)")
# The demo's progress probes read the tables of its own database directly (as their owner):
# invoices due and not yet claimed, and the outbox (all events written; those still PENDING).
DEMO_CHARGEABLE = (
    "SELECT count(*) AS n FROM billing.invoice WHERE status = 'OPEN' AND next_attempt_at <= %(now)s"
)
DEMO_OUTBOX_WRITTEN = "SELECT count(*) AS n FROM billing.outbox_event"
# A demo customer asks for half of what their last payment has left (their last PAID invoice
# charged at the gateway), through refund_invoice.
DEMO_REFUND_INVOICE = (
    "SELECT (billing.refund_invoice(i.id, greatest(1, (i.amount - i.amount_refunded) / 2), "
    "'demo-refund-' || i.customer_id, %(now)s)).id FROM billing.invoice i "
    "WHERE i.customer_id = %(customer_id)s AND i.status = 'PAID' AND i.paid_attempt_id IS NOT NULL "
    "AND i.amount > i.amount_refunded ORDER BY i.paid_at DESC LIMIT 1"
)
# Refunds not executed yet, and when the next of them is due (the demo's end moves the clock there).
DEMO_REFUNDS_PENDING = (
    "SELECT count(*) AS n, min(next_attempt_at) AS next FROM billing.refund WHERE status = 'REQUESTED'"
)
DEMO_OUTBOX_PENDING = "SELECT count(*) AS n FROM billing.outbox_event WHERE status = 'PENDING'"
# Whether the usage rating may have work at %(now)s (the demo rates, and first waits for its usage
# consumer, only then): a cursor whose earliest due instant is behind the grace, or one with late
# events (a superset of billing._usage_due's rows). A subscription with no cursor yet is the demo's
# to know (an API customer's signup: the rating's follow step makes its cursor).
DEMO_USAGE_MAY_BE_DUE = (
    "SELECT (EXISTS (SELECT 1 FROM billing.usage_cursor u WHERE NOT u.finished "
    "AND u.due_at <= %(now)s - make_interval(secs => %(grace)s)) "
    "OR EXISTS (SELECT 1 FROM billing.usage_cursor u WHERE u.late_since IS NOT NULL))::int AS n"
)

# The operator console (db/functions/86_console.sql, 84_console_records.sql): one read function
# per page, its sessions.
# A console session is opened with the key itself (its SHA-256), never its public id (issue 27, finding 6).
CONSOLE_OPEN_SESSION = "SELECT * FROM billing.console_open_session(%(hash)s, %(key_hash)s, %(ttl)s::interval, %(now)s)"
CONSOLE_READ_SESSION = "SELECT * FROM billing.console_session(%(hash)s, %(now)s)"
CONSOLE_CLOSE_SESSION = "SELECT billing.console_close_session(%(hash)s, %(now)s) AS closed"
CONSOLE_FUNCTIONS = "SELECT * FROM billing.console_functions(%(names)s::text[])"
CONSOLE_OVERVIEW = "SELECT billing.console_overview(%(now)s) AS doc"
CONSOLE_MRR = "SELECT * FROM billing.console_mrr(%(now)s, %(days)s)"
CONSOLE_CUSTOMERS = "SELECT * FROM billing.console_customers(%(q)s, %(limit)s)"
CONSOLE_CUSTOMER = "SELECT billing.console_customer(%(id)s, %(limit)s) AS doc"
CONSOLE_SUBSCRIPTION = "SELECT billing.console_subscription(%(id)s) AS doc"
CONSOLE_USAGE = "SELECT billing.console_usage(%(id)s, %(now)s) AS doc"
CONSOLE_INVOICES = "SELECT * FROM billing.console_invoices(%(status)s, %(before)s, %(limit)s)"
CONSOLE_EVENTS = "SELECT * FROM billing.console_events(%(subject)s, %(type)s, %(before)s, %(limit)s)"

# The webhook deliverer (db/functions/66_webhooks.sql, 67_webhook_deliveries.sql), woken by NOTIFY.
LISTEN_WEBHOOKS = "LISTEN billing_webhooks"
CLAIM_WEBHOOK_DELIVERIES = ("SELECT outbox_id, event_id::text, aggregate_type, aggregate_id, payload "
                            "FROM billing.claim_webhook_deliveries(%(endpoint)s, %(batch)s, %(lease)s::interval, %(now)s)")
RECORD_WEBHOOK_ATTEMPTS = (
    "SELECT billing.record_webhook_attempts(%(endpoint)s, %(ids)s::bigint[], %(outcomes)s::text[], "
    "%(statuses)s::integer[], %(errors)s::text[], %(durations)s::integer[], %(now)s, "
    "%(backoff)s::interval, %(cap)s::interval, %(give_up)s::interval) AS status"
)
ENABLED_WEBHOOK_ENDPOINTS = "SELECT id, url, secret FROM billing.list_webhook_endpoints() WHERE status = 'ENABLED'"

# `billing events` (db/functions/68_retention_replay.sql): the outbox from a point, and DEAD events requeued.
OUTBOX_EVENTS_FROM = ("SELECT id, aggregate_id, payload FROM billing.outbox_events_from("
                      "%(from_id)s, %(from_time)s, %(types)s::text[], %(after)s, %(limit)s)")
RETRY_DEAD_OUTBOX_EVENTS = "SELECT billing.retry_dead_outbox_events(%(types)s::text[], %(now)s) AS requeued"

# The charge results, recorded in batches (db/functions/53_payment_results.sql).
RECORD_PAYMENT_RESULTS = (
    "SELECT idempotency_key, error_code, error_message FROM billing.record_payment_results("
    "%(keys)s::text[], %(outcomes)s::text[], %(references)s::text[], %(reasons)s::text[], %(now)s, "
    "%(hard)s::boolean[])"
)

# Retention (db/functions/68_retention_replay.sql).
PURGE_EXPIRED = "SELECT * FROM billing.purge_expired(%(keep)s::interval, %(batch)s, %(now)s)"

# The relay's leadership (billing.worker.relay): one session holds the advisory lock and LISTENs;
# the server drops that session (and the lock) ~20 s after its host vanishes without closing it.
RELAY_LOCK = "SELECT pg_try_advisory_lock(%(key)s)"
LISTEN_OUTBOX = "LISTEN billing_outbox"
SERVER_KEEPALIVES = ("SELECT set_config('tcp_keepalives_idle', '10', false), "
                     "set_config('tcp_keepalives_interval', '3', false), set_config('tcp_keepalives_count', '3', false)")
# The relay on Citus, per shard group (db/functions/65_outbox_relay.sql, billing.worker.relay): a relay
# instance is "up" while its coordinator session holds the advisory lock (lock key, instance): pg_locks counts
# them, and a dead relay's lock goes with its session; it publishes from a shard group while the same
# session holds (RELAY_GROUP_KEY, group).
RELAY_PRESENCE = "SELECT pg_try_advisory_lock(%(key)s::int, %(instance)s::int)"
RELAYS_UP = """SELECT count(*) AS n FROM pg_catalog.pg_locks
                WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = %(key)s::int::oid
                  AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())"""
RELAY_TAKE_GROUP = "SELECT pg_try_advisory_lock(%(key)s::int, %(group)s::int)"
RELAY_GIVE_GROUP = "SELECT pg_advisory_unlock(%(key)s::int, %(group)s::int)"
RELAY_SHARD_GROUPS = "SELECT shard_group, node_name, node_port FROM billing.relay_shard_groups()"
# One call per node for several of its groups (issue 32; claim_outbox_events_in_shard and
# mark_outbox_published_in_shard are their forms for one group): each row with its group, each
# group's in the outbox's order (WITH ORDINALITY keeps it).
CLAIM_OUTBOX_EVENTS_IN_SHARDS = (
    "SELECT c.shard_group, (c.event).id, (c.event).aggregate_type, (c.event).aggregate_id, (c.event).payload::text, "
    "c.ordinality FROM billing.claim_outbox_events_in_shards(%(worker)s, %(groups)s::integer[], %(batch)s, "
    "%(lease)s::interval, %(now)s) WITH ORDINALITY AS c(shard_group, event, ordinality) ORDER BY c.ordinality")
MARK_OUTBOX_PUBLISHED_IN_SHARDS = (
    "SELECT billing.mark_outbox_published_in_shards(%(groups)s::integer[], %(ids)s::bigint[], %(now)s)")
MARK_OUTBOX_FAILED_IN_SHARD = "SELECT billing.mark_outbox_failed_in_shard(%(group)s, %(id)s, %(error)s, %(now)s)"


API_SQLSTATES = {"BL404": 404, "BL409": 409, "BL422": 422}


@dataclass
class ContractError(Exception):
    """An error of the SQL API: `code` is the SQLSTATE (BL404, BL409, BL422)."""

    code: str
    message: str

    def __str__(self) -> str:  # pragma: no cover - trivial
        return f"{self.code}: {self.message}"


def contract_error(exc: BaseException) -> ContractError | None:
    """The contract error behind a psycopg exception, or None when it is something else."""
    if isinstance(exc, psycopg.Error) and exc.sqlstate in API_SQLSTATES:
        diag = exc.diag
        return ContractError(exc.sqlstate, diag.message_primary or str(exc))
    return None


def sync_pool(url: str, *, min_size: int = 1, max_size: int = 4, name: str = "billing") -> ConnectionPool:
    return ConnectionPool(
        url, min_size=min_size, max_size=max_size, name=name, open=True,
        kwargs={"autocommit": True, "row_factory": dict_row},
    )


async def async_pool(url: str, *, min_size: int = 1, max_size: int = 8, name: str = "billing") -> AsyncConnectionPool:
    pool = AsyncConnectionPool(
        url, min_size=min_size, max_size=max_size, name=name, open=False,
        kwargs={"autocommit": True, "row_factory": dict_row},
    )
    await pool.open(wait=True, timeout=30)
    return pool


# -- emails to customers, portal links, a payment the customer authenticates (docs/customers.md) --

CLAIM_NOTIFICATIONS = "SELECT * FROM billing.claim_notifications(%(batch)s, %(lease)s::interval, %(now)s)"
RECORD_NOTIFICATION_RESULT = (
    "SELECT status, attempts FROM billing.record_notification_result(%(customer)s, %(id)s, %(outcome)s, %(error)s, "
    "%(message_id)s, %(now)s, %(backoff)s::interval, %(cap)s::interval, %(max)s)")
NOTIFICATION_DOCUMENT = "SELECT billing.get_invoice_document(%(id)s) AS doc"
ANNOUNCE_UPCOMING_RENEWALS = "SELECT billing.announce_upcoming_renewals(%(days)s, 500, %(now)s) AS n"
CREATE_PORTAL_LINK = ("SELECT customer_id, expires_at FROM billing.create_portal_link(%(customer_id)s, %(hash)s, "
                      "%(ttl)s::interval, %(now)s)")
INVOICE_ACTION = ("SELECT invoice_id, idempotency_key, payment_reference, provider, amount, currency, "
                  "action_required_until FROM billing.invoice_action(%(customer)s, %(invoice)s, %(now)s)")
APPLY_PORTAL_PAYMENT = ("SELECT billing.apply_gateway_webhook(%(event)s, %(key)s, 'SUCCEEDED', %(reference)s, "
                        "%(detail)s::jsonb, %(now)s) AS outcome")

# The customer portal (db/functions/37_portal.sql, billing.portal): every call names its customer.
PORTAL_OPEN_SESSION = ("SELECT customer_id, locale, expires_at FROM billing.portal_open_session(%(customer)s, "
                       "%(link_hash)s, %(session_hash)s, %(ttl)s::interval, %(now)s)")
PORTAL_SESSION = "SELECT customer_id, locale, expires_at FROM billing.portal_session(%(customer)s, %(hash)s, %(now)s)"
PORTAL_CLOSE_SESSION = "SELECT billing.portal_close_session(%(customer)s, %(hash)s, %(now)s) AS closed"
PORTAL_HOME = "SELECT billing.portal_home(%(customer)s, %(now)s) AS home"
PORTAL_INVOICE_DOCUMENT = "SELECT billing.portal_invoice_document(%(customer)s, %(invoice)s) AS document"
PORTAL_CANCEL = "SELECT id, status, cancel_at_period_end FROM billing.portal_cancel(%(customer)s, %(id)s, %(now)s)"
PORTAL_UNCANCEL = "SELECT id, status, cancel_at_period_end FROM billing.portal_uncancel(%(customer)s, %(id)s, %(now)s)"
PORTAL_CHANGE_PLAN = ("SELECT id, status, cancel_at_period_end FROM billing.portal_change_plan(%(customer)s, %(id)s, "
                      "%(plan)s, %(now)s)")
SET_PLAN_CHANGE_OPTIONS = "SELECT billing.set_plan_change_options(%(plan)s, %(options)s::jsonb) AS n"

# Usage-based billing (db/functions/71_usage.sql, 83_usage_ingest.sql, 82_usage_pricing.sql, docs/usage.md).
INGEST_USAGE = ("SELECT ord, status, reason, customer_id FROM billing.ingest_usage(%(events)s, %(now)s, "
                "%(grace)s, %(skew)s, %(retention)s)")
# %(events)b: a list of str in binary form (text[]): psycopg's text form quotes every element in
# Python, ~50x slower at 10,000 events
INGEST_USAGE_BATCH = ("SELECT ord, status, reason FROM billing.ingest_usage_batch(%(events)b, %(now)s, "
                      "%(grace)s, %(skew)s, %(retention)s)")
# the Kafka consumer's: its eight lists (billing.usage.event_columns) in binary form, as above
_COLUMNS_ARGS = ("%(spec)b::text[], %(subject)b::text[], %(id)b::text[], %(source)b::text[], %(type)b::text[], "
                 "%(time)b::text[], %(data)b::text[], %(raw)b::text[], %(now)s, %(grace)s, %(skew)s, %(retention)s)")
# the same, each attribute list but the raw texts sent as one text (billing.usage._joined)
_COLUMNS_JOINED_ARGS = ", ".join(
    f"string_to_array(%({c})s::text, E'\\x1f', E'\\x1e')" for c in ("spec", "subject", "id", "source", "type", "time", "data")
) + ", %(raw)b::text[], %(now)s, %(grace)s, %(skew)s, %(retention)s)"
INGEST_USAGE_COLUMNS = "SELECT ord, status, reason FROM billing.ingest_usage_columns(" + _COLUMNS_ARGS
INGEST_USAGE_COLUMNS_JOINED = "SELECT ord, status, reason FROM billing.ingest_usage_columns(" + _COLUMNS_JOINED_ARGS
# the consumer's answer in one row: the counts, and the events it must dead-letter (ord, reason): a
# batch's 10,000 rows read by the client cost it ~0.9 µs an event
_COUNTS = ("SELECT count(*) FILTER (WHERE status = 'accepted'), count(*) FILTER (WHERE status = 'duplicate'), "
           "coalesce(array_agg(ord ORDER BY ord) FILTER (WHERE status NOT IN ('accepted', 'duplicate')), '{}'), "
           "coalesce(array_agg(reason ORDER BY ord) FILTER (WHERE status NOT IN ('accepted', 'duplicate')), '{}') "
           "FROM billing.ingest_usage_columns(")
INGEST_USAGE_COLUMNS_COUNTS = _COUNTS + _COLUMNS_ARGS
INGEST_USAGE_COLUMNS_JOINED_COUNTS = _COUNTS + _COLUMNS_JOINED_ARGS
CURRENT_USAGE = ("SELECT meter_code, aggregation, value, events, period_start, period_end "
                 "FROM billing.current_usage(%(customer_id)s, %(now)s)")
UPCOMING_INVOICE = "SELECT billing.upcoming_invoice(%(id)s, %(now)s) AS doc"
USAGE_PARTITIONS = "SELECT partition_name, action FROM billing.usage_partitions(%(now)s, %(retention)s)"

# -- after a promotion that may have lost writes (billing.after_failover, docs/operations.md) --

SEQUENCES_OF_SCHEMA = ("SELECT schemaname, sequencename, last_value, max_value FROM pg_sequences "
                       "WHERE schemaname = %(schema)s ORDER BY sequencename")
ADVANCE_SEQUENCE = "SELECT setval(format('%%I.%%I', %(schema)s::text, %(name)s::text)::regclass, %(value)s, true)"

# -- after a point-in-time restore (billing.after_restore, docs/operations.md) --
KEY_NAMESPACE = "SELECT key_namespace FROM billing.installation"
NEW_KEY_NAMESPACE = "SELECT billing.new_key_namespace()"
# Every lease taken before the restore instant lapses now: its holder is the lost past.
LAPSE_LEASES = (
    ("outbox_event", "UPDATE billing.outbox_event SET lease_until = NULL WHERE lease_until > %(now)s"),
    ("webhook_delivery", "UPDATE billing.webhook_delivery SET lease_until = NULL WHERE lease_until > %(now)s"),
    ("notification", "UPDATE billing.notification SET lease_until = NULL WHERE lease_until > %(now)s"),
    ("shard_lease", "UPDATE billing.shard_lease SET holder = NULL, lease_until = NULL, leased_at = NULL "
                    "WHERE lease_until > %(now)s"),
    # A charge claimed and not recorded: claimable again now, under its stored key.
    ("invoice", "UPDATE billing.invoice i SET next_attempt_at = %(now)s WHERE i.status = 'OPEN' "
                "AND i.next_attempt_at > %(now)s AND EXISTS (SELECT 1 FROM billing.payment_attempt a "
                "WHERE a.customer_id = i.customer_id AND a.invoice_id = i.id AND a.outcome IS NULL)"),
)
ATTEMPTS_IN_DOUBT = "SELECT count(*) FROM billing.payment_attempt WHERE outcome IS NULL OR outcome = 'UNKNOWN'"
KNOWN_KEYS = "SELECT idempotency_key FROM billing.payment_attempt WHERE idempotency_key = ANY(%(keys)s)"
INVOICES_BY_ID = ("SELECT id, customer_id, subscription_id, kind, period_start, amount, currency, status "
                  "FROM billing.invoice WHERE id = ANY(%(ids)s)")
INVOICES_OF_CUSTOMERS = ("SELECT id, customer_id, subscription_id, kind, period_start, amount, currency, status "
                         "FROM billing.invoice WHERE customer_id = ANY(%(customers)s) AND id >= %(since)s "
                         "AND status IN ('OPEN', 'PAID') ORDER BY id")
# The outbox against Kafka after a restore: what Kafka holds is published; what it lacks is reported.
OUTBOX_MARK_ON_KAFKA = ("UPDATE billing.outbox_event SET status = 'PUBLISHED', published_at = %(now)s, lease_until = NULL "
                        "WHERE status = 'PENDING' AND event_id = ANY(%(ids)s::uuid[]) RETURNING event_id::text")
OUTBOX_KNOWN_EVENTS = "SELECT event_id::text FROM billing.outbox_event WHERE event_id = ANY(%(ids)s::uuid[])"
OUTBOX_PUBLISHED_NOT_ON_KAFKA = ("SELECT event_id::text FROM billing.outbox_event WHERE status = 'PUBLISHED' "
                                 "AND published_at >= %(since)s AND NOT (event_id = ANY(%(ids)s::uuid[])) ORDER BY id")
# -- The HTTP API's /v1 (db/functions/77_api_lists.sql, docs/http-api.md "Lists"): one page of a
# cursor walk per call, limit + 1 rows (the extra one says whether there are more).
V1_GET_CUSTOMER = "SELECT * FROM billing.get_customer(%(id)s)"
V1_CREATE_CUSTOMER = (
    "SELECT * FROM billing.create_customer(%(id)s, %(timezone)s, %(name)s, %(email)s, %(address)s, %(city)s, "
    "%(postal_code)s, %(region)s, %(country)s, %(tax_id)s, %(tax_status)s, %(external_id)s)"
)
# A path's id that is not ours (digits) is the caller's external id (db/functions/21_external_ids.sql).
V1_RESOLVE_EXTERNAL_ID = "SELECT billing.resolve_external_id(%(kind)s, %(external_id)s) AS id"
V1_GET_PLAN_BY_EXTERNAL_ID = "SELECT * FROM billing.get_plan_by_external_id(%(external_id)s)"
# An update of some details: the fields not given keep their value (read and written in one statement).
V1_UPDATE_CUSTOMER = (
    "SELECT d.* FROM billing.get_customer(%(id)s) c CROSS JOIN LATERAL billing.set_customer_details(c.id, "
    "CASE WHEN %(has_name)s THEN %(name)s ELSE c.name END, CASE WHEN %(has_email)s THEN %(email)s ELSE c.email END, "
    "CASE WHEN %(has_address)s THEN %(address)s ELSE c.address END, CASE WHEN %(has_city)s THEN %(city)s ELSE c.city END, "
    "CASE WHEN %(has_postal_code)s THEN %(postal_code)s ELSE c.postal_code END, "
    "CASE WHEN %(has_region)s THEN %(region)s ELSE c.region END, "
    "CASE WHEN %(has_country)s THEN %(country)s ELSE c.country::text END, "
    "CASE WHEN %(has_tax_id)s THEN %(tax_id)s ELSE c.tax_id END, "
    "CASE WHEN %(has_tax_status)s THEN %(tax_status)s ELSE c.tax_status END) d"
)
V1_LIST_CUSTOMERS = "SELECT * FROM billing.list_customers(%(limit)s, %(after)s, %(before)s, %(email)s)"
V1_GET_PLAN = "SELECT * FROM billing.get_plan(%(code)s)"
V1_LIST_PLANS = "SELECT * FROM billing.list_plans(%(limit)s, %(after)s, %(before)s, %(archived)s)"
V1_ARCHIVE_PLAN = "SELECT * FROM billing.archive_plan(%(code)s, %(now)s)"
V1_UPSERT_PLAN = (
    "SELECT * FROM billing.upsert_plan(%(code)s, %(price)s, %(currency)s, %(interval)s, %(count)s, %(now)s, "
    "%(billing_day)s, %(external_id)s, %(self_serve)s)"
)
V1_LIST_COUPONS = "SELECT * FROM billing.list_coupons(%(limit)s, %(after)s, %(before)s, %(archived)s)"
V1_ARCHIVE_COUPON = "SELECT * FROM billing.archive_coupon(%(code)s, %(now)s)"
V1_LIST_TAX_RATES = "SELECT * FROM billing.list_tax_rates(%(limit)s, %(after)s, %(before)s)"
V1_UPSERT_TAX_RATE = ("SELECT * FROM billing.upsert_tax_rate(%(code)s, %(country)s, %(region)s, %(name)s, %(bp)s, "
                      "%(inclusive)s, %(active)s)")
V1_LIST_PAYMENT_METHODS = "SELECT * FROM billing.list_payment_methods(%(customer_id)s)"
V1_CREATE_SUBSCRIPTIONS = (
    "SELECT jsonb_agg(jsonb_build_object('id', r.subscription_id, 'customer_id', r.customer_id, 'outcome', r.outcome) "
    "ORDER BY r.n) AS made FROM billing.create_subscriptions(%(rows)s::jsonb, %(now)s) WITH ORDINALITY "
    "AS r(idempotency_key, subscription_id, customer_id, outcome, n)"
)
V1_LIST_SUBSCRIPTIONS = (
    "SELECT s.*, billing.plan_code(s.plan_id) AS plan_code, billing.plan_code(s.scheduled_plan_id) AS scheduled_plan_code "
    "FROM billing.list_subscriptions(%(limit)s, %(after)s, %(before)s, %(customer_id)s, %(status)s, %(plan_code)s, "
    "%(created_from)s, %(created_to)s) s"
)
V1_LIST_INVOICES = (
    "SELECT * FROM billing.list_invoices(%(limit)s, %(after)s, %(before)s, %(customer_id)s, %(status)s, "
    "%(period_from)s, %(period_to)s, %(subscription_id)s)"
)
V1_LIST_CREDIT_NOTES = ("SELECT * FROM billing.list_credit_notes(%(limit)s, %(after)s, %(before)s, %(customer_id)s, "
                        "%(invoice_id)s)")
V1_LIST_REFUNDS = ("SELECT * FROM billing.list_refunds(%(limit)s::integer, %(after)s::bigint, %(before)s::bigint, "
                   "%(customer_id)s::bigint, %(invoice_id)s::bigint)")
V1_LIST_EVENTS = ("SELECT * FROM billing.list_events(%(limit)s, %(after)s, %(before)s, %(type)s, %(from)s, %(to)s, "
                  "%(customer_id)s)")
V1_GET_EVENT = "SELECT * FROM billing.get_event(%(event_id)s::uuid)"
