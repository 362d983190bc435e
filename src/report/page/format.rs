//! How the report writes numbers, intervals, p-values and names (one place, so the HTML and
//! LaTeX pages agree).

use crate::analyze::{Analysis, Interval, MeanAccuracy};
use crate::probe::TestKind;

/// What an empty cell shows.
/// Shown where a value does not exist.
pub(in crate::report) const NONE: &str = "–";

pub(in crate::report) fn kind_name(kind: TestKind) -> &'static str {
    match kind {
        TestKind::Knowledge => "knowledge",
        TestKind::Memorization => "memorization",
        TestKind::Classification => "classification",
    }
}

pub(in crate::report) fn fixed2(x: f64) -> String {
    format!("{x:.2}")
}

pub(in crate::report) fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| NONE.to_string(), fixed2)
}

pub(in crate::report) fn mean(m: &Option<MeanAccuracy>) -> String {
    m.as_ref()
        .map_or_else(|| NONE.to_string(), |m| fixed2(m.mean))
}

pub(in crate::report) fn interval(i: &Option<Interval>) -> String {
    i.as_ref().map_or_else(
        || NONE.to_string(),
        |i| format!("[{:.2}, {:.2}]", i.low, i.high),
    )
}

pub(in crate::report) fn p_value(p: Option<f64>) -> String {
    match p {
        None => NONE.to_string(),
        Some(p) if p < 0.001 => "<0.001".to_string(),
        Some(p) => format!("{p:.3}"),
    }
}

pub(in crate::report) fn percent(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

pub(in crate::report) fn dataset_name_in(analysis: &Analysis, id: &str) -> String {
    analysis
        .datasets
        .iter()
        .find(|d| d.id == id)
        .map_or_else(|| id.to_string(), |d| d.name.clone())
}
