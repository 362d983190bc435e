//! The side-by-side comparison with tabmemcheck 0.1.6 (`benches/vs_tabmemcheck.py`) on a
//! small setting: iris, the first-token test, three peer queries, both tools against one
//! real llama-server, each run twice. Checks that the table is produced with both tools'
//! outcomes and times, and that tabcontam's rerun is answered from its cache.
//!
//! Needs the tabmemcheck venv (`scripts/ci-install-tabmemcheck.sh`) and llama-server with
//! the SmolLM2 GGUF (`scripts/ci-install-test-server.sh`); without them the test is skipped,
//! except in CI (`TABCONTAM_CI=1`, see `support/skip.rs`), where their absence fails it.

#[path = "support/skip.rs"]
mod skip;

use std::process::Command;

use serde_json::Value;

#[test]
fn side_by_side_table_has_both_tools_outcomes_and_times() {
    let assets = skip::assets_dir();
    let Some(python) = skip::require(
        assets.join("venv-tabmemcheck/bin/python"),
        |p| p.is_file(),
        "the tabmemcheck venv is missing; run scripts/ci-install-tabmemcheck.sh",
    ) else {
        return;
    };
    let Some(server) = skip::require(
        assets.join("bin/llama-server"),
        |p| p.is_file(),
        "llama-server is missing; run scripts/ci-install-test-server.sh",
    ) else {
        return;
    };
    let Some(model) = skip::require(
        assets.join("models/SmolLM2-135M-Instruct.Q4_1.gguf"),
        |p| p.is_file(),
        "the SmolLM2 GGUF is missing; run scripts/ci-install-test-server.sh",
    ) else {
        return;
    };

    let out = tempfile::tempdir().expect("temporary directory");
    let run = Command::new(&python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/benches/vs_tabmemcheck.py"
        ))
        .args(["--tabcontam", env!("CARGO_BIN_EXE_tabcontam")])
        .arg("--server")
        .arg(&server)
        .arg("--model")
        .arg(&model)
        .args([
            "--datasets",
            "iris",
            "--tests",
            "first-token",
            "--trials",
            "3",
        ])
        .arg("--out")
        .arg(out.path())
        .output()
        .expect("run benches/vs_tabmemcheck.py");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "vs_tabmemcheck.py failed ({}):\n{stdout}\n{stderr}",
        run.status
    );

    // The printed table: header and one row for iris / first-token.
    assert!(
        stdout.contains("| dataset | test | tabmemcheck | tabcontam |"),
        "{stdout}"
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with("| iris | first-token |"))
        .unwrap_or_else(|| panic!("no iris / first-token row:\n{stdout}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    // ["", dataset, test, peer outcome, our outcome, peer s, our s, ratio, rerun peer s,
    //  rerun our s, rerun ratio, ""]
    assert_eq!(cells.len(), 12, "{row}");

    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("vs_tabmemcheck.json"))
            .expect("vs_tabmemcheck.json written"),
    )
    .expect("valid JSON");
    assert_eq!(json["settings"]["tabmemcheck"], "0.1.6");
    let result = &json["rows"][0];
    let peer = &result["tabmemcheck"];
    let ours = &result["tabcontam"];

    // tabmemcheck either ran its test (k/3 against its baseline) or refused it because its
    // classifier found the first token predictable: both are outcomes it prints.
    let peer_outcome = peer["outcome"].as_str().expect("peer outcome");
    assert!(
        peer_outcome.contains("/3 (baseline") || peer_outcome == "skipped (not random)",
        "{peer_outcome}"
    );
    assert!(peer["seconds"].as_f64().is_some_and(|s| s > 0.0), "{peer}");
    assert!(
        peer["rerun_seconds"].as_f64().is_some_and(|s| s > 0.0),
        "{peer}"
    );

    // tabcontam ran the test and the report holds its cell.
    let our_outcome = ours["outcome"].as_str().expect("our outcome");
    assert!(
        !our_outcome.starts_with("n/a") && !our_outcome.starts_with("no verbatim cell"),
        "{our_outcome}\n{stderr}"
    );
    assert!(
        ours["cells"].as_array().is_some_and(|c| !c.is_empty()),
        "{ours}"
    );
    assert!(ours["seconds"].as_f64().is_some_and(|s| s > 0.0), "{ours}");
    // The rerun sends nothing: every answer comes from the cache of the first run.
    assert_eq!(ours["rerun_sent"], 0, "{ours}");
    assert!(ours["rerun_seconds"].as_f64().is_some(), "{ours}");
    // The ratio column is filled for both runs.
    assert!(cells[7].ends_with('x') && cells[10].ends_with('x'), "{row}");
}
