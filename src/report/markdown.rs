//! Markdown for terminals, READMEs and papers' supplements: [`escape`] makes untrusted text
//! (model outputs, ids, labels, dataset names) one literal table cell, [`table`] writes a
//! GitHub-flavoured table, and [`report`] is `report.md` (Table 2 and the significance
//! table, `tabcontam report --format md`).
//!
//! Architecture Invariant: every interpolated value goes through [`escape`]: a `|` or a line
//! break in a model's output can neither end its cell or row, nor can its text become a link,
//! an image (`![](http://…)` would be fetched by a viewer), raw HTML or emphasis.

use std::fmt::Write as _;

use crate::analyze::Analysis;

/// `text` as one Markdown table cell (or inline text) that renders literally: `\`, `|`, `*`,
/// `_`, `` ` ``, `~`, `[` and `]` are backslash-escaped; `<` before a letter, `/`, `!` or `?`
/// (what opens raw HTML or an autolink) and `&` before a letter, digit or `#` (what opens
/// an entity) too; every line break (`\r\n`, `\n`, `\r`) becomes `<br>`, so a cell never
/// spans two lines of the table.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let next = chars.peek().copied();
        match c {
            '\r' => {
                if next == Some('\n') {
                    chars.next();
                }
                out.push_str("<br>");
            }
            '\n' => out.push_str("<br>"),
            '\\' | '|' | '*' | '_' | '`' | '~' | '[' | ']' => {
                out.push('\\');
                out.push(c);
            }
            '<' if next
                .is_some_and(|n| n.is_ascii_alphabetic() || matches!(n, '/' | '!' | '?')) =>
            {
                out.push_str("\\<");
            }
            '&' if next.is_some_and(|n| n.is_ascii_alphanumeric() || n == '#') => {
                out.push_str("\\&");
            }
            _ => out.push(c),
        }
    }
    out
}

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A GitHub-flavoured Markdown table: one header row, the alignment row, one row per entry
/// of `rows`. Every header and every [`Cell::text`] is [`escape`]d ([`Cell::markdown`] is
/// written as it is); a row shorter than the header is padded with empty cells. Bold cells
/// are wrapped in `**` after escaping.
pub fn table(columns: &[(&str, Align)], rows: &[Vec<Cell>]) -> String {
    let mut out = String::new();
    let line = |cells: Vec<String>| format!("| {} |\n", cells.join(" | "));
    out.push_str(&line(
        columns.iter().map(|(name, _)| escape(name)).collect(),
    ));
    out.push_str(&line(
        columns
            .iter()
            .map(|(_, align)| match align {
                Align::Left => "---".to_string(),
                Align::Right => "---:".to_string(),
            })
            .collect(),
    ));
    for row in rows {
        let mut cells: Vec<String> = row
            .iter()
            .map(|cell| {
                let text = match cell.markdown {
                    true => cell.text.clone(),
                    false => escape(&cell.text),
                };
                match cell.bold && !text.is_empty() {
                    true => format!("**{text}**"),
                    false => text,
                }
            })
            .collect();
        cells.resize(columns.len(), String::new());
        out.push_str(&line(cells));
    }
    out
}

/// One table cell: text that [`table`] escapes (the default, for anything untrusted), or
/// Markdown written as it is, and whether it is bold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    text: String,
    markdown: bool,
    bold: bool,
}

impl Cell {
    /// Text, escaped when written: model outputs, ids, labels, names.
    pub fn text(text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            markdown: false,
            bold: false,
        }
    }

    /// Markdown of our own making, written as it is (numbers, intervals, untrusted parts
    /// already [`escape`]d); it must hold no `|` or line break of its own.
    pub fn markdown(markdown: impl Into<String>) -> Cell {
        Cell {
            markdown: true,
            ..Cell::text(markdown)
        }
    }

    pub fn bold(self, bold: bool) -> Cell {
        Cell { bold, ..self }
    }
}

impl<T: Into<String>> From<T> for Cell {
    fn from(text: T) -> Cell {
        Cell::text(text)
    }
}

/// `report.md`: Table 2 (as the HTML page prints it, best values in bold) with its notes,
/// then the significance table with p, Holm's p and Benjamini–Hochberg's q.
pub fn report(analysis: &Analysis, timestamp: Option<&str>) -> String {
    use super::page::{served_notes, significance_rows, table2, template_notes};
    let mut out = String::from("# tabcontam report\n\n");
    if let Some(at) = timestamp {
        let _ = writeln!(out, "Generated {}.\n", escape(at));
    }
    let _ = writeln!(
        out,
        "Scoring profile: {}.\n",
        escape(&analysis.scoring_rule)
    );
    out.push_str("## Table 2: models ranked by contamination\n\n");
    out.push_str(
        "Contamination: passed cells of tests 1–9 over 9 × datasets evaluated (skipped cells count as not passed). Membership, 0-shot and 1-shot: mean accuracy over datasets. Best value of each column in bold.",
    );
    let sampled = analysis.series.iter().any(|s| s.samples > 1);
    if sampled {
        let _ = write!(
            out,
            " Repeated sampling: {} Per sample: the mean over cells of that fraction (what one sample alone would score).",
            escape(crate::probe::SAMPLE_RULE)
        );
    }
    out.push_str("\n\n");
    let mut columns = vec![
        ("#", Align::Right),
        ("Model", Align::Left),
        ("Source", Align::Left),
        ("Contamination", Align::Right),
        ("Cells", Align::Right),
        ("Knowledge", Align::Right),
        ("Memorization", Align::Right),
        ("Membership", Align::Right),
        ("0-shot", Align::Right),
        ("1-shot", Align::Right),
    ];
    if sampled {
        columns.push(("Per sample", Align::Right));
    }
    let rows: Vec<Vec<Cell>> = table2(&analysis.series)
        .into_iter()
        .map(|r| {
            let mut cells = vec![
                Cell::from(r.rank.to_string()),
                r.label.into(),
                r.source.into(),
                Cell::text(r.contamination).bold(r.best_contamination),
                r.fraction.into(),
                r.knowledge.into(),
                r.memorization.into(),
                Cell::text(r.membership).bold(r.best_membership),
                Cell::text(r.zero_shot).bold(r.best_zero_shot),
                Cell::text(r.one_shot).bold(r.best_one_shot),
            ];
            if sampled {
                cells.push(r.sample_contamination.into());
            }
            cells
        })
        .collect();
    out.push_str(&table(&columns, &rows));
    let notes = template_notes(analysis);
    if !notes.is_empty() {
        let _ = writeln!(
            out,
            "\nScored with another template (no cell under `{}`):\n",
            analysis.primary_serialization.replace('`', "")
        );
        for note in notes {
            let _ = writeln!(out, "- {}", escape(&note));
        }
    }
    let served = served_notes(analysis);
    if !served.is_empty() {
        out.push_str(
            "\nVersions the servers reported for the cached answers (an API name can serve different snapshots over time):\n\n",
        );
        for note in served {
            let _ = writeln!(out, "- {}", escape(&note));
        }
    }
    out.push_str("\n## Significance\n\n");
    let _ = writeln!(
        out,
        "{}\n",
        escape(crate::significance::MULTIPLE_COMPARISONS_NOTE)
    );
    let significance = significance_rows(analysis);
    if significance.is_empty() {
        out.push_str("No cell with a p-value.\n");
        return out;
    }
    let columns = [
        ("Model", Align::Left),
        ("Dataset", Align::Left),
        ("Test", Align::Left),
        ("Template", Align::Left),
        ("Result", Align::Left),
        ("p", Align::Right),
        ("p (Holm)", Align::Right),
        ("q (BH)", Align::Right),
        ("Score", Align::Right),
        ("Passed", Align::Right),
        ("Chance", Align::Right),
    ];
    let rows: Vec<Vec<Cell>> = significance
        .into_iter()
        .map(|r| {
            vec![
                r.model.into(),
                r.dataset.into(),
                r.test.into(),
                r.serialization.into(),
                r.result.into(),
                r.p_value.into(),
                r.p_holm.into(),
                r.q_value.into(),
                r.score.into(),
                r.count.into(),
                r.chance.into(),
            ]
        })
        .collect();
    out.push_str(&table(&columns, &rows));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model output that tries to end its cell and row, inject a table row, an image, raw
    /// HTML and emphasis. Reference: markdown-it-py 4.3.0,
    /// `MarkdownIt("gfm-like").disable("linkify").render(table)`, renders the table below as
    /// one body row of exactly two cells, the first
    /// `<td>a|b<br>| x | y |<br>![t](http://e/p.png) &lt;script&gt;x&lt;/script&gt; *no* A&amp;B</td>`:
    /// the two `<br>` are its only tags (no `<img>`, `<script>` or `<em>`).
    #[test]
    fn escape_keeps_untrusted_text_in_its_cell_and_literal() {
        let output = "a|b\n| x | y |\r\n![t](http://e/p.png) <script>x</script> *no* A&B";
        let escaped = escape(output);
        assert_eq!(
            escaped,
            "a\\|b<br>\\| x \\| y \\|<br>!\\[t\\](http://e/p.png) \\<script>x\\</script> \\*no\\* A\\&B"
        );
        let md = table(
            &[("Output", Align::Left), ("n", Align::Right)],
            &[vec![output.into(), "1".into()]],
        );
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines.len(), 3, "{md}");
        assert_eq!(lines[1], "| --- | ---: |");
        // A row's unescaped pipes: its two cells' borders only.
        let bars = |line: &str| {
            let mut escaped = false;
            line.chars()
                .filter(|&c| {
                    let bar = c == '|' && !escaped;
                    escaped = c == '\\' && !escaped;
                    bar
                })
                .count()
        };
        assert_eq!(bars(lines[2]), 3, "{}", lines[2]);
        assert_eq!(lines[2], format!("| {escaped} | 1 |"));
    }

    #[test]
    fn escape_leaves_plain_text_and_numbers_alone() {
        // `<0.001` (a p-value) and `a < b` open no tag; `&` alone no entity.
        for plain in [
            "iris-expert",
            "<0.001",
            "a < b",
            "R & D",
            "0.62 [0.52, 0.71]",
        ] {
            let expected = plain.replace('[', "\\[").replace(']', "\\]");
            assert_eq!(escape(plain), expected);
        }
        // A backslash before a pipe stays a literal backslash and the pipe stays escaped.
        assert_eq!(escape("x\\|y"), "x\\\\\\|y");
        assert_eq!(escape("&amp; &#60;"), "\\&amp; \\&#60;");
        assert_eq!(escape("line\rbreak"), "line<br>break");
    }

    #[test]
    fn table_pads_short_rows_and_bolds_after_escaping() {
        let md = table(
            &[("A", Align::Left), ("B", Align::Right), ("C", Align::Left)],
            &[
                vec![Cell::text("x*y").bold(true), "2".into()],
                vec![Cell::markdown("0.5 [0.4, 0.6] *"), Cell::text("")],
            ],
        );
        assert_eq!(
            md,
            "| A | B | C |\n| --- | ---: | --- |\n| **x\\*y** | 2 |  |\n| 0.5 [0.4, 0.6] * |  |  |\n"
        );
    }
}
