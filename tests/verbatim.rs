//! Verbatim tests 13–16 (SPEC §8) on the shipped datasets: the file text the prompts are
//! cut from is the shipped file byte for byte, pinned prompts (snapshots), the skip rule of
//! the first-token test, and the decisions on outputs of real models (llama.cpp's server
//! and the in-process engine, both on the SmolLM2 GGUF), through `tabcontam run` and
//! `report` with the p-values in scores.json, HTML and LaTeX.

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

use cli_env::Env;
use tabcontam::dataset::catalog::{Catalog, builtin_descriptors};
use tabcontam::dataset::{Dataset, Serialization};
use tabcontam::probe::{self, Expected, ProbeContext, PromptPack, TestId, Variant, verbatim};

const SHIPPED_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/datasets");
const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn load(id: &str) -> Dataset {
    let catalog = Catalog {
        descriptors: builtin_descriptors().unwrap(),
        search_dirs: vec![PathBuf::from(SHIPPED_DIR)],
    };
    catalog.load(id).unwrap()
}

fn build(dataset: &Dataset, test: TestId) -> probe::Probe {
    let pack = PromptPack::builtin();
    let serialization = Serialization::builtin("the-is").unwrap();
    probe::build(
        test,
        &ProbeContext {
            dataset,
            serialization: &serialization,
            seed: 0,
            pack: &pack,
            variant: Variant::Paper,
        },
    )
    .unwrap()
}

/// The comma CSVs shipped with a header line are rebuilt byte for byte from their tables:
/// the verbatim prompts show the file as it is published (titanic's quoted names included).
#[test]
fn file_text_is_the_shipped_file() {
    for (id, file) in [
        ("iris", "iris.csv"),
        ("titanic", "titanic.csv"),
        ("wine", "wine.csv"),
        ("housing", "california_housing.csv"),
    ] {
        let dataset = load(id);
        let bytes = std::fs::read(Path::new(SHIPPED_DIR).join(file)).unwrap();
        let original = String::from_utf8(bytes).unwrap().replace("\r\n", "\n");
        let rebuilt = verbatim::file_text(&dataset.table, dataset.table.n_rows());
        assert_eq!(
            rebuilt.trim_end(),
            original.trim_end(),
            "{file}: the rebuilt text differs"
        );
    }
}

fn render(probe: &probe::Probe, limit: usize) -> String {
    let mut out = String::new();
    if let Some(reason) = &probe.skipped {
        out.push_str(&format!("SKIPPED: {reason}\n"));
    }
    for p in probe.prompts.iter().take(limit) {
        out.push_str(&format!(
            "--- trial {} ({}) max_tokens {}\n{}\n--- expected\n{}\n",
            p.trial,
            p.note.as_deref().unwrap_or("-"),
            p.max_tokens,
            p.text,
            serde_json::to_string(&p.expected).unwrap()
        ));
    }
    out
}

#[test]
fn prompt_snapshots_on_shipped_datasets() {
    let iris = load("iris");
    for test in TestId::VERBATIM {
        insta::assert_snapshot!(
            format!("iris-{}", test.id()),
            render(&build(&iris, test), 2)
        );
    }
    let titanic = load("titanic");
    insta::assert_snapshot!(
        "titanic-feature-completion-verbatim",
        render(&build(&titanic, TestId::FeatureCompletionVerbatim), 1)
    );
    // The chat wrapper: an instruction and examples from two *other* shipped datasets.
    let row = build(&iris, TestId::RowCompletion);
    let chat = row.prompts[0].chat_text.as_deref().unwrap();
    assert!(chat.ends_with(&format!("{}\nCONTINUATION:\n", row.prompts[0].text)));
    assert!(chat.contains("Example 1") && chat.contains("Example 2"));
    assert_eq!(
        chat.matches("Iris-").count(),
        row.prompts[0].text.matches("Iris-").count(),
        "no example comes from iris itself"
    );
    insta::assert_snapshot!("iris-row-completion-chat", chat);
}

/// The first-token test is skipped where the first column is a row id (titanic's
/// PassengerId) or sorted (the shipped wine file starts with its class, grouped), and runs
/// on iris and adult.
#[test]
fn first_token_skips_predictable_columns() {
    let titanic = build(&load("titanic"), TestId::FirstToken);
    let reason = titanic.skipped.expect("titanic's PassengerId is a row id");
    assert!(
        reason.contains("PassengerId") && reason.contains("step"),
        "{reason}"
    );
    assert!(titanic.prompts.is_empty());
    let wine = build(&load("wine"), TestId::FirstToken);
    let reason = wine
        .skipped
        .expect("wine's first column is its sorted class");
    assert!(
        reason.contains("target") && reason.contains("repeat"),
        "{reason}"
    );
    for id in ["iris", "adult"] {
        let probe = build(&load(id), TestId::FirstToken);
        assert!(probe.skipped.is_none(), "{id}: {:?}", probe.skipped);
        assert_eq!(probe.prompts.len(), verbatim::TRIALS as usize);
    }
}

/// Test 15 picks the column with the most distinct values that is not a row id.
#[test]
fn feature_completion_picks_near_unique_columns() {
    let pick = |id: &str| {
        let d = load(id);
        d.table.columns[verbatim::unique_feature(&d.table).unwrap()]
            .name
            .clone()
    };
    assert_eq!(pick("titanic"), "Name", "PassengerId is a row id");
    assert_eq!(pick("adult"), "fnlwgt");
}

/// Every row-completion and first-token trial asks for a row that is not among the rows it
/// shows, and the rows shown are consecutive lines of the file.
#[test]
fn row_prompts_are_consecutive_file_lines_without_echo() {
    let iris = load("iris");
    let file = verbatim::file_text(&iris.table, iris.table.n_rows());
    for test in [TestId::RowCompletion, TestId::FirstToken] {
        for p in build(&iris, test).prompts {
            assert!(file.contains(&p.text), "{test} trial {}", p.trial);
            if let Expected::FirstToken { token, baseline } = &p.expected {
                assert!(*baseline > 0.0 && *baseline < 0.2, "{baseline}");
                assert!(!token.is_empty());
            }
            if let Expected::ExactRow { row } = &p.expected {
                assert!(!p.text.lines().any(|l| l == row));
                assert!(file.contains(&format!("{}{row}\n", p.text)));
            }
        }
    }
}

/// The decisions on hand-checked outputs of each rule.
#[test]
fn decisions_follow_the_stated_rules() {
    // Header: nothing in the prompt predicts "4\n5,6"; one whole new field beyond the copy
    // baseline (two field boundaries) is recall, a single character is not.
    let prompt = "a,b\n1,2\n3,";
    let continuation = "4\n5,6\n";
    let baseline = verbatim::copy_baseline(prompt, continuation);
    assert_eq!(baseline, 0);
    assert_eq!(
        verbatim::header_verdict("4\n5,6\n7", continuation, baseline),
        (6, true)
    );
    assert_eq!(
        verbatim::header_verdict("4\n9", continuation, baseline),
        (2, false)
    );
    assert_eq!(
        verbatim::header_verdict("```csv\n4\n5,", continuation, baseline),
        (4, true)
    );
    assert!(verbatim::row_matches(
        "\n4.9,3,1.4,0.2,Iris-setosa\n5,",
        "4.9,3,1.4,0.2,Iris-setosa"
    ));
    assert!(!verbatim::row_matches(
        "4.9,3,1.4,0.2,Iris-setosa5",
        "4.9,3,1.4,0.2,Iris-setosa"
    ));
    assert!(verbatim::value_matches(
        "\"Braund, Mr. Owen Harris\"\n",
        "Braund, Mr. Owen Harris"
    ));
    assert!(verbatim::first_token_matches("5.1,3.5", "5.1"));
}

// ---------------------------------------------------------------------------------------
// Real models.

struct ServerGuard {
    child: Child,
    log: PathBuf,
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_loopback_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("local address").port()
}

fn wait_until_ready(server: &mut ServerGuard, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!(
                "llama-server exited early ({status}):\n{}",
                std::fs::read_to_string(&server.log).unwrap_or_default()
            );
        }
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            let out = Command::new("curl")
                .args(["-sf", &format!("http://127.0.0.1:{port}/health")])
                .output();
            if out.is_ok_and(|o| o.status.success()) {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "llama-server not ready after 120 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Runs `spec` into a fresh cache, renders JSON, HTML and LaTeX, checks the verbatim cells
/// and their p-values everywhere, and returns scores.json.
fn run_and_report(env: &Env, spec: &str, with_membership: bool) -> serde_json::Value {
    let spec_path = env.spec("spec.toml", spec);
    let cache = env.path("cache.sqlite");
    let summary = env.json(&[
        "run",
        spec_path.to_str().unwrap(),
        "--cache",
        cache.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(summary["status"], "finished", "{summary}");
    let report = env.path("report");
    env.ok(&[
        "report",
        "--cache",
        cache.to_str().unwrap(),
        "--out",
        report.to_str().unwrap(),
        "--format",
        "json,html,latex",
    ]);
    let scores: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("scores.json")).unwrap())
            .unwrap();
    let html = std::fs::read_to_string(report.join("report.html")).unwrap();
    let tex = std::fs::read_to_string(report.join("report.tex")).unwrap();
    let cells = scores["significance"].as_array().unwrap();
    for test in [
        "header",
        "row-completion",
        "feature-completion-verbatim",
        "first-token",
    ] {
        let cell = cells
            .iter()
            .find(|c| c["test"] == test)
            .unwrap_or_else(|| panic!("no significance cell for {test}: {cells:?}"));
        let (p, holm) = (
            cell["p_value"].as_f64().unwrap(),
            cell["p_holm"].as_f64().unwrap(),
        );
        assert!(
            (0.0..=1.0).contains(&p) && holm >= p && holm <= 1.0,
            "{cell}"
        );
        assert_eq!(cell["family"], "verbatim");
        eprintln!(
            "{} {test}: passed={} score={} {}/{} chance={:.4} p={p:.4} p_holm={holm:.4}",
            cell["model"],
            cell["passed"],
            cell["score"],
            cell["passed_trials"],
            cell["trials"],
            cell["chance"].as_f64().unwrap()
        );
        assert!(
            html.contains(&format!("{} {test}", cell["number"])),
            "HTML lacks {test}"
        );
        // The LaTeX escaper writes `-` as `-{}` (no `--` ligatures in model text).
        let tex_name = tabcontam::report::tex::escape(&format!("{} {test}", cell["number"]));
        assert!(tex.contains(&tex_name), "LaTeX lacks {tex_name}");
    }
    if with_membership {
        let membership = cells
            .iter()
            .find(|c| c["test"] == "membership")
            .expect("membership p");
        assert_eq!(membership["chance"], 0.5);
    }
    assert!(html.contains("Holm") && tex.contains("Holm"));
    scores
}

/// `tabcontam run` with the verbatim tests against llama.cpp's server (raw completions,
/// and the chat wrapper through the chat API) on iris.
#[test]
fn verbatim_tests_against_llama_server() {
    let assets = skip::assets_dir();
    let binary = assets.join("bin/llama-server");
    let model = assets.join("models").join(MODEL_FILE);
    let Some(_) = skip::require(
        (),
        |_| binary.is_file() && model.is_file(),
        format!(
            "{} or {} is missing; run scripts/ci-install-test-server.sh",
            binary.display(),
            model.display()
        ),
    ) else {
        return;
    };
    let env = Env::new();
    let port = free_loopback_port();
    let log = env.path("llama-server.log");
    let log_file = std::fs::File::create(&log).unwrap();
    let child = Command::new(&binary)
        .args(["-m".as_ref(), model.as_os_str()])
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        // Two slots of 2,048 tokens (the chat wrapper plus its answer fit).
        .args([
            "-c",
            "4096",
            "-np",
            "2",
            "-t",
            "2",
            "--no-webui",
            "--no-warmup",
        ])
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .spawn()
        .expect("start llama-server");
    let mut server = ServerGuard { child, log };
    wait_until_ready(&mut server, port);
    let scores = run_and_report(
        &env,
        &format!(
            "name = \"verbatim-llama\"\nseed = 0\ndatasets = [\"iris\"]\ntests = [\"verbatim\", \"membership\"]\n\
             [[models]]\nid = \"smollm2-base\"\nbackend = \"openai-compatible\"\napi = \"completions\"\n\
             model = \"SmolLM2-135M-Instruct\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nconcurrency = 2\ntimeout_s = 300\n\
             [[models]]\nid = \"smollm2-chat\"\nbackend = \"openai-compatible\"\napi = \"chat\"\n\
             model = \"SmolLM2-135M-Instruct\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nconcurrency = 2\ntimeout_s = 300\n\
             tests = [\"row-completion\"]\n"
        ),
        true,
    );
    let cells = scores["significance"].as_array().unwrap();
    assert!(
        cells
            .iter()
            .any(|c| c["model"] == "smollm2-chat" && c["test"] == "row-completion")
    );
}

/// The same verbatim tests in-process (`backend = "local"`) on the same GGUF file (no
/// membership: 100 more prompts on two shared cores).
#[test]
fn verbatim_tests_in_process() {
    let model = skip::assets_dir().join("models").join(MODEL_FILE);
    let Some(model) = skip::require(
        model,
        |m| m.is_file(),
        "the SmolLM2 GGUF is missing; run scripts/ci-install-test-server.sh",
    ) else {
        return;
    };
    let env = Env::new();
    run_and_report(
        &env,
        &format!(
            "name = \"verbatim-local\"\nseed = 0\ndatasets = [\"iris\"]\ntests = [\"verbatim\"]\n\
             [[models]]\nid = \"smollm2-local\"\nbackend = \"local\"\nmodel = \"{}\"\n",
            model.display()
        ),
        false,
    );
}
