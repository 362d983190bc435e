//! Alg2: decides row completions by exact per-feature matching.
//!
//! SPEC §3: every expected (feature, value) must be found in the judged part of the output.
//! A number compares numerically when the judged text is a bare number (`452600` matches
//! 452600.0); a value with a space is searched as a substring; any other value must be a
//! whole whitespace-separated token, up to the punctuation `, \n : ; ! ? '` at its ends
//! (`Private,` matches `Private`, `Private-sector` does not).

use std::borrow::Cow;

use super::Cell;

/// Which part of the output Alg2 reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Alg2Scope {
    /// The first non-empty output line (tests 7 and 9).
    FirstLine,
    /// The first output line that looks like a serialized row (test 8): the first line with
    /// at least [`ROW_MIN_TOKENS`] whitespace-separated tokens, else the first non-empty line.
    FirstRowLike,
    /// The whole output, unsplit (for outputs already cut to the judged line, and for
    /// serializations whose feature separator is a newline).
    Whole,
}

/// A line with fewer tokens is a preamble (`Next example:`), not a row: the authors' own
/// threshold for skipping a first line in test 8.
pub const ROW_MIN_TOKENS: usize = 5;

/// Punctuation that may cling to a value at either end of its token.
const TOKEN_EDGE_PUNCTUATION: [char; 7] = [',', '\n', ':', ';', '!', '?', '\''];

impl Alg2Scope {
    /// The part of `output` this scope judges.
    pub fn select(self, output: &str) -> &str {
        let mut non_empty = output.lines().filter(|line| is_non_empty(line));
        match self {
            Self::Whole => output,
            Self::FirstLine => non_empty.next().unwrap_or(""),
            Self::FirstRowLike => {
                let first = output.lines().find(|line| is_row_like(line));
                first.or_else(|| non_empty.next()).unwrap_or("")
            }
        }
    }

    /// The rule that stops generation once this scope's judged part is written; `None`
    /// for [`Alg2Scope::Whole`], which reads the whole output.
    pub fn stop_rule(self) -> Option<StopRule> {
        match self {
            Self::FirstLine => Some(StopRule::FirstLine),
            Self::FirstRowLike => Some(StopRule::FirstRowLike),
            Self::Whole => None,
        }
    }
}

/// A line [`Alg2Scope::FirstLine`] can judge.
fn is_non_empty(line: &str) -> bool {
    !line.trim().is_empty()
}

/// A line [`Alg2Scope::FirstRowLike`] takes for a row.
fn is_row_like(line: &str) -> bool {
    line.split_whitespace().count() >= ROW_MIN_TOKENS
}

/// When generation may stop because the test's rule has read everything it will judge
/// (issue 24): a generation parameter, so part of the request key, and applied by the
/// local engine as it decodes. Each rule is its [`Alg2Scope`] seen from the writing side,
/// built on the same line tests ([`is_non_empty`], [`is_row_like`]), so an answer cut by
/// the rule gets the verdict the whole answer would get: the judged line is the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopRule {
    /// Stop after the line break that ends the first non-empty line (tests 7 and 9). A
    /// literal `"\n"` stop would be wrong: an answer opening with a line break would be
    /// cut to nothing, and its judged line is the next one.
    FirstLine,
    /// Stop after the line break that ends the first line with at least
    /// [`ROW_MIN_TOKENS`] tokens (test 8). An answer with no such line runs to its budget:
    /// its judged line is then the first non-empty one, which only the whole answer can
    /// tell.
    FirstRowLike,
}

impl StopRule {
    /// The name hashed into request keys and stored with the request's parameters.
    pub fn id(self) -> &'static str {
        match self {
            Self::FirstLine => "first-line",
            Self::FirstRowLike => "first-row-like",
        }
    }

    /// The scope whose judged part this rule waits for.
    pub fn scope(self) -> Alg2Scope {
        match self {
            Self::FirstLine => Alg2Scope::FirstLine,
            Self::FirstRowLike => Alg2Scope::FirstRowLike,
        }
    }

    /// Where `text` (an answer so far) may end: the byte just past the line break that
    /// completes the judged line, or `None` while more text could still change which line
    /// is judged. Only whole lines count: a line's last token may still be coming.
    pub fn decided_at(self, text: &str) -> Option<usize> {
        let mut start = 0;
        while let Some(offset) = text[start..].find('\n') {
            let end = start + offset + 1;
            // The line as `str::lines` gives it (without `\n` or `\r\n`).
            let line = &text[start..end - 1];
            let line = line.strip_suffix('\r').unwrap_or(line);
            let judged = match self {
                Self::FirstLine => is_non_empty(line),
                Self::FirstRowLike => is_row_like(line),
            };
            if judged {
                return Some(end);
            }
            start = end;
        }
        None
    }

    /// Cuts `text` where the rule stops it; true when it did.
    pub fn cut(self, text: &mut String) -> bool {
        match self.decided_at(text) {
            Some(end) if end < text.len() => {
                text.truncate(end);
                true
            }
            Some(_) => true,
            None => false,
        }
    }
}

/// True when every expected (feature, value) is found in the scoped output.
///
/// An empty `expected` list gives `false`: with nothing to compare there is no hint.
pub fn alg2(output: &str, expected: &[(String, Cell)], scope: Alg2Scope) -> bool {
    if expected.is_empty() {
        return false;
    }
    let judged = scope.select(output);
    let output_number = parse_number(judged.trim());
    expected
        .iter()
        .all(|(_, value)| value_matches(judged, output_number, value))
}

/// One expected value against the judged text.
fn value_matches(judged: &str, output_number: Option<f64>, value: &Cell) -> bool {
    if let Some(number) = output_number {
        // A bare number is compared as a number; a non-numeric value cannot match it.
        return cell_number(value).is_some_and(|expected| expected == number);
    }
    let spelled = cell_text(value);
    if spelled.contains(' ') {
        return judged.contains(spelled.as_ref());
    }
    judged.split_whitespace().any(|token| {
        token.contains(spelled.as_ref())
            && token
                .trim_matches(TOKEN_EDGE_PUNCTUATION.as_slice())
                .chars()
                .count()
                == spelled.chars().count()
    })
}

/// The value as a number, when it is one (text cells too: `"1"` equals `1`).
fn cell_number(value: &Cell) -> Option<f64> {
    match value {
        Cell::Int(int) => Some(*int as f64),
        Cell::Float(float) => Some(*float).filter(|f| f.is_finite()),
        Cell::Text(text) => parse_number(text.trim()),
    }
}

/// The value as the output should spell it. Floats take their shortest round-trip form,
/// which reads integral floats as integers (`5.0` → `5`) and others as Python prints them
/// (`8.05`).
fn cell_text(value: &Cell) -> Cow<'_, str> {
    match value {
        Cell::Text(text) => Cow::Borrowed(text.as_str()),
        Cell::Int(int) => Cow::Owned(int.to_string()),
        Cell::Float(float) => Cow::Owned(float.to_string()),
    }
}

/// Parses a plain decimal number: optional sign, digits with at most one decimal point
/// (`.5`, `5.` allowed), optional exponent. `nan`, `inf` and thousands separators are not
/// numbers here, so that `nan` (a missing value) is matched as text.
fn parse_number(text: &str) -> Option<f64> {
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let mantissa = unsigned
        .split_once(['e', 'E'])
        .map_or(unsigned, |(mantissa, exponent)| {
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                // Not a valid exponent: poison the mantissa so the check below fails.
                ""
            } else {
                mantissa
            }
        });
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let valid = !(int_part.is_empty() && frac_part.is_empty())
        && all_digits(int_part)
        && all_digits(frac_part);
    if !valid {
        return None;
    }
    text.parse::<f64>().ok().filter(|f| f.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(values: &[(&str, Cell)]) -> Vec<(String, Cell)> {
        values
            .iter()
            .map(|(name, value)| ((*name).to_owned(), value.clone()))
            .collect()
    }

    fn text(value: &str) -> Cell {
        Cell::Text(value.to_owned())
    }

    #[test]
    fn every_feature_must_match() {
        let expected = row(&[("sex", text("Male")), ("race", text("White"))]);
        assert!(alg2(
            "The sex is Male, The race is White",
            &expected,
            Alg2Scope::FirstLine
        ));
        assert!(!alg2(
            "The sex is Male, The race is Black",
            &expected,
            Alg2Scope::FirstLine
        ));
    }

    #[test]
    fn integral_float_compares_as_integer() {
        let expected = row(&[("median_house_value", Cell::Float(452600.0))]);
        assert!(alg2(
            "The value is 452600, ok",
            &expected,
            Alg2Scope::FirstLine
        ));
        assert!(!alg2(
            "The value is 452600.0, ok",
            &expected,
            Alg2Scope::FirstLine
        ));
    }

    #[test]
    fn non_integral_float_is_spelled_shortest() {
        let expected = row(&[("fare", Cell::Float(8.05))]);
        assert!(alg2(
            "The Fare is 8.05, The",
            &expected,
            Alg2Scope::FirstLine
        ));
    }

    #[test]
    fn bare_number_output_compares_numerically() {
        let expected = row(&[("id", Cell::Int(5))]);
        assert!(alg2(" 5", &expected, Alg2Scope::FirstLine));
        assert!(alg2("5.0", &expected, Alg2Scope::FirstLine));
        assert!(!alg2(" 53", &expected, Alg2Scope::FirstLine));
        // A numeric text value compares as a number too.
        assert!(alg2("1", &row(&[("id", text("1"))]), Alg2Scope::FirstLine));
        // A bare number never matches a non-numeric value, even by substring.
        assert!(!alg2(
            "0",
            &row(&[("target", text("class_0"))]),
            Alg2Scope::FirstLine
        ));
    }

    #[test]
    fn nan_output_is_text_not_number() {
        assert!(alg2(
            "nan",
            &row(&[("Cabin", text("nan"))]),
            Alg2Scope::FirstLine
        ));
    }

    #[test]
    fn value_with_space_is_a_substring() {
        let expected = row(&[("ocean_proximity", text("NEAR BAY"))]);
        assert!(alg2(
            "The ocean_proximity is NEAR BAYS",
            &expected,
            Alg2Scope::FirstLine
        ));
        // Case matters.
        assert!(!alg2(
            "The ocean_proximity is near bay",
            &expected,
            Alg2Scope::FirstLine
        ));
    }

    #[test]
    fn token_must_have_the_value_length_after_edge_punctuation() {
        let expected = row(&[("workclass", text("Private"))]);
        assert!(alg2(
            "The workclass is Private, The",
            &expected,
            Alg2Scope::FirstLine
        ));
        assert!(alg2("'Private'; next", &expected, Alg2Scope::FirstLine));
        assert!(!alg2(
            "The workclass is Private-sector",
            &expected,
            Alg2Scope::FirstLine
        ));
        // A full stop is not stripped (authors' list).
        assert!(!alg2(
            "The workclass is Private.",
            &expected,
            Alg2Scope::FirstLine
        ));
        // Case matters.
        assert!(!alg2(
            "The workclass is private",
            &expected,
            Alg2Scope::FirstLine
        ));
    }

    #[test]
    fn first_line_scope_ignores_later_lines() {
        let expected = row(&[("y", text("no"))]);
        assert!(!alg2(
            "The y is yes\nThe y is no",
            &expected,
            Alg2Scope::FirstLine
        ));
        assert!(alg2(
            "\n\nThe y is no\nrest",
            &expected,
            Alg2Scope::FirstLine
        ));
        assert!(alg2(
            "The y is yes\nThe y is no",
            &expected,
            Alg2Scope::Whole
        ));
    }

    #[test]
    fn first_row_like_scope_skips_preamble() {
        let expected = row(&[("age", text("39"))]);
        let output = "Next example:\nThe age is 39, The sex is Male\n";
        assert!(alg2(output, &expected, Alg2Scope::FirstRowLike));
        assert!(!alg2(output, &expected, Alg2Scope::FirstLine));
        // No row-like line: fall back to the first non-empty one.
        assert!(alg2("age 39", &expected, Alg2Scope::FirstRowLike));
    }

    #[test]
    fn empty_expected_never_passes() {
        assert!(!alg2("anything", &[], Alg2Scope::FirstLine));
    }

    #[test]
    fn numbers_parse_strictly() {
        assert_eq!(parse_number("452600"), Some(452600.0));
        assert_eq!(parse_number("-1.5e3"), Some(-1500.0));
        assert_eq!(parse_number(".5"), Some(0.5));
        assert_eq!(parse_number("nan"), None);
        assert_eq!(parse_number("inf"), None);
        assert_eq!(parse_number("1,000"), None);
        assert_eq!(parse_number("."), None);
        assert_eq!(parse_number("1e"), None);
        assert_eq!(parse_number(""), None);
    }

    #[test]
    fn first_line_rule_waits_for_a_finished_non_empty_line() {
        let rule = StopRule::FirstLine;
        // Leading line breaks and blank lines are not the judged line: no stop yet.
        assert_eq!(rule.decided_at(""), None);
        assert_eq!(rule.decided_at("\n"), None);
        assert_eq!(rule.decided_at("\n  \r\n"), None);
        // A line still being written may gain tokens.
        assert_eq!(rule.decided_at("\nThe age is 3"), None);
        assert_eq!(rule.decided_at("\nThe age is 39\n"), Some(15));
        let mut text = "\r\nThe age is 39\r\nThe age is 40\n".to_string();
        assert!(rule.cut(&mut text));
        assert_eq!(text, "\r\nThe age is 39\r\n");
    }

    #[test]
    fn first_row_like_rule_skips_preambles_and_waits_for_a_row() {
        let rule = StopRule::FirstRowLike;
        assert_eq!(rule.decided_at("Next example:\n"), None);
        // Five tokens, but unfinished: the line may not end there.
        assert_eq!(rule.decided_at("Next example:\na is 1, b"), None);
        let text = "Next example:\na is 1, b is 2\na is 3, b is 4\n";
        assert_eq!(
            rule.decided_at(text),
            Some("Next example:\na is 1, b is 2\n".len())
        );
        // No row-like line at all: the judged line is the first non-empty one, which only
        // the whole answer tells, so nothing is cut.
        let mut short = "yes\nno\n".to_string();
        assert!(!rule.cut(&mut short));
        assert_eq!(short, "yes\nno\n");
    }

    /// The promise the rules keep: the line judged in an answer cut by its rule is the
    /// line judged in the whole answer, so the verdicts agree, on answers shaped the ways
    /// models write them.
    #[test]
    fn an_answer_cut_by_its_rule_is_judged_like_the_whole_answer() {
        let expected = row(&[("age", Cell::Int(39)), ("class", text("<=50K"))]);
        let answers = [
            "The age is 39, The class is <=50K\nThe age is 50, The class is >50K\n",
            "\n\nThe age is 39, The class is <=50K\nmore",
            "Sure!\nThe age is 39, The class is <=50K\n",
            "The age is 50\nThe age is 39, The class is <=50K\n",
            "39 <=50K\r\nThe age is 39, The class is <=50K",
            "   \n\t\nThe age is 39, The class is <=50K",
            "",
            "\n",
        ];
        for scope in [Alg2Scope::FirstLine, Alg2Scope::FirstRowLike] {
            let rule = scope.stop_rule().expect("a line scope has a rule");
            assert_eq!(rule.scope(), scope);
            for answer in answers {
                let mut cut = answer.to_string();
                rule.cut(&mut cut);
                assert!(answer.starts_with(&cut));
                assert_eq!(
                    scope.select(&cut),
                    scope.select(answer),
                    "{scope:?} {answer:?}"
                );
                assert_eq!(
                    alg2(&cut, &expected, scope),
                    alg2(answer, &expected, scope),
                    "{scope:?} {answer:?}"
                );
            }
        }
        assert_eq!(Alg2Scope::Whole.stop_rule(), None);
    }
}
