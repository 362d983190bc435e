-- The cells of the serialization study whose verdict differs between templates, with the
-- verdict under each template.
WITH changed AS (
    SELECT source, model, seed, dataset, test
    FROM cell_facts
    WHERE number <= 9 AND serialization <> '-'
    GROUP BY source, model, seed, dataset, test
    HAVING count(DISTINCT serialization) >= 2 AND bool_or(passed) AND NOT bool_and(passed)
)
SELECT c.source, c.model, c.seed, c.dataset, c.test, c.serialization, c.passed
FROM cell_facts c
JOIN changed USING (source, model, seed, dataset, test)
JOIN datasets d ON d.id = c.dataset
WHERE c.serialization <> '-'
ORDER BY c.source, c.model, c.seed, d.position, c.dataset, c.number, c.serialization;
