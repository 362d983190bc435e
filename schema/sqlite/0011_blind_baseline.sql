-- tabcontam cache, schema version 11: the blind baseline (issue 26 item 2; Das, Zhang &
-- Tramèr 2024): how well a classifier that never looks at a model tells apart the two
-- groups of texts a likelihood or membership cell compares (likelihood::blind).
--
-- Append-only: once released, this file is never edited (its checksum is pinned).
--
-- Its own table, not columns of the cells: the baseline depends on the texts, not on the
-- model, so one row serves every model's cells of a (dataset, template, seed, group pair).
-- `group_pair` is `original-vs-perturbed` (the membership test's rows and their perturbed
-- copies: test 10 and the likelihood detectors) or `trained-vs-held-out:<model id>` (a
-- checkpoint's rows trained on against its held-out rows: the ground-truth cells; each
-- checkpoint declares its own rows). Caches of schema 10 have no row: their cells show no
-- baseline until a run computes it.

CREATE TABLE blind_baselines (
    dataset       TEXT NOT NULL,
    serialization TEXT NOT NULL,
    seed          INTEGER NOT NULL,
    group_pair    TEXT NOT NULL,
    run_id        INTEGER NOT NULL REFERENCES runs (id),
    positives     INTEGER NOT NULL,
    negatives     INTEGER NOT NULL,
    auroc         REAL NOT NULL CHECK (auroc BETWEEN 0 AND 1),
    auroc_low     REAL NOT NULL CHECK (auroc_low BETWEEN 0 AND 1),
    auroc_high    REAL NOT NULL CHECK (auroc_high BETWEEN 0 AND 1),
    PRIMARY KEY (dataset, serialization, seed, group_pair)
) STRICT, WITHOUT ROWID;
