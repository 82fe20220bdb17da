-- 0003: ratewarden_reader, a read-only role for dashboards (Grafana) and
-- analysts: SELECT on every table and view of the schema, and on those
-- created later by the migrating role (new daily partitions, future views).
--
-- It is NOLOGIN: give it a login with a role of your own, for example
--     CREATE ROLE grafana LOGIN PASSWORD '...' IN ROLE ratewarden_reader;
-- or, for a single user,
--     ALTER ROLE ratewarden_reader LOGIN PASSWORD '...';
--
-- Roles are cluster-wide: another database of the same server may create it
-- at the same moment (duplicate_object / unique_violation are fine). A
-- migrating role without CREATEROLE skips the role with a notice instead of
-- failing the archiver's start; create it and grant by hand then.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ratewarden_reader') THEN
        BEGIN
            CREATE ROLE ratewarden_reader NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL;
            WHEN insufficient_privilege THEN
                RAISE NOTICE 'role ratewarden_reader not created: the migrating role lacks CREATEROLE';
                RETURN;
        END;
    END IF;
    -- The schema the tables were created in (public unless search_path says
    -- otherwise). USAGE on schema public is granted to PUBLIC by default.
    EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %I TO ratewarden_reader', current_schema());
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT SELECT ON TABLES TO ratewarden_reader', current_schema());
END
$$;
