//! The report's figures: heatmaps (SVG and TikZ), the timelines of model families and the
//! scatter of knowledge against memorization.

use askama::Template;

use super::format::*;
use crate::analyze::{Analysis, SeriesKey, SeriesScores};
use crate::report::file_stem;
use crate::report::svg::{self, Point, Square};
use crate::report::timeline;
use crate::store::OWN_SOURCE;
use std::collections::{BTreeMap, HashMap};

pub struct TimelineView {
    pub anchor: String,
    pub family: String,
    pub axis: &'static str,
    pub svg: String,
    /// pgfplots figure (already escaped).
    pub tikz: String,
    pub file_stem: String,
    /// Versions in order, with their x value as shown.
    pub versions: String,
    pub left_out: String,
}

pub struct Heatmap {
    pub anchor: String,
    pub label: String,
    pub model: String,
    pub source: String,
    pub score: String,
    pub svg: String,
    /// Rendered `heatmap.tex` (already escaped).
    pub tikz: String,
    pub file_stem: String,
}

pub struct RateRow {
    pub name: String,
    pub passed: u64,
    pub cells: u64,
    pub rate: String,
    /// With `report --calibration`, on test rows: the test's minimum detectable dose from
    /// the card (`≥ 16`, `not reached`; `–` when the card did not measure it).
    pub calibration: Option<String>,
}

pub struct TikzSquare {
    x: usize,
    y: usize,
    style: &'static str,
    passed: bool,
}

/// One heatmap per series; `link(series, dataset, test)` (0-based positions in the
/// analysis, test number 1–9) is where a square leads (`#anchor` or a relative path).
pub(in crate::report) fn heatmaps(
    analysis: &Analysis,
    link: &dyn Fn(usize, usize, u8) -> Option<String>,
) -> Vec<Heatmap> {
    let tests: Vec<_> = analysis.tests.iter().filter(|t| t.number <= 9).collect();
    let test_names: [String; 9] =
        std::array::from_fn(|i| tests.get(i).map_or_else(String::new, |t| t.name.clone()));
    let dataset_index = analysis.dataset_index();
    let dataset_names: Vec<String> = analysis.datasets.iter().map(|d| d.name.clone()).collect();
    let mut grids: BTreeMap<&SeriesKey, Vec<[Square; 9]>> = BTreeMap::new();
    for cell in &analysis.grid {
        let grid = grids
            .entry(&cell.key)
            .or_insert_with(|| vec![[Square::Missing; 9]; analysis.datasets.len()]);
        if let (Some(&d), Some(t)) = (
            dataset_index.get(cell.dataset.as_str()),
            (cell.number as usize).checked_sub(1),
        ) {
            grid[d][t] = match (cell.passed, &cell.skipped) {
                (true, _) => Square::Passed,
                (false, Some(_)) => Square::Skipped,
                (false, None) => Square::NotPassed,
            };
        }
    }
    let mut stems: HashMap<String, usize> = HashMap::new();
    analysis
        .series
        .iter()
        .enumerate()
        .filter_map(|(index, s)| {
            let squares = grids.get(&s.key)?;
            let title = if s.key.source == OWN_SOURCE {
                s.label.clone()
            } else {
                format!("{} ({})", s.label, s.key.source)
            };
            let mut stem = if s.key.source == OWN_SOURCE {
                file_stem(&s.key.model)
            } else {
                file_stem(&format!("{}-{}", s.key.source, s.key.model))
            };
            // Distinct ids may sanitize to one stem: number the later ones.
            let seen = stems.entry(stem.clone()).or_insert(0);
            *seen += 1;
            if *seen > 1 {
                stem = format!("{stem}-{seen}");
            }
            let tikz = heatmap_tikz(&title, &test_names, &dataset_names, squares);
            let links: Vec<(usize, usize, String)> = (0..dataset_names.len())
                .flat_map(|d| (0..9).map(move |t| (d, t)))
                .filter_map(|(d, t)| Some((d, t, link(index, d, t as u8 + 1)?)))
                .collect();
            let svg = svg::link_heatmap(
                &svg::heatmap(&title, &test_names, &dataset_names, squares),
                &dataset_names,
                &links,
            );
            Some(Heatmap {
                anchor: format!("heatmap-{}", index + 1),
                svg,
                tikz,
                label: s.label.clone(),
                model: s.key.model.clone(),
                source: s.key.source.clone(),
                score: match s.contamination {
                    Some(c) => format!("{:.2} ({}/{})", c, s.passed, s.cells),
                    None => NONE.to_string(),
                },
                file_stem: stem,
            })
        })
        .collect()
}

pub(super) fn heatmap_tikz(
    title: &str,
    test_names: &[String; 9],
    dataset_names: &[String],
    squares: &[[Square; 9]],
) -> String {
    let squares_view = squares
        .iter()
        .enumerate()
        .flat_map(|(x, column)| {
            column
                .iter()
                .enumerate()
                .map(move |(y, square)| TikzSquare {
                    x,
                    y,
                    style: match square {
                        Square::Passed => "detected",
                        Square::NotPassed => "notdetected",
                        Square::Skipped => "skippedcell",
                        Square::Missing => "missingcell",
                    },
                    passed: *square == Square::Passed,
                })
        })
        .collect();
    HeatmapTex {
        title,
        datasets: dataset_names.iter().cloned().enumerate().collect(),
        tests: test_names.iter().cloned().enumerate().collect(),
        squares: squares_view,
        width: dataset_names.len(),
    }
    .render()
    .expect("templates/heatmap.tex renders plain values")
}

pub(in crate::report) fn timelines(analysis: &Analysis) -> Vec<TimelineView> {
    let mut stems: HashMap<String, usize> = HashMap::new();
    timeline::timelines(&analysis.series)
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let mut stem = file_stem(&t.family);
            let seen = stems.entry(stem.clone()).or_insert(0);
            *seen += 1;
            if *seen > 1 {
                stem = format!("{stem}-{seen}");
            }
            let (axis, x_text): (&'static str, fn(f64) -> String) = match t.axis {
                timeline::Axis::Step => ("training step", |x| format!("step {x:.0}")),
                timeline::Axis::ReleaseDate => ("release date", |x| {
                    let year = x.floor();
                    format!("{year:.0}-{:02}", ((x - year) * 12.0).round() as i64 + 1)
                }),
            };
            TimelineView {
                anchor: format!("timeline-{}", i + 1),
                family: t.family.clone(),
                axis,
                svg: timeline::svg(&t),
                tikz: timeline::tikz(&t),
                file_stem: stem,
                versions: t
                    .points
                    .iter()
                    .map(|p| {
                        if p.served.is_empty() {
                            format!("{} ({})", p.label, x_text(p.x))
                        } else {
                            format!(
                                "{} ({}; served {})",
                                p.label,
                                x_text(p.x),
                                p.served.join(", ")
                            )
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                left_out: t.left_out.join(", "),
            }
        })
        .collect()
}

pub(super) fn scatter(series: &[SeriesScores]) -> Option<String> {
    let points: Vec<Point> = series
        .iter()
        .filter_map(|s| {
            let point = Point {
                label: s.label.clone(),
                contamination: s.contamination?,
                zero_shot: s.zero_shot.as_ref().map(|m| m.mean),
                one_shot: s.one_shot.as_ref().map(|m| m.mean),
            };
            (point.zero_shot.is_some() || point.one_shot.is_some()).then_some(point)
        })
        .collect();
    (!points.is_empty()).then(|| svg::scatter(&points))
}

#[derive(Template)]
#[template(path = "heatmap.tex", syntax = "tex")]
pub(super) struct HeatmapTex<'a> {
    title: &'a str,
    datasets: Vec<(usize, String)>,
    tests: Vec<(usize, String)>,
    squares: Vec<TikzSquare>,
    width: usize,
}
