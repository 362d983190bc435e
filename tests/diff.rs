//! `tabcontam diff A B` on real caches: one built by `run` against a loopback server with two
//! models that answer differently, and the paper's published cells imported.

#[path = "support/mock_server.rs"]
mod mock_server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mock_server::{Fault, MockConfig, MockServer, Plan};
use serde_json::{Value, json};
use tabcontam::store::Store;

const PAPER_RESULTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/parity/paper-results"
);

/// What the `iris-expert` model says to every prompt: the iris columns, after a "Yes".
const EXPERT_ANSWER: &str =
    "Yes. sepal_length, sepal_width, petal_length, petal_width, species: Iris-setosa";

fn tabcontam(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tabcontam"))
        .args(args)
        .env("TABCONTAM_HOME", home)
        .env_remove("TABCONTAM_DATA_DIR")
        .env_remove("TABCONTAM_CACHE")
        .output()
        .unwrap()
}

fn succeeded(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn json_of(output: &Output) -> Value {
    serde_json::from_str(&succeeded(output)).unwrap()
}

/// Builds a cache with `run`: model `echo` is the mock's normal echo of the prompt, model
/// `iris-expert` always gives [`EXPERT_ANSWER`]. Both models in one run.
fn two_model_cache(dir: &Path) -> PathBuf {
    runs_cache(dir, &[&["echo", "iris-expert"]])
}

/// Runs one spec per entry of `runs` (run ids 1, 2, … in that order), each with the
/// models named, against one loopback server; returns the cache.
fn runs_cache(dir: &Path, runs: &[&[&str]]) -> PathBuf {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(MockServer::start(MockConfig::new().script(|request| {
        let fault = if request.json["model"] == "iris-expert" {
            Fault::Body(json!({
                "id": "x", "object": "text_completion", "model": "iris-expert",
                "choices": [{"index": 0, "text": EXPERT_ANSWER, "logprobs": null,
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}
            }))
        } else {
            Fault::None
        };
        Plan {
            latency: std::time::Duration::ZERO,
            fault,
        }
    })));
    let cache = dir.join("cache.sqlite");
    for (index, models) in runs.iter().enumerate() {
        let mut spec = String::from(
            "name = \"diff\"\nseed = 0\ndatasets = [\"iris\"]\n\
             tests = [\"feature-list-uninformed\", \"feature-values-uninformed\", \"membership\", \"classify-0shot\"]\n\
             serializations = [\"the-is\"]\n",
        );
        for model in *models {
            spec.push_str(&format!(
                "\n[[models]]\nid = \"{model}\"\nbackend = \"openai-compatible\"\napi = \"completions\"\n\
                 base_url = \"{}/v1\"\nconcurrency = 8\ntimeout_s = 5\n",
                server.url()
            ));
        }
        let spec_path = dir.join(format!("diff-{index}.toml"));
        std::fs::write(&spec_path, spec).unwrap();
        succeeded(&tabcontam(
            dir,
            &[
                "run",
                spec_path.to_str().unwrap(),
                "--cache",
                cache.to_str().unwrap(),
                "--quiet",
            ],
        ));
    }
    assert!(server.request_count() > 0);
    cache
}

#[test]
fn diff_of_two_models_matches_the_cells_and_trials_in_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = two_model_cache(dir.path());
    let cache_arg = cache.to_str().unwrap();
    let diff = json_of(&tabcontam(
        dir.path(),
        &[
            "diff",
            "echo",
            "iris-expert",
            "--cache",
            cache_arg,
            "--json",
        ],
    ));

    // The expected answer, from the cache through the Store, independently of `diff`.
    let store = Store::open_read_only(&cache).unwrap();
    let cells = store.cells().unwrap();
    let passed = |model: &str, test: &str| {
        cells
            .iter()
            .find(|c| c.model == model && c.test.id() == test)
            .map(|c| c.result.passed && c.skipped.is_none())
            .unwrap()
    };
    let mut gained = Vec::new();
    let mut lost = Vec::new();
    for test in ["feature-list-uninformed", "feature-values-uninformed"] {
        match (passed("echo", test), passed("iris-expert", test)) {
            (false, true) => gained.push(test),
            (true, false) => lost.push(test),
            _ => {}
        }
    }
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| c["test"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&diff["gained"]), gained, "{diff:#}");
    assert_eq!(names(&diff["lost"]), lost, "{diff:#}");
    // The expert names iris's columns and a species, which the echo of an uninformed prompt
    // cannot.
    assert_eq!(
        gained,
        ["feature-list-uninformed", "feature-values-uninformed"],
        "{diff:#}"
    );
    assert_eq!(diff["compared"], 2);
    assert!(diff["only_in_a"].as_array().unwrap().is_empty());

    let trials = store.trials().unwrap();
    let accuracy = diff["accuracy"].as_array().unwrap();
    let tests: Vec<&str> = accuracy
        .iter()
        .map(|c| c["test"].as_str().unwrap())
        .collect();
    assert_eq!(tests, ["membership", "classify-0shot"]);
    for change in accuracy {
        let test = change["test"].as_str().unwrap();
        for (side, model) in [("a", "echo"), ("b", "iris-expert")] {
            let of_cell: Vec<_> = trials
                .iter()
                .filter(|t| t.model == model && t.test.id() == test)
                .collect();
            let correct = of_cell.iter().filter(|t| t.verdict.passed).count();
            assert_eq!(change[side]["trials"], of_cell.len(), "{change:#}");
            assert_eq!(change[side]["correct"], correct, "{change:#}");
            let accuracy = change[side]["accuracy"].as_f64().unwrap();
            let interval = &change[side]["interval"];
            assert!(interval["low"].as_f64().unwrap() <= accuracy);
            assert!(accuracy <= interval["high"].as_f64().unwrap());
        }
        let delta =
            change["b"]["accuracy"].as_f64().unwrap() - change["a"]["accuracy"].as_f64().unwrap();
        assert!((change["delta"].as_f64().unwrap() - delta).abs() < 1e-12);
    }
    // Membership's Yes/No classes are balanced: always "Yes" is right half of the time.
    let membership = &accuracy[0];
    assert_eq!(
        membership["b"]["correct"].as_u64().unwrap() * 2,
        membership["b"]["trials"].as_u64().unwrap(),
        "{membership:#}"
    );

    // The text view says the same.
    let text = succeeded(&tabcontam(
        dir.path(),
        &["diff", "echo", "iris-expert", "--cache", cache_arg],
    ));
    assert!(
        text.starts_with("echo → iris-expert: 2 cells of tests 1–9 in both"),
        "{text}"
    );
    assert!(
        text.contains(
            "gained (passed by iris-expert, not by echo):\n  iris feature-list-uninformed\n"
        ),
        "{text}"
    );
    assert!(text.contains("iris membership [the-is]"), "{text}");

    // A model against itself: nothing gained or lost, no accuracy change.
    let same = json_of(&tabcontam(
        dir.path(),
        &["diff", "echo", "echo", "--cache", cache_arg, "--json"],
    ));
    assert!(same["gained"].as_array().unwrap().is_empty());
    assert!(same["lost"].as_array().unwrap().is_empty());
    assert!(
        same["accuracy"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["delta"] == 0.0)
    );
}

#[test]
fn unknown_model_is_a_one_line_error_listing_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let cache = two_model_cache(dir.path());
    let output = tabcontam(
        dir.path(),
        &["diff", "echo", "gpt-5", "--cache", cache.to_str().unwrap()],
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("no model `gpt-5` in the cache: known models are echo, iris-expert"),
        "{stderr}"
    );
    // No cache at all.
    let missing = dir.path().join("nothing.sqlite");
    let output = tabcontam(
        dir.path(),
        &["diff", "a", "b", "--cache", missing.to_str().unwrap()],
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(!missing.exists());
}

/// Issue 12, item 5: `diff --runs A B`. Run 1 asks `echo`, run 2 `iris-expert` (one model
/// each: cells are matched across the models), run 3 asks `echo` again and so decides its
/// cells anew: run 1 then holds none, which the diff says instead of inventing old verdicts.
#[test]
fn diff_of_two_runs_compares_the_cells_each_run_holds() {
    let dir = tempfile::tempdir().unwrap();
    let cache = runs_cache(dir.path(), &[&["echo"], &["iris-expert"], &["echo"]]);
    let cache_arg = cache.to_str().unwrap();
    let store = Store::open_read_only(&cache).unwrap();
    let runs: Vec<i64> = store.runs().unwrap().iter().map(|r| r.id.0).collect();
    assert_eq!(runs, [1, 2, 3]);

    // Runs 3 (echo, now) and 2 (iris-expert) give the same changes as the two models.
    let by_runs = json_of(&tabcontam(
        dir.path(),
        &["diff", "--runs", "3", "2", "--cache", cache_arg, "--json"],
    ));
    let by_models = json_of(&tabcontam(
        dir.path(),
        &[
            "diff",
            "echo",
            "iris-expert",
            "--cache",
            cache_arg,
            "--json",
        ],
    ));
    assert_eq!(by_runs["matched_by"], "cell-across-models");
    assert_eq!(
        (by_runs["a"].as_str(), by_runs["b"].as_str()),
        (Some("run 3"), Some("run 2"))
    );
    for key in [
        "compared", "passed_a", "passed_b", "gained", "lost", "accuracy",
    ] {
        assert_eq!(by_runs[key], by_models[key], "{key}: {by_runs:#}");
    }
    assert_eq!(
        by_runs["gained"].as_array().unwrap().len(),
        2,
        "{by_runs:#}"
    );
    let cells_of = |model: &str| {
        store
            .cells()
            .unwrap()
            .iter()
            .filter(|c| c.model == model)
            .count()
    };
    assert_eq!(by_runs["run_a"]["cells"], cells_of("echo"));
    assert_eq!(by_runs["run_a"]["models"], json!(["echo"]));
    assert_eq!(by_runs["run_b"]["cells"], cells_of("iris-expert"));

    // Run 1's cells were all decided again by run 3: it holds none, and says why.
    let superseded = json_of(&tabcontam(
        dir.path(),
        &["diff", "--runs", "1", "2", "--cache", cache_arg, "--json"],
    ));
    assert_eq!(superseded["run_a"]["cells"], 0);
    assert_eq!(superseded["compared"], 0);
    assert!(
        superseded["limitation"]
            .as_str()
            .unwrap()
            .contains("latest decision")
    );
    let text = succeeded(&tabcontam(
        dir.path(),
        &["diff", "--runs", "3", "2", "--cache", cache_arg],
    ));
    assert!(text.contains("run 3 (diff, started "), "{text}");
    assert!(
        text.contains("run 3 → run 2: 2 cells of tests 1–9 in both"),
        "{text}"
    );
    assert!(text.contains("note: the cache keeps only"), "{text}");

    // Bad ids: one line naming the fix.
    for (args, message) in [
        (["9", "2"], "no run 9 in the cache: known runs are 1, 2, 3"),
        (["x", "2"], "with --runs, A and B are run ids"),
    ] {
        let output = tabcontam(
            dir.path(),
            &["diff", "--runs", args[0], args[1], "--cache", cache_arg],
        );
        assert_eq!(output.status.code(), Some(1));
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(message), "{stderr}");
    }
}

/// Whether the paper's published results are here; in CI (`TABCONTAM_CI=1`) their absence
/// is a failure, elsewhere the test prints SKIP and returns.
fn paper_results_present(test: &str) -> bool {
    if Path::new(PAPER_RESULTS).is_dir() {
        return true;
    }
    assert!(
        std::env::var("TABCONTAM_CI").as_deref() != Ok("1"),
        "{test}: {PAPER_RESULTS} is missing in CI"
    );
    eprintln!("SKIP: {test}: {PAPER_RESULTS} is absent");
    false
}

/// The examples of `diff --help`, on the paper's published cells (Llama 3 → Llama 3.1).
#[test]
fn diff_of_the_papers_models() {
    if !paper_results_present("diff_of_the_papers_models") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("paper.sqlite");
    let cache_arg = cache.to_str().unwrap();
    succeeded(&tabcontam(
        dir.path(),
        &["import-results", PAPER_RESULTS, "--cache", cache_arg],
    ));
    let scores_dir = dir.path().join("report");
    succeeded(&tabcontam(
        dir.path(),
        &[
            "report",
            "--cache",
            cache_arg,
            "--format",
            "json",
            "--out",
            scores_dir.to_str().unwrap(),
        ],
    ));
    let scores: Value =
        serde_json::from_str(&std::fs::read_to_string(scores_dir.join("scores.json")).unwrap())
            .unwrap();
    let diff = json_of(&tabcontam(
        dir.path(),
        &["diff", "llama3", "llama3.1", "--cache", cache_arg, "--json"],
    ));
    // Llama 3.1 has only the-is cells (Llama 3 also has the serialization study's, which
    // are not compared), so the compared cells and passed counts are Table 2's.
    let table2 = |model: &str, key: &str| {
        scores["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == model)
            .unwrap_or_else(|| panic!("no {model} in scores.json"))[key]
            .clone()
    };
    assert_eq!(diff["compared"], table2("llama3.1", "contamination_cells"));
    assert_eq!(diff["passed_a"], table2("llama3", "contamination_passed"));
    assert_eq!(diff["passed_b"], table2("llama3.1", "contamination_passed"));
    let net = diff["gained"].as_array().unwrap().len() as i64
        - diff["lost"].as_array().unwrap().len() as i64;
    assert_eq!(
        net,
        diff["passed_b"].as_i64().unwrap() - diff["passed_a"].as_i64().unwrap()
    );
    assert!(diff["only_in_b"].as_array().unwrap().is_empty());
    assert!(!diff["only_in_a"].as_array().unwrap().is_empty());
    assert!(!diff["accuracy"].as_array().unwrap().is_empty());
    let text = succeeded(&tabcontam(
        dir.path(),
        &["diff", "llama3", "llama3.1", "--cache", cache_arg],
    ));
    assert!(text.starts_with("llama3 → llama3.1: "), "{text}");
}

/// Issue 27 item 4: `diff --md` prints the text view's content as one Markdown table (cell,
/// A, B, change), every id escaped; `--only-changed` leaves out accuracy cells whose share
/// of correct answers is the same in A and B. Expected rows from the cache's trials, with
/// 95 % Wilson intervals computed here by their formula.
#[test]
fn diff_md_and_only_changed_on_a_real_cache() {
    let dir = tempfile::tempdir().unwrap();
    // A model id with a pipe and a line break (spec ids are the user's free text).
    let evil = "iris|expert\\nsecond line";
    let cache = runs_cache(dir.path(), &[&["echo", "iris-expert", evil]]);
    let cache_arg = cache.to_str().unwrap();
    let store = Store::open_read_only(&cache).unwrap();
    let trials = store.trials().unwrap();
    let wilson = |correct: usize, n: usize| {
        let z = 1.959_963_984_540_054_f64;
        let p = correct as f64 / n as f64;
        let n = n as f64;
        let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
        let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / (1.0 + z * z / n);
        (centre - half, centre + half)
    };
    let side = |model: &str, test: &str| {
        let of_cell: Vec<_> = trials
            .iter()
            .filter(|t| t.model == model && t.test.id() == test)
            .collect();
        let correct = of_cell.iter().filter(|t| t.verdict.passed).count();
        let (low, high) = wilson(correct, of_cell.len());
        let accuracy = correct as f64 / of_cell.len() as f64;
        (
            format!("{accuracy:.3} [{low:.3}, {high:.3}] n={}", of_cell.len()),
            accuracy,
            (low, high),
        )
    };
    let accuracy_row = |a: &str, b: &str, test: &str| {
        let ((text_a, acc_a, (low_a, high_a)), (text_b, acc_b, (low_b, high_b))) =
            (side(a, test), side(b, test));
        let apart = high_a < low_b || high_b < low_a;
        format!(
            "| iris {test} [the-is] | {text_a} | {text_b} | {:+.3}{} |",
            acc_b - acc_a,
            if apart { " *" } else { "" }
        )
    };

    let md = succeeded(&tabcontam(
        dir.path(),
        &["diff", "echo", "iris-expert", "--cache", cache_arg, "--md"],
    ));
    eprintln!("{md}");
    let expected = [
        "**echo → iris-expert**: 2 cells of tests 1–9 in both; passed 0 → 2 (2 gained, 0 lost)"
            .to_string(),
        String::new(),
        "| Cell | echo | iris-expert | Change |".to_string(),
        "| --- | ---: | ---: | ---: |".to_string(),
        "| iris feature-list-uninformed | fail | pass | gained |".to_string(),
        "| iris feature-values-uninformed | fail | pass | gained |".to_string(),
        accuracy_row("echo", "iris-expert", "membership"),
        accuracy_row("echo", "iris-expert", "classify-0shot"),
        String::new(),
        "Accuracy: share of correct answers with its 95 % Wilson interval and trials; change = B − A; * = intervals apart.".to_string(),
    ];
    assert_eq!(md.lines().collect::<Vec<_>>(), expected, "{md}");

    // --only-changed: an accuracy row stays only when the shares differ.
    let only = succeeded(&tabcontam(
        dir.path(),
        &[
            "diff",
            "echo",
            "iris-expert",
            "--cache",
            cache_arg,
            "--md",
            "--only-changed",
        ],
    ));
    for test in ["membership", "classify-0shot"] {
        let (_, a, _) = side("echo", test);
        let (_, b, _) = side("iris-expert", test);
        assert_eq!(
            only.contains(&accuracy_row("echo", "iris-expert", test)),
            a != b,
            "{only}"
        );
    }
    assert!(only.contains("| iris feature-list-uninformed | fail | pass | gained |"));
    // A model against itself: every accuracy row unchanged, so nothing is listed, in
    // Markdown, text and JSON alike.
    let same = |extra: &[&str]| {
        let mut args = vec!["diff", "echo", "echo", "--cache", cache_arg];
        args.extend(extra);
        succeeded(&tabcontam(dir.path(), &args))
    };
    assert!(same(&["--md"]).contains("| +0.000 |"));
    assert_eq!(
        same(&["--md", "--only-changed"]),
        "**echo → echo**: 2 cells of tests 1–9 in both; passed 0 → 0 (0 gained, 0 lost)\n\nNo cell changed.\n"
    );
    assert!(same(&[]).contains("accuracy, echo → echo"));
    assert!(!same(&["--only-changed"]).contains("accuracy"));
    let json: Value = serde_json::from_str(&same(&["--json", "--only-changed"])).unwrap();
    assert_eq!(json["accuracy"], json!([]));

    // The model id with `|` and a line break stays inside its cell and its line.
    let escaped = "iris\\|expert<br>second line";
    let md = succeeded(&tabcontam(
        dir.path(),
        &[
            "diff",
            "iris-expert",
            "iris|expert\nsecond line",
            "--cache",
            cache_arg,
            "--md",
        ],
    ));
    assert!(
        md.starts_with(&format!("**iris-expert → {escaped}**: ")),
        "{md}"
    );
    assert!(
        md.contains(&format!("| Cell | iris-expert | {escaped} | Change |")),
        "{md}"
    );
    for line in md.lines().filter(|l| l.starts_with('|')) {
        assert_eq!(line.replace("\\|", "").matches('|').count(), 5, "{line}");
    }

    // The runs view in Markdown: the run lines and the note as paragraphs, then the table.
    let runs = succeeded(&tabcontam(
        dir.path(),
        &[
            "diff",
            "--runs",
            "1",
            "1",
            "--cache",
            cache_arg,
            "--md",
            "--only-changed",
        ],
    ));
    assert!(
        runs.contains(&format!(
            "holds {} cells of echo, iris-expert, {escaped}\n\n",
            store.cells().unwrap().len()
        )),
        "{runs}"
    );
    assert!(runs.contains("\n\nnote: the cache keeps only"), "{runs}");
    assert!(runs.ends_with("No cell changed.\n"), "{runs}");

    // --md and --json together: a usage error.
    let both = tabcontam(
        dir.path(),
        &[
            "diff", "echo", "echo", "--cache", cache_arg, "--md", "--json",
        ],
    );
    assert_eq!(both.status.code(), Some(2));
}
