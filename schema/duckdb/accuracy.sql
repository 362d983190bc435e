-- Membership (test 10) and 0/1-shot classification (11, 12) per series and dataset:
-- trials (of every sample), correct answers and invalid answers, and the samples per
-- prompt. Rates, Wilson intervals and p-values are computed in Rust from these integers.
SELECT c.source, c.model, c.dataset, c.test, c.n, c.k, c.invalid, c.samples
FROM scored_cells c
JOIN datasets d ON d.id = c.dataset
WHERE c.number BETWEEN 10 AND 12 AND c.n > 0
ORDER BY c.source, c.model, c.number, d.position, c.dataset;
