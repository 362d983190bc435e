//! The report queries of `schema/duckdb/*.sql`, each turned into plain structs in a fully
//! specified order (see the determinism note of the module).

use super::*;

impl Analytics {
    /// Runs every report query.
    pub fn analyze(&self, options: &Options) -> Result<Analysis> {
        let mut timings = Timings::from_env();
        self.conn
            .execute_batch("DELETE FROM settings")
            .doing("setting the primary template")?;
        self.conn
            .execute(
                "INSERT INTO settings VALUES (?)",
                params![options.primary_serialization],
            )
            .doing("setting the primary template")?;
        self.conn
            .execute_batch(PREPARE_SQL.1)
            .in_file(PREPARE_SQL.0)?;
        timings.lap(PREPARE_SQL.0);

        let mut series = self.contamination()?;
        for s in &mut series {
            s.step = self.steps.get(&s.key.model).copied();
        }
        timings.lap(CONTAMINATION_SQL.0);
        let mut accuracy = self.accuracy()?;
        timings.lap(ACCURACY_SQL.0);
        Self::attach_accuracy_means(&mut series, &accuracy);
        rank(&mut series);
        let order: HashMap<SeriesKey, usize> = series
            .iter()
            .enumerate()
            .map(|(i, s)| (s.key.clone(), i))
            .collect();
        accuracy.sort_by_cached_key(|c| order[&c.key]); // stable: keeps test and dataset order

        let mut grid = self.grid()?;
        grid.sort_by_cached_key(|c| order[&c.key]);
        timings.lap(GRID_SQL.0);
        attach_sample_rates(&mut series, &grid);
        let (test_pass_rates, dataset_pass_rates) = self.pass_rates()?;
        timings.lap(PASS_RATES_SQL.0);
        let used: std::collections::HashSet<String> = self.used_datasets()?;
        let serialization = self.serialization_study(&order)?;
        timings.lap("schema/duckdb/serialization_*.sql");
        let evolution = self.evolution(&series)?;
        timings.lap(EVOLUTION_SQL.0);
        let negative_controls = self.negative_controls(&order)?;
        timings.lap(NEGATIVE_CONTROLS_SQL.0);

        let templates = self.templates()?;
        Ok(Analysis {
            primary_serialization: options.primary_serialization.clone(),
            templates,
            tests: TestId::ALL.iter().map(|&t| test_info(t)).collect(),
            datasets: self
                .datasets
                .iter()
                .filter(|d| used.contains(&d.id))
                .cloned()
                .collect(),
            correlations: correlations(&series),
            serialization,
            evolution,
            negative_controls,
            series,
            grid,
            test_pass_rates,
            dataset_pass_rates,
            accuracy,
            examples: Vec::new(),
            significance: Vec::new(),
            scoring: options.scoring,
            scoring_rule: options.scoring.rule(),
            evidence: Vec::new(),
            calibration: None,
            explorer: Vec::new(),
            explorer_trials: options.explorer_trials,
            likelihood: Vec::new(),
            row_order: Vec::new(),
            provenance: Default::default(),
        })
    }

    /// The templates with at least one cell, by id.
    fn templates(&self) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare("SELECT DISTINCT serialization FROM cells WHERE serialization <> ? ORDER BY 1")
            .doing("listing templates")?;
        let rows = stmt
            .query_map([NO_SERIALIZATION], |r| r.get(0))
            .doing("listing templates")?;
        rows.collect::<duckdb::Result<_>>()
            .doing("listing templates")
    }

    fn used_datasets(&self) -> Result<std::collections::HashSet<String>> {
        let mut stmt = self
            .conn
            .prepare("SELECT DISTINCT dataset FROM cells")
            .doing("listing datasets")?;
        let rows = stmt.query_map([], |r| r.get(0)).doing("listing datasets")?;
        rows.collect::<duckdb::Result<_>>()
            .doing("listing datasets")
    }

    fn contamination(&self) -> Result<Vec<SeriesScores>> {
        let (file, sql) = CONTAMINATION_SQL;
        let mut stmt = self.conn.prepare(sql).in_file(file)?;
        let rows = stmt
            .query_map([], |r| {
                let datasets = r.get::<_, i64>("datasets")? as usize;
                let passed = r.get::<_, i64>("passed")? as usize;
                let knowledge = r.get::<_, i64>("knowledge_passed")? as usize;
                let memorization = r.get::<_, i64>("memorization_passed")? as usize;
                let cells = 9 * datasets;
                let ratio = |n: usize, d: usize| (d > 0).then(|| n as f64 / d as f64);
                Ok(SeriesScores {
                    key: SeriesKey {
                        source: r.get("source")?,
                        model: r.get("model")?,
                    },
                    rank: 0,
                    label: r.get("label")?,
                    family: r.get("family")?,
                    release_date: r.get("release_date")?,
                    training_cutoff: r.get("training_cutoff")?,
                    step: None,
                    serialization: r.get("serialization")?,
                    datasets,
                    passed,
                    cells,
                    contamination: ratio(passed, cells),
                    knowledge: ratio(knowledge, 3 * datasets),
                    memorization: ratio(memorization, 6 * datasets),
                    skipped: r.get::<_, i64>("skipped")? as usize,
                    samples: 1,
                    sample_contamination: None,
                    membership: None,
                    zero_shot: None,
                    one_shot: None,
                    served: Vec::new(),
                })
            })
            .in_file(file)?;
        rows.collect::<duckdb::Result<_>>().in_file(file)
    }

    fn accuracy(&self) -> Result<Vec<AccuracyCell>> {
        let (file, sql) = ACCURACY_SQL;
        let mut stmt = self.conn.prepare(sql).in_file(file)?;
        let rows = stmt
            .query_map([], |r| {
                let test: String = r.get("test")?;
                let trials = r.get::<_, i64>("n")? as u64;
                let correct = r.get::<_, i64>("k")? as u64;
                let invalid = r.get::<_, i64>("invalid")? as u64;
                Ok(AccuracyCell {
                    samples: r.get::<_, i64>("samples")? as u64,
                    key: SeriesKey {
                        source: r.get("source")?,
                        model: r.get("model")?,
                    },
                    dataset: r.get("dataset")?,
                    p_value: (test == TestId::Membership.id())
                        .then(|| crate::significance::binomial_upper_tail(correct, trials, 0.5))
                        .flatten(),
                    test,
                    trials,
                    correct,
                    invalid,
                    accuracy: correct as f64 / trials as f64,
                    invalid_rate: invalid as f64 / trials as f64,
                    interval: stats::wilson(correct, trials),
                })
            })
            .in_file(file)?;
        rows.collect::<duckdb::Result<_>>().in_file(file)
    }

    fn attach_accuracy_means(series: &mut [SeriesScores], accuracy: &[AccuracyCell]) {
        let mut by_series: BTreeMap<(&SeriesKey, &str), Vec<&AccuracyCell>> = BTreeMap::new();
        for cell in accuracy {
            by_series
                .entry((&cell.key, cell.test.as_str()))
                .or_default()
                .push(cell);
        }
        for s in series.iter_mut() {
            let mean_of = |test: TestId| {
                by_series
                    .get(&(&s.key, test.id()))
                    .map(|c| mean_accuracy(c, test))
            };
            s.membership = mean_of(TestId::Membership);
            s.zero_shot = mean_of(TestId::Classify0Shot);
            s.one_shot = mean_of(TestId::Classify1Shot);
        }
    }

    fn grid(&self) -> Result<Vec<GridCell>> {
        let (file, sql) = GRID_SQL;
        let mut stmt = self.conn.prepare(sql).in_file(file)?;
        let rows = stmt
            .query_map([], |r| {
                // Columns by position: this query returns one row per cell (hundreds of
                // thousands on large caches).
                let number: i32 = r.get(4)?;
                let test = TestId::ALL[(number.clamp(1, 12) - 1) as usize];
                let serialization: String = r.get(6)?;
                Ok(GridCell {
                    key: SeriesKey {
                        source: r.get(0)?,
                        model: r.get(1)?,
                    },
                    dataset: r.get(2)?,
                    number: test.number(),
                    kind: test.kind(),
                    test: r.get(3)?,
                    serialization: (serialization != NO_SERIALIZATION).then_some(serialization),
                    seed: r.get(7)?,
                    passed: r.get(8)?,
                    skipped: r.get(9)?,
                    samples: r.get::<_, i64>(10)? as u64,
                    samples_passed: r.get::<_, i64>(11)? as u64,
                    detection_rate: 0.0,
                })
                .map(|mut cell: GridCell| {
                    cell.detection_rate = cell.samples_passed as f64 / cell.samples.max(1) as f64;
                    cell
                })
            })
            .in_file(file)?;
        rows.collect::<duckdb::Result<_>>().in_file(file)
    }

    fn pass_rates(&self) -> Result<(Vec<PassRate>, Vec<PassRate>)> {
        let (file, sql) = PASS_RATES_SQL;
        let mut stmt = self.conn.prepare(sql).in_file(file)?;
        let rows = stmt
            .query_map([], |r| {
                let passed = r.get::<_, i64>("passed")? as u64;
                let cells = r.get::<_, i64>("cells")? as u64;
                Ok((
                    r.get::<_, String>("scope")?,
                    PassRate {
                        key: r.get("key")?,
                        passed,
                        cells,
                        rate: (cells > 0).then(|| passed as f64 / cells as f64),
                    },
                ))
            })
            .in_file(file)?
            .collect::<duckdb::Result<Vec<_>>>()
            .in_file(file)?;
        let (mut tests, mut datasets) = (Vec::new(), Vec::new());
        for (scope, rate) in rows {
            if scope == "test" {
                tests.push(rate)
            } else {
                datasets.push(rate)
            }
        }
        tests.sort_by_key(|r| TestId::parse(&r.key).map(|t| t.number()));
        let position: HashMap<&str, usize> = self
            .datasets
            .iter()
            .enumerate()
            .map(|(i, d)| (d.id.as_str(), i))
            .collect();
        datasets.sort_by_key(|r| position.get(r.key.as_str()).copied().unwrap_or(usize::MAX));
        Ok((tests, datasets))
    }

    fn serialization_study(&self, order: &HashMap<SeriesKey, usize>) -> Result<SerializationStudy> {
        let (file, sql) = SERIALIZATION_SUMMARY_SQL;
        let mut stmt = self.conn.prepare(sql).in_file(file)?;
        let mut summaries = stmt
            .query_map([], |r| {
                Ok(SerializationSummary {
                    key: SeriesKey {
                        source: r.get("source")?,
                        model: r.get("model")?,
                    },
                    seed: r.get("seed")?,
                    templates: r.get::<_, i64>("templates")? as u64,
                    compared: r.get::<_, i64>("compared")? as u64,
                    changed: r.get::<_, i64>("changed")? as u64,
                })
            })
            .in_file(file)?
            .collect::<duckdb::Result<Vec<_>>>()
            .in_file(file)?;
        summaries.sort_by_key(|s| order.get(&s.key).copied());

        let (file, sql) = SERIALIZATION_CHANGES_SQL;
        let mut stmt = self.conn.prepare(sql).in_file(file)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    SeriesKey {
                        source: r.get("source")?,
                        model: r.get("model")?,
                    },
                    r.get::<_, u64>("seed")?,
                    r.get::<_, String>("dataset")?,
                    r.get::<_, String>("test")?,
                    r.get::<_, String>("serialization")?,
                    r.get::<_, bool>("passed")?,
                ))
            })
            .in_file(file)?
            .collect::<duckdb::Result<Vec<_>>>()
            .in_file(file)?;
        let mut changes: Vec<SerializationChange> = Vec::new();
        for (key, seed, dataset, test, serialization, passed) in rows {
            let same = changes.last().is_some_and(|c| {
                c.key == key && c.seed == seed && c.dataset == dataset && c.test == test
            });
            if !same {
                changes.push(SerializationChange {
                    key,
                    seed,
                    dataset,
                    test,
                    passed_with: Vec::new(),
                    failed_with: Vec::new(),
                });
            }
            let change = changes.last_mut().expect("pushed above");
            if passed {
                change.passed_with.push(serialization)
            } else {
                change.failed_with.push(serialization)
            }
        }
        changes.sort_by_key(|c| order.get(&c.key).copied());
        Ok(SerializationStudy { summaries, changes })
    }

    fn evolution(&self, series: &[SeriesScores]) -> Result<Vec<EvolutionStep>> {
        let (file, sql) = EVOLUTION_SQL;
        let mut stmt = self.conn.prepare(sql).in_file(file)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>("family")?,
                    SeriesKey {
                        source: r.get("prev_source")?,
                        model: r.get("prev_model")?,
                    },
                    SeriesKey {
                        source: r.get("source")?,
                        model: r.get("model")?,
                    },
                    r.get::<_, String>("release_date")?,
                    r.get::<_, Option<String>>("dataset")?,
                    r.get::<_, Option<String>>("test")?,
                    r.get::<_, Option<bool>>("gained")?,
                ))
            })
            .in_file(file)?
            .collect::<duckdb::Result<Vec<_>>>()
            .in_file(file)?;
        let score: HashMap<&SeriesKey, Option<f64>> =
            series.iter().map(|s| (&s.key, s.contamination)).collect();
        let mut steps: Vec<EvolutionStep> = Vec::new();
        for (family, from, to, to_release_date, dataset, test, gained) in rows {
            let same = steps
                .last()
                .is_some_and(|s| s.family == family && s.from == from && s.to == to);
            if !same {
                let delta = match (
                    score.get(&to).copied().flatten(),
                    score.get(&from).copied().flatten(),
                ) {
                    (Some(new), Some(old)) => Some(new - old),
                    _ => None,
                };
                steps.push(EvolutionStep {
                    family,
                    from,
                    to,
                    to_release_date,
                    gained: Vec::new(),
                    lost: Vec::new(),
                    delta,
                });
            }
            let step = steps.last_mut().expect("pushed above");
            if let (Some(dataset), Some(test), Some(gained)) = (dataset, test, gained) {
                let cell = CellRef { dataset, test };
                if gained {
                    step.gained.push(cell)
                } else {
                    step.lost.push(cell)
                }
            }
        }
        Ok(steps)
    }

    fn negative_controls(&self, order: &HashMap<SeriesKey, usize>) -> Result<NegativeControls> {
        let (file, sql) = NEGATIVE_CONTROLS_SQL;
        let mut stmt = self.conn.prepare(sql).in_file(file)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    SeriesKey {
                        source: r.get("source")?,
                        model: r.get("model")?,
                    },
                    r.get::<_, String>("training_cutoff")?,
                    r.get::<_, String>("dataset")?,
                    r.get::<_, String>("released")?,
                    r.get::<_, String>("test")?,
                    r.get::<_, bool>("passed")?,
                ))
            })
            .in_file(file)?
            .collect::<duckdb::Result<Vec<_>>>()
            .in_file(file)?;
        let mut controls = NegativeControls::default();
        for (key, training_cutoff, dataset, released, test, passed) in rows {
            let same = controls
                .eligible
                .last()
                .is_some_and(|p| p.key == key && p.dataset == dataset);
            if !same {
                controls.eligible.push(ControlPair {
                    key: key.clone(),
                    training_cutoff,
                    dataset: dataset.clone(),
                    released,
                    cells: 0,
                    passed: 0,
                });
            }
            let pair = controls.eligible.last_mut().expect("pushed above");
            pair.cells += 1;
            if passed {
                pair.passed += 1;
                controls
                    .suspected
                    .push(SuspectedCell { key, dataset, test });
            }
        }
        controls
            .eligible
            .sort_by_key(|p| order.get(&p.key).copied());
        controls
            .suspected
            .sort_by_key(|p| order.get(&p.key).copied());
        Ok(controls)
    }
}
