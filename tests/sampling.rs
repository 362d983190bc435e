//! Repeated sampling end to end (SPEC §5): `samples = N` with `temperature > 0` sends each
//! sample with its own API seed, the test's rule is applied per sample, the report shows
//! per-cell detection rates, and a cell decided again with fewer samples keeps exactly its
//! current trials (in the store, the accuracies and the exports). Against a loopback mock
//! server that honours seeds, on the shipped iris file.

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mock_server.rs"]
mod mock_server;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use cli_env::Env;
use mock_server::MockConfig;
use tabcontam::probe::TestId;
use tabcontam::store::{OWN_SOURCE, Store};

/// iris' feature names: what a model that knows iris lists in test 2.
const IRIS_FEATURES: &str = "sepal_length, sepal_width, petal_length, petal_width, species";

/// This file's specs and commands: one sampled model on the environment's cache.
trait Sampled {
    fn sampled_spec(&self, url: &str, samples: u32) -> PathBuf;
    fn run_spec(&self, spec: &Path) -> serde_json::Value;
    fn report(&self, out: &str) -> (PathBuf, serde_json::Value);
}

impl Sampled for Env {
    fn sampled_spec(&self, url: &str, samples: u32) -> PathBuf {
        let body = format!(
            "name = \"sampled\"\nseed = 0\ndatasets = [\"iris\"]\n\
             tests = [\"feature-list-uninformed\", \"recognition-features\", \"incomplete-completion\", \"membership\"]\n\
             \n[[models]]\nid = \"sampler\"\nbackend = \"openai-compatible\"\napi = \"completions\"\n\
             base_url = \"{url}/v1\"\nconcurrency = 8\nbackoff_base_ms = 1\nbackoff_max_ms = 20\n\
             timeout_s = 5\ntemperature = 0.8\nsamples = {samples}\n"
        );
        self.spec(&format!("sampled-{samples}.toml"), &body)
    }

    fn run_spec(&self, spec: &Path) -> serde_json::Value {
        self.json(&[
            "run",
            spec.to_str().unwrap(),
            "--cache",
            self.cache().to_str().unwrap(),
            "--json",
        ])
    }

    /// Renders every format into `out` and returns scores.json.
    fn report(&self, out: &str) -> (PathBuf, serde_json::Value) {
        let dir = self.path(out);
        self.ok(&[
            "report",
            "--cache",
            self.cache().to_str().unwrap(),
            "--out",
            dir.to_str().unwrap(),
            "--format",
            "json,html,latex,csv",
        ]);
        let json = std::fs::read_to_string(dir.join("scores.json")).unwrap();
        (dir, serde_json::from_str(&json).unwrap())
    }
}

/// A model that knows iris' features in odd-seeded samples only.
fn knows_iris_when_seed_is_odd(prompt: &str, seed: u64) -> Option<String> {
    (prompt.contains("iris") && seed % 2 == 1)
        .then(|| format!("{IRIS_FEATURES} (sample seed {seed})"))
}

/// The grid entry of (iris, test) in scores.json.
fn grid_cell(scores: &serde_json::Value, test: TestId) -> &serde_json::Value {
    scores["grid"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["dataset"] == "iris" && c["test"] == test.id())
        .unwrap_or_else(|| panic!("no grid cell for {test}"))
}

fn csv_rows(path: &Path) -> Vec<HashMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|line| {
            header
                .iter()
                .map(|h| h.to_string())
                .zip(line.split(',').map(str::to_string))
                .collect()
        })
        .collect()
}

#[test]
fn samples_send_their_own_seeds_are_judged_one_by_one_and_reruns_keep_only_current_trials() {
    let env = Env::new();
    let server = env.server(MockConfig::new().sampled(knows_iris_when_seed_is_odd));

    // Five samples per prompt.
    let summary = env.run_spec(&env.sampled_spec(&server.url(), 5));
    assert_eq!(summary["status"], "finished");
    // iris: test 2 (1 prompt), test 3 (1), test 7 (5), test 10 (100), five samples each.
    let prompts = 1 + 1 + 5 + 100;
    assert_eq!(summary["counts"]["sent"], 5 * prompts);
    assert_eq!(server.request_count(), 5 * prompts);

    // Each sample sent its own seed: api_seed (0) + sample index.
    let mut seeds_per_prompt: HashMap<String, BTreeSet<u64>> = HashMap::new();
    for request in server.requests() {
        assert_eq!(request.json["temperature"], 0.8);
        seeds_per_prompt
            .entry(request.prompt().unwrap().to_string())
            .or_default()
            .insert(request.json["seed"].as_u64().expect("a seed is sent"));
    }
    assert_eq!(seeds_per_prompt.len(), prompts as usize);
    for seeds in seeds_per_prompt.values() {
        assert_eq!(seeds, &(0..5).collect::<BTreeSet<u64>>());
    }

    // Five distinct cached answers to the one prompt of test 2.
    let store = Store::open_read_only(env.cache()).unwrap();
    let trials = store.trials().unwrap();
    let test2: Vec<_> = trials
        .iter()
        .filter(|t| t.test == TestId::FeatureListUninformed)
        .collect();
    assert_eq!(
        test2.iter().map(|t| t.sample).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    let keys: Vec<_> = test2.iter().map(|t| t.request_key).collect();
    let answers: BTreeSet<String> = store
        .responses(&keys)
        .unwrap()
        .into_values()
        .map(|r| r.text)
        .collect();
    assert_eq!(answers.len(), 5, "{answers:#?}");
    assert_eq!(trials.len(), 5 * prompts as usize);

    // Per-sample cell results: test 2 passes in samples 1 and 3 (odd seeds) only.
    let cells = store.cells().unwrap();
    assert_eq!(cells.len(), 4);
    for cell in &cells {
        assert_eq!(cell.source, OWN_SOURCE);
        assert_eq!(cell.samples.len(), 5, "{cell:?}");
        let per_sample_trials: usize = cell.samples.iter().map(|s| s.trials).sum();
        assert_eq!(per_sample_trials, cell.result.trials);
    }
    let cell2 = cells
        .iter()
        .find(|c| c.test == TestId::FeatureListUninformed)
        .unwrap();
    let passed: Vec<bool> = cell2.samples.iter().map(|s| s.passed).collect();
    assert_eq!(passed, vec![false, true, false, true, false]);
    assert!(cell2.result.passed, "a cell passes when any sample passes");
    let membership = cells.iter().find(|c| c.test == TestId::Membership).unwrap();
    assert_eq!(membership.result.trials, 500);
    let mean = membership.samples.iter().map(|s| s.score).sum::<f64>() / 5.0;
    assert!((membership.result.score - mean).abs() < 1e-12);
    drop(store);

    // The report: per-cell detection rates, the rule stated, accuracies over all samples.
    let (dir, scores) = env.report("report-5");
    assert_eq!(scores["sample_rule"]["id"], "any-sample");
    assert_eq!(scores["sample_rule"]["max_samples"], 5);
    let cell = grid_cell(&scores, TestId::FeatureListUninformed);
    assert_eq!(cell["samples"], 5);
    assert_eq!(cell["samples_passed"], 2);
    assert_eq!(cell["detection_rate"], 0.4);
    assert_eq!(cell["passed"], true);
    let model = &scores["models"][0];
    assert_eq!(model["samples"], 5);
    let rates: f64 = scores["grid"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["detection_rate"].as_f64().unwrap())
        .sum();
    assert_eq!(model["sample_contamination"].as_f64().unwrap(), rates / 9.0);
    let accuracy = &scores["accuracy"][0];
    assert_eq!(
        (accuracy["samples"].as_u64(), accuracy["trials"].as_u64()),
        (Some(5), Some(500))
    );
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("Detection rate per sample"));
    assert!(html.contains("<td>2/5</td>"), "test 2's rate in the HTML");
    assert!(html.contains("a cell of tests 1-9 passes when any sample passes"));
    let table2 = std::fs::read_to_string(dir.join("table2.tex")).unwrap();
    assert!(table2.contains("Per sample") && table2.contains("Repeated sampling"));
    let tex = std::fs::read_to_string(dir.join("report.tex")).unwrap();
    assert!(tex.contains("Detection rate per sample") && tex.contains(" & 2/5"));
    // Issue 26 item 2: the membership cell beside the blind baseline of its rows (the
    // original rows and perturbed copies a model-free classifier tells apart).
    let membership = scores["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["test"] == "membership")
        .unwrap();
    let blind = membership["blind_auroc"].as_f64().unwrap();
    let [low, high] = [0, 1].map(|i| membership["blind_auroc_interval"][i].as_f64().unwrap());
    eprintln!(
        "iris membership: accuracy {}, blind AUROC {blind:.3} [{low:.3}, {high:.3}]",
        membership["score"]
    );
    assert!(0.0 <= low && low <= blind && blind <= high && high <= 1.0);
    assert_eq!(
        membership["no_better_than_blind"].as_bool(),
        Some(membership["score"].as_f64().unwrap() <= high.max(0.5))
    );
    assert!(
        scores["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["test"] != "membership")
            .all(|e| e.get("blind_auroc").is_none())
    );
    assert!(html.contains("Membership (test 10) against the blind baseline"));
    assert!(html.contains(&format!("<td>{blind:.3} [{low:.3}, {high:.3}]</td>")));
    assert!(tex.contains("Membership (test 10) against the blind baseline"));
    let grid_csv = csv_rows(&dir.join("grid.csv"));
    let row = grid_csv
        .iter()
        .find(|r| r["test"] == "feature-list-uninformed")
        .unwrap();
    assert_eq!(
        (row["samples"].as_str(), row["samples_passed"].as_str()),
        ("5", "2")
    );

    // The same spec with two samples: every cell is decided again from samples 0 and 1
    // (cached, nothing is sent), and the trials of samples 2-4 no longer count anywhere.
    let summary = env.run_spec(&env.sampled_spec(&server.url(), 2));
    assert_eq!(summary["counts"]["sent"], 0);
    assert_eq!(server.request_count(), 5 * prompts);
    let store = Store::open_read_only(env.cache()).unwrap();
    let trials = store.trials().unwrap();
    assert_eq!(trials.len(), 2 * prompts as usize);
    assert!(trials.iter().all(|t| t.sample < 2));
    for cell in store.cells().unwrap() {
        assert_eq!(cell.samples.len(), 2, "{cell:?}");
    }
    drop(store);
    let (dir, scores) = env.report("report-2");
    assert_eq!(scores["sample_rule"]["max_samples"], 2);
    let cell = grid_cell(&scores, TestId::FeatureListUninformed);
    assert_eq!(
        (cell["samples"].as_u64(), cell["samples_passed"].as_u64()),
        (Some(2), Some(1))
    );
    let accuracy = &scores["accuracy"][0];
    assert_eq!(
        (accuracy["samples"].as_u64(), accuracy["trials"].as_u64()),
        (Some(2), Some(200))
    );
    let membership = &scores["models"][0]["membership_detail"];
    assert_eq!(
        membership["trials"], 200,
        "intervals over the current trials only"
    );
    let accuracy_csv = csv_rows(&dir.join("accuracy.csv"));
    assert_eq!(accuracy_csv.len(), 1);
    assert_eq!(accuracy_csv[0]["trials"], "200");
    assert_eq!(accuracy_csv[0]["samples"], "2");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("<td>1/2</td>") && !html.contains("/5</td>"));

    // Back to one sample: greedy-style reports (no sampling columns), sample 0's answers.
    let summary = env.run_spec(&env.sampled_spec(&server.url(), 1));
    assert_eq!(
        summary["counts"]["sent"], 0,
        "sample 0 keeps its request keys"
    );
    let (dir, scores) = env.report("report-1");
    assert_eq!(scores["sample_rule"]["max_samples"], 1);
    assert_eq!(
        grid_cell(&scores, TestId::FeatureListUninformed)["passed"],
        false
    );
    assert_eq!(scores["accuracy"][0]["trials"], 100);
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(!html.contains("Detection rate per sample"));
}
