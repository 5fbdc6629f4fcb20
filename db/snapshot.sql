-- The schema of a migrated database as sorted text, compared by driver/tests/test_sql_schema_drift.py
-- with the committed db/schema.snapshot. Regenerate after a deliberate change:
--   psql -XAtq -d <freshly migrated database> -f db/snapshot.sql > db/schema.snapshot
-- Owner-independent (no owner names); function bodies are left out on purpose (the interface
-- is what others rely on; pgTAP covers behaviour).
WITH rels AS (
    SELECT c.oid, c.relname, c.relkind
      FROM pg_class c
     WHERE c.relnamespace = 'billing'::regnamespace AND c.relkind IN ('r', 'v', 'm', 'p')
), lines AS (
    SELECT format('table %s', r.relname) AS line FROM rels r
    UNION ALL
    SELECT format('table %s column %s %s%s%s%s', r.relname, a.attname, format_type(a.atttypid, a.atttypmod),
                  CASE WHEN a.attnotnull THEN ' not null' ELSE '' END,
                  CASE WHEN a.attidentity <> '' THEN ' identity ' || a.attidentity::text ELSE '' END,
                  CASE WHEN d.adbin IS NOT NULL THEN ' default ' || pg_get_expr(d.adbin, d.adrelid) ELSE '' END)
      FROM rels r
      JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
      LEFT JOIN pg_attrdef d ON d.adrelid = r.oid AND d.adnum = a.attnum
    UNION ALL
    SELECT format('table %s column-order %s', r.relname,
                  (SELECT string_agg(a.attname, ',' ORDER BY a.attnum) FROM pg_attribute a
                    WHERE a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped))
      FROM rels r
    UNION ALL
    SELECT format('table %s constraint %s %s', r.relname, k.conname, pg_get_constraintdef(k.oid))
      FROM rels r JOIN pg_constraint k ON k.conrelid = r.oid
    UNION ALL
    SELECT format('table %s index %s', r.relname, pg_get_indexdef(i.indexrelid))
      FROM rels r JOIN pg_index i ON i.indrelid = r.oid
    UNION ALL
    SELECT format('table %s trigger %s', r.relname, pg_get_triggerdef(t.oid))
      FROM rels r JOIN pg_trigger t ON t.tgrelid = r.oid AND NOT t.tgisinternal
    UNION ALL
    SELECT format('table %s grant billing_app %s', r.relname, p.priv)
      FROM rels r CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) p(priv)
     WHERE has_table_privilege('billing_app', r.oid, p.priv)
    UNION ALL
    SELECT format('function %s(%s) returns %s%s %s%s%s%s',
                  p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
                  CASE p.prokind WHEN 'p' THEN ' procedure' ELSE '' END,
                  CASE p.provolatile WHEN 'i' THEN 'immutable' WHEN 's' THEN 'stable' ELSE 'volatile' END,
                  CASE WHEN p.prosecdef THEN ' security-definer' ELSE '' END,
                  coalesce(' set ' || array_to_string(p.proconfig, ' set '), ''),
                  CASE WHEN has_function_privilege('billing_app', p.oid, 'EXECUTE') THEN ' granted-to-billing_app' ELSE '' END
                  || coalesce(' granted-to-' || (SELECT string_agg(j.role, ',' ORDER BY j.role)
                                                   FROM unnest(ARRAY['billing_api', 'billing_worker', 'billing_relay',
                                                                     'billing_readonly', 'billing_admin']) j(role)
                                                  WHERE has_function_privilege(j.role, p.oid, 'EXECUTE')), '')
                  || CASE WHEN has_function_privilege('public', p.oid, 'EXECUTE') THEN ' granted-to-PUBLIC' ELSE '' END)
      FROM pg_proc p
     WHERE p.pronamespace = 'billing'::regnamespace
    UNION ALL
    SELECT format('sequence %s', c.relname) FROM pg_class c
     WHERE c.relnamespace = 'billing'::regnamespace AND c.relkind = 'S'
    UNION ALL
    SELECT format('role %s login=%s super=%s', r.rolname, r.rolcanlogin, r.rolsuper) FROM pg_roles r
     WHERE r.rolname IN ('billing_app', 'billing_owner', 'billing_api', 'billing_worker', 'billing_relay',
                         'billing_readonly', 'billing_admin')
    UNION ALL
    SELECT format('schema billing owner %s', n.nspowner::regrole) FROM pg_namespace n WHERE n.nspname = 'billing'
    UNION ALL
    SELECT format('schema billing usage billing_app=%s public=%s',
                  has_schema_privilege('billing_app', 'billing', 'USAGE'), has_schema_privilege('public', 'billing', 'USAGE'))
)
SELECT line FROM lines ORDER BY line COLLATE "C";
