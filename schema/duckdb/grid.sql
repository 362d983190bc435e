-- The per-cell grid of tests 1–9 (the paper's Fig. 1/2): one row per scored cell, with
-- how many of its samples passed on their own.
SELECT c.source, c.model, c.dataset, c.test, c.number, c.kind, c.serialization, c.seed,
       c.passed, c.skipped, c.samples, c.samples_passed
FROM scored_cells c
JOIN datasets d ON d.id = c.dataset
WHERE c.number <= 9
ORDER BY c.source, c.model, d.position, c.dataset, c.number;
