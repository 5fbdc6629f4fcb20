-- 90_grants: who executes what. Re-applied last, after every migration and every other functions
-- file, so a new table or function never leaks. docs/security.md explains the roles.
--
-- * billing_owner (NOLOGIN) owns the schema and everything in it; migrations run as it.
-- * The job roles (NOLOGIN; grant them to login roles, e.g. with `billing db login-role`) get
--   USAGE on the schema and EXECUTE on their own functions only, listed below; no table access.
-- * billing_app, the one role of earlier versions, is kept for existing callers as a member of
--   every job role (deprecated: give each process the role of its job instead).
-- * Functions whose name starts with "_" are private: never granted. A public function missing
--   from the list below is granted to nobody but billing_app (a NOTICE says so, and
--   driver/tests/test_roles.py fails until it is placed).
-- * billing_console (the operator console of `billing serve`) also lists the actions the console
--   offers once their functions exist (billing.console.actions.ACTIONS): a name not in the catalog
--   grants nothing, so an action appears in the console the day its function lands.

REVOKE ALL ON SCHEMA billing FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA billing FROM PUBLIC, billing_app, billing_api, billing_worker, billing_relay,
    billing_readonly, billing_admin, billing_console, billing_support;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA billing FROM PUBLIC, billing_app, billing_api, billing_worker, billing_relay,
    billing_readonly, billing_admin, billing_console, billing_support;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA billing FROM PUBLIC, billing_app, billing_api, billing_worker, billing_relay,
    billing_readonly, billing_admin, billing_console, billing_support;
GRANT USAGE ON SCHEMA billing TO billing_app, billing_api, billing_worker, billing_relay, billing_readonly, billing_admin, billing_console,
    billing_support;

DO $$
DECLARE
    -- role -> the functions of its job (by name: every overload).
    c_jobs constant jsonb := '{
      "billing_api": ["create_subscription", "create_subscriptions", "lock_self_serve_plans", "get_subscription", "cancel_subscription", "change_plan",
                      "set_external_id", "resolve_external_id", "get_customer_by_external_id", "get_plan_by_external_id", "get_subscription_by_external_id",
                      "ingest_usage", "ingest_usage_batch", "current_usage", "list_meters", "upcoming_invoice",
                      "set_usage_alert", "list_usage_alerts", "update_usage_alert", "delete_usage_alert",
                      "apply_coupon", "pause_subscription", "resume_subscription", "uncancel_subscription",
                      "reactivate_subscription", "set_quantity",
                      "upsert_customer", "plan_code", "apply_gateway_webhook", "authenticate_api_key",
                      "read_audit", "outbox_stats", "period_end", "proration_amount", "is_simulation",
                      "create_webhook_endpoint", "list_webhook_endpoints", "get_webhook_endpoint",
                      "delete_webhook_endpoint", "list_webhook_attempts", "set_payment_method",
                      "detach_payment_method", "list_payment_methods", "refund_invoice", "list_refunds",
                      "retry_invoice", "void_invoice", "get_invoice_document",
                      "set_customer_details", "apply_refund_webhook", "open_customer_session", "customer_session",
                      "close_customer_session", "record_auth_failure",
                      "notification_kinds", "customer_locales", "set_customer_preferences", "list_notifications",
                      "create_portal_link", "use_portal_link", "revoke_portal_links", "invoice_action",
                      "portal_open_session", "portal_session", "portal_close_session", "portal_home",
                      "portal_invoice_document", "portal_cancel", "portal_uncancel", "portal_change_plan",
                      "get_customer", "create_customer", "list_customers", "get_plan", "list_plans", "list_coupons",
                      "list_tax_rates", "list_subscriptions", "list_invoices", "list_credit_notes", "list_events",
                      "get_event", "report_mrr", "report_mrr_movements", "report_churn", "report_revenue"],
      "billing_worker": ["create_due_invoices", "claim_charges", "record_payment_result", "record_payment_results",
                         "ingest_usage", "ingest_usage_batch", "ingest_usage_columns", "usage_partitions", "rate_usage", "check_usage_alerts",
                         "dunning_next_attempt", "expire_idempotency_keys", "purge_expired", "outbox_stats",
                         "period_end", "proration_amount", "is_simulation", "claim_refunds", "record_refund_result",
                         "announce_expiring_payment_methods", "give_up_waiting_invoices", "finalize_invoices",
                         "lease_shard_groups",
                         "renew_in_shard", "charge_claims_in_shard", "refund_claims_in_shard", "shard_groups",
                         "claim_usage_in_shard", "rate_usage_in_shard", "lock_usage_customers",
                         "claim_refund_rechecks",
                         "announce_upcoming_renewals", "claim_notifications", "record_notification_result",
                         "get_invoice_document", "create_portal_link", "notification_kinds", "customer_locales"],
      "billing_relay": ["claim_outbox_events", "mark_outbox_published", "mark_outbox_failed", "outbox_stats",
                        "list_webhook_endpoints", "claim_webhook_deliveries", "record_webhook_attempts",
                        "is_simulation", "lease_shard_groups",
                        "relay_shard_groups", "claim_outbox_events_in_shard", "mark_outbox_published_in_shard",
                        "mark_outbox_failed_in_shard", "claim_outbox_events_in_shards", "mark_outbox_published_in_shards"],
      "billing_readonly": ["get_subscription", "plan_code", "outbox_stats", "status_summary", "period_end",
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
                           "customer_locales"],
      "billing_support": ["get_subscription", "plan_code", "is_simulation", "list_payment_methods", "list_refunds",
                          "resolve_external_id", "get_customer_by_external_id", "get_plan_by_external_id", "get_subscription_by_external_id",
                          "get_invoice_document", "list_notifications"],
      "billing_admin": ["upsert_plan", "set_plan_self_serve", "lock_self_serve_plans", "upsert_customer", "upsert_coupon", "archive_plan", "archive_coupon", "create_subscriptions",
                        "import_customers", "import_subscriptions", "set_external_id", "resolve_external_id", "get_customer_by_external_id", "get_plan_by_external_id", "get_subscription_by_external_id",
                        "upsert_meter", "list_meters", "usage_partitions", "current_usage", "usage_between", "upsert_plan_charge",
                        "rate_usage", "upcoming_invoice", "set_usage_alert", "check_usage_alerts",
                        "list_usage_alerts", "update_usage_alert", "delete_usage_alert",
                        "set_trial_will_end_notice", "create_api_key", "list_api_keys", "revoke_api_key",
                        "read_audit", "set_max_clock_skew", "status_summary", "outbox_stats", "get_subscription",
                        "plan_code", "period_end", "proration_amount", "is_simulation",
                        "create_webhook_endpoint", "list_webhook_endpoints", "get_webhook_endpoint",
                        "delete_webhook_endpoint", "list_webhook_attempts", "outbox_events_from",
                        "retry_dead_outbox_events", "replay_outbox_event", "new_key_namespace", "set_payment_method",
                        "detach_payment_method", "list_payment_methods", "refund_invoice", "list_refunds",
                        "record_refund_result", "retry_invoice", "void_invoice", "upsert_tax_rate",
                        "set_customer_details", "finalize_invoice", "finalize_invoices", "get_invoice_document",
                        "report_mrr", "report_mrr_movements", "report_churn", "report_revenue",
                        "notification_kinds", "customer_locales", "set_customer_preferences", "list_notifications",
                        "create_portal_link", "revoke_portal_links", "set_action_window", "set_plan_change_options",
                        "get_customer", "create_customer", "list_customers", "get_plan", "list_plans", "list_coupons",
                        "list_tax_rates", "list_subscriptions", "list_invoices", "list_credit_notes", "list_events",
                        "get_event"],
      "billing_console": ["console_open_session", "console_session", "console_close_session", "console_functions",
                          "console_overview", "console_mrr", "console_customers", "console_customer",
                          "console_subscription", "console_invoices", "console_events", "authenticate_api_key",
                          "console_usage", "resolve_external_id",
                          "get_subscription", "plan_code", "outbox_stats", "is_simulation",
                          "cancel_subscription", "change_plan", "replay_outbox_event",
                          "uncancel_subscription", "pause_subscription", "resume_subscription", "apply_coupon",
                          "set_quantity", "reactivate_subscription", "retry_invoice", "void_invoice",
                          "refund_invoice", "get_invoice_document", "report_mrr", "report_mrr_movements",
                          "report_churn", "report_revenue", "record_auth_failure"]
    }';
    v_role text;
    v_fn   regprocedure;
BEGIN
    FOR v_role, v_fn IN
        SELECT j.key, p.oid::regprocedure
          FROM jsonb_each(c_jobs) j
          CROSS JOIN LATERAL jsonb_array_elements_text(j.value) f(name)
          JOIN pg_catalog.pg_proc p ON p.pronamespace = 'billing'::regnamespace AND p.proname = f.name
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', v_fn, v_role);
    END LOOP;

    -- Placed nowhere yet: billing_app only (the old rule), and a notice.
    FOR v_fn IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc p
         WHERE p.pronamespace = 'billing'::regnamespace
           AND p.prokind = 'f'
           AND p.proname !~ '^_'
           AND p.prorettype <> 'pg_catalog.trigger'::regtype
           AND NOT EXISTS (SELECT 1 FROM jsonb_each(c_jobs) j
                            WHERE j.value ? p.proname)
    LOOP
        RAISE NOTICE 'function % belongs to no job role in 90_grants.sql: only billing_app may execute it', v_fn;
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO billing_app', v_fn);
    END LOOP;
END
$$;

-- billing_app is made a member of every job role by the migration runner (granting a role
-- needs a role-creating login, which the owner is not): billing.migrate.ROLES.
