//! Models, datasets, runs and failures: what was asked of whom, when, and what went wrong.

use rusqlite::{OptionalExtension, Row};
use serde::{Deserialize, Serialize};

use super::cache::insert_request;
use super::error::{AtPath, Result};
use super::{NOW, Store, enum_column, json_column};
use crate::request::{ModelIdentity, Request, RequestKey};

/// Failure messages are cut to this many characters: a server may answer with a page.
const MAX_FAILURE_MESSAGE: usize = 2_000;

/// A run's id (`runs.id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(pub i64);

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// How a run ended (or that it has not, or was killed before it could say).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    Running,
    /// Every request was answered or recorded as failed.
    Finished,
    /// Stopped by the user (Ctrl-C); what was received is cached.
    Interrupted,
    /// Stopped by an error.
    Failed,
}

impl RunStatus {
    pub fn id(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Finished => "finished",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Failed => "failed",
        }
    }
}

/// What a run did, stored as JSON (fields added later read as 0 from older rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RunCounts {
    /// Requests the plan needed.
    pub requests: u64,
    /// Answered from the cache.
    pub cached: u64,
    /// Sent to a backend and answered.
    pub sent: u64,
    /// Sent and failed (recorded in `failures`, retried by the next run).
    pub failed: u64,
    /// Tokens of the responses received in this run (not of cache hits).
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// A model of an experiment spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRow {
    /// The spec's model id.
    pub id: String,
    pub label: String,
    pub family: Option<String>,
    #[serde(flatten)]
    pub identity: ModelIdentity,
    /// ISO date, as precise as known (`2024-05`, `2024-05-13`).
    pub release_date: Option<String>,
    /// ISO date, as precise as known.
    pub training_cutoff: Option<String>,
    /// What the model was deliberately trained on (calibration studies, SPEC §8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exposure: Option<crate::exposure::Exposure>,
    /// Training step of a checkpoint (spec key `step`); orders the report's timeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// Set by the store on write; ignored by [`Store::upsert_model`].
    pub updated_at: Option<String>,
}

impl ModelRow {
    fn from_row(row: &Row<'_>) -> rusqlite::Result<ModelRow> {
        Ok(ModelRow {
            id: row.get("id")?,
            label: row.get("label")?,
            family: row.get("family")?,
            identity: ModelIdentity {
                backend: enum_column(row, "backend")?,
                model: row.get("model")?,
                revision: row.get("revision")?,
            },
            release_date: row.get("release_date")?,
            training_cutoff: row.get("training_cutoff")?,
            exposure: row
                .get::<_, Option<String>>("exposure")?
                .and_then(|text| serde_json::from_str(&text).ok()),
            step: row.get::<_, Option<i64>>("step")?.map(|s| s as u64),
            updated_at: row.get("updated_at")?,
        })
    }
}

/// A dataset as a run used it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetRow {
    pub id: String,
    /// The name used in prompts.
    pub name: String,
    pub variant: Option<String>,
    pub checksum: String,
    /// Set by the store on write; ignored by [`Store::upsert_dataset`].
    pub updated_at: Option<String>,
}

impl DatasetRow {
    fn from_row(row: &Row<'_>) -> rusqlite::Result<DatasetRow> {
        Ok(DatasetRow {
            id: row.get("id")?,
            name: row.get("name")?,
            variant: row.get("variant")?,
            checksum: row.get("checksum")?,
            updated_at: row.get("updated_at")?,
        })
    }
}

/// One run of an experiment spec (the spec's text is read with [`Store::run_spec`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRow {
    pub id: RunId,
    pub spec_name: String,
    /// tabcontam version that ran it.
    pub version: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub status: RunStatus,
    pub counts: RunCounts,
    /// Why the run failed, in one line (`None` unless `status` is `failed`).
    pub reason: Option<String>,
}

impl RunRow {
    fn from_row(row: &Row<'_>) -> rusqlite::Result<RunRow> {
        Ok(RunRow {
            id: RunId(row.get("id")?),
            spec_name: row.get("spec_name")?,
            version: row.get("version")?,
            started_at: row.get("started_at")?,
            finished_at: row.get("finished_at")?,
            status: enum_column(row, "status")?,
            counts: json_column(row, "counts")?,
            reason: row.get("reason")?,
        })
    }
}

/// A request that did not produce a cacheable response.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailureRow {
    pub id: i64,
    pub run_id: RunId,
    #[serde(serialize_with = "serialize_key")]
    pub request_key: RequestKey,
    /// The spec's model id.
    pub model: String,
    /// e.g. `timeout`, `rate-limit`, `http-500`, `truncated` (chosen by the runner).
    pub kind: String,
    pub message: String,
    pub attempts: u32,
    pub at: String,
}

impl FailureRow {
    fn from_row(row: &Row<'_>) -> rusqlite::Result<FailureRow> {
        Ok(FailureRow {
            id: row.get("id")?,
            run_id: RunId(row.get("run_id")?),
            request_key: RequestKey(row.get("request_key")?),
            model: row.get("model")?,
            kind: row.get("kind")?,
            message: row.get("message")?,
            attempts: row.get("attempts")?,
            at: row.get("at")?,
        })
    }
}

/// `message` cut to [`MAX_FAILURE_MESSAGE`] characters.
fn cut_message(message: &str) -> String {
    match message.char_indices().nth(MAX_FAILURE_MESSAGE) {
        Some((cut, _)) => format!("{}…", &message[..cut]),
        None => message.to_string(),
    }
}

pub(super) fn serialize_key<S: serde::Serializer>(
    key: &RequestKey,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(&key.to_hex())
}

const RUN_COLUMNS: &str = "id, spec_name, version, started_at, finished_at, status, counts, reason";
const FAILURE_COLUMNS: &str = "id, run_id, request_key, model, kind, message, attempts, at";

impl Store {
    /// Inserts or updates a model by its spec id.
    pub fn upsert_model(&mut self, model: &ModelRow) -> Result<()> {
        let path = self.path.clone();
        let tx = self.write()?;
        tx.execute(
            &format!(
                "INSERT INTO models (id, label, family, backend, model, revision, release_date, training_cutoff, exposure, step, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, {NOW})
                 ON CONFLICT (id) DO UPDATE SET
                   label = excluded.label, family = excluded.family, backend = excluded.backend,
                   model = excluded.model, revision = excluded.revision,
                   release_date = excluded.release_date, training_cutoff = excluded.training_cutoff,
                   exposure = excluded.exposure, step = excluded.step, updated_at = excluded.updated_at"
            ),
            (
                &model.id,
                &model.label,
                &model.family,
                model.identity.backend.id(),
                &model.identity.model,
                &model.identity.revision,
                &model.release_date,
                &model.training_cutoff,
                model
                    .exposure
                    .as_ref()
                    .map(|e| serde_json::to_string(e).expect("Exposure serializes to JSON")),
                model.step.map(|s| s as i64),
            ),
        )
        .at(&path)?;
        tx.commit().at(&path)
    }

    /// Inserts or updates a dataset by its id.
    pub fn upsert_dataset(&mut self, dataset: &DatasetRow) -> Result<()> {
        let path = self.path.clone();
        let tx = self.write()?;
        tx.execute(
            &format!(
                "INSERT INTO datasets (id, name, variant, checksum, updated_at) VALUES (?1, ?2, ?3, ?4, {NOW})
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name, variant = excluded.variant,
                   checksum = excluded.checksum, updated_at = excluded.updated_at"
            ),
            (&dataset.id, &dataset.name, &dataset.variant, &dataset.checksum),
        )
        .at(&path)?;
        tx.commit().at(&path)
    }

    /// Records the start of a run of `spec_toml` (stored verbatim, so a run can be redone).
    pub fn begin_run(&mut self, spec_name: &str, spec_toml: &str) -> Result<RunId> {
        let path = self.path.clone();
        let tx = self.write()?;
        let id = tx
            .query_row(
                &format!(
                    "INSERT INTO runs (spec_name, spec_toml, version, started_at, status)
                     VALUES (?1, ?2, ?3, {NOW}, 'running') RETURNING id"
                ),
                (spec_name, spec_toml, env!("CARGO_PKG_VERSION")),
                |r| r.get(0),
            )
            .at(&path)?;
        tx.commit().at(&path)?;
        Ok(RunId(id))
    }

    /// Records how a run ended and what it did.
    pub fn finish_run(&mut self, run: RunId, status: RunStatus, counts: &RunCounts) -> Result<()> {
        self.finish_run_with_reason(run, status, counts, None)
    }

    /// Records how a run ended, what it did and, for a failed run, why (kept to one line
    /// and cut like failure messages).
    pub fn finish_run_with_reason(
        &mut self,
        run: RunId,
        status: RunStatus,
        counts: &RunCounts,
        reason: Option<&str>,
    ) -> Result<()> {
        let path = self.path.clone();
        let counts = serde_json::to_string(counts).expect("RunCounts are plain integers");
        let reason =
            reason.map(|r| cut_message(&r.split_whitespace().collect::<Vec<_>>().join(" ")));
        let tx = self.write()?;
        tx.execute(
            &format!(
                "UPDATE runs SET status = ?2, counts = ?3, reason = ?4, finished_at = {NOW} WHERE id = ?1"
            ),
            (run.0, status.id(), counts, reason),
        )
        .at(&path)?;
        tx.commit().at(&path)
    }

    /// Records a request that failed (and the request itself, for inspection). The message
    /// must come from the llm module, which keeps secrets out of it.
    pub fn record_failure(
        &mut self,
        run: RunId,
        request: &Request,
        model: &str,
        kind: &str,
        message: &str,
        attempts: u32,
    ) -> Result<()> {
        let path = self.path.clone();
        let key = request.key();
        let message = cut_message(message);
        let tx = self.write()?;
        insert_request(&tx, &key, request).at(&path)?;
        tx.execute(
            &format!(
                "INSERT INTO failures (run_id, request_key, model, kind, message, attempts, at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, {NOW})"
            ),
            (run.0, key.0, model, kind, message, attempts),
        )
        .at(&path)?;
        tx.commit().at(&path)
    }

    /// Every model, by id.
    pub fn models(&self) -> Result<Vec<ModelRow>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT * FROM models ORDER BY id")
            .at(&self.path)?;
        let rows = stmt.query_map([], ModelRow::from_row).at(&self.path)?;
        rows.collect::<rusqlite::Result<_>>().at(&self.path)
    }

    /// Every dataset, by id.
    pub fn datasets(&self) -> Result<Vec<DatasetRow>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT * FROM datasets ORDER BY id")
            .at(&self.path)?;
        let rows = stmt.query_map([], DatasetRow::from_row).at(&self.path)?;
        rows.collect::<rusqlite::Result<_>>().at(&self.path)
    }

    /// Every run, oldest first.
    pub fn runs(&self) -> Result<Vec<RunRow>> {
        self.query_runs(&format!("SELECT {RUN_COLUMNS} FROM runs ORDER BY id"))
    }

    /// The last `n` runs, newest first.
    pub fn last_runs(&self, n: usize) -> Result<Vec<RunRow>> {
        self.query_runs(&format!(
            "SELECT {RUN_COLUMNS} FROM runs ORDER BY id DESC LIMIT {n}"
        ))
    }

    fn query_runs(&self, sql: &str) -> Result<Vec<RunRow>> {
        let mut stmt = self.conn.prepare_cached(sql).at(&self.path)?;
        let rows = stmt.query_map([], RunRow::from_row).at(&self.path)?;
        rows.collect::<rusqlite::Result<_>>().at(&self.path)
    }

    /// The spec a run ran, verbatim.
    pub fn run_spec(&self, run: RunId) -> Result<Option<String>> {
        self.conn
            .query_row("SELECT spec_toml FROM runs WHERE id = ?1", [run.0], |r| {
                r.get(0)
            })
            .optional()
            .at(&self.path)
    }

    /// The failures of one run, or of every run, oldest first.
    pub fn failures(&self, run: Option<RunId>) -> Result<Vec<FailureRow>> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {FAILURE_COLUMNS} FROM failures WHERE ?1 IS NULL OR run_id = ?1 ORDER BY id"
            ))
            .at(&self.path)?;
        let rows = stmt
            .query_map([run.map(|r| r.0)], FailureRow::from_row)
            .at(&self.path)?;
        rows.collect::<rusqlite::Result<_>>().at(&self.path)
    }

    /// The last `n` failures of any run, newest first.
    pub fn recent_failures(&self, n: usize) -> Result<Vec<FailureRow>> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {FAILURE_COLUMNS} FROM failures ORDER BY id DESC LIMIT ?1"
            ))
            .at(&self.path)?;
        let rows = stmt
            .query_map([n as i64], FailureRow::from_row)
            .at(&self.path)?;
        rows.collect::<rusqlite::Result<_>>().at(&self.path)
    }
}
