//! CSV files for pandas users: `grid.csv` (one row per scored cell of tests 1–9),
//! `scores.csv` (Table 2, one row per model, with the template its scores come from), `accuracy.csv` (tests 10–12 per dataset),
//! `evidence.csv` (every cell with its echo count and chance level) and, with a calibration
//! study, `calibration.csv` (sensitivity per dose and false-positive rates per test).
//! RFC 4180: fields with a comma, quote or line break are quoted; values are never altered.

use std::collections::HashMap;
use std::fmt::Write;

use super::File;
use crate::analyze::{Analysis, Interval, MeanAccuracy, SeriesKey};

pub fn files(analysis: &Analysis) -> Vec<File> {
    let labels: HashMap<&SeriesKey, &str> = analysis
        .series
        .iter()
        .map(|s| (&s.key, s.label.as_str()))
        .collect();
    let label = |key: &SeriesKey| {
        labels
            .get(key)
            .copied()
            .unwrap_or(key.model.as_str())
            .to_string()
    };

    let mut grid = Table::new(&[
        "source",
        "model",
        "label",
        "dataset",
        "test",
        "number",
        "kind",
        "serialization",
        "seed",
        "passed",
        "skipped",
        "samples",
        "samples_passed",
    ]);
    for c in &analysis.grid {
        grid.row([
            c.key.source.clone(),
            c.key.model.clone(),
            label(&c.key),
            c.dataset.clone(),
            c.test.clone(),
            c.number.to_string(),
            format!("{:?}", c.kind).to_lowercase(),
            c.serialization.clone().unwrap_or_default(),
            c.seed.to_string(),
            u8::from(c.passed).to_string(),
            c.skipped.clone().unwrap_or_default(),
            c.samples.to_string(),
            c.samples_passed.to_string(),
        ]);
    }

    let mut scores = Table::new(&[
        "rank",
        "source",
        "model",
        "label",
        "family",
        "release_date",
        "training_cutoff",
        "datasets",
        "passed",
        "cells",
        "contamination",
        "knowledge",
        "memorization",
        "membership",
        "membership_pooled",
        "membership_ci_low",
        "membership_ci_high",
        "membership_p_value",
        "membership_invalid_rate",
        "zero_shot",
        "zero_shot_pooled",
        "zero_shot_ci_low",
        "zero_shot_ci_high",
        "zero_shot_invalid_rate",
        "one_shot",
        "one_shot_pooled",
        "one_shot_ci_low",
        "one_shot_ci_high",
        "one_shot_invalid_rate",
        "serialization",
        "samples",
        "sample_contamination",
    ]);
    for s in &analysis.series {
        let mut row = vec![
            s.rank.to_string(),
            s.key.source.clone(),
            s.key.model.clone(),
            s.label.clone(),
            s.family.clone().unwrap_or_default(),
            s.release_date.clone().unwrap_or_default(),
            s.training_cutoff.clone().unwrap_or_default(),
            s.datasets.to_string(),
            s.passed.to_string(),
            s.cells.to_string(),
            number(s.contamination),
            number(s.knowledge),
            number(s.memorization),
        ];
        row.extend(mean_columns(s.membership.as_ref(), true));
        row.extend(mean_columns(s.zero_shot.as_ref(), false));
        row.extend(mean_columns(s.one_shot.as_ref(), false));
        // The template the scores come from (empty: only tests without rows).
        row.push(s.serialization.clone().unwrap_or_default());
        row.push(s.samples.to_string());
        row.push(number(s.sample_contamination));
        scores.row(row);
    }

    let mut accuracy = Table::new(&[
        "source",
        "model",
        "label",
        "dataset",
        "test",
        "trials",
        "correct",
        "invalid",
        "accuracy",
        "invalid_rate",
        "ci_low",
        "ci_high",
        "p_value",
        "samples",
    ]);
    for c in &analysis.accuracy {
        let (low, high) = bounds(c.interval);
        accuracy.row([
            c.key.source.clone(),
            c.key.model.clone(),
            label(&c.key),
            c.dataset.clone(),
            c.test.clone(),
            c.trials.to_string(),
            c.correct.to_string(),
            c.invalid.to_string(),
            c.accuracy.to_string(),
            c.invalid_rate.to_string(),
            low,
            high,
            number(c.p_value),
            c.samples.to_string(),
        ]);
    }
    let mut evidence = Table::new(&[
        "model",
        "dataset",
        "test",
        "number",
        "serialization",
        "passed",
        "strict_passed",
        "score",
        "trials",
        "passed_trials",
        "echo_trials",
        "chance",
        "chance_basis",
        "summary",
    ]);
    for e in &analysis.evidence {
        evidence.row([
            e.model.clone(),
            e.dataset.clone(),
            e.test.clone(),
            e.number.to_string(),
            e.serialization.clone().unwrap_or_default(),
            u8::from(e.passed).to_string(),
            u8::from(e.strict_passed).to_string(),
            e.score.to_string(),
            e.trials.to_string(),
            e.passed_trials.to_string(),
            e.echo_trials.map(|n| n.to_string()).unwrap_or_default(),
            number(e.chance),
            e.chance_basis.clone().unwrap_or_default(),
            e.summary.clone(),
        ]);
    }
    let mut files = vec![File {
        name: "evidence.csv".into(),
        contents: evidence.text,
    }];
    if let Some(c) = &analysis.calibration {
        let mut calibration = Table::new(&[
            "test", "measure", "dose", "hits", "total", "rate", "ci_low", "ci_high",
        ]);
        let mut put =
            |test: &str, measure: &str, dose: String, r: &crate::analyze::calibration::Rate| {
                let (low, high) = bounds(r.interval);
                calibration.row([
                    test.to_string(),
                    measure.to_string(),
                    dose,
                    r.hits.to_string(),
                    r.total.to_string(),
                    number(r.rate),
                    low,
                    high,
                ]);
            };
        for t in &c.tests {
            for d in &t.sensitivity {
                put(&t.test, "sensitivity", d.dose.to_string(), &d.sensitivity);
            }
            put(
                &t.test,
                "false_positive_rate",
                String::new(),
                &t.false_positives,
            );
            put(
                &t.test,
                "synthetic_false_positive_rate",
                String::new(),
                &t.synthetic_false_positives,
            );
        }
        files.push(File {
            name: "calibration.csv".into(),
            contents: calibration.text,
        });
    }
    let mut all = vec![
        File {
            name: "grid.csv".into(),
            contents: grid.text,
        },
        File {
            name: "scores.csv".into(),
            contents: scores.text,
        },
        File {
            name: "accuracy.csv".into(),
            contents: accuracy.text,
        },
    ];
    all.extend(files);
    all
}

fn number(x: Option<f64>) -> String {
    x.map(|x| x.to_string()).unwrap_or_default()
}

fn bounds(interval: Option<Interval>) -> (String, String) {
    interval.map_or_else(Default::default, |i| {
        (i.low.to_string(), i.high.to_string())
    })
}

fn mean_columns(mean: Option<&MeanAccuracy>, with_p_value: bool) -> Vec<String> {
    let (low, high) = bounds(mean.and_then(|m| m.interval));
    let mut columns = vec![
        number(mean.map(|m| m.mean)),
        number(mean.map(|m| m.pooled)),
        low,
        high,
    ];
    if with_p_value {
        columns.push(number(mean.and_then(|m| m.p_value)));
    }
    columns.push(number(mean.map(|m| m.invalid_rate)));
    columns
}

struct Table {
    text: String,
}

impl Table {
    fn new(header: &[&str]) -> Table {
        let mut table = Table {
            text: String::new(),
        };
        table.row(header.iter().map(|h| h.to_string()));
        table
    }

    fn row(&mut self, fields: impl IntoIterator<Item = String>) {
        for (i, field) in fields.into_iter().enumerate() {
            if i > 0 {
                self.text.push(',');
            }
            if field.contains([',', '"', '\n', '\r']) {
                write!(self.text, "\"{}\"", field.replace('"', "\"\""))
                    .expect("writing to a String");
            } else {
                self.text.push_str(&field);
            }
        }
        self.text.push('\n');
    }
}
