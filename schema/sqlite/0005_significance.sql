-- tabcontam cache, schema version 5: significance (SPEC §8).
--
-- Append-only: once released, this file is never edited (its checksum is pinned).
--
-- * `trial_chance`: the probability that one trial of the cell passes by chance, decided with
--   the cell: 0.5 for membership, the majority-class rate of the cell's rows for
--   classification, the most-common-first-token share for the first-token test, the
--   shuffled-row rate for the verbatim count tests (each output judged against the other
--   trials' expectations). NULL where no chance level is defined (tests 1-9, imported
--   cells). Not the cell's chance level of 0004 (the probability that the whole cell
--   passes by chance under its rule). The report's exact binomial p-values are computed from it.

ALTER TABLE cells ADD COLUMN trial_chance REAL CHECK (trial_chance IS NULL OR (trial_chance >= 0 AND trial_chance <= 1));
ALTER TABLE cell_samples ADD COLUMN trial_chance REAL CHECK (trial_chance IS NULL OR (trial_chance >= 0 AND trial_chance <= 1));
