//! The likelihood section of the reports: a table of every detector's AUROC, TPR at 5 % FPR
//! and p-value, ROC curves (one figure per model, dataset and template; SVG with plotters,
//! pgfplots coordinates for LaTeX) and an AUROC heatmap per detector (model × dataset).
//!
//! Labels are untrusted: plotters escapes SVG text, [`super::tex::escape`] LaTeX, and the
//! HTML table goes through askama's escaper.

use std::collections::{BTreeMap, BTreeSet};

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::tex::escape;
use crate::likelihood::{Detector, dataset_inference};
use crate::store::LikelihoodCellRow;

/// One row of the likelihood table.
pub struct LikelihoodRow {
    pub model: String,
    pub dataset: String,
    pub serialization: String,
    pub detector: String,
    pub auroc: String,
    pub tpr: String,
    pub p_value: String,
    pub method: String,
    /// Why there is no AUROC (empty otherwise).
    pub note: String,
    /// The blind baseline's AUROC and interval (`–` when none was computed).
    pub blind: String,
    /// The detector's AUROC does not exceed the blind baseline's upper end (or 0.5): the
    /// templates mark it (†) and say why under the table.
    pub no_better_than_blind: bool,
}

/// One membership cell (test 10) beside the blind baseline of its rows.
pub struct MembershipBlindRow {
    pub model: String,
    pub dataset: String,
    pub serialization: String,
    pub accuracy: String,
    pub blind: String,
    /// The accuracy does not exceed the blind baseline's upper end or 0.5 (marked †).
    pub no_better_than_blind: bool,
}

/// The membership cells that have a blind baseline, in the evidence's (model, dataset,
/// template) order.
pub fn membership_blind_rows(
    evidence: &[crate::analyze::evidence::EvidenceCell],
) -> Vec<MembershipBlindRow> {
    evidence
        .iter()
        .filter_map(|e| {
            let (auroc, [low, high]) = (e.blind_auroc?, e.blind_auroc_interval?);
            Some(MembershipBlindRow {
                model: e.model.clone(),
                dataset: e.dataset.clone(),
                serialization: e.serialization.clone().unwrap_or_default(),
                accuracy: format!("{:.3}", e.score),
                blind: format_blind(auroc, low, high),
                no_better_than_blind: e.no_better_than_blind == Some(true),
            })
        })
        .collect()
}

fn format_blind(auroc: f64, low: f64, high: f64) -> String {
    format!("{auroc:.3} [{low:.3}, {high:.3}]")
}

/// One row of test 17's table, `row-order`.
pub struct RowOrderRow {
    pub model: String,
    pub dataset: String,
    /// Columns whose runs bound the permutations, or `–`.
    pub blocked_by: String,
    /// `shards × permutations`.
    pub design: String,
    /// Per-shard ranks (permutations below the file order), e.g. `19 17 3 …`.
    pub ranks: String,
    pub gap: String,
    pub p_value: String,
    pub method: String,
    pub note: String,
}

/// Test 17's rows, in the store's (model, dataset, seed) order.
pub fn row_order_rows(cells: &[crate::store::RowOrderCellRow]) -> Vec<RowOrderRow> {
    cells
        .iter()
        .map(|c| {
            let s = c.stats.as_ref();
            RowOrderRow {
                model: c.model.clone(),
                dataset: c.dataset.clone(),
                blocked_by: match c.blocked_by.is_empty() {
                    true => "–".into(),
                    false => c.blocked_by.join(", "),
                },
                design: s.map_or("–".into(), |s| {
                    format!("{} × {}", s.shards, s.permutations)
                }),
                ranks: s.map_or("–".into(), |s| {
                    s.ranks
                        .iter()
                        .map(|r| r.to_string())
                        .collect::<Vec<_>>()
                        .join(" ")
                }),
                gap: s.map_or("–".into(), |s| format!("{:+.2}", s.mean_gap_nats)),
                p_value: s.map_or("–".into(), |s| format_p(s.p_value)),
                method: c.method.clone(),
                note: c.skipped.clone().unwrap_or_default(),
            }
        })
        .collect()
}

/// A p-value as a reader compares it with 0.05: four decimals, or scientific below 1e-4.
fn format_p(p: f64) -> String {
    if p < 1e-4 {
        format!("{p:.1e}")
    } else {
        format!("{p:.4}")
    }
}

/// ROC curves of the detectors of one (model, dataset, serialization).
pub struct RocFigure {
    pub title: String,
    pub svg: String,
    pub tikz: String,
}

/// AUROC of one detector per model (rows) and dataset (columns).
pub struct AurocHeatmap {
    pub detector: String,
    pub svg: String,
    pub tikz: String,
}

pub struct LikelihoodView {
    pub rows: Vec<LikelihoodRow>,
    /// Whether any cell has a blind baseline (caches of schema 10 have none: their table
    /// keeps its columns).
    pub has_blind: bool,
    pub roc_figures: Vec<RocFigure>,
    pub heatmaps: Vec<AurocHeatmap>,
}

const COLOURS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];
const PGF_COLOURS: [&str; 4] = ["blue", "red", "teal", "violet"];

fn detector_of(test: &str) -> Option<Detector> {
    Detector::parse(test).or_else(|| Detector::parse_ground_truth(test))
}

/// Whether the cell compares rows trained on with held-out rows (ground truth).
fn is_ground_truth(test: &str) -> bool {
    test.ends_with(crate::likelihood::GROUND_TRUTH_SUFFIX)
}

fn label_of(test: &str) -> String {
    match (Detector::parse(test), Detector::parse_ground_truth(test)) {
        (Some(d), _) => d.label().to_string(),
        (None, Some(d)) => format!("{} (trained vs held-out rows)", d.label()),
        (None, None) if test == dataset_inference::TEST_ID => {
            "Dataset inference (detectors combined, Welch p)".to_string()
        }
        (None, None) if dataset_inference::is_test_id(test) => {
            "Dataset inference (trained vs held-out rows)".to_string()
        }
        (None, None) => test.to_string(),
    }
}

/// Builds the section; `None` when the cache has no likelihood cell.
pub fn view(cells: &[LikelihoodCellRow]) -> Option<LikelihoodView> {
    if cells.is_empty() {
        return None;
    }
    let rows = rows(cells);
    // ROC figures: one per (model, dataset, serialization), detectors in their order.
    // Ground-truth cells (rows trained on vs held out) get figures of their own.
    let mut groups: BTreeMap<(&str, &str, &str, bool), Vec<&LikelihoodCellRow>> = BTreeMap::new();
    for c in cells.iter().filter(|c| c.stats.is_some()) {
        groups
            .entry((
                &c.model,
                &c.dataset,
                &c.serialization,
                is_ground_truth(&c.test),
            ))
            .or_default()
            .push(c);
    }
    let roc_figures = groups
        .into_iter()
        .map(|((model, dataset, serialization, truth), mut group)| {
            group.sort_by_key(|c| detector_of(&c.test));
            let curves: Vec<(String, &[(f64, f64)])> = group
                .iter()
                .map(|c| {
                    let s = c.stats.as_ref().expect("filtered");
                    (
                        format!("{} ({:.3})", label_of(&c.test), s.auroc),
                        s.roc.as_slice(),
                    )
                })
                .collect();
            let title = if truth {
                format!("{model}, {dataset}, {serialization}: rows trained on vs held out")
            } else {
                format!("{model}, {dataset}, {serialization}")
            };
            RocFigure {
                svg: roc_svg(&title, &curves),
                tikz: roc_tikz(&curves),
                title,
            }
        })
        .collect();
    // Heatmaps: per detector, model × dataset; a cell with several templates shows the
    // first template's AUROC (by id).
    let models: BTreeSet<&str> = cells.iter().map(|c| c.model.as_str()).collect();
    let datasets: BTreeSet<&str> = cells.iter().map(|c| c.dataset.as_str()).collect();
    let models: Vec<&str> = models.into_iter().collect();
    let datasets: Vec<&str> = datasets.into_iter().collect();
    let detectors: BTreeSet<Detector> = cells
        .iter()
        .filter_map(|c| Detector::parse(&c.test))
        .collect();
    let heatmaps = detectors
        .into_iter()
        .map(|detector| {
            let values: Vec<Vec<Option<f64>>> = models
                .iter()
                .map(|m| {
                    datasets
                        .iter()
                        .map(|d| {
                            cells
                                .iter()
                                .filter(|c| {
                                    c.model == *m && c.dataset == *d && c.test == detector.test_id()
                                })
                                .find_map(|c| c.stats.as_ref().map(|s| s.auroc))
                        })
                        .collect()
                })
                .collect();
            AurocHeatmap {
                detector: detector.label().to_string(),
                svg: heatmap_svg(detector.label(), &models, &datasets, &values),
                tikz: heatmap_tikz(&models, &datasets, &values),
            }
        })
        .collect();
    Some(LikelihoodView {
        rows,
        has_blind: cells.iter().any(|c| c.blind.is_some()),
        roc_figures,
        heatmaps,
    })
}

/// One table row per likelihood cell (the report's table and the site's model pages).
pub fn rows(cells: &[LikelihoodCellRow]) -> Vec<LikelihoodRow> {
    cells
        .iter()
        .map(|c| {
            let (auroc, tpr, p) = match &c.stats {
                Some(s) => (
                    format!("{:.3} [{:.3}, {:.3}]", s.auroc, s.auroc_low, s.auroc_high),
                    format!(
                        "{:.3} [{:.3}, {:.3}]",
                        s.tpr_at_5_fpr, s.tpr_low, s.tpr_high
                    ),
                    format!("{:.4}", s.p_value),
                ),
                None => ("–".into(), "–".into(), "–".into()),
            };
            LikelihoodRow {
                model: c.model.clone(),
                dataset: c.dataset.clone(),
                serialization: c.serialization.clone(),
                detector: label_of(&c.test),
                auroc,
                tpr,
                p_value: p,
                method: c.method.clone(),
                note: c.skipped.clone().unwrap_or_default(),
                blind: c.blind.map_or("–".into(), |b| {
                    format_blind(b.auroc, b.auroc_low, b.auroc_high)
                }),
                no_better_than_blind: c
                    .blind
                    .zip(c.stats.as_ref())
                    .is_some_and(|(b, s)| b.not_exceeded_by(s.auroc)),
            }
        })
        .collect()
}

fn roc_svg(title: &str, curves: &[(String, &[(f64, f64)])]) -> String {
    super::svg::render((420, 400), |root| draw_roc(root, title, curves))
}

fn clean(text: &str) -> String {
    // Control characters would make the SVG text invalid XML (plotters escapes only markup).
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(48)
        .collect()
}

fn draw_roc<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    curves: &[(String, &[(f64, f64)])],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(root)
        .caption(clean(title), ("sans-serif", 14))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(48)
        .build_cartesian_2d(0f64..1f64, 0f64..1f64)?;
    chart
        .configure_mesh()
        .x_desc("False-positive rate")
        .y_desc("True-positive rate")
        .x_label_formatter(&|x| format!("{x:.1}"))
        .y_label_formatter(&|y| format!("{y:.1}"))
        .max_light_lines(0)
        .bold_line_style(RGBColor(232, 232, 232))
        .draw()?;
    // Lines as paths: plotters' `LineSeries` needs a feature this crate does not build.
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(0.0, 0.0), (1.0, 1.0)],
        RGBColor(170, 170, 170).stroke_width(1),
    )))?;
    for (i, (label, points)) in curves.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(std::iter::once(PathElement::new(
                points.to_vec(),
                colour.stroke_width(2),
            )))?
            .label(clean(label))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(170, 170, 170))
        .draw()?;
    Ok(())
}

fn roc_tikz(curves: &[(String, &[(f64, f64)])]) -> String {
    let mut out = String::from(
        "\\begin{tikzpicture}\n\\begin{axis}[width=7cm,height=7cm,xmin=0,xmax=1,ymin=0,ymax=1,xlabel={False-positive rate},ylabel={True-positive rate},legend pos=south east,legend style={font=\\footnotesize}]\n\\addplot[gray,forget plot] coordinates {(0,0) (1,1)};\n",
    );
    for (i, (label, points)) in curves.iter().enumerate() {
        out.push_str(&format!(
            "\\addplot[{},thick,mark=none] coordinates {{",
            PGF_COLOURS[i % PGF_COLOURS.len()]
        ));
        for (x, y) in points.iter() {
            out.push_str(&format!(" ({x:.4},{y:.4})"));
        }
        out.push_str("};\n");
        out.push_str(&format!("\\addlegendentry{{{}}}\n", escape(label)));
    }
    out.push_str("\\end{axis}\n\\end{tikzpicture}\n");
    out
}

/// White at AUROC 0.5, green towards 1, red towards 0.
fn auroc_colour(auroc: f64) -> RGBColor {
    let t = ((auroc - 0.5).abs() * 2.0).clamp(0.0, 1.0);
    let (r, g, b) = if auroc >= 0.5 {
        (46.0, 158.0, 68.0)
    } else {
        (214.0, 39.0, 40.0)
    };
    let mix = |c: f64| (255.0 + (c - 255.0) * t).round() as u8;
    RGBColor(mix(r), mix(g), mix(b))
}

const CELL_W: i32 = 64;
const CELL_H: i32 = 28;
const LEFT: i32 = 170;
const TOP: i32 = 120;

fn heatmap_svg(
    title: &str,
    models: &[&str],
    datasets: &[&str],
    values: &[Vec<Option<f64>>],
) -> String {
    let width = (LEFT + datasets.len().max(1) as i32 * CELL_W + 12) as u32;
    let height = (TOP + models.len().max(1) as i32 * CELL_H + 12) as u32;
    super::svg::render((width, height), |root| {
        draw_heatmap(root, title, models, datasets, values)
    })
}

fn draw_heatmap<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    models: &[&str],
    datasets: &[&str],
    values: &[Vec<Option<f64>>],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let text = RGBColor(34, 34, 34);
    let grid = RGBColor(170, 170, 170);
    let bold = TextStyle::from(("sans-serif", 15).into_font().style(FontStyle::Bold)).color(&text);
    root.draw(&Text::new(
        format!("AUROC: {}", clean(title)),
        (6, 4),
        bold.pos(Pos::new(HPos::Left, VPos::Top)),
    ))?;
    let label = TextStyle::from(("sans-serif", 12).into_font()).color(&text);
    for (d, name) in datasets.iter().enumerate() {
        let x = LEFT + d as i32 * CELL_W + CELL_W / 2;
        let style = label
            .transform(FontTransform::Rotate270)
            .pos(Pos::new(HPos::Left, VPos::Center));
        root.draw(&Text::new(clean(name), (x, TOP - 6), style))?;
    }
    for (m, name) in models.iter().enumerate() {
        let y = TOP + m as i32 * CELL_H + CELL_H / 2;
        let style = label.pos(Pos::new(HPos::Right, VPos::Center));
        root.draw(&Text::new(clean(name), (LEFT - 6, y), style))?;
        for (d, value) in values[m].iter().enumerate() {
            let (x0, y0) = (LEFT + d as i32 * CELL_W, TOP + m as i32 * CELL_H);
            let (x1, y1) = (x0 + CELL_W, y0 + CELL_H);
            let fill = value.map_or(RGBColor(246, 246, 246), auroc_colour);
            root.draw(&Rectangle::new([(x0, y0), (x1, y1)], fill.filled()))?;
            root.draw(&Rectangle::new([(x0, y0), (x1, y1)], grid.stroke_width(1)))?;
            let shown = value.map_or("–".to_string(), |v| format!("{v:.2}"));
            let style = label.pos(Pos::new(HPos::Center, VPos::Center));
            root.draw(&Text::new(shown, (x0 + CELL_W / 2, y0 + CELL_H / 2), style))?;
        }
    }
    Ok(())
}

fn heatmap_tikz(models: &[&str], datasets: &[&str], values: &[Vec<Option<f64>>]) -> String {
    // 1.4 cm wide squares, 0.6 cm high; model labels left, dataset labels above.
    let mut out = String::from("\\begin{tikzpicture}[x=1.4cm,y=0.6cm]\n");
    for (d, name) in datasets.iter().enumerate() {
        out.push_str(&format!(
            "\\node[anchor=south,font=\\footnotesize] at ({}.5,0.1) {{{}}};\n",
            d,
            escape(name)
        ));
    }
    for (m, name) in models.iter().enumerate() {
        let y = -(m as i32) - 1;
        out.push_str(&format!(
            "\\node[anchor=east,font=\\footnotesize] at (-0.05,{y}.5) {{{}}};\n",
            escape(name)
        ));
        for (d, value) in values[m].iter().enumerate() {
            let (fill, shown) = match value {
                Some(v) => {
                    let share = (((v - 0.5).abs() * 200.0).round() as i32).clamp(0, 100);
                    let hue = if *v >= 0.5 { "green!60!black" } else { "red" };
                    (format!("{hue}!{share}!white"), format!("{v:.2}"))
                }
                None => ("gray!8".to_string(), "--".to_string()),
            };
            out.push_str(&format!(
                "\\fill[{fill}] ({d},{y}) rectangle ++(1,1);\n\\draw[gray] ({d},{y}) rectangle ++(1,1);\n\\node[font=\\footnotesize] at ({d}.5,{y}.5) {{{shown}}};\n"
            ));
        }
    }
    out.push_str("\\end{tikzpicture}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_run_from_red_through_white_to_green() {
        assert_eq!(auroc_colour(0.5), RGBColor(255, 255, 255));
        assert_eq!(auroc_colour(1.0), RGBColor(46, 158, 68));
        assert_eq!(auroc_colour(0.0), RGBColor(214, 39, 40));
    }

    #[test]
    fn tikz_escapes_labels() {
        let tikz = heatmap_tikz(&["m_1"], &["a&b"], &[vec![Some(0.75)]]);
        assert!(tikz.contains("m\\_1") && tikz.contains("a\\&b"), "{tikz}");
        assert!(tikz.contains("green!60!black!50!white"), "{tikz}");
    }

    #[test]
    fn ground_truth_cells_are_labelled_and_kept_out_of_the_heatmaps() {
        let stats = crate::likelihood::bootstrap_stats(&[3.0, 4.0], &[1.0, 2.0], 50, 1).unwrap();
        let cell = |test: String| LikelihoodCellRow {
            model: "m".into(),
            dataset: "iris".into(),
            test,
            serialization: "the-is".into(),
            seed: 0,
            method: "local".into(),
            stats: Some(stats.clone()),
            skipped: None,
            blind: None,
            run_id: None,
        };
        let view = view(&[
            cell(Detector::MinK.test_id().to_string()),
            cell(Detector::MinK.ground_truth_id()),
        ])
        .unwrap();
        let labels: Vec<&str> = view.rows.iter().map(|r| r.detector.as_str()).collect();
        assert_eq!(
            labels,
            ["Min-K% Prob", "Min-K% Prob (trained vs held-out rows)"]
        );
        assert_eq!(view.roc_figures.len(), 2);
        assert!(
            view.roc_figures[1]
                .title
                .ends_with("rows trained on vs held out")
        );
        assert_eq!(view.heatmaps.len(), 1);
        assert!(!view.has_blind);
        assert!(view.rows.iter().all(|r| r.blind == "–"));
    }

    /// A detector is marked when its AUROC does not exceed the blind baseline's upper end.
    #[test]
    fn detectors_no_better_than_the_blind_baseline_are_marked() {
        // AUROC 1: every positive above every negative.
        let stats = crate::likelihood::bootstrap_stats(&[3.0, 4.0], &[1.0, 2.0], 50, 1).unwrap();
        let cell = |test: &str, high: f64| LikelihoodCellRow {
            model: "m".into(),
            dataset: "iris".into(),
            test: test.into(),
            serialization: "the-is".into(),
            seed: 0,
            method: "local".into(),
            stats: Some(stats.clone()),
            skipped: None,
            blind: Some(crate::likelihood::BlindAuroc {
                positives: 2,
                negatives: 2,
                auroc: high - 0.05,
                auroc_low: high - 0.1,
                auroc_high: high,
            }),
            run_id: None,
        };
        let view = view(&[cell("likelihood-min-k", 0.6), cell("likelihood-zlib", 1.0)]).unwrap();
        assert!(view.has_blind);
        assert_eq!(view.rows[0].blind, "0.550 [0.500, 0.600]");
        assert!(!view.rows[0].no_better_than_blind);
        assert!(view.rows[1].no_better_than_blind);
    }
}
