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

/// One likelihood cell: a detector's result on one (model, dataset, serialization, seed).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LikelihoodCellRow {
    pub model: String,
    pub dataset: String,
    /// `likelihood-…`: [`crate::likelihood::Detector::test_id`].
    pub test: String,
    pub serialization: String,
    pub seed: u64,
    /// How the log-probabilities were obtained (`local`, `llama.cpp forced-token`, …).
    pub method: String,
    /// `None` when skipped.
    pub stats: Option<crate::likelihood::DetectorStats>,
    pub skipped: Option<String>,
    /// The blind baseline of the cell's two groups of texts (the model-free classifier's
    /// AUROC), kept in `blind_baselines` under the cell's group pair
    /// ([`crate::likelihood::blind::group_pair_of_cell`]); `None` when not computed (a
    /// cache of schema 10, too few rows).
    pub blind: Option<crate::likelihood::BlindAuroc>,
    /// Set by the store; ignored by [`Store::put_likelihood_cells`].
    pub run_id: Option<super::RunId>,
}

/// Where a likelihood cell's blind baseline is kept.
fn blind_key(cell: &LikelihoodCellRow) -> super::blind::BlindKey {
    (
        cell.dataset.clone(),
        cell.serialization.clone(),
        cell.seed,
        crate::likelihood::blind::group_pair_of_cell(&cell.model, &cell.test),
    )
}

impl Store {
    /// Stores (replaces) likelihood cells decided by `run`, with their blind baselines, in
    /// one transaction.
    pub fn put_likelihood_cells(
        &mut self,
        run: super::RunId,
        cells: &[LikelihoodCellRow],
    ) -> Result<()> {
        let path = self.path.clone();
        let tx = self.write()?;
        for cell in cells {
            let s = cell.stats.as_ref();
            let roc = s.map(|s| to_json(&s.roc)).transpose().at(&path)?;
            tx.prepare_cached(
                "INSERT OR REPLACE INTO likelihood_cells (model, dataset, test, serialization, seed, run_id,
                   method, positives, negatives, auroc, auroc_low, auroc_high, tpr_at_5_fpr, tpr_low,
                   tpr_high, p_value, roc, skipped)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
            )
            .at(&path)?
            .execute(rusqlite::params![
                cell.model,
                cell.dataset,
                cell.test,
                cell.serialization,
                cell.seed as i64,
                run.0,
                cell.method,
                s.map_or(0, |s| s.positives as i64),
                s.map_or(0, |s| s.negatives as i64),
                s.map(|s| s.auroc),
                s.map(|s| s.auroc_low),
                s.map(|s| s.auroc_high),
                s.map(|s| s.tpr_at_5_fpr),
                s.map(|s| s.tpr_low),
                s.map(|s| s.tpr_high),
                s.map(|s| s.p_value),
                roc,
                cell.skipped,
            ])
            .at(&path)?;
            if let Some(blind) = &cell.blind {
                super::blind::insert_blind(&tx, run, &blind_key(cell), blind).at(&path)?;
            }
        }
        tx.commit().at(&path)?;
        Ok(())
    }

    /// Every likelihood cell, with its blind baseline, in (model, dataset, test,
    /// serialization, seed) order.
    pub fn likelihood_cells(&self) -> Result<Vec<LikelihoodCellRow>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT model, dataset, test, serialization, seed, run_id, method, positives, negatives,
                        auroc, auroc_low, auroc_high, tpr_at_5_fpr, tpr_low, tpr_high, p_value, roc, skipped
                 FROM likelihood_cells ORDER BY model, dataset, test, serialization, seed",
            )
            .at(&self.path)?;
        let rows = stmt
            .query_map([], |row| {
                let auroc: Option<f64> = row.get("auroc")?;
                let stats = match auroc {
                    None => None,
                    Some(auroc) => {
                        let roc: String = row.get("roc")?;
                        Some(crate::likelihood::DetectorStats {
                            positives: row.get::<_, i64>("positives")? as usize,
                            negatives: row.get::<_, i64>("negatives")? as usize,
                            auroc,
                            auroc_low: row.get("auroc_low")?,
                            auroc_high: row.get("auroc_high")?,
                            tpr_at_5_fpr: row.get("tpr_at_5_fpr")?,
                            tpr_low: row.get("tpr_low")?,
                            tpr_high: row.get("tpr_high")?,
                            p_value: row.get("p_value")?,
                            roc: serde_json::from_str(&roc).map_err(|e| {
                                rusqlite::Error::FromSqlConversionFailure(
                                    16,
                                    rusqlite::types::Type::Text,
                                    Box::new(e),
                                )
                            })?,
                        })
                    }
                };
                Ok(LikelihoodCellRow {
                    model: row.get("model")?,
                    dataset: row.get("dataset")?,
                    test: row.get("test")?,
                    serialization: row.get("serialization")?,
                    seed: row.get::<_, i64>("seed")? as u64,
                    method: row.get("method")?,
                    stats,
                    skipped: row.get("skipped")?,
                    blind: None,
                    run_id: Some(super::RunId(row.get("run_id")?)),
                })
            })
            .at(&self.path)?;
        let mut cells = rows.collect::<rusqlite::Result<Vec<_>>>().at(&self.path)?;
        let blind = super::blind::blind_by_key(&self.conn).at(&self.path)?;
        for cell in &mut cells {
            cell.blind = blind.get(&blind_key(cell)).copied();
        }
        Ok(cells)
    }
}
