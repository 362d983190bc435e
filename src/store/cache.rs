//! The response cache: requests and responses addressed by their [`RequestKey`].
//!
//! Prompt texts are stored once in `prompts` (keyed by their blake3 hash) and model
//! identities once in `identities`: the same prompt is asked of every model and every
//! sample, so this keeps the file several times smaller than one row per text.

use std::collections::{HashMap, HashSet};

use rusqlite::{Connection, OptionalExtension, Row, params_from_iter};

use super::error::{AtPath, Result};
use super::{Store, enum_column, json_column};
use crate::request::{ApiMode, ModelIdentity, Request, RequestKey, Response};

/// Keys per `IN (…)` probe: large enough to amortize statement overhead, far below
/// SQLite's limit on bound parameters.
const PROBE_CHUNK: usize = 256;

/// A lookup scans the whole table instead of probing key by key once it asks for at least
/// one key in this many stored responses (a sequential scan of a row costs about a tenth
/// of a B-tree probe, and the scan has no per-statement overhead).
const SCAN_RATIO: usize = 8;

const RESPONSE_COLUMNS: &str = "key, text, finish_reason, prompt_tokens, completion_tokens, latency_ms, served_model, served_fingerprint";

impl Store {
    /// Caches one successful, complete response and commits at once, so a killed run
    /// loses nothing it had received. Returns `false` when the key was already cached
    /// (by this process or another): cache entries are immutable, the first one stays.
    pub fn put_response(&mut self, request: &Request, response: &Response) -> Result<bool> {
        let path = self.path.clone();
        let tx = self.write()?;
        let stored = insert_response(&tx, &request.key(), request, response).at(&path)?;
        tx.commit().at(&path)?;
        Ok(stored)
    }

    /// Caches many responses in one transaction (seeding, imports, benchmarks). Returns
    /// how many were new.
    pub fn put_responses<'a>(
        &mut self,
        items: impl IntoIterator<Item = (&'a Request, &'a Response)>,
    ) -> Result<usize> {
        // In key order: keys are random, and sorted inserts fill each index page in turn
        // instead of touching pages all over the indexes.
        let mut items: Vec<_> = items.into_iter().map(|(q, r)| (q.key(), q, r)).collect();
        items.sort_unstable_by_key(|(key, _, _)| *key);
        let path = self.path.clone();
        let tx = self.write()?;
        let mut stored = 0;
        for (key, request, response) in items {
            stored += usize::from(insert_response(&tx, &key, request, response).at(&path)?);
        }
        tx.commit().at(&path)?;
        Ok(stored)
    }

    /// Which of `keys` have a cached response. Fast in bulk: 200k keys in well under a
    /// second (see `tests/store.rs`).
    pub fn cached_keys(&self, keys: &[RequestKey]) -> Result<HashSet<RequestKey>> {
        let mut found = HashSet::with_capacity(keys.len().min(1 << 20));
        if keys.is_empty() {
            return Ok(found);
        }
        let tx = self.conn.unchecked_transaction().at(&self.path)?;
        if self.should_scan(keys.len())? {
            // A merge join: the key index is sorted, so are the wanted keys (SQLite orders
            // BLOBs by memcmp, as `RequestKey` orders its bytes). No hashing of stored keys,
            // and the scan stops after the largest wanted key.
            let mut wanted = keys.to_vec();
            wanted.sort_unstable();
            let mut wanted = wanted.into_iter().peekable();
            let mut stmt = tx
                .prepare_cached("SELECT key FROM responses ORDER BY key")
                .at(&self.path)?;
            let mut rows = stmt.query([]).at(&self.path)?;
            while let Some(row) = rows.next().at(&self.path)? {
                let stored = RequestKey(row.get(0).at(&self.path)?);
                while wanted.next_if(|k| *k < stored).is_some() {}
                match wanted.peek() {
                    None => break,
                    Some(k) if *k == stored => {
                        found.insert(stored);
                        while wanted.next_if_eq(&stored).is_some() {}
                    }
                    Some(_) => {}
                }
            }
        } else {
            probe(&tx, "SELECT key", keys, |row| {
                found.insert(RequestKey(row.get(0)?));
                Ok(())
            })
            .at(&self.path)?;
        }
        Ok(found)
    }

    /// The cached responses among `keys` (missing keys are simply absent).
    pub fn responses(&self, keys: &[RequestKey]) -> Result<HashMap<RequestKey, Response>> {
        let mut found = HashMap::with_capacity(keys.len().min(1 << 20));
        if keys.is_empty() {
            return Ok(found);
        }
        let tx = self.conn.unchecked_transaction().at(&self.path)?;
        if self.should_scan(keys.len())? {
            let wanted: HashSet<&RequestKey> = keys.iter().collect();
            let sql = format!("SELECT {RESPONSE_COLUMNS} FROM responses");
            let mut stmt = tx.prepare_cached(&sql).at(&self.path)?;
            let mut rows = stmt.query([]).at(&self.path)?;
            while let Some(row) = rows.next().at(&self.path)? {
                let key = RequestKey(row.get(0).at(&self.path)?);
                if wanted.contains(&key) {
                    found.insert(key, response_from_row(row).at(&self.path)?);
                }
            }
        } else {
            probe(&tx, &format!("SELECT {RESPONSE_COLUMNS}"), keys, |row| {
                found.insert(RequestKey(row.get(0)?), response_from_row(row)?);
                Ok(())
            })
            .at(&self.path)?;
        }
        Ok(found)
    }

    /// Every stored request (answered or failed), in key order, one at a time: exports of a
    /// large cache never hold it all in memory.
    pub fn for_each_request(&self, mut each: impl FnMut(RequestKey, Request)) -> Result<u64> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT q.key, i.backend, i.model, i.revision, q.api, p.text AS prompt, q.params, q.sample
                 FROM requests q
                 JOIN identities i ON i.id = q.identity_id
                 JOIN prompts p ON p.id = q.prompt_id
                 ORDER BY q.key",
            )
            .at(&self.path)?;
        let mut rows = stmt.query([]).at(&self.path)?;
        let mut count = 0;
        while let Some(row) = rows.next().at(&self.path)? {
            let key = RequestKey(row.get("key").at(&self.path)?);
            each(key, request_from_row(row).at(&self.path)?);
            count += 1;
        }
        Ok(count)
    }

    /// Every cached response with the time it was stored (ISO-8601 UTC), in key order, one
    /// at a time.
    pub fn for_each_response(
        &self,
        mut each: impl FnMut(RequestKey, Response, String),
    ) -> Result<u64> {
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT {RESPONSE_COLUMNS}, created_at FROM responses ORDER BY key"
            ))
            .at(&self.path)?;
        let mut rows = stmt.query([]).at(&self.path)?;
        let mut count = 0;
        while let Some(row) = rows.next().at(&self.path)? {
            let key = RequestKey(row.get(0).at(&self.path)?);
            let response = response_from_row(row).at(&self.path)?;
            each(key, response, row.get("created_at").at(&self.path)?);
            count += 1;
        }
        Ok(count)
    }

    /// The stored request with this key (cached, or recorded with a failure).
    pub fn request(&self, key: &RequestKey) -> Result<Option<Request>> {
        self.conn
            .prepare_cached(
                "SELECT i.backend, i.model, i.revision, q.api, p.text AS prompt, q.params, q.sample
                 FROM requests q
                 JOIN identities i ON i.id = q.identity_id
                 JOIN prompts p ON p.id = q.prompt_id
                 WHERE q.key = ?1",
            )
            .at(&self.path)?
            .query_row([key.0], request_from_row)
            .optional()
            .at(&self.path)
    }

    /// The prompt text of each stored request among `keys` (for the report's trial
    /// explorer; missing keys are simply absent).
    pub fn prompts_of(&self, keys: &[RequestKey]) -> Result<HashMap<RequestKey, String>> {
        let mut found = HashMap::with_capacity(keys.len().min(1 << 20));
        let tx = self.conn.unchecked_transaction().at(&self.path)?;
        for chunk in keys.chunks(PROBE_CHUNK) {
            let placeholders = vec!["?"; chunk.len()].join(",");
            let sql = format!(
                "SELECT q.key, p.text FROM requests q JOIN prompts p ON p.id = q.prompt_id
                 WHERE q.key IN ({placeholders})"
            );
            let mut stmt = tx.prepare_cached(&sql).at(&self.path)?;
            let mut rows = stmt
                .query(params_from_iter(chunk.iter().map(|k| k.0)))
                .at(&self.path)?;
            while let Some(row) = rows.next().at(&self.path)? {
                found.insert(
                    RequestKey(row.get(0).at(&self.path)?),
                    row.get(1).at(&self.path)?,
                );
            }
        }
        Ok(found)
    }

    /// Whether a lookup of `wanted` keys is cheaper as one scan of all responses.
    fn should_scan(&self, wanted: usize) -> Result<bool> {
        // max(id) is one B-tree descent, unlike count(*); ids are never reused since
        // responses are never deleted, so it is the row count.
        let stored: i64 = self
            .conn
            .query_row("SELECT coalesce(max(id), 0) FROM responses", [], |r| {
                r.get(0)
            })
            .at(&self.path)?;
        Ok((stored as usize) <= wanted.saturating_mul(SCAN_RATIO))
    }
}

/// Runs `SELECT {columns} FROM responses WHERE key IN (…)` over `keys` in chunks.
fn probe(
    conn: &Connection,
    select: &str,
    keys: &[RequestKey],
    mut on_row: impl FnMut(&Row<'_>) -> rusqlite::Result<()>,
) -> rusqlite::Result<()> {
    for chunk in keys.chunks(PROBE_CHUNK) {
        let placeholders = vec!["?"; chunk.len()].join(",");
        let sql = format!("{select} FROM responses WHERE key IN ({placeholders})");
        // Only two shapes (full and last chunk) per call: both stay in the statement cache.
        let mut stmt = conn.prepare_cached(&sql)?;
        let mut rows = stmt.query(params_from_iter(chunk.iter().map(|k| k.0)))?;
        while let Some(row) = rows.next()? {
            on_row(row)?;
        }
    }
    Ok(())
}

fn request_from_row(row: &Row<'_>) -> rusqlite::Result<Request> {
    Ok(Request {
        model: ModelIdentity {
            backend: enum_column(row, "backend")?,
            model: row.get("model")?,
            revision: row.get("revision")?,
        },
        api: enum_column(row, "api")?,
        prompt: row.get("prompt")?,
        params: json_column(row, "params")?,
        sample: row.get("sample")?,
    })
}

fn response_from_row(row: &Row<'_>) -> rusqlite::Result<Response> {
    Ok(Response {
        text: row.get(1)?,
        finish_reason: row.get(2)?,
        prompt_tokens: row.get(3)?,
        completion_tokens: row.get(4)?,
        latency_ms: row.get::<_, i64>(5)? as u64,
        served_model: row.get(6)?,
        served_fingerprint: row.get(7)?,
    })
}

/// Stores the request (if new) and its response (if new); `true` when the response is new.
fn insert_response(
    conn: &Connection,
    key: &RequestKey,
    request: &Request,
    response: &Response,
) -> rusqlite::Result<bool> {
    if conn
        .prepare_cached("SELECT 1 FROM responses WHERE key = ?1")?
        .exists([key.0])?
    {
        return Ok(false);
    }
    let identity_id = insert_request(conn, key, request)?;
    let latency_ms = i64::try_from(response.latency_ms).unwrap_or(i64::MAX);
    conn.prepare_cached(
        "INSERT INTO responses (key, identity_id, text, finish_reason, prompt_tokens, completion_tokens, latency_ms, served_model, served_fingerprint)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute((
        key.0,
        identity_id,
        &response.text,
        &response.finish_reason,
        response.prompt_tokens,
        response.completion_tokens,
        latency_ms,
        &response.served_model,
        &response.served_fingerprint,
    ))?;
    Ok(true)
}

/// Stores a request's canonical fields under its key, unless already there; returns the
/// id of its model identity.
pub(super) fn insert_request(
    conn: &Connection,
    key: &RequestKey,
    request: &Request,
) -> rusqlite::Result<i64> {
    let stored = conn
        .prepare_cached("SELECT identity_id FROM requests WHERE key = ?1")?
        .query_row([key.0], |r| r.get(0))
        .optional()?;
    if let Some(identity_id) = stored {
        return Ok(identity_id);
    }
    let identity = &request.model;
    let identity_id: i64 = match conn
        .prepare_cached("SELECT id FROM identities WHERE backend = ?1 AND model = ?2 AND revision = ?3")?
        .query_row((identity.backend.id(), &identity.model, &identity.revision), |r| r.get(0))
        .optional()?
    {
        Some(id) => id,
        None => conn
            .prepare_cached("INSERT INTO identities (backend, model, revision) VALUES (?1, ?2, ?3) RETURNING id")?
            .query_row((identity.backend.id(), &identity.model, &identity.revision), |r| r.get(0))?,
    };
    let hash = *blake3::hash(request.prompt.as_bytes()).as_bytes();
    let prompt_id: i64 = match conn
        .prepare_cached("SELECT id FROM prompts WHERE hash = ?1")?
        .query_row([hash], |r| r.get(0))
        .optional()?
    {
        Some(id) => id,
        None => conn
            .prepare_cached("INSERT INTO prompts (hash, text) VALUES (?1, ?2) RETURNING id")?
            .query_row((hash, &request.prompt), |r| r.get(0))?,
    };
    let params = serde_json::to_string(&request.params)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    conn.prepare_cached(
        "INSERT INTO requests (key, identity_id, api, prompt_id, params, sample) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute((key.0, identity_id, api_id(request.api), prompt_id, params, request.sample))?;
    Ok(identity_id)
}

fn api_id(api: ApiMode) -> &'static str {
    match api {
        ApiMode::Completions => "completions",
        ApiMode::Chat => "chat",
    }
}
