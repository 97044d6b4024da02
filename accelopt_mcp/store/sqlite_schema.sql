-- accelopt-mcp kernel database for SQLite: the logical schema of schema_v2.txt.
-- JSON columns are TEXT; the promoted columns are generated with json_extract. SQLite does not
-- allow a generated primary key, so definitions.name and workloads.uuid are plain columns that
-- a CHECK ties to the JSON. Insertion order is the implicit rowid. Timestamps are ISO-8601 UTC
-- text written by the store. Idempotent: the store applies it on every open.

CREATE TABLE IF NOT EXISTS definitions (
    name        TEXT PRIMARY KEY,
    definition  TEXT NOT NULL,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CHECK (name = json_extract(definition, '$.name'))
);

CREATE TABLE IF NOT EXISTS workloads (
    uuid             TEXT PRIMARY KEY,
    definition_name  TEXT NOT NULL REFERENCES definitions (name) ON DELETE CASCADE,
    workload         TEXT NOT NULL,
    created_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CHECK (uuid = json_extract(workload, '$.workload.uuid'))
);
CREATE INDEX IF NOT EXISTS workloads_definition_idx ON workloads (definition_name);

CREATE TABLE IF NOT EXISTS solutions (
    id               TEXT PRIMARY KEY,
    definition_name  TEXT NOT NULL REFERENCES definitions (name) ON DELETE CASCADE,
    parent_id        TEXT REFERENCES solutions (id) ON DELETE SET NULL,
    solution         TEXT NOT NULL,
    hash_version     INTEGER NOT NULL DEFAULT 1,
    solution_hash    TEXT NOT NULL,
    evolve_metadata  TEXT NOT NULL DEFAULT '{}',
    spec_language    TEXT GENERATED ALWAYS AS (json_extract(solution, '$.spec.language')) STORED,
    author           TEXT GENERATED ALWAYS AS (json_extract(solution, '$.author')) STORED,
    run_id           TEXT GENERATED ALWAYS AS (json_extract(evolve_metadata, '$.run_id')) STORED,
    created_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    -- A solution is one (definition, source) pair: the same source may serve several
    -- definitions (the same op at other shapes), one row each. Version 6; before it the source
    -- alone was unique, and the store rebuilds an older file's table (sqlite.py).
    UNIQUE (definition_name, solution_hash, hash_version)
);
CREATE INDEX IF NOT EXISTS solutions_definition_idx ON solutions (definition_name);
CREATE INDEX IF NOT EXISTS solutions_parent_idx ON solutions (parent_id);
CREATE INDEX IF NOT EXISTS solutions_run_idx ON solutions (run_id);

CREATE TABLE IF NOT EXISTS profiles (
    id                     TEXT PRIMARY KEY,
    workload_uuid          TEXT NOT NULL REFERENCES workloads (uuid) ON DELETE CASCADE,
    solution_id            TEXT NOT NULL REFERENCES solutions (id) ON DELETE CASCADE,
    evaluation             TEXT NOT NULL,
    benchmark_config       TEXT NOT NULL DEFAULT '{}',
    benchmark_config_hash  TEXT NOT NULL,
    eval_status            TEXT GENERATED ALWAYS AS (json_extract(evaluation, '$.status')) STORED,
    eval_hardware          TEXT GENERATED ALWAYS AS
                           (json_extract(evaluation, '$.environment.hardware')) STORED,
    latency_ms             REAL GENERATED ALWAYS AS
                           (CAST(json_extract(evaluation, '$.performance.latency_ms') AS REAL))
                           STORED,
    reference_latency_ms   REAL GENERATED ALWAYS AS
                           (CAST(json_extract(evaluation, '$.performance.reference_latency_ms')
                                 AS REAL)) STORED,
    -- flashinfer-bench names it speedup_factor; older AccelOpt rows say speedup.
    speedup                REAL GENERATED ALWAYS AS (CAST(COALESCE(
                               json_extract(evaluation, '$.performance.speedup_factor'),
                               json_extract(evaluation, '$.performance.speedup')) AS REAL)) STORED,
    created_at             TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    -- 1 unless a flag says the numbers cannot be believed: the flags (minified JSON) with the
    -- informational ones (INFORMATIONAL_FLAGS of accelopt_mcp/models/evaluation.py) taken out
    -- hold nothing but brackets and commas. VIRTUAL, since the store adds this very definition
    -- (from "trusted" to "VIRTUAL") to an older file with ALTER TABLE (sqlite.py).
    trusted                INTEGER GENERATED ALWAYS AS (trim(
                               replace(replace(replace(replace(
                                   COALESCE(json_extract(evaluation, '$.flags'), '[]'),
                                   '"no_reference_latency"', ''), '"noisy_timing"', ''),
                                   '"not_isolated"', ''), '"unstable_latency"', ''),
                               '[],') = '') VIRTUAL,
    UNIQUE (workload_uuid, solution_id, benchmark_config_hash, eval_hardware)
);
CREATE INDEX IF NOT EXISTS profiles_solution_idx ON profiles (solution_id);
CREATE INDEX IF NOT EXISTS profiles_workload_idx ON profiles (workload_uuid);
-- The engine's per-attempt lookup (a solution's profiles on the task's workload): without
-- statistics SQLite took profiles_workload_idx, i.e. every profile of the workload (34 ms at
-- 100k); two equality columns win even then.
CREATE INDEX IF NOT EXISTS profiles_solution_workload_idx ON profiles (solution_id, workload_uuid);
CREATE INDEX IF NOT EXISTS profiles_passed_latency_idx
    ON profiles (eval_hardware, latency_ms) WHERE eval_status = 'PASSED';
CREATE INDEX IF NOT EXISTS profiles_passed_any_hw_idx
    ON profiles (latency_ms) WHERE eval_status = 'PASSED';

-- Every evaluation of a profile as it was taken, in rowid order; the profile's evaluation is
-- their pooled figure (accelopt_mcp/models/pooling.py), rewritten by the store on each new one.
CREATE TABLE IF NOT EXISTS measurements (
    id          TEXT PRIMARY KEY,
    profile_id  TEXT NOT NULL REFERENCES profiles (id) ON DELETE CASCADE,
    evaluation  TEXT NOT NULL,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX IF NOT EXISTS measurements_profile_idx ON measurements (profile_id);

CREATE TABLE IF NOT EXISTS runs (
    id                   TEXT PRIMARY KEY,
    definition_name      TEXT NOT NULL REFERENCES definitions (name) ON DELETE CASCADE,
    status               TEXT NOT NULL DEFAULT 'pending',
    config               TEXT NOT NULL DEFAULT '{}',
    current_iteration    INTEGER NOT NULL DEFAULT 0,
    initial_solution_id  TEXT REFERENCES solutions (id) ON DELETE SET NULL,
    best_solution_id     TEXT REFERENCES solutions (id) ON DELETE SET NULL,
    best_latency_ms      REAL,
    tokens_in            INTEGER NOT NULL DEFAULT 0,
    tokens_out           INTEGER NOT NULL DEFAULT 0,
    cost_usd             REAL NOT NULL DEFAULT 0,
    error                TEXT,
    created_at           TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at           TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    -- The worker holding the run and until when (claim_run; same timestamp format as above,
    -- so text comparison orders them).
    worker_id            TEXT,
    lease_expires_at     TEXT
);
CREATE INDEX IF NOT EXISTS runs_definition_idx ON runs (definition_name, created_at);
CREATE INDEX IF NOT EXISTS runs_status_idx ON runs (status, created_at);

-- The optimization memory: a queue; rows are flagged removed, never deleted.
CREATE TABLE IF NOT EXISTS experiences (
    id                TEXT PRIMARY KEY,
    run_id            TEXT REFERENCES runs (id) ON DELETE SET NULL,
    namespace         TEXT NOT NULL DEFAULT 'default',
    definition_name   TEXT NOT NULL,
    slow_solution_id  TEXT REFERENCES solutions (id) ON DELETE SET NULL,
    fast_solution_id  TEXT REFERENCES solutions (id) ON DELETE SET NULL,
    speedup           REAL,
    title             TEXT NOT NULL,
    strategy          TEXT NOT NULL,
    pseudocode        TEXT NOT NULL DEFAULT '',
    iteration         INTEGER,
    removed           INTEGER NOT NULL DEFAULT 0,
    created_at        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    -- JSON (MeasuringConditions): what the measurement behind `speedup` was taken under;
    -- NULL for items added by hand. Added to older files by the store (ALTER TABLE).
    conditions        TEXT
);
CREATE INDEX IF NOT EXISTS experiences_run_idx ON experiences (run_id);
CREATE INDEX IF NOT EXISTS experiences_namespace_idx ON experiences (namespace);

-- Word search over the memory (store/_search.py): an FTS5 index of each item's title, strategy
-- and pseudocode, keyed by the item's id, kept in step by the triggers below. It holds its
-- own copy of the text (not an external-content table on experiences' rowid, which VACUUM may
-- renumber). Porter stemming over unicode61 words, diacritics kept, as PostgreSQL's english
-- configuration sees them. Came with schema version 5; the store fills it for an older file.
CREATE VIRTUAL TABLE IF NOT EXISTS experiences_fts USING fts5 (
    id UNINDEXED, title, strategy, pseudocode,
    tokenize = 'porter unicode61 remove_diacritics 0'
);
CREATE TRIGGER IF NOT EXISTS experiences_fts_insert AFTER INSERT ON experiences BEGIN
    INSERT INTO experiences_fts (id, title, strategy, pseudocode)
    VALUES (new.id, new.title, new.strategy, new.pseudocode);
END;
CREATE TRIGGER IF NOT EXISTS experiences_fts_delete AFTER DELETE ON experiences BEGIN
    DELETE FROM experiences_fts WHERE id = old.id;
END;
CREATE TRIGGER IF NOT EXISTS experiences_fts_update
AFTER UPDATE OF id, title, strategy, pseudocode ON experiences BEGIN
    UPDATE experiences_fts
    SET id = new.id, title = new.title, strategy = new.strategy, pseudocode = new.pseudocode
    WHERE id = old.id;
END;

-- The LLM ledger and audit trail: one row per attempt, written before the request is sent
-- (status in_flight, the prompt, tokens_in and cost_usd estimated from the prompt) and updated
-- when it ends (ok or failed, the real figures, the reply). `messages` (the prompt as a JSON
-- list of {role, content}) and `reply` are redacted UTF-8, zlib-compressed. The columns from
-- `status` on came with schema version 4; the store adds them to an older file with ALTER
-- TABLE, taking each one's definition from here (one column a line, no comment on it).
CREATE TABLE IF NOT EXISTS llm_calls (
    id          TEXT PRIMARY KEY,
    run_id      TEXT REFERENCES runs (id) ON DELETE CASCADE,
    role        TEXT NOT NULL,
    model       TEXT NOT NULL,
    tokens_in   INTEGER NOT NULL DEFAULT 0,
    tokens_out  INTEGER NOT NULL DEFAULT 0,
    latency_s   REAL NOT NULL DEFAULT 0,
    cost_usd    REAL NOT NULL DEFAULT 0,
    ok          INTEGER NOT NULL DEFAULT 1,
    error       TEXT,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    status      TEXT NOT NULL DEFAULT 'ok',
    purpose     TEXT,
    started_at  TEXT,
    finished_at TEXT,
    messages    BLOB,
    reply       BLOB
);
CREATE INDEX IF NOT EXISTS llm_calls_run_idx ON llm_calls (run_id, role);

-- A run's state in small rows (an attempt, a plan, ...), upserted one at a time instead of
-- rewriting the run's whole config. Sorted by kind and key when read.
CREATE TABLE IF NOT EXISTS run_entries (
    run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    kind        TEXT NOT NULL,
    key         TEXT NOT NULL,
    data        TEXT NOT NULL DEFAULT '{}',
    updated_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (run_id, kind, key)
);

-- Peak rates measured on a host (FLOP/s, bandwidth, ...), one row per hardware id, so they
-- are measured once: a cache, not a record (stats() does not count it). Version 5.
CREATE TABLE IF NOT EXISTS hardware_peaks (
    hardware     TEXT PRIMARY KEY,
    peaks        TEXT NOT NULL DEFAULT '{}',
    measured_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- Benchmark campaigns: one optimization run per task case of a benchmark directory under one
-- settings preset. The runner rewrites the whole row as runs start and finish; `spec` (JSON)
-- holds the settings, hardware, peaks, models, code version and the cases with their run ids
-- and results, so the runs are named there, not by a foreign key. Version 7.
CREATE TABLE IF NOT EXISTS suites (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    source      TEXT NOT NULL,
    backend     TEXT NOT NULL,
    status      TEXT NOT NULL,
    spec        TEXT NOT NULL DEFAULT '{}',
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX IF NOT EXISTS suites_created_idx ON suites (created_at);
