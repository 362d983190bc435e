-- tabcontam cache, schema version 8: a local model is identified by its weights' digest
-- alone (identities.model = 'local-weights', revision = the digest).
--
-- Append-only: once released, this file is never edited (its checksum is pinned).
--
-- Before, a local identity's `model` was the path or name the spec gave the weights, so the
-- same file named `../cache/x` and `experiments/../cache/x` had two identities and shared
-- no answer. Request and score keys are blake3 digests over the identity, which SQL cannot
-- compute: the rewrite is a Rust step of this migration (store/local_identity.rs). For
-- every local identity with another model name it recomputes each request's key under
-- the digest identity and moves the request, its response, its failures and its trials
-- there (a duplicate answer already stored under the new key is kept, the moved one
-- dropped: both are the same weights' answer to the same request), does the same for
-- scored texts, and removes the old identity. This file only marks the step.

SELECT 1;
