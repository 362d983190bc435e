//! Echo guard (SPEC §8): a passed trial is an echo when the evidence that made it pass was
//! already printed in its own prompt, so the pass says nothing about the training data.
//!
//! The evidence is what the trial's rule found in the output: the expected words (Alg1),
//! the dataset name that matched (recognition) or the (feature, value) pairs (Alg2). The
//! trial is an echo when every piece of that evidence is also found, by the same matching
//! rule, in the prompt. Classification answers are never echoes: their choices are always
//! listed in the prompt by design, and their chance level covers guessing instead.

use super::{Expected, TrialVerdict};
use crate::decide::{self, Alg1Profile, Alg2Scope, Dictionary, Word};

/// True when `verdict` is a pass whose evidence already occurs in `prompt`.
pub fn is_echo(
    prompt: &str,
    output: &str,
    expected: &Expected,
    verdict: TrialVerdict,
    dictionary: &Dictionary,
    profile: Alg1Profile,
) -> bool {
    if !verdict.passed {
        return false;
    }
    match expected {
        Expected::Words { words } => {
            let evidence: Vec<&Word> = words
                .iter()
                .filter(|word| !matches!(word, Word::Missing))
                .filter(|word| found_word(output, word, dictionary, profile))
                .collect();
            !evidence.is_empty()
                && evidence
                    .iter()
                    .all(|word| found_word(prompt, word, dictionary, profile))
        }
        Expected::Names { names } => {
            let matched: Vec<&String> = names
                .iter()
                .filter(|name| {
                    decide::alg1_any_name(output, std::slice::from_ref(*name), dictionary, profile)
                })
                .collect();
            !matched.is_empty()
                && matched.iter().all(|name| {
                    decide::alg1_any_name(prompt, std::slice::from_ref(*name), dictionary, profile)
                })
        }
        Expected::Row { fields, scope } => {
            let evidence: Vec<&(String, decide::Cell)> = fields
                .iter()
                .filter(|field| decide::alg2(output, std::slice::from_ref(*field), *scope))
                .collect();
            !evidence.is_empty()
                && evidence.iter().all(|field| {
                    decide::alg2(prompt, std::slice::from_ref(*field), Alg2Scope::Whole)
                })
        }
        Expected::Choice { .. } => false,
        // The header rule already discounts whatever copying from the prompt explains, and
        // the first-token test's chance level covers guessing.
        Expected::Continuation { .. } | Expected::FirstToken { .. } => false,
        // An exact row or value that the prompt shows as a line or a field was copied.
        Expected::ExactRow { row } => prompt.lines().any(|line| line == row),
        Expected::ExactValue { value, .. } => {
            let field = super::verbatim::csv_field(value);
            prompt
                .lines()
                .any(|line| line.split(',').any(|f| f == field || f == value))
        }
    }
}

/// Alg1 on a single known word: true when `text` contains it. A single word that is not
/// English passes on its own presence, and an English one must be present, so Alg1 on one
/// word is exactly "found by Alg1's matching".
fn found_word(text: &str, word: &Word, dictionary: &Dictionary, profile: Alg1Profile) -> bool {
    decide::alg1(text, std::slice::from_ref(word), dictionary, profile)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dictionary() -> Dictionary {
        Dictionary::shipped().expect("shipped dictionary")
    }

    const PASSED: TrialVerdict = TrialVerdict {
        passed: true,
        invalid: false,
    };

    #[test]
    fn a_value_printed_in_the_prompt_is_an_echo_and_a_new_one_is_not() {
        let dictionary = dictionary();
        let expected = Expected::Names {
            names: vec!["Iris".into(), "Iris-setosa".into()],
        };
        let prompt = "sepal length is 5.1, class is Iris-setosa\nWhich dataset is this?";
        let echo = is_echo(
            prompt,
            "It is the Iris-setosa data",
            &expected,
            PASSED,
            &dictionary,
            Alg1Profile::Hunspell,
        );
        assert!(echo);
        let prompt_without = "sepal length is 5.1\nWhich dataset is this?";
        let evidence = is_echo(
            prompt_without,
            "It is the Iris-setosa data",
            &expected,
            PASSED,
            &dictionary,
            Alg1Profile::Hunspell,
        );
        assert!(!evidence);
    }

    #[test]
    fn row_values_count_only_when_every_matched_value_is_in_the_prompt() {
        let dictionary = dictionary();
        let expected = Expected::Row {
            fields: vec![
                ("a".into(), decide::Cell::Int(17)),
                ("b".into(), decide::Cell::Text("Zorblat".into())),
            ],
            scope: Alg2Scope::FirstLine,
        };
        let output = "a is 17, b is Zorblat";
        let partly = "a is 17, b is Quux";
        assert!(!is_echo(
            partly,
            output,
            &expected,
            PASSED,
            &dictionary,
            Alg1Profile::Hunspell
        ));
        let fully = "a is 17, b is Zorblat";
        assert!(is_echo(
            fully,
            output,
            &expected,
            PASSED,
            &dictionary,
            Alg1Profile::Hunspell
        ));
        let failed = TrialVerdict {
            passed: false,
            invalid: false,
        };
        assert!(!is_echo(
            fully,
            output,
            &expected,
            failed,
            &dictionary,
            Alg1Profile::Hunspell
        ));
    }
}
