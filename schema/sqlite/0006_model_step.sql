-- tabcontam cache, schema version 6: checkpoints of one training run.
--
-- Append-only: once released, this file is never edited (its checksum is pinned).
--
-- `step` is a model's training step (a spec's `step = N`, or a checkpoint folder's
-- `tabcontam-manifest.json`): the report's timeline orders a family by it when every
-- member has one, else by release date. NULL for models that are not checkpoints.
ALTER TABLE models ADD COLUMN step INTEGER CHECK (step >= 0);
