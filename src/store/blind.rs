//! The blind baselines (migration 0011): per (dataset, template, seed, group pair), how
//! well a model-free classifier tells the pair's two groups of texts apart
//! ([`crate::likelihood::blind`]); the likelihood and membership cells of every model read
//! theirs from here.

use std::collections::HashMap;

use rusqlite::Connection;
use serde::Serialize;

use super::error::{AtPath, Result};
use super::{RunId, Store};
use crate::likelihood::BlindAuroc;

/// One blind baseline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlindBaselineRow {
    pub dataset: String,
    pub serialization: String,
    pub seed: u64,
    /// [`crate::likelihood::blind::ORIGINAL_VS_PERTURBED`] or
    /// [`crate::likelihood::blind::trained_vs_held_out`].
    pub group_pair: String,
    pub stats: BlindAuroc,
    /// Set by the store; ignored by [`Store::put_blind_baselines`].
    #[serde(skip)]
    pub run_id: Option<RunId>,
}

/// The key a cell finds its baseline by: (dataset, template, seed, group pair).
pub(super) type BlindKey = (String, String, u64, String);

impl Store {
    /// Stores (replaces) blind baselines computed by `run`, in one transaction.
    pub fn put_blind_baselines(&mut self, run: RunId, rows: &[BlindBaselineRow]) -> Result<()> {
        let path = self.path.clone();
        let tx = self.write()?;
        for row in rows {
            let key = (
                row.dataset.clone(),
                row.serialization.clone(),
                row.seed,
                row.group_pair.clone(),
            );
            insert_blind(&tx, run, &key, &row.stats).at(&path)?;
        }
        tx.commit().at(&path)?;
        Ok(())
    }

    /// Every blind baseline, in (dataset, template, seed, group pair) order.
    pub fn blind_baselines(&self) -> Result<Vec<BlindBaselineRow>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT dataset, serialization, seed, group_pair, run_id, positives, negatives,
                        auroc, auroc_low, auroc_high
                 FROM blind_baselines ORDER BY dataset, serialization, seed, group_pair",
            )
            .at(&self.path)?;
        let rows = stmt
            .query_map([], |row| {
                Ok(BlindBaselineRow {
                    dataset: row.get("dataset")?,
                    serialization: row.get("serialization")?,
                    seed: row.get::<_, i64>("seed")? as u64,
                    group_pair: row.get("group_pair")?,
                    stats: stats_of(row)?,
                    run_id: Some(RunId(row.get("run_id")?)),
                })
            })
            .at(&self.path)?;
        rows.collect::<rusqlite::Result<Vec<_>>>().at(&self.path)
    }
}

fn stats_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<BlindAuroc> {
    Ok(BlindAuroc {
        positives: row.get::<_, i64>("positives")? as usize,
        negatives: row.get::<_, i64>("negatives")? as usize,
        auroc: row.get("auroc")?,
        auroc_low: row.get("auroc_low")?,
        auroc_high: row.get("auroc_high")?,
    })
}

/// Writes (replaces) one baseline under `key`, decided by `run`.
pub(super) fn insert_blind(
    conn: &Connection,
    run: RunId,
    key: &BlindKey,
    stats: &BlindAuroc,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO blind_baselines (dataset, serialization, seed, group_pair, run_id,
           positives, negatives, auroc, auroc_low, auroc_high)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(rusqlite::params![
        key.0,
        key.1,
        key.2 as i64,
        key.3,
        run.0,
        stats.positives as i64,
        stats.negatives as i64,
        stats.auroc,
        stats.auroc_low,
        stats.auroc_high,
    ])?;
    Ok(())
}

/// Every baseline by its key, for attaching to cells as they are read.
pub(super) fn blind_by_key(conn: &Connection) -> rusqlite::Result<HashMap<BlindKey, BlindAuroc>> {
    let mut stmt = conn.prepare_cached(
        "SELECT dataset, serialization, seed, group_pair, positives, negatives, auroc, auroc_low,
                auroc_high
         FROM blind_baselines",
    )?;
    let rows = stmt.query_map([], |row| {
        let key: BlindKey = (
            row.get("dataset")?,
            row.get("serialization")?,
            row.get::<_, i64>("seed")? as u64,
            row.get("group_pair")?,
        );
        Ok((key, stats_of(row)?))
    })?;
    rows.collect()
}
