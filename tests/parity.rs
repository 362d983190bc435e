//! `tabcontam parity`: agreement targets on the conformance data, and error reporting.

#[path = "support/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

fn tabcontam(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tabcontam"))
        .args(args)
        .output()
        .expect("tabcontam runs")
}

/// Runs `parity --json` and returns (algorithm1 agree, algorithm2 agree, full JSON).
fn parity_json(dir: &Path, profile: &str) -> (u64, u64, serde_json::Value) {
    let dir = dir.to_str().expect("UTF-8 path");
    let output = tabcontam(&["parity", dir, "--json", "--profile", profile]);
    assert!(
        output.status.success(),
        "parity failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("parity --json prints JSON");
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

/// A parity directory with hand-written records (no conformance data copied).
fn write_dir(words: &str, rows: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("algorithm1.jsonl"), words).expect("write");
    std::fs::write(dir.path().join("algorithm2.jsonl"), rows).expect("write");
    dir
}

const WORD_RECORD: &str = r#"{"model":"m","test":"FEATURES UNINFORMED TEST","dataset":"d","output":"age, fnlwgt","expected":["age","fnlwgt"],"verdict":true,"reference_replay":true}"#;
const NAME_RECORD: &str = r#"{"model":"m","test":"RECOGNITION DATASET TEST","dataset":"adult income","output":"Adult","expected":["adult income","adult"],"verdict":false,"reference_replay":true}"#;
const ROW_RECORD: &str = r#"{"model":"m","test":"COMPLETION FEATURE TEST","dataset":"d","output":" 452600","expected":{"median_house_value":452600.0},"verdict":true,"reference_replay":true}"#;

#[test]
fn hand_written_records_are_judged_and_disagreements_listed() {
    let dir = write_dir(&format!("{WORD_RECORD}\n\n{NAME_RECORD}\n"), ROW_RECORD);
    let path = dir.path().to_str().expect("UTF-8 path");
    let output = tabcontam(&["parity", path, "--json"]);
    assert!(output.status.success());
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(json["algorithm1"]["agree"], 1);
    assert_eq!(json["algorithm1"]["total"], 2);
    assert_eq!(json["algorithm2"]["agree"], 1);
    assert_eq!(json["algorithm2"]["total"], 1);

    let text = tabcontam(&["parity", path]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("algorithm1: 1/2"), "{stdout}");
    assert!(stdout.contains("algorithm2: 1/1"), "{stdout}");
    assert!(stdout.contains("RECOGNITION DATASET TEST"), "{stdout}");
    assert!(stdout.contains("logged false, ours true"), "{stdout}");
}

#[test]
fn malformed_jsonl_names_file_and_line() {
    let dir = write_dir(&format!("{WORD_RECORD}\n{{\"model\": oops\n"), ROW_RECORD);
    let output = tabcontam(&["parity", dir.path().to_str().expect("UTF-8 path")]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("algorithm1.jsonl:2"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
}

#[test]
fn missing_file_is_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("algorithm1.jsonl"), WORD_RECORD).expect("write");
    let output = tabcontam(&["parity", dir.path().to_str().expect("UTF-8 path")]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("algorithm2.jsonl"), "{stderr}");
}

#[test]
fn unknown_test_name_is_an_error() {
    let record = WORD_RECORD.replace("FEATURES UNINFORMED TEST", "SOMETHING ELSE");
    let dir = write_dir(&record, ROW_RECORD);
    let output = tabcontam(&["parity", dir.path().to_str().expect("UTF-8 path")]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("algorithm1.jsonl:1"), "{stderr}");
    assert!(stderr.contains("SOMETHING ELSE"), "{stderr}");
}

#[test]
fn unknown_profile_is_an_error() {
    let dir = write_dir(WORD_RECORD, ROW_RECORD);
    let path = dir.path().to_str().expect("UTF-8 path");
    let output = tabcontam(&["parity", path, "--profile", "enchant"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("paper"));
}

#[test]
fn dictionary_override_that_lacks_the_files_is_reported() {
    let dir = write_dir(WORD_RECORD, ROW_RECORD);
    let empty = tempfile::tempdir().expect("temp dir");
    let output = Command::new(env!("CARGO_BIN_EXE_tabcontam"))
        .args(["parity", dir.path().to_str().expect("UTF-8 path")])
        .env("TABCONTAM_DICTIONARY_DIR", empty.path())
        .output()
        .expect("tabcontam runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("en_US.aff"), "{stderr}");
    assert!(stderr.contains("TABCONTAM_DICTIONARY_DIR"), "{stderr}");
}
