//! `tabcontam parity`: agreement targets on the conformance data, and error reporting.

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};

use cli_env::{Env, one_line_error};

/// The conformance data lives next to the checkout (`../shared/parity`); it is not shipped.
/// `None` after a skip (a failure in CI).
fn parity_dir() -> Option<PathBuf> {
    let dir = skip::shared_dir().join("parity");
    let why = format!(
        "no conformance data at {} (algorithm1.jsonl missing; ../shared beside the checkout)",
        dir.display()
    );
    skip::require(dir, |d| d.join("algorithm1.jsonl").is_file(), why)
}

/// Runs `parity --json` and returns (algorithm1 agree, algorithm2 agree, full JSON).
fn parity_json(dir: &Path, profile: &str) -> (u64, u64, serde_json::Value) {
    let dir = dir.to_str().expect("UTF-8 path");
    let json = Env::new().json(&["parity", dir, "--json", "--profile", profile]);
    let agree = |algorithm: &str| json[algorithm]["agree"].as_u64().expect("agree count");
    (agree("algorithm1"), agree("algorithm2"), json)
}

#[test]
fn paper_profile_meets_the_reference_replay() {
    let Some(dir) = parity_dir() else { return };
    let (words, rows, json) = parity_json(&dir, "paper");
    assert_eq!(json["algorithm1"]["total"], 1956);
    assert_eq!(json["algorithm2"]["total"], 3177);
    // The authors' code replayed with the Debian dictionary: 1,944 and 3,168.
    assert!(words >= 1944, "algorithm1 {words}/1956");
    assert!(rows >= 3168, "algorithm2 {rows}/3177");
}

#[test]
fn hunspell_profile_agreement() {
    let Some(dir) = parity_dir() else { return };
    let (words, rows, _) = parity_json(&dir, "hunspell");
    // Plain Hunspell accepts `blue-collar`, `admin.` and `self-employed`, which the logged
    // verdicts treated as unknown (23 bank-marketing records), and this profile matches
    // exactly as SPEC §3 says: the authors' case-sensitive rule for names with an inner
    // capital (`MathE`, 7 records) belongs to the `paper` profile. 1,914 is its ceiling.
    assert!(words >= 1914, "algorithm1 {words}/1956");
    assert!(rows >= 3168, "algorithm2 {rows}/3177");
}

#[test]
fn json_output_has_the_documented_shape() {
    let Some(dir) = parity_dir() else { return };
    let (_, _, json) = parity_json(&dir, "hunspell");
    for algorithm in ["algorithm1", "algorithm2"] {
        assert!(json[algorithm]["agree"].is_u64(), "{json}");
        assert!(json[algorithm]["total"].is_u64(), "{json}");
    }
}

/// An environment whose folder ([`records`]) holds hand-written records (no conformance
/// data copied).
fn with_records(words: &str, rows: &str) -> Env {
    let env = Env::new();
    env.file("algorithm1.jsonl", words);
    env.file("algorithm2.jsonl", rows);
    env
}

/// The folder of the environment's records.
fn records(env: &Env) -> &str {
    env.dir.path().to_str().expect("UTF-8 path")
}

const WORD_RECORD: &str = r#"{"model":"m","test":"FEATURES UNINFORMED TEST","dataset":"d","output":"age, fnlwgt","expected":["age","fnlwgt"],"verdict":true,"reference_replay":true}"#;
const NAME_RECORD: &str = r#"{"model":"m","test":"RECOGNITION DATASET TEST","dataset":"adult income","output":"Adult","expected":["adult income","adult"],"verdict":false,"reference_replay":true}"#;
const ROW_RECORD: &str = r#"{"model":"m","test":"COMPLETION FEATURE TEST","dataset":"d","output":" 452600","expected":{"median_house_value":452600.0},"verdict":true,"reference_replay":true}"#;

#[test]
fn hand_written_records_are_judged_and_disagreements_listed() {
    let env = with_records(&format!("{WORD_RECORD}\n\n{NAME_RECORD}\n"), ROW_RECORD);
    let json = env.json(&["parity", records(&env), "--json"]);
    assert_eq!(json["algorithm1"]["agree"], 1);
    assert_eq!(json["algorithm1"]["total"], 2);
    assert_eq!(json["algorithm2"]["agree"], 1);
    assert_eq!(json["algorithm2"]["total"], 1);

    let text = env.run(&["parity", records(&env)]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("algorithm1: 1/2"), "{stdout}");
    assert!(stdout.contains("algorithm2: 1/1"), "{stdout}");
    assert!(stdout.contains("RECOGNITION DATASET TEST"), "{stdout}");
    assert!(stdout.contains("logged false, ours true"), "{stdout}");
}

#[test]
fn malformed_jsonl_names_file_and_line() {
    let env = with_records(&format!("{WORD_RECORD}\n{{\"model\": oops\n"), ROW_RECORD);
    let output = env.run(&["parity", records(&env)]);
    one_line_error(&output, &["algorithm1.jsonl:2"]);
}

#[test]
fn missing_file_is_named() {
    let env = Env::new();
    env.file("algorithm1.jsonl", WORD_RECORD);
    let output = env.run(&["parity", records(&env)]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("algorithm2.jsonl"), "{stderr}");
}

#[test]
fn unknown_test_name_is_an_error() {
    let record = WORD_RECORD.replace("FEATURES UNINFORMED TEST", "SOMETHING ELSE");
    let env = with_records(&record, ROW_RECORD);
    let output = env.run(&["parity", records(&env)]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("algorithm1.jsonl:1"), "{stderr}");
    assert!(stderr.contains("SOMETHING ELSE"), "{stderr}");
}

#[test]
fn unknown_profile_is_an_error() {
    let env = with_records(WORD_RECORD, ROW_RECORD);
    let output = env.run(&["parity", records(&env), "--profile", "enchant"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("paper"));
}

#[test]
fn dictionary_override_that_lacks_the_files_is_reported() {
    let empty = tempfile::tempdir().expect("temp dir");
    let env = with_records(WORD_RECORD, ROW_RECORD).var("TABCONTAM_DICTIONARY_DIR", empty.path());
    let output = env.run(&["parity", records(&env)]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("en_US.aff"), "{stderr}");
    assert!(stderr.contains("TABCONTAM_DICTIONARY_DIR"), "{stderr}");
}
