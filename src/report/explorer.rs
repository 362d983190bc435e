//! The trial explorer of `report.html`: per series, per cell, every trial shown (prompt,
//! output, expected words highlighted, a character diff against the true row for
//! completion tests, echoes marked). Texts stay raw here: the template escapes each
//! segment, and highlighting only splits text, it never writes markup into it.

use std::collections::HashMap;

use crate::analyze::ExplorerCell;
use crate::analyze::explorer::{DiffPiece, char_diff};
use crate::analyze::{Analysis, SeriesKey};

/// One series' cells.
pub struct ExplorerSeries {
    pub anchor: String,
    pub label: String,
    pub model: String,
    pub cells: Vec<ExplorerCellView>,
}

pub struct ExplorerCellView {
    pub anchor: String,
    pub title: String,
    pub passed: bool,
    /// Trial counts: "2/5 trials passed · 1 echo · 10 of 100 shown".
    pub counts: String,
    pub trials: Vec<TrialView>,
}

/// One distinct prompt, shown once: every model is asked the same prompts, so trials
/// link to it instead of repeating it (the paper grid's page halves).
pub struct PromptView {
    pub anchor: String,
    pub title: String,
    pub segments: Vec<Segment>,
}

pub struct TrialView {
    pub head: String,
    /// The anchor of the trial's prompt among the explorer's prompts, and its position
    /// in them.
    pub prompt_anchor: String,
    pub prompt: usize,
    /// The judged response's request key, hex.
    pub request_key: String,
    /// `pass`, `fail` or `invalid` (a CSS class and the verdict shown).
    pub verdict: &'static str,
    pub echo: bool,
    pub expected: String,
    pub output: Vec<Segment>,
    pub truth: Option<String>,
    pub diff: Option<Vec<DiffSegment>>,
}

/// A piece of text, highlighted (`<mark>`) when it is an expected term.
pub struct Segment {
    pub text: String,
    pub hit: bool,
}

pub struct DiffSegment {
    pub text: String,
    /// `same`, `missing` (in the true row only) or `extra` (in the output only).
    pub class: &'static str,
}

/// Anchors of the explorer's cells: `trials-<series>-<dataset>-<test>` (1-based series
/// and dataset positions of the report; `-2`, `-3` … for more cells of the same triple,
/// e.g. other templates or seeds). Built from numbers only, so they need no escaping.
pub struct Anchors {
    pub by_cell: HashMap<(usize, usize, u8), String>,
}

/// The distinct prompts of the explorer, in order of first use.
#[derive(Default)]
pub(crate) struct Prompts<'a> {
    index: HashMap<&'a str, usize>,
    pub(crate) views: Vec<PromptView>,
}

impl<'a> Prompts<'a> {
    /// The anchor of `text`'s entry, added on first use (`prompt-<n>`, digits only).
    fn anchor(
        &mut self,
        text: &'a str,
        terms: &[String],
        title: impl FnOnce() -> String,
    ) -> String {
        let next = self.views.len();
        let n = *self.index.entry(text).or_insert(next);
        if n == next {
            self.views.push(PromptView {
                anchor: format!("prompt-{}", n + 1),
                title: format!("Prompt {} · {}", n + 1, title()),
                segments: highlight(text, terms),
            });
        }
        format!("prompt-{}", n + 1)
    }
}

/// The explorer's series, its distinct prompts and the anchor of each (series, dataset,
/// test)'s first cell.
pub fn explorer(
    analysis: &Analysis,
    dataset_name: &dyn Fn(&str) -> String,
    test_name: &dyn Fn(&str) -> String,
) -> (Vec<ExplorerSeries>, Vec<PromptView>, Anchors) {
    let mut prompts = Prompts::default();
    let series_index: HashMap<&SeriesKey, usize> = analysis
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| (&s.key, i))
        .collect();
    let dataset_index = analysis.dataset_index();
    let mut all: Vec<ExplorerSeries> = Vec::new();
    let mut anchors = Anchors {
        by_cell: HashMap::new(),
    };
    let mut used: HashMap<String, usize> = HashMap::new();
    for cell in &analysis.explorer {
        let Some(&s) = series_index.get(&cell.key) else {
            continue;
        };
        let series = &analysis.series[s];
        let series_anchor = format!("explorer-{}", s + 1);
        if all.last().is_none_or(|last| last.anchor != series_anchor) {
            all.push(ExplorerSeries {
                anchor: series_anchor,
                label: series.label.clone(),
                model: series.key.model.clone(),
                cells: Vec::new(),
            });
        }
        let d = dataset_index
            .get(cell.dataset.as_str())
            .map_or(0, |&d| d + 1);
        let number = cell.test.number();
        let base = format!("trials-{}-{d}-{number}", s + 1);
        let seen = used.entry(base.clone()).or_insert(0);
        *seen += 1;
        let anchor = if *seen == 1 {
            anchors.by_cell.insert((s, d, number), base.clone());
            base
        } else {
            format!("{base}-{seen}")
        };
        all.last_mut().expect("pushed above").cells.push(cell_view(
            cell,
            anchor,
            &mut prompts,
            dataset_name,
            test_name,
        ));
    }
    (all, prompts.views, anchors)
}

/// One cell's view; its trials' prompts are added to `prompts`.
pub(crate) fn cell_view<'a>(
    cell: &'a ExplorerCell,
    anchor: String,
    prompts: &mut Prompts<'a>,
    dataset_name: &dyn Fn(&str) -> String,
    test_name: &dyn Fn(&str) -> String,
) -> ExplorerCellView {
    let template = cell
        .serialization
        .as_deref()
        .map_or_else(String::new, |t| format!(" · template {t}"));
    let title = format!(
        "{} · {}{template} · seed {}",
        test_name(cell.test.id()),
        dataset_name(&cell.dataset),
        cell.seed
    );
    let mut counts = format!("{}/{} trials passed", cell.passed_trials, cell.total_trials);
    if cell.echo_trials > 0 {
        counts.push_str(&format!(
            " · {} echo{}",
            cell.echo_trials,
            if cell.echo_trials == 1 { "" } else { "es" }
        ));
    }
    if cell.trials.len() < cell.total_trials {
        counts.push_str(&format!(
            " · first {} of {} shown",
            cell.trials.len(),
            cell.total_trials
        ));
    }
    let trials = cell
        .trials
        .iter()
        .map(|t| {
            let mut head = format!("trial {}", t.trial);
            if t.sample > 0 {
                head = format!("sample {} · {head}", t.sample);
            }
            if let Some(note) = &t.note {
                head.push_str(&format!(" · {note}"));
            }
            let diff = match (&t.truth, &t.judged) {
                (Some(truth), Some(judged)) => char_diff(truth, judged).map(|pieces| {
                    pieces
                        .into_iter()
                        .map(|p| match p {
                            DiffPiece::Same(text) => DiffSegment {
                                text,
                                class: "same",
                            },
                            DiffPiece::Missing(text) => DiffSegment {
                                text,
                                class: "missing",
                            },
                            DiffPiece::Extra(text) => DiffSegment {
                                text,
                                class: "extra",
                            },
                        })
                        .collect()
                }),
                _ => None,
            };
            let prompt_anchor = prompts.anchor(&t.prompt, &t.expected, || {
                format!(
                    "{} · {} · trial {}",
                    test_name(cell.test.id()),
                    dataset_name(&cell.dataset),
                    t.trial
                )
            });
            TrialView {
                head,
                prompt: prompts.index[t.prompt.as_str()],
                request_key: t.request_key.clone(),
                verdict: if t.invalid {
                    "invalid"
                } else if t.passed {
                    "pass"
                } else {
                    "fail"
                },
                echo: t.echo,
                expected: t.expected.join(" · "),
                prompt_anchor,
                output: highlight(&t.output, &t.expected),
                truth: t.truth.clone(),
                diff,
            }
        })
        .collect();
    ExplorerCellView {
        anchor,
        title,
        passed: cell.passed,
        counts,
        trials,
    }
}

/// Splits `text` into plain and highlighted pieces: every occurrence of a term, ASCII
/// case-insensitive, not inside a longer word (the character on each side is not
/// alphanumeric). Overlapping occurrences merge.
pub fn highlight(text: &str, terms: &[String]) -> Vec<Segment> {
    let haystack = text.to_ascii_lowercase();
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for term in terms {
        let needle = term.to_ascii_lowercase();
        if needle.is_empty() {
            continue;
        }
        let mut from = 0;
        while let Some(found) = haystack[from..].find(&needle) {
            let (start, end) = (from + found, from + found + needle.len());
            let before = haystack[..start].chars().next_back();
            let after = haystack[end..].chars().next();
            if !before.is_some_and(char::is_alphanumeric)
                && !after.is_some_and(char::is_alphanumeric)
            {
                ranges.push((start, end));
            }
            // Advance by one character (a match starts on a char boundary).
            from = start + haystack[start..].chars().next().map_or(1, char::len_utf8);
        }
    }
    ranges.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    let mut segments = Vec::new();
    let mut at = 0;
    for (start, end) in merged {
        if start > at {
            segments.push(Segment {
                text: text[at..start].to_string(),
                hit: false,
            });
        }
        segments.push(Segment {
            text: text[start..end].to_string(),
            hit: true,
        });
        at = end;
    }
    if at < text.len() || segments.is_empty() {
        segments.push(Segment {
            text: text[at..].to_string(),
            hit: false,
        });
    }
    segments
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marked(text: &str, terms: &[&str]) -> String {
        let terms: Vec<String> = terms.iter().map(|t| t.to_string()).collect();
        highlight(text, &terms)
            .into_iter()
            .map(|s| {
                if s.hit {
                    format!("[{}]", s.text)
                } else {
                    s.text
                }
            })
            .collect()
    }

    #[test]
    fn highlights_whole_terms_case_insensitively() {
        assert_eq!(
            marked("The Age is 39, the age2 is 7; AGE!", &["age"]),
            "The [Age] is 39, the age2 is 7; [AGE]!"
        );
        assert_eq!(
            marked("Iris-setosa and Iris", &["Iris", "Iris-setosa"]),
            "[Iris-setosa] and [Iris]"
        );
        assert_eq!(marked("naïve café", &["café"]), "naïve [café]");
        assert_eq!(marked("", &["x"]), "");
        assert_eq!(marked("no hit", &[]), "no hit");
    }
}
