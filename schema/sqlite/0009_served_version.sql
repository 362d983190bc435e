-- tabcontam cache, schema version 9: the version the server reports with each answer.
--
-- Append-only: once released, this file is never edited (its checksum is pinned).
--
-- API model names are aliases: `gpt-4o` or a `-latest` name serves different snapshots over
-- time. Each response now keeps what the server said answered it: `served_model` (the
-- OpenAI-compatible and Anthropic `model` field, Gemini's `modelVersion`, vLLM's and
-- llama.cpp's `model`) and `served_fingerprint` (OpenAI-compatible `system_fingerprint`).
-- Only what the server reports is stored, never a header or a key. Rows of older caches
-- stay NULL: unknown, never guessed.

ALTER TABLE responses ADD COLUMN served_model TEXT;
ALTER TABLE responses ADD COLUMN served_fingerprint TEXT;
