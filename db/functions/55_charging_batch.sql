-- 55_charging_batch: many gateway results in one call (one transaction, one round trip).
-- Each result goes through billing._apply_payment_result, the state machine behind
-- billing.record_payment_result, unchanged: the batch only saves the per-call costs (a round
-- trip, a transaction and its commit, the entry checks, one audit row for the whole batch
-- instead of one per result, one subtransaction unless a result is refused) and reports, per
-- result, what it returned or which BL error refused it.

DROP FUNCTION IF EXISTS billing.record_payment_results(text[], text[], text[], text[], timestamptz);
CREATE OR REPLACE FUNCTION billing.record_payment_results(
    p_idempotency_keys text[], p_outcomes text[], p_gateway_references text[] DEFAULT NULL,
    p_failure_reasons text[] DEFAULT NULL, p_now timestamptz DEFAULT now(), p_hard_declines boolean[] DEFAULT NULL)
RETURNS TABLE (idempotency_key text, invoice_id bigint, invoice_status text, error_code text, error_message text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = billing, pg_catalog, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_count    integer := coalesce(cardinality(p_idempotency_keys), 0);
    v_i        integer;
    v_order    integer[];
    v_ids      bigint[] := '{}';
    v_statuses text[] := '{}';
    v_done     boolean := false;
    v_invoice  billing.invoice;
    v_state    text;
    v_message  text;
BEGIN
    -- One audit row for the batch: it holds every key, outcome, reference, reason and flag.
    PERFORM billing._audit('record_payment_results', jsonb_build_object('idempotency_keys', p_idempotency_keys, 'outcomes', p_outcomes, 'gateway_references', p_gateway_references, 'failure_reasons', p_failure_reasons, 'now', p_now, 'hard_declines', p_hard_declines));
    PERFORM billing._check_now(p_now);
    PERFORM billing._check_between('batch size', v_count, 1, 10000);
    IF coalesce(cardinality(p_outcomes), 0) <> v_count
       OR (p_gateway_references IS NOT NULL AND cardinality(p_gateway_references) <> v_count)
       OR (p_failure_reasons IS NOT NULL AND cardinality(p_failure_reasons) <> v_count)
       OR (p_hard_declines IS NOT NULL AND cardinality(p_hard_declines) <> v_count) THEN
        RAISE EXCEPTION USING ERRCODE = 'BL422',
            MESSAGE = 'record_payment_results needs one outcome (and, if given, one reference, one reason and one hard-decline flag) per key';
    END IF;

    -- In key order: two batches that share keys (a re-claimed invoice) lock in the same order.
    SELECT array_agg(k.n ORDER BY k.key, k.n) INTO v_order
      FROM unnest(p_idempotency_keys) WITH ORDINALITY AS k(key, n);

    -- The usual case, every result accepted: all of them in one subtransaction. Should one be
    -- refused (a BL error), everything this block did is undone and each result is applied again
    -- in its own subtransaction below, so that the refusal stops that result only.
    BEGIN
        FOREACH v_i IN ARRAY v_order LOOP
            v_invoice := billing._apply_payment_result(p_idempotency_keys[v_i], p_outcomes[v_i],
                                                       p_gateway_references[v_i], p_failure_reasons[v_i], p_now,
                                                       coalesce(p_hard_declines[v_i], false));
            v_ids := v_ids || v_invoice.id;
            v_statuses := v_statuses || v_invoice.status;
        END LOOP;
        v_done := true;
    EXCEPTION WHEN SQLSTATE 'BL000' THEN  -- the class: BL404, BL422, ...
        v_done := false;
    END;
    IF v_done THEN
        RETURN QUERY
        SELECT p_idempotency_keys[o.n], o.id, o.status, NULL::text, NULL::text
          FROM unnest(v_order, v_ids, v_statuses) AS o(n, id, status);
        RETURN;
    END IF;

    FOREACH v_i IN ARRAY v_order LOOP
        idempotency_key := p_idempotency_keys[v_i];
        invoice_id := NULL;
        invoice_status := NULL;
        error_code := NULL;
        error_message := NULL;
        BEGIN
            v_invoice := billing._apply_payment_result(p_idempotency_keys[v_i], p_outcomes[v_i],
                                                       p_gateway_references[v_i], p_failure_reasons[v_i], p_now,
                                                       coalesce(p_hard_declines[v_i], false));
            invoice_id := v_invoice.id;
            invoice_status := v_invoice.status;
        EXCEPTION WHEN SQLSTATE 'BL000' THEN  -- the class: BL404, BL422, ... refuse this result only
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
            error_code := v_state;
            error_message := v_message;
        END;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION billing.record_payment_results(text[], text[], text[], text[], timestamptz, boolean[]) IS
'Records many gateway outcomes in one transaction: element i of each array is applied as one billing.record_payment_result call (same rules, idempotent), under one audit row for the batch.
Returns one row per key: the invoice id and status after it, or the BL error code and message that refused it (the others are still recorded); BL422 when the arrays differ in length or hold 0 or more than 10,000 results.';
