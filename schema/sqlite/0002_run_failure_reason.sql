-- tabcontam cache, schema version 2: why a run failed.
--
-- Append-only: once released, this file is never edited (a unit test pins its checksum).
--
-- `reason` is one line saying why a run ended `failed` (a local model that would not load,
-- a request that failed after retries, an error writing the cache); NULL for runs that did
-- not fail and for runs recorded before this column existed. Like `failures.message`, it
-- comes from code that never puts secrets in error messages.
ALTER TABLE runs ADD COLUMN reason TEXT;
