-- The per-cell grid of tests 1–9 (the paper's Fig. 1/2): one row per scored cell.
SELECT c.source, c.model, c.dataset, c.test, c.number, c.kind, c.serialization, c.seed,
       c.passed, c.skipped
FROM scored_cells c
JOIN datasets d ON d.id = c.dataset
WHERE c.number <= 9
ORDER BY c.source, c.model, d.position, c.dataset, c.number;
