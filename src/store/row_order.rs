//! The cells of test 17, `row-order` (migration 0010): one exact permutation p-value per
//! (model, dataset, seed), or the reason the file's order could not be tested.

use serde::Serialize;

use super::error::{AtPath, Result};
use super::{RunId, Store, json_column};
use crate::likelihood::row_order::RowOrderStats;

/// One `row-order` cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowOrderCellRow {
    pub model: String,
    pub dataset: String,
    pub seed: u64,
    /// How the log-probabilities were obtained (`local`, `llama.cpp forced-token`, `-`).
    pub method: String,
    /// Columns whose runs of equal values bound the permutations.
    pub blocked_by: Vec<String>,
    /// `None` when skipped.
    pub stats: Option<RowOrderStats>,
    pub skipped: Option<String>,
    /// Set by the store; ignored by [`Store::put_row_order_cells`].
    #[serde(skip)]
    pub run_id: Option<RunId>,
}

impl Store {
    /// Stores (replaces) the row-order cells decided by `run`, in one transaction.
    pub fn put_row_order_cells(&mut self, run: RunId, cells: &[RowOrderCellRow]) -> Result<()> {
        let path = self.path.clone();
        let tx = self.write()?;
        for cell in cells {
            let s = cell.stats.as_ref();
            let blocked_by = serde_json::to_string(&cell.blocked_by).expect("strings");
            let ranks = s.map(|s| serde_json::to_string(&s.ranks).expect("numbers"));
            tx.prepare_cached(
                "INSERT OR REPLACE INTO row_order_cells (model, dataset, seed, run_id, method,
                   blocked_by, shards, permutations, ranks, rank_sum, p_value, mean_gap_nats, skipped)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            )
            .at(&path)?
            .execute(rusqlite::params![
                cell.model,
                cell.dataset,
                cell.seed as i64,
                run.0,
                cell.method,
                blocked_by,
                s.map_or(0, |s| s.shards as i64),
                s.map_or(0, |s| s.permutations as i64),
                ranks,
                s.map(|s| s.rank_sum as i64),
                s.map(|s| s.p_value),
                s.map(|s| s.mean_gap_nats),
                cell.skipped,
            ])
            .at(&path)?;
        }
        tx.commit().at(&path)?;
        Ok(())
    }

    /// Every row-order cell, in (model, dataset, seed) order.
    pub fn row_order_cells(&self) -> Result<Vec<RowOrderCellRow>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT model, dataset, seed, run_id, method, blocked_by, shards, permutations, ranks,
                        rank_sum, p_value, mean_gap_nats, skipped
                 FROM row_order_cells ORDER BY model, dataset, seed",
            )
            .at(&self.path)?;
        let rows = stmt
            .query_map([], |row| {
                let p_value: Option<f64> = row.get("p_value")?;
                let stats = match p_value {
                    None => None,
                    Some(p_value) => Some(RowOrderStats {
                        shards: row.get::<_, i64>("shards")? as usize,
                        permutations: row.get::<_, i64>("permutations")? as usize,
                        ranks: json_column(row, "ranks")?,
                        rank_sum: row.get::<_, i64>("rank_sum")? as usize,
                        p_value,
                        mean_gap_nats: row.get("mean_gap_nats")?,
                    }),
                };
                Ok(RowOrderCellRow {
                    model: row.get("model")?,
                    dataset: row.get("dataset")?,
                    seed: row.get::<_, i64>("seed")? as u64,
                    method: row.get("method")?,
                    blocked_by: json_column(row, "blocked_by")?,
                    stats,
                    skipped: row.get("skipped")?,
                    run_id: Some(RunId(row.get("run_id")?)),
                })
            })
            .at(&self.path)?;
        rows.collect::<rusqlite::Result<Vec<_>>>().at(&self.path)
    }
}
