//! Decision algorithms against the shipped Hunspell dictionary: dictionary facts of SPEC §3,
//! Alg1 and Alg2 on realistic outputs, and the answer parser.

use std::sync::OnceLock;
use std::time::Instant;

use tabcontam::decide::{
    Alg1Profile, Alg2Scope, Answer, Cell, Dictionary, Word, alg1, alg1_any_name, alg2, parse_answer,
};

/// The shipped dictionary, loaded once for all tests of this file.
fn dictionary() -> &'static Dictionary {
    static DICTIONARY: OnceLock<Dictionary> = OnceLock::new();
    DICTIONARY.get_or_init(|| {
        let started = Instant::now();
        let dictionary = Dictionary::shipped().expect("shipped dictionary loads");
        eprintln!("shipped dictionary loaded in {:?}", started.elapsed());
        dictionary
    })
}

fn words(texts: &[&str]) -> Vec<Word> {
    texts
        .iter()
        .map(|text| Word::Text((*text).to_owned()))
        .collect()
}

fn strings(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|text| (*text).to_owned()).collect()
}

#[test]
fn dictionary_accepts_hyphenated_compounds_of_words() {
    assert!(dictionary().contains("hours-per-week"));
    assert!(dictionary().contains("Married-civ-spouse"));
    assert!(!dictionary().contains("Self-emp-not-inc"));
}

#[test]
fn dictionary_knows_embarked_but_not_passenger_id() {
    assert!(dictionary().contains("Embarked"));
    assert!(!dictionary().contains("PassengerId"));
}

#[test]
fn dictionary_rejects_multi_word_strings() {
    // Hunspell (and enchant on top of it) looks a string with a space up whole.
    assert!(!dictionary().contains("quite rich"));
    assert!(!dictionary().contains("Saving accounts"));
    assert!(dictionary().contains("quite"));
}

#[test]
fn dictionary_follows_hunspell_on_dots_numbers_and_blanks() {
    // Trailing dots mark an abbreviation of a known word.
    assert!(dictionary().contains("admin."));
    // Numbers are accepted.
    assert!(dictionary().contains("1973"));
    // Leading blanks are skipped, trailing ones are not.
    assert!(dictionary().contains(" Probability"));
    assert!(!dictionary().contains("Probability "));
}

#[test]
fn bank_jobs_are_english_for_hunspell_and_unknown_for_the_paper_profile() {
    let expected = words(&[
        "technician",
        "blue-collar",
        "admin.",
        "self-employed",
        "student",
    ]);
    let output = "['blue-collar', 'admin.', 'self-employed']";
    assert!(!alg1(
        output,
        &expected,
        dictionary(),
        Alg1Profile::Hunspell
    ));
    assert!(alg1(output, &expected, dictionary(), Alg1Profile::Paper));
}

#[test]
fn alg1_with_an_unknown_feature_name() {
    let expected = words(&["age", "workclass", "fnlwgt", "education"]);
    assert!(alg1(
        "age, fnlwgt",
        &expected,
        dictionary(),
        Alg1Profile::Hunspell
    ));
    assert!(!alg1(
        "age, education",
        &expected,
        dictionary(),
        Alg1Profile::Hunspell
    ));
}

#[test]
fn alg1_all_english_values_must_all_appear() {
    let expected = words(&["Widowed", "Divorced", "Separated", "Never-married"]);
    assert!(!alg1(
        "Widowed, Divorced, Separated",
        &expected,
        dictionary(),
        Alg1Profile::Hunspell
    ));
    assert!(alg1(
        "widowed, divorced, separated, never-married",
        &expected,
        dictionary(),
        Alg1Profile::Hunspell
    ));
}

#[test]
fn alg1_units_underscores_missing_and_booleans() {
    let dictionary = dictionary();
    let profile = Alg1Profile::Hunspell;
    assert!(alg1(
        "sepal_length",
        &words(&["sepal length (cm)"]),
        dictionary,
        profile
    ));
    assert!(alg1(
        "hours_per_week",
        &words(&["hours.per.week"]),
        dictionary,
        profile
    ));
    assert!(alg1(
        "ocean proximity",
        &words(&["ocean_proximity"]),
        dictionary,
        profile
    ));
    let cabin = vec![Word::Text("C85".into()), Word::Missing];
    assert!(alg1("C85", &cabin, dictionary, profile));
    let transported = vec![Word::Bool(false), Word::Bool(true)];
    assert!(alg1("['False', 'True']", &transported, dictionary, profile));
    assert!(!alg1("['False']", &transported, dictionary, profile));
}

#[test]
fn recognition_tries_the_long_name_then_aliases() {
    let names = strings(&["thyroid disease recurrence", "thyroid_diff"]);
    let profile = Alg1Profile::Hunspell;
    assert!(alg1_any_name("thyroid diff", &names, dictionary(), profile));
    assert!(!alg1_any_name(
        "Thyroid Cancer Dataset",
        &names,
        dictionary(),
        profile
    ));
    // SPEC §3 folds case: `mathe` is found in "Mathematics". Only the optional `paper`
    // profile (the authors' code) matches a camel-case name with its case.
    let names = strings(&["MathE", "MathE"]);
    assert!(alg1_any_name(
        "Mathematics Questions",
        &names,
        dictionary(),
        profile
    ));
    assert!(!alg1_any_name(
        "Mathematics Questions",
        &names,
        dictionary(),
        Alg1Profile::Paper
    ));
}

fn row(values: &[(&str, Cell)]) -> Vec<(String, Cell)> {
    values
        .iter()
        .map(|(feature, value)| ((*feature).to_owned(), value.clone()))
        .collect()
}

#[test]
fn alg2_incomplete_completion_on_the_first_line() {
    let expected = row(&[
        ("hours.per.week", Cell::Text("40".into())),
        ("native.country", Cell::Text("United-States".into())),
        ("income", Cell::Text("<=50K".into())),
    ]);
    let output =
        "The hours.per.week is 40, The native.country is United-States, The income is <=50K";
    assert!(alg2(output, &expected, Alg2Scope::FirstLine));
    let wrong = "The hours.per.week is 40, The native.country is United-States, The income is >50K";
    assert!(!alg2(wrong, &expected, Alg2Scope::FirstLine));
    let later = format!("Sure!\n{output}");
    assert!(!alg2(&later, &expected, Alg2Scope::FirstLine));
}

#[test]
fn alg2_full_completion_skips_a_preamble_line() {
    let expected = row(&[
        ("sepal length (cm)", Cell::Text("5.0".into())),
        ("target", Cell::Text("setosa".into())),
    ]);
    let output = "Next example:\nThe sepal length (cm) is 5.0, The target is setosa\n";
    assert!(alg2(output, &expected, Alg2Scope::FirstRowLike));
}

#[test]
fn alg2_feature_completion_with_numbers() {
    let expected = row(&[("median_house_value", Cell::Float(452600.0))]);
    assert!(alg2("452600", &expected, Alg2Scope::FirstLine));
    assert!(alg2(" 452600.0", &expected, Alg2Scope::FirstLine));
    assert!(!alg2(" 452000.0", &expected, Alg2Scope::FirstLine));
    let passenger = row(&[("PassengerId", Cell::Int(1))]);
    assert!(alg2("1", &passenger, Alg2Scope::FirstLine));
    assert!(!alg2(" 100", &passenger, Alg2Scope::FirstLine));
    let spaceship = row(&[("PassengerId", Cell::Text("0001_01".into()))]);
    // A full stop is not among the punctuation stripped from a token's ends.
    assert!(!alg2(
        "The PassengerId is 0001_01.",
        &spaceship,
        Alg2Scope::FirstLine
    ));
    assert!(alg2(
        "The PassengerId is 0001_01!",
        &spaceship,
        Alg2Scope::FirstLine
    ));
}

#[test]
fn answer_parser_reads_the_first_answer_like_token() {
    let yes_no = strings(&["Yes", "No"]);
    assert_eq!(parse_answer("Yes.", &yes_no), Answer::Valid(0));
    assert_eq!(parse_answer("**No**", &yes_no), Answer::Valid(1));
    assert_eq!(parse_answer("\"yes\"", &yes_no), Answer::Valid(0));
    assert_eq!(parse_answer(" Answer: No", &yes_no), Answer::Valid(1));
    assert_eq!(parse_answer("I think yes", &yes_no), Answer::Invalid);
    assert_eq!(parse_answer("Yes/No", &yes_no), Answer::Invalid);
    let species = strings(&["setosa", "versicolor", "virginica"]);
    assert_eq!(parse_answer("Versicolor", &species), Answer::Valid(1));
    let classes = strings(&["0", "1", "2"]);
    assert_eq!(parse_answer(" 2\n", &classes), Answer::Valid(2));
    assert_eq!(parse_answer("12", &classes), Answer::Invalid);
}

/// Test 10 (SPEC §2): an answer is correct only when the expected word appears and the other
/// does not. Outputs as models give them with 4 new tokens after "Unchanged:".
#[test]
fn membership_answers_name_one_choice_only() {
    let yes_no = strings(&["Yes", "No"]);
    let valid = [
        (" Yes", 0),
        (" No\nRecord:", 1),
        (" Yes\n\nRecord", 0),
        (" No.", 1),
        (" **Yes**", 0),
        ("Yes<|eot_id|>", 0),
        (" No, the record", 1),
        (" Yes, nothing", 0),
    ];
    for (output, index) in valid {
        assert_eq!(
            parse_answer(output, &yes_no),
            Answer::Valid(index),
            "{output:?}"
        );
    }
    let invalid = [
        "Yes or no",
        " Yes or No",
        " Yes/No",
        " No. Yes.",
        " Yes\nUnchanged: No",
        " Unchanged",
        " I cannot tell",
        " The record is",
        "",
    ];
    for output in invalid {
        assert_eq!(parse_answer(output, &yes_no), Answer::Invalid, "{output:?}");
    }
}
