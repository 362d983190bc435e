//! Alg1: decides regular-text outputs (feature names, dataset names, feature values).
//!
//! SPEC §3: the expected words that are not English are "unknown". With no unknown word,
//! the output passes iff it contains every expected word; otherwise it passes iff it
//! contains at least one unknown word (a made-up word is hard to guess without having seen
//! the data). The matching rules are the authors' and decide 1–2 % of the cases.

use super::{Dictionary, Word};

/// Which words count as "not English", and how dataset names are matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Alg1Profile {
    /// SPEC §3 as written: Hunspell en_US as shipped; recognition is Alg1 on the long name,
    /// then on each alias, with Alg1's case-insensitive matching. The default of runs.
    #[default]
    Hunspell,
    /// The authors' code, for replaying their logs (optional; the default of `parity`):
    /// Hunspell plus their removals (`blue-collar`, `admin.`, `self-employed` unknown), and
    /// in recognition a dataset name with an inner capital (`MathE`) is matched with its
    /// case (they set `uppercase_important` for MathE: folded, `mathe` hides in
    /// "Mathematics").
    Paper,
}

/// Words the authors removed from their enchant dictionary to match an older enchant
/// version; the `paper` profile treats them as unknown, in any capitalisation (enchant's
/// exclusion list also rejects `Blue-collar` and `BLUE-COLLAR` once `blue-collar` is in it).
const PAPER_REMOVED_WORDS: [&str; 3] = ["blue-collar", "admin.", "self-employed"];

impl Alg1Profile {
    /// Parses a profile name as given on the command line (`hunspell` or `paper`).
    pub fn from_name(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "hunspell" => Some(Self::Hunspell),
            "paper" => Some(Self::Paper),
            _ => None,
        }
    }

    /// True when `word` is English under this profile.
    fn is_english(self, word: &str, dictionary: &Dictionary) -> bool {
        let removed = || {
            PAPER_REMOVED_WORDS
                .iter()
                .any(|removed| removed.eq_ignore_ascii_case(word))
        };
        if self == Self::Paper && removed() {
            return false;
        }
        dictionary.contains(word)
    }
}

/// True when the output shows a hint of contamination for these expected words.
///
/// An empty `expected` list gives `false`: with nothing to look for there is no hint.
pub fn alg1(
    output: &str,
    expected: &[Word],
    dictionary: &Dictionary,
    profile: Alg1Profile,
) -> bool {
    if expected.is_empty() {
        return false;
    }
    let haystack = Haystack::new(output);
    // Only strings can be unknown: missing values and booleans are never dataset-specific.
    let unknown: Vec<&str> = expected
        .iter()
        .filter_map(|word| match word {
            Word::Text(text) if !profile.is_english(text, dictionary) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    if unknown.is_empty() {
        expected.iter().all(|word| haystack.contains_word(word))
    } else {
        unknown.iter().any(|text| haystack.contains_text(text))
    }
}

/// Alg1 for dataset recognition (tests 3–4): the long name first, then each alias, one at a
/// time; passes as soon as one of them passes (SPEC §3, nothing more). Under the `paper`
/// profile only, a name with an inner capital is matched with its case (see
/// [`Alg1Profile::Paper`]).
pub fn alg1_any_name(
    output: &str,
    names: &[String],
    dictionary: &Dictionary,
    profile: Alg1Profile,
) -> bool {
    let mut exact: Option<Haystack> = None;
    names.iter().any(|name| {
        if profile == Alg1Profile::Paper && has_inner_capital(name) {
            exact
                .get_or_insert_with(|| Haystack::exact(output))
                .contains_text(name)
        } else {
            let single = [Word::Text(name.clone())];
            alg1(output, &single, dictionary, profile)
        }
    })
}

/// True for camel-case names: a lowercase letter directly followed by an uppercase one.
fn has_inner_capital(name: &str) -> bool {
    let chars: Vec<char> = name.chars().collect();
    chars
        .windows(2)
        .any(|pair| pair[0].is_lowercase() && pair[1].is_uppercase())
}

/// The output prepared once for the searches of every expected word.
struct Haystack {
    /// Whether words and output are compared case-insensitively (the default of Alg1).
    fold_case: bool,
    /// The output (lowercased when folding case).
    plain: String,
    /// The same with `_` read as `.` (for words such as `marital.status`).
    underscores_as_dots: String,
    /// The same with `_` read as a space (for words such as `Saving accounts`).
    underscores_as_spaces: String,
}

impl Haystack {
    /// Case-insensitive matching (Alg1's rule).
    fn new(output: &str) -> Self {
        Self::build(output.to_lowercase(), true)
    }

    /// Case-sensitive matching, for camel-case dataset names.
    fn exact(output: &str) -> Self {
        Self::build(output.to_owned(), false)
    }

    fn build(plain: String, fold_case: bool) -> Self {
        Self {
            fold_case,
            underscores_as_dots: plain.replace('_', "."),
            underscores_as_spaces: plain.replace('_', " "),
            plain,
        }
    }

    /// Missing values count as found; booleans are spelled `true` / `false`.
    fn contains_word(&self, word: &Word) -> bool {
        match word {
            Word::Missing => true,
            Word::Bool(value) => self.contains_text(if *value { "true" } else { "false" }),
            Word::Text(text) => self.contains_text(text),
        }
    }

    /// The authors' matching rules, in their order of precedence.
    fn contains_text(&self, word: &str) -> bool {
        // A unit or remark in parentheses is optional: `sepal length (cm)` → `sepal length`.
        let word = match word.split_once('(') {
            Some((head, _)) => head.trim(),
            None => word,
        };
        let word = if self.fold_case {
            word.to_lowercase()
        } else {
            word.to_owned()
        };
        // LLMs often write identifiers with underscores; read them back as the word's own
        // separator. A dot takes precedence over a space, as in the authors' code.
        let haystack = if word.contains('.') {
            &self.underscores_as_dots
        } else if word.contains(' ') {
            &self.underscores_as_spaces
        } else {
            &self.plain
        };
        if haystack.contains(&word) {
            return true;
        }
        // And the other way round: `ocean_proximity` also matches `ocean proximity`.
        word.contains('_') && haystack.contains(&word.replace('_', " "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dictionary knowing a handful of English words (no affix rules).
    fn dictionary() -> Dictionary {
        let words = [
            "age", "sex", "income", "status", "marital", "yes", "no", "true", "false", "blue",
            "collar", "admin", "self", "employed", "length", "width", "sepal", "ocean",
        ];
        let dic = format!("{}\n{}\n", words.len(), words.join("\n"));
        Dictionary::from_texts("SET UTF-8\n", &dic).expect("test dictionary parses")
    }

    fn text(words: &[&str]) -> Vec<Word> {
        words.iter().map(|w| Word::Text((*w).to_owned())).collect()
    }

    fn judge(output: &str, words: &[Word]) -> bool {
        alg1(output, words, &dictionary(), Alg1Profile::Hunspell)
    }

    #[test]
    fn all_english_words_must_all_appear() {
        let expected = text(&["age", "sex", "income"]);
        assert!(judge("age, sex, income", &expected));
        assert!(!judge("age, sex", &expected));
    }

    #[test]
    fn one_unknown_word_is_enough() {
        let expected = text(&["age", "fnlwgt", "zxqv"]);
        assert!(judge("the fnlwgt column", &expected));
        // English words alone do not pass when an unknown word exists.
        assert!(!judge("age", &expected));
    }

    #[test]
    fn matching_ignores_case() {
        assert!(judge("FNLWGT", &text(&["fnlwgt"])));
        assert!(judge("fnlwgt", &text(&["FnlWgt"])));
    }

    #[test]
    fn parenthesised_tail_is_cut() {
        assert!(judge(
            "sepal length, sepal width",
            &text(&["sepal length (cm)"])
        ));
    }

    #[test]
    fn underscores_read_as_dots_for_dotted_words() {
        assert!(judge("marital_status", &text(&["marital.status"])));
    }

    #[test]
    fn underscores_read_as_spaces_for_spaced_words() {
        assert!(judge("Saving_accounts", &text(&["Saving accounts"])));
    }

    #[test]
    fn dot_rule_takes_precedence_over_space_rule() {
        // The word has both a dot and a space: only `_` → `.` applies (authors' order).
        assert!(!judge("foo_bar.baz", &text(&["foo bar.baz"])));
        assert!(judge("foo bar_baz", &text(&["foo bar.baz"])));
    }

    #[test]
    fn underscore_words_match_with_spaces() {
        assert!(judge("ocean proximity", &text(&["ocean_proximity"])));
    }

    #[test]
    fn missing_counts_as_found_and_is_never_unknown() {
        let expected = vec![Word::Text("yes".into()), Word::Missing];
        assert!(judge("yes", &expected));
        // With an unknown word, Missing does not make the output pass on its own.
        let expected = vec![Word::Text("zxqv".into()), Word::Missing];
        assert!(!judge("nothing here", &expected));
    }

    #[test]
    fn booleans_match_true_and_false() {
        let expected = vec![Word::Bool(true), Word::Bool(false)];
        assert!(judge("True or False", &expected));
        assert!(!judge("True", &expected));
    }

    #[test]
    fn paper_profile_treats_removed_words_as_unknown() {
        let dictionary = dictionary();
        let expected = text(&["blue-collar", "yes"]);
        // Hunspell: both English, both needed.
        assert!(!alg1(
            "blue-collar",
            &expected,
            &dictionary,
            Alg1Profile::Hunspell
        ));
        // Paper: `blue-collar` is unknown, so it alone passes.
        assert!(alg1(
            "blue-collar",
            &expected,
            &dictionary,
            Alg1Profile::Paper
        ));
        let expected = text(&["Admin.", "self-employed", "yes"]);
        assert!(alg1(
            "self-employed",
            &expected,
            &dictionary,
            Alg1Profile::Paper
        ));
        assert!(alg1("admin.", &expected, &dictionary, Alg1Profile::Paper));
    }

    #[test]
    fn empty_expected_list_never_passes() {
        assert!(!judge("anything", &[]));
    }

    #[test]
    fn any_name_tries_aliases() {
        let names = vec!["adult income".to_owned(), "adult".to_owned()];
        assert!(alg1_any_name(
            "The Adult dataset",
            &names,
            &dictionary(),
            Alg1Profile::Hunspell
        ));
        assert!(!alg1_any_name(
            "census",
            &names,
            &dictionary(),
            Alg1Profile::Hunspell
        ));
    }

    #[test]
    fn names_fold_case_by_default_and_camel_case_keeps_it_under_the_paper_profile() {
        let names = vec!["MathE".to_owned()];
        // SPEC §3: case-insensitive substring, nothing more.
        assert!(alg1_any_name(
            "Mathematics Exam",
            &names,
            &dictionary(),
            Alg1Profile::Hunspell
        ));
        // The authors' code matched MathE with its case.
        assert!(!alg1_any_name(
            "Mathematics Exam",
            &names,
            &dictionary(),
            Alg1Profile::Paper
        ));
        assert!(alg1_any_name(
            "the MathE dataset",
            &names,
            &dictionary(),
            Alg1Profile::Paper
        ));
        // Names without an inner capital fold case under both profiles.
        let names = vec!["Adult".to_owned()];
        for profile in [Alg1Profile::Hunspell, Alg1Profile::Paper] {
            assert!(alg1_any_name("ADULT", &names, &dictionary(), profile));
        }
        assert!(has_inner_capital("PassengerId"));
        assert!(!has_inner_capital("COMPAS"));
        assert!(!has_inner_capital("spaceship_titanic"));
    }

    #[test]
    fn profile_names_parse() {
        assert_eq!(Alg1Profile::from_name("paper"), Some(Alg1Profile::Paper));
        assert_eq!(
            Alg1Profile::from_name("Hunspell"),
            Some(Alg1Profile::Hunspell)
        );
        assert_eq!(Alg1Profile::from_name("enchant"), None);
    }
}
