-- 70_stats: read-only views of the engine's state for operators: `billing status`, /metrics, and
-- the relay's takeover check (plan_code, the other read-only helper, sits with the plans in 20).
-- Re-applied after every migration: CREATE OR REPLACE only.
-- Each reads through partial indexes where one exists, so a scrape stays cheap on a large table.
-- PL/pgSQL, not SQL: on Citus a SQL function reading a distributed table with parameters cannot
-- be planned; each statement here is a multi-shard read (counts pushed down to every shard, summed
-- on the coordinator).

CREATE OR REPLACE FUNCTION billing.outbox_stats(p_now timestamptz DEFAULT now())
RETURNS TABLE (
    backlog            bigint,
    due                bigint,
    leased             bigint,
    leased_until       timestamptz,
    dead               bigint,
    oldest_created_at  timestamptz,
    oldest_age_seconds double precision
)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM billing._check_now(p_now);
    RETURN QUERY
    WITH pending AS (
        SELECT count(*) AS backlog,
               count(*) FILTER (WHERE o.available_at <= p_now
                                  AND (o.lease_until IS NULL OR o.lease_until <= p_now)) AS due,
               count(*) FILTER (WHERE o.lease_until > p_now) AS leased,
               max(o.lease_until) FILTER (WHERE o.lease_until > p_now) AS leased_until,
               min(o.created_at) AS oldest_created_at
        FROM billing.outbox_event o
        WHERE o.status = 'PENDING'
    )
    SELECT p.backlog, p.due, p.leased, p.leased_until,
           (SELECT count(*) FROM billing.outbox_event d WHERE d.status = 'DEAD'),
           p.oldest_created_at,
           coalesce(greatest(extract(epoch FROM p_now - p.oldest_created_at), 0), 0)::double precision
    FROM pending p;
END
$$;
COMMENT ON FUNCTION billing.outbox_stats(timestamptz) IS
'The outbox at p_now: unpublished events (backlog), those claimable now (due), those leased by a relay and until when, DEAD ones, and the oldest unpublished event''s creation time and age in seconds.
Returns one row; ages are 0 when nothing waits.';

-- The return type grew (waiting for a payment method, refunds pending): the old one is dropped.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc
                WHERE oid = to_regprocedure('billing.status_summary(timestamptz)')
                  AND NOT 'invoices_waiting_for_method' = ANY (proargnames)) THEN
        DROP FUNCTION billing.status_summary(timestamptz);
    END IF;
END
$$;
CREATE OR REPLACE FUNCTION billing.status_summary(p_now timestamptz DEFAULT now())
RETURNS TABLE (
    subscriptions_active      bigint,
    subscriptions_past_due    bigint,
    subscriptions_canceled    bigint,
    renewals_due              bigint,
    oldest_renewal_due_at     timestamptz,
    invoices_open             bigint,
    charges_due               bigint,
    invoices_in_dunning       bigint,
    invoices_failed           bigint,
    invoices_paid             bigint,
    outbox_backlog            bigint,
    outbox_due                bigint,
    outbox_dead               bigint,
    outbox_oldest_age_seconds double precision,
    invoices_waiting_for_method bigint,
    refunds_pending           bigint
)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM billing._check_now(p_now);
    RETURN QUERY
    WITH subs AS (
        SELECT count(*) FILTER (WHERE s.status = 'ACTIVE') AS active,
               count(*) FILTER (WHERE s.status = 'PAST_DUE') AS past_due,
               count(*) FILTER (WHERE s.status = 'CANCELED') AS canceled
        FROM billing.subscription s
    ), due AS (
        SELECT count(*) AS n, min(s.current_period_end) AS oldest
        FROM billing.subscription s
        WHERE s.status IN ('ACTIVE', 'PAST_DUE') AND s.current_period_end <= p_now
    ), inv AS (
        SELECT count(*) FILTER (WHERE i.status = 'OPEN') AS open,
               count(*) FILTER (WHERE i.status = 'OPEN' AND i.next_attempt_at <= p_now) AS charges_due,
               count(*) FILTER (WHERE i.status = 'OPEN' AND i.attempt_count > 0) AS dunning,
               count(*) FILTER (WHERE i.status = 'FAILED') AS failed,
               count(*) FILTER (WHERE i.status = 'PAID') AS paid,
               count(*) FILTER (WHERE i.status = 'OPEN' AND i.waiting_for IS NOT NULL) AS waiting
        FROM billing.invoice i
    )
    SELECT subs.active, subs.past_due, subs.canceled, due.n, due.oldest,
           inv.open, inv.charges_due, inv.dunning, inv.failed, inv.paid,
           o.backlog, o.due, o.dead, o.oldest_age_seconds, inv.waiting,
           (SELECT count(*) FROM billing.refund r WHERE r.status = 'REQUESTED')
    FROM subs, due, inv, billing.outbox_stats(p_now) o;
END
$$;
COMMENT ON FUNCTION billing.status_summary(timestamptz) IS
'One row for `billing status`: subscriptions by status, renewals due at p_now, invoices open / chargeable now / in dunning (declined at least once) / failed / paid, the outbox figures of outbox_stats, invoices waiting for a payment method and refunds not executed yet.
Scans subscription and invoice: meant for an operator, not for a frequent scrape.';

GRANT EXECUTE ON FUNCTION billing.outbox_stats(timestamptz) TO billing_app;
GRANT EXECUTE ON FUNCTION billing.status_summary(timestamptz) TO billing_app;
