"""Database roles by job (docs/security.md, db/functions/90_grants.sql).

* The policy below is the intended matrix; the catalog must grant exactly it (a change of grants
  is deliberate: update both).
* For each job role, every function of schema billing it must NOT execute, listed from the
  catalog (so a function added tomorrow is covered without editing this file), is called by a
  login holding only that role: permission denied, every time.
* Every object belongs to billing_owner (NOLOGIN, not a superuser); PUBLIC gets nothing.
* `billing db login-role` makes a login with its job's timeouts; the clock guard and the lease
  cap hold outside simulation databases.
"""

from __future__ import annotations

import subprocess
import uuid

import psycopg
import pytest
from psycopg import errors, sql

from .chaos.harness import BILLING

# The reads of the HTTP API's /v1 lists (db/functions/77_api_lists.sql, issue 28).
V1_READS = {"get_customer", "list_customers", "get_plan", "list_plans", "list_coupons", "list_tax_rates",
            "list_subscriptions", "list_invoices", "list_credit_notes", "list_events", "get_event"}
POLICY = {
    "billing_api": {"create_subscription", "create_subscriptions", "lock_self_serve_plans", "get_subscription", "cancel_subscription", "change_plan",
                    "set_external_id", "resolve_external_id", "get_customer_by_external_id", "get_plan_by_external_id", "get_subscription_by_external_id",
                    "ingest_usage", "ingest_usage_batch", "current_usage", "list_meters", "upcoming_invoice",
                    "set_usage_alert", "list_usage_alerts", "update_usage_alert", "delete_usage_alert",
                    "apply_coupon", "pause_subscription", "resume_subscription", "uncancel_subscription",
                    "reactivate_subscription", "set_quantity",
                    "upsert_customer", "plan_code", "apply_gateway_webhook", "authenticate_api_key", "read_audit",
                    "outbox_stats", "period_end", "proration_amount", "is_simulation", "create_webhook_endpoint",
                    "list_webhook_endpoints", "get_webhook_endpoint", "delete_webhook_endpoint", "list_webhook_attempts",
                    "set_payment_method", "detach_payment_method", "list_payment_methods", "refund_invoice",
                    "list_refunds", "retry_invoice", "void_invoice", "get_invoice_document",
                    "set_customer_details", "apply_refund_webhook", "open_customer_session", "customer_session",
                    "close_customer_session", "record_auth_failure",
                    "notification_kinds", "customer_locales", "set_customer_preferences", "list_notifications",
                    "create_portal_link", "use_portal_link", "revoke_portal_links", "invoice_action",
                    "portal_open_session", "portal_session", "portal_close_session", "portal_home",
                    "portal_invoice_document", "portal_cancel", "portal_uncancel", "portal_change_plan"} | V1_READS | {
                    "create_customer", "report_mrr", "report_mrr_movements", "report_churn", "report_revenue"},
    "billing_worker": {"create_due_invoices", "claim_charges", "record_payment_result", "record_payment_results",
                       "ingest_usage", "ingest_usage_batch", "ingest_usage_columns", "usage_partitions", "rate_usage", "check_usage_alerts",
                       "dunning_next_attempt", "expire_idempotency_keys", "purge_expired", "outbox_stats", "period_end",
                       "proration_amount", "is_simulation", "claim_refunds", "record_refund_result",
                       "announce_expiring_payment_methods", "give_up_waiting_invoices", "finalize_invoices",
                       "lease_shard_groups",
                       "renew_in_shard", "charge_claims_in_shard", "refund_claims_in_shard", "shard_groups",
                       "claim_usage_in_shard", "rate_usage_in_shard", "lock_usage_customers",
                       "claim_refund_rechecks",
                       "announce_upcoming_renewals", "claim_notifications", "record_notification_result",
                       "get_invoice_document", "create_portal_link", "notification_kinds", "customer_locales"},
    "billing_relay": {"claim_outbox_events", "mark_outbox_published", "mark_outbox_failed", "outbox_stats",
                      "list_webhook_endpoints", "claim_webhook_deliveries", "record_webhook_attempts",
                      "is_simulation", "lease_shard_groups",
                      "relay_shard_groups", "claim_outbox_events_in_shard", "mark_outbox_published_in_shard",
                      "mark_outbox_failed_in_shard", "claim_outbox_events_in_shards", "mark_outbox_published_in_shards"},
    "billing_readonly": {"get_subscription", "plan_code", "outbox_stats", "status_summary", "period_end",
                         "resolve_external_id", "get_plan_by_external_id", "get_subscription_by_external_id",
                         "current_usage", "usage_between", "list_meters", "upcoming_invoice", "list_usage_alerts",
                         "proration_amount", "dunning_next_attempt", "is_simulation",
                         "list_refunds", "report_mrr", "report_mrr_movements",
                         "report_churn", "report_revenue",
                         "figures_by_hour", "figures_counts", "figures_revenue",
                         "witness_charged_twice", "witness_invoices", "witness_periods", "witness_restarts",
                         "witness_states", "witness_cash", "witness_refunds", "witness_sample_invoices",
                         "witness_usage_events", "witness_usage_counts", "witness_usage_ratings",
                         "notification_kinds",
                         "customer_locales"},
    # Customers' personal data (names, emails, addresses, tax ids, payment-method references): its own job.
    "billing_support": {"get_subscription", "plan_code", "is_simulation", "list_payment_methods", "list_refunds",
                        "resolve_external_id", "get_customer_by_external_id", "get_plan_by_external_id", "get_subscription_by_external_id",
                        "get_invoice_document", "list_notifications"},
    "billing_admin": {"upsert_plan", "set_plan_self_serve", "lock_self_serve_plans", "upsert_customer", "upsert_coupon", "archive_plan", "archive_coupon", "create_subscriptions",
                      "import_customers", "import_subscriptions", "set_external_id", "resolve_external_id", "get_customer_by_external_id", "get_plan_by_external_id", "get_subscription_by_external_id",
                      "upsert_meter", "list_meters", "usage_partitions", "current_usage", "usage_between", "upsert_plan_charge",
                      "rate_usage", "upcoming_invoice", "set_usage_alert", "check_usage_alerts",
                      "list_usage_alerts", "update_usage_alert", "delete_usage_alert",
                      "set_trial_will_end_notice", "create_api_key", "list_api_keys", "revoke_api_key",
                      "read_audit", "set_max_clock_skew", "status_summary", "outbox_stats", "get_subscription",
                      "plan_code", "period_end", "proration_amount", "is_simulation", "create_webhook_endpoint",
                      "list_webhook_endpoints", "get_webhook_endpoint", "delete_webhook_endpoint",
                      "list_webhook_attempts", "outbox_events_from", "retry_dead_outbox_events", "replay_outbox_event",
                      "new_key_namespace", "set_payment_method", "detach_payment_method", "list_payment_methods",
                      "refund_invoice", "list_refunds", "record_refund_result", "retry_invoice", "void_invoice",
                      "upsert_tax_rate", "set_customer_details", "finalize_invoice", "finalize_invoices",
                      "get_invoice_document", "report_mrr", "report_mrr_movements", "report_churn", "report_revenue",
                      "notification_kinds", "customer_locales", "set_customer_preferences", "list_notifications",
                      "create_portal_link", "revoke_portal_links", "set_action_window", "set_plan_change_options", "create_customer"} | V1_READS,
    # The operator console: its reads and sessions, plus the actions it offers (billing.console.actions)
    # that exist in this database; see _with_console_actions().
    "billing_console": {"console_open_session", "console_session", "console_close_session", "console_functions",
                        "console_overview", "console_mrr", "console_customers", "console_customer",
                        "console_subscription", "console_invoices", "console_events", "authenticate_api_key",
                        "console_usage", "resolve_external_id",
                        "get_subscription", "plan_code", "outbox_stats", "is_simulation", "cancel_subscription",
                        "change_plan", "replay_outbox_event", "get_invoice_document", "report_mrr",
                        "report_mrr_movements", "report_churn", "report_revenue", "record_auth_failure"},
}
# The findings of the issue, by name: who must never reach these.
NEVER = {
    "billing_api": {"import_subscriptions", "import_customers",  # a period "paid elsewhere" is an operator's word
                    "record_payment_result", "upsert_plan", "mark_outbox_published", "create_due_invoices",
                    "claim_charges", "create_api_key", "set_max_clock_skew", "claim_refunds", "upsert_coupon",
                    "archive_plan", "archive_coupon", "set_plan_self_serve",  # which plans browsers buy: the operator's
                    "set_trial_will_end_notice", "record_refund_result", "claim_refund_rechecks"},
    "billing_worker": {"upsert_plan", "upsert_coupon", "create_api_key", "mark_outbox_published", "cancel_subscription",
                       "create_webhook_endpoint", "retry_dead_outbox_events", "refund_invoice", "set_payment_method"},
    "billing_relay": {"record_payment_result", "upsert_plan", "create_subscription", "refund_invoice",
                      "record_refund_result", "void_invoice"},
    "billing_readonly": {"create_subscription", "record_payment_result", "upsert_plan", "mark_outbox_published",
                         "refund_invoice", "set_payment_method", "void_invoice", "retry_invoice",
                         "list_payment_methods", "get_invoice_document", "get_customer_by_external_id"},
    "billing_support": {"create_subscription", "record_payment_result", "refund_invoice", "set_payment_method",
                        "set_customer_details", "void_invoice", "record_refund_result", "apply_gateway_webhook"},
    "billing_admin": {"record_payment_result", "claim_charges", "mark_outbox_published", "apply_gateway_webhook"},
    "billing_console": {"record_payment_result", "claim_charges", "mark_outbox_published", "apply_gateway_webhook",
                        "create_api_key", "upsert_plan", "create_subscription", "set_max_clock_skew",
                        "record_refund_result", "open_customer_session"},
}



def test_the_policy_covers_exactly_the_job_roles():
    """One list of jobs (billing.roles): the policy above and the findings name each of its roles."""
    from billing.migrate import ROLES
    from billing.roles import JOB_ROLES

    assert set(POLICY) == set(JOB_ROLES)
    assert set(NEVER) <= set(JOB_ROLES)
    assert all(f"'{role}'" in ROLES for role in JOB_ROLES)  # billing db migrate creates each


def test_security_md_lists_each_roles_functions():
    """docs/security.md's table of roles says what each executes: exactly the policy (the console
    also the functions of its actions, billing.console.actions)."""
    import re

    from billing.config import REPO_ROOT
    from billing.console.actions import CANDIDATE_FUNCTIONS
    from billing.roles import JOB_ROLES

    rows = {}
    for line in (REPO_ROOT / "docs" / "security.md").read_text().splitlines():
        m = re.match(r"^\| `(billing_[a-z]+)` \|([^|]*)\|", line)
        if m:
            rows[m.group(1)] = set(re.findall(r"`([a-z_0-9]+)`", m.group(2)))
    assert set(rows) == set(JOB_ROLES)
    for role, listed in rows.items():
        expected = POLICY[role] - {"is_simulation"}  # "every role also executes is_simulation"
        assert expected - listed == set(), f"{role}: docs/security.md omits {sorted(expected - listed)}"
        extra = listed - expected - (set(CANDIDATE_FUNCTIONS) if role == "billing_console" else set())
        assert extra == set(), f"{role}: docs/security.md lists {sorted(extra)}, which it does not execute"

def _with_console_actions(conn) -> dict[str, set[str]]:
    """POLICY, where billing_console also has each console action's function that exists here
    (90_grants.sql lists them ahead of their landing; the console offers them from that day)."""
    from billing.console.actions import CANDIDATE_FUNCTIONS

    present = {r[0] for r in conn.cursor(row_factory=psycopg.rows.tuple_row).execute(
        "SELECT proname FROM pg_proc WHERE pronamespace = 'billing'::regnamespace AND proname = ANY (%s)",
        (CANDIDATE_FUNCTIONS,))}
    return {**POLICY, "billing_console": POLICY["billing_console"] | present}


def _catalog_functions(conn) -> list[dict]:
    return conn.execute("""
        SELECT p.oid::regprocedure::text AS signature, p.proname,
               ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) t) AS argtypes,
               p.prorettype = 'pg_catalog.trigger'::regtype AS is_trigger, p.prokind::text AS kind
          FROM pg_proc p WHERE p.pronamespace = 'billing'::regnamespace ORDER BY 1""").fetchall()


@pytest.fixture
def login_as(db_url):
    """login_as(role) -> URL of a fresh LOGIN role that holds only `role`."""
    made = []

    def make(role: str) -> str:
        name = f"r_{role.removeprefix('billing_')}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(sql.Identifier(name), sql.Identifier(role)))
        made.append(name)
        info = psycopg.conninfo.conninfo_to_dict(db_url)
        info["user"] = name
        return psycopg.conninfo.make_conninfo(**info)

    yield make
    with psycopg.connect(db_url, autocommit=True) as conn:
        for name in made:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,))
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_catalog_grants_exactly_the_policy(db_url):
    with psycopg.connect(db_url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        public = {f["proname"] for f in _catalog_functions(conn)
                  if not f["proname"].startswith("_") and not f["is_trigger"]}
        policy = _with_console_actions(conn)
        unplaced = public - set().union(*policy.values())
        assert not unplaced, f"functions in no job role (add them to db/functions/90_grants.sql): {sorted(unplaced)}"
        for role, allowed in policy.items():
            got = {r["proname"] for r in conn.execute(
                "SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'billing'::regnamespace "
                "AND has_function_privilege(%s, p.oid, 'EXECUTE')", (role,))}
            assert got == allowed, (role, sorted(got ^ allowed))
            assert not NEVER[role] & got, role
        # The deprecated union role has every job's functions, as before.
        got = {r["proname"] for r in conn.execute(
            "SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'billing'::regnamespace "
            "AND has_function_privilege('billing_app', p.oid, 'EXECUTE')")}
        assert got == set().union(*policy.values())


@pytest.mark.parametrize("role", sorted(POLICY))
def test_each_role_is_denied_every_function_not_its_own(db_url, login_as, role):
    with psycopg.connect(db_url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        functions = [f for f in _catalog_functions(conn) if not f["is_trigger"] and f["kind"] == "f"]
        allowed = _with_console_actions(conn)[role]
    forbidden = [f for f in functions if f["proname"] not in allowed]
    assert {f["proname"] for f in forbidden} >= NEVER[role]
    assert any(f["proname"].startswith("_") for f in forbidden)
    with psycopg.connect(login_as(role), autocommit=True) as conn:
        for f in forbidden:
            call = sql.SQL("SELECT billing.{}({})").format(
                sql.Identifier(f["proname"]),
                sql.SQL(", ").join(sql.SQL("NULL::{}").format(sql.SQL(t)) for t in f["argtypes"]))
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(call)
        # ...and no table: not even a read of the keys or the audit log.
        for table in ("api_key", "audit_log", "subscription", "database_setting"):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(sql.SQL("SELECT 1 FROM billing.{} LIMIT 1").format(sql.Identifier(table)))
        # ...nor the owner's powers.
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute("SET ROLE billing_owner")


def test_everything_belongs_to_the_non_login_owner(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        owners = conn.execute("""
            SELECT DISTINCT owner FROM (
                SELECT relowner::regrole::text AS owner FROM pg_class WHERE relnamespace = 'billing'::regnamespace
                UNION ALL SELECT proowner::regrole::text FROM pg_proc WHERE pronamespace = 'billing'::regnamespace
                UNION ALL SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'billing') o""").fetchall()
        assert owners == [("billing_owner",)]
        login, superuser, bypass = conn.execute(
            "SELECT rolcanlogin, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = 'billing_owner'").fetchone()
        assert (login, superuser, bypass) == (False, False, False)
        for role in POLICY:
            assert conn.execute("SELECT rolcanlogin FROM pg_roles WHERE rolname = %s", (role,)).fetchone() == (False,)


def test_login_role_gets_its_job_and_timeouts(db_url):
    name = f"api_{uuid.uuid4().hex[:8]}"
    try:
        out = subprocess.run([BILLING, "db", "login-role", name, "--job", "api", "--database-url", db_url],
                             capture_output=True, text=True, check=True).stdout
        assert "statement_timeout 5s" in out
        info = psycopg.conninfo.conninfo_to_dict(db_url)
        info["user"] = name
        with psycopg.connect(psycopg.conninfo.make_conninfo(**info), autocommit=True) as conn:
            assert conn.execute("SHOW statement_timeout").fetchone()[0] == "5s"
            assert conn.execute("SHOW lock_timeout").fetchone()[0] == "2s"
            assert conn.execute("SELECT pg_has_role('billing_api', 'MEMBER')").fetchone()[0]
            assert not conn.execute("SELECT pg_has_role('billing_worker', 'MEMBER')").fetchone()[0]
            with pytest.raises(errors.QueryCanceled):  # the statement budget holds
                conn.execute("SELECT pg_sleep(6)")
    finally:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def test_p_now_far_from_the_clock_is_refused_outside_simulation(db_url, login_as):
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('P', 1000, 'USD', 'MONTH', 1)")
        # Only the owner changes the mark; here the superuser plays the migrator.
        conn.execute("UPDATE billing.database_setting SET simulation = false")
    with psycopg.connect(login_as("billing_worker"), autocommit=True) as conn:
        assert conn.execute("SELECT billing.is_simulation()").fetchone()[0] is False
        for call in ("SELECT billing.create_due_invoices(500, now() + interval '5 years')",
                     "SELECT billing.create_due_invoices(500, now() - interval '1 hour')",
                     "SELECT * FROM billing.claim_charges('w', 10, '5 minutes', now() + interval '10 minutes')",
                     "SELECT * FROM billing.claim_charges('w', 10, '1000 years', now())",
                     "SELECT * FROM billing.claim_charges('w', 10, '2 hours', now())"):
            with pytest.raises(psycopg.Error) as caught:
                conn.execute(call)
            assert caught.value.sqlstate == "BL422", (call, caught.value)
        assert conn.execute("SELECT billing.create_due_invoices(500, now() + interval '4 minutes')").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM billing.claim_charges('w', 10, '1 hour', now())").fetchone()[0] == 0
    with psycopg.connect(login_as("billing_admin"), autocommit=True) as conn:
        conn.execute("SELECT billing.set_max_clock_skew('1 hour')")
    with psycopg.connect(login_as("billing_worker"), autocommit=True) as conn:
        assert conn.execute("SELECT billing.create_due_invoices(500, now() + interval '50 minutes')").fetchone()[0] == 0
    # Nobody but the owner can mark the database as a simulation one.
    with psycopg.connect(login_as("billing_admin"), autocommit=True) as conn:
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute("UPDATE billing.database_setting SET simulation = true")


def test_the_driver_s_own_statements_fit_its_job_roles(db_url, login_as):
    """What `billing worker` runs works as a login holding billing_worker and billing_relay."""
    from datetime import datetime, timedelta, timezone

    from billing import db

    t0 = datetime(2026, 10, 1, tzinfo=timezone.utc)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('P', 1000, 'USD', 'MONTH', 1)")
        conn.execute("SELECT billing.create_subscription('w-1', 1, 'P', %s)", (t0,))
    url = login_as("billing_worker")
    with psycopg.connect(db_url, autocommit=True) as conn:
        user = psycopg.conninfo.conninfo_to_dict(url)["user"]
        conn.execute(sql.SQL("GRANT billing_relay TO {}").format(sql.Identifier(user)))
    now = t0 + timedelta(days=31)
    with psycopg.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        assert conn.execute(db.CREATE_DUE_INVOICES, {"batch": 500, "now": now}).fetchone()["handled"] == 1
        claims = conn.execute(db.CLAIM_CHARGES, {"worker": "w", "batch": 10, "lease": "5 minutes", "now": now,
                                                 "provider": "sim"}).fetchall()
        assert len(claims) == 2
        conn.execute(db.RECORD_PAYMENT_RESULT, {"key": claims[0]["idempotency_key"], "outcome": "SUCCEEDED",
                                                "reference": "ch", "reason": None, "now": now})
        conn.execute("SELECT * FROM billing.record_payment_results(%s, %s, NULL, NULL, %s, %s)",
                     ([claims[1]["idempotency_key"]], ["SUCCEEDED"], now, [False]))  # the worker's batch recorder
        assert conn.execute(db.CLAIM_REFUNDS, {"worker": "w", "batch": 10, "lease": "5 minutes", "now": now}
                            ).fetchall() == []  # the refund loop
        assert conn.execute(db.ANNOUNCE_EXPIRING_PAYMENT_METHODS, {"days": 7, "batch": 10, "now": now}
                            ).fetchone()["announced"] == 0  # the renewal loop's card notices
        assert conn.execute(db.GIVE_UP_WAITING_INVOICES, {"batch": 10, "now": now}
                            ).fetchone()["given_up"] == 0  # the renewal loop's end of waiting invoices
        events = conn.execute(db.CLAIM_OUTBOX_EVENTS_RAW, {"batch": 100, "lease": "30 seconds", "now": now}).fetchall()
        assert len(events) >= 2
        assert conn.execute(db.MARK_OUTBOX_PUBLISHED, {"ids": [e["id"] for e in events], "now": now}
                            ).fetchone()["marked"] == len(events)
        conn.execute("SELECT * FROM billing.list_webhook_endpoints()")  # the webhook deliverer's refresh
        conn.execute("SELECT * FROM billing.purge_expired('30 days', 10, %s)", (now,))  # retention
        assert conn.execute(db.EXPIRE_IDEMPOTENCY_KEYS, {"max_age": "24 hours", "batch": 10, "now": now}
                            ).fetchone()["expired"] == 0
        assert conn.execute(db.OUTBOX_STATS, {"now": now}).fetchone()["backlog"] == 0
        audit = None
    with psycopg.connect(db_url) as conn:
        audit = conn.execute("SELECT array_agg(DISTINCT function ORDER BY function) FROM billing.audit_log "
                             "WHERE db_role = %s", (user,)).fetchone()[0]
    # claim_refunds and give_up_waiting_invoices found nothing to do: they changed nothing and
    # wrote no row (idle polls every second).
    assert audit == ["announce_expiring_payment_methods", "claim_charges", "claim_outbox_events",
                     "create_due_invoices", "expire_idempotency_keys",
                     "mark_outbox_published", "purge_expired", "record_payment_result", "record_payment_results"]


# -- issue 27, finding 6: every function a role may call, with the fields a caller controls left empty --

def _state(conn) -> tuple:
    """What a call must not change by being given nothing: money, sessions, keys, subscriptions."""
    return conn.execute("""
        SELECT (SELECT md5(coalesce(string_agg(id || status || amount_refunded || coalesce(paid_attempt_id::text, '-'),
                                               ',' ORDER BY id), '')) FROM billing.invoice),
               (SELECT md5(coalesce(string_agg(id || status || coalesce(recheck_at::text, '-'), ',' ORDER BY id), ''))
                  FROM billing.refund),
               (SELECT md5(coalesce(string_agg(id || status || version, ',' ORDER BY id), '')) FROM billing.subscription),
               (SELECT count(*) FROM billing.console_session), (SELECT count(*) FROM billing.customer_session),
               (SELECT count(*) FROM billing.api_key), (SELECT count(*) FROM billing.payment_method)""").fetchone()


@pytest.fixture
def money_world(db_url):
    """A charge claimed and not answered yet, and a PAID invoice whose refund SUCCEEDED."""
    from datetime import datetime, timezone

    t0 = datetime(2026, 10, 1, tzinfo=timezone.utc)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('EMPTY_P', 1599, 'USD', 'MONTH', 1)")
        for customer in (7001, 7002):
            conn.execute("SELECT billing.create_subscription(%s, %s, 'EMPTY_P', %s)", (f"e-{customer}", customer, t0))
        keys = dict(conn.execute("SELECT customer_id, idempotency_key FROM billing.claim_charges('w', 10, '5 minutes', %s)",
                                 (t0,)).fetchall())
        conn.execute("SELECT billing.record_payment_result(%s, 'SUCCEEDED', 'pi_7002', NULL, %s)", (keys[7002], t0))
        invoice = conn.execute("SELECT id FROM billing.invoice WHERE customer_id = 7002").fetchone()[0]
        refund_key = conn.execute("SELECT idempotency_key FROM billing.refund_invoice(%s, 1599, NULL, %s)",
                                  (invoice, t0)).fetchone()[0]
        conn.execute("SELECT billing.record_refund_result(%s, 'SUCCEEDED', 're_7002', NULL, %s)", (refund_key, t0))
        conn.execute("SELECT billing.create_api_key('bk_emptyfield1', 'e', sha256('the-key'), ARRAY['admin'])")
    return {"t0": t0, "claimed_key": keys[7001], "refund_key": refund_key}


@pytest.mark.parametrize("role", sorted(POLICY))
def test_every_function_of_a_role_called_with_its_fields_left_empty_changes_nothing(db_url, login_as, money_world,
                                                                                    role):
    with psycopg.connect(db_url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        functions = [f for f in _catalog_functions(conn) if not f["is_trigger"] and f["kind"] == "f"]
        allowed = _with_console_actions(conn)[role]
    with psycopg.connect(db_url, autocommit=True) as conn:
        before = _state(conn)
    mine = [f for f in functions if f["proname"] in allowed]
    assert {f["proname"] for f in mine} == allowed
    t0 = money_world["t0"]
    with psycopg.connect(login_as(role), autocommit=True) as conn:
        for f in mine:  # every argument NULL: a clear error or a harmless answer, never a change
            call = sql.SQL("SELECT * FROM billing.{}({})").format(
                sql.Identifier(f["proname"]),
                sql.SQL(", ").join(sql.SQL("NULL::{}").format(sql.SQL(t)) for t in f["argtypes"]))
            try:
                conn.execute(call).fetchall()
            except psycopg.Error as exc:
                assert not isinstance(exc, (errors.InsufficientPrivilege, errors.InternalError_)), (f, exc)
        # the findings, by name: what a caller controls given empty, the identifiers real
        if "apply_gateway_webhook" in allowed:
            assert conn.execute("SELECT billing.apply_gateway_webhook('evt-empty', %s, 'SUCCEEDED', 'ch', '{}', %s)",
                                (money_world["claimed_key"], t0)).fetchone()[0] == "REVIEW"
        if "apply_refund_webhook" in allowed:
            assert conn.execute("SELECT billing.apply_refund_webhook('evt-empty', %s, 'FAILED', NULL, NULL, NULL, NULL, "
                                "NULL, %s)", (money_world["refund_key"], t0)).fetchone()[0] == "REVIEW"
        if "console_open_session" in allowed:
            for key_hash in (None, b"\0" * 32):
                with pytest.raises(psycopg.Error) as caught:
                    conn.execute("SELECT * FROM billing.console_open_session(sha256('tok'), %s, '1 hour', now())",
                                 (key_hash,))
                assert caught.value.sqlstate in ("BL404", "BL422")
        if "open_customer_session" in allowed:
            with pytest.raises(psycopg.Error) as caught:
                conn.execute("SELECT * FROM billing.open_customer_session(7001, sha256('tok'), '15 minutes', %s)", (t0,))
            assert caught.value.sqlstate == "BL422"  # no proven key: no session
        for name in ("record_refund_result", "record_payment_result"):
            assert name not in allowed or role in ("billing_worker", "billing_admin"), (role, name)
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert _state(conn) == before, role
