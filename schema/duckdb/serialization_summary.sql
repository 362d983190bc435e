-- The serialization study (paper §5.5): per series and seed, how many (dataset, test)
-- cells of tests 1–9 were decided under two or more templates, and how many of those
-- changed verdict between templates. Tests without rows in the prompt are not compared.
WITH compared AS (
    SELECT source, model, seed, dataset, test,
           count(DISTINCT serialization) AS templates,
           bool_or(passed) AND NOT bool_and(passed) AS changed
    FROM cell_facts
    WHERE number <= 9 AND serialization <> '-'
    GROUP BY source, model, seed, dataset, test
    HAVING count(DISTINCT serialization) >= 2
)
SELECT c.source, c.model, c.seed,
       max(c.templates)::BIGINT                      AS templates,
       count(*)::BIGINT                              AS compared,
       count(*) FILTER (WHERE c.changed)::BIGINT     AS changed
FROM compared c
GROUP BY c.source, c.model, c.seed
ORDER BY c.source, c.model, c.seed;
