-- Materialized once after loading; every report query reads these tables.

-- Trial counts of the cells decided here, recounted from the trial verdicts (the answer
-- tests' accuracy, invalid answers). The one pass over all trials.
CREATE OR REPLACE TABLE trial_counts AS
WITH counts AS (
    SELECT cell_id,
           count(*)::BIGINT                        AS n,
           count(*) FILTER (WHERE passed)::BIGINT  AS k,
           count(*) FILTER (WHERE invalid)::BIGINT AS invalid
    FROM trials
    GROUP BY cell_id
)
SELECT c.model, c.dataset, c.test, c.serialization, c.seed, n.n, n.k, n.invalid
FROM counts n
JOIN trial_cells c ON c.cell_id = n.cell_id;

-- Every cell with its test's number and kind and its trial counts (recounted where the
-- trials are here; imported cells keep the counts they came with).
CREATE OR REPLACE TABLE cell_facts AS
SELECT c.source, c.model, c.dataset, c.test, t.number, t.kind, c.serialization, c.seed,
       c.passed, c.skipped, c.samples, c.samples_passed,
       coalesce(tc.n, c.trials)               AS n,
       coalesce(tc.k, c.passed_trials)        AS k,
       coalesce(tc.invalid, c.invalid_trials) AS invalid
FROM cells c
JOIN tests t ON t.id = c.test
-- Equalities only (a constant in the join condition makes DuckDB fall back to a nested
-- loop join: seconds instead of milliseconds).
LEFT JOIN (SELECT 'tabcontam' AS source, * FROM trial_counts) tc
       ON tc.source = c.source AND tc.model = c.model AND tc.dataset = c.dataset
      AND tc.test = c.test AND tc.serialization = c.serialization AND tc.seed = c.seed;

-- The template each series is scored with: the primary one when the series has cells under
-- it, else (no cell under the primary template) the first of its templates by id. A series
-- is never scored with a mix: its scores use the cells of this one template plus the cells
-- of the tests without rows (serialization '-', shared by every template). Series with
-- only such cells have no template (NULL).
CREATE OR REPLACE TABLE series_templates AS
SELECT source, model,
       CASE WHEN bool_or(serialization = (SELECT primary_serialization FROM settings))
            THEN (SELECT primary_serialization FROM settings)
            ELSE min(serialization) END AS serialization
FROM cell_facts
WHERE serialization <> '-'
GROUP BY source, model;

-- The cell each score uses per (source, model, dataset, test): the series' template (or no
-- template, for tests without rows), then the lowest seed. Other templates and seeds feed
-- the serialization study only.
CREATE OR REPLACE TABLE scored_cells AS
SELECT c.*
FROM cell_facts c
LEFT JOIN series_templates st ON st.source = c.source AND st.model = c.model
WHERE c.serialization = '-' OR c.serialization = st.serialization
QUALIFY row_number() OVER (
    PARTITION BY c.source, c.model, c.dataset, c.test
    ORDER BY c.seed) = 1;

-- A series is one model's results from one source (ours, or e.g. the paper's).
CREATE OR REPLACE TABLE series AS
SELECT s.source, s.model, coalesce(m.label, s.model) AS label, m.family,
       m.release_date, m.training_cutoff, st.serialization
FROM (SELECT DISTINCT source, model FROM cells) s
LEFT JOIN models m ON m.id = s.model
LEFT JOIN series_templates st ON st.source = s.source AND st.model = s.model;
