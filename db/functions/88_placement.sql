-- 88_placement: where each table of schema billing goes on a Citus cluster (docs/scaling.md).
-- One list, read by `billing db migrate --citus` (driver/billing/citus.py) and checked against the
-- catalog by db/tests/880_customer_keys.sql: a table added without a line here fails that test.
-- Re-applied after every migration: CREATE OR REPLACE only.
--
--   reference    a copy on every node: configuration, written rarely, read by every shard.
--   distributed  sharded by its distribution column, colocated with billing.customer: customer_id
--                is in its primary key, its unique constraints and its foreign keys to the others.
--   pending      belongs to a customer but is not keyed by customer yet (the reason says what is
--                missing); --citus leaves it and everything tied to it on the coordinator.
--   coordinator  bookkeeping of the coordinator only.
--
-- A line may name a table another branch adds: it counts once the table exists.

CREATE OR REPLACE FUNCTION billing._placement()
RETURNS TABLE (table_name text, placement text, distribution_column text, reason text)
LANGUAGE sql STABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
    SELECT * FROM (VALUES
        ('timezone_name',        'reference',   NULL,          'configuration'),
        ('plan',                 'reference',   NULL,          'configuration'),
        ('external_ref',         'reference',   NULL,          'the callers'' own ids of customers and subscriptions: unique per kind across every shard, looked up on every node'),
        ('plan_price',           'reference',   NULL,          'configuration'),
        ('dunning_step',         'reference',   NULL,          'configuration'),
        ('installation',         'reference',   NULL,          'configuration'),
        ('database_setting',     'reference',   NULL,          'configuration'),
        ('api_key',              'reference',   NULL,          'configuration'),
        ('console_session',      'reference',   NULL,          'an operator''s session, not a customer''s'),
        ('webhook_endpoint',     'reference',   NULL,          'configuration'),
        ('coupon',               'reference',   NULL,          'configuration'),
        ('tax_rate',             'reference',   NULL,          'configuration'),
        ('shard_lease',          'reference',   NULL,          'the batch workers'' leases of shard groups (written about once a lease)'),
        ('shard_worker',         'reference',   NULL,          'the batch workers leasing shard groups (written about once a lease)'),
        ('document_series',      'reference',   NULL,          'a numbering series (its counter is written when a number is taken)'),
        ('customer',             'distributed', 'id',          'the customer'),
        ('subscription',         'distributed', 'customer_id', 'primary key (customer_id, id)'),
        ('invoice',              'distributed', 'customer_id', 'primary key (customer_id, id); its number unique per customer, taken once from its series'' counter'),
        ('credit_balance',       'distributed', 'customer_id', 'primary key (customer_id, currency)'),
        ('credit_entry',         'distributed', 'customer_id', 'primary key (customer_id, id)'),
        ('credit_pending',       'distributed', 'customer_id', 'primary key (customer_id, id)'),
        ('payment_method',       'distributed', 'customer_id', 'primary key (customer_id, id)'),
        ('coupon_redemption',    'distributed', 'customer_id', 'primary key (customer_id, subscription_id, coupon_code)'),
        ('invoice_line',         'distributed', 'customer_id', 'primary key (customer_id, invoice_id, line_no)'),
        ('service_line',         'distributed', 'customer_id', 'primary key (customer_id, id)'),
        ('credit_note_line',     'distributed', 'customer_id', 'primary key (customer_id, credit_note_id, line_no)'),
        ('credit_note',          'distributed', 'customer_id', 'primary key (customer_id, id); its number unique per customer, taken once from its series'' counter'),
        ('payment_attempt',      'distributed', 'customer_id', 'primary key (customer_id, id)'),
        ('refund',               'distributed', 'customer_id', 'primary key (customer_id, id); the caller''s request key unique per customer'),
        ('subscription_request', 'distributed', 'customer_id', 'primary key (customer_id, idempotency_key)'),
        ('outbox_event',         'distributed', 'customer_id', 'primary key (customer_id, id): an aggregate''s events in its customer''s shard (0: events of no customer)'),
        ('webhook_delivery',     'distributed', 'customer_id', 'primary key (customer_id, endpoint_id, outbox_id): its event''s customer'),
        ('webhook_attempt',      'distributed', 'customer_id', 'primary key (customer_id, endpoint_id, outbox_id, attempt): its event''s customer'),
        ('audit_log',            'distributed', 'customer_id', 'primary key (customer_id, id): the customer its call named (0: none)'),
        ('gateway_webhook',      'distributed', 'customer_id', 'primary key (customer_id, event_id): its payment attempt''s customer (0: none)'),
        ('customer_session',     'distributed', 'customer_id', 'primary key (customer_id, token_hash): the one customer a front-end token may act on'),
        ('notification',         'distributed', 'customer_id', 'primary key (customer_id, id); its key unique per customer'),
        ('portal_link',          'distributed', 'customer_id', 'primary key (customer_id, token_hash)'),
        ('portal_session',       'distributed', 'customer_id', 'primary key (customer_id, token_hash): the one customer a portal cookie may read and act on'),
        ('plan_change_option',   'reference',   NULL,          'configuration: the plan changes customers may make on the portal'),
        ('meter',                'reference',   NULL,          'configuration: the usage meters'),
        ('plan_charge',          'reference',   NULL,          'configuration: a plan''s usage charges'),
        ('usage_event',          'distributed', 'customer_id', 'primary key (customer_id, event_time, source, event_id); partitioned by month'),
        ('usage_dedup',          'distributed', 'customer_id', 'primary key (customer_id, source, event_id): the exactly-once key'),
        ('usage_rollup',         'distributed', 'customer_id', 'primary key (customer_id, meter_code, bucket)'),
        ('usage_unique',         'distributed', 'customer_id', 'primary key (customer_id, meter_code, bucket, value)'),
        ('usage_rollup_day',     'distributed', 'customer_id', 'primary key (customer_id, meter_code, day)'),
        ('usage_unique_day',     'distributed', 'customer_id', 'primary key (customer_id, meter_code, day, value)'),
        ('usage_cursor',         'distributed', 'customer_id', 'primary key (customer_id, subscription_id): how far its usage is rated'),
        ('usage_rating',         'distributed', 'customer_id', 'primary key (customer_id, id)'),
        ('usage_alert',          'distributed', 'customer_id', 'primary key (customer_id, id)'),
        ('overview_count',       'coordinator', NULL,          'the console overview''s counters: kept on a single PostgreSQL only (on Citus its triggers are dropped and the overview counts rows)'),
        ('mrr_segment',          'coordinator', NULL,          'the MRR kept by the engine''s writes: single PostgreSQL only (on Citus its triggers are dropped and the reports recompute)'),
        ('mrr_delta',            'coordinator', NULL,          'the MRR totals'' deltas: single PostgreSQL only (as mrr_segment)'),
        ('mrr_movement',         'coordinator', NULL,          'the MRR movements'' deltas: single PostgreSQL only (as mrr_segment)'),
        ('mrr_dirty',            'coordinator', NULL,          'the customers whose MRR is to recompute: single PostgreSQL only (as mrr_segment)'),
        ('schema_migration',     'coordinator', NULL,          'the migrations applied'),
        ('renewal_statement_mark', 'coordinator', NULL,        'the renewal statement''s mark while it runs (0920): single PostgreSQL only (on Citus invoice_subscription_exists is the composite foreign key)')
    ) AS t (table_name, placement, distribution_column, reason)
    WHERE pg_catalog.to_regclass('billing.' || t.table_name) IS NOT NULL
$$;
COMMENT ON FUNCTION billing._placement() IS
'Private: each table of schema billing and where it goes on Citus (reference, distributed by its column, pending re-keying, coordinator), with why.
Returns one row per table (a table not created yet is ignored); read by billing db migrate --citus and db/tests/880_customer_keys.sql.';

-- _distributable: of the tables declared distributed, which Citus can distribute now, and why each
-- other one waits. Citus refuses a foreign key between a distributed table and a table it keeps on
-- the coordinator (either way), so a declared-distributed table tied by a foreign key to a table
-- that stays there (pending, coordinator, not declared, or held itself) is held too, until nothing
-- changes; a key to a reference table holds nothing back. p_tables/p_placements: _placement()'s
-- tables and placements; p_fk_from/p_fk_to: the (referencing, referenced) table of each foreign key.
-- Returns one row per declared-distributed table, in p_tables' order: reason NULL when it can be
-- distributed now. Read by db/citus/distribute.sql (billing db migrate --citus).
CREATE OR REPLACE FUNCTION billing._distributable(p_tables text[], p_placements text[], p_fk_from text[],
                                                  p_fk_to text[])
RETURNS TABLE (table_name text, reason text)
LANGUAGE plpgsql IMMUTABLE
SET search_path = billing, pg_catalog, pg_temp
AS $$
DECLARE
    v_kind jsonb := '{}';
    v_held jsonb := '{}';
    v_changed boolean := true;
    v_table text;
    v_other text;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_tables, 1), 0) LOOP
        v_kind := v_kind || jsonb_build_object(p_tables[i], p_placements[i]);
    END LOOP;
    WHILE v_changed LOOP
        v_changed := false;
        FOR i IN 1 .. coalesce(array_length(p_tables, 1), 0) LOOP
            v_table := p_tables[i];
            CONTINUE WHEN p_placements[i] IS DISTINCT FROM 'distributed' OR v_held ? v_table;
            FOR j IN 1 .. coalesce(array_length(p_fk_from, 1), 0) LOOP
                v_other := CASE WHEN p_fk_from[j] = v_table THEN p_fk_to[j]
                                WHEN p_fk_to[j] = v_table THEN p_fk_from[j] END;
                CONTINUE WHEN v_other IS NULL OR v_other = v_table OR v_kind ->> v_other = 'reference';
                IF v_kind ->> v_other IS DISTINCT FROM 'distributed' OR v_held ? v_other THEN
                    v_held := v_held || jsonb_build_object(v_table, format(
                        'a foreign key ties it to %s, which stays on the coordinator', v_other));
                    v_changed := true;
                    EXIT;
                END IF;
            END LOOP;
        END LOOP;
    END LOOP;
    RETURN QUERY
    SELECT p_tables[i], v_held ->> p_tables[i]
      FROM generate_subscripts(p_tables, 1) AS i
     WHERE p_placements[i] = 'distributed'
     ORDER BY i;
END
$$;
COMMENT ON FUNCTION billing._distributable(text[], text[], text[], text[]) IS
'Private: of the tables declared distributed, which Citus can distribute now (reason NULL) and why each other waits (a foreign key to a table kept on the coordinator, transitively).
Returns one row per declared-distributed table, in the given order; read by db/citus/distribute.sql.';
