//! `tabcontam export mlflow` against a real MLflow tracking server (PyPI's `mlflow`, from
//! `scripts/ci-install-mlflow.sh`, on loopback with proxied artifacts), read back through
//! MLflow's REST API: one run per model with its params, metrics, dataset inputs (blake3
//! digests) and the report files as artifacts; a second export adds no run; what a run is
//! changing replaces it; bad input is one line and writes nothing (issue 27 item 2).
//!
//! The cache is a real one: `tabcontam run` of two models on the shipped iris and titanic
//! files (against the loopback LLM mock of tests/support), plus one likelihood cell stored
//! through the store's API (the mock has no log-probabilities).

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mlflow_server.rs"]
mod mlflow_server;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/skip.rs"]
mod skip;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use cli_env::{Env, text};
use mlflow_server::MlflowServer;
use mock_server::MockConfig;
use serde_json::{Value, json};
use tabcontam::likelihood::DetectorStats;
use tabcontam::store::{LikelihoodCellRow, ModelRow, RunCounts, RunStatus, Store};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// Two models of the mock on iris and titanic: tests 1–9 cells, membership (with a chance
/// level, so a p-value) and a completion test, under the-is.
fn spec_body(url: &str) -> String {
    let mut body = String::from(
        "name = \"mlflow-mini\"\nseed = 0\ndatasets = [\"iris\", \"titanic\"]\n\
         tests = [\"feature-list-uninformed\", \"recognition-features\", \"membership\", \"incomplete-completion\"]\n\
         serializations = [\"the-is\"]\n",
    );
    for (id, label) in [("mock-a", "Mock A"), ("mock-b", "Mock B")] {
        body.push_str(&format!(
            "\n[[models]]\nid = \"{id}\"\nlabel = \"{label}\"\nfamily = \"mock\"\nbackend = \"openai-compatible\"\n\
             api = \"completions\"\nmodel = \"{id}-api\"\nrevision = \"{id}-2026-01\"\nbase_url = \"{url}/v1\"\n\
             concurrency = 8\nbackoff_base_ms = 1\nbackoff_max_ms = 20\ntimeout_s = 5\n"
        ));
    }
    body
}

/// A real cache of two models (see the module docs) at `env.cache()`.
fn build_cache(env: &Env) {
    let server = env.server(MockConfig::new());
    let spec = env.spec("mlflow-mini.toml", &spec_body(&server.url()));
    let cache = env.cache();
    let out = env.run(&[
        "run",
        spec.to_str().unwrap(),
        "--cache",
        cache.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{:?}", text(&out));
    let mut store = Store::open(&cache).unwrap();
    let run = store.begin_run("likelihood-fixture", "").unwrap();
    store
        .put_likelihood_cells(
            run,
            &[LikelihoodCellRow {
                model: "mock-a".into(),
                dataset: "iris".into(),
                test: "likelihood-min-k".into(),
                serialization: "the-is".into(),
                seed: 0,
                method: "local".into(),
                stats: Some(DetectorStats {
                    positives: 50,
                    negatives: 50,
                    auroc: 0.8125,
                    auroc_low: 0.7,
                    auroc_high: 0.9,
                    tpr_at_5_fpr: 0.25,
                    tpr_low: 0.1,
                    tpr_high: 0.4,
                    p_value: 0.001,
                    roc: vec![(0.0, 0.0), (0.5, 0.9), (1.0, 1.0)],
                }),
                skipped: None,
                blind: None,
                run_id: None,
            }],
        )
        .unwrap();
    // Its blind baseline: the model-free classifier on the same originals and copies.
    store
        .put_blind_baselines(
            run,
            &[tabcontam::store::BlindBaselineRow {
                dataset: "iris".into(),
                serialization: "the-is".into(),
                seed: 0,
                group_pair: tabcontam::likelihood::blind::group_pair_of_cell(
                    "mock-a",
                    "likelihood-min-k",
                ),
                stats: tabcontam::likelihood::BlindAuroc {
                    positives: 50,
                    negatives: 50,
                    auroc: 0.5625,
                    auroc_low: 0.45,
                    auroc_high: 0.67,
                },
                run_id: None,
            }],
        )
        .unwrap();
    store
        .finish_run(run, RunStatus::Finished, &RunCounts::default())
        .unwrap();
}

/// `tabcontam` with none of the caller's MLflow settings (server, experiment, credentials).
fn command(env: &Env, args: &[&str]) -> std::process::Command {
    let mut cmd = env.command(args);
    for var in [
        "MLFLOW_TRACKING_URI",
        "MLFLOW_EXPERIMENT_NAME",
        "MLFLOW_TRACKING_TOKEN",
        "MLFLOW_TRACKING_USERNAME",
        "MLFLOW_TRACKING_PASSWORD",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

fn export(env: &Env, server: &str, experiment: &str, cache: &Path) -> Output {
    command(
        env,
        &[
            "export",
            "mlflow",
            "--tracking-uri",
            server,
            "--experiment",
            experiment,
            "--cache",
            cache.to_str().unwrap(),
            "--json",
        ],
    )
    .output()
    .unwrap()
}

fn exported(out: &Output) -> Value {
    assert!(out.status.success(), "{:?}", text(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {:?}", text(out)))
}

/// The one-line error of a failed command (`error: …`).
fn one_line_error(out: &Output) -> String {
    let (stdout, stderr) = text(out);
    assert!(
        !out.status.success(),
        "expected a failure: {stdout}{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stdout.is_empty(), "nothing on stdout: {stdout}");
    stderr.trim_end().to_string()
}

fn experiment_id(server: &MlflowServer, name: &str) -> Option<String> {
    let (status, body) = server.get(
        "api/2.0/mlflow/experiments/get-by-name",
        &[("experiment_name", name)],
    );
    match status {
        200 => Some(
            body["experiment"]["experiment_id"]
                .as_str()
                .unwrap()
                .to_string(),
        ),
        404 => None,
        other => panic!("get-by-name: HTTP {other}: {body}"),
    }
}

/// The experiment's runs (`ACTIVE_ONLY` or `DELETED_ONLY`), by run name.
fn runs(server: &MlflowServer, experiment: &str, view: &str) -> BTreeMap<String, Value> {
    let body = server.post(
        "api/2.0/mlflow/runs/search",
        json!({ "experiment_ids": [experiment], "run_view_type": view, "max_results": 1000 }),
    );
    body["runs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|run| (run["info"]["run_name"].as_str().unwrap().to_string(), run))
        .collect()
}

fn pairs(list: &Value) -> BTreeMap<String, Value> {
    list.as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|kv| (kv["key"].as_str().unwrap().to_string(), kv["value"].clone()))
        .collect()
}

fn blake3_of(path: &Path) -> String {
    blake3::hash(&std::fs::read(path).unwrap())
        .to_hex()
        .to_string()
}

#[test]
fn export_makes_one_run_per_model_and_a_second_export_adds_none() {
    let env = Env::new();
    let Some(server) = MlflowServer::start(&env.path("mlflow")) else {
        return;
    };

    // A cache without cells: one line, and the server is left untouched (no experiment).
    let empty = env.path("empty.sqlite");
    drop(Store::open(&empty).unwrap());
    let err = one_line_error(&export(&env, &server.url, "contamination", &empty));
    assert!(
        err.contains("the cache has no decided cells") && err.contains("tabcontam run SPEC"),
        "{err}"
    );
    assert_eq!(experiment_id(&server, "contamination"), None);

    build_cache(&env);
    let cache = env.cache();
    let first = exported(&export(&env, &server.url, "contamination", &cache));
    eprintln!("first export: {first:#}");
    assert_eq!(first["experiment_created"], true);
    let actions: Vec<&str> = first["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["created", "created"]);

    // Read back through the REST API.
    let experiment = experiment_id(&server, "contamination").unwrap();
    let active = runs(&server, &experiment, "ACTIVE_ONLY");
    assert_eq!(active.keys().collect::<Vec<_>>(), ["Mock A", "Mock B"]);
    let run = &active["Mock A"];
    assert_eq!(run["info"]["status"], "FINISHED");
    let params = pairs(&run["data"]["params"]);
    eprintln!("params of Mock A: {params:?}");
    for (key, value) in [
        ("model_id", "mock-a"),
        ("source", "tabcontam"),
        ("model", "mock-a-api"),
        ("revision", "mock-a-2026-01"),
        ("backend", "openai-compatible"),
        ("spec", "mlflow-mini"),
        ("seed", "0"),
        ("template", "the-is"),
        ("primary_template", "the-is"),
        ("scoring", "paper"),
    ] {
        assert_eq!(
            params.get(key),
            Some(&json!(value)),
            "param {key}: {params:?}"
        );
    }
    let metrics = pairs(&run["data"]["metrics"]);
    eprintln!("{} metrics of Mock A: {metrics:?}", metrics.len());
    for key in [
        "contamination",
        "knowledge",
        "memorization",
        "membership",
        "contamination_passed",
        "contamination_cells",
        "pass/iris/feature-list-uninformed",
        "pass/titanic/recognition-features",
        "pass/iris/incomplete-completion",
        "accuracy/iris/membership",
        "p_value/iris/membership/the-is",
        "p_holm/titanic/membership/the-is",
        "q_value/iris/membership/the-is",
        "auroc/iris/likelihood-min-k/the-is",
        "auroc_p_value/iris/likelihood-min-k/the-is",
    ] {
        assert!(
            metrics.contains_key(key),
            "metric {key} missing: {metrics:?}"
        );
    }
    assert_eq!(metrics["auroc/iris/likelihood-min-k/the-is"], json!(0.8125));
    assert_eq!(
        metrics["blind_auroc/iris/likelihood-min-k/the-is"],
        json!(0.5625),
        "the blind baseline beside the AUROC"
    );
    assert_eq!(
        metrics["contamination_cells"],
        json!(18.0),
        "9 tests × 2 datasets"
    );
    // No likelihood cell for B: no AUROC metric there.
    let metrics_b = pairs(&active["Mock B"]["data"]["metrics"]);
    assert!(
        !metrics_b.keys().any(|k| k.starts_with("auroc")),
        "{metrics_b:?}"
    );

    // The datasets as inputs, with the blake3 of the shipped files.
    let inputs = run["inputs"]["dataset_inputs"].as_array().unwrap();
    let mut seen = BTreeMap::new();
    for input in inputs {
        let dataset = &input["dataset"];
        let profile: Value = serde_json::from_str(dataset["profile"].as_str().unwrap()).unwrap();
        seen.insert(
            dataset["name"].as_str().unwrap().to_string(),
            (
                dataset["digest"].as_str().unwrap().to_string(),
                profile["blake3"].as_str().unwrap().to_string(),
            ),
        );
        assert_eq!(pairs(&input["tags"])["mlflow.data.context"], "evaluation");
    }
    eprintln!("inputs of Mock A: {seen:?}");
    for (name, file) in [("iris", "iris.csv"), ("titanic", "titanic.csv")] {
        let blake3 = blake3_of(&Path::new(REPO).join("datasets").join(file));
        assert_eq!(seen[name], (blake3[..32].to_string(), blake3), "{name}");
    }

    // The report files as artifacts: scores.json is the very file `tabcontam report` writes.
    let run_id = run["info"]["run_id"].as_str().unwrap();
    let (status, listed) = server.get(
        "api/2.0/mlflow/artifacts/list",
        &[("run_id", run_id), ("path", "report")],
    );
    assert_eq!(status, 200, "{listed}");
    let names: Vec<&str> = listed["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    eprintln!("artifacts of Mock A: {names:?}");
    for name in [
        "report/scores.json",
        "report/report.html",
        "report/report.tex",
        "report/grid.csv",
        "report/report.md",
    ] {
        assert!(names.contains(&name), "{name} not among {names:?}");
    }
    let reports = env.path("reports");
    let out = env.run(&[
        "report",
        "--cache",
        cache.to_str().unwrap(),
        "--out",
        reports.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{:?}", text(&out));
    let artifact_root = run["info"]["artifact_uri"]
        .as_str()
        .unwrap()
        .trim_start_matches("mlflow-artifacts:/");
    let uploaded = server.get_bytes(&format!(
        "api/2.0/mlflow-artifacts/artifacts/{artifact_root}/report/scores.json"
    ));
    assert_eq!(
        uploaded,
        std::fs::read(reports.join("scores.json")).unwrap()
    );

    // A second export: the same runs, nothing logged again.
    let second = exported(&export(&env, &server.url, "contamination", &cache));
    for run in second["runs"].as_array().unwrap() {
        assert_eq!(run["action"]["kind"], "unchanged", "{second:#}");
        assert_eq!(run["metrics_logged"], 0, "{second:#}");
        assert_eq!(run["artifacts_uploaded"], 0, "{second:#}");
    }
    let again = runs(&server, &experiment, "ACTIVE_ONLY");
    assert_eq!(again.len(), 2, "a second export adds no run");
    assert_eq!(again["Mock A"]["info"]["run_id"], run["info"]["run_id"]);
    let (_, history) = server.get(
        "api/2.0/mlflow/metrics/get-history",
        &[("run_id", run_id), ("metric_key", "contamination")],
    );
    assert_eq!(history["metrics"].as_array().unwrap().len(), 1, "{history}");

    // A label edited in the spec is a tag: the same run, renamed. A new revision is another
    // model: MLflow params never change, so its run is replaced (the old one in the trash).
    {
        let mut store = Store::open(&cache).unwrap();
        let models = store.models().unwrap();
        let a = models.iter().find(|m| m.id == "mock-a").unwrap();
        store
            .upsert_model(&ModelRow {
                label: "Mock A (renamed)".into(),
                ..a.clone()
            })
            .unwrap();
        let b = models.iter().find(|m| m.id == "mock-b").unwrap();
        let mut b = b.clone();
        b.identity.revision = "mock-b-2026-02".into();
        store.upsert_model(&b).unwrap();
    }
    let third = exported(&export(&env, &server.url, "contamination", &cache));
    eprintln!("third export: {third:#}");
    let by_name: BTreeMap<&str, &Value> = third["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r))
        .collect();
    assert_eq!(by_name["Mock A (renamed)"]["action"]["kind"], "updated");
    assert_eq!(by_name["Mock A (renamed)"]["run_id"], run["info"]["run_id"]);
    let replaced = &by_name["Mock B"]["action"];
    assert_eq!(replaced["kind"], "replaced");
    assert_eq!(replaced["why"], "revision: mock-b-2026-01 → mock-b-2026-02");
    let active = runs(&server, &experiment, "ACTIVE_ONLY");
    assert_eq!(
        active.keys().collect::<Vec<_>>(),
        ["Mock A (renamed)", "Mock B"]
    );
    assert_eq!(
        pairs(&active["Mock B"]["data"]["params"])["revision"],
        "mock-b-2026-02"
    );
    let deleted = runs(&server, &experiment, "DELETED_ONLY");
    assert_eq!(deleted.len(), 1, "the replaced run is in the trash");
}

#[test]
fn an_unreachable_tracking_server_is_one_line_and_writes_nothing() {
    let env = Env::new();
    // A cache of our own would need a run; an imported-style cell is enough here.
    let cache = env.cache();
    std::fs::create_dir_all(cache.parent().unwrap()).unwrap();
    {
        let mut store = Store::open(&cache).unwrap();
        store
            .import_cells(&[tabcontam::store::CellRow {
                source: "paper".into(),
                model: "m".into(),
                dataset: "iris".into(),
                test: tabcontam::probe::TestId::FeatureListUninformed,
                serialization: None,
                seed: 0,
                result: tabcontam::probe::CellResult {
                    passed: true,
                    score: 1.0,
                    trials: 1,
                    passed_trials: 1,
                    invalid_trials: 0,
                    trial_chance: None,
                },
                samples: Vec::new(),
                skipped: None,
                echo_trials: None,
                chance: None,
                run_id: None,
            }])
            .unwrap();
    }
    let before = blake3_of(&cache);
    let port = mlflow_server::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let err = one_line_error(&export(&env, &url, "contamination", &cache));
    assert!(
        err.starts_with(&format!("error: {url}: cannot connect")),
        "{err}"
    );
    assert!(err.contains("mlflow server --serve-artifacts"), "{err}");
    assert_eq!(blake3_of(&cache), before, "the cache is only read");

    // No server named at all: the flag or the variable.
    let out = command(
        &env,
        &["export", "mlflow", "--cache", cache.to_str().unwrap()],
    )
    .output()
    .unwrap();
    let err = one_line_error(&out);
    assert!(err.contains("pass --tracking-uri"), "{err}");
}
