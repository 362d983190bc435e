//! What the cache holds, for `tabcontam status`.

use serde::Serialize;

use super::error::{AtPath, Result};
use super::migrations;
use super::runs::{FailureRow, RunRow};
use super::{Store, enum_column};
use crate::request::BackendKind;

/// How many runs and failures the status lists.
const LAST_RUNS: usize = 10;
const RECENT_FAILURES: usize = 20;

/// A summary of the cache file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusReport {
    pub path: String,
    /// Bytes on disk: the database plus its write-ahead log (0 when the file is missing).
    pub file_bytes: u64,
    pub schema_version: i64,
    pub responses: u64,
    /// Distinct prompt texts (shared by every model they were asked of).
    pub prompts: u64,
    pub models: u64,
    pub datasets: u64,
    pub runs: u64,
    pub trials: u64,
    pub cells: u64,
    pub failures: u64,
    /// Cached responses per model identity, with the spec ids that name it.
    pub per_model: Vec<ModelUsage>,
    /// Newest first.
    pub last_runs: Vec<RunRow>,
    /// Newest first.
    pub recent_failures: Vec<FailureRow>,
}

/// Cached responses of one model identity (backend, model, revision).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelUsage {
    /// Spec model ids with this identity (empty when no spec named it).
    pub model_ids: Vec<String>,
    pub backend: BackendKind,
    pub model: String,
    pub revision: String,
    pub responses: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub last_response_at: Option<String>,
}

impl ModelUsage {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<ModelUsage> {
        let model_ids: Option<String> = row.get("model_ids")?;
        Ok(ModelUsage {
            // Spec ids are TOML keys: they contain no newline.
            model_ids: model_ids
                .map(|ids| ids.split('\n').map(str::to_string).collect())
                .unwrap_or_default(),
            backend: enum_column(row, "backend")?,
            model: row.get("model")?,
            revision: row.get("revision")?,
            responses: row.get::<_, i64>("responses")? as u64,
            prompt_tokens: row.get::<_, i64>("prompt_tokens")? as u64,
            completion_tokens: row.get::<_, i64>("completion_tokens")? as u64,
            last_response_at: row.get("last_response_at")?,
        })
    }
}

impl Store {
    /// Counts and recent activity.
    pub fn status(&self) -> Result<StatusReport> {
        // One read transaction: every number comes from the same snapshot.
        let tx = self.conn.unchecked_transaction().at(&self.path)?;
        let count = |table: &str| -> Result<u64> {
            tx.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n as u64)
            .at(&self.path)
        };
        // Scans the small `responses_by_identity` index; max(id) finds each model's
        // latest response without reading any response text.
        let mut per_model_stmt = tx
            .prepare(
                "SELECT i.backend, i.model, i.revision,
                        u.responses, u.prompt_tokens, u.completion_tokens,
                        (SELECT created_at FROM responses WHERE id = u.last_id) AS last_response_at,
                        (SELECT group_concat(m.id, char(10)) FROM models m
                          WHERE m.backend = i.backend AND m.model = i.model AND m.revision = i.revision) AS model_ids
                 FROM (SELECT identity_id,
                              count(*) AS responses,
                              coalesce(sum(prompt_tokens), 0) AS prompt_tokens,
                              coalesce(sum(completion_tokens), 0) AS completion_tokens,
                              max(id) AS last_id
                       FROM responses
                       GROUP BY identity_id) u
                 JOIN identities i ON i.id = u.identity_id
                 ORDER BY i.backend, i.model, i.revision",
            )
            .at(&self.path)?;
        let per_model = per_model_stmt
            .query_map([], ModelUsage::from_row)
            .at(&self.path)?
            .collect::<rusqlite::Result<_>>()
            .at(&self.path)?;
        let report = StatusReport {
            path: self.path.display().to_string(),
            file_bytes: self.file_bytes(),
            schema_version: migrations::current_version(&tx).at(&self.path)?,
            responses: count("responses")?,
            prompts: count("prompts")?,
            models: count("models")?,
            datasets: count("datasets")?,
            runs: count("runs")?,
            trials: count("trials")?,
            cells: count("cells")?,
            failures: count("failures")?,
            per_model,
            last_runs: self.last_runs(LAST_RUNS)?,
            recent_failures: self.recent_failures(RECENT_FAILURES)?,
        };
        Ok(report)
    }

    /// Bytes of the database file and its write-ahead log.
    pub fn file_bytes(&self) -> u64 {
        let size = |suffix: &str| {
            let mut name = self.path.as_os_str().to_owned();
            name.push(suffix);
            std::fs::metadata(name).map(|m| m.len()).unwrap_or(0)
        };
        size("") + size("-wal")
    }
}
