-- 0003_timezone_name: a table of known zone names, so validating a time zone is one index probe
-- instead of a scan of pg_timezone_names (which reads every zone file, about 20 ms a call).
-- Names added to the system tzdata later are still accepted: _check_timezone falls back to
-- pg_timezone_names for a name not found here. (A per-session custom setting was tried first
-- and dropped: any role can SET a custom setting and so could smuggle in an invalid zone that
-- would later break every renewal batch containing it.)
CREATE TABLE billing.timezone_name (
    name text NOT NULL CONSTRAINT timezone_name_pkey PRIMARY KEY
);
COMMENT ON TABLE billing.timezone_name IS 'Zone names of pg_timezone_names when the schema was migrated (a cache for validation).';
COMMENT ON COLUMN billing.timezone_name.name IS 'IANA zone name, e.g. America/Sao_Paulo.';
INSERT INTO billing.timezone_name (name) SELECT DISTINCT name FROM pg_timezone_names;
REVOKE ALL ON billing.timezone_name FROM PUBLIC;
