//! The likelihood detectors on real models: SmolLM2-135M-Instruct (Q4_1 GGUF) in-process
//! and served by llama.cpp's `llama-server` (the one `scripts/ci-install-test-server.sh`
//! installs), and the equality of the two engines' per-token log-probabilities on the same
//! GGUF file. Without the assets the tests are skipped (failed in CI, see support/skip.rs).

#[path = "support/skip.rs"]
mod skip;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tabcontam::infer::{LocalModel, LocalOptions};
use tabcontam::llm::client::{Client, ClientConfig};
use tabcontam::llm::{ApiMode, BackendKind};
use tabcontam::run::workflow::{RunSettings, run_experiment};
use tabcontam::store::{RunStatus, Store};

const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Largest difference allowed between the local engine's and llama-server's log-probability
/// of the same token after the same tokens, and for their mean over all tokens compared.
/// Both read the same Q4_1 file, but not with the same arithmetic: our engine re-blocks
/// Q4_1 to Q8_0 (src/infer/weights.rs) and expands it to f32 for prefill, llama.cpp
/// multiplies Q4_1 blocks by activations quantized to Q8_1. Measured on these texts
/// (2026-11-23): mean |diff| 0.060 nats, max 0.60 (a low-probability digit after a
/// near-tie). The detectors average over tokens, so the mean is the figure that matters;
/// real disagreements (another token, position or model) are whole nats on most tokens.
const TOKEN_TOLERANCE: f64 = 1.0;
const MEAN_TOLERANCE: f64 = 0.1;

fn model_file() -> Option<PathBuf> {
    skip::require(
        skip::assets_dir().join("models").join(MODEL_FILE),
        |p| p.is_file(),
        "the SmolLM2 GGUF is missing; run scripts/ci-install-test-server.sh",
    )
}

fn server_binary() -> Option<PathBuf> {
    skip::require(
        skip::assets_dir().join("bin/llama-server"),
        |p| p.is_file(),
        "llama-server is missing; run scripts/ci-install-test-server.sh",
    )
}

/// Kills the server when the test ends, passes or panics.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(binary: &Path, model: &Path, log: &Path) -> Server {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = std::fs::File::create(log).unwrap();
    let child = Command::new(binary)
        .args(["-m".as_ref(), model.as_os_str()])
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args([
            "-c",
            "2048",
            "-np",
            "4",
            "-t",
            "2",
            "--no-webui",
            "--no-warmup",
        ])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start llama-server");
    let mut server = Server { child, port };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("llama-server exited early ({status})");
        }
        let ready = std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            && reqwest::blocking_health(port);
        if ready {
            return server;
        }
        assert!(
            Instant::now() < deadline,
            "llama-server not ready after 120 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

mod reqwest {
    /// `/health` answers 503 while the model loads, 200 once it serves.
    pub fn blocking_health(port: u16) -> bool {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
        let request =
            format!("GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
        if stream.write_all(request.as_bytes()).is_err() {
            return false;
        }
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer.starts_with("HTTP/1.1 200")
    }
}

fn client(port: u16) -> Client {
    let mut config = ClientConfig::new(BackendKind::OpenaiCompatible, "SmolLM2-135M-Instruct");
    config.api = ApiMode::Completions;
    config.base_url = vec![format!("http://127.0.0.1:{port}/v1")];
    Client::new(config).unwrap()
}

/// Serialized iris rows as the likelihood tests score them.
const TEXTS: &[&str] = &[
    "The sepal_length is 5.1, The sepal_width is 3.5, The petal_length is 1.4, The petal_width is 0.2, The species is Iris-setosa",
    "The sepal_length is 6.3, The sepal_width is 3.3, The petal_length is 6.0, The petal_width is 2.5, The species is Iris-virginica",
    "The sepal_length is 7.0, The sepal_width is 2.2, The petal_length is 4.7, The petal_width is 1.4, The species is Iris-setosa",
    "sepal_length: 4.9\nsepal_width: 3.0\npetal_length: 1.4\npetal_width: 0.2\nspecies: Iris-setosa",
];

#[test]
fn local_engine_and_llama_server_give_the_same_logprobs() {
    let (Some(model_path), Some(binary)) = (model_file(), server_binary()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(&binary, &model_path, &dir.path().join("server.log"));
    let client = client(server.port);
    let mut local = LocalModel::load(&model_path, &LocalOptions::default()).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut max_diff: f64 = 0.0;
    let mut sum_diff = 0.0;
    let mut compared = 0;
    for text in TEXTS {
        let (method, remote) = runtime
            .block_on(tabcontam::llm::logprobs::score_text(&client, text))
            .unwrap();
        assert_eq!(method, tabcontam::llm::logprobs::METHOD_LLAMA_CPP);
        let own = local.score_text(text).unwrap();
        // Both engines read the text as the same tokens.
        assert_eq!(own.tokens, remote.tokens, "{text}");
        assert_eq!(own.logprobs.len(), remote.logprobs.len());
        assert!(remote.mu.is_none() && own.mu.is_some());
        for (i, (a, b)) in own.logprobs.iter().zip(&remote.logprobs).enumerate() {
            let diff = (a - b).abs();
            assert!(
                diff <= TOKEN_TOLERANCE,
                "token {i} of {text:?}: local {a} vs llama-server {b}"
            );
            max_diff = max_diff.max(diff);
            sum_diff += diff;
            compared += 1;
        }
    }
    let mean_diff = sum_diff / compared as f64;
    eprintln!(
        "local vs llama-server: {compared} token log-probabilities, mean |diff| = {mean_diff:.4}, max |diff| = {max_diff:.4} nats (tolerances {MEAN_TOLERANCE} and {TOKEN_TOLERANCE})"
    );
    assert!(mean_diff <= MEAN_TOLERANCE, "mean |diff| {mean_diff}");
    assert!(compared > 100, "{compared}");
}

fn run_settings(spec: &Path, cache: &Path, offline: bool) -> RunSettings {
    RunSettings {
        spec: spec.to_path_buf(),
        only_models: Vec::new(),
        data_dir: None,
        cache: cache.to_path_buf(),
        offline,
        progress: tabcontam::run::execute::ProgressMode::Off,
        shard: None,
        pin_served: false,
    }
}

fn print_cells(store: &Store) {
    for cell in store.likelihood_cells().unwrap() {
        match &cell.stats {
            Some(s) => eprintln!(
                "{} {} {} {}: AUROC {:.3} [{:.3}, {:.3}], TPR@5%FPR {:.3}, p {:.4} ({}); blind {}",
                cell.model,
                cell.dataset,
                cell.serialization,
                cell.test,
                s.auroc,
                s.auroc_low,
                s.auroc_high,
                s.tpr_at_5_fpr,
                s.p_value,
                cell.method,
                cell.blind.map_or("–".into(), |b| format!(
                    "{:.3} [{:.3}, {:.3}]",
                    b.auroc, b.auroc_low, b.auroc_high
                ))
            ),
            None => eprintln!(
                "{} {} {}: skipped: {}",
                cell.model,
                cell.test,
                cell.serialization,
                cell.skipped.as_deref().unwrap_or("")
            ),
        }
    }
}

#[test]
fn in_process_run_scores_iris_once_per_text() {
    let Some(model_path) = model_file() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("likelihood.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"likelihood\"\nseed = 0\ndatasets = [\"iris\"]\ntests = [\"likelihood\"]\n\
             serializations = [\"the-is\"]\n\n[[models]]\nid = \"smollm2\"\nbackend = \"local\"\nmodel = \"{}\"\n",
            model_path.display()
        ),
    )
    .unwrap();
    let cache = dir.path().join("cache.sqlite");
    let settings = run_settings(&spec, &cache, true);
    let report = run_experiment(&settings, &mut ()).unwrap();
    assert_eq!(report.status, RunStatus::Finished, "{report:?}");
    // 100 originals + 100 perturbed copies (a row drawn twice is scored once) and one
    // column-matched row per distinct original (`tabcontam rows`' reference).
    assert_eq!(report.likelihood.cached, 0);
    assert!(
        (150..=300).contains(&report.likelihood.scored),
        "{:?}",
        report.likelihood
    );
    // The four detectors, and dataset inference combining them.
    assert_eq!(report.likelihood.cells, 5);
    let store = Store::open_read_only(&cache).unwrap();
    print_cells(&store);
    let all_cells = store.likelihood_cells().unwrap();
    assert_eq!(all_cells.len(), 5);
    let before: Vec<_> = all_cells
        .iter()
        .map(|c| (c.stats.clone(), c.blind))
        .collect();
    let (inference, cells): (Vec<_>, Vec<_>) = all_cells
        .into_iter()
        .partition(|c| c.test == "dataset-inference");
    // Dataset inference: learnt on half the distinct rows of each side, tested on the
    // other half (Welch's p), with the blind baseline of the same two groups.
    let inference = &inference[0];
    let di = inference
        .stats
        .as_ref()
        .unwrap_or_else(|| panic!("{inference:?}"));
    // Iris repeats rows: its distinct originals are fewer than the perturbed copies.
    assert!(
        (25..=50).contains(&di.positives) && (40..=50).contains(&di.negatives),
        "the test halves of the distinct rows of each side: {di:?}"
    );
    assert!((0.0..=1.0).contains(&di.p_value) && di.auroc_low <= di.auroc);
    assert_eq!(inference.blind, cells[0].blind);
    for cell in &cells {
        let s = cell.stats.as_ref().unwrap_or_else(|| panic!("{cell:?}"));
        // Each distinct text once: iris repeats rows, and its 100 seeded draws hold 67
        // distinct originals; the 100 perturbed copies are all different.
        assert_eq!((s.positives, s.negatives), (67, 100));
        assert!(
            s.auroc_low <= s.auroc && s.auroc <= s.auroc_high,
            "{cell:?}"
        );
        assert!((0.0..=1.0).contains(&s.p_value));
        assert_eq!(cell.method, "local");
    }
    // Issue 26 item 2: every cell carries the blind baseline of its rows, one model-free
    // figure for the four detectors (the same originals and perturbed copies).
    let blind = cells[0].blind.unwrap_or_else(|| panic!("{:?}", cells[0]));
    assert_eq!((blind.positives, blind.negatives), (100, 100));
    assert!(0.0 <= blind.auroc_low && blind.auroc_low <= blind.auroc);
    assert!(blind.auroc <= blind.auroc_high && blind.auroc_high <= 1.0);
    assert!(cells.iter().all(|c| c.blind == Some(blind)), "{cells:?}");
    // The reports: scores.json's `likelihood` block, the HTML section with its figures,
    // and a LaTeX report that compiles.
    let analysis = tabcontam::analyze::analyze_store(
        &store,
        &tabcontam::analyze::Options {
            primary_serialization: "the-is".into(),
            ..Default::default()
        },
    )
    .unwrap();
    let files = tabcontam::report::render(
        &analysis,
        &[
            tabcontam::report::Format::Json,
            tabcontam::report::Format::Html,
            tabcontam::report::Format::Latex,
        ],
        &tabcontam::report::Options::default(),
    )
    .unwrap();
    let file = |name: &str| &files.iter().find(|f| f.name == name).unwrap().contents;
    let json: serde_json::Value = serde_json::from_str(file("scores.json")).unwrap();
    let block = json["likelihood"].as_array().unwrap();
    assert_eq!(block.len(), 5, "four detectors and dataset inference");
    for entry in block {
        let auroc = entry["auroc"].as_f64().unwrap();
        let interval = entry["auroc_interval"].as_array().unwrap();
        assert!(interval[0].as_f64().unwrap() <= auroc && auroc <= interval[1].as_f64().unwrap());
        assert!(entry["p"].as_f64().is_some() && entry["tpr_at_5_fpr"].as_f64().is_some());
        assert_eq!(entry["blind_auroc"].as_f64(), Some(blind.auroc));
        let blind_interval = entry["blind_auroc_interval"].as_array().unwrap();
        assert_eq!(blind_interval[0].as_f64(), Some(blind.auroc_low));
        assert_eq!(blind_interval[1].as_f64(), Some(blind.auroc_high));
        assert_eq!(
            entry["no_better_than_blind"].as_bool(),
            Some(auroc <= blind.auroc_high.max(0.5))
        );
    }
    // The static site's model page: the same cells with their blind baseline.
    let site = tabcontam::report::site::render(
        &analysis,
        &tabcontam::report::site::Options {
            cache: "cache.sqlite".into(),
        },
    )
    .unwrap();
    let page = &site
        .iter()
        .find(|f| f.name == "likelihood.html")
        .expect("the site's likelihood page");
    assert!(
        page.contents
            .contains("Dataset inference (detectors combined, Welch p)")
    );
    let index = &site
        .iter()
        .find(|f| f.name == "index.html")
        .unwrap()
        .contents;
    assert!(index.contains(r#"<a href="likelihood.html">Likelihood</a>"#));
    assert_eq!(
        page.contents
            .matches(&format!(
                "<td>{:.3} [{:.3}, {:.3}]</td>",
                blind.auroc, blind.auroc_low, blind.auroc_high
            ))
            .count(),
        5,
        "the blind baseline beside each detector and dataset inference"
    );
    let html = file("report.html");
    assert!(html.contains("id=\"likelihood\""));
    assert!(html.contains("<th>Blind AUROC [95 % CI]</th>"));
    assert_eq!(
        html.matches(&format!(
            "<td>{:.3} [{:.3}, {:.3}]</td>",
            blind.auroc, blind.auroc_low, blind.auroc_high
        ))
        .count(),
        5
    );
    assert!(html.contains("Dataset inference (detectors combined, Welch p)"));
    let flagged = cells
        .iter()
        .chain([inference])
        .filter(|c| blind.not_exceeded_by(c.stats.as_ref().unwrap().auroc))
        .count();
    assert_eq!(html.matches(" †</td>").count(), flagged);
    // One ROC figure (iris, the-is) and one heatmap per detector.
    assert_eq!(html.matches("ROC curves: smollm2").count(), 1);
    assert_eq!(html.matches("AUROC of ").count(), 4);
    let tex = file("report.tex");
    assert!(tex.contains("\\section{Likelihood detectors}") && tex.contains("\\addplot"));
    assert!(tex.contains("Blind AUROC"));
    if let Some(pdflatex) = skip::require(
        std::process::Command::new("pdflatex")
            .arg("--version")
            .output(),
        |o| o.as_ref().is_ok_and(|o| o.status.success()),
        "pdflatex is not installed (scripts/ci-install-report-tools.sh)",
    ) {
        drop(pdflatex);
        let latex_dir = dir.path().join("latex");
        tabcontam::report::write(&latex_dir, &files).unwrap();
        let output = Command::new("pdflatex")
            .args([
                "-no-shell-escape",
                "-interaction=nonstopmode",
                "-halt-on-error",
                "report.tex",
            ])
            .current_dir(&latex_dir)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "report.tex failed:\n{}",
            String::from_utf8_lossy(&output.stdout)
        );
    }

    drop(store);
    // Again: every text comes from the logprobs cache; the same figures.
    let again = run_experiment(&settings, &mut ()).unwrap();
    // The detectors' 200 texts and the column-matched rows (one per distinct original).
    assert_eq!(again.likelihood.scored, 0);
    assert!(
        (250..=300).contains(&again.likelihood.cached),
        "{:?}",
        again.likelihood
    );
    let store = Store::open_read_only(&cache).unwrap();
    let same: Vec<_> = store
        .likelihood_cells()
        .unwrap()
        .into_iter()
        .map(|c| (c.stats, c.blind))
        .collect();
    assert_eq!(same, before);
}

#[test]
fn run_against_llama_server_scores_and_skips_min_k_plus_plus() {
    let (Some(model_path), Some(binary)) = (model_file(), server_binary()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(&binary, &model_path, &dir.path().join("server.log"));
    let spec = dir.path().join("likelihood.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"likelihood-server\"\nseed = 0\ndatasets = [\"iris\"]\n\
             tests = [\"likelihood-perplexity\", \"likelihood-min-k-plus-plus\"]\nserializations = [\"the-is\"]\n\n\
             [[models]]\nid = \"smollm2-server\"\nbackend = \"openai-compatible\"\napi = \"completions\"\n\
             model = \"SmolLM2-135M-Instruct\"\nbase_url = \"http://127.0.0.1:{}/v1\"\n",
            server.port
        ),
    )
    .unwrap();
    let cache = dir.path().join("cache.sqlite");
    let report = run_experiment(&run_settings(&spec, &cache, false), &mut ()).unwrap();
    assert_eq!(report.status, RunStatus::Finished, "{report:?}");
    // Rows, perturbed copies and column-matched rows, each distinct text once.
    assert!(
        (150..=300).contains(&report.likelihood.scored),
        "{:?}",
        report.likelihood
    );
    let store = Store::open_read_only(&cache).unwrap();
    print_cells(&store);
    let cells = store.likelihood_cells().unwrap();
    assert_eq!(cells.len(), 3, "two detectors and dataset inference");
    // Dataset inference combines the detectors that scored every row: perplexity alone.
    let inference = cells
        .iter()
        .find(|c| c.test == "dataset-inference")
        .unwrap();
    assert!(inference.stats.is_some(), "{inference:?}");
    assert_eq!(inference.method, "llama.cpp forced-token");
    let perplexity = cells
        .iter()
        .find(|c| c.test == "likelihood-perplexity")
        .unwrap();
    assert_eq!(perplexity.method, "llama.cpp forced-token");
    assert!(perplexity.stats.is_some());
    let plus = cells
        .iter()
        .find(|c| c.test == "likelihood-min-k-plus-plus")
        .unwrap();
    assert!(plus.stats.is_none());
    assert!(
        plus.skipped
            .as_deref()
            .unwrap()
            .contains("local models only"),
        "{plus:?}"
    );
}
