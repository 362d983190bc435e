//! The log-probability cache: per-token log-probabilities of scored texts, addressed by
//! their [`ScoreKey`] (separate from the response cache: a score is not a generation).

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, Row};

use super::error::{AtPath, Result};
use super::{Store, json_column};
use crate::request::{ModelIdentity, ScoreKey, ScoreRequest, TokenLogprobs};

impl Store {
    /// Caches the log-probabilities of one scored text and commits at once. Returns
    /// `false` when the key was already cached: entries are immutable, the first stays.
    pub fn put_logprobs(
        &mut self,
        request: &ScoreRequest,
        method: &str,
        scores: &TokenLogprobs,
    ) -> Result<bool> {
        let path = self.path.clone();
        let tx = self.write()?;
        let stored = insert_logprobs(&tx, request, method, scores).at(&path)?;
        tx.commit().at(&path)?;
        Ok(stored)
    }

    /// The cached log-probabilities among `keys` with how they were obtained (missing keys
    /// are absent).
    pub fn logprobs(
        &self,
        keys: &[ScoreKey],
    ) -> Result<HashMap<ScoreKey, (String, TokenLogprobs)>> {
        let mut found = HashMap::with_capacity(keys.len());
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT method, tokens, logprobs, mu, sigma FROM logprobs WHERE key = ?1",
            )
            .at(&self.path)?;
        for key in keys {
            if let Some(entry) = stmt
                .query_row([key.0], logprobs_from_row)
                .optional()
                .at(&self.path)?
            {
                found.insert(*key, entry);
            }
        }
        Ok(found)
    }
}

fn logprobs_from_row(row: &Row<'_>) -> rusqlite::Result<(String, TokenLogprobs)> {
    Ok((
        row.get("method")?,
        TokenLogprobs {
            tokens: json_column(row, "tokens")?,
            logprobs: json_column(row, "logprobs")?,
            mu: optional_json(row, "mu")?,
            sigma: optional_json(row, "sigma")?,
        },
    ))
}

/// A nullable JSON column: `NULL` reads as `None`.
fn optional_json(row: &Row<'_>, column: &str) -> rusqlite::Result<Option<Vec<f64>>> {
    match row.get::<_, Option<String>>(column)? {
        None => Ok(None),
        Some(_) => json_column(row, column).map(Some),
    }
}

fn identity_id(conn: &Connection, identity: &ModelIdentity) -> rusqlite::Result<i64> {
    let found = conn
        .prepare_cached(
            "SELECT id FROM identities WHERE backend = ?1 AND model = ?2 AND revision = ?3",
        )?
        .query_row(
            (identity.backend.id(), &identity.model, &identity.revision),
            |r| r.get(0),
        )
        .optional()?;
    match found {
        Some(id) => Ok(id),
        None => conn
            .prepare_cached(
                "INSERT INTO identities (backend, model, revision) VALUES (?1, ?2, ?3) RETURNING id",
            )?
            .query_row(
                (identity.backend.id(), &identity.model, &identity.revision),
                |r| r.get(0),
            ),
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> rusqlite::Result<String> {
    serde_json::to_string(value).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

fn insert_logprobs(
    conn: &Connection,
    request: &ScoreRequest,
    method: &str,
    scores: &TokenLogprobs,
) -> rusqlite::Result<bool> {
    let identity = identity_id(conn, &request.model)?;
    let changed = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO logprobs (key, identity_id, text, method, tokens, logprobs, mu, sigma, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
        )?
        .execute((
            request.key().0,
            identity,
            &request.text,
            method,
            to_json(&scores.tokens)?,
            to_json(&scores.logprobs)?,
            scores.mu.as_ref().map(to_json).transpose()?,
            scores.sigma.as_ref().map(to_json).transpose()?,
        ))?;
    Ok(changed == 1)
}
