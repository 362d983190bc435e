//! Issue 8, items 3, 7 and 8, end to end: bad specs are one-line errors (never a panic),
//! reports say which template each score comes from and refuse an unknown one, imported
//! datasets with missing labels classify only labelled rows, and secrets written in a
//! spec reach neither the cache nor any output.

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mock_server.rs"]
mod mock_server;

use std::path::{Path, PathBuf};

use cli_env::{Env, one_line_error, succeeded, text};
use mock_server::MockConfig;
use tabcontam::analyze::{Analytics, Options};
use tabcontam::dataset::Serialization;
use tabcontam::probe::{self, CellResult, Expected, ProbeContext, PromptPack, TestId, Variant};
use tabcontam::store::{CellRow, OWN_SOURCE};

const MINI: &str = "name = \"mini\"\nseed = 0\ndatasets = [\"iris\"]\n\
    tests = [\"feature-list-uninformed\", \"recognition-features\", \"membership\", \"incomplete-completion\"]\n";

fn model_entry(id: &str, url: &str, extra: &str) -> String {
    format!(
        "\n[[models]]\nid = \"{id}\"\nbackend = \"openai-compatible\"\napi = \"completions\"\n\
         base_url = \"{url}\"\nconcurrency = 4\nbackoff_base_ms = 1\nbackoff_max_ms = 20\n\
         timeout_s = 5\n{extra}"
    )
}

// ---------------------------------------------------------------------------------------
// Item 3: no input panics

#[test]
fn empty_serializations_are_one_line_errors_for_plan_and_run() {
    let env = Env::new();
    let cache = env.path("cache.sqlite");
    let cases = [
        (
            "spec-level.toml",
            format!(
                "{MINI}serializations = []\n{}",
                model_entry("m", "http://127.0.0.1:9/v1", "")
            ),
            "serializations: empty",
        ),
        (
            "per-model.toml",
            format!(
                "{MINI}{}",
                model_entry("m", "http://127.0.0.1:9/v1", "serializations = []\n")
            ),
            "models[0] (`m`).serializations: empty",
        ),
    ];
    for (name, body, key) in cases {
        let spec = env.spec(name, &body);
        for command in ["plan", "run"] {
            let out = env.run(&[
                command,
                spec.to_str().unwrap(),
                "--cache",
                cache.to_str().unwrap(),
            ]);
            one_line_error(&out, &[name, key]);
        }
    }
    assert!(!cache.exists(), "a bad spec writes nothing");
}

#[test]
fn other_bad_spec_shapes_are_one_line_errors_naming_the_key() {
    let env = Env::new();
    let cache = env.path("cache.sqlite");
    let url = "http://127.0.0.1:9/v1";
    let with = |extra: &str| format!("{MINI}{}", model_entry("m", url, extra));
    let cases = [
        (with("samples = 0\n"), "`samples = 0`"),
        (
            with("").replace("concurrency = 4", "concurrency = 0"),
            "`concurrency = 0`",
        ),
        (with("temperature = nan\n"), "`temperature = NaN`"),
        (with("top_p = -1.0\n"), "`top_p = -1`"),
        (with("max_batch = 0\n"), "`max_batch = 0`"),
        (with("lanes = 0\n"), "`lanes = 0`"),
        (with("datasets = []\n"), "models[0] (`m`).datasets: empty"),
        (
            with("tests = [\"nope\"]\n"),
            "models[0] (`m`).tests: unknown test `nope`",
        ),
        (
            with("serializations = [\"nope\"]\n"),
            "unknown serialization `nope`",
        ),
        (
            format!(
                "{MINI}{}{}",
                model_entry("m", url, ""),
                model_entry("m", url, "")
            ),
            "models[1] (`m`): duplicate model id",
        ),
        (
            format!("prompt_pack = \"no-such-pack.toml\"\n{}", with("")),
            "prompt_pack: ",
        ),
        (with("").replace("[\"iris\"]", "[]"), "datasets: empty"),
        (with("").replace("tests = [", "tests = 3 #["), "line 4"),
    ];
    for (i, (body, needle)) in cases.iter().enumerate() {
        let name = format!("bad-{i}.toml");
        let spec = env.spec(&name, body);
        let out = env.run(&[
            "plan",
            spec.to_str().unwrap(),
            "--cache",
            cache.to_str().unwrap(),
        ]);
        one_line_error(&out, &[&name, needle]);
    }
}

#[test]
fn a_dataset_named_twice_through_an_alias_is_an_error() {
    let env = Env::new();
    let spec = env.spec(
        "alias.toml",
        &format!(
            "{}{}",
            MINI.replace("[\"iris\"]", "[\"iris\", \"IRIS\"]"),
            model_entry("m", "http://127.0.0.1:9/v1", "")
        ),
    );
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("datasets");
    let out = env.run(&[
        "plan",
        spec.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--cache",
        env.path("c.sqlite").to_str().unwrap(),
    ]);
    one_line_error(
        &out,
        &[
            "alias.toml",
            "datasets",
            "`iris` and `IRIS` are the same dataset",
        ],
    );
}

// ---------------------------------------------------------------------------------------
// Item 7: reports say what they computed

fn cell(
    model: &str,
    dataset: &str,
    test: TestId,
    serialization: Option<&str>,
    passed: bool,
) -> CellRow {
    CellRow {
        source: OWN_SOURCE.to_string(),
        model: model.to_string(),
        dataset: dataset.to_string(),
        test,
        serialization: serialization.map(String::from),
        seed: 0,
        result: CellResult {
            passed,
            score: f64::from(u8::from(passed)),
            trials: 1,
            passed_trials: usize::from(passed),
            invalid_trials: 0,
            trial_chance: None,
        },
        samples: Vec::new(),
        skipped: None,
        echo_trials: None,
        chance: None,
        run_id: None,
    }
}

#[test]
fn scores_use_one_template_plus_the_shared_cells_and_name_it() {
    // Model `both`: test 1 (no rows, shared) passes; test 4 passes under colon only; test 7
    // passes under the-is only. Model `colon-only` ran colon alone.
    let cells = vec![
        cell("both", "iris", TestId::FeatureListInformed, None, true),
        cell(
            "both",
            "iris",
            TestId::RecognitionExamples,
            Some("the-is"),
            false,
        ),
        cell(
            "both",
            "iris",
            TestId::RecognitionExamples,
            Some("colon"),
            true,
        ),
        cell(
            "both",
            "iris",
            TestId::IncompleteCompletion,
            Some("the-is"),
            true,
        ),
        cell(
            "both",
            "iris",
            TestId::IncompleteCompletion,
            Some("colon"),
            false,
        ),
        cell(
            "colon-only",
            "iris",
            TestId::FeatureListInformed,
            None,
            false,
        ),
        cell(
            "colon-only",
            "iris",
            TestId::RecognitionExamples,
            Some("colon"),
            true,
        ),
        cell(
            "colon-only",
            "iris",
            TestId::FullCompletion,
            Some("colon"),
            true,
        ),
    ];
    let analyze = |primary: &str| {
        let mut analytics = Analytics::new().unwrap();
        analytics.load_cells(&cells).unwrap();
        analytics
            .analyze(&Options {
                primary_serialization: primary.to_string(),
                ..Options::default()
            })
            .unwrap()
    };
    let series = |a: &tabcontam::analyze::Analysis, model: &str| {
        a.series
            .iter()
            .find(|s| s.key.model == model)
            .unwrap()
            .clone()
    };
    let grid_templates = |a: &tabcontam::analyze::Analysis, model: &str| {
        let mut t: Vec<Option<String>> = a
            .grid
            .iter()
            .filter(|c| c.key.model == model)
            .map(|c| c.serialization.clone())
            .collect();
        t.sort();
        t.dedup();
        t
    };

    let a = analyze("the-is");
    assert_eq!(a.templates, vec!["colon".to_string(), "the-is".to_string()]);
    let both = series(&a, "both");
    // the-is: test 1 (shared) + test 7; test 4 failed under the-is.
    assert_eq!(
        (both.passed, both.serialization.as_deref()),
        (2, Some("the-is"))
    );
    assert_eq!(
        grid_templates(&a, "both"),
        vec![None, Some("the-is".into())]
    );
    // No cell under the-is: scored with colon, never a mix, and the report says so.
    let colon_only = series(&a, "colon-only");
    assert_eq!(
        (colon_only.passed, colon_only.serialization.as_deref()),
        (2, Some("colon"))
    );
    let files = tabcontam::report::render(
        &a,
        &[
            tabcontam::report::Format::Json,
            tabcontam::report::Format::Html,
            tabcontam::report::Format::Latex,
            tabcontam::report::Format::Csv,
        ],
        &Default::default(),
    )
    .unwrap();
    let file = |name: &str| {
        files
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("{name}"))
            .contents
            .clone()
    };
    assert!(file("report.html").contains("colon-only: template colon (no cell under the-is)"));
    let tex = file("report.tex");
    assert!(
        tex.contains("Scored with another template")
            && tex.contains("template colon (no cell under the-{}is)"),
        "{tex}"
    );
    let scores = file("scores.csv");
    let header: Vec<&str> = scores.lines().next().unwrap().split(',').collect();
    let column = header.iter().position(|h| *h == "serialization").unwrap();
    let templates: Vec<&str> = scores
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(column).unwrap())
        .collect();
    assert_eq!(templates.len(), 2);
    assert!(templates.contains(&"the-is") && templates.contains(&"colon"));
    let json: serde_json::Value = serde_json::from_str(&file("scores.json")).unwrap();
    assert!(json.to_string().contains("\"serialization\":\"colon\""));

    // Scored with colon: test 1 (shared) + test 4 under colon.
    let a = analyze("colon");
    let both = series(&a, "both");
    assert_eq!(
        (both.passed, both.serialization.as_deref()),
        (2, Some("colon"))
    );
    assert_eq!(grid_templates(&a, "both"), vec![None, Some("colon".into())]);
}

#[test]
fn report_refuses_a_template_without_cells_and_lists_the_known_ones() {
    let env = Env::new();
    let server = env.server(MockConfig::new());
    let cache = env.path("cache.sqlite");
    let spec = env.spec(
        "mini.toml",
        &format!(
            "{MINI}serializations = [\"the-is\", \"colon\"]\n{}",
            model_entry("m", &format!("{}/v1", server.url()), "")
        ),
    );
    succeeded(&env.run(&[
        "run",
        spec.to_str().unwrap(),
        "--cache",
        cache.to_str().unwrap(),
    ]));
    let out_dir = env.path("reports");
    let out = env.run(&[
        "report",
        "--cache",
        cache.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
        "--serialization",
        "equals",
    ]);
    one_line_error(
        &out,
        &[
            "--serialization equals",
            "templates with cells: colon, the-is",
        ],
    );
    succeeded(&env.run(&[
        "report",
        "--cache",
        cache.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
        "--serialization",
        "colon",
        "--format",
        "csv",
    ]));
    let scores = std::fs::read_to_string(out_dir.join("scores.csv")).unwrap();
    let header: Vec<&str> = scores.lines().next().unwrap().split(',').collect();
    let column = header
        .iter()
        .position(|&name| name == "serialization")
        .unwrap_or_else(|| panic!("no serialization column: {scores}"));
    let first: Vec<&str> = scores.lines().nth(1).unwrap().split(',').collect();
    assert_eq!(first[column], "colon", "{scores}");
}

#[test]
fn imported_dataset_with_missing_labels_classifies_only_labelled_rows() {
    let env = Env::new();
    // The shipped iris file with the species of every third row removed.
    let iris = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("datasets/iris.csv"),
    )
    .unwrap();
    let mut lines = iris.lines();
    let header = lines.next().unwrap();
    let target = header.split(',').position(|c| c == "species").unwrap();
    let mut body = format!("{header}\n");
    for (i, line) in lines.enumerate() {
        let mut cells: Vec<&str> = line.split(',').collect();
        if i % 3 == 0 {
            cells[target] = "";
        }
        body.push_str(&cells.join(","));
        body.push('\n');
    }
    let file = env.spec("flowers.csv", &body);
    let imported = env.run(&[
        "datasets",
        "import",
        file.to_str().unwrap(),
        "--name",
        "flowers",
        "--target",
        "species",
    ]);
    let said = succeeded(&imported);
    assert!(said.contains("3 classes"), "{said}");

    // The library's view of the same file.
    let bytes = std::fs::read(&file).unwrap();
    let (_, dataset) =
        tabcontam::dataset::import::describe_import(&file, &bytes, "flowers", "species").unwrap();
    let labelled_rows: Vec<String> = dataset
        .table
        .rows
        .iter()
        .filter(|r| !r[target].is_empty())
        .map(|r| {
            r.iter()
                .enumerate()
                .filter(|(c, _)| *c != target)
                .map(|(c, v)| format!("{}: {v}", dataset.table.columns[c].name))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect();
    assert_eq!(labelled_rows.len(), 100);
    let pack = PromptPack::builtin();
    let colon = Serialization::builtin("colon").unwrap();
    let ctx = ProbeContext {
        dataset: &dataset,
        serialization: &colon,
        seed: 0,
        pack: &pack,
        variant: Variant::default(),
    };
    for test in [TestId::Classify0Shot, TestId::Classify1Shot] {
        let built = probe::build(test, &ctx).unwrap_or_else(|e| panic!("{test}: {e}"));
        assert_eq!(
            built.prompts.len(),
            100,
            "{test}: one trial per labelled row"
        );
        for prompt in &built.prompts {
            let Expected::Choice { choices, correct } = &prompt.expected else {
                panic!("{test}: not a choice");
            };
            assert!(*correct < choices.len());
            // The row asked about is one of the labelled rows.
            assert!(
                labelled_rows
                    .iter()
                    .any(|row| prompt.text.contains(row.as_str())),
                "{test}: no labelled row in {}",
                prompt.text
            );
        }
        // 100 labelled rows, 100 trials drawn without replacement: each labelled row is
        // asked exactly once, and no unlabelled one.
        let mut asked: Vec<usize> = built.prompts.iter().map(|p| p.trial as usize).collect();
        asked.dedup();
        assert_eq!(asked.len(), 100);
    }
    // And through the CLI, the prompts of the imported dataset build.
    let out = env.run(&[
        "prompts",
        "--dataset",
        "flowers",
        "--test",
        "classify-1shot",
    ]);
    let shown = succeeded(&out);
    assert!(shown.contains("Answer:"), "{shown}");
    // A run of tests 11–12 on it: every cell decided on the 100 labelled rows.
    let server = env.server(MockConfig::new());
    let spec = env.spec(
        "flowers.toml",
        &format!(
            "name = \"flowers\"\ndatasets = [\"flowers\"]\ntests = [\"classify-0shot\", \"classify-1shot\"]\n{}",
            model_entry("m", &format!("{}/v1", server.url()), "")
        ),
    );
    let cache = env.path("flowers.sqlite");
    succeeded(&env.run(&[
        "run",
        spec.to_str().unwrap(),
        "--cache",
        cache.to_str().unwrap(),
    ]));
    let store = tabcontam::store::Store::open_read_only(&cache).unwrap();
    let cells = store.cells().unwrap();
    assert_eq!(cells.len(), 2);
    for cell in cells {
        assert_eq!(
            (cell.result.trials, cell.skipped),
            (100, None),
            "{:?}",
            cell.test
        );
    }
}

// ---------------------------------------------------------------------------------------
// Item 8: secrets

const USER: &str = "alice-user-41";
const PASSWORD: &str = "pw-s3cret-77";
const QUERY_KEY: &str = "qk-s3cret-88";
const HEADER_VALUE: &str = "hdr-s3cret-99";

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

fn assert_no_secret(what: &str, bytes: &[u8]) {
    for secret in [USER, PASSWORD, QUERY_KEY, HEADER_VALUE] {
        assert!(!contains(bytes, secret), "{what} holds {secret}");
    }
}

#[test]
fn secrets_in_a_spec_reach_neither_the_cache_nor_any_output() {
    let env = Env::new();
    let server = env.server(MockConfig::new());
    let with_user = server
        .url()
        .replacen("http://", &format!("http://{USER}:{PASSWORD}@"), 1);
    let spec_text = format!(
        "{MINI}serializations = [\"the-is\"]\n{}{}",
        model_entry(
            "m",
            &format!("{with_user}/v1"),
            &format!("headers = {{ X-Team-Token = \"{HEADER_VALUE}\" }}  # kept\n")
        ),
        model_entry(
            "other",
            &format!("https://api.example.com/v1?api_key={QUERY_KEY}"),
            ""
        ),
    );
    let spec = env.spec("secret.toml", &spec_text);
    let cache = env.path("cache/tabcontam.sqlite");
    let args = [
        "run",
        spec.to_str().unwrap(),
        "--cache",
        cache.to_str().unwrap(),
        "--model",
        "m",
    ];
    let mut outputs = vec![env.run(&args), env.run(&args)];
    // The second run is answered from the cache and stores the spec again.
    for out in &outputs {
        succeeded(out);
    }
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.header("x-team-token") == Some(HEADER_VALUE))
    );
    outputs.push(env.run(&["status", "--cache", cache.to_str().unwrap(), "--json"]));
    outputs.push(env.run(&["status", "--cache", cache.to_str().unwrap()]));
    let reports = env.path("reports");
    outputs.push(env.run(&[
        "report",
        "--cache",
        cache.to_str().unwrap(),
        "--out",
        reports.to_str().unwrap(),
    ]));
    // An unreachable server: the error names it without its credentials.
    let down = env.spec(
        "down.toml",
        &spec_text
            .replace(&server.url().replace("http://", "@"), "@127.0.0.1:9")
            .replace("id = \"m\"", "id = \"m\"\nrevision = \"not-cached\""),
    );
    let failed = env.run(&[
        "run",
        down.to_str().unwrap(),
        "--cache",
        cache.to_str().unwrap(),
        "--model",
        "m",
    ]);
    assert!(!failed.status.success());
    assert!(
        text(&failed).1.contains("REDACTED@127.0.0.1:9"),
        "{:?}",
        text(&failed)
    );
    outputs.push(failed);
    for (i, out) in outputs.iter().enumerate() {
        assert_no_secret(&format!("stdout of command {i}"), &out.stdout);
        assert_no_secret(&format!("stderr of command {i}"), &out.stderr);
    }
    for entry in std::fs::read_dir(&reports).unwrap() {
        let path = entry.unwrap().path();
        assert_no_secret(&path.display().to_string(), &std::fs::read(&path).unwrap());
    }
    for suffix in ["", "-wal", "-shm"] {
        let path = PathBuf::from(format!("{}{suffix}", cache.display()));
        if let Ok(bytes) = std::fs::read(&path) {
            assert_no_secret(&path.display().to_string(), &bytes);
        }
    }
    // Both runs stored the spec, redacted in place (comments and layout kept).
    let stored = stored_specs(&cache);
    assert_eq!(stored.len(), 2);
    for text in stored {
        assert_no_secret("runs.spec_toml", text.as_bytes());
        assert!(
            text.contains("X-Team-Token = \"REDACTED\" }  # kept"),
            "{text}"
        );
        assert!(
            text.contains("@127.0.0.1") && text.contains("REDACTED@"),
            "{text}"
        );
        assert!(text.contains("?api_key=REDACTED"), "{text}");
    }
}

fn stored_specs(cache: &Path) -> Vec<String> {
    let conn =
        rusqlite::Connection::open_with_flags(cache, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut stmt = conn
        .prepare("SELECT spec_toml FROM runs ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}
