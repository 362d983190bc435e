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
        let mut non_empty = output.lines().filter(|line| !line.trim().is_empty());
        match self {
            Self::Whole => output,
            Self::FirstLine => non_empty.next().unwrap_or(""),
            Self::FirstRowLike => {
                let first = output
                    .lines()
                    .find(|line| line.split_whitespace().count() >= ROW_MIN_TOKENS);
                first.or_else(|| non_empty.next()).unwrap_or("")
            }
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
}
