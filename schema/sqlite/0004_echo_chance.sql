-- tabcontam cache, schema version 4: echo guard, chance level and declared exposure (SPEC §8).
--
-- Append-only: once released, this file is never edited (its checksum is pinned).
--
-- * `trials.echo`: the trial passed, and every piece of evidence that made it pass was
--   already printed in its own prompt (probe::echo::is_echo). Rows decided before this
--   schema read 0 until their cell is decided again (every run re-decides its cells).
-- * `cells.echo_trials`: how many of the cell's passing trials are echoes (NULL for imported
--   cells and cells decided before this schema).
-- * `cells.chance` / `cells.chance_basis`: the probability of passing without knowledge of
--   the data (probe::chance), NULL with the reason in `chance_basis` when it cannot be
--   computed.
-- * `models.exposure`: what a checkpoint was trained on (JSON: trained_on, dose, base, rows),
--   from the spec or the model folder's tabcontam-manifest.json; NULL when not declared.

ALTER TABLE trials ADD COLUMN echo INTEGER NOT NULL DEFAULT 0 CHECK (echo IN (0, 1));
ALTER TABLE cells ADD COLUMN echo_trials INTEGER CHECK (echo_trials >= 0);
ALTER TABLE cells ADD COLUMN chance REAL CHECK (chance BETWEEN 0 AND 1);
ALTER TABLE cells ADD COLUMN chance_basis TEXT;
ALTER TABLE models ADD COLUMN exposure TEXT;
