-- Negative controls: scored cells of tests 1–9 on datasets released after the model's
-- training cut-off (see earliest_date/latest_date in tables.sql). A passed one is a
-- suspected false positive. Every eligible cell is returned with its verdict.
SELECT c.source, c.model, s.training_cutoff, c.dataset, d.released, c.test, c.passed
FROM scored_cells c
JOIN series s ON s.source = c.source AND s.model = c.model
JOIN datasets d ON d.id = c.dataset
WHERE c.number <= 9
  AND earliest_date(d.released) > latest_date(s.training_cutoff)
ORDER BY c.source, c.model, d.position, c.dataset, c.number;
