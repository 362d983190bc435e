//! `cache merge`: brings the caches of several machines (e.g. the shards of one plan) into
//! one file, in one transaction on the target.
//!
//! What is merged, and how:
//! - requests, prompts, identities: union by content (key, prompt hash, identity).
//! - responses: union by request key. The same key with the same text is one answer. The
//!   same key with different text (a non-deterministic server) is a *conflict*: the answer
//!   already in the target is kept, else the one of the earliest input on the command line;
//!   conflicts are counted and the first keys reported.
//! - models and datasets: by id; the row updated last wins. An id that names another
//!   model (backend, name, revision) or another dataset file (checksum) in two caches is an
//!   error: their cells would mix two models or two files under one name.
//! - runs: appended with new ids (a run already present — same spec, version and start
//!   time — is not added twice, so merging the same input again changes nothing); their
//!   failures follow them.
//! - cells, with their trials and per-sample results: a cell present in both keeps the
//!   decision of the run that started last (ties: the target's); imported cells (no run)
//!   already in the target stay. A cell moves with all its trials, so a cell's trials are
//!   still exactly those of its latest decision.
//! - likelihood and row-order cells, and the blind baselines beside them: by their key, the
//!   run that started last wins.
//!
//! Cells that no single input could decide (their requests were split over shards) stay
//! undecided: `tabcontam run SPEC --offline` on the merged cache decides them, sending
//! nothing.

use std::path::{Path, PathBuf};

use rusqlite::Transaction;
use serde::Serialize;

use super::error::{AtPath, StoreError};
use super::{SCHEMA_VERSION, Store};

/// SQLite attaches at most this many databases to one connection (its compiled-in limit).
pub const MAX_MERGE_INPUTS: usize = 10;

/// Conflicting keys reported by name (all are counted).
const CONFLICT_EXAMPLES: usize = 5;

/// What merging one input added to the target.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MergedInput {
    pub path: PathBuf,
    pub requests_added: u64,
    pub responses_added: u64,
    /// Responses the target already had with the same text.
    pub responses_already_present: u64,
    /// Responses the target already had with a different text (the target's kept).
    pub conflicts: u64,
    /// Hex keys of the first conflicts, in key order.
    pub conflict_keys: Vec<String>,
    pub runs_added: u64,
    pub failures_added: u64,
    /// Cells taken from this input (new, or decided by a later run than the target's).
    pub cells_taken: u64,
    pub trials_taken: u64,
    pub models_added_or_updated: u64,
    pub datasets_added_or_updated: u64,
}

/// What a merge did, input by input (in command-line order).
#[derive(Debug, Clone, Default, Serialize)]
pub struct MergeReport {
    pub inputs: Vec<MergedInput>,
}

impl MergeReport {
    pub fn conflicts(&self) -> u64 {
        self.inputs.iter().map(|i| i.conflicts).sum()
    }
}

/// Why an input cannot be merged; the target is left as it was.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{}: no such cache file; check the path", path.display())]
    Missing { path: PathBuf },
    #[error("{} is the merge target itself, or named twice; name each cache once", path.display())]
    SameAsTarget { path: PathBuf },
    #[error(
        "{count} caches given; one merge takes at most {MAX_MERGE_INPUTS}: merge them in steps (the target can be merged into again)"
    )]
    TooMany { count: usize },
    #[error(
        "{}: model `{id}` is {theirs} there but {ours} in the target; one id names two different models, so their cells cannot be merged (keep these caches apart, or rerun one spec with another model id)",
        path.display()
    )]
    ModelClash {
        path: PathBuf,
        id: String,
        theirs: String,
        ours: String,
    },
    #[error(
        "{}: dataset `{id}` has checksum {theirs} there but {ours} in the target; the caches were made from different files of the dataset (keep them apart, or rerun with the same file)",
        path.display()
    )]
    DatasetClash {
        path: PathBuf,
        id: String,
        theirs: String,
        ours: String,
    },
}

impl Store {
    /// Merges the caches at `inputs` into this one, in one transaction: on any error
    /// nothing is changed. Each input is checked first (a tabcontam cache of this schema
    /// version; a foreign, damaged or older file is refused with its path).
    pub fn merge_from(
        &mut self,
        inputs: &[PathBuf],
    ) -> std::result::Result<MergeReport, MergeError> {
        check_merge_inputs(&self.path, inputs)?;
        let path = self.path.clone();
        for (index, input) in inputs.iter().enumerate() {
            self.conn
                .execute(
                    &format!("ATTACH DATABASE ?1 AS {}", alias(index)),
                    [input.to_string_lossy()],
                )
                .at(input)?;
        }
        let merged = (|| {
            let tx = self.write()?;
            let mut report = MergeReport::default();
            for (index, input) in inputs.iter().enumerate() {
                report
                    .inputs
                    .push(merge_one(&tx, &alias(index), input, &path)?);
            }
            tx.commit().at(&path)?;
            Ok(report)
        })();
        for index in 0..inputs.len() {
            // Best effort: the connection is dropped by the caller anyway.
            let _ = self
                .conn
                .execute(&format!("DETACH DATABASE {}", alias(index)), []);
        }
        merged
    }
}

/// Checks the inputs of a merge into `target` without writing anything: each exists, is
/// named once, is not the target, and is a tabcontam cache of this schema version (a
/// foreign, damaged or older file is refused with its path). [`Store::merge_from`] checks
/// again; a command calls this before creating the target.
pub fn check_merge_inputs(
    target: &Path,
    inputs: &[PathBuf],
) -> std::result::Result<(), MergeError> {
    if inputs.len() > MAX_MERGE_INPUTS {
        return Err(MergeError::TooMany {
            count: inputs.len(),
        });
    }
    let target = std::fs::canonicalize(target).unwrap_or_else(|_| target.to_path_buf());
    for input in inputs {
        if !input.is_file() {
            return Err(MergeError::Missing {
                path: input.clone(),
            });
        }
        if std::fs::canonicalize(input).is_ok_and(|p| p == target)
            || inputs.iter().filter(|other| *other == input).count() > 1
        {
            return Err(MergeError::SameAsTarget {
                path: input.clone(),
            });
        }
        let store = Store::open_read_only(input)?;
        let version = store.schema_version()?;
        if version != SCHEMA_VERSION {
            return Err(StoreError::OlderSchema {
                path: input.clone(),
                found: version,
                known: SCHEMA_VERSION,
            }
            .into());
        }
    }
    Ok(())
}

fn alias(index: usize) -> String {
    format!("merge_in{index}")
}

/// Merges the attached database `src` (the file `input`) into `main`.
fn merge_one(
    tx: &Transaction<'_>,
    src: &str,
    input: &Path,
    target: &Path,
) -> std::result::Result<MergedInput, MergeError> {
    // Errors while reading the input name the input (a damaged page there is its fault).
    let at = input;
    let mut merged = MergedInput {
        path: input.to_path_buf(),
        ..Default::default()
    };

    // Models and datasets first: a clash stops the merge before anything is copied.
    let clash: Option<(String, String, String)> = tx
        .query_row(
            &format!(
                "SELECT s.id, s.backend || ' ' || s.model || ' @ ' || s.revision,
                        m.backend || ' ' || m.model || ' @ ' || m.revision
                 FROM {src}.models s JOIN main.models m ON m.id = s.id
                 WHERE (s.backend, s.model, s.revision) IS NOT (m.backend, m.model, m.revision)
                 ORDER BY s.id LIMIT 1"
            ),
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .map(Some)
        .or_else(none_if_no_rows)
        .at(at)?;
    if let Some((id, theirs, ours)) = clash {
        return Err(MergeError::ModelClash {
            path: input.to_path_buf(),
            id,
            theirs,
            ours,
        });
    }
    let clash: Option<(String, String, String)> = tx
        .query_row(
            &format!(
                "SELECT s.id, s.checksum, m.checksum
                 FROM {src}.datasets s JOIN main.datasets m ON m.id = s.id
                 WHERE s.checksum IS NOT m.checksum ORDER BY s.id LIMIT 1"
            ),
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .map(Some)
        .or_else(none_if_no_rows)
        .at(at)?;
    if let Some((id, theirs, ours)) = clash {
        return Err(MergeError::DatasetClash {
            path: input.to_path_buf(),
            id,
            theirs,
            ours,
        });
    }
    merged.models_added_or_updated = tx
        .execute(
            &format!(
                "INSERT INTO main.models (id, label, family, backend, model, revision, release_date, training_cutoff,
                                          exposure, step, updated_at)
                 SELECT id, label, family, backend, model, revision, release_date, training_cutoff,
                        exposure, step, updated_at
                 FROM {src}.models WHERE true
                 ON CONFLICT (id) DO UPDATE SET
                   label = excluded.label, family = excluded.family,
                   release_date = excluded.release_date, training_cutoff = excluded.training_cutoff,
                   exposure = excluded.exposure, step = excluded.step,
                   updated_at = excluded.updated_at
                 WHERE excluded.updated_at > models.updated_at"
            ),
            [],
        )
        .at(at)? as u64;
    merged.datasets_added_or_updated = tx
        .execute(
            &format!(
                "INSERT INTO main.datasets (id, name, variant, checksum, updated_at)
                 SELECT id, name, variant, checksum, updated_at FROM {src}.datasets WHERE true
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name, variant = excluded.variant,
                   updated_at = excluded.updated_at
                 WHERE excluded.updated_at > datasets.updated_at"
            ),
            [],
        )
        .at(at)? as u64;

    // The content-addressed cache: identities and prompts by content, then requests and
    // responses by key, with the input's row ids translated to the target's.
    tx.execute_batch(&format!(
        "INSERT OR IGNORE INTO main.identities (backend, model, revision)
           SELECT backend, model, revision FROM {src}.identities ORDER BY id;
         INSERT OR IGNORE INTO main.prompts (hash, text)
           SELECT hash, text FROM {src}.prompts ORDER BY id;
         CREATE TEMP TABLE IF NOT EXISTS merge_identity (old INTEGER PRIMARY KEY, new INTEGER NOT NULL);
         CREATE TEMP TABLE IF NOT EXISTS merge_prompt (old INTEGER PRIMARY KEY, new INTEGER NOT NULL);
         CREATE TEMP TABLE IF NOT EXISTS merge_run (old INTEGER PRIMARY KEY, new INTEGER NOT NULL);
         DELETE FROM temp.merge_identity; DELETE FROM temp.merge_prompt; DELETE FROM temp.merge_run;
         INSERT INTO temp.merge_identity
           SELECT s.id, m.id FROM {src}.identities s
           JOIN main.identities m USING (backend, model, revision);
         INSERT INTO temp.merge_prompt
           SELECT s.id, m.id FROM {src}.prompts s JOIN main.prompts m USING (hash);"
    ))
    .at(at)?;
    merged.requests_added = tx
        .execute(
            &format!(
                "INSERT OR IGNORE INTO main.requests (key, identity_id, api, prompt_id, params, sample)
                 SELECT r.key, i.new, r.api, p.new, r.params, r.sample
                 FROM {src}.requests r
                 JOIN temp.merge_identity i ON i.old = r.identity_id
                 JOIN temp.merge_prompt p ON p.old = r.prompt_id
                 ORDER BY r.key"
            ),
            [],
        )
        .at(at)? as u64;
    let (same, conflicts): (i64, i64) = tx
        .query_row(
            &format!(
                "SELECT coalesce(sum(s.text = m.text), 0), coalesce(sum(s.text <> m.text), 0)
                 FROM {src}.responses s JOIN main.responses m ON m.key = s.key"
            ),
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .at(at)?;
    merged.responses_already_present = same as u64;
    merged.conflicts = conflicts as u64;
    if conflicts > 0 {
        let mut stmt = tx
            .prepare(&format!(
                "SELECT s.key FROM {src}.responses s JOIN main.responses m ON m.key = s.key
                 WHERE s.text <> m.text ORDER BY s.key LIMIT {CONFLICT_EXAMPLES}"
            ))
            .at(at)?;
        merged.conflict_keys = stmt
            .query_map([], |r| r.get::<_, Vec<u8>>(0))
            .at(at)?
            .map(|key| key.map(|k| k.iter().map(|b| format!("{b:02x}")).collect()))
            .collect::<rusqlite::Result<_>>()
            .at(at)?;
    }
    merged.responses_added = tx
        .execute(
            &format!(
                "INSERT OR IGNORE INTO main.responses
                   (key, identity_id, text, finish_reason, prompt_tokens, completion_tokens, latency_ms, created_at,
                    served_model, served_fingerprint)
                 SELECT s.key, i.new, s.text, s.finish_reason, s.prompt_tokens, s.completion_tokens,
                        s.latency_ms, s.created_at, s.served_model, s.served_fingerprint
                 FROM {src}.responses s JOIN temp.merge_identity i ON i.old = s.identity_id
                 ORDER BY s.id"
            ),
            [],
        )
        .at(at)? as u64;

    // Runs: the same run (spec, version, start) is mapped, not added again.
    let runs: Vec<i64> = {
        let mut stmt = tx
            .prepare(&format!("SELECT id FROM {src}.runs ORDER BY id"))
            .at(at)?;
        stmt.query_map([], |r| r.get(0))
            .at(at)?
            .collect::<rusqlite::Result<_>>()
            .at(at)?
    };
    for old in runs {
        let existing: Option<i64> = tx
            .query_row(
                &format!(
                    "SELECT m.id FROM main.runs m JOIN {src}.runs s
                       ON (m.spec_name, m.spec_toml, m.version, m.started_at)
                        = (s.spec_name, s.spec_toml, s.version, s.started_at)
                     WHERE s.id = ?1 ORDER BY m.id LIMIT 1"
                ),
                [old],
                |r| r.get(0),
            )
            .map(Some)
            .or_else(none_if_no_rows)
            .at(at)?;
        let new = match existing {
            Some(id) => id,
            None => {
                merged.runs_added += 1;
                tx.query_row(
                    &format!(
                        "INSERT INTO main.runs (spec_name, spec_toml, version, started_at, finished_at, status, counts, reason)
                         SELECT spec_name, spec_toml, version, started_at, finished_at, status, counts, reason
                         FROM {src}.runs WHERE id = ?1 RETURNING id"
                    ),
                    [old],
                    |r| r.get(0),
                )
                .at(target)?
            }
        };
        tx.execute(
            "INSERT INTO temp.merge_run (old, new) VALUES (?1, ?2)",
            [old, new],
        )
        .at(target)?;
    }
    merged.failures_added = tx
        .execute(
            &format!(
                "INSERT INTO main.failures (run_id, request_key, model, kind, message, attempts, at)
                 SELECT r.new, f.request_key, f.model, f.kind, f.message, f.attempts, f.at
                 FROM {src}.failures f JOIN temp.merge_run r ON r.old = f.run_id
                 WHERE NOT EXISTS (SELECT 1 FROM main.failures m
                   WHERE m.run_id = r.new AND m.request_key = f.request_key AND m.at = f.at)
                 ORDER BY f.id"
            ),
            [],
        )
        .at(at)? as u64;

    // Cells: the input's cell wins when the target lacks it or decided it in an earlier run.
    tx.execute_batch(&format!(
        "DROP TABLE IF EXISTS temp.merge_cell;
         CREATE TEMP TABLE merge_cell AS
           SELECT c.source, c.model, c.dataset, c.test, c.serialization, c.seed
           FROM {src}.cells c
           LEFT JOIN {src}.runs sr ON sr.id = c.run_id
           LEFT JOIN main.cells m
             ON (m.source, m.model, m.dataset, m.test, m.serialization, m.seed)
              = (c.source, c.model, c.dataset, c.test, c.serialization, c.seed)
           LEFT JOIN main.runs mr ON mr.id = m.run_id
           WHERE m.model IS NULL OR sr.started_at > mr.started_at;
         DELETE FROM main.trials WHERE (model, dataset, test, serialization, seed) IN
           (SELECT model, dataset, test, serialization, seed FROM temp.merge_cell WHERE source = 'tabcontam');
         DELETE FROM main.cell_samples WHERE (model, dataset, test, serialization, seed) IN
           (SELECT model, dataset, test, serialization, seed FROM temp.merge_cell WHERE source = 'tabcontam');
         DELETE FROM main.cells WHERE (source, model, dataset, test, serialization, seed) IN
           (SELECT source, model, dataset, test, serialization, seed FROM temp.merge_cell);"
    ))
    .at(at)?;
    merged.cells_taken = tx
        .execute(
            &format!(
                "INSERT INTO main.cells (source, model, dataset, test, serialization, seed, run_id, passed, score,
                                         trials, passed_trials, invalid_trials, skipped, echo_trials, chance,
                                         chance_basis, trial_chance)
                 SELECT c.source, c.model, c.dataset, c.test, c.serialization, c.seed, r.new, c.passed, c.score,
                        c.trials, c.passed_trials, c.invalid_trials, c.skipped, c.echo_trials, c.chance,
                        c.chance_basis, c.trial_chance
                 FROM {src}.cells c
                 JOIN temp.merge_cell w USING (source, model, dataset, test, serialization, seed)
                 LEFT JOIN temp.merge_run r ON r.old = c.run_id"
            ),
            [],
        )
        .at(at)? as u64;
    merged.trials_taken = tx
        .execute(
            &format!(
                "INSERT INTO main.trials (model, dataset, test, serialization, seed, sample, trial, run_id,
                                          request_key, note, expected, passed, invalid, echo)
                 SELECT t.model, t.dataset, t.test, t.serialization, t.seed, t.sample, t.trial, r.new,
                        t.request_key, t.note, t.expected, t.passed, t.invalid, t.echo
                 FROM {src}.trials t
                 JOIN temp.merge_cell w
                   ON w.source = 'tabcontam'
                  AND (w.model, w.dataset, w.test, w.serialization, w.seed)
                    = (t.model, t.dataset, t.test, t.serialization, t.seed)
                 JOIN temp.merge_run r ON r.old = t.run_id"
            ),
            [],
        )
        .at(at)? as u64;
    tx.execute(
        &format!(
            "INSERT INTO main.cell_samples (model, dataset, test, serialization, seed, sample, run_id, passed,
                                            score, trials, passed_trials, invalid_trials, trial_chance)
             SELECT s.model, s.dataset, s.test, s.serialization, s.seed, s.sample, r.new, s.passed,
                    s.score, s.trials, s.passed_trials, s.invalid_trials, s.trial_chance
             FROM {src}.cell_samples s
             JOIN temp.merge_cell w
               ON w.source = 'tabcontam'
              AND (w.model, w.dataset, w.test, w.serialization, w.seed)
                = (s.model, s.dataset, s.test, s.serialization, s.seed)
             JOIN temp.merge_run r ON r.old = s.run_id"
        ),
        [],
    )
    .at(at)?;
    // Scored texts are keyed like responses (a score key per text and model): the same
    // key is the same computation, so the first one kept stands.
    tx.execute(
        &format!(
            "INSERT OR IGNORE INTO main.logprobs (key, identity_id, text, method, tokens, logprobs, mu,
                                                  sigma, created_at)
             SELECT l.key, i.new, l.text, l.method, l.tokens, l.logprobs, l.mu, l.sigma, l.created_at
             FROM {src}.logprobs l JOIN temp.merge_identity i ON i.old = l.identity_id"
        ),
        [],
    )
    .at(at)?;
    // A likelihood cell in several caches keeps the one of the run that started last, as
    // cells do.
    tx.execute(
        &format!(
            "INSERT INTO main.likelihood_cells (model, dataset, test, serialization, seed, run_id, method,
                 positives, negatives, auroc, auroc_low, auroc_high, tpr_at_5_fpr, tpr_low, tpr_high,
                 p_value, roc, skipped)
             SELECT l.model, l.dataset, l.test, l.serialization, l.seed, r.new, l.method, l.positives,
                    l.negatives, l.auroc, l.auroc_low, l.auroc_high, l.tpr_at_5_fpr, l.tpr_low,
                    l.tpr_high, l.p_value, l.roc, l.skipped
             FROM {src}.likelihood_cells l JOIN temp.merge_run r ON r.old = l.run_id WHERE true
             ON CONFLICT (model, dataset, test, serialization, seed) DO UPDATE SET
               run_id = excluded.run_id, method = excluded.method, positives = excluded.positives,
               negatives = excluded.negatives, auroc = excluded.auroc, auroc_low = excluded.auroc_low,
               auroc_high = excluded.auroc_high, tpr_at_5_fpr = excluded.tpr_at_5_fpr,
               tpr_low = excluded.tpr_low, tpr_high = excluded.tpr_high, p_value = excluded.p_value,
               roc = excluded.roc, skipped = excluded.skipped
             WHERE (SELECT started_at FROM main.runs WHERE id = excluded.run_id)
                 > (SELECT started_at FROM main.runs WHERE id = likelihood_cells.run_id)"
        ),
        [],
    )
    .at(at)?;
    // Blind baselines likewise (a model-free computation: any run's is the same for the
    // same texts, but a later run may have read another file of the dataset).
    tx.execute(
        &format!(
            "INSERT INTO main.blind_baselines (dataset, serialization, seed, group_pair, run_id,
                 positives, negatives, auroc, auroc_low, auroc_high)
             SELECT b.dataset, b.serialization, b.seed, b.group_pair, r.new, b.positives,
                    b.negatives, b.auroc, b.auroc_low, b.auroc_high
             FROM {src}.blind_baselines b JOIN temp.merge_run r ON r.old = b.run_id WHERE true
             ON CONFLICT (dataset, serialization, seed, group_pair) DO UPDATE SET
               run_id = excluded.run_id, positives = excluded.positives,
               negatives = excluded.negatives, auroc = excluded.auroc,
               auroc_low = excluded.auroc_low, auroc_high = excluded.auroc_high
             WHERE (SELECT started_at FROM main.runs WHERE id = excluded.run_id)
                 > (SELECT started_at FROM main.runs WHERE id = blind_baselines.run_id)"
        ),
        [],
    )
    .at(at)?;
    // Row-order cells likewise: the run that started last stands.
    tx.execute(
        &format!(
            "INSERT INTO main.row_order_cells (model, dataset, seed, run_id, method, blocked_by, shards,
                 permutations, ranks, rank_sum, p_value, mean_gap_nats, skipped)
             SELECT o.model, o.dataset, o.seed, r.new, o.method, o.blocked_by, o.shards,
                    o.permutations, o.ranks, o.rank_sum, o.p_value, o.mean_gap_nats, o.skipped
             FROM {src}.row_order_cells o JOIN temp.merge_run r ON r.old = o.run_id WHERE true
             ON CONFLICT (model, dataset, seed) DO UPDATE SET
               run_id = excluded.run_id, method = excluded.method, blocked_by = excluded.blocked_by,
               shards = excluded.shards, permutations = excluded.permutations,
               ranks = excluded.ranks, rank_sum = excluded.rank_sum, p_value = excluded.p_value,
               mean_gap_nats = excluded.mean_gap_nats, skipped = excluded.skipped
             WHERE (SELECT started_at FROM main.runs WHERE id = excluded.run_id)
                 > (SELECT started_at FROM main.runs WHERE id = row_order_cells.run_id)"
        ),
        [],
    )
    .at(at)?;
    Ok(merged)
}

fn none_if_no_rows<T>(error: rusqlite::Error) -> rusqlite::Result<Option<T>> {
    match error {
        rusqlite::Error::QueryReturnedNoRows => Ok(None),
        other => Err(other),
    }
}
