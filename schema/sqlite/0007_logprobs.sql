-- tabcontam cache, schema version 7: per-token log-probabilities of scored texts
-- (the likelihood detectors of SPEC §8).
--
-- Append-only: once released, this file is never edited (its checksum is pinned).
--
-- One row per score key (request::ScoreKey: blake3 under its own domain over backend,
-- model, revision and the exact text), so a text is scored once per model revision and
-- never shares a key with a generation request. Immutable like `responses`: the first
-- stored row stays. `logprobs` holds one value per token after the first; `mu`/`sigma`
-- (Min-K%++) only where the full next-token distribution was known (local models).

CREATE TABLE logprobs (
    key         BLOB PRIMARY KEY CHECK (length(key) = 32),
    identity_id INTEGER NOT NULL REFERENCES identities (id),
    text        TEXT NOT NULL,
    method      TEXT NOT NULL,  -- how they were obtained, e.g. `local`, `llama.cpp forced-token`
    tokens      TEXT NOT NULL,  -- JSON array of token ids
    logprobs    TEXT NOT NULL,  -- JSON array, one per token after the first
    mu          TEXT,           -- JSON array or NULL
    sigma       TEXT,           -- JSON array or NULL
    created_at  TEXT NOT NULL
) STRICT, WITHOUT ROWID;

-- The cells of the likelihood tests (`likelihood-perplexity`, `likelihood-zlib`,
-- `likelihood-min-k`, `likelihood-min-k-plus-plus`): one per (model, dataset, detector,
-- serialization, seed), score = AUROC of originals vs perturbed rows. Their own table:
-- a detector's result is an AUROC with intervals and a ROC curve, not trials passed.
CREATE TABLE likelihood_cells (
    model         TEXT NOT NULL,
    dataset       TEXT NOT NULL,
    test          TEXT NOT NULL,   -- likelihood::Detector::test_id
    serialization TEXT NOT NULL,
    seed          INTEGER NOT NULL,
    run_id        INTEGER NOT NULL REFERENCES runs (id),
    method        TEXT NOT NULL,   -- how the log-probabilities were obtained
    positives     INTEGER NOT NULL,
    negatives     INTEGER NOT NULL,
    auroc         REAL,            -- NULL when skipped
    auroc_low     REAL,
    auroc_high    REAL,
    tpr_at_5_fpr  REAL,
    tpr_low       REAL,
    tpr_high      REAL,
    p_value       REAL,
    roc           TEXT,            -- JSON [[fpr, tpr], …]
    skipped       TEXT,            -- why there is no AUROC (no log-probabilities, …)
    PRIMARY KEY (model, dataset, test, serialization, seed)
) STRICT, WITHOUT ROWID;
