-- Pass rates of tests 1–9 per test and per dataset, over every series. The denominator of
-- a test is the (series, dataset) pairs evaluated (a missing cell counts as not passed,
-- as in the contamination score); a dataset's is 9 per series that evaluated it.
WITH evaluated AS (
    SELECT DISTINCT source, model, dataset FROM scored_cells WHERE number <= 9
),
by_test AS (
    SELECT 'test' AS scope, t.id AS key, t.number AS position,
           count(c.test) FILTER (WHERE c.passed)::BIGINT AS passed,
           (SELECT count(*) FROM evaluated)::BIGINT      AS cells
    FROM tests t
    LEFT JOIN scored_cells c ON c.test = t.id
    WHERE t.number <= 9
    GROUP BY t.id, t.number
),
by_dataset AS (
    SELECT 'dataset' AS scope, e.dataset AS key, d.position,
           count(c.test) FILTER (WHERE c.passed)::BIGINT AS passed,
           (9 * count(DISTINCT (e.source, e.model)))::BIGINT AS cells
    FROM evaluated e
    JOIN datasets d ON d.id = e.dataset
    LEFT JOIN scored_cells c
           ON c.source = e.source AND c.model = e.model AND c.dataset = e.dataset AND c.number <= 9
    GROUP BY e.dataset, d.position
)
SELECT scope, key, passed, cells FROM by_test
UNION ALL
SELECT scope, key, passed, cells FROM by_dataset
ORDER BY scope DESC, key;
