-- tabcontam cache, schema version 3: repeated sampling (SPEC §5).
--
-- Append-only: once released, this file is never edited (its checksum is pinned).
--
-- * `trials` gains `sample` in its primary key. Schema 1 folded the sample into the trial
--   index (trial × samples + sample); now trial t of sample s is (…, s, t) and t is the
--   prompt's own trial index. Rows written by schema 1 become sample 0 with their index
--   unchanged: exact for every single-sample run, and a cell decided again replaces all of
--   its rows (see src/store/results.rs), so older sampled rows disappear on the next run.
-- * `cell_samples`: each sample's own cell result, the test's rule (any of n trials, at
--   least 3 of 5, accuracy over the trials) applied to that sample's trials alone. The
--   cell of `cells` passes when any of its samples passes; for tests 10–12 its score is
--   the mean accuracy over samples. Only cells decided here have samples (no `source`).

CREATE TABLE trials_v2 (
    model         TEXT NOT NULL,
    dataset       TEXT NOT NULL,
    test          TEXT NOT NULL,
    serialization TEXT NOT NULL,
    seed          INTEGER NOT NULL,
    sample        INTEGER NOT NULL CHECK (sample >= 0),
    trial         INTEGER NOT NULL CHECK (trial >= 0),
    run_id        INTEGER NOT NULL REFERENCES runs (id),
    request_key   BLOB NOT NULL CHECK (length(request_key) = 32),  -- the response judged
    note          TEXT,           -- what the trial probes, e.g. the feature of tests 5-6
    expected      TEXT NOT NULL,  -- probe::Expected as JSON
    passed        INTEGER NOT NULL CHECK (passed IN (0, 1)),
    invalid       INTEGER NOT NULL CHECK (invalid IN (0, 1)),
    PRIMARY KEY (model, dataset, test, serialization, seed, sample, trial)
) STRICT, WITHOUT ROWID;

INSERT INTO trials_v2 (model, dataset, test, serialization, seed, sample, trial, run_id,
                       request_key, note, expected, passed, invalid)
SELECT model, dataset, test, serialization, seed, 0, trial, run_id,
       request_key, note, expected, passed, invalid
FROM trials;

DROP TABLE trials;
ALTER TABLE trials_v2 RENAME TO trials;

CREATE TABLE cell_samples (
    model          TEXT NOT NULL,
    dataset        TEXT NOT NULL,
    test           TEXT NOT NULL,
    serialization  TEXT NOT NULL,
    seed           INTEGER NOT NULL,
    sample         INTEGER NOT NULL CHECK (sample >= 0),
    run_id         INTEGER NOT NULL REFERENCES runs (id),
    passed         INTEGER NOT NULL CHECK (passed IN (0, 1)),
    score          REAL NOT NULL,
    trials         INTEGER NOT NULL CHECK (trials >= 0),
    passed_trials  INTEGER NOT NULL CHECK (passed_trials >= 0),
    invalid_trials INTEGER NOT NULL CHECK (invalid_trials >= 0),
    PRIMARY KEY (model, dataset, test, serialization, seed, sample)
) STRICT, WITHOUT ROWID;
