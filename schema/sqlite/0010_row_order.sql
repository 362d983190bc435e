-- tabcontam cache, schema version 10: the cells of test 17, `row-order` (Oren et al.,
-- ICLR 2024): the file's own row order against seeded permutations of the same rows.
--
-- Append-only: once released, this file is never edited (its checksum is pinned).
--
-- One cell per (model, dataset, seed); the scored texts themselves sit in `logprobs`
-- (one score key per shard order). Its own table: the result is an exact permutation
-- p-value over shards, not an AUROC nor a count of passed trials.

CREATE TABLE row_order_cells (
    model         TEXT NOT NULL,
    dataset       TEXT NOT NULL,
    seed          INTEGER NOT NULL,
    run_id        INTEGER NOT NULL REFERENCES runs (id),
    method        TEXT NOT NULL,   -- how the log-probabilities were obtained
    blocked_by    TEXT NOT NULL,   -- JSON array: columns whose runs bound the permutations
    shards        INTEGER NOT NULL,
    permutations  INTEGER NOT NULL, -- per shard
    ranks         TEXT,            -- JSON array, per shard: permutations scored below the file order
    rank_sum      INTEGER,
    p_value       REAL,            -- NULL when skipped
    mean_gap_nats REAL,            -- mean log p(file order) − mean log p(permutations)
    skipped       TEXT,            -- why there is no p-value (order not exchangeable, no log-probabilities, …)
    PRIMARY KEY (model, dataset, seed)
) STRICT, WITHOUT ROWID;
