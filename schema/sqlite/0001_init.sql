-- tabcontam cache, schema version 1.
--
-- Append-only: once released, this file is never edited (a unit test pins its checksum).
-- Change the schema by adding 0002_*.sql next to it.
--
-- Conventions:
--   * Every table is STRICT; small, key-addressed tables are WITHOUT ROWID.
--   * Request keys and prompt hashes are 32-byte blake3 digests stored as BLOBs.
--   * Timestamps are UTC ISO-8601 text with milliseconds (`2026-11-22T12:00:00.000Z`).
--   * Booleans are INTEGER 0/1.
--   * Seeds are u64 stored bit-for-bit in a signed INTEGER (seeds above 2^63 read back
--     negative in plain SQL; the Rust side casts them back).
--   * `serialization` is the template id, or '-' for tests whose prompts contain no
--     serialized rows (never NULL: NULL is not allowed in a WITHOUT ROWID primary key, and
--     NULLs would never conflict, so `INSERT OR REPLACE` would pile up duplicates).
--   * No table has a column for API keys, headers or endpoints: secrets cannot be cached.

-- Marks the file as a tabcontam cache ('tbct'), so another program's database is refused.
PRAGMA application_id = 1952605044;

-- What identifies a model's answers: a changed revision never reuses answers.
CREATE TABLE identities (
    id       INTEGER PRIMARY KEY,
    backend  TEXT NOT NULL,
    model    TEXT NOT NULL,
    revision TEXT NOT NULL,
    UNIQUE (backend, model, revision)
) STRICT;

-- Prompt texts, stored once: every model of an experiment is asked the same prompts.
CREATE TABLE prompts (
    id   INTEGER PRIMARY KEY,
    hash BLOB NOT NULL UNIQUE CHECK (length(hash) = 32),
    text TEXT NOT NULL
) STRICT;

-- The canonical fields a request key is computed from. A request is stored with its
-- response, and also when it failed (so a failure can be inspected with its prompt).
CREATE TABLE requests (
    key         BLOB PRIMARY KEY CHECK (length(key) = 32),
    identity_id INTEGER NOT NULL REFERENCES identities (id),
    api         TEXT NOT NULL CHECK (api IN ('completions', 'chat')),
    prompt_id   INTEGER NOT NULL REFERENCES prompts (id),
    params      TEXT NOT NULL,  -- GenerationParams as JSON
    sample      INTEGER NOT NULL CHECK (sample >= 0)
) STRICT, WITHOUT ROWID;

-- Successful, complete responses: the cache proper. Immutable: the first response stored
-- for a key stays. A rowid table (texts run to kilobytes), with the key's unique index
-- doubling as a compact covering index for bulk key lookups. `identity_id` repeats the
-- request's (it never changes) so that per-model counts scan one small index instead of
-- joining every response to its request.
CREATE TABLE responses (
    id                INTEGER PRIMARY KEY,
    key               BLOB NOT NULL UNIQUE REFERENCES requests (key),
    identity_id       INTEGER NOT NULL REFERENCES identities (id),
    text              TEXT NOT NULL,
    finish_reason     TEXT,
    prompt_tokens     INTEGER CHECK (prompt_tokens >= 0),
    completion_tokens INTEGER CHECK (completion_tokens >= 0),
    latency_ms        INTEGER NOT NULL CHECK (latency_ms >= 0),
    created_at        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;
CREATE INDEX responses_by_identity ON responses (identity_id, prompt_tokens, completion_tokens);

-- Models of experiment specs, by the spec's model id.
CREATE TABLE models (
    id              TEXT PRIMARY KEY,
    label           TEXT NOT NULL,
    family          TEXT,
    backend         TEXT NOT NULL,
    model           TEXT NOT NULL,
    revision        TEXT NOT NULL,
    release_date    TEXT,  -- ISO date, as precise as known
    training_cutoff TEXT,  -- ISO date, as precise as known
    updated_at      TEXT NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TABLE datasets (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,  -- the name used in prompts
    variant    TEXT,           -- e.g. which derivative file of the dataset
    checksum   TEXT NOT NULL,
    updated_at TEXT NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TABLE runs (
    id          INTEGER PRIMARY KEY,
    spec_name   TEXT NOT NULL,
    spec_toml   TEXT NOT NULL,
    version     TEXT NOT NULL,  -- tabcontam version that ran it
    started_at  TEXT NOT NULL,
    finished_at TEXT,
    status      TEXT NOT NULL CHECK (status IN ('running', 'finished', 'interrupted', 'failed')),
    counts      TEXT NOT NULL DEFAULT '{}'  -- RunCounts as JSON
) STRICT;

-- Requests that did not produce a cacheable response. They are retried by the next run.
-- `message` comes from the llm module, which never puts secrets in error messages.
CREATE TABLE failures (
    id          INTEGER PRIMARY KEY,
    run_id      INTEGER NOT NULL REFERENCES runs (id),
    request_key BLOB NOT NULL REFERENCES requests (key),
    model       TEXT NOT NULL,  -- spec model id
    kind        TEXT NOT NULL,
    message     TEXT NOT NULL,
    attempts    INTEGER NOT NULL CHECK (attempts >= 0),
    at          TEXT NOT NULL
) STRICT;
CREATE INDEX failures_by_run ON failures (run_id);

-- The current verdict of every trial; a later run replaces it.
CREATE TABLE trials (
    model         TEXT NOT NULL,
    dataset       TEXT NOT NULL,
    test          TEXT NOT NULL,
    serialization TEXT NOT NULL,
    seed          INTEGER NOT NULL,
    trial         INTEGER NOT NULL CHECK (trial >= 0),
    run_id        INTEGER NOT NULL REFERENCES runs (id),
    request_key   BLOB NOT NULL CHECK (length(request_key) = 32),  -- the response judged
    note          TEXT,           -- what the trial probes, e.g. the feature of tests 5-6
    expected      TEXT NOT NULL,  -- probe::Expected as JSON
    passed        INTEGER NOT NULL CHECK (passed IN (0, 1)),
    invalid       INTEGER NOT NULL CHECK (invalid IN (0, 1)),
    PRIMARY KEY (model, dataset, test, serialization, seed, trial)
) STRICT, WITHOUT ROWID;

-- Cell results (model x dataset x test x serialization). `source` is 'tabcontam' for cells
-- decided here; imported published results name their source (e.g. 'paper') and have no
-- run, so both can sit side by side and be compared.
CREATE TABLE cells (
    source         TEXT NOT NULL,
    model          TEXT NOT NULL,
    dataset        TEXT NOT NULL,
    test           TEXT NOT NULL,
    serialization  TEXT NOT NULL,
    seed           INTEGER NOT NULL,
    run_id         INTEGER REFERENCES runs (id),
    passed         INTEGER NOT NULL CHECK (passed IN (0, 1)),
    score          REAL NOT NULL,
    trials         INTEGER NOT NULL CHECK (trials >= 0),
    passed_trials  INTEGER NOT NULL CHECK (passed_trials >= 0),
    invalid_trials INTEGER NOT NULL CHECK (invalid_trials >= 0),
    skipped        TEXT,  -- why the cell has no trials (e.g. wine has no categorical feature)
    PRIMARY KEY (source, model, dataset, test, serialization, seed)
) STRICT, WITHOUT ROWID;
