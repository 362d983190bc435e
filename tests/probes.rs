//! The twelve probes on a small hand-made dataset: pinned prompts (snapshots) and the
//! properties every draw must keep (determinism, balance, constraints of SPEC §2).

use tabcontam::dataset::descriptor::{ClassAnswer, Classification};
use tabcontam::dataset::{Column, ColumnKind, Dataset, Serialization, Table};
use tabcontam::decide::{Cell, Word};
use tabcontam::probe::{self, Expected, ProbeContext, PromptPack, TestId};

const ROWS: &[[&str; 6]] = &[
    ["P01", "34", "red", "1.5", "north", "yes"],
    ["P02", "51", "blue", "2.0", "south", "no"],
    ["P03", "29", "green", "0.5", "east", "yes"],
    ["P04", "42", "red", "3.25", "", "no"],
    ["P05", "38", "blue", "1.0", "west", "yes"],
    ["P06", "60", "green", "2.75", "north", "no"],
    ["P07", "23", "red", "4.0", "south", "yes"],
    ["P08", "47", "blue", "0.25", "east", "no"],
    ["P09", "55", "green", "1.75", "west", "yes"],
    ["P10", "31", "red", "2.5", "north", "no"],
    ["P11", "44", "blue", "3.5", "south", "yes"],
    ["P12", "36", "green", "1.25", "east", "no"],
];

fn dataset() -> Dataset {
    let names = ["id", "age", "colour", "score", "region", "bought"];
    let kinds = [
        ColumnKind::Text,
        ColumnKind::Integer,
        ColumnKind::Text,
        ColumnKind::Float,
        ColumnKind::Text,
        ColumnKind::Text,
    ];
    let table = Table {
        source: "toy.csv".into(),
        columns: names
            .iter()
            .zip(kinds)
            .map(|(n, kind)| Column {
                name: n.to_string(),
                kind,
                missing: usize::from(*n == "region"),
            })
            .collect(),
        rows: ROWS
            .iter()
            .map(|r| r.iter().map(|c| c.to_string()).collect())
            .collect(),
        missing_tokens: vec!["NA".into()],
    };
    Dataset {
        id: "toy".into(),
        name: "toy shop customers".into(),
        aliases: vec!["toy_shop".into()],
        target: "bought".into(),
        id_column: Some("id".into()),
        categorical: vec!["colour".into(), "region".into()],
        completion_feature: Some("score".into()),
        released: Some("2020".into()),
        classification: Classification {
            question: "Did the customer buy the toy?".into(),
            answers: vec![
                ClassAnswer {
                    answer: "Yes".into(),
                    values: vec!["yes".into()],
                },
                ClassAnswer {
                    answer: "No".into(),
                    values: vec!["no".into()],
                },
            ],
            threshold: None,
        },
        variant: "test".into(),
        table,
    }
}

fn build(test: TestId, serialization: &str, seed: u64) -> probe::Probe {
    let dataset = dataset();
    let serialization = Serialization::builtin(serialization).unwrap();
    let pack = PromptPack::builtin();
    let ctx = ProbeContext {
        dataset: &dataset,
        serialization: &serialization,
        seed,
        pack: &pack,
    };
    probe::build(test, &ctx).unwrap()
}

/// One readable document per test: the first prompts and their expectations.
fn render(probe: &probe::Probe, limit: usize) -> String {
    let mut out = String::new();
    for p in probe.prompts.iter().take(limit) {
        out.push_str(&format!(
            "### trial {} (max {} tokens){}\n{}\n### expected {}\n\n",
            p.trial,
            p.max_tokens,
            p.note
                .as_deref()
                .map(|n| format!(", {n}"))
                .unwrap_or_default(),
            p.text,
            serde_json::to_string(&p.expected).unwrap()
        ));
    }
    out.push_str(&format!("({} prompts)\n", probe.prompts.len()));
    out
}

#[test]
fn prompt_snapshots() {
    for test in TestId::ALL {
        let limit = if matches!(
            test,
            TestId::Membership | TestId::Classify0Shot | TestId::Classify1Shot
        ) {
            2
        } else {
            5
        };
        insta::assert_snapshot!(test.id(), render(&build(test, "the-is", 0), limit));
    }
}

#[test]
fn prompts_are_byte_identical_across_builds_and_change_with_the_seed() {
    for test in TestId::ALL {
        let a = build(test, "colon", 7);
        let b = build(test, "colon", 7);
        assert_eq!(a, b, "{test}");
        if !matches!(
            test,
            TestId::FeatureListUninformed
                | TestId::RecognitionFeatures
                | TestId::FeatureValuesUninformed
                | TestId::FullCompletion
        ) {
            assert_ne!(
                a.prompts,
                build(test, "colon", 8).prompts,
                "{test}: the seed must change the draws"
            );
        }
    }
}

#[test]
fn serialization_only_matters_for_tests_with_rows() {
    for test in TestId::ALL {
        let a = build(test, "the-is", 0);
        let b = build(test, "equals", 0);
        if test.serializes_rows() {
            assert_ne!(a.prompts[0].text, b.prompts[0].text, "{test}");
            assert_eq!(a.prompts[0].serialization.as_deref(), Some("the-is"));
        } else {
            assert_eq!(
                a.prompts, b.prompts,
                "{test}: prompts without rows are shared across templates"
            );
            assert_eq!(a.prompts[0].serialization, None);
        }
    }
}

#[test]
fn max_tokens_and_trial_counts_follow_the_spec() {
    let expect = [
        (TestId::FeatureListInformed, 256, 3),
        (TestId::FeatureListUninformed, 256, 1),
        (TestId::RecognitionFeatures, 16, 1),
        (TestId::RecognitionExamples, 16, 1),
        (TestId::FeatureValuesInformed, 128, 2),
        (TestId::FeatureValuesUninformed, 128, 2),
        (TestId::IncompleteCompletion, 256, 5),
        (TestId::FullCompletion, 512, 1),
        (TestId::FeatureCompletion, 64, 5),
        (TestId::Membership, 4, 100),
        (TestId::Classify0Shot, 4, 12),
        (TestId::Classify1Shot, 4, 12),
    ];
    for (test, max_tokens, count) in expect {
        let probe = build(test, "the-is", 0);
        assert_eq!(probe.prompts.len(), count, "{test}");
        assert!(
            probe.prompts.iter().all(|p| p.max_tokens == max_tokens),
            "{test}"
        );
    }
}

#[test]
fn feature_lists_leave_out_the_identifier_and_the_given_features() {
    let probe = build(TestId::FeatureListUninformed, "the-is", 0);
    let Expected::Words { words } = &probe.prompts[0].expected else {
        panic!()
    };
    assert!(!words.contains(&Word::Text("id".into())));
    assert_eq!(words.len(), 5);
    for p in build(TestId::FeatureListInformed, "the-is", 0).prompts {
        let Expected::Words { words } = &p.expected else {
            panic!()
        };
        // min(5, ncols - 2) = 4 given; the rest (minus the id) expected.
        for word in words {
            let Word::Text(name) = word else { panic!() };
            assert!(
                !p.text.contains(&format!(" {name},")) && !p.text.ends_with(name.as_str()),
                "{name} given and expected"
            );
        }
    }
}

#[test]
fn informed_values_always_leave_a_value_unseen() {
    for seed in 0..20 {
        for p in build(TestId::FeatureValuesInformed, "the-is", seed).prompts {
            let Expected::Words { words } = &p.expected else {
                panic!()
            };
            assert!(
                words.iter().any(|w| matches!(w, Word::Text(_))),
                "seed {seed}: {p:?}"
            );
            for word in words {
                if let Word::Text(v) = word {
                    let feature = p.note.as_deref().unwrap().trim_start_matches("feature: ");
                    assert!(
                        !p.text.contains(&format!("The {feature} is {v},")),
                        "seed {seed}: {v} shown and expected"
                    );
                }
            }
        }
    }
}

#[test]
fn membership_is_balanced_and_modified_rows_are_not_in_the_dataset() {
    let probe = build(TestId::Membership, "the-is", 0);
    let originals: Vec<String> = {
        let d = dataset();
        let s = Serialization::builtin("the-is").unwrap();
        (0..d.table.n_rows()).map(|r| s.row(&d.table, r)).collect()
    };
    let mut yes = 0;
    for p in &probe.prompts {
        let Expected::Choice { choices, correct } = &p.expected else {
            panic!()
        };
        assert_eq!(choices, &["Yes", "No"]);
        let query = p
            .text
            .lines()
            .rev()
            .nth(1)
            .unwrap()
            .trim_start_matches("Record: ");
        assert_eq!(
            originals.iter().any(|o| o == query),
            *correct == 0,
            "trial {}: {query}",
            p.trial
        );
        yes += usize::from(*correct == 0);
        // ncols - 3 = 3 values differ from some original row at least.
    }
    assert_eq!(yes, 50);
}

#[test]
fn completion_targets_match_the_rows() {
    for p in build(TestId::IncompleteCompletion, "the-is", 3).prompts {
        let Expected::Row { fields, .. } = &p.expected else {
            panic!()
        };
        let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["score", "region", "bought"]);
        let partial = p.text.lines().last().unwrap();
        assert!(
            partial.ends_with("The colour is red,")
                || partial.ends_with("The colour is blue,")
                || partial.ends_with("The colour is green,"),
            "{partial}"
        );
        let id = partial
            .trim_start_matches("The id is ")
            .split(',')
            .next()
            .unwrap();
        let row = ROWS.iter().find(|r| r[0] == id).unwrap();
        assert_eq!(fields[2].1, Cell::Text(row[5].into()));
    }
    let full = build(TestId::FullCompletion, "the-is", 0);
    let Expected::Row { fields, .. } = &full.prompts[0].expected else {
        panic!()
    };
    assert_eq!(fields[0], ("id".to_string(), Cell::Text("P05".into())));
    assert!(
        full.prompts[0].text.contains("The id is P04") && !full.prompts[0].text.contains("P05")
    );
}

#[test]
fn feature_completion_rows_have_distinct_values() {
    for p in build(TestId::FeatureCompletion, "equals", 1).prompts {
        let rows: Vec<&str> = p.text.lines().filter(|l| l.starts_with("id = ")).collect();
        assert_eq!(rows.len(), 5);
        let mut values: Vec<&str> = rows
            .iter()
            .map(|r| r.rsplit("score = ").next().unwrap())
            .collect();
        assert!(rows[4].ends_with("score ="));
        values.pop();
        let unique: std::collections::HashSet<_> = values.iter().collect();
        assert_eq!(unique.len(), 4);
    }
}

#[test]
fn classification_labels_follow_the_target() {
    for test in [TestId::Classify0Shot, TestId::Classify1Shot] {
        for p in build(test, "the-is", 0).prompts {
            let Expected::Choice { correct, .. } = &p.expected else {
                panic!()
            };
            let query = p.text.lines().rev().nth(2).unwrap();
            let id = query
                .trim_start_matches("The id is ")
                .split(',')
                .next()
                .unwrap();
            let row = ROWS.iter().find(|r| r[0] == id).unwrap();
            assert_eq!(*correct, usize::from(row[5] == "no"), "{test}: {query}");
            assert!(
                !query.contains("bought"),
                "the target must not be shown: {query}"
            );
        }
    }
}

#[test]
fn unknown_test_names_the_known_ones() {
    let err = TestId::parse_or_explain("membershp")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unknown test `membershp`") && err.contains("feature-completion"),
        "{err}"
    );
    assert_eq!(TestId::parse("7"), Some(TestId::IncompleteCompletion));
}
