//! Timelines: per model family, the contamination score and the membership and 0/1-shot
//! accuracy of each version against its release date, or against its training step when
//! every version of the family has one (checkpoints of one run). Drawn twice from the same
//! points: inline SVG (plotters) for the HTML page, pgfplots for LaTeX.

use std::collections::BTreeMap;
use std::fmt::Write;

use plotters::prelude::*;

use super::tex::escape;
use crate::analyze::SeriesScores;
use crate::store::OWN_SOURCE;

/// What the x axis is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Axis {
    ReleaseDate,
    Step,
}

/// One version of a family.
#[derive(Debug, Clone)]
pub struct TimelinePoint {
    pub label: String,
    /// Fractional year (release date) or step.
    pub x: f64,
    /// Contamination, membership, 0-shot, 1-shot.
    pub values: [Option<f64>; 4],
    /// The versions the server reported for this version's answers: an alias tracked
    /// over time is only a timeline when each point says what really answered.
    pub served: Vec<String>,
}

/// One family's figure.
pub struct Timeline {
    pub family: String,
    pub axis: Axis,
    pub points: Vec<TimelinePoint>,
    /// Versions left out (no release date or step).
    pub left_out: Vec<String>,
}

pub const METRICS: [&str; 4] = ["Contamination", "Membership", "0-shot", "1-shot"];
const COLOURS: [RGBColor; 4] = [
    RGBColor(46, 158, 68),
    RGBColor(148, 103, 189),
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
];
const TIKZ_COLOURS: [&str; 4] = ["tcdetected", "violet", "blue", "red"];

/// `2024`, `2024-05` or `2024-05-13` as a fractional year (month and day at their start).
pub fn fractional_year(date: &str) -> Option<f64> {
    let mut parts = date.trim().splitn(3, '-');
    let year: f64 = parts.next()?.parse::<u16>().ok()?.into();
    let month: f64 = parts
        .next()
        .map_or(Some(1), |m| m.parse::<u8>().ok())?
        .into();
    let day: f64 = parts
        .next()
        .map_or(Some(1), |d| d.get(..2).unwrap_or(d).parse::<u8>().ok())?
        .into();
    if !(1.0..=12.0).contains(&month) || !(1.0..=31.0).contains(&day) {
        return None;
    }
    Some(year + (month - 1.0) / 12.0 + (day - 1.0) / 365.0)
}

/// Families with at least two placed versions, by family name; versions by x, then label.
pub fn timelines(series: &[SeriesScores]) -> Vec<Timeline> {
    let mut families: BTreeMap<&str, Vec<&SeriesScores>> = BTreeMap::new();
    for s in series {
        if let Some(family) = s.family.as_deref() {
            families.entry(family).or_default().push(s);
        }
    }
    let mut out = Vec::new();
    for (family, members) in families {
        let axis = if members.iter().all(|s| s.step.is_some()) {
            Axis::Step
        } else {
            Axis::ReleaseDate
        };
        let label = |s: &SeriesScores| {
            if s.key.source == OWN_SOURCE {
                s.label.clone()
            } else {
                format!("{} ({})", s.label, s.key.source)
            }
        };
        let mut points = Vec::new();
        let mut left_out = Vec::new();
        for s in members {
            let x = match axis {
                Axis::Step => s.step.map(|step| step as f64),
                Axis::ReleaseDate => s.release_date.as_deref().and_then(fractional_year),
            };
            match x {
                Some(x) => points.push(TimelinePoint {
                    label: label(s),
                    x,
                    values: [
                        s.contamination,
                        s.membership.as_ref().map(|m| m.mean),
                        s.zero_shot.as_ref().map(|m| m.mean),
                        s.one_shot.as_ref().map(|m| m.mean),
                    ],
                    served: crate::store::served_models(&s.served)
                        .into_iter()
                        .map(str::to_string)
                        .collect(),
                }),
                None => left_out.push(label(s)),
            }
        }
        if points.len() < 2 {
            continue;
        }
        points.sort_by(|a, b| a.x.total_cmp(&b.x).then_with(|| a.label.cmp(&b.label)));
        out.push(Timeline {
            family: family.to_string(),
            axis,
            points,
            left_out,
        });
    }
    out
}

fn x_range(points: &[TimelinePoint]) -> (f64, f64) {
    let min = points.iter().map(|p| p.x).fold(f64::INFINITY, f64::min);
    let max = points.iter().map(|p| p.x).fold(f64::NEG_INFINITY, f64::max);
    let pad = ((max - min) * 0.08).max(if min == max { 1.0 } else { 0.0 });
    (min - pad, max + pad)
}

fn x_text(axis: Axis, x: f64) -> String {
    match axis {
        Axis::Step => format!("{x:.0}"),
        Axis::ReleaseDate => {
            let year = x.floor();
            let month = ((x - year) * 12.0).round() as i64 + 1;
            let (year, month) = if month > 12 {
                (year as i64 + 1, 1)
            } else {
                (year as i64, month)
            };
            format!("{year}-{month:02}")
        }
    }
}

/// The family's figure as SVG.
pub fn svg(timeline: &Timeline) -> String {
    super::svg::render((640, 360), |root| draw(root, timeline))
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    timeline: &Timeline,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let (x0, x1) = x_range(&timeline.points);
    let axis = timeline.axis;
    let mut chart = ChartBuilder::on(root)
        .margin(14)
        .caption(
            super::svg::clean_label(&timeline.family, 40),
            ("sans-serif", 16),
        )
        .x_label_area_size(40)
        .y_label_area_size(48)
        .build_cartesian_2d(x0..x1, 0f64..1f64)?;
    chart
        .configure_mesh()
        .x_desc(match axis {
            Axis::Step => "Training step",
            Axis::ReleaseDate => "Release date",
        })
        .y_desc("Score")
        .x_labels(6)
        .x_label_formatter(&|x| x_text(axis, *x))
        .y_label_formatter(&|y| format!("{y:.1}"))
        .max_light_lines(0)
        .bold_line_style(RGBColor(232, 232, 232))
        .draw()?;
    for (m, name) in METRICS.iter().enumerate() {
        let colour = COLOURS[m];
        let points: Vec<(f64, f64)> = timeline
            .points
            .iter()
            .filter_map(|p| Some((p.x, p.values[m]?)))
            .collect();
        if points.is_empty() {
            continue;
        }
        chart
            .draw_series(std::iter::once(PathElement::new(
                points.clone(),
                colour.stroke_width(2),
            )))?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2))
            });
        chart.draw_series(
            points
                .iter()
                .map(|&(x, y)| Circle::new((x, y), 4, colour.filled())),
        )?;
    }
    // Version labels above the contamination points (or the first value a version has).
    let label_style = TextStyle::from(("sans-serif", 10).into_font()).color(&RGBColor(34, 34, 34));
    chart.draw_series(timeline.points.iter().filter_map(|p| {
        let y = p.values.iter().flatten().next()?;
        Some(Text::new(
            super::svg::clean_label(&p.label, 18),
            (p.x, (y + 0.04).min(0.97)),
            label_style.clone(),
        ))
    }))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(170, 170, 170))
        .draw()?;
    Ok(())
}

/// The family's figure as a pgfplots `tikzpicture` (needs `\usepackage{pgfplots}`).
/// Every label is escaped; numbers are plain decimals.
pub fn tikz(timeline: &Timeline) -> String {
    let (x0, x1) = x_range(&timeline.points);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "% tabcontam timeline of one model family: scores against {}.",
        match timeline.axis {
            Axis::Step => "training step",
            Axis::ReleaseDate => "release date (fractional year)",
        }
    );
    out.push_str("\\providecolor{tcdetected}{RGB}{46,158,68}\n");
    out.push_str("\\begin{tikzpicture}\n\\begin{axis}[width=0.9\\linewidth,height=6cm,");
    let _ = write!(
        out,
        "xmin={x0:.4},xmax={x1:.4},ymin=0,ymax=1,xlabel={{{}}},ylabel={{Score}},",
        match timeline.axis {
            Axis::Step => "Training step",
            Axis::ReleaseDate => "Release date",
        }
    );
    out.push_str("title={");
    out.push_str(&escape(&timeline.family));
    out.push_str("},legend pos=outer north east,legend cell align=left,");
    out.push_str("x tick label style={/pgf/number format/.cd,fixed,precision=2,1000 sep={}},");
    out.push_str("scaled x ticks=false,font=\\small]\n");
    for (m, name) in METRICS.iter().enumerate() {
        let coords: Vec<String> = timeline
            .points
            .iter()
            .filter_map(|p| Some(format!("({:.4},{:.4})", p.x, p.values[m]?)))
            .collect();
        if coords.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "\\addplot[color={},mark=*,thick] coordinates {{{}}};\n\\addlegendentry{{{name}}}",
            TIKZ_COLOURS[m],
            coords.join(" ")
        );
    }
    for p in &timeline.points {
        if let Some(y) = p.values.iter().flatten().next() {
            let _ = writeln!(
                out,
                "\\node[font=\\scriptsize,anchor=south] at (axis cs:{:.4},{:.4}) {{{}}};",
                p.x,
                (y + 0.02).min(0.95),
                escape(&p.label)
            );
        }
    }
    out.push_str("\\end{axis}\n\\end{tikzpicture}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_become_fractional_years() {
        assert_eq!(fractional_year("2024"), Some(2024.0));
        assert_eq!(fractional_year("2024-07"), Some(2024.5));
        assert!((fractional_year("2024-07-23").unwrap() - (2024.5 + 22.0 / 365.0)).abs() < 1e-9);
        assert_eq!(fractional_year("July 2024"), None);
        assert_eq!(fractional_year("2024-13"), None);
        assert_eq!(x_text(Axis::ReleaseDate, 2024.5), "2024-07");
        assert_eq!(x_text(Axis::Step, 1200.0), "1200");
    }
}
