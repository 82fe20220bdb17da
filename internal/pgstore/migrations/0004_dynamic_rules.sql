-- 0004: dynamic rules, written through the limiter's admin API
-- (PUT/DELETE /v1/admin/rules/{id}) and applied by every limiter on top of
-- its rules file (a dynamic rule overrides the file's rule of the same id).

-- dynamic_rules_version: one row, the version of the dynamic rule set. Every
-- change increments it in the transaction that makes the change; the row
-- lock orders concurrent changes, so versions follow commit order and a
-- limiter that has applied version N has applied every change up to N.
CREATE TABLE dynamic_rules_version (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    version    bigint      NOT NULL,
    changed_at timestamptz NOT NULL
);
INSERT INTO dynamic_rules_version (version, changed_at) VALUES (0, now());

-- dynamic_rules: the rules in force, one row per rule id. rule is the rule
-- in the rules-file schema as JSON (what GET /v1/admin/rules shows);
-- version is the set version that last wrote it.
CREATE TABLE dynamic_rules (
    rule_id    text        PRIMARY KEY,
    rule       jsonb       NOT NULL,
    version    bigint      NOT NULL,
    updated_at timestamptz NOT NULL,
    updated_by text        NOT NULL
);

-- rule_changes: the audit trail, one row per change, never updated. before
-- is NULL when the change created the rule, after when it deleted it.
CREATE TABLE rule_changes (
    version     bigint      PRIMARY KEY,
    rule_id     text        NOT NULL,
    action      text        NOT NULL CHECK (action IN ('put', 'delete')),
    actor       text        NOT NULL, -- as declared by the caller (X-Actor), else "admin"
    source_addr text        NOT NULL, -- the client address the limiter saw
    instance    text        NOT NULL, -- the limiter that served the change
    changed_at  timestamptz NOT NULL,
    before      jsonb,
    after       jsonb
);
CREATE INDEX rule_changes_rule_id ON rule_changes (rule_id, version);
