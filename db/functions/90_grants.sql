-- 90_grants: billing_app executes the API functions and nothing else. Re-applied last, after
-- every migration and every other functions file, so a new table or function never leaks.
-- The rule is by name: functions of schema billing whose name starts with "_" are private;
-- every other function (returning anything but a trigger) is API and executable by billing_app.

REVOKE ALL ON SCHEMA billing FROM PUBLIC;
GRANT USAGE ON SCHEMA billing TO billing_app;

REVOKE ALL ON ALL TABLES IN SCHEMA billing FROM PUBLIC, billing_app;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA billing FROM PUBLIC, billing_app;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA billing FROM PUBLIC, billing_app;

DO $$
DECLARE
    v_fn regprocedure;
BEGIN
    FOR v_fn IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc p
         WHERE p.pronamespace = 'billing'::regnamespace
           AND p.prokind = 'f'
           AND p.proname !~ '^_'
           AND p.prorettype <> 'pg_catalog.trigger'::regtype
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO billing_app', v_fn);
    END LOOP;
END
$$;
