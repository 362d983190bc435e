//! Prompt packs: the wording of every test, as templates with named placeholders.
//!
//! The built-in pack is ours (SPEC: prompts in our own words); users load theirs at run
//! time. A pack is validated once on load, so a typo in a placeholder fails before any
//! request is built.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::TestId;

const DEFAULT_PACK: &str = include_str!("default_pack.toml");

/// Errors in a prompt pack, each naming the pack and the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("{source_name}: cannot read prompt pack: {error}")]
    Read {
        source_name: String,
        error: std::io::Error,
    },
    #[error("{source_name}: invalid prompt pack TOML: {error}")]
    Toml { source_name: String, error: String },
    #[error(
        "{source_name}: no template for test `{test}`; add a [{test}] table with `template = \"…\"`"
    )]
    Missing {
        source_name: String,
        test: &'static str,
    },
    #[error("{source_name}: [{section}] is not a test id; known tests: {known}")]
    UnknownSection {
        source_name: String,
        section: String,
        known: String,
    },
    #[error(
        "{source_name}: [{test}].{field} uses unknown placeholder {{{placeholder}}}; allowed: {allowed}"
    )]
    UnknownPlaceholder {
        source_name: String,
        test: &'static str,
        field: &'static str,
        placeholder: String,
        allowed: String,
    },
    #[error("{source_name}: [{test}].{field} is only read in [{owner}]; remove it")]
    MisplacedField {
        source_name: String,
        test: &'static str,
        field: &'static str,
        owner: &'static str,
    },
    #[error(
        "{source_name}: [{test}].{field} has an unclosed `{{`; write `{{{{` for a literal brace"
    )]
    Unclosed {
        source_name: String,
        test: &'static str,
        field: &'static str,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSection {
    template: String,
    #[serde(default)]
    example: Option<String>,
    #[serde(default)]
    without_rows: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawPack {
    #[serde(default)]
    name: Option<String>,
    #[serde(flatten)]
    sections: BTreeMap<String, RawSection>,
}

/// The templates of one test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestTemplates {
    pub template: String,
    /// Per-example template (classify-1shot only).
    pub example: Option<String>,
    /// The template used when there are no example rows (feature-completion only: the
    /// `paper-code` variant shows none). Without it, `template` is used with empty `{rows}`.
    pub without_rows: Option<String>,
}

/// A validated prompt pack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptPack {
    pub name: String,
    templates: BTreeMap<TestId, TestTemplates>,
}

impl PromptPack {
    /// The built-in pack.
    pub fn builtin() -> Self {
        Self::parse(DEFAULT_PACK, "built-in prompt pack")
            .expect("the built-in prompt pack is valid")
    }

    /// Loads a user pack from a TOML file.
    pub fn load(path: &Path) -> Result<Self, PackError> {
        let source_name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| PackError::Read {
            source_name: source_name.clone(),
            error,
        })?;
        Self::parse(&text, &source_name)
    }

    /// Parses and validates pack text.
    pub fn parse(text: &str, source_name: &str) -> Result<Self, PackError> {
        let raw: RawPack = toml::from_str(text).map_err(|e| PackError::Toml {
            source_name: source_name.into(),
            error: e.message().to_string(),
        })?;
        let mut templates = BTreeMap::new();
        for (section, body) in raw.sections {
            let Some(test) = TestId::parse(&section).filter(|t| TestId::PAPER.contains(t)) else {
                return Err(PackError::UnknownSection {
                    source_name: source_name.into(),
                    section,
                    known: TestId::PAPER
                        .iter()
                        .map(|t| t.id())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            };
            let allowed = placeholders(test);
            check(source_name, test, "template", &body.template, allowed)?;
            if let Some(example) = &body.example {
                check(source_name, test, "example", example, EXAMPLE_PLACEHOLDERS)?;
            }
            if let Some(without_rows) = &body.without_rows {
                if test != TestId::FeatureCompletion {
                    return Err(PackError::MisplacedField {
                        source_name: source_name.into(),
                        test: test.id(),
                        field: "without_rows",
                        owner: TestId::FeatureCompletion.id(),
                    });
                }
                let allowed: Vec<&str> = allowed.iter().copied().filter(|p| *p != "rows").collect();
                check(source_name, test, "without_rows", without_rows, &allowed)?;
            }
            templates.insert(
                test,
                TestTemplates {
                    template: body.template,
                    example: body.example,
                    without_rows: body.without_rows,
                },
            );
        }
        // The verbatim tests (13–16) send the raw file text: no template to fill.
        for test in TestId::PAPER {
            if !templates.contains_key(&test) {
                return Err(PackError::Missing {
                    source_name: source_name.into(),
                    test: test.id(),
                });
            }
        }
        Ok(Self {
            name: raw.name.unwrap_or_else(|| source_name.to_string()),
            templates,
        })
    }

    pub fn templates(&self, test: TestId) -> &TestTemplates {
        &self.templates[&test]
    }
}

const EXAMPLE_PLACEHOLDERS: &[&str] = &["row", "question", "answer_hint", "answer"];

/// Placeholders each test's template may use.
pub fn placeholders(test: TestId) -> &'static [&'static str] {
    use TestId::*;
    match test {
        FeatureListInformed => &["name", "given_features"],
        FeatureListUninformed => &["name"],
        RecognitionFeatures => &["features"],
        RecognitionExamples => &["rows"],
        FeatureValuesInformed => &["name", "feature", "rows"],
        FeatureValuesUninformed => &["name", "feature"],
        IncompleteCompletion => &["name", "features", "rows", "partial_row"],
        FullCompletion => &["name", "features", "rows"],
        FeatureCompletion => &[
            "name",
            "features",
            "rows",
            "hidden_row",
            "hidden",
            "feature",
            "answer_prefix",
        ],
        Membership => &[
            "name",
            "example_1",
            "label_1",
            "example_2",
            "label_2",
            "query",
        ],
        Classify0Shot => &["row", "question", "answer_hint"],
        Classify1Shot => &["examples", "row", "question", "answer_hint"],
        Header | RowCompletion | FeatureCompletionVerbatim | FirstToken => &[],
    }
}

fn check(
    source_name: &str,
    test: TestId,
    field: &'static str,
    template: &str,
    allowed: &[&str],
) -> Result<(), PackError> {
    for piece in parse_template(template) {
        match piece {
            Piece::Unclosed => {
                return Err(PackError::Unclosed {
                    source_name: source_name.into(),
                    test: test.id(),
                    field,
                });
            }
            Piece::Placeholder(name) if !allowed.contains(&name) => {
                return Err(PackError::UnknownPlaceholder {
                    source_name: source_name.into(),
                    test: test.id(),
                    field,
                    placeholder: name.to_string(),
                    allowed: allowed
                        .iter()
                        .map(|p| format!("{{{p}}}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
            _ => {}
        }
    }
    Ok(())
}

enum Piece<'a> {
    Literal(&'a str),
    Placeholder(&'a str),
    Unclosed,
}

/// Splits `a {x} b {{c}}` into literals and placeholders (`{{`/`}}` are literal braces).
fn parse_template(template: &str) -> Vec<Piece<'_>> {
    let mut pieces = Vec::new();
    let mut rest = template;
    while let Some(pos) = rest.find(['{', '}']) {
        let (before, after) = rest.split_at(pos);
        if !before.is_empty() {
            pieces.push(Piece::Literal(before));
        }
        if let Some(tail) = after.strip_prefix("{{") {
            pieces.push(Piece::Literal("{"));
            rest = tail;
        } else if let Some(tail) = after.strip_prefix("}}") {
            pieces.push(Piece::Literal("}"));
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('}') {
            pieces.push(Piece::Literal("}"));
            rest = tail;
        } else if let Some(end) = after.find('}') {
            pieces.push(Piece::Placeholder(&after[1..end]));
            rest = &after[end + 1..];
        } else {
            pieces.push(Piece::Unclosed);
            return pieces;
        }
    }
    if !rest.is_empty() {
        pieces.push(Piece::Literal(rest));
    }
    pieces
}

/// Fills a validated template. Placeholders without a value render empty.
pub fn render(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 256);
    for piece in parse_template(template) {
        match piece {
            Piece::Literal(text) => out.push_str(text),
            Piece::Placeholder(name) => {
                if let Some((_, value)) = values.iter().find(|(k, _)| *k == name) {
                    out.push_str(value);
                }
            }
            Piece::Unclosed => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_pack_covers_every_test() {
        let pack = PromptPack::builtin();
        for test in TestId::PAPER {
            assert!(!pack.templates(test).template.is_empty());
        }
        assert!(pack.templates(TestId::Classify1Shot).example.is_some());
    }

    #[test]
    fn render_fills_placeholders_and_keeps_literal_braces() {
        assert_eq!(render("a {x} {{y}} b", &[("x", "1")]), "a 1 {y} b");
    }

    #[test]
    fn unknown_placeholder_is_named() {
        let text = DEFAULT_PACK.replace(
            "Dataset: {name}\nWrite every",
            "Dataset: {nmae}\nWrite every",
        );
        let err = PromptPack::parse(&text, "mine.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("mine.toml")
                && err.contains("{nmae}")
                && err.contains("feature-list-uninformed"),
            "{err}"
        );
    }

    #[test]
    fn missing_test_and_unknown_section_are_named() {
        let err = PromptPack::parse("[membership]\ntemplate = \"x\"\n", "p.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no template for test"), "{err}");
        let err = PromptPack::parse("[memberhip]\ntemplate = \"x\"\n", "p.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("[memberhip] is not a test id"), "{err}");
    }

    #[test]
    fn without_rows_belongs_to_feature_completion_and_has_no_rows() {
        let pack = PromptPack::builtin();
        assert!(
            pack.templates(TestId::FeatureCompletion)
                .without_rows
                .is_some()
        );
        let text = DEFAULT_PACK.replace(
            "[membership]\ntemplate",
            "[membership]\nwithout_rows = \"x\"\ntemplate",
        );
        let err = PromptPack::parse(&text, "p.toml").unwrap_err().to_string();
        assert!(
            err.contains("[membership].without_rows is only read in [feature-completion]"),
            "{err}"
        );
        let text = DEFAULT_PACK.replace(
            "In this record the value",
            "{rows}\nIn this record the value",
        );
        let err = PromptPack::parse(&text, "p.toml").unwrap_err().to_string();
        assert!(
            err.contains("[feature-completion].without_rows uses unknown placeholder {rows}"),
            "{err}"
        );
    }

    #[test]
    fn unclosed_brace_is_rejected() {
        let text = DEFAULT_PACK.replace("Columns:\"\"\"", "Columns: {name\"\"\"");
        let err = PromptPack::parse(&text, "p.toml").unwrap_err().to_string();
        assert!(err.contains("unclosed"), "{err}");
    }
}
