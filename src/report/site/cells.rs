//! The site's cells and their pages: every scored cell of the analysis (tests 1–9 from the
//! grid, 10–12 from the accuracy table, imported ones included) and every other cell of
//! ours with trials (other templates and seeds, verbatim tests), each on a page of its own
//! with its prompts, outputs, verdict, evidence, chance level, p-value and a
//! reproducibility block.

use std::collections::HashMap;

use anyhow::Context;
use askama::Template;

use super::{Chrome, Link, Names, Options, Unique, shell_word, spec_path};
use crate::analyze::{AccuracyCell, Analysis, GridCell, SeriesKey};
use crate::probe::TestId;
use crate::report::evidence_page::{EvidenceRow, evidence_rows};
use crate::report::explorer::{PromptView, Prompts, TrialView, cell_view};
use crate::report::file_stem;
use crate::report::page::format::{NONE, fixed2, kind_name};
use crate::report::page::{SignificanceRow, accuracy_detail, significance_rows};
use crate::report::{File, page};
use crate::store::OWN_SOURCE;

/// One cell of the site.
pub(super) struct SiteCell<'a> {
    /// Position of its series in the analysis.
    pub series: usize,
    pub dataset: &'a str,
    pub test: TestId,
    pub serialization: Option<&'a str>,
    /// `None` for imported cells of tests 10–12 (the accuracy table keeps no seed).
    pub seed: Option<u64>,
    /// The cell the series' scores use (the one the tables show); others are other
    /// templates or seeds.
    pub primary: bool,
    pub grid: Option<&'a GridCell>,
    pub accuracy: Option<&'a AccuracyCell>,
    /// Its entry of the trial explorer (cells of ours).
    pub explorer: Option<usize>,
    pub run_id: Option<i64>,
    /// `cells/<name>.html`.
    pub path: String,
}

impl SiteCell<'_> {
    /// What a table shows for it: ✓ passed, ✗ not passed, `skipped`, or the accuracy.
    pub fn mark(&self, analysis: &Analysis) -> (String, &'static str) {
        if let Some(g) = self.grid {
            return match (g.passed, &g.skipped) {
                (true, _) => ("\u{2713}".into(), "pass"),
                (false, Some(_)) => ("skipped".into(), "fail"),
                (false, None) => ("\u{2717}".into(), "fail"),
            };
        }
        if let Some(a) = self.accuracy {
            return (fixed2(a.accuracy), "na");
        }
        match self.explorer.map(|i| &analysis.explorer[i]) {
            Some(e) if e.passed => ("\u{2713}".into(), "pass"),
            Some(_) => ("\u{2717}".into(), "fail"),
            None => (NONE.into(), "na"),
        }
    }
}

type ExplorerKey<'a> = (&'a str, &'a str, TestId, Option<&'a str>);

/// Every cell of the site, by series (Table 2's order), dataset, test, primary first.
pub(super) fn collect<'a>(analysis: &'a Analysis, names: &Names) -> Vec<SiteCell<'a>> {
    let series_index: HashMap<&SeriesKey, usize> = analysis
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| (&s.key, i))
        .collect();
    let own_series: HashMap<&str, usize> = analysis
        .series
        .iter()
        .enumerate()
        .filter(|(_, s)| s.key.source == OWN_SOURCE)
        .map(|(i, s)| (s.key.model.as_str(), i))
        .collect();
    // Explorer cells by (model, dataset, test, template), lowest seed first.
    let mut explorer: HashMap<ExplorerKey<'a>, Vec<(u64, usize)>> = HashMap::new();
    for (i, e) in analysis.explorer.iter().enumerate() {
        explorer
            .entry((
                e.key.model.as_str(),
                e.dataset.as_str(),
                e.test,
                e.serialization.as_deref(),
            ))
            .or_default()
            .push((e.seed, i));
    }
    explorer.values_mut().for_each(|v| v.sort_unstable());
    let mut taken = vec![false; analysis.explorer.len()];
    let mut take = |key: ExplorerKey<'a>, seed: Option<u64>| -> Option<usize> {
        let found = explorer
            .get(&key)?
            .iter()
            .find(|(s, i)| !taken[*i] && seed.is_none_or(|seed| seed == *s))?
            .1;
        taken[found] = true;
        Some(found)
    };
    // The template a series scores a test with (none for tests without rows).
    let scored_template = |s: usize, test: TestId| -> Option<&'a str> {
        test.serializes_rows()
            .then(|| analysis.series[s].serialization.as_deref())
            .flatten()
    };
    let mut cells = Vec::new();
    for g in &analysis.grid {
        let (Some(&s), Some(test)) = (series_index.get(&g.key), TestId::parse(&g.test)) else {
            continue;
        };
        let own = g.key.source == OWN_SOURCE;
        let serialization = g.serialization.as_deref();
        let explorer = own
            .then(|| {
                take(
                    (&g.key.model, &g.dataset, test, serialization),
                    Some(g.seed),
                )
            })
            .flatten();
        cells.push(SiteCell {
            series: s,
            dataset: &g.dataset,
            test,
            serialization,
            seed: Some(g.seed),
            primary: true,
            grid: Some(g),
            accuracy: None,
            explorer,
            run_id: None,
            path: String::new(),
        });
    }
    for a in &analysis.accuracy {
        let (Some(&s), Some(test)) = (series_index.get(&a.key), TestId::parse(&a.test)) else {
            continue;
        };
        let serialization = scored_template(s, test);
        let explorer = (a.key.source == OWN_SOURCE)
            .then(|| take((&a.key.model, &a.dataset, test, serialization), None))
            .flatten();
        cells.push(SiteCell {
            series: s,
            dataset: &a.dataset,
            test,
            serialization,
            seed: explorer.map(|i| analysis.explorer[i].seed),
            primary: true,
            grid: None,
            accuracy: Some(a),
            explorer,
            run_id: None,
            path: String::new(),
        });
    }
    // The rest of ours: the primary cell of a test without a table (verbatim tests), then
    // other templates and seeds.
    let mut shown: std::collections::HashSet<(usize, &str, TestId)> = cells
        .iter()
        .map(|c| (c.series, c.dataset, c.test))
        .collect();
    for (i, e) in analysis.explorer.iter().enumerate() {
        let Some(&s) = own_series.get(e.key.model.as_str()) else {
            continue;
        };
        if taken[i] {
            continue;
        }
        let primary = e.serialization.as_deref() == scored_template(s, e.test)
            && shown.insert((s, e.dataset.as_str(), e.test));
        cells.push(SiteCell {
            series: s,
            dataset: &e.dataset,
            test: e.test,
            serialization: e.serialization.as_deref(),
            seed: Some(e.seed),
            primary,
            grid: None,
            accuracy: None,
            explorer: Some(i),
            run_id: None,
            path: String::new(),
        });
    }
    let dataset_index = analysis.dataset_index();
    cells.sort_by(|a, b| {
        let key = |c: &SiteCell<'a>| {
            (
                c.series,
                dataset_index.get(c.dataset).copied().unwrap_or(usize::MAX),
                c.dataset,
                c.test.number(),
                !c.primary,
                c.serialization,
                c.seed,
            )
        };
        key(a).cmp(&key(b))
    });
    let mut unique = Unique::default();
    for c in &mut cells {
        c.run_id = c.explorer.and_then(|i| analysis.explorer[i].run_id);
        let mut stem = format!(
            "{}--{}--{:02}",
            names.series_stems[c.series],
            names
                .datasets
                .get(c.dataset)
                .map_or("dataset", String::as_str),
            c.test.number()
        );
        if !c.primary {
            stem.push_str(&format!(
                "--{}--s{}",
                file_stem(c.serialization.unwrap_or("none")),
                c.seed.unwrap_or(0)
            ));
        }
        c.path = format!("cells/{}.html", unique.name(&stem));
    }
    cells
}

/// One prompt and the trials that answered it (one per sample).
pub struct TrialGroup<'p> {
    pub prompt: &'p PromptView,
    pub trials: Vec<TrialView>,
}

pub struct Repro {
    pub lines: Vec<(&'static str, String)>,
    pub spec_href: Option<String>,
    pub command: Option<String>,
    pub command_note: String,
    pub request_keys: Vec<(String, String)>,
}

#[derive(Template)]
#[template(path = "site/cell.html")]
pub struct CellPage<'p> {
    pub chrome: Chrome,
    pub heading: String,
    pub model: Link,
    pub dataset: Link,
    pub verdict: String,
    pub verdict_class: &'static str,
    pub facts: Vec<(&'static str, String)>,
    pub counts: Option<String>,
    pub note: Option<String>,
    pub groups: Vec<TrialGroup<'p>>,
    pub repro: Repro,
    /// Other cells of the same model, dataset and test (templates, seeds).
    pub siblings: Vec<Link>,
}

/// The page of every cell.
pub(super) fn pages(
    analysis: &Analysis,
    names: &Names,
    cells: &[SiteCell],
    options: &Options,
) -> anyhow::Result<Vec<File>> {
    let dataset_name = |id: &str| page::format::dataset_name_in(analysis, id);
    let test_name = |id: &str| {
        analysis
            .tests
            .iter()
            .find(|t| t.id == id)
            .map_or_else(|| id.to_string(), |t| format!("{} {}", t.number, t.name))
    };
    let evidence = evidence_rows(analysis);
    let evidence_of: HashMap<(&str, &str, &str, Option<&str>), &EvidenceRow> = analysis
        .evidence
        .iter()
        .zip(&evidence)
        .map(|(e, row)| {
            (
                (
                    e.model.as_str(),
                    e.dataset.as_str(),
                    e.test.as_str(),
                    e.serialization.as_deref(),
                ),
                row,
            )
        })
        .collect();
    let significance = significance_rows(analysis);
    let significance_of: HashMap<(&str, &str, &str, Option<&str>, u64), &SignificanceRow> =
        analysis
            .significance
            .iter()
            .zip(&significance)
            .map(|(c, row)| {
                (
                    (
                        c.model.as_str(),
                        c.dataset.as_str(),
                        c.test.as_str(),
                        c.serialization.as_deref(),
                        c.seed,
                    ),
                    row,
                )
            })
            .collect();
    let nav = super::Nav::of(analysis);
    let mut same_test: HashMap<(usize, &str, TestId), Vec<usize>> = HashMap::new();
    for (i, c) in cells.iter().enumerate() {
        same_test
            .entry((c.series, c.dataset, c.test))
            .or_default()
            .push(i);
    }
    let mut prompts = Prompts::default();
    let mut files = Vec::with_capacity(cells.len());
    for cell in cells {
        let series = &analysis.series[cell.series];
        let own = series.key.source == OWN_SOURCE;
        let test = cell.test.id();
        let view = cell.explorer.map(|i| {
            cell_view(
                &analysis.explorer[i],
                String::new(),
                &mut prompts,
                &dataset_name,
                &test_name,
            )
        });
        let (mark, class) = cell.mark(analysis);
        let verdict = match (cell.grid, cell.accuracy, &view) {
            (Some(g), _, _) => match &g.skipped {
                Some(why) => format!("skipped: {why}"),
                None if g.passed => "passed: contamination detected".into(),
                None => "not passed".into(),
            },
            (_, Some(a), _) => format!("accuracy {}", fixed2(a.accuracy)),
            (_, _, Some(v)) if v.passed => "passed".into(),
            _ => "not passed".into(),
        };
        let info = analysis.tests.iter().find(|t| t.id == test);
        let mut facts: Vec<(&'static str, String)> = vec![
            ("Model", format!("{} ({})", series.label, series.key.model)),
            ("Source", series.key.source.clone()),
            (
                "Dataset",
                format!("{} ({})", dataset_name(cell.dataset), cell.dataset),
            ),
            (
                "Test",
                info.map_or_else(
                    || test.to_string(),
                    |t| format!("{} {} ({}, {})", t.number, t.name, kind_name(t.kind), t.id),
                ),
            ),
            (
                "Template",
                cell.serialization
                    .map_or_else(|| "– (no rows in the prompt)".into(), str::to_string),
            ),
            (
                "Seed",
                cell.seed
                    .map_or_else(|| NONE.to_string(), |s| s.to_string()),
            ),
        ];
        if let Some(g) = cell.grid.filter(|g| g.samples > 1) {
            facts.push((
                "Samples",
                format!(
                    "{}/{} pass on their own (the cell passes when any does)",
                    g.samples_passed, g.samples
                ),
            ));
        }
        if let Some(a) = cell.accuracy {
            facts.push(("Accuracy", accuracy_detail(a)));
        }
        let evidence_key = (
            series.key.model.as_str(),
            cell.dataset,
            test,
            cell.serialization,
        );
        if let Some(e) = own.then(|| evidence_of.get(&evidence_key)).flatten() {
            facts.push(("Evidence", e.summary.clone()));
            facts.push(("Echoes", e.echoes.clone()));
            facts.push((
                "Chance level",
                if e.chance_basis.is_empty() {
                    e.chance.clone()
                } else {
                    format!("{} ({})", e.chance, e.chance_basis)
                },
            ));
            facts.push(("Strict profile", e.strict.clone()));
        }
        let significance_key = cell.seed.map(|seed| {
            (
                series.key.model.as_str(),
                cell.dataset,
                test,
                cell.serialization,
                seed,
            )
        });
        if let Some(s) = significance_key
            .filter(|_| own)
            .and_then(|k| significance_of.get(&k))
        {
            facts.push((
                "p-value",
                format!(
                    "{} (Holm-adjusted over the model's cells: {}; Benjamini–Hochberg q over the report's cells: {}); {} trials passed; chance {}",
                    s.p_value, s.p_holm, s.q_value, s.count, s.chance
                ),
            ));
        }
        let note = if !own {
            Some(format!(
                "Imported from the published results of source `{}`: the cache holds the verdict only, no prompts, outputs or requests.",
                series.key.source
            ))
        } else if view.is_none() {
            Some("No trials are stored for this cell.".to_string())
        } else {
            None
        };
        let (counts, trials) = match view {
            Some(v) => (Some(v.counts), v.trials),
            None => (None, Vec::new()),
        };
        let request_keys = trials
            .iter()
            .map(|t| (t.head.clone(), t.request_key.clone()))
            .collect();
        let mut groups: Vec<TrialGroup> = Vec::new();
        let mut group_of: HashMap<usize, usize> = HashMap::new();
        for t in trials {
            let at = *group_of.entry(t.prompt).or_insert_with(|| {
                groups.push(TrialGroup {
                    prompt: &prompts.views[t.prompt],
                    trials: Vec::new(),
                });
                groups.len() - 1
            });
            groups[at].trials.push(t);
        }
        let mut repro = repro(analysis, cell, series, options);
        repro.request_keys = request_keys;
        let siblings = same_test[&(cell.series, cell.dataset, cell.test)]
            .iter()
            .map(|&o| &cells[o])
            .filter(|o| o.path != cell.path)
            .map(|o| Link {
                text: format!(
                    "template {} · seed {}{}",
                    o.serialization.unwrap_or(NONE),
                    o.seed.map_or_else(|| NONE.to_string(), |s| s.to_string()),
                    if o.primary { " (scored)" } else { "" }
                ),
                href: format!("../{}", o.path),
            })
            .collect();
        let heading = format!(
            "{} · {} · {}",
            test_name(test),
            dataset_name(cell.dataset),
            series.label
        );
        let page = CellPage {
            chrome: Chrome::new("../", heading.clone(), nav),
            heading,
            model: Link {
                text: series.label.clone(),
                href: format!("../{}", names.series[cell.series]),
            },
            dataset: Link {
                text: dataset_name(cell.dataset),
                href: format!("../{}", names.dataset(cell.dataset)),
            },
            verdict: if cell.accuracy.is_some() {
                verdict
            } else {
                format!("{mark} {verdict}")
            },
            verdict_class: class,
            facts,
            counts,
            note,
            groups,
            repro,
            siblings,
        };
        files.push(File {
            name: cell.path.clone(),
            contents: page
                .render()
                .with_context(|| format!("rendering templates/site/cell.html for {}", cell.path))?,
        });
    }
    Ok(files)
}

/// The reproducibility block: what the cell's answers are keyed by and the command that
/// decides it again from the cache.
fn repro(
    analysis: &Analysis,
    cell: &SiteCell,
    series: &crate::analyze::SeriesScores,
    options: &Options,
) -> Repro {
    let provenance = &analysis.provenance;
    let mut lines = Vec::new();
    if let Some(m) = provenance.model(&series.key.model) {
        lines.push((
            "Model",
            format!(
                "{} · backend {} · model {} · revision {}",
                m.id, m.backend, m.model, m.revision
            ),
        ));
    }
    if let Some(d) = provenance.dataset(cell.dataset) {
        lines.push((
            "Dataset digest",
            format!(
                "{} · {}{}",
                d.id,
                d.checksum,
                d.variant
                    .as_deref()
                    .map_or_else(String::new, |v| format!(" · variant {v}"))
            ),
        ));
    }
    let run = cell.run_id.and_then(|id| provenance.run(id));
    if let Some(r) = run {
        lines.push((
            "Run",
            format!(
                "#{} · spec {} · started {} · {}",
                r.id, r.spec_name, r.started_at, r.status
            ),
        ));
        lines.push(("Spec hash (blake3)", r.spec_blake3.clone()));
        lines.push(("Decided by", format!("tabcontam {}", r.version)));
    }
    lines.push((
        "Page written by",
        format!("tabcontam {}", env!("CARGO_PKG_VERSION")),
    ));
    let (command, command_note) = match run {
        Some(r) => (
            Some(format!(
                "tabcontam run {} --model {} --offline --cache {}",
                spec_path(r.id),
                shell_word(&series.key.model),
                shell_word(&options.cache)
            )),
            "Run from the site's folder (the spec is the run's own, as stored in the cache; paths in it, such as local model files, are relative to where it first ran). It sends nothing: every cell of the model is decided again from the cached answers, and a missing answer is reported, not requested. Add --data-dir DIR when the run read its datasets from one.".to_string(),
        ),
        None if series.key.source != OWN_SOURCE => (
            Some(format!(
                "tabcontam import-results DIR --format paper --cache {}",
                shell_word(&options.cache)
            )),
            "DIR: the folder of the published per-cell CSVs the cache imported (with --id-prefix when they were imported under one).".to_string(),
        ),
        None => (
            None,
            "The cell records no run (nothing to decide it again from).".to_string(),
        ),
    };
    Repro {
        lines,
        spec_href: run.map(|r| format!("../{}", spec_path(r.id))),
        command,
        command_note,
        request_keys: Vec::new(),
    }
}
