//! The twelve probes on a small hand-made dataset: pinned prompts (snapshots) and the
//! properties every draw must keep (determinism, balance, constraints of SPEC §2).

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mock_server.rs"]
mod mock_server;

use std::path::{Path, PathBuf};

use cli_env::Env;
use tabcontam::dataset::catalog::{Catalog, builtin_descriptors};
use tabcontam::dataset::descriptor::{ClassAnswer, Classification};
use tabcontam::dataset::{Column, ColumnKind, Dataset, Serialization, Table};
use tabcontam::decide::{Alg1Profile, Cell, Dictionary, Word};
use tabcontam::probe::{self, Expected, ProbeContext, PromptPack, TestId, Variant};

/// The data files shipped in the repository.
const SHIPPED_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/datasets");
/// The paper's own files, in the development checkout (optional extra coverage).
const PAPER_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/datasets/paper");
/// The datasets whose files ship with tabcontam.
const SHIPPED: [&str; 6] = ["adult", "german", "housing", "iris", "wine", "titanic"];

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
    build_on(&dataset(), test, serialization, seed, Variant::Paper)
}

fn build_on(
    dataset: &Dataset,
    test: TestId,
    serialization: &str,
    seed: u64,
    variant: Variant,
) -> probe::Probe {
    let serialization = Serialization::builtin(serialization).unwrap();
    let pack = PromptPack::builtin();
    let ctx = ProbeContext {
        dataset,
        serialization: &serialization,
        seed,
        pack: &pack,
        variant,
    };
    probe::build(test, &ctx).unwrap()
}

/// A dataset loaded from the given directory with the shipped descriptors.
fn load(dir: &Path, id: &str) -> Dataset {
    let catalog = Catalog {
        descriptors: builtin_descriptors().unwrap(),
        search_dirs: vec![PathBuf::from(dir)],
    };
    catalog.load(id).unwrap()
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
    for test in TestId::PAPER {
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
    // The authors' code differs from the paper in tests 4 and 9 only.
    for test in [TestId::RecognitionExamples, TestId::FeatureCompletion] {
        let probe = build_on(&dataset(), test, "the-is", 0, Variant::PaperCode);
        insta::assert_snapshot!(format!("{}-paper-code", test.id()), render(&probe, 5));
    }
}

#[test]
fn prompts_are_byte_identical_across_builds_and_change_with_the_seed() {
    for test in TestId::PAPER {
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
    for test in TestId::PAPER {
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
fn feature_completion_hides_the_value_in_place_and_spreads_values() {
    for seed in 0..10 {
        for p in build(TestId::FeatureCompletion, "equals", seed).prompts {
            let rows: Vec<&str> = p.text.lines().filter(|l| l.starts_with("id = ")).collect();
            assert_eq!(rows.len(), 5, "{}", p.text);
            let score = |row: &str| {
                row.split(", ")
                    .find_map(|pair| pair.strip_prefix("score = "))
                    .unwrap()
                    .to_string()
            };
            // The hidden row keeps the file's order: `score` stays the fourth column.
            let hidden = rows[4];
            assert!(
                hidden.contains(", colour = ") && hidden.contains(", score = ___, region = "),
                "{hidden}"
            );
            assert_eq!(p.text.lines().last(), Some("score ="));
            let Expected::Row { fields, .. } = &p.expected else {
                panic!()
            };
            let Cell::Float(expected) = fields[0].1 else {
                panic!("{fields:?}")
            };
            // Filling the blank gives the row as the file has it.
            let id = hidden
                .trim_start_matches("id = ")
                .split(',')
                .next()
                .unwrap();
            let row = ROWS.iter().find(|r| r[0] == id).unwrap();
            assert_eq!(expected, row[3].parse::<f64>().unwrap());
            let mut values: Vec<String> = rows[..4].iter().map(|r| score(r)).collect();
            values.push(row[3].to_string());
            let unique: std::collections::HashSet<_> = values.iter().collect();
            assert_eq!(unique.len(), 5, "seed {seed}: {values:?}");
        }
    }
}

/// SPEC §6/§2: wine's completion feature is its 3-class target; test 9 runs on it.
#[test]
fn wine_feature_completion_asks_for_the_target() {
    let wine = load(Path::new(SHIPPED_DIR), "wine");
    let target = wine.table.column_index("target").unwrap();
    let s = Serialization::builtin("the-is").unwrap();
    for variant in Variant::ALL {
        let probe = build_on(&wine, TestId::FeatureCompletion, "the-is", 0, variant);
        assert_eq!(probe.skipped, None);
        assert_eq!(probe.prompts.len(), 5, "{variant}");
        for p in &probe.prompts {
            let Expected::Row { fields, .. } = &p.expected else {
                panic!()
            };
            assert_eq!(fields.len(), 1);
            assert_eq!(fields[0].0, "target");
            let hidden = p
                .text
                .lines()
                .find(|l| l.starts_with("The target is ___, The alcohol is "))
                .unwrap_or_else(|| panic!("{}", p.text));
            assert_eq!(p.text.lines().last(), Some("The target is"));
            // The row with its target filled in is a row of the file, and the expected
            // value is that row's target.
            let row = (0..wine.table.n_rows())
                .find(|&r| {
                    hidden.replacen("___", &wine.table.rows[r][target], 1) == s.row(&wine.table, r)
                })
                .unwrap_or_else(|| panic!("{hidden}"));
            assert_eq!(
                fields[0].1,
                Cell::Int(wine.table.rows[row][target].parse().unwrap())
            );
            if variant == Variant::PaperCode {
                assert_eq!(row, p.trial as usize, "paper-code asks about rows 0–4");
            }
        }
    }
}

#[test]
fn paper_code_variant_uses_the_first_rows() {
    let d = dataset();
    let s = Serialization::builtin("the-is").unwrap();
    let recognition = build_on(
        &d,
        TestId::RecognitionExamples,
        "the-is",
        3,
        Variant::PaperCode,
    );
    let first_five: Vec<String> = (0..5).map(|r| s.row(&d.table, r)).collect();
    assert!(
        recognition.prompts[0].text.contains(&first_five.join("\n")),
        "{}",
        recognition.prompts[0].text
    );
    assert!(!recognition.prompts[0].text.contains("P06"));
    // The paper's variant draws 4 random rows.
    let paper = build_on(&d, TestId::RecognitionExamples, "the-is", 3, Variant::Paper);
    let shown = (0..d.table.n_rows())
        .filter(|&r| paper.prompts[0].text.contains(&s.row(&d.table, r)))
        .count();
    assert_eq!(shown, 4);

    let completion = build_on(
        &d,
        TestId::FeatureCompletion,
        "the-is",
        3,
        Variant::PaperCode,
    );
    assert_eq!(completion.prompts.len(), 5);
    for (i, p) in completion.prompts.iter().enumerate() {
        assert!(
            !p.text.contains("Records, one per line"),
            "no example rows: {}",
            p.text
        );
        let rows: Vec<&str> = p
            .text
            .lines()
            .filter(|l| l.starts_with("The id is "))
            .collect();
        assert_eq!(
            rows,
            [format!(
                "The id is {}, The age is {}, The colour is {}, The score is ___, The region is {}, The bought is {}",
                ROWS[i][0], ROWS[i][1], ROWS[i][2], ROWS[i][4], ROWS[i][5]
            )]
        );
        let Expected::Row { fields, .. } = &p.expected else {
            panic!()
        };
        assert_eq!(
            fields[0],
            (
                "score".to_string(),
                Cell::Float(ROWS[i][3].parse().unwrap())
            )
        );
    }
    // Every other test builds the same prompts under both variants.
    for test in TestId::PAPER {
        if !matches!(
            test,
            TestId::RecognitionExamples | TestId::FeatureCompletion
        ) {
            assert_eq!(
                build_on(&d, test, "colon", 5, Variant::Paper),
                build_on(&d, test, "colon", 5, Variant::PaperCode),
                "{test}"
            );
        }
    }
}

/// The columns of every serialized pair on a line, in the order they appear. A pair starts
/// the line, or follows the feature separator or a space (`Record: The age is 39, …`).
fn pair_columns(line: &str, table: &Table, s: &Serialization) -> Vec<usize> {
    let mut found: Vec<(usize, usize)> = Vec::new();
    for (c, column) in table.columns.iter().enumerate() {
        let pair = format!("{}{}{}", s.specifier, column.name, s.value_sep);
        for (at, _) in line.match_indices(&pair) {
            let before = &line[..at];
            if at == 0 || before.ends_with(&s.feature_sep) || before.ends_with(' ') {
                found.push((at, c));
            }
        }
    }
    found.sort_unstable();
    found.into_iter().map(|(_, c)| c).collect()
}

/// No prompt of any test shows a row with its columns in another order than the file's
/// header (rows must read like the file), on every shipped dataset, in both variants and
/// under two templates (different separators).
#[test]
fn serialized_rows_keep_the_files_column_order() {
    let mut datasets: Vec<Dataset> = SHIPPED
        .iter()
        .map(|id| load(Path::new(SHIPPED_DIR), id))
        .collect();
    // The paper's files, where the development checkout has them: other headers, other
    // column positions (wine's target is last there).
    if Path::new(PAPER_DIR).is_dir() {
        for id in [
            "adult",
            "german",
            "iris",
            "wine",
            "titanic",
            "bank",
            "spaceship-titanic",
            "thyroid",
        ] {
            datasets.push(load(Path::new(PAPER_DIR), id));
        }
    }
    let mut rows_checked = 0;
    for dataset in &datasets {
        for serialization in ["the-is", "is-equal-to"] {
            let s = Serialization::builtin(serialization).unwrap();
            for test in TestId::PAPER {
                if !test.serializes_rows() {
                    continue;
                }
                // Only tests 4 and 9 differ between variants (checked above).
                let variants: &[Variant] = match test {
                    TestId::RecognitionExamples | TestId::FeatureCompletion => &Variant::ALL,
                    _ => &[Variant::Paper],
                };
                for &variant in variants {
                    let probe = build_on(dataset, test, serialization, 0, variant);
                    for p in &probe.prompts {
                        for line in p.text.lines() {
                            let columns = pair_columns(line, &dataset.table, &s);
                            if columns.len() < 2 {
                                continue;
                            }
                            rows_checked += 1;
                            assert!(
                                columns.windows(2).all(|w| w[0] < w[1]),
                                "{} {test} {serialization} {variant}: columns {columns:?} out of the file's order in {line:?}",
                                dataset.id
                            );
                        }
                    }
                }
            }
        }
    }
    assert!(
        rows_checked > 5_000,
        "only {rows_checked} rows were checked"
    );
}

/// SPEC §2: a membership answer is correct only when the expected word appears and the
/// other does not; `Yes or no` is invalid, whatever the expected word.
#[test]
fn membership_judges_an_answer_naming_both_words_invalid() {
    let dictionary = Dictionary::from_texts("SET UTF-8\n", "1\nyes\n").unwrap();
    let probe = build(TestId::Membership, "the-is", 0);
    for p in &probe.prompts[..4] {
        let Expected::Choice { correct, .. } = &p.expected else {
            panic!()
        };
        let verdict = probe::judge(&p.expected, "Yes or no", &dictionary, Alg1Profile::Hunspell);
        assert!(verdict.invalid && !verdict.passed, "{verdict:?}");
        let right = if *correct == 0 { " Yes" } else { " No" };
        let verdict = probe::judge(&p.expected, right, &dictionary, Alg1Profile::Hunspell);
        assert!(verdict.passed && !verdict.invalid);
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

/// The variant is a top-level spec key (default `paper`); a typo is a one-line error naming
/// the key and the choices.
#[test]
fn spec_selects_the_variant() {
    use tabcontam::run::spec::Spec;
    let body = |variant: &str| {
        format!(
            "name = \"v\"\ndatasets = [\"wine\"]\ntests = [\"feature-completion\"]\n{variant}\n\
             [[models]]\nid = \"m\"\nbackend = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:9/v1\"\n"
        )
    };
    let path = Path::new("v.toml");
    assert_eq!(
        Spec::parse(&body(""), path).unwrap().variant,
        Variant::Paper
    );
    assert_eq!(
        Spec::parse(&body("variant = \"paper-code\""), path)
            .unwrap()
            .variant,
        Variant::PaperCode
    );
    let err = Spec::parse(&body("variant = \"code\""), path)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("v.toml: variant: unknown variant `code`")
            && err.contains("paper-code")
            && !err.contains('\n'),
        "{err}"
    );
}

/// `tabcontam prompts --variant paper-code` shows the authors' variant of test 9 on wine.
#[test]
fn prompts_command_shows_either_variant() {
    let env = Env::new();
    let prompts = |variant: &str| {
        let stdout = env.ok(&[
            "prompts",
            "--dataset",
            "wine",
            "--test",
            "feature-completion",
            "--variant",
            variant,
            "--json",
            "--data-dir",
            SHIPPED_DIR,
        ]);
        serde_json::from_str::<Vec<probe::Prompt>>(&stdout).unwrap()
    };
    let paper = prompts("paper");
    let code = prompts("paper-code");
    assert_eq!((paper.len(), code.len()), (5, 5));
    assert!(
        paper
            .iter()
            .all(|p| p.text.contains("Records, one per line"))
    );
    assert!(
        code.iter()
            .all(|p| !p.text.contains("Records, one per line"))
    );
    assert!(
        code[0]
            .text
            .contains("The target is ___, The alcohol is 14.23,")
    );
    let output = env.run(&[
        "prompts",
        "--dataset",
        "wine",
        "--test",
        "9",
        "--variant",
        "code",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--variant") && stderr.contains("paper-code"),
        "{stderr}"
    );
}
