-- db/citus/prepare: what `billing db migrate --citus` does on a Citus coordinator before migrating
-- (docs/scaling.md), as the migrating superuser login, after the roles are created (billing.migrate's
-- ROLES: Citus propagates CREATE ROLE to every node). Run by billing.citus.prepare one statement at a
-- time, each committed on its own (autocommit): what Citus propagates to the workers is there before
-- the migration's transaction needs it. Idempotent.

-- A Citus coordinator with workers, or nothing is done.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus') THEN
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = '--citus: extension citus is not installed in this database (CREATE EXTENSION citus on '
                      'every node, then citus_add_node on the coordinator; scripts/services/citus.sh createdb does both)';
    END IF;
    IF (SELECT count(*) FROM citus_get_active_worker_nodes()) = 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = '--citus: no worker node is registered (SELECT citus_add_node(host, port))';
    END IF;
END
$$;

-- billing_owner may log in: Citus opens the connections to the workers as the current user, and
-- every SQL API function runs as its owner.
DO $$
BEGIN
    IF NOT (SELECT r.rolcanlogin FROM pg_catalog.pg_roles r WHERE r.rolname = 'billing_owner') THEN
        ALTER ROLE billing_owner LOGIN;
    END IF;
END
$$;

-- It may create the schema on every node (Citus propagates the grant to the workers).
DO $$
BEGIN
    EXECUTE format('GRANT CREATE ON DATABASE %I TO billing_owner', current_database());
END
$$;

-- The schema first, committed: created in the migration's transaction by the superuser then used by
-- billing_owner, its propagation would hold locks on the workers through one connection that the
-- other waits for (a distributed deadlock).
CREATE SCHEMA IF NOT EXISTS billing AUTHORIZATION billing_owner;
