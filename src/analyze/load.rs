//! Loading the cache's rows into the analytics database: models, datasets, cells, and
//! trials through Arrow batches (a paper grid has millions of trials).

use super::*;

impl Analytics {
    /// Loads models (labels, families, release dates and cut-offs).
    pub fn load_models(&mut self, models: &[ModelRow]) -> Result<()> {
        let mut appender = self.conn.appender("models").doing("loading models")?;
        for m in models {
            if let Some(step) = m.step {
                self.steps.insert(m.id.clone(), step);
            }
            appender
                .append_row(params![
                    m.id,
                    m.label,
                    m.family,
                    m.release_date,
                    m.training_cutoff
                ])
                .doing("loading models")?;
        }
        Ok(())
    }

    /// Replaces the dataset table: the built-in descriptors (in the paper's order, with
    /// their release dates), then datasets known only to the cache, by id.
    pub fn load_datasets(&mut self, from_cache: &[DatasetRow]) -> Result<()> {
        let mut infos: Vec<DatasetInfo> = builtin_descriptors()?
            .into_iter()
            .map(|d| DatasetInfo {
                id: d.id,
                name: d.name,
                released: d.released,
            })
            .collect();
        let mut extra: Vec<&DatasetRow> = from_cache
            .iter()
            .filter(|row| !infos.iter().any(|i| i.id == row.id))
            .collect();
        extra.sort_by(|a, b| a.id.cmp(&b.id));
        infos.extend(extra.into_iter().map(|row| DatasetInfo {
            id: row.id.clone(),
            name: row.name.clone(),
            released: None,
        }));
        self.conn
            .execute_batch("DELETE FROM datasets")
            .doing("loading datasets")?;
        self.append_datasets(&infos)?;
        self.datasets = infos;
        Ok(())
    }

    fn append_datasets(&self, infos: &[DatasetInfo]) -> Result<()> {
        let offset = self.datasets_count()?;
        let mut appender = self.conn.appender("datasets").doing("loading datasets")?;
        for (position, d) in infos.iter().enumerate() {
            appender
                .append_row(params![
                    d.id,
                    d.name,
                    d.released,
                    (offset + position) as i32
                ])
                .doing("loading datasets")?;
        }
        Ok(())
    }

    fn datasets_count(&self) -> Result<usize> {
        self.conn
            .query_row("SELECT count(*) FROM datasets", [], |r| r.get::<_, i64>(0))
            .map(|n| n as usize)
            .doing("counting datasets")
    }

    /// Loads cell results, ours and imported.
    pub fn load_cells(&mut self, cells: &[CellRow]) -> Result<()> {
        let mut appender = self.conn.appender("cells").doing("loading cells")?;
        for c in cells {
            appender
                .append_row(params![
                    c.source,
                    c.model,
                    c.dataset,
                    c.test.id(),
                    c.serialization.as_deref().unwrap_or(NO_SERIALIZATION),
                    c.seed,
                    c.result.passed,
                    c.result.trials as i64,
                    c.result.passed_trials as i64,
                    c.result.invalid_trials as i64,
                    c.skipped,
                    c.samples.len().max(1) as i64,
                    if c.samples.is_empty() {
                        i64::from(c.result.passed)
                    } else {
                        c.samples.iter().filter(|s| s.passed).count() as i64
                    },
                ])
                .doing("loading cells")?;
        }
        drop(appender);
        // Datasets seen only in cells (e.g. imported under an unknown id) still get a row.
        let unknown: Vec<String> = {
            let mut stmt = self
                .conn
                .prepare("SELECT DISTINCT dataset FROM cells WHERE dataset NOT IN (SELECT id FROM datasets) ORDER BY dataset")
                .doing("loading cells")?;
            stmt.query_map([], |r| r.get(0))
                .doing("loading cells")?
                .collect::<duckdb::Result<_>>()
                .doing("loading cells")?
        };
        let infos: Vec<DatasetInfo> = unknown
            .into_iter()
            .map(|id| DatasetInfo {
                name: id.clone(),
                id,
                released: None,
            })
            .collect();
        self.append_datasets(&infos)?;
        self.datasets.extend(infos);
        Ok(())
    }

    /// Loads trial verdicts (ours). Takes an iterator so that millions of trials stream
    /// into DuckDB in columnar Arrow batches, without a second copy in memory; each
    /// trial's cell key is interned to an integer (see `tables.sql`).
    pub fn load_trials<'a>(
        &mut self,
        trials: impl IntoIterator<Item = TrialOutcome<'a>>,
    ) -> Result<()> {
        let mut appender = self.conn.appender("trials").doing("loading trials")?;
        let mut batch = TrialBatch::default();
        let mut new_cells: Vec<(u32, TrialOutcome<'a>)> = Vec::new();
        // Trials arrive grouped by cell (the store's key order): most share the previous
        // trial's cell, which skips the hash lookup.
        let mut last: Option<(TrialOutcome<'a>, u32)> = None;
        for t in trials {
            let same_cell = last.as_ref().is_some_and(|(p, _)| {
                p.model == t.model
                    && p.dataset == t.dataset
                    && p.test == t.test
                    && p.serialization == t.serialization
                    && p.seed == t.seed
            });
            let cell_id = match last {
                Some((_, id)) if same_cell => id,
                _ => {
                    let key: CellKey = (
                        t.model.to_string(),
                        t.dataset.to_string(),
                        t.test,
                        t.serialization.unwrap_or(NO_SERIALIZATION).to_string(),
                        t.seed,
                    );
                    let next = self.trial_cells.len() as u32;
                    let id = *self.trial_cells.entry(key).or_insert(next);
                    if id == next {
                        new_cells.push((id, t));
                    }
                    id
                }
            };
            last = Some((t, cell_id));
            batch.cell_id.append_value(cell_id);
            batch.trial.append_value(t.trial);
            batch.passed.append_value(t.passed);
            batch.invalid.append_value(t.invalid);
            batch.len += 1;
            if batch.len == TRIAL_BATCH_ROWS {
                appender
                    .append_record_batch(batch.finish())
                    .doing("loading trials")?;
            }
        }
        if batch.len > 0 {
            appender
                .append_record_batch(batch.finish())
                .doing("loading trials")?;
        }
        appender.flush().doing("loading trials")?;
        drop(appender);
        let mut cells = self.conn.appender("trial_cells").doing("loading trials")?;
        for (id, t) in new_cells {
            cells
                .append_row(params![
                    id,
                    t.model,
                    t.dataset,
                    t.test.id(),
                    t.serialization.unwrap_or(NO_SERIALIZATION),
                    t.seed
                ])
                .doing("loading trials")?;
        }
        Ok(())
    }
}

/// Rows per Arrow batch when loading trials.
pub(super) const TRIAL_BATCH_ROWS: usize = 1 << 17;

/// Columns of the `trials` table being built (see `tables.sql`).
#[derive(Default)]
pub(super) struct TrialBatch {
    cell_id: UInt32Builder,
    trial: UInt32Builder,
    passed: BooleanBuilder,
    invalid: BooleanBuilder,
    len: usize,
}

impl TrialBatch {
    /// The rows pushed so far as a record batch; the builders start over.
    fn finish(&mut self) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("cell_id", DataType::UInt32, false),
            Field::new("trial", DataType::UInt32, false),
            Field::new("passed", DataType::Boolean, false),
            Field::new("invalid", DataType::Boolean, false),
        ]);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.cell_id.finish()),
            Arc::new(self.trial.finish()),
            Arc::new(self.passed.finish()),
            Arc::new(self.invalid.finish()),
        ];
        self.len = 0;
        RecordBatch::try_new(Arc::new(schema), columns).expect("columns match the schema")
    }
}
