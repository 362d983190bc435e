-- Evolution within a model family (paper §5.3): series with a family and a release date,
-- ordered by release date; each version against the one released before it. One row per
-- consecutive pair and (dataset, test) cell of tests 1–9 whose verdict differs (gained or
-- lost); pairs without any difference appear once with NULL cell columns.
WITH versions AS (
    SELECT source, model, label, family, release_date,
           lag(source) OVER w AS prev_source,
           lag(model)  OVER w AS prev_model
    FROM series
    WHERE family IS NOT NULL AND release_date IS NOT NULL
    WINDOW w AS (PARTITION BY family ORDER BY release_date, model, source)
),
pairs AS (
    SELECT * FROM versions WHERE prev_model IS NOT NULL
),
before AS (
    SELECT p.family, p.prev_source, p.prev_model, p.source, p.model, c.dataset, c.test, c.number, c.passed
    FROM pairs p
    JOIN scored_cells c ON c.source = p.prev_source AND c.model = p.prev_model AND c.number <= 9
),
after AS (
    SELECT p.family, p.prev_source, p.prev_model, p.source, p.model, c.dataset, c.test, c.number, c.passed
    FROM pairs p
    JOIN scored_cells c ON c.source = p.source AND c.model = p.model AND c.number <= 9
),
changes AS (
    SELECT coalesce(b.family, a.family) AS family,
           coalesce(b.prev_source, a.prev_source) AS prev_source,
           coalesce(b.prev_model, a.prev_model) AS prev_model,
           coalesce(b.source, a.source) AS source,
           coalesce(b.model, a.model) AS model,
           coalesce(b.dataset, a.dataset) AS dataset,
           coalesce(b.test, a.test) AS test,
           coalesce(b.number, a.number) AS number,
           coalesce(a.passed, false) AS gained
    FROM before b
    FULL JOIN after a
           ON a.family = b.family AND a.prev_source = b.prev_source AND a.prev_model = b.prev_model
          AND a.source = b.source AND a.model = b.model AND a.dataset = b.dataset AND a.test = b.test
    WHERE coalesce(b.passed, false) <> coalesce(a.passed, false)
)
SELECT p.family, p.prev_source, p.prev_model, p.source, p.model, p.release_date,
       ch.dataset, ch.test, ch.gained
FROM pairs p
LEFT JOIN changes ch
       ON ch.family = p.family AND ch.prev_source = p.prev_source AND ch.prev_model = p.prev_model
      AND ch.source = p.source AND ch.model = p.model
LEFT JOIN datasets d ON d.id = ch.dataset
ORDER BY p.family, p.release_date, p.model, p.source, ch.gained DESC NULLS LAST, d.position, ch.dataset, ch.number;
