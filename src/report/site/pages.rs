//! The site's pages other than cells: the index (the leaderboard, datasets, families,
//! tests), one page per model (series) and per dataset with the cells linked, one per model
//! family with its timeline, and the calibration study. Strings here are raw text; the
//! templates (`templates/site/`) escape them.

use std::collections::HashMap;

use anyhow::Context;
use askama::Template;

use super::cells::SiteCell;
use super::{Chrome, Link, Names, Nav};
use crate::analyze::{Analysis, MeanAccuracy, SeriesScores};
use crate::report::File;
use crate::report::evidence_page::{CalibrationView, calibration_view};
use crate::report::likelihood::{LikelihoodRow, rows as likelihood_rows};
use crate::report::page::format::{NONE, fixed2, interval, kind_name, p_value, percent};
use crate::report::page::{Table2Row, TimelineView, heatmaps, table2, timelines};
use crate::store::OWN_SOURCE;

/// A table cell that links to a cell page.
pub struct Mark {
    pub text: String,
    pub class: &'static str,
    pub href: String,
    pub title: String,
}

pub struct TestHead {
    pub number: u8,
    pub name: String,
}

/// A row of cells: a dataset of a model's page, or a model of a dataset's page.
pub struct GridRow {
    pub link: Link,
    pub note: String,
    pub marks: Vec<Option<Mark>>,
}

pub struct IndexRow {
    pub t: Table2Row,
    pub href: String,
    /// Sort keys of the numeric columns (empty where there is no value): contamination,
    /// knowledge, memorization, membership, 0-shot, 1-shot, per sample.
    pub sort: [String; 7],
}

pub struct DatasetLine {
    pub link: Link,
    pub released: String,
    pub passed: String,
    pub rate: String,
    pub rate_sort: String,
}

pub struct TestLine {
    pub number: u8,
    pub name: String,
    pub kind: &'static str,
    pub id: String,
}

#[derive(Template)]
#[template(path = "site/index.html")]
struct IndexPage<'a> {
    chrome: Chrome,
    summary: String,
    scoring_rule: &'a str,
    rows: Vec<IndexRow>,
    sampled: bool,
    sample_rule: &'static str,
    template_notes: Vec<String>,
    datasets: Vec<DatasetLine>,
    families: Vec<Link>,
    tests: Vec<TestLine>,
}

#[derive(Template)]
#[template(path = "site/model.html")]
struct ModelPage<'a> {
    chrome: Chrome,
    label: &'a str,
    facts: Vec<(&'static str, String)>,
    family: Option<Link>,
    t: &'a Table2Row,
    accuracy: Vec<[String; 6]>,
    heatmap: Option<&'a str>,
    heads: Vec<TestHead>,
    rows: Vec<GridRow>,
    others: Vec<Link>,
    /// The model's likelihood cells (detectors and dataset inference) with their blind
    /// baselines.
    likelihood: Vec<LikelihoodRow>,
}

#[derive(Template)]
#[template(path = "site/dataset.html")]
struct DatasetPage<'a> {
    chrome: Chrome,
    name: &'a str,
    facts: Vec<(&'static str, String)>,
    heads: Vec<TestHead>,
    rows: Vec<GridRow>,
}

#[derive(Template)]
#[template(path = "site/family.html")]
struct FamilyPage<'a> {
    chrome: Chrome,
    t: &'a TimelineView,
    members: Vec<Link>,
}

#[derive(Template)]
#[template(path = "site/likelihood.html")]
struct LikelihoodPage {
    chrome: Chrome,
    rows: Vec<LikelihoodRow>,
}

#[derive(Template)]
#[template(path = "site/calibration.html")]
struct CalibrationPage<'a> {
    chrome: Chrome,
    c: CalibrationView,
    scoring_rule: &'a str,
}

fn render(name: String, template: &dyn askama::DynTemplate, source: &str) -> anyhow::Result<File> {
    Ok(File {
        contents: template
            .dyn_render()
            .with_context(|| format!("rendering templates/site/{source} for {name}"))?,
        name,
    })
}

/// The index, model, dataset, family and calibration pages.
pub(super) fn pages(
    analysis: &Analysis,
    names: &Names,
    cells: &[SiteCell],
) -> anyhow::Result<Vec<File>> {
    let calibration = calibration_view(analysis);
    let nav = Nav::of(analysis);
    let timelines = timelines(analysis);
    let family_path = |t: &TimelineView| format!("families/{}.html", t.file_stem);
    let table2 = table2(&analysis.series);
    // The cell each (series, dataset, test) shows in tables.
    let primary: HashMap<(usize, &str, u8), &SiteCell> = cells
        .iter()
        .filter(|c| c.primary)
        .map(|c| ((c.series, c.dataset, c.test.number()), c))
        .collect();
    let mark = |c: &SiteCell, root: &str| {
        let (text, class) = c.mark(analysis);
        Mark {
            text,
            class,
            href: format!("{root}{}", c.path),
            title: format!(
                "{} · {} · test {}",
                analysis.series[c.series].label,
                crate::report::page::format::dataset_name_in(analysis, c.dataset),
                c.test.number()
            ),
        }
    };
    let heads_of = |scope: &dyn Fn(&SiteCell) -> bool| -> Vec<TestHead> {
        let mut numbers: Vec<u8> = cells
            .iter()
            .filter(|c| c.primary && scope(c))
            .map(|c| c.test.number())
            .collect();
        numbers.sort_unstable();
        numbers.dedup();
        numbers
            .into_iter()
            .map(|n| TestHead {
                number: n,
                name: analysis
                    .tests
                    .iter()
                    .find(|t| t.number == n)
                    .map_or_else(String::new, |t| t.name.clone()),
            })
            .collect()
    };
    let mut files = Vec::new();

    // Index.
    let index = IndexPage {
        chrome: Chrome::new("", "Leaderboard".into(), nav),
        summary: format!(
            "{} models · {} datasets · {} cells · scores from the {} template (tests 1, 2, 3 and 6 have no rows: one cell shared by every template)",
            analysis.series.len(),
            analysis.datasets.len(),
            cells.len(),
            analysis.primary_serialization
        ),
        scoring_rule: &analysis.scoring_rule,
        rows: table2
            .iter()
            .zip(&analysis.series)
            .enumerate()
            .map(|(i, (t, s))| IndexRow {
                t: clone_row(t),
                href: names.series[i].clone(),
                sort: sort_keys(s),
            })
            .collect(),
        sampled: analysis.series.iter().any(|s| s.samples > 1),
        sample_rule: crate::probe::SAMPLE_RULE,
        template_notes: crate::report::page::template_notes(analysis),
        datasets: analysis
            .datasets
            .iter()
            .map(|d| {
                let rate = analysis.dataset_pass_rates.iter().find(|r| r.key == d.id);
                DatasetLine {
                    link: Link {
                        text: d.name.clone(),
                        href: names.dataset(&d.id),
                    },
                    released: d.released.clone().unwrap_or_else(|| NONE.into()),
                    passed: rate
                        .map_or_else(|| NONE.into(), |r| format!("{}/{}", r.passed, r.cells)),
                    rate: rate
                        .and_then(|r| r.rate)
                        .map_or_else(|| NONE.into(), fixed2),
                    rate_sort: rate
                        .and_then(|r| r.rate)
                        .map_or_else(String::new, |r| r.to_string()),
                }
            })
            .collect(),
        families: timelines
            .iter()
            .map(|t| Link {
                text: t.family.clone(),
                href: family_path(t),
            })
            .collect(),
        tests: analysis
            .tests
            .iter()
            .filter(|t| cells.iter().any(|c| c.test.number() == t.number))
            .map(|t| TestLine {
                number: t.number,
                name: t.name.clone(),
                kind: kind_name(t.kind),
                id: t.id.clone(),
            })
            .collect(),
    };
    files.push(render("index.html".into(), &index, "index.html")?);

    // Models.
    let heatmap_of = heatmaps(analysis, &|s, d, t| {
        let dataset = analysis.datasets.get(d)?;
        Some(format!(
            "../{}",
            primary.get(&(s, dataset.id.as_str(), t))?.path
        ))
    });
    for (i, s) in analysis.series.iter().enumerate() {
        let heads = heads_of(&|c| c.series == i);
        let rows = analysis
            .datasets
            .iter()
            .filter(|d| {
                heads
                    .iter()
                    .any(|h| primary.contains_key(&(i, d.id.as_str(), h.number)))
            })
            .map(|d| GridRow {
                link: Link {
                    text: d.name.clone(),
                    href: format!("../{}", names.dataset(&d.id)),
                },
                note: String::new(),
                marks: heads
                    .iter()
                    .map(|h| {
                        primary
                            .get(&(i, d.id.as_str(), h.number))
                            .map(|c| mark(c, "../"))
                    })
                    .collect(),
            })
            .collect();
        let others = cells
            .iter()
            .filter(|c| c.series == i && !c.primary)
            .map(|c| Link {
                text: format!(
                    "{} · {} · template {} · seed {}",
                    crate::report::page::format::dataset_name_in(analysis, c.dataset),
                    c.test.id(),
                    c.serialization.unwrap_or(NONE),
                    c.seed.map_or_else(|| NONE.to_string(), |s| s.to_string())
                ),
                href: format!("../{}", c.path),
            })
            .collect();
        let family = s.family.as_deref().and_then(|f| {
            let t = timelines.iter().find(|t| t.family == f)?;
            Some(Link {
                text: format!("{f} timeline"),
                href: format!("../{}", family_path(t)),
            })
        });
        let page = ModelPage {
            chrome: Chrome::new("../", s.label.clone(), nav),
            label: &s.label,
            facts: model_facts(analysis, s),
            family,
            t: &table2[i],
            accuracy: [
                ("Membership (10)", &s.membership),
                ("0-shot (11)", &s.zero_shot),
                ("1-shot (12)", &s.one_shot),
            ]
            .into_iter()
            .filter_map(|(name, m)| Some(accuracy_line(name, m.as_ref()?)))
            .collect(),
            heatmap: heatmap_of
                .iter()
                .find(|h| h.model == s.key.model && h.source == s.key.source)
                .map(|h| h.svg.as_str()),
            heads,
            rows,
            others,
            likelihood: {
                let own: Vec<_> = analysis
                    .likelihood
                    .iter()
                    .filter(|c| c.model == s.key.model)
                    .cloned()
                    .collect();
                likelihood_rows(&own)
            },
        };
        files.push(render(names.series[i].clone(), &page, "model.html")?);
    }

    // Datasets.
    for d in &analysis.datasets {
        let heads = heads_of(&|c| c.dataset == d.id);
        let rows = analysis
            .series
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                heads
                    .iter()
                    .any(|h| primary.contains_key(&(*i, d.id.as_str(), h.number)))
            })
            .map(|(i, s)| GridRow {
                link: Link {
                    text: s.label.clone(),
                    href: format!("../{}", names.series[i]),
                },
                note: s.key.source.clone(),
                marks: heads
                    .iter()
                    .map(|h| {
                        primary
                            .get(&(i, d.id.as_str(), h.number))
                            .map(|c| mark(c, "../"))
                    })
                    .collect(),
            })
            .collect();
        let mut facts = vec![
            ("Id", d.id.clone()),
            ("Name in prompts", d.name.clone()),
            (
                "Released",
                d.released.clone().unwrap_or_else(|| NONE.into()),
            ),
        ];
        if let Some(origin) = analysis.provenance.dataset(&d.id) {
            facts.push(("Digest", origin.checksum.clone()));
            if let Some(v) = &origin.variant {
                facts.push(("Variant", v.clone()));
            }
        }
        if let Some(r) = analysis.dataset_pass_rates.iter().find(|r| r.key == d.id) {
            facts.push((
                "Tests 1–9 passed",
                format!(
                    "{}/{} cells ({})",
                    r.passed,
                    r.cells,
                    r.rate.map_or_else(|| NONE.into(), fixed2)
                ),
            ));
        }
        let page = DatasetPage {
            chrome: Chrome::new("../", d.name.clone(), nav),
            name: &d.name,
            facts,
            heads,
            rows,
        };
        files.push(render(names.dataset(&d.id), &page, "dataset.html")?);
    }

    // Families.
    for t in &timelines {
        let members = analysis
            .series
            .iter()
            .enumerate()
            .filter(|(_, s)| s.family.as_deref() == Some(t.family.as_str()))
            .map(|(i, s)| Link {
                text: if s.key.source == OWN_SOURCE {
                    s.label.clone()
                } else {
                    format!("{} ({})", s.label, s.key.source)
                },
                href: format!("../{}", names.series[i]),
            })
            .collect();
        let page = FamilyPage {
            chrome: Chrome::new("../", format!("{} timeline", t.family), nav),
            t,
            members,
        };
        files.push(render(family_path(t), &page, "family.html")?);
    }

    if nav.likelihood {
        let page = LikelihoodPage {
            chrome: Chrome::new("", "Likelihood detectors".into(), nav),
            rows: likelihood_rows(&analysis.likelihood),
        };
        files.push(render("likelihood.html".into(), &page, "likelihood.html")?);
    }
    if let Some(c) = calibration {
        let page = CalibrationPage {
            chrome: Chrome::new("", "Calibration".into(), nav),
            c,
            scoring_rule: &analysis.scoring_rule,
        };
        files.push(render(
            "calibration.html".into(),
            &page,
            "calibration.html",
        )?);
    }
    Ok(files)
}

fn clone_row(t: &Table2Row) -> Table2Row {
    Table2Row {
        rank: t.rank,
        label: t.label.clone(),
        model: t.model.clone(),
        source: t.source.clone(),
        contamination: t.contamination.clone(),
        fraction: t.fraction.clone(),
        knowledge: t.knowledge.clone(),
        memorization: t.memorization.clone(),
        membership: t.membership.clone(),
        zero_shot: t.zero_shot.clone(),
        one_shot: t.one_shot.clone(),
        sample_contamination: t.sample_contamination.clone(),
        explorer_anchor: None,
        best_contamination: t.best_contamination,
        best_membership: t.best_membership,
        best_zero_shot: t.best_zero_shot,
        best_one_shot: t.best_one_shot,
    }
}

fn sort_keys(s: &SeriesScores) -> [String; 7] {
    let key = |v: Option<f64>| v.map_or_else(String::new, |v| v.to_string());
    let mean = |m: &Option<MeanAccuracy>| key(m.as_ref().map(|m| m.mean));
    [
        key(s.contamination),
        key(s.knowledge),
        key(s.memorization),
        mean(&s.membership),
        mean(&s.zero_shot),
        mean(&s.one_shot),
        key(s.sample_contamination),
    ]
}

fn accuracy_line(name: &str, m: &MeanAccuracy) -> [String; 6] {
    [
        name.to_string(),
        fixed2(m.mean),
        format!("{} ({}/{})", fixed2(m.pooled), m.correct, m.trials),
        interval(&m.interval),
        percent(m.invalid_rate),
        p_value(m.p_value),
    ]
}

fn model_facts(analysis: &Analysis, s: &SeriesScores) -> Vec<(&'static str, String)> {
    let or_none = |v: &Option<String>| v.clone().unwrap_or_else(|| NONE.into());
    let mut facts = vec![
        ("Id", s.key.model.clone()),
        ("Source", s.key.source.clone()),
        ("Rank", format!("{} of {}", s.rank, analysis.series.len())),
        ("Family", or_none(&s.family)),
        ("Released", or_none(&s.release_date)),
        ("Training cut-off", or_none(&s.training_cutoff)),
    ];
    if let Some(step) = s.step {
        facts.push(("Training step", step.to_string()));
    }
    if let Some(m) = analysis.provenance.model(&s.key.model) {
        facts.push((
            "Identity",
            format!(
                "backend {} · model {} · revision {}",
                m.backend, m.model, m.revision
            ),
        ));
    }
    if !s.served.is_empty() {
        // An API name is an alias: the versions that really answered this model's cached
        // answers, as the servers reported them.
        facts.push(("Served versions", crate::store::describe_served(&s.served)));
    }
    facts.push((
        "Scored with template",
        s.serialization
            .clone()
            .unwrap_or_else(|| "– (only tests without rows)".into()),
    ));
    if s.samples > 1 {
        facts.push(("Samples per prompt", s.samples.to_string()));
    }
    facts
}
