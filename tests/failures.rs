//! Failures are recorded, never lost (issue 8, item 4), and remote and local models of one
//! spec run side by side (item 5): `tabcontam run` with local models that cannot load
//! (unsupported architecture, truncated weights), with a remote model beside them (a
//! loopback mock server), with a cache that stops taking writes mid-run, and with a working
//! tiny local model next to a slow remote one.

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/tiny_llama.rs"]
mod tiny_llama;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use cli_env::{Env, json, one_line_error, succeeded, text};
use mock_server::MockConfig;
use tabcontam::store::Store;

const KEY_ENV: &str = "TABCONTAM_TEST_API_KEY";
/// Requests of the mini spec for one model: iris and titanic × (1 + 1 + 100 + 5).
const PER_MODEL: u64 = 214;

/// Every command of this file runs on the environment's cache.
trait OnCache {
    fn run_on_cache(&self, args: &[&str]) -> Output;
    fn status(&self) -> serde_json::Value;
}

impl OnCache for Env {
    fn run_on_cache(&self, args: &[&str]) -> Output {
        self.command(args)
            .arg("--cache")
            .arg(self.cache())
            .output()
            .unwrap()
    }

    fn status(&self) -> serde_json::Value {
        let out = self.run_on_cache(&["status", "--json"]);
        succeeded(&out);
        json(&out)
    }
}

const HEADER: &str = "name = \"mini\"\nseed = 0\ndatasets = [\"iris\", \"titanic\"]\n\
    tests = [\"feature-list-uninformed\", \"recognition-features\", \"membership\", \"incomplete-completion\"]\n\
    serializations = [\"the-is\"]\n";

fn remote_model(url: &str, concurrency: usize) -> String {
    format!(
        "\n[[models]]\nid = \"mock-base\"\nbackend = \"openai-compatible\"\napi = \"completions\"\n\
         base_url = \"{url}/v1\"\napi_key_env = \"{KEY_ENV}\"\nconcurrency = {concurrency}\n\
         backoff_base_ms = 1\nbackoff_max_ms = 20\ntimeout_s = 5\n"
    )
}

fn local_model(id: &str, dir: &Path) -> String {
    format!(
        "\n[[models]]\nid = \"{id}\"\nbackend = \"local\"\nmodel = \"{}\"\n",
        dir.display()
    )
}

/// A tiny llama whose config names an architecture the local backend does not run.
fn unsupported_model(dir: &Path) -> PathBuf {
    let model = dir.join("mamba");
    tiny_llama::write_tiny_llama(&model, tiny_llama::VOCAB);
    std::fs::write(
        model.join("config.json"),
        r#"{"model_type": "mamba", "vocab_size": 48}"#,
    )
    .unwrap();
    model
}

/// A tiny llama whose weight file lost its second half.
fn truncated_model(dir: &Path) -> PathBuf {
    let model = dir.join("truncated");
    tiny_llama::write_tiny_llama(&model, tiny_llama::VOCAB);
    let weights = model.join("model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    model
}

/// The last run of `status --json`.
fn last_run(status: &serde_json::Value) -> &serde_json::Value {
    &status["last_runs"][0]
}

/// Asserts a failed run: exit code 1, the reason as the only stderr line (with `--json`),
/// and `status --json` showing the run `failed` with that reason.
fn assert_failed_run(env: &Env, out: &Output, needles: &[&str]) -> serde_json::Value {
    one_line_error(out, needles);
    let summary = json(out);
    assert_eq!(summary["status"], "failed", "{summary}");
    let status = env.status();
    let run = last_run(&status);
    assert_eq!(run["status"], "failed", "{run}");
    assert!(run["finished_at"].is_string(), "{run}");
    let reason = run["reason"].as_str().unwrap_or_else(|| panic!("{run}"));
    assert!(!reason.contains('\n'), "{reason}");
    assert_eq!(summary["reason"], reason);
    for needle in needles {
        assert!(reason.contains(needle), "`{needle}` missing from: {reason}");
    }
    status
}

#[test]
fn a_local_model_with_an_unsupported_architecture_fails_the_run_with_its_reason() {
    let env = Env::new().var(KEY_ENV, "sk-test");
    let model = unsupported_model(env.dir.path());
    let spec = env.spec(
        "mini.toml",
        &format!("{HEADER}{}", local_model("tiny-mamba", &model)),
    );
    let out = env.run_on_cache(&["run", spec.to_str().unwrap(), "--json"]);
    let status = assert_failed_run(
        &env,
        &out,
        &["tiny-mamba", "unsupported architecture", "mamba"],
    );
    // The failure is also recorded against the model's first request.
    let failure = &status["recent_failures"][0];
    assert_eq!(failure["model"], "tiny-mamba");
    assert_eq!(failure["kind"], "local-load");
    assert!(
        failure["message"].as_str().unwrap().contains("mamba"),
        "{failure}"
    );
    assert_eq!(status["responses"], 0);
    assert_eq!(status["cells"], 0);

    // The text of `status` shows the reason under the run.
    let out = env.run_on_cache(&["status"]);
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains("failed: model `tiny-mamba`: ") && stdout.contains("mamba"),
        "{stdout}"
    );
}

#[test]
fn remote_answers_are_stored_and_decided_when_a_local_model_fails() {
    let env = Env::new().var(KEY_ENV, "sk-test");
    let server = env.server(MockConfig::new());
    let model = unsupported_model(env.dir.path());
    let spec = env.spec(
        "mini.toml",
        &format!(
            "{HEADER}{}{}",
            remote_model(&server.url(), 8),
            local_model("tiny-mamba", &model)
        ),
    );
    let out = env.run_on_cache(&["run", spec.to_str().unwrap(), "--json"]);
    let status = assert_failed_run(&env, &out, &["tiny-mamba", "mamba"]);
    let summary = json(&out);
    assert_eq!(summary["models"]["mock-base"]["sent"], PER_MODEL);
    assert_eq!(summary["models"]["mock-base"]["failed"], 0);
    assert_eq!(status["responses"], PER_MODEL);
    assert_eq!(summary["missing"], PER_MODEL);

    // Every cell of the remote model is decided, exactly as a run of it alone decides them.
    let store = Store::open_read_only(env.cache()).unwrap();
    let cells = store.cells().unwrap();
    assert!(cells.iter().all(|c| c.model == "mock-base"));
    let decided = summary["cells_decided"].as_u64().unwrap();
    assert_eq!(cells.len() as u64, decided);
    drop(store);
    let alone = env.run_on_cache(&[
        "run",
        spec.to_str().unwrap(),
        "--model",
        "mock-base",
        "--offline",
        "--json",
    ]);
    succeeded(&alone);
    let alone = json(&alone);
    assert_eq!(alone["cells_decided"].as_u64().unwrap(), decided);
    assert_eq!(alone["cells_incomplete"], 0);
    assert!(decided > 0);
}

#[test]
fn truncated_local_weights_fail_the_run_and_keep_the_remote_answers() {
    let env = Env::new().var(KEY_ENV, "sk-test");
    let server = env.server(MockConfig::new());
    let model = truncated_model(env.dir.path());
    let spec = env.spec(
        "mini.toml",
        &format!(
            "{HEADER}{}{}",
            local_model("tiny-cut", &model),
            remote_model(&server.url(), 8),
        ),
    );
    let out = env.run_on_cache(&["run", spec.to_str().unwrap(), "--json"]);
    let status = assert_failed_run(&env, &out, &["tiny-cut", "truncated", "model.safetensors"]);
    assert_eq!(status["responses"], PER_MODEL);
    assert_eq!(status["recent_failures"][0]["kind"], "local-load");
    let summary = json(&out);
    assert!(summary["cells_decided"].as_u64().unwrap() > 0, "{summary}");
    assert_eq!(summary["models"]["tiny-cut"]["sent"], 0);
    assert!(
        summary["models"]["tiny-cut"]["stopped"]
            .as_str()
            .unwrap()
            .contains("truncated"),
        "{summary}"
    );
}

#[test]
fn a_cache_that_stops_taking_writes_fails_the_run_and_decides_what_was_stored() {
    let env = Env::new().var(KEY_ENV, "sk-test");
    // Answers take 20 ms, so the writer meets the error long before everything is sent.
    let server = env.server(MockConfig::new().latency(Duration::from_millis(20)));
    let spec = env.spec(
        "mini.toml",
        &format!("{HEADER}{}", remote_model(&server.url(), 4)),
    );
    // Create the cache, then make it refuse every response after the 60th (as a full
    // disk would), with a trigger in the real SQLite file.
    let out = env.run_on_cache(&["run", spec.to_str().unwrap(), "--offline", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{:?}", text(&out));
    const STORED: u64 = 60;
    let conn = rusqlite::Connection::open(env.cache()).unwrap();
    conn.execute_batch(&format!(
        "CREATE TRIGGER full_disk BEFORE INSERT ON responses
         WHEN (SELECT count(*) FROM responses) >= {STORED}
         BEGIN SELECT RAISE(ABORT, 'database or disk is full (test)'); END;"
    ))
    .unwrap();
    drop(conn);

    let out = env.run_on_cache(&["run", spec.to_str().unwrap(), "--json"]);
    let status = assert_failed_run(
        &env,
        &out,
        &["writing to the cache failed", "disk is full (test)"],
    );
    assert_eq!(status["responses"], STORED);
    // The executor stopped sending once the cache failed (a few were in flight).
    assert!(
        server.request_count() < PER_MODEL,
        "{} requests sent",
        server.request_count()
    );
    // What was stored is decided: the same trials and cells as an offline run decides.
    let summary = json(&out);
    let trials = summary["trials_decided"].as_u64().unwrap();
    // Only complete cells publish trials, so a cell cut off by the failure has none.
    assert!(
        trials > 0 && trials <= STORED,
        "{trials} trials decided from {STORED} stored answers"
    );
    let conn = rusqlite::Connection::open(env.cache()).unwrap();
    conn.execute_batch("DROP TRIGGER full_disk").unwrap();
    drop(conn);
    let offline = env.run_on_cache(&["run", spec.to_str().unwrap(), "--offline", "--json"]);
    let offline = json(&offline);
    assert_eq!(offline["trials_decided"].as_u64().unwrap(), trials);
    assert_eq!(offline["cells_decided"], summary["cells_decided"]);
}

/// (first, last) `created_at` of the responses of one model identity.
fn response_span(cache: &Path, backend: &str) -> (String, String) {
    let conn = rusqlite::Connection::open(cache).unwrap();
    conn.query_row(
        "SELECT min(r.created_at), max(r.created_at) FROM responses r
         JOIN identities i ON i.id = r.identity_id WHERE i.backend = ?1",
        [backend],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
    .unwrap()
}

#[test]
fn remote_and_local_models_of_one_spec_run_at_the_same_time() {
    let env = Env::new().var(KEY_ENV, "sk-test");
    // Slow enough that the remote model takes seconds: 214 requests, 4 at a time, 80 ms.
    let server = env.server(MockConfig::new().latency(Duration::from_millis(80)));
    let model = env.path("tiny");
    tiny_llama::write_tiny_llama(&model, tiny_llama::VOCAB);
    let spec = env.spec(
        "mini.toml",
        &format!(
            "{HEADER}{}{}",
            remote_model(&server.url(), 4),
            local_model("tiny", &model)
        ),
    );
    let out = env.run_on_cache(&["run", spec.to_str().unwrap(), "--json"]);
    succeeded(&out);
    let summary = json(&out);
    assert_eq!(summary["models"]["tiny"]["sent"], PER_MODEL);
    assert_eq!(summary["models"]["mock-base"]["sent"], PER_MODEL);
    let (remote_first, remote_last) = response_span(&env.cache(), "openai-compatible");
    let (local_first, local_last) = response_span(&env.cache(), "local");
    // One after the other, every local answer would be stored after every remote one.
    assert!(
        local_first < remote_last && remote_first < local_last,
        "remote {remote_first}..{remote_last}, local {local_first}..{local_last}"
    );
}

/// Every stored answer of a cache, by request key.
fn answers(cache: &Path) -> Vec<(Vec<u8>, String)> {
    let conn = rusqlite::Connection::open(cache).unwrap();
    let mut statement = conn
        .prepare("SELECT key, text FROM responses ORDER BY key")
        .unwrap();
    statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Lanes share one loaded model, each with its own KV caches and kept prefix: three of
/// them store the very answers one lane does.
#[test]
fn a_local_model_answers_alike_on_one_lane_and_on_three() {
    let env = Env::new();
    let model = env.path("tiny");
    tiny_llama::write_tiny_llama(&model, tiny_llama::VOCAB);
    let mut stored = Vec::new();
    for lanes in [1, 3] {
        let spec = env.spec(
            &format!("lanes-{lanes}.toml"),
            &format!(
                "{HEADER}{}max_batch = 4\nlanes = {lanes}\n",
                local_model("tiny", &model)
            ),
        );
        let cache = env.path(&format!("lanes-{lanes}.sqlite"));
        let out = env
            .command(&["run", spec.to_str().unwrap(), "--json"])
            .arg("--cache")
            .arg(&cache)
            .output()
            .unwrap();
        succeeded(&out);
        assert_eq!(json(&out)["models"]["tiny"]["sent"], PER_MODEL);
        stored.push(answers(&cache));
    }
    assert_eq!(stored[0].len() as u64, PER_MODEL);
    let distinct: HashSet<&String> = stored[0].iter().map(|(_, text)| text).collect();
    assert!(
        distinct.len() >= 5,
        "the answers differ by prompt: {distinct:?}"
    );
    assert!(stored[0] == stored[1], "three lanes changed an answer");
}

#[test]
fn a_cache_that_refuses_verdicts_still_ends_the_run_failed_with_the_reason() {
    let env = Env::new().var(KEY_ENV, "sk-test");
    let server = env.server(MockConfig::new());
    let spec = env.spec(
        "mini.toml",
        &format!("{HEADER}{}", remote_model(&server.url(), 8)),
    );
    let out = env.run_on_cache(&["run", spec.to_str().unwrap(), "--offline", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{:?}", text(&out));
    let conn = rusqlite::Connection::open(env.cache()).unwrap();
    conn.execute_batch(
        "CREATE TRIGGER no_verdicts BEFORE INSERT ON trials
         BEGIN SELECT RAISE(ABORT, 'trials are read-only (test)'); END;",
    )
    .unwrap();
    drop(conn);
    let out = env.run_on_cache(&["run", spec.to_str().unwrap(), "--json"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one error line: {stderr}");
    assert!(
        stderr.contains("deciding the stored answers failed")
            && stderr.contains("trials are read-only (test)"),
        "{stderr}"
    );
    // Every answer is stored and the run is not left `running`.
    let status = env.status();
    assert_eq!(status["responses"], PER_MODEL);
    let run = last_run(&status);
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["reason"]
            .as_str()
            .unwrap()
            .contains("trials are read-only (test)"),
        "{run}"
    );
}

/// Records what the workflow announces.
#[derive(Default)]
struct Recorder {
    starts: Vec<tabcontam::run::workflow::RunStart>,
}

impl tabcontam::run::workflow::RunObserver for Recorder {
    fn started(&mut self, start: &tabcontam::run::workflow::RunStart) {
        self.starts.push(start.clone());
    }
}

#[test]
fn the_workflow_is_one_library_call() {
    use tabcontam::run::workflow::{RunSettings, run_experiment};
    use tabcontam::store::RunStatus;
    let env = Env::new().var(KEY_ENV, "sk-test");
    let model = env.path("tiny");
    tiny_llama::write_tiny_llama(&model, tiny_llama::VOCAB);
    let spec = env.spec(
        "mini.toml",
        &format!("{HEADER}{}", local_model("tiny", &model)),
    );
    let settings = RunSettings {
        spec,
        only_models: Vec::new(),
        data_dir: None,
        cache: env.cache(),
        // Local models need no network: they run offline too.
        offline: true,
        progress: tabcontam::run::execute::ProgressMode::Off,
        shard: None,
        pin_served: false,
    };
    let mut recorder = Recorder::default();
    let report = run_experiment(&settings, &mut recorder).unwrap();
    assert_eq!(report.status, RunStatus::Finished, "{report:?}");
    assert_eq!(report.reason, None);
    assert_eq!(report.models["tiny"].sent, PER_MODEL);
    assert_eq!(report.missing, 0);
    assert_eq!(report.cells_incomplete, 0);
    assert_eq!(recorder.starts.len(), 1);
    assert_eq!(recorder.starts[0].to_send, PER_MODEL);
    assert_eq!(recorder.starts[0].run_id, report.run_id);

    // Again: everything is cached, nothing is generated, the same cells are decided.
    let again = run_experiment(&settings, &mut ()).unwrap();
    assert_eq!(again.counts.cached, PER_MODEL);
    assert_eq!(again.counts.sent, 0);
    assert_eq!(again.cells_decided, report.cells_decided);
}
