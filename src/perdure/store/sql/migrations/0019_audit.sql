-- perdure schema, version 19: who did what.
--
-- Every state-changing action taken through the dashboard, the HTTP API or
-- the CLI (start, cancel, retry, fork, signal, pause, resume, schedule and
-- queue changes, prune, grants) writes one row here: who (a token's name, a
-- proxy's user, or the CLI's OS user or --as), how they were known (token,
-- proxy, cli), from where (the client's address, or the CLI's host), what
-- (the action), which runs, when (the server's clock), and the outcome: ok,
-- refused (403: the role may not) or error (the action itself failed). No
-- token and no payload is ever stored: `detail` holds names (a signal's,
-- a schedule's), never values.
--
-- The table is append-only for perdure's roles:
-- 1. no role but the owner keeps UPDATE, DELETE or TRUNCATE on it (below;
--    `perdure migrate --grant-to` revokes them again, see store/privileges.py);
-- 2. a trigger refuses UPDATE and DELETE (SQLSTATE 42501) from every role,
--    the owner included, except the deletes of audit_prune run by the
--    schema's owner (retention: `perdure prune` and workers' retention
--    delete audit rows older than the cutoff when they run as the owner).
CREATE TABLE audit (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    actor      text        NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    via        text        NOT NULL CHECK (via IN ('token', 'proxy', 'cli', 'open')),
    role       text        CHECK (length(role) <= 40),
    source     text        NOT NULL CHECK (source IN ('dashboard', 'api', 'cli')),
    address    text        CHECK (length(address) <= 200),
    action     text        NOT NULL CHECK (length(action) BETWEEN 1 AND 80),
    runs       text[]      NOT NULL DEFAULT '{}' CHECK (cardinality(runs) <= 1000),
    outcome    text        NOT NULL CHECK (outcome IN ('ok', 'refused', 'error')),
    detail     jsonb       CHECK (octet_length(detail::text) <= 4096)
);
CREATE INDEX audit_at_idx ON audit (at DESC, id DESC);
CREATE INDEX audit_actor_idx ON audit (actor, at DESC, id DESC);
CREATE INDEX audit_runs_idx ON audit USING gin (runs);

-- audit_append_only: the trigger that keeps rows as written.
CREATE FUNCTION audit_append_only() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'DELETE'
       AND current_setting('perdure.audit_retention', true) = 'on'
       AND pg_has_role(session_user,
                       (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = TG_TABLE_SCHEMA),
                       'USAGE') THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'the audit record is append-only: % refused', TG_OP
        USING ERRCODE = '42501';
END
$$;
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION audit_append_only();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
    FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();

-- audit_prune: retention. Run by the schema's owner, deletes the rows older
-- than p_before and returns how many; run by any other role, deletes
-- nothing and returns NULL (that role cannot delete audit rows).
CREATE FUNCTION audit_prune(p_before timestamptz) RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_deleted bigint;
BEGIN
    IF p_before IS NULL OR NOT isfinite(p_before) THEN
        RAISE EXCEPTION 'p_before must be a finite time, not %', coalesce(p_before::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF NOT pg_has_role(session_user,
                       (SELECT c.relowner FROM pg_class c WHERE c.oid = 'audit'::regclass),
                       'USAGE') THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('perdure.audit_retention', 'on', true);
    DELETE FROM audit WHERE at < p_before;
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    PERFORM set_config('perdure.audit_retention', 'off', true);
    RETURN v_deleted;
END
$$;

-- Roles that default privileges gave UPDATE, DELETE or TRUNCATE on the new
-- table (the worker grant's) keep SELECT and INSERT only.
DO $$
DECLARE
    v_grantee regrole;
BEGIN
    FOR v_grantee IN
        SELECT DISTINCT a.grantee::regrole
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'audit'::regclass AND a.grantee <> c.relowner AND a.grantee <> 0
          AND a.privilege_type IN ('UPDATE', 'DELETE', 'TRUNCATE')
    LOOP
        EXECUTE format('REVOKE UPDATE, DELETE, TRUNCATE ON audit FROM %s', v_grantee);
    END LOOP;
END
$$;
