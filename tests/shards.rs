//! Many machines, one cache: `run --shard I/N` on separate loopback servers, `cache merge`,
//! `cache export --format parquet`, and the progress lines a run writes into a log file.

#[path = "support/mock_server.rs"]
mod mock_server;

#[path = "support/cli_env.rs"]
mod cli_env;

#[path = "support/skip.rs"]
mod skip;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use cli_env::{Env, succeeded, text};
use mock_server::{MockConfig, MockServer};
use tabcontam::llm::{ApiMode, BackendKind, GenerationParams, ModelIdentity, Request, Response};
use tabcontam::store::Store;

/// Requests of the spec below: iris and titanic × (1 + 1 + 100 + 5).
const REQUESTS: usize = 214;

fn spec_body(url: &str) -> String {
    format!(
        "name = \"sharded\"\nseed = 0\ndatasets = [\"iris\", \"titanic\"]\n\
         tests = [\"feature-list-uninformed\", \"recognition-features\", \"membership\", \"incomplete-completion\"]\n\
         serializations = [\"the-is\"]\n\
         \n[[models]]\nid = \"mock\"\nbackend = \"openai-compatible\"\napi = \"completions\"\n\
         base_url = \"{url}/v1\"\nconcurrency = 4\nbackoff_base_ms = 1\nbackoff_max_ms = 20\n\
         timeout_s = 5\nprice_input_per_mtok = 2.5\nprice_output_per_mtok = 10.0\n"
    )
}

fn completions(server: &MockServer) -> u64 {
    server.requests_to("/v1/completions")
}

/// key → response text, for every cached response.
fn answers(cache: &Path) -> BTreeMap<String, String> {
    let store = Store::open_read_only(cache).unwrap();
    let mut answers = BTreeMap::new();
    store
        .for_each_response(|key, response, _| {
            answers.insert(key.to_hex(), response.text);
        })
        .unwrap();
    answers
}

/// Every cell and trial of the cache without the run that decided it (run ids differ
/// between caches by construction).
fn decisions(cache: &Path) -> (Vec<String>, Vec<String>) {
    let store = Store::open_read_only(cache).unwrap();
    let cells = store
        .cells()
        .unwrap()
        .into_iter()
        .map(|mut c| {
            c.run_id = None;
            format!("{c:?}")
        })
        .collect();
    let trials = store
        .trials()
        .unwrap()
        .into_iter()
        .map(|mut t| {
            t.run_id = None;
            format!("{t:?}")
        })
        .collect();
    (cells, trials)
}

fn files_of(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

#[test]
fn two_shards_on_two_servers_merged_equal_a_single_run_and_its_report() {
    let env = Env::new();
    let single_server = env.server(MockConfig::new());
    let first = env.server(MockConfig::new());
    let second = env.server(MockConfig::new());
    let single_spec = env.spec("single.toml", &spec_body(&single_server.url()));
    let first_spec = env.spec("first.toml", &spec_body(&first.url()));
    let second_spec = env.spec("second.toml", &spec_body(&second.url()));
    let [single, part1, part2, merged] =
        ["single", "part1", "part2", "merged"].map(|n| env.path(&format!("{n}.sqlite")));
    let s = |p: &PathBuf| p.to_str().unwrap().to_owned();

    let report = env.json(&["run", &s(&single_spec), "--cache", &s(&single), "--json"]);
    assert_eq!(report["status"], "finished", "{report}");
    assert_eq!(completions(&single_server), REQUESTS as u64);

    // Each machine sends its share only; together they send the plan exactly once.
    let shard1 = env.json(&[
        "run",
        &s(&first_spec),
        "--shard",
        "1/2",
        "--cache",
        &s(&part1),
        "--json",
    ]);
    let shard2 = env.json(&[
        "run",
        &s(&second_spec),
        "--shard",
        "2/2",
        "--cache",
        &s(&part2),
        "--json",
    ]);
    let (sent1, sent2) = (completions(&first), completions(&second));
    eprintln!("shard 1/2 sent {sent1}, shard 2/2 sent {sent2} of {REQUESTS}");
    assert_eq!(sent1 + sent2, REQUESTS as u64);
    assert!(sent1 > 60 && sent2 > 60, "{sent1} / {sent2}");
    for (shard, sent) in [(&shard1, sent1), (&shard2, sent2)] {
        // A shard that sent its whole share finished, with the rest left to the other.
        assert_eq!(shard["status"], "finished", "{shard}");
        assert_eq!(shard["missing"], 0, "{shard}");
        assert_eq!(shard["other_shards"], REQUESTS as u64 - sent, "{shard}");
    }
    let (answers1, answers2) = (answers(&part1), answers(&part2));
    assert!(answers1.keys().all(|k| !answers2.contains_key(k)));

    let merge = env.json(&[
        "cache",
        "merge",
        &s(&merged),
        &s(&part1),
        &s(&part2),
        "--json",
    ]);
    assert_eq!(merge["inputs"][0]["responses_added"], sent1, "{merge}");
    assert_eq!(merge["inputs"][1]["responses_added"], sent2, "{merge}");
    assert_eq!(merge["inputs"][1]["conflicts"], 0, "{merge}");
    // Merging again adds nothing (the same runs are recognised, not appended twice).
    let again = env.json(&["cache", "merge", &s(&merged), &s(&part1), "--json"]);
    assert_eq!(again["inputs"][0]["responses_added"], 0, "{again}");
    assert_eq!(again["inputs"][0]["runs_added"], 0, "{again}");
    assert_eq!(again["inputs"][0]["responses_already_present"], sent1);

    // Cells split over the shards are decided on the merged cache, sending nothing.
    let decided = env.json(&[
        "run",
        &s(&single_spec),
        "--offline",
        "--cache",
        &s(&merged),
        "--json",
    ]);
    assert_eq!(decided["status"], "finished", "{decided}");
    assert_eq!(decided["counts"]["sent"], 0);
    assert_eq!(decided["counts"]["cached"], REQUESTS as u64);
    assert_eq!(completions(&single_server), REQUESTS as u64);

    assert_eq!(answers(&merged), answers(&single));
    let (merged_cells, merged_trials) = decisions(&merged);
    let (single_cells, single_trials) = decisions(&single);
    assert_eq!(merged_cells.len(), 8, "{merged_cells:#?}");
    assert_eq!(merged_cells, single_cells);
    assert_eq!(merged_trials, single_trials);

    let (report_single, report_merged) = (env.path("report-single"), env.path("report-merged"));
    for (cache, out) in [(&single, &report_single), (&merged, &report_merged)] {
        env.ok(&["report", "--cache", &s(cache), "--out", &s(out)]);
    }
    let (a, b) = (files_of(&report_single), files_of(&report_merged));
    assert!(a.len() >= 6, "{:?}", a.keys());
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (name, bytes) in &a {
        assert!(
            bytes == &b[name],
            "{name} differs between the single and the merged cache"
        );
    }
}

#[test]
fn a_run_logging_to_a_file_writes_periodic_progress_lines() {
    let env = Env::new();
    // 214 requests, 4 at a time, 40 ms each: about 2.2 s.
    let server = env.server(MockConfig::new().latency(Duration::from_millis(40)));
    let spec = env.spec("slow.toml", &spec_body(&server.url()));
    let log_path = env.path("run.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let status = env
        .command(&[
            "run",
            spec.to_str().unwrap(),
            "--cache",
            env.path("cache.sqlite").to_str().unwrap(),
        ])
        .env("TABCONTAM_PROGRESS_INTERVAL", "0.3")
        .stdout(Stdio::null())
        .stderr(log)
        .status()
        .unwrap();
    assert!(status.success());
    let log = std::fs::read_to_string(&log_path).unwrap();
    let lines: Vec<&str> = log.lines().filter(|l| l.starts_with("progress ")).collect();
    assert!(lines.len() >= 4, "{log}");
    let done: Vec<u64> = lines
        .iter()
        .map(|line| {
            let counts = line.split("mock: ").nth(1).unwrap();
            counts.split('/').next().unwrap().parse().unwrap()
        })
        .collect();
    assert!(done.windows(2).all(|w| w[0] <= w[1]), "{log}");
    assert!(done[0] < REQUESTS as u64, "{log}");
    assert_eq!(*done.last().unwrap(), REQUESTS as u64, "{log}");
    // A tick may land between the last answer and the final line: every line below the
    // total carries a rate and an ETA, every line at it says done.
    for (line, &count) in lines.iter().zip(&done) {
        assert!(line.contains(&format!("/{REQUESTS} (")), "{line}");
        if count == REQUESTS as u64 {
            assert!(line.contains(", done, tokens "), "{line}");
            continue;
        }
        assert!(line.contains("/s, ETA "), "{line}");
        assert!(
            line.contains("tokens ") && line.contains(", cost $"),
            "{line}"
        );
    }
    assert!(lines.last().unwrap().contains(", done, tokens "), "{log}");
    // No terminal redraws in a log.
    assert!(!log.contains('\r'), "{log:?}");

    // A bad interval is a one-line error naming the flag.
    let output = env.run(&["run", spec.to_str().unwrap(), "--progress-interval", "0"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output).1;
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--progress-interval 0"), "{stderr}");
}

fn request(prompt: &str) -> Request {
    Request {
        model: ModelIdentity {
            backend: BackendKind::OpenaiCompatible,
            model: "m".into(),
            revision: "r".into(),
        },
        api: ApiMode::Completions,
        prompt: prompt.into(),
        params: GenerationParams {
            max_tokens: 8,
            temperature: 0.7,
            top_p: None,
            seed: None,
            stop: Vec::new(),
            stop_rule: None,
        },
        sample: 0,
    }
}

fn response(text: &str) -> Response {
    Response {
        text: text.into(),
        finish_reason: Some("stop".into()),
        prompt_tokens: Some(3),
        completion_tokens: Some(2),
        latency_ms: 5,
        served_model: None,
        served_fingerprint: None,
    }
}

fn cache_with(path: &Path, answers: &[(&str, &str)]) {
    let mut store = Store::open(path).unwrap();
    for (prompt, text) in answers {
        store
            .put_response(&request(prompt), &response(text))
            .unwrap();
    }
}

#[test]
fn a_conflict_keeps_the_first_answer_and_is_counted() {
    let env = Env::new();
    let (a, b) = (env.path("a.sqlite"), env.path("b.sqlite"));
    // A sampling server answered "same" alike twice, and "differs" differently.
    cache_with(&a, &[("same", "x"), ("differs", "from a"), ("only a", "1")]);
    cache_with(&b, &[("same", "x"), ("differs", "from b"), ("only b", "2")]);
    let differs = request("differs").key().to_hex();
    for (order, kept) in [([&a, &b], "from a"), ([&b, &a], "from b")] {
        let out = env.path(&format!("out-{kept}.sqlite"));
        let stdout = env.ok(&[
            "cache",
            "merge",
            out.to_str().unwrap(),
            order[0].to_str().unwrap(),
            order[1].to_str().unwrap(),
        ]);
        assert!(stdout.contains("1 conflicting answers"), "{stdout}");
        assert!(
            stdout.contains(&format!("conflict: request {differs}")),
            "{stdout}"
        );
        let merged = answers(&out);
        assert_eq!(merged.len(), 4);
        // The earlier input on the command line wins, whatever the run order was.
        assert_eq!(merged[&differs], kept);
    }
}

#[test]
fn a_bad_input_is_a_one_line_error_and_the_target_is_unchanged() {
    let env = Env::new();
    let out = env.path("out.sqlite");
    let good = env.path("good.sqlite");
    cache_with(&out, &[("kept", "1")]);
    cache_with(&good, &[("new", "2")]);
    let text_file = env.path("notes.txt");
    std::fs::write(&text_file, "not a database at all, just some notes\n").unwrap();
    let foreign = env.path("foreign.sqlite");
    {
        let conn = rusqlite::Connection::open(&foreign).unwrap();
        conn.execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);")
            .unwrap();
    }
    // A cache cut in half (a copy that stopped early).
    let big = env.path("big.sqlite");
    cache_with(
        &big,
        &(0..400)
            .map(|i| {
                (
                    Box::leak(format!("prompt {i} {}", "x".repeat(400)).into_boxed_str()) as &str,
                    "y",
                )
            })
            .collect::<Vec<_>>(),
    );
    let bytes = std::fs::read(&big).unwrap();
    let truncated = env.path("truncated.sqlite");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let before = std::fs::read(&out).unwrap();
    for (bad, says) in [
        (env.path("absent.sqlite"), "no such cache file"),
        (text_file, "not an SQLite database"),
        (foreign, "another program"),
        (truncated, "truncated.sqlite"),
        (out.clone(), "the merge target itself"),
    ] {
        let output = env.run(&[
            "cache",
            "merge",
            out.to_str().unwrap(),
            good.to_str().unwrap(),
            bad.to_str().unwrap(),
        ]);
        let stderr = text(&output).1;
        assert_eq!(output.status.code(), Some(1), "{bad:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("error: "), "{stderr}");
        assert!(stderr.contains(says), "{bad:?}: {stderr}");
        // The good input was not merged either: one transaction.
        assert_eq!(answers(&out).len(), 1, "{bad:?}");
    }
    assert_eq!(std::fs::read(&out).unwrap(), before);
    // Inputs are checked before a new target is created.
    let fresh = env.path("fresh.sqlite");
    let output = env.run(&["cache", "merge", fresh.to_str().unwrap(), "absent.sqlite"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(!fresh.exists());
}

#[test]
fn export_writes_parquet_that_duckdb_reads_back_with_the_row_counts() {
    let env = Env::new();
    let server = env.server(MockConfig::new());
    let spec = env.spec("export.toml", &spec_body(&server.url()));
    let cache = env.path("cache.sqlite");
    let cache_arg = cache.to_str().unwrap();
    env.ok(&["run", spec.to_str().unwrap(), "--cache", cache_arg]);
    let dir = env.path("parquet");
    let exported = env.json(&[
        "cache",
        "export",
        "--format",
        "parquet",
        dir.to_str().unwrap(),
        "--cache",
        cache_arg,
        "--json",
    ]);
    let store = Store::open_read_only(&cache).unwrap();
    let expected: BTreeMap<&str, u64> = [
        ("requests", store.for_each_request(|_, _| {}).unwrap()),
        ("responses", answers(&cache).len() as u64),
        ("trials", store.trials().unwrap().len() as u64),
        ("cells", store.cells().unwrap().len() as u64),
    ]
    .into();
    assert_eq!(expected["requests"], REQUESTS as u64);
    assert_eq!(expected["responses"], REQUESTS as u64);
    assert_eq!(expected["cells"], 8);
    eprintln!("exported row counts: {expected:?}");
    for file in exported.as_array().unwrap() {
        let table = file["table"].as_str().unwrap();
        assert_eq!(file["rows"], expected[table], "{exported}");
    }

    // Read back in Rust, with DuckDB's own Parquet reader.
    let conn = duckdb::Connection::open_in_memory().unwrap();
    for (table, rows) in &expected {
        let path = dir.join(format!("{table}.parquet"));
        let count: i64 = conn
            .query_row(
                &format!("SELECT count(*) FROM read_parquet('{}')", path.display()),
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(count as u64, *rows, "{table}");
    }
    let passed: i64 = conn
        .query_row(
            &format!(
                "SELECT count(*) FROM read_parquet('{}') WHERE passed",
                dir.join("trials.parquet").display()
            ),
            [],
            |r| r.get(0),
        )
        .unwrap();
    let stored_passed = store
        .trials()
        .unwrap()
        .iter()
        .filter(|t| t.verdict.passed)
        .count();
    assert_eq!(passed as usize, stored_passed);

    // And as a pandas/polars user does: Python's duckdb package.
    let python = skip::assets_dir().join("py-duckdb/bin/python");
    let Some(python) = skip::require(
        python,
        |p| p.is_file(),
        "the Python duckdb package is missing; run scripts/ci-install-parquet-reader.sh",
    ) else {
        return;
    };
    let script = "import duckdb, json, sys\n\
                  d = sys.argv[1]\n\
                  print(json.dumps({t: duckdb.sql(f\"SELECT count(*) FROM '{d}/{t}.parquet'\").fetchone()[0] \
                  for t in ['requests', 'responses', 'trials', 'cells']}))";
    let output = std::process::Command::new(python)
        .args(["-c", script, dir.to_str().unwrap()])
        .output()
        .unwrap();
    succeeded(&output);
    let counts: BTreeMap<String, u64> = serde_json::from_slice(&output.stdout).unwrap();
    let expected: BTreeMap<String, u64> = expected
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    assert_eq!(counts, expected);
}
