-- Contamination counts per series (SPEC §4): passed cells of tests 1–9 over the datasets
-- the series evaluated. The score (passed / (9 × datasets)) is divided in Rust from these
-- integers, so it is exact and identical on every run. Skipped cells count as not passed.
-- `serialization`: the template the series is scored with (see series_templates).
SELECT s.source, s.model, s.label, s.family, s.release_date, s.training_cutoff,
       s.serialization,
       count(DISTINCT c.dataset)::BIGINT                                        AS datasets,
       count(c.test) FILTER (WHERE c.passed)::BIGINT                            AS passed,
       count(c.test) FILTER (WHERE c.passed AND c.kind = 'knowledge')::BIGINT    AS knowledge_passed,
       count(c.test) FILTER (WHERE c.passed AND c.kind = 'memorization')::BIGINT AS memorization_passed,
       count(c.test) FILTER (WHERE c.skipped IS NOT NULL)::BIGINT               AS skipped
FROM series s
LEFT JOIN scored_cells c
       ON c.source = s.source AND c.model = s.model AND c.number <= 9
GROUP BY s.source, s.model, s.label, s.family, s.release_date, s.training_cutoff,
         s.serialization
ORDER BY s.source, s.model;
