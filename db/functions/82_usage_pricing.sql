-- 82_usage_pricing: a plan's usage charges and their amounts (issue 29; docs/usage.md "Pricing"):
-- upsert_plan_charge, the set-based pricing (_usage_amounts) the rating and the upcoming invoice
-- call, and its one-charge form. Split out of 71_usage (pure moves).
-- Re-applied after every migration: CREATE OR REPLACE only.

-- Pricing (docs/usage.md, "Pricing"): a plan's charge for a meter.
CREATE OR REPLACE FUNCTION billing.upsert_plan_charge(
    p_plan_code text, p_meter_code text, p_model text, p_unit_amount numeric DEFAULT NULL,
    p_package_size bigint DEFAULT NULL, p_tiers jsonb DEFAULT '[]'::jsonb, p_included_units numeric DEFAULT 0,
    p_minimum_amount bigint DEFAULT NULL, p_maximum_amount bigint DEFAULT NULL, p_now timestamptz DEFAULT now())
RETURNS billing.plan_charge
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_now     timestamptz := billing._check_now(p_now);
    v_plan_id bigint;
    v_tiers   jsonb := coalesce(p_tiers, '[]'::jsonb);
    v_row     billing.plan_charge;
    v_prev    numeric := 0;
    v_tier    jsonb;
    v_i       integer := 0;
    v_n       integer;
BEGIN
    PERFORM billing._audit('upsert_plan_charge', jsonb_build_object('plan', p_plan_code, 'meter', p_meter_code,
        'model', p_model, 'unit_amount', p_unit_amount, 'package_size', p_package_size, 'tiers', p_tiers,
        'included_units', p_included_units, 'minimum', p_minimum_amount, 'maximum', p_maximum_amount));
    SELECT id INTO v_plan_id FROM billing.plan WHERE code = p_plan_code;
    IF v_plan_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('plan %s not found', p_plan_code);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM billing.meter WHERE code = p_meter_code) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL404', MESSAGE = format('meter %s not found', p_meter_code);
    END IF;
    PERFORM billing._check_one_of(format('charge %s/%s: model', p_plan_code, p_meter_code), p_model,
                                  ARRAY['per_unit', 'graduated', 'volume', 'package'],
                                  'Use per_unit, graduated, volume or package.');
    IF p_model IN ('per_unit', 'package') AND (p_unit_amount IS NULL OR p_unit_amount < 0 OR v_tiers <> '[]'::jsonb) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('charge %s/%s: %s needs a unit amount >= 0 and no tiers', p_plan_code, p_meter_code, p_model);
    END IF;
    IF (p_model = 'package') <> (p_package_size IS NOT NULL) OR p_package_size <= 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('charge %s/%s: a package size > 0 for package, and only for it', p_plan_code, p_meter_code);
    END IF;
    IF p_model IN ('graduated', 'volume') THEN
        IF p_unit_amount IS NOT NULL OR jsonb_typeof(v_tiers) <> 'array' OR jsonb_array_length(v_tiers) = 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'BL422',
                MESSAGE = format('charge %s/%s: %s needs tiers and no unit amount', p_plan_code, p_meter_code, p_model);
        END IF;
        v_n := jsonb_array_length(v_tiers);
        FOR v_tier IN SELECT value FROM jsonb_array_elements(v_tiers) LOOP
            v_i := v_i + 1;
            IF jsonb_typeof(v_tier) <> 'object' OR (v_tier - 'upTo' - 'unitAmount' - 'flatAmount') <> '{}'::jsonb
               OR jsonb_typeof(v_tier -> 'unitAmount') IS DISTINCT FROM 'number' OR (v_tier ->> 'unitAmount')::numeric < 0
               OR (v_tier ? 'flatAmount' AND (jsonb_typeof(v_tier -> 'flatAmount') IS DISTINCT FROM 'number'
                                              OR (v_tier ->> 'flatAmount')::numeric < 0
                                              OR (v_tier ->> 'flatAmount')::numeric <> trunc((v_tier ->> 'flatAmount')::numeric)))
               OR (v_i < v_n AND (jsonb_typeof(v_tier -> 'upTo') IS DISTINCT FROM 'number' OR (v_tier ->> 'upTo')::numeric <= v_prev))
               OR (v_i = v_n AND coalesce(jsonb_typeof(v_tier -> 'upTo'), 'null') <> 'null') THEN
                RAISE EXCEPTION USING ERRCODE = 'BL422',
                    MESSAGE = format('charge %s/%s: tier %s must be {"upTo": n, "unitAmount": x, "flatAmount": n}, upTo ascending, the last upTo null',
                                     p_plan_code, p_meter_code, v_i);
            END IF;
            IF v_i < v_n THEN v_prev := (v_tier ->> 'upTo')::numeric; END IF;
        END LOOP;
    END IF;
    IF coalesce(p_included_units, 0) < 0 OR p_minimum_amount < 0 OR p_maximum_amount < coalesce(p_minimum_amount, 0) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = format('charge %s/%s: included units >= 0, 0 <= minimum <= maximum', p_plan_code, p_meter_code);
    END IF;
    INSERT INTO billing.plan_charge AS c (plan_id, meter_code, model, unit_amount, package_size, tiers, included_units,
                                          minimum_amount, maximum_amount, created_at, updated_at)
    VALUES (v_plan_id, p_meter_code, p_model, p_unit_amount, p_package_size, v_tiers, coalesce(p_included_units, 0),
            p_minimum_amount, p_maximum_amount, v_now, v_now)
    ON CONFLICT ON CONSTRAINT plan_charge_pkey DO UPDATE
       SET model = EXCLUDED.model, unit_amount = EXCLUDED.unit_amount, package_size = EXCLUDED.package_size,
           tiers = EXCLUDED.tiers, included_units = EXCLUDED.included_units, minimum_amount = EXCLUDED.minimum_amount,
           maximum_amount = EXCLUDED.maximum_amount, updated_at = EXCLUDED.updated_at
    RETURNING * INTO v_row;
    -- the plan's subscriptions are followed by the rating from the period current now (a charge
    -- applies from the period it was made in, never back to their first period: 72_usage_rating)
    PERFORM billing._usage_follow_plans(v_plan_id, v_now);
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION billing.upsert_plan_charge(text, text, text, numeric, bigint, jsonb, numeric, bigint, bigint, timestamptz) IS
'Creates or changes a plan''s usage charge for a meter: per_unit (p_unit_amount per unit), graduated / volume (p_tiers), package
(p_unit_amount per started p_package_size units); p_included_units free, then at least p_minimum_amount and at most p_maximum_amount
per period. BL404 unknown plan or meter; BL422 a bad definition.';

-- The amounts (minor units) charges bill for quantities, set-based: the n-th charge (its terms, one
-- array each) for p_quantities[n], one row per n. Per charge: the included units off first, the model's amount rounded up to a whole
-- minor unit once, then the minimum and the maximum (docs/usage.md "Pricing"). The rating prices its
-- whole batch in one call (72_usage_rating); _usage_amount is the same for one charge.
-- graduated: each tier's slice of q (between the previous tier's upTo and its own) at its unit
-- amount, plus its flat amount when the slice is not empty; volume: the whole q at the first tier
-- whose upTo it does not pass, plus that tier's flat amount; q = 0 bills 0 under both.
DROP FUNCTION IF EXISTS billing._usage_amounts(billing.plan_charge[], numeric[]);
CREATE OR REPLACE FUNCTION billing._usage_amounts(
    p_models text[], p_unit_amounts numeric[], p_package_sizes bigint[], p_tiers jsonb[], p_included numeric[],
    p_minimums bigint[], p_maximums bigint[], p_quantities numeric[])
RETURNS TABLE (n bigint, amount bigint)
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
-- its one query's generic plan, made once a session: the custom plan (the default for a query of
-- array parameters) was made again at every call, 0.37 against 0.15 ms a call of the preview's 3 charges
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    -- PL/pgSQL, not SQL: its plan is kept for the session (a SQL function's is made at every call,
    -- most of a preview's pricing); the plan has no join, so the generic plan of any batch is linear:
    -- each charge's tiers read by a subquery of its own row
    RETURN QUERY
    SELECT r.n,
           least(greatest(ceil(CASE r.model WHEN 'per_unit' THEN r.q * r.unit_amount
                                             WHEN 'package' THEN ceil(r.q / r.package_size) * r.unit_amount
                                             ELSE coalesce((
                   SELECT CASE WHEN r.model = 'graduated'
                               THEN sum((least(r.q, coalesce(t.upto, r.q)) - t.prev) * t.unit + t.flat)
                                        FILTER (WHERE least(r.q, coalesce(t.upto, r.q)) - t.prev > 0)
                               ELSE (array_agg(r.q * t.unit + t.flat ORDER BY t.k) FILTER (WHERE t.upto IS NULL OR r.q <= t.upto))[1]
                          END
                     FROM (SELECT t.k, (t.v ->> 'upTo')::numeric AS upto, (t.v ->> 'unitAmount')::numeric AS unit,
                                  coalesce((t.v ->> 'flatAmount')::numeric, 0) AS flat,
                                  coalesce(lag((t.v ->> 'upTo')::numeric) OVER (ORDER BY t.k), 0) AS prev
                             FROM jsonb_array_elements(r.tiers) WITH ORDINALITY AS t (v, k)) t
                    WHERE r.model IN ('graduated', 'volume') AND r.q > 0), 0) END),
                          r.minimum_amount),
                 r.maximum_amount)::bigint
      FROM (SELECT c.n, c.model, c.unit_amount, c.package_size, c.tiers, c.minimum_amount, c.maximum_amount,
                   greatest(coalesce(c.quantity, 0) - c.included_units, 0) AS q
              FROM unnest(p_models, p_unit_amounts, p_package_sizes, p_tiers, p_included, p_minimums, p_maximums, p_quantities)
                   WITH ORDINALITY AS c (model, unit_amount, package_size, tiers, included_units, minimum_amount, maximum_amount,
                                         quantity, n)) r
     ORDER BY r.n;
END
$$;
COMMENT ON FUNCTION billing._usage_amounts(text[], numeric[], bigint[], jsonb[], numeric[], bigint[], bigint[], numeric[]) IS
'Private, set-based: the amount in minor units the n-th charge (model, unit amount, package size, tiers, included units, minimum, maximum: the n-th of each array) bills for the quantity p_quantities[n] (included units off, the model, rounded up once, minimum, maximum).
Returns one row (n, amount) per charge.';

-- The amount (minor units) a charge bills for a period's quantity: _usage_amounts for one charge.
CREATE OR REPLACE FUNCTION billing._usage_amount(p_charge billing.plan_charge, p_quantity numeric)
RETURNS bigint
LANGUAGE sql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT a.amount FROM billing._usage_amounts(ARRAY[p_charge.model], ARRAY[p_charge.unit_amount], ARRAY[p_charge.package_size],
                                                ARRAY[p_charge.tiers], ARRAY[p_charge.included_units],
                                                ARRAY[p_charge.minimum_amount], ARRAY[p_charge.maximum_amount], ARRAY[p_quantity]) a
$$;
COMMENT ON FUNCTION billing._usage_amount(billing.plan_charge, numeric) IS
'Private: the amount in minor units a plan charge bills for a period''s quantity (included units off, the model, rounded up once, minimum, maximum).';

-- Comments of two lines each (001_schema checks it), the short ones above made whole here.
COMMENT ON FUNCTION billing.upsert_plan_charge(text, text, text, numeric, bigint, jsonb, numeric, bigint, bigint, timestamptz) IS
'Creates or changes a plan''s usage charge for a meter: per_unit, graduated or volume (p_tiers [{upTo, unitAmount, flatAmount}]), package (p_unit_amount per started p_package_size units), with included units, minimum, maximum.
Returns the charge; BL404 for an unknown plan or meter, BL422 for a bad definition.';
COMMENT ON FUNCTION billing._usage_amount(billing.plan_charge, numeric) IS
'Private: the amount in minor units a plan charge bills for a period''s quantity (included units off, the model, rounded up once, minimum, maximum).
Returns a bigint >= 0.';
