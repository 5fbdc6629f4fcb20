-- 22_import: bringing customers and subscriptions over from another billing system, many in one
-- statement (issue 28; docs/import.md). Each object is keyed by its external id (21_external_ids):
-- a row whose external id is already here is skipped, so a re-run imports only what is missing.
-- A subscription arrives in the period the source has already billed: nothing is billed for it
-- here, its first renewal is that period's end (anchor = the period's end, period number 0), so no
-- period is billed twice or skipped. The import writes no invoice, no service line and no credit
-- for the source's period: a later change or cancellation finds nothing of it to give back, so a
-- period claimed as paid elsewhere can never turn into credit or a refund here.
-- Re-applied after every migration: CREATE OR REPLACE only.

-- ---------------------------------------------------------------------------------------------
-- Customers
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.import_customers(
    p_customers jsonb, p_now timestamptz DEFAULT now(), p_dry_run boolean DEFAULT false)
RETURNS TABLE (external_id text, customer_id bigint, outcome text, problem text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_rows    jsonb;
    v_bad     record;
    v_next    bigint;
BEGIN
    PERFORM billing._audit('import_customers', jsonb_build_object('rows', jsonb_array_length(p_customers), 'now', p_now, 'dry_run', p_dry_run));
    PERFORM billing._check_now(p_now);
    IF p_customers IS NULL OR jsonb_typeof(p_customers) <> 'array' OR jsonb_array_length(p_customers) > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'p_customers is a JSON array of at most 10000 customers',
            HINT = 'Send larger imports in batches: a re-run skips what was imported.';
    END IF;
    -- One set of import ids at a time: the next free customer ids are read and taken under this lock.
    IF NOT p_dry_run THEN
        PERFORM pg_catalog.pg_advisory_xact_lock(hashtext('billing.import_customers'));
    END IF;

    -- Each row with what it maps to and why it cannot be imported (NULL: it can).
    WITH r AS (
        SELECT x.*
          FROM ROWS FROM (jsonb_to_recordset(p_customers) AS (external_id text, id bigint, timezone text, name text, email text))
               WITH ORDINALITY AS x(external_id, id, timezone, name, email, n)
    ), checked AS (
        SELECT r.*, ref.object_id AS existing_id, c.id AS id_taken, c.external_id AS id_taken_by,
               CASE
                   WHEN r.external_id IS NULL OR length(r.external_id) NOT BETWEEN 1 AND 255 OR btrim(r.external_id) <> r.external_id
                       THEN 'an external id of 1 to 255 characters without surrounding blanks is required'
                   WHEN count(*) OVER (PARTITION BY r.external_id) > 1 THEN 'the external id appears twice in the batch'
                   WHEN ref.object_id IS NOT NULL AND r.id IS NOT NULL AND ref.object_id <> r.id
                       THEN 'the external id is already in use by another customer'
                   WHEN ref.object_id IS NOT NULL THEN NULL
                   WHEN r.id IS NOT NULL AND r.id < 1 THEN format('a customer id is a positive integer, not %s', r.id)
                   WHEN r.id IS NOT NULL AND count(*) OVER (PARTITION BY r.id) > 1 THEN 'the customer id appears twice in the batch'
                   WHEN c.id IS NOT NULL THEN format('customer %s exists already%s', c.id,
                                                     CASE WHEN c.external_id IS NOT NULL THEN format(' with the external id %L', c.external_id) ELSE '' END)
                   WHEN r.timezone IS NOT NULL AND NOT EXISTS (SELECT 1 FROM billing.timezone_name z WHERE z.name = r.timezone)
                        AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names z WHERE z.name = r.timezone)
                       THEN format('unknown time zone %L', r.timezone)
                   WHEN r.name IS NOT NULL AND (btrim(r.name) = '' OR length(r.name) > 200) THEN 'a name is 1 to 200 characters'
                   WHEN r.email IS NOT NULL AND (r.email !~ '^[^@\s]+@[^@\s]+$' OR length(r.email) > 254) THEN format('malformed email %L', r.email)
               END AS problem
          FROM r
          LEFT JOIN billing.external_ref ref ON ref.object_type = 'customer' AND ref.external_id = r.external_id
          LEFT JOIN billing.customer c ON c.id = r.id AND ref.object_id IS NULL
    )
    SELECT jsonb_agg(to_jsonb(k) ORDER BY k.n) INTO v_rows FROM checked k;

    IF p_dry_run THEN
        RETURN QUERY
        SELECT k.external_id, coalesce(k.existing_id, k.id),
               CASE WHEN k.problem IS NOT NULL THEN 'refused' WHEN k.existing_id IS NOT NULL THEN 'exists' ELSE 'new' END,
               k.problem
          FROM jsonb_to_recordset(coalesce(v_rows, '[]')) AS k(external_id text, id bigint, existing_id bigint, problem text, n bigint)
         ORDER BY k.n;
        RETURN;
    END IF;
    SELECT k.n, k.external_id, k.problem INTO v_bad
      FROM jsonb_to_recordset(coalesce(v_rows, '[]')) AS k(external_id text, problem text, n bigint)
     WHERE k.problem IS NOT NULL ORDER BY k.n LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('customer %s (row %s): %s', coalesce(v_bad.external_id, 'without an external id'), v_bad.n, v_bad.problem),
            HINT = 'Nothing of this batch was imported; correct the row (or leave it out) and send the batch again.';
    END IF;

    -- New customers without an id of ours get the next free ones, in the batch's order.
    SELECT coalesce(max(c.id), 0) INTO v_next FROM billing.customer c;
    v_rows := (
        SELECT jsonb_agg(to_jsonb(k) || jsonb_build_object('id', coalesce(k.id, v_next + k.fresh)) ORDER BY k.n)
          FROM (SELECT k.*, CASE WHEN k.existing_id IS NULL AND k.id IS NULL
                                 THEN count(*) FILTER (WHERE k.existing_id IS NULL AND k.id IS NULL) OVER (ORDER BY k.n) END AS fresh
                  FROM jsonb_to_recordset(v_rows) AS k(external_id text, id bigint, timezone text, name text, email text,
                                                       existing_id bigint, n bigint)) k);

    INSERT INTO billing.customer (id, timezone, name, email, external_id, created_at, updated_at)
    SELECT k.id, coalesce(k.timezone, 'UTC'), k.name, k.email, k.external_id, p_now, p_now
      FROM jsonb_to_recordset(v_rows) AS k(external_id text, id bigint, timezone text, name text, email text, existing_id bigint)
     WHERE k.existing_id IS NULL;
    INSERT INTO billing.external_ref (object_type, external_id, customer_id, object_id, created_at)
    SELECT 'customer', k.external_id, k.id, k.id, p_now
      FROM jsonb_to_recordset(v_rows) AS k(external_id text, id bigint, existing_id bigint)
     WHERE k.existing_id IS NULL;

    RETURN QUERY
    SELECT k.external_id, coalesce(k.existing_id, k.id), CASE WHEN k.existing_id IS NULL THEN 'created' ELSE 'exists' END, NULL::text
      FROM jsonb_to_recordset(v_rows) AS k(external_id text, id bigint, existing_id bigint, n bigint)
     ORDER BY k.n;
END
$$;
COMMENT ON FUNCTION billing.import_customers(jsonb, timestamptz, boolean) IS
'Imports up to 10000 customers in one call: p_customers is a JSON array of {"external_id" (required, the key), "id" (ours; omitted: the next free ids), "timezone" (default UTC), "name", "email"}. A customer whose external id is already here is skipped (a re-run imports only what is missing); the batch is all or nothing. p_dry_run: checks and reports, writes nothing.
Returns one row per input row, in order: external id, our customer id, outcome created | exists (dry run: new | exists | refused) and the problem; BL422 naming the first row that cannot be imported (bad or duplicate external id, an id taken by another customer, unknown zone, bad name or email).';

-- ---------------------------------------------------------------------------------------------
-- Subscriptions
-- ---------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION billing.import_subscriptions(
    p_subscriptions jsonb, p_now timestamptz DEFAULT now(), p_dry_run boolean DEFAULT false)
RETURNS TABLE (external_id text, subscription_id bigint, customer_id bigint, outcome text, problem text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_all    jsonb;
    v_rows   jsonb;
    v_bad    record;
    v_notice interval;
    v_short  record;
    v_seq    regclass := pg_catalog.pg_get_serial_sequence('billing.subscription', 'id')::regclass;
BEGIN
    PERFORM billing._audit('import_subscriptions', jsonb_build_object('rows', jsonb_array_length(p_subscriptions), 'now', p_now, 'dry_run', p_dry_run));
    PERFORM billing._check_now(p_now);
    IF p_subscriptions IS NULL OR jsonb_typeof(p_subscriptions) <> 'array' OR jsonb_array_length(p_subscriptions) > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422', MESSAGE = 'p_subscriptions is a JSON array of at most 10000 subscriptions',
            HINT = 'Send larger imports in batches: a re-run skips what was imported.';
    END IF;
    SELECT s.trial_will_end_notice INTO v_notice FROM billing.database_setting s;

    WITH r AS (
        SELECT x.*, upper(coalesce(x.status, 'ACTIVE')) AS st, coalesce(x.quantity, 1) AS qty
          FROM ROWS FROM (jsonb_to_recordset(p_subscriptions)
                          AS (external_id text, customer_id bigint, customer_external_id text, plan_code text, plan_external_id text,
                              status text, current_period_start timestamptz, current_period_end timestamptz, quantity integer,
                              coupon_code text, coupon_until timestamptz, cancel_at_period_end boolean))
               WITH ORDINALITY AS x(external_id, customer_id, customer_external_id, plan_code, plan_external_id, status,
                                    current_period_start, current_period_end, quantity, coupon_code, coupon_until,
                                    cancel_at_period_end, n)
    ), resolved AS (
        SELECT r.*, ref.object_id AS existing_id, ref.customer_id AS existing_customer,
               coalesce(c.id, cref.customer_id) AS cust_id, c2.timezone AS tz,
               p.id AS plan_id, p.code AS plan, p.currency, p.billing_interval, p.interval_count, p.price_amount,
               p.price_effective_from, cp.code AS coupon, cp.duration AS coupon_duration, cp.duration_periods AS coupon_periods,
               cp.plan_codes AS coupon_plans,
               cp.currency AS coupon_currency
          FROM r
          LEFT JOIN billing.external_ref ref ON ref.object_type = 'subscription' AND ref.external_id = r.external_id
          LEFT JOIN billing.customer c ON c.id = r.customer_id
          LEFT JOIN billing.external_ref cref ON r.customer_id IS NULL AND cref.object_type = 'customer'
                                             AND cref.external_id = r.customer_external_id
          LEFT JOIN billing.customer c2 ON c2.id = coalesce(c.id, cref.customer_id)
          LEFT JOIN billing.plan p ON (r.plan_code IS NOT NULL AND p.code = r.plan_code)
                                   OR (r.plan_code IS NULL AND p.external_id = r.plan_external_id)
          LEFT JOIN billing.coupon cp ON cp.code = r.coupon_code
    ), checked AS (
        SELECT d.*,
               CASE
                   WHEN d.external_id IS NULL OR length(d.external_id) NOT BETWEEN 1 AND 255 OR btrim(d.external_id) <> d.external_id
                       THEN 'an external id of 1 to 255 characters without surrounding blanks is required'
                   WHEN count(*) OVER (PARTITION BY d.external_id) > 1 THEN 'the external id appears twice in the batch'
                   WHEN d.existing_id IS NOT NULL AND d.cust_id IS DISTINCT FROM d.existing_customer
                       THEN 'the external id is already in use by a subscription of another customer'
                   WHEN d.existing_id IS NOT NULL THEN NULL
                   WHEN d.cust_id IS NULL THEN format('unknown customer %s', coalesce(d.customer_id::text, quote_literal(d.customer_external_id), 'NULL'))
                   WHEN d.plan_id IS NULL THEN format('unknown plan %s', coalesce(quote_literal(d.plan_code), 'with external id ' || quote_literal(d.plan_external_id), 'NULL'))
                   WHEN d.st NOT IN ('ACTIVE', 'TRIALING')
                       THEN format('status %L cannot be imported: only ACTIVE or TRIALING (a past due or unpaid period is the source''s to collect)', d.status)
                   WHEN d.current_period_start IS NULL OR d.current_period_end IS NULL THEN 'the current period''s start and end are required'
                   WHEN d.current_period_end <= d.current_period_start THEN 'the current period ends before it starts'
                   WHEN d.current_period_start > p_now THEN 'the current period starts after p_now'
                   WHEN d.current_period_end <= p_now
                       THEN 'the current period has ended: the source may have billed the next one; read it again from the source'
                   WHEN d.qty NOT BETWEEN 1 AND 1000000 THEN 'quantity is 1 to 1000000'
                   WHEN d.coupon_code IS NOT NULL AND d.coupon IS NULL THEN format('unknown coupon %L', d.coupon_code)
                   WHEN d.coupon IS NOT NULL AND d.coupon_plans IS NOT NULL AND NOT (d.plan = ANY (d.coupon_plans))
                       THEN format('coupon %s does not apply to plan %s', d.coupon, d.plan)
                   WHEN d.coupon IS NOT NULL AND d.coupon_currency IS NOT NULL AND d.coupon_currency <> d.currency
                       THEN format('coupon %s is an amount in %s, the plan bills in %s', d.coupon, d.coupon_currency, d.currency)
                   WHEN d.coupon_duration = 'once' AND d.st <> 'TRIALING'
                       THEN format('coupon %s (once) was used by the source''s invoice of the current period', d.coupon)
                   WHEN d.coupon_duration = 'repeating' AND d.coupon_until IS NULL
                       THEN format('coupon %s (repeating): coupon_until, the end of its discount at the source, is required', d.coupon)
                   WHEN d.coupon_duration = 'repeating' AND d.coupon_until <= d.current_period_end
                       THEN format('coupon %s: its discount ends with the current period; leave it out', d.coupon)
                   WHEN d.coupon_duration = 'repeating'
                        AND d.coupon_until > d.current_period_end + make_interval(months => d.coupon_periods)
                       THEN format('coupon %s: a discount until %s lasts longer than the coupon''s %s months', d.coupon,
                                   d.coupon_until, d.coupon_periods)
               END AS problem
          FROM resolved d
    )
    SELECT jsonb_agg(to_jsonb(k) ORDER BY k.n) INTO v_all FROM checked k;
    v_all := coalesce(v_all, '[]');

    IF p_dry_run THEN
        RETURN QUERY
        SELECT k.external_id, k.existing_id, coalesce(k.existing_customer, k.cust_id),
               CASE WHEN k.problem IS NOT NULL THEN 'refused' WHEN k.existing_id IS NOT NULL THEN 'exists' ELSE 'new' END,
               k.problem
          FROM jsonb_to_recordset(v_all)
               AS k(external_id text, existing_id bigint, existing_customer bigint, cust_id bigint, problem text, n bigint)
         ORDER BY k.n;
        RETURN;
    END IF;
    SELECT k.n, k.external_id, k.problem INTO v_bad
      FROM jsonb_to_recordset(v_all) AS k(external_id text, problem text, n bigint)
     WHERE k.problem IS NOT NULL ORDER BY k.n LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('subscription %s (row %s): %s', coalesce(v_bad.external_id, 'without an external id'), v_bad.n, v_bad.problem),
            HINT = 'Nothing of this batch was imported; correct the row (or leave it out) and send the batch again.';
    END IF;

    -- A coupon's redemptions count as on any signup, all of a batch's at once under the coupon's row.
    FOR v_short IN
        UPDATE billing.coupon cp SET times_redeemed = cp.times_redeemed + u.used, updated_at = p_now
          FROM (SELECT k.coupon, count(*) AS used
                  FROM jsonb_to_recordset(v_all) AS k(coupon text, existing_id bigint)
                 WHERE k.coupon IS NOT NULL AND k.existing_id IS NULL GROUP BY k.coupon) u
         WHERE cp.code = u.coupon
        RETURNING cp.code, cp.max_redemptions, cp.times_redeemed
    LOOP
        IF v_short.max_redemptions IS NOT NULL AND v_short.times_redeemed > v_short.max_redemptions THEN
            RAISE EXCEPTION USING ERRCODE = 'BL409',
                MESSAGE = format('coupon %s has been redeemed its %s times', v_short.code, v_short.max_redemptions),
                HINT = 'Nothing of this batch was imported; raise the coupon''s max_redemptions or leave its rows out.';
        END IF;
    END LOOP;
    -- ... and per customer (max_redemptions_per_customer): each customer's rows of such a coupon
    -- with its redemptions so far, under its row lock (one customer at a time: one shard on Citus).
    FOR v_short IN
        SELECT k.cust_id, c AS coupon, count(*) AS used
          FROM jsonb_to_recordset(v_all) AS k(coupon text, cust_id bigint, existing_id bigint)
          JOIN billing.coupon c ON c.code = k.coupon
         WHERE k.existing_id IS NULL AND c.max_redemptions_per_customer IS NOT NULL
         GROUP BY k.cust_id, c.code, c ORDER BY k.cust_id, c.code
    LOOP
        PERFORM billing._check_customer_redemptions(v_short.cust_id, v_short.coupon, v_short.used);
    END LOOP;

    -- Our ids first (the identity's sequence, as the renewal statement takes invoice ids): each
    -- following statement names the rows by them.
    v_rows := (
        SELECT jsonb_agg(to_jsonb(k) || jsonb_build_object('id', nextval(v_seq)) ORDER BY k.n)
          FROM jsonb_to_recordset(v_all) AS k(external_id text, existing_id bigint, existing_customer bigint, cust_id bigint, tz text,
                                               plan_id bigint, plan text, price_amount bigint, price_effective_from timestamptz, st text,
                                               qty integer, current_period_start timestamptz, current_period_end timestamptz, coupon text,
                                               coupon_until timestamptz, coupon_duration text, cancel_at_period_end boolean, n bigint)
         WHERE k.existing_id IS NULL);

    IF v_rows IS NOT NULL THEN
        -- ACTIVE: the period billed at the source; its end is the anchor (period 0), so the first
        -- renewal here starts exactly there and each next one a whole interval later.
        -- TRIALING: as create_subscription's trial, from the source's trial start to its end.
        INSERT INTO billing.subscription (id, customer_id, plan_id, status, timezone, billing_anchor, period_number,
                                          current_period_start, current_period_end, cancel_at_period_end, period_price,
                                          quantity, trial_end, trial_notice_at, lifecycle_pending, coupon_code, external_id,
                                          updated_at)
        SELECT k.id, k.cust_id, k.plan_id, k.st, k.tz,
               CASE k.st WHEN 'TRIALING' THEN k.current_period_start ELSE k.current_period_end END,
               CASE k.st WHEN 'TRIALING' THEN 1 ELSE 0 END,
               k.current_period_start, k.current_period_end, coalesce(k.cancel_at_period_end, false),
               CASE k.st WHEN 'TRIALING' THEN 0
                    ELSE CASE WHEN k.price_effective_from IS NULL OR k.current_period_start >= k.price_effective_from THEN k.price_amount
                              ELSE (SELECT pp.price_amount FROM billing.plan_price pp
                                     WHERE pp.plan_id = k.plan_id AND pp.effective_from <= k.current_period_start
                                     ORDER BY pp.effective_from DESC LIMIT 1) END * k.qty END,
               k.qty,
               CASE k.st WHEN 'TRIALING' THEN k.current_period_end END,
               CASE k.st WHEN 'TRIALING' THEN greatest(p_now, k.current_period_end - coalesce(v_notice, interval '3 days')) END,
               k.st = 'TRIALING' OR k.coupon IS NOT NULL, k.coupon, k.external_id, p_now
          FROM jsonb_to_recordset(v_rows) AS k(id bigint, external_id text, cust_id bigint, tz text, plan_id bigint,
                                               price_amount bigint, price_effective_from timestamptz, st text, qty integer,
                                               current_period_start timestamptz, current_period_end timestamptz, coupon text,
                                               cancel_at_period_end boolean);
        INSERT INTO billing.external_ref (object_type, external_id, customer_id, object_id, created_at)
        SELECT 'subscription', k.external_id, k.cust_id, k.id, p_now
          FROM jsonb_to_recordset(v_rows) AS k(id bigint, external_id text, cust_id bigint);
        -- The coupon as redeemed at the source before this period: a repeating one discounts until
        -- the source's end of it, a forever one always, a once one (trials only) the first period.
        INSERT INTO billing.coupon_redemption (customer_id, subscription_id, coupon_code, periods_left, redeemed_at, discount_until)
        SELECT k.cust_id, k.id, k.coupon, CASE WHEN k.coupon_duration = 'once' THEN 1 END,
               least(p_now, k.current_period_start), CASE WHEN k.coupon_duration = 'repeating' THEN k.coupon_until END
          FROM jsonb_to_recordset(v_rows) AS k(id bigint, cust_id bigint, coupon text, coupon_duration text,
                                               coupon_until timestamptz, current_period_start timestamptz)
         WHERE k.coupon IS NOT NULL;
        -- SubscriptionCreated, as on a signup: its data is billing._subscription_data of the row as
        -- inserted, written out here over the same values (220_import checks they are equal): no
        -- read back of the distributed table, no per-row call.
        INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, created_at, available_at, customer_id)
        SELECT e.event_id, 'subscription', e.id, 'SubscriptionCreated',
               billing._cloud_event(e.event_id, 'SubscriptionCreated', 'subscription', e.id, p_now, e.data),
               p_now, p_now, e.cust_id
          FROM (SELECT gen_random_uuid() AS event_id, k.id, k.cust_id,
                       jsonb_build_object(
                           'subscriptionId', k.id, 'customerId', k.cust_id, 'planCode', k.plan, 'status', k.st,
                           'currentPeriodStart', billing._utc_text(k.current_period_start),
                           'currentPeriodEnd', billing._utc_text(k.current_period_end),
                           'canceledAt', NULL, 'reason', NULL,
                           'cancelAtPeriodEnd', coalesce(k.cancel_at_period_end, false), 'version', 1,
                           'quantity', k.qty,
                           'trialEnd', CASE k.st WHEN 'TRIALING' THEN billing._utc_text(k.current_period_end) END,
                           'pausedAt', NULL, 'resumeAt', NULL, 'scheduledPlanCode', NULL, 'couponCode', k.coupon) AS data
                  FROM jsonb_to_recordset(v_rows) AS k(id bigint, cust_id bigint, plan text, st text, qty integer,
                                                       current_period_start timestamptz, current_period_end timestamptz,
                                                       coupon text, cancel_at_period_end boolean)) e;
        -- usage rated in arrears (72_usage_rating): one on a plan with usage charges is followed now,
        -- from its imported period (no invoice of it says where it started once it has renewed)
        IF EXISTS (SELECT 1 FROM billing.plan_charge c
                    WHERE c.plan_id IN (SELECT k.plan_id FROM jsonb_to_recordset(v_rows) AS k(plan_id bigint))) THEN
            PERFORM billing._usage_follow_all(p_now);
        END IF;
    END IF;

    RETURN QUERY
    SELECT a.external_id, coalesce(a.existing_id, w.id), coalesce(a.existing_customer, a.cust_id),
           CASE WHEN a.existing_id IS NULL THEN 'created' ELSE 'exists' END, NULL::text
      FROM jsonb_to_recordset(v_all) AS a(external_id text, existing_id bigint, existing_customer bigint, cust_id bigint, n bigint)
      LEFT JOIN jsonb_to_recordset(coalesce(v_rows, '[]')) AS w(id bigint, n bigint) ON w.n = a.n
     ORDER BY a.n;
END
$$;
COMMENT ON FUNCTION billing.import_subscriptions(jsonb, timestamptz, boolean) IS
'Imports up to 10000 subscriptions in one call, each in the period its source has billed: p_subscriptions is a JSON array of {"external_id" (required, the key), "customer_id" or "customer_external_id", "plan_code" or "plan_external_id", "status" ACTIVE | TRIALING, "current_period_start", "current_period_end" (TRIALING: the trial''s end), "quantity" (default 1), "coupon_code" with "coupon_until" (a repeating coupon''s end at the source), "cancel_at_period_end"}. Nothing is billed for that period; the first renewal starts at its end. A subscription whose external id is already here is skipped; the batch is all or nothing; SubscriptionCreated for each new one. p_dry_run: checks and reports, writes nothing.
Returns one row per input row, in order: external id, our subscription id, customer id, outcome created | exists (dry run: new | exists | refused) and the problem; BL422 naming the first row that cannot be imported (unknown customer, plan or coupon, another status, a period ended or not begun, a coupon used up or not applicable), BL409 when a coupon has no redemptions left (in all, or for a customer: max_redemptions_per_customer).';
