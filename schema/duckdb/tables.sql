-- tabcontam analytics: the in-memory DuckDB tables that src/analyze loads from the cache.
--
-- Loaded with the Appender from the store's rows (the store is the only code touching
-- SQLite). No primary keys: an index would slow bulk loads of millions of trials down and
-- the store already guarantees uniqueness.
--   * `serialization` is the template id, or '-' for tests whose prompts have no rows.
--   * Trials carry no source: every trial was decided here (source 'tabcontam').

CREATE TABLE settings (
    primary_serialization VARCHAR NOT NULL  -- the template the scores use (default the-is)
);

CREATE TABLE tests (
    id     VARCHAR NOT NULL,
    number INTEGER NOT NULL,  -- the paper's numbering 1–12, then the verbatim tests 13–16
    kind   VARCHAR NOT NULL   -- knowledge, memorization, classification
);

CREATE TABLE models (
    id              VARCHAR NOT NULL,
    label           VARCHAR NOT NULL,
    family          VARCHAR,
    release_date    VARCHAR,  -- ISO date, as precise as known (2024, 2024-05, 2024-05-13)
    training_cutoff VARCHAR   -- same
);

CREATE TABLE datasets (
    id       VARCHAR NOT NULL,
    name     VARCHAR NOT NULL,
    released VARCHAR,          -- ISO date, as precise as known
    position INTEGER NOT NULL  -- display order: the paper's, then others by id
);

CREATE TABLE cells (
    source         VARCHAR NOT NULL,
    model          VARCHAR NOT NULL,
    dataset        VARCHAR NOT NULL,
    test           VARCHAR NOT NULL,
    serialization  VARCHAR NOT NULL,
    seed           UBIGINT NOT NULL,
    passed         BOOLEAN NOT NULL,
    trials         BIGINT NOT NULL,
    passed_trials  BIGINT NOT NULL,
    invalid_trials BIGINT NOT NULL,
    skipped        VARCHAR,
    -- Repeated sampling (SPEC §5): samples per prompt and how many of them passed the
    -- test's rule on their own (1 and passed for single-sample and imported cells).
    samples        BIGINT NOT NULL,
    samples_passed BIGINT NOT NULL
);

-- Trials are the one big table (millions of rows): while loading, each trial's cell key
-- (model, dataset, test, serialization, seed) is interned to a small integer, listed once
-- in `trial_cells`, so that the one pass over the trials groups a single integer.
CREATE TABLE trials (
    cell_id UINTEGER NOT NULL,  -- trial_cells.cell_id
    trial   UINTEGER NOT NULL,
    passed  BOOLEAN NOT NULL,
    invalid BOOLEAN NOT NULL
);

CREATE TABLE trial_cells (
    cell_id       UINTEGER NOT NULL,
    model         VARCHAR NOT NULL,
    dataset       VARCHAR NOT NULL,
    test          VARCHAR NOT NULL,
    serialization VARCHAR NOT NULL,
    seed          UBIGINT NOT NULL
);

-- Partial ISO dates as intervals: '2023' is 2023-01-01 … 2023-12-31. A dataset counts as
-- released after a model's cut-off only when its earliest possible date follows the
-- cut-off's latest possible date. Malformed dates read as NULL (never a control).
CREATE MACRO earliest_date(d) AS CASE
    WHEN length(d) = 4 THEN try_cast(d || '-01-01' AS DATE)
    WHEN length(d) = 7 THEN try_cast(d || '-01' AS DATE)
    ELSE try_cast(d AS DATE) END;
CREATE MACRO latest_date(d) AS CASE
    WHEN length(d) = 4 THEN try_cast(d || '-12-31' AS DATE)
    WHEN length(d) = 7 THEN last_day(try_cast(d || '-01' AS DATE))
    ELSE try_cast(d AS DATE) END;
