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
BEGIN
    PERFORM billing._check_now(p_now);
    RETURN QUERY SELECT * FROM billing._status_summary(p_now, NOT billing._overview_counts_kept());
END
$$;
COMMENT ON FUNCTION billing.status_summary(timestamptz) IS
'One row for `billing status`: subscriptions by status, renewals due at p_now (32_due''s _due_renewal), invoices open / chargeable now / in dunning (declined at least once) / failed / paid, the outbox figures of outbox_stats, invoices waiting for a payment method and refunds not executed yet.
On a single node the counts by status come from billing.overview_count (kept by the engine''s writes) and the rest from partial indexes; on Citus every figure is counted from the rows.';

CREATE OR REPLACE FUNCTION billing._status_summary(p_now timestamptz, p_count_rows boolean)
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
LANGUAGE plpgsql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_active bigint; v_past_due bigint; v_canceled bigint;
    v_open bigint; v_dunning bigint; v_failed bigint; v_paid bigint;
BEGIN
    -- The counts by status: kept, or the rows (each its own statement: on Citus a statement may not
    -- mix the coordinator's billing.overview_count with a distributed table).
    IF p_count_rows THEN
        SELECT count(*) FILTER (WHERE s.status = 'ACTIVE'), count(*) FILTER (WHERE s.status = 'PAST_DUE'),
               count(*) FILTER (WHERE s.status = 'CANCELED')
          INTO v_active, v_past_due, v_canceled FROM billing.subscription s;
        SELECT count(*) FILTER (WHERE i.status = 'OPEN'), count(*) FILTER (WHERE i.status = 'OPEN' AND i.attempt_count > 0),
               count(*) FILTER (WHERE i.status = 'FAILED'), count(*) FILTER (WHERE i.status = 'PAID')
          INTO v_open, v_dunning, v_failed, v_paid FROM billing.invoice i;
    ELSE
        SELECT coalesce(sum(c.n) FILTER (WHERE c.subject = 'subscription' AND c.status = 'ACTIVE'), 0),
               coalesce(sum(c.n) FILTER (WHERE c.subject = 'subscription' AND c.status = 'PAST_DUE'), 0),
               coalesce(sum(c.n) FILTER (WHERE c.subject = 'subscription' AND c.status = 'CANCELED'), 0),
               coalesce(sum(c.n) FILTER (WHERE c.subject = 'invoice' AND c.status = 'OPEN'), 0),
               coalesce(sum(c.n) FILTER (WHERE c.subject = 'invoice' AND c.status = 'OPEN' AND c.flag), 0),
               coalesce(sum(c.n) FILTER (WHERE c.subject = 'invoice' AND c.status = 'FAILED'), 0),
               coalesce(sum(c.n) FILTER (WHERE c.subject = 'invoice' AND c.status = 'PAID'), 0)
          INTO v_active, v_past_due, v_canceled, v_open, v_dunning, v_failed, v_paid
          FROM billing.overview_count c;
    END IF;
    RETURN QUERY
    WITH due AS (
        -- The renewal's condition (32_due.sql), one partial index per part (see console_overview).
        SELECT count(*) AS n, min(s.current_period_end) AS oldest
          FROM billing.subscription s
         WHERE billing._due_renewal(s.status, s.current_period_end, p_now) AND s.status IN ('ACTIVE', 'PAST_DUE')
        UNION ALL
        SELECT count(*), min(s.current_period_end)
          FROM billing.subscription s
         WHERE billing._due_renewal(s.status, s.current_period_end, p_now) AND s.status = 'TRIALING' AND s.lifecycle_pending
    ), due_all AS (
        SELECT sum(d.n)::bigint AS n, min(d.oldest) AS oldest FROM due d
    )
    SELECT v_active, v_past_due, v_canceled, due_all.n, due_all.oldest,
           v_open,
           (SELECT count(*) FROM billing.invoice i WHERE i.status = 'OPEN' AND i.next_attempt_at <= p_now),
           v_dunning, v_failed, v_paid,
           o.backlog, o.due, o.dead, o.oldest_age_seconds,
           (SELECT count(*) FROM billing.invoice i WHERE i.status = 'OPEN' AND i.waiting_for IS NOT NULL),
           (SELECT count(*) FROM billing.refund r WHERE r.status = 'REQUESTED')
    FROM due_all, billing.outbox_stats(p_now) o;
END
$$;
COMMENT ON FUNCTION billing._status_summary(timestamptz, boolean) IS
'Private: status_summary''s row at p_now, its counts by status read from billing.overview_count, or (p_count_rows) counted from the rows; both give the same figures.
Returns one row.';

GRANT EXECUTE ON FUNCTION billing.outbox_stats(timestamptz) TO billing_app;
GRANT EXECUTE ON FUNCTION billing.status_summary(timestamptz) TO billing_app;

-- ---------------------------------------------------------------------------------------------
-- The overview's counts kept by the engine's own writes (migration 0310, billing.overview_count):
-- signed deltas, insert-only, summed by the reader and folded now and then. A statement that
-- inserts rows adds one delta per key (the renewal's batch of 5,000 invoices: a handful of rows,
-- read from the transition table invoice_subscription_exists already keeps); a row whose counted
-- columns change adds -1 on its old key and +1 on its new one. An UPDATE that sets none of those
-- columns does not fire the trigger at all (UPDATE OF: the renewal's advance of the period, an
-- invoice's finalization), one that sets them to the same values calls nothing (the WHEN clause).
-- Only a statement's SET list can change a column here (no BEFORE trigger of these tables writes
-- one), so UPDATE OF misses nothing. TRUNCATE forgets the subject's counts.
-- Subscriptions are never deleted (12_integrity) and invoices only while unfinalized and only by
-- TRUNCATE in practice; a DELETE is counted too. On Citus the triggers are dropped
-- (db/citus/10_adapt.sql: a transition table cannot be planned there) and the readers count rows.
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing._overview_count_subscriptions_added()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO billing.overview_count (subject, status, flag, n)
    SELECT 'subscription', r.status, r.cancel_at_period_end, count(*) FROM new_rows r GROUP BY 2, 3;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._overview_count_subscriptions_added() IS
'Private trigger (AFTER INSERT, per statement): adds the inserted subscriptions to billing.overview_count, one delta per (status, cancel_at_period_end).
Returns NULL.';

CREATE OR REPLACE FUNCTION billing._overview_count_subscription_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO billing.overview_count (subject, status, flag, n)
        VALUES ('subscription', OLD.status, OLD.cancel_at_period_end, -1);
    END IF;
    IF TG_OP = 'UPDATE' THEN
        INSERT INTO billing.overview_count (subject, status, flag, n)
        VALUES ('subscription', NEW.status, NEW.cancel_at_period_end, 1);
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._overview_count_subscription_changed() IS
'Private trigger (AFTER UPDATE when status or cancel_at_period_end changed, AFTER DELETE; per row): moves the subscription from its old key of billing.overview_count to its new one.
Returns NULL.';

CREATE OR REPLACE FUNCTION billing._overview_count_invoices_added()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO billing.overview_count (subject, status, flag, kind, due_day, n)
    SELECT 'invoice', r.status, r.attempt_count > 0, r.kind, (r.due_at AT TIME ZONE 'UTC')::date, count(*)
      FROM new_rows r GROUP BY 2, 3, 4, 5;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._overview_count_invoices_added() IS
'Private trigger (AFTER INSERT, per statement): adds the inserted invoices to billing.overview_count, one delta per (status, attempted, kind, UTC day of due_at).
Returns NULL.';

CREATE OR REPLACE FUNCTION billing._overview_count_invoice_changed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO billing.overview_count (subject, status, flag, kind, due_day, n)
        VALUES ('invoice', OLD.status, OLD.attempt_count > 0, OLD.kind, (OLD.due_at AT TIME ZONE 'UTC')::date, -1);
    END IF;
    IF TG_OP = 'UPDATE' THEN
        INSERT INTO billing.overview_count (subject, status, flag, kind, due_day, n)
        VALUES ('invoice', NEW.status, NEW.attempt_count > 0, NEW.kind, (NEW.due_at AT TIME ZONE 'UTC')::date, 1);
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._overview_count_invoice_changed() IS
'Private trigger (AFTER UPDATE when status, attempted, kind or due_at changed, AFTER DELETE; per row): moves the invoice from its old key of billing.overview_count to its new one.
Returns NULL.';

CREATE OR REPLACE FUNCTION billing._overview_count_truncated()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM billing.overview_count c WHERE c.subject = TG_ARGV[0];
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION billing._overview_count_truncated() IS
'Private trigger (AFTER TRUNCATE of subscription or invoice, whose name is its argument): forgets that subject''s counts (a wiped table counts nothing).
Returns NULL.';

CREATE OR REPLACE TRIGGER subscription_overview_count_added
    AFTER INSERT ON billing.subscription
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION billing._overview_count_subscriptions_added();
CREATE OR REPLACE TRIGGER subscription_overview_count_changed
    AFTER UPDATE OF status, cancel_at_period_end ON billing.subscription
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                       OR OLD.cancel_at_period_end IS DISTINCT FROM NEW.cancel_at_period_end)
    EXECUTE FUNCTION billing._overview_count_subscription_changed();
CREATE OR REPLACE TRIGGER subscription_overview_count_deleted
    AFTER DELETE ON billing.subscription
    FOR EACH ROW EXECUTE FUNCTION billing._overview_count_subscription_changed();
CREATE OR REPLACE TRIGGER subscription_overview_count_truncated
    AFTER TRUNCATE ON billing.subscription
    FOR EACH STATEMENT EXECUTE FUNCTION billing._overview_count_truncated('subscription');
CREATE OR REPLACE TRIGGER invoice_overview_count_added
    AFTER INSERT ON billing.invoice
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION billing._overview_count_invoices_added();
CREATE OR REPLACE TRIGGER invoice_overview_count_changed
    AFTER UPDATE OF status, attempt_count, kind, due_at ON billing.invoice
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                       OR (OLD.attempt_count > 0) IS DISTINCT FROM (NEW.attempt_count > 0)
                       OR OLD.kind IS DISTINCT FROM NEW.kind
                       OR OLD.due_at IS DISTINCT FROM NEW.due_at)
    EXECUTE FUNCTION billing._overview_count_invoice_changed();
CREATE OR REPLACE TRIGGER invoice_overview_count_deleted
    AFTER DELETE ON billing.invoice
    FOR EACH ROW EXECUTE FUNCTION billing._overview_count_invoice_changed();
CREATE OR REPLACE TRIGGER invoice_overview_count_truncated
    AFTER TRUNCATE ON billing.invoice
    FOR EACH STATEMENT EXECUTE FUNCTION billing._overview_count_truncated('invoice');

CREATE OR REPLACE FUNCTION billing._overview_counts_kept()
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT count(*) = 2 FROM pg_catalog.pg_trigger t
     WHERE t.tgname IN ('subscription_overview_count_changed', 'invoice_overview_count_changed')
       AND t.tgrelid IN ('billing.subscription'::regclass, 'billing.invoice'::regclass) AND t.tgenabled <> 'D'
$$;
COMMENT ON FUNCTION billing._overview_counts_kept() IS
'Private: whether billing.overview_count is kept by its triggers (single node; dropped on Citus, where the readers count rows).
Returns true when both tables'' triggers are in place and enabled.';

CREATE OR REPLACE FUNCTION billing._overview_count_fold()
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_rows bigint := 0;
BEGIN
    -- One folder at a time (another one already folding: skip), never on a read-only standby.
    IF pg_catalog.pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'
       OR NOT pg_catalog.pg_try_advisory_xact_lock(hashtext('billing.overview_count'), 0) THEN
        RETURN 0;
    END IF;
    -- The rows of each key that has several, replaced by their sum (none when it is 0). A delta a
    -- writer has not committed yet is not seen, so it stays for the next fold.
    WITH many AS (
        SELECT x.ctid AS row_id FROM (
            SELECT c.ctid, count(*) OVER (PARTITION BY c.subject, c.status, c.flag, c.kind, c.due_day) AS k,
                   c.n
              FROM billing.overview_count c) x
         WHERE x.k > 1 OR x.n = 0
    ), gone AS (
        DELETE FROM billing.overview_count c WHERE c.ctid IN (SELECT m.row_id FROM many m)
        RETURNING c.subject, c.status, c.flag, c.kind, c.due_day, c.n
    ), folded AS (
        INSERT INTO billing.overview_count (subject, status, flag, kind, due_day, n)
        SELECT g.subject, g.status, g.flag, g.kind, g.due_day, sum(g.n)
          FROM gone g GROUP BY 1, 2, 3, 4, 5 HAVING sum(g.n) <> 0
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM gone) INTO v_rows;
    RETURN v_rows;
END
$$;
COMMENT ON FUNCTION billing._overview_count_fold() IS
'Private: replaces the rows of each key of billing.overview_count that has several by their sum (dropped when 0); skips when another session is folding or the transaction is read-only.
Returns how many rows were folded.';
