-- tabcontam cache, schema version 4: significance (SPEC §8).
--
-- Append-only: once released, this file is never edited (its checksum is pinned).
--
-- * `chance`: the probability that one trial of the cell passes by chance, decided with
--   the cell: 0.5 for membership, the majority-class rate of the cell's rows for
--   classification, the most-common-first-token share for the first-token test, the
--   shuffled-row rate for the verbatim count tests (each output judged against the other
--   trials' expectations). NULL where no chance level is defined (tests 1-9, imported
--   cells). The report's exact binomial p-values are computed from it.

ALTER TABLE cells ADD COLUMN chance REAL CHECK (chance IS NULL OR (chance >= 0 AND chance <= 1));
ALTER TABLE cell_samples ADD COLUMN chance REAL CHECK (chance IS NULL OR (chance >= 0 AND chance <= 1));
