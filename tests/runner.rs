//! The tracker end to end: `tabcontam plan|run|status` against a loopback mock server, on
//! real SQLite cache files and the shipped datasets.

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mock_server.rs"]
mod mock_server;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use cli_env::{Env, json, one_line_error, succeeded, text};
use mock_server::MockConfig;
use tabcontam::store::Store;

const SECRET: &str = "sk-test-7f3a9c1e5b2d4f6a8e0c";
const KEY_ENV: &str = "TABCONTAM_TEST_API_KEY";

fn spec_body(
    url: &str,
    models: &[&str],
    serializations: &[&str],
    extra_model_keys: &str,
) -> String {
    let mut body = format!(
        "name = \"mini\"\nseed = 0\ndatasets = [\"iris\", \"titanic\"]\n\
         tests = [\"feature-list-uninformed\", \"recognition-features\", \"membership\", \"incomplete-completion\"]\n\
         serializations = [{}]\n",
        serializations
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for model in models {
        body.push_str(&format!(
            "\n[[models]]\nid = \"{model}\"\nbackend = \"openai-compatible\"\napi = \"completions\"\n\
             base_url = \"{url}/v1\"\napi_key_env = \"{KEY_ENV}\"\nconcurrency = 8\n\
             backoff_base_ms = 1\nbackoff_max_ms = 20\ntimeout_s = 5\n{extra_model_keys}"
        ));
    }
    body
}

/// (model, dataset, test, serialization, trial) → passed, from the cache file.
fn verdicts(cache: &Path) -> Vec<(String, String, String, Option<String>, u32, bool)> {
    let store = Store::open_read_only(cache).unwrap();
    let mut rows: Vec<_> = store
        .trials()
        .unwrap()
        .into_iter()
        .map(|t| {
            (
                t.model,
                t.dataset,
                t.test.id().to_string(),
                t.serialization,
                t.trial,
                t.verdict.passed,
            )
        })
        .collect();
    rows.sort();
    rows
}

const TOTAL: u64 = 424; // 2 datasets × (1 + 1 + 2 × 100 + 2 × 5)

#[test]
fn run_caches_everything_and_a_rerun_sends_nothing() {
    let env = Env::new().var(KEY_ENV, SECRET);
    let server = env.server(MockConfig::new());
    let spec = env.spec(
        "mini.toml",
        &spec_body(&server.url(), &["mock-base"], &["the-is", "colon"], ""),
    );
    let cache = env.cache();
    let cache_arg = cache.to_str().unwrap();

    let plan = json(&env.run(&[
        "plan",
        spec.to_str().unwrap(),
        "--cache",
        cache_arg,
        "--json",
    ]));
    assert_eq!(plan["to_send"], TOTAL);
    assert!(!cache.exists(), "plan must not create the cache");

    let first = env.run(&[
        "run",
        spec.to_str().unwrap(),
        "--cache",
        cache_arg,
        "--json",
    ]);
    succeeded(&first);
    let summary = json(&first);
    assert_eq!(summary["counts"]["sent"], TOTAL);
    assert_eq!(summary["status"], "finished");
    assert_eq!(summary["cells_decided"], 12);
    assert_eq!(server.request_count(), TOTAL);

    let second = env.run(&[
        "run",
        spec.to_str().unwrap(),
        "--cache",
        cache_arg,
        "--json",
    ]);
    succeeded(&second);
    assert_eq!(json(&second)["counts"]["cached"], TOTAL);
    assert_eq!(
        server.request_count(),
        TOTAL,
        "a rerun of a finished spec sends 0 requests"
    );

    let plan = json(&env.run(&[
        "plan",
        spec.to_str().unwrap(),
        "--cache",
        cache_arg,
        "--json",
    ]));
    assert_eq!(plan["to_send"], 0);
    let status = json(&env.run(&["status", "--cache", cache_arg, "--json"]));
    assert_eq!(status["responses"], TOTAL);
    assert_eq!(status["runs"], 2);
    assert_eq!(verdicts(&cache).len(), TOTAL as usize);
}

#[test]
fn offline_run_reports_missing_and_sends_nothing() {
    let env = Env::new().var(KEY_ENV, SECRET);
    let server = env.server(MockConfig::new());
    let spec = env.spec(
        "mini.toml",
        &spec_body(&server.url(), &["mock-base"], &["the-is"], ""),
    );
    let out = env.run(&[
        "run",
        spec.to_str().unwrap(),
        "--cache",
        env.cache().to_str().unwrap(),
        "--offline",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(2), "{:?}", text(&out));
    assert_eq!(json(&out)["missing"], 214);
    assert_eq!(server.request_count(), 0);
}

#[test]
fn adding_a_model_or_a_serialization_sends_only_what_changed() {
    let env = Env::new().var(KEY_ENV, SECRET);
    let server = env.server(MockConfig::new());
    let cache = env.cache();
    let cache_arg = cache.to_str().unwrap();
    let one = env.spec(
        "one.toml",
        &spec_body(&server.url(), &["model-a"], &["the-is"], ""),
    );
    assert!(
        env.run(&["run", one.to_str().unwrap(), "--cache", cache_arg])
            .status
            .success()
    );
    assert_eq!(server.request_count(), 214);

    // A second serialization: tests 2 and 3 have no rows, their prompts are shared.
    let two = env.spec(
        "two.toml",
        &spec_body(&server.url(), &["model-a"], &["the-is", "colon"], ""),
    );
    let out = env.run(&["run", two.to_str().unwrap(), "--cache", cache_arg, "--json"]);
    succeeded(&out);
    assert_eq!(
        server.request_count(),
        214 + 210,
        "only row prompts change with the template"
    );

    // A new checkpoint: only its own requests.
    let three = env.spec(
        "three.toml",
        &spec_body(
            &server.url(),
            &["model-a", "model-b"],
            &["the-is", "colon"],
            "",
        ),
    );
    let before = server.request_count();
    let out = env.run(&[
        "run",
        three.to_str().unwrap(),
        "--cache",
        cache_arg,
        "--json",
    ]);
    succeeded(&out);
    assert_eq!(server.request_count() - before, TOTAL);
    assert_eq!(json(&out)["counts"]["cached"], TOTAL);
}

/// A local model run through its chat template answers a different input than on the
/// raw prompt: its requests are its own, never the raw model's cached answers (they once
/// shared keys, so a chat-template series silently reported the raw model's verdicts).
#[test]
fn a_local_model_through_its_chat_template_shares_no_answers_with_the_raw_one() {
    let env = Env::new();
    let cache = env.cache();
    let body = "name = \"chat\"\nseed = 0\ndatasets = [\"iris\"]\n\
                tests = [\"feature-list-uninformed\", \"membership\"]\nserializations = [\"the-is\"]\n\
                \n[[models]]\nid = \"raw\"\nbackend = \"local\"\n\
                \n[[models]]\nid = \"chat\"\nbackend = \"local\"\nchat_template = true\n";
    let spec = env.spec("chat.toml", body);
    let out = env.run(&[
        "plan",
        spec.to_str().unwrap(),
        "--cache",
        cache.to_str().unwrap(),
        "--json",
    ]);
    succeeded(&out);
    let plan = json(&out);
    let per_model: Vec<u64> = plan["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["requests"].as_u64().unwrap())
        .collect();
    // Test 1 once, membership's 100 trials: the same count for both, none shared.
    assert_eq!(per_model, vec![101, 101], "{plan}");
    assert_eq!(plan["requests"], 202, "{plan}");
}

#[test]
fn faults_are_retried_and_never_cached() {
    let env = Env::new().var(KEY_ENV, SECRET);
    let server = env.server(MockConfig::new().faults(0.2, 7));
    let spec = env.spec(
        "mini.toml",
        &spec_body(
            &server.url(),
            &["mock-base"],
            &["the-is", "colon"],
            "max_retries = 12\n",
        ),
    );
    let cache = env.cache();
    let out = env.run(&[
        "run",
        spec.to_str().unwrap(),
        "--cache",
        cache.to_str().unwrap(),
        "--json",
    ]);
    succeeded(&out);
    assert!(
        server.fault_count() > 40,
        "faults injected: {}",
        server.fault_count()
    );
    let store = Store::open_read_only(&cache).unwrap();
    let status = store.status().unwrap();
    assert_eq!(status.responses, TOTAL);
    assert_eq!(status.failures, 0);
    // Every cached text is exactly what the server answers: no truncated body slipped in.
    let keys: Vec<_> = store
        .trials()
        .unwrap()
        .iter()
        .map(|t| t.request_key)
        .collect();
    for (key, response) in store.responses(&keys).unwrap() {
        let request = store.request(&key).unwrap().unwrap();
        let (expected, _) =
            mock_server::answer(&request.prompt, u64::from(request.params.max_tokens), &[]);
        assert_eq!(response.text, expected);
    }
}

#[test]
fn killed_run_resumes_without_resending_and_ends_with_the_same_verdicts() {
    let env = Env::new().var(KEY_ENV, SECRET);
    let server = env.server(MockConfig::new().latency(Duration::from_millis(25)));
    let spec = env.spec(
        "mini.toml",
        &spec_body(&server.url(), &["mock-base"], &["the-is", "colon"], ""),
    );
    let cache = env.cache();
    let cache_arg = cache.to_str().unwrap();
    let mut child = env
        .command(&[
            "run",
            spec.to_str().unwrap(),
            "--cache",
            cache_arg,
            "--quiet",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until some responses are stored, then SIGKILL (no chance to clean up).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        std::thread::sleep(Duration::from_millis(100));
        if server.request_count() >= 80 || std::time::Instant::now() > deadline {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let sent_before = server.request_count();
    let stored_count = Store::open_read_only(&cache)
        .unwrap()
        .status()
        .unwrap()
        .responses;
    assert!(
        stored_count > 0 && stored_count < TOTAL,
        "stored {stored_count}"
    );
    let prompts_before: HashSet<String> = server
        .requests()
        .iter()
        .filter_map(|r| r.prompt().map(str::to_string))
        .collect();

    let out = env.run(&[
        "run",
        spec.to_str().unwrap(),
        "--cache",
        cache_arg,
        "--json",
    ]);
    succeeded(&out);
    let resent = server.request_count() - sent_before;
    // Requests in flight at the kill were never stored: they (and only they) go again.
    assert_eq!(resent, TOTAL - stored_count);
    let resent_prompts: HashSet<String> = server.requests()[sent_before as usize..]
        .iter()
        .filter_map(|r| r.prompt().map(str::to_string))
        .collect();
    let repeated = resent_prompts.intersection(&prompts_before).count() as u64;
    assert!(
        repeated <= sent_before - stored_count,
        "only unstored prompts may repeat: {repeated}"
    );
    let store = Store::open_read_only(&cache).unwrap();
    let stored_keys: Vec<_> = store
        .trials()
        .unwrap()
        .iter()
        .map(|t| t.request_key)
        .collect();
    assert_eq!(store.responses(&stored_keys).unwrap().len() as u64, TOTAL);

    // The same verdicts as an uninterrupted run on a fresh cache.
    let fresh = env.path("fresh.sqlite");
    let out = env.run(&[
        "run",
        spec.to_str().unwrap(),
        "--cache",
        fresh.to_str().unwrap(),
    ]);
    succeeded(&out);
    assert_eq!(verdicts(&cache), verdicts(&fresh));
}

#[test]
fn two_processes_on_one_cache_both_finish() {
    let env = Env::new().var(KEY_ENV, SECRET);
    let server = env.server(MockConfig::new().latency(Duration::from_millis(2)));
    let a = env.spec(
        "a.toml",
        &spec_body(&server.url(), &["model-a"], &["the-is", "colon"], ""),
    );
    let b = env.spec(
        "b.toml",
        &spec_body(&server.url(), &["model-b"], &["the-is", "colon"], ""),
    );
    let cache = env.cache();
    let cache_arg = cache.to_str().unwrap();
    let mut first = env
        .command(&["run", a.to_str().unwrap(), "--cache", cache_arg, "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut second = env
        .command(&["run", b.to_str().unwrap(), "--cache", cache_arg, "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let s1 = first.wait().unwrap();
    let s2 = second.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(first.stderr.as_mut().unwrap(), &mut err).unwrap();
    std::io::Read::read_to_string(second.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(s1.success() && s2.success(), "{err}");
    assert!(!err.to_lowercase().contains("locked"), "{err}");
    assert_eq!(
        Store::open_read_only(&cache)
            .unwrap()
            .status()
            .unwrap()
            .responses,
        2 * TOTAL
    );
}

#[test]
fn the_api_key_never_reaches_cache_logs_or_output() {
    let env = Env::new().var(KEY_ENV, SECRET);
    let server = env.server(MockConfig::new().required_api_key(SECRET));
    let spec = env.spec(
        "mini.toml",
        &spec_body(&server.url(), &["mock-base"], &["the-is"], ""),
    );
    let cache = env.cache();
    let out = env.run(&[
        "run",
        spec.to_str().unwrap(),
        "--cache",
        cache.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let status = env.run(&["status", "--cache", cache.to_str().unwrap(), "--json"]);
    // A wrong key: the server echoes it in its 401 body, our error must not.
    let wrong = env
        .command(&[
            "run",
            spec.to_str().unwrap(),
            "--cache",
            cache.to_str().unwrap(),
        ])
        .env(KEY_ENV, "sk-wrong-key-0123456789abcdef")
        .args(["--model", "mock-base"])
        .output()
        .unwrap();
    let spec2 = env.spec(
        "other.toml",
        &spec_body(&server.url(), &["model-z"], &["the-is"], ""),
    );
    let wrong2 = env
        .command(&[
            "run",
            spec2.to_str().unwrap(),
            "--cache",
            cache.to_str().unwrap(),
        ])
        .env(KEY_ENV, "sk-wrong-key-0123456789abcdef")
        .output()
        .unwrap();
    assert!(!wrong2.status.success());
    let (w_out, w_err) = text(&wrong2);
    assert!(
        !w_out.contains("sk-wrong-key-0123456789abcdef")
            && !w_err.contains("sk-wrong-key-0123456789abcdef"),
        "{w_out}{w_err}"
    );
    assert!(
        (w_out.clone() + &w_err).contains(KEY_ENV),
        "the 401 names the variable: {w_out}{w_err}"
    );
    for text in [
        stdout,
        stderr,
        text(&status).0,
        text(&wrong).0,
        text(&wrong).1,
    ] {
        assert!(!text.contains(SECRET));
    }
    for suffix in ["", "-wal", "-shm"] {
        let path = PathBuf::from(format!("{}{suffix}", cache.display()));
        if let Ok(bytes) = std::fs::read(&path) {
            assert!(
                !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
                "{} holds the key",
                path.display()
            );
            assert!(
                !bytes.windows(12).any(|w| w == b"sk-wrong-key"),
                "{} holds the wrong key",
                path.display()
            );
        }
    }
    // Keys were sent only as a header.
    assert!(server.requests().iter().all(|r| r.header("authorization")
        == Some(&format!("Bearer {SECRET}"))
        || r.header("authorization").is_some()));
}

#[test]
fn bad_specs_fail_before_anything_is_written() {
    let env = Env::new().var(KEY_ENV, SECRET);
    let server = env.server(MockConfig::new());
    let good = spec_body(&server.url(), &["mock-base"], &["the-is"], "");
    let cache = env.cache();
    // A valid cache with content, to prove it stays untouched.
    assert!(
        env.run(&[
            "run",
            env.spec("good.toml", &good).to_str().unwrap(),
            "--cache",
            cache.to_str().unwrap()
        ])
        .status
        .success()
    );
    let snapshot = std::fs::read(&cache).unwrap();
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "unknown-test",
            good.replace("\"membership\"", "\"membershp\""),
            vec!["unknown-test.toml", "membershp"],
        ),
        (
            "unknown-dataset",
            good.replace("\"titanic\"]", "\"titanc\"]"),
            vec!["unknown-dataset.toml", "titanc"],
        ),
        (
            "unknown-serialization",
            good.replace("[\"the-is\"]", "[\"the_is\"]"),
            vec!["unknown-serialization.toml", "the_is"],
        ),
        (
            "unknown-backend",
            good.replace("openai-compatible", "openai-compatibel"),
            vec!["unknown-backend.toml", "openai-compatibel"],
        ),
        (
            "missing-key",
            good.replace(KEY_ENV, "TABCONTAM_TEST_UNSET_KEY"),
            vec!["missing-key.toml", "TABCONTAM_TEST_UNSET_KEY"],
        ),
        (
            "unreachable",
            good.replace(&server.url(), "http://127.0.0.1:9"),
            vec!["unreachable.toml", "127.0.0.1:9"],
        ),
    ];
    for (name, body, needles) in cases {
        let spec = env.spec(&format!("{name}.toml"), &body);
        let mut cmd = env.command(&[
            "run",
            spec.to_str().unwrap(),
            "--cache",
            cache.to_str().unwrap(),
            "--model",
            "mock-base",
        ]);
        if name == "missing-key" {
            cmd.env_remove("TABCONTAM_TEST_UNSET_KEY");
        }
        // A fresh model id so the request is not answered from the cache.
        let body_fresh = body.replace(
            "id = \"mock-base\"",
            "id = \"mock-base\"\nrevision = \"new\"",
        );
        std::fs::write(&spec, body_fresh).unwrap();
        let out = cmd.output().unwrap();
        one_line_error(&out, &needles);
        assert_eq!(
            std::fs::read(&cache).unwrap(),
            snapshot,
            "{name}: the cache changed"
        );
    }
}

#[test]
fn a_cache_that_is_not_sqlite_is_refused_and_left_alone() {
    let env = Env::new().var(KEY_ENV, SECRET);
    let server = env.server(MockConfig::new());
    let spec = env.spec(
        "mini.toml",
        &spec_body(&server.url(), &["mock-base"], &["the-is"], ""),
    );
    let bogus = env.path("notes.sqlite");
    std::fs::write(&bogus, "these are my notes, not a database\n").unwrap();
    for command in ["run", "plan"] {
        let out = env.run(&[
            command,
            spec.to_str().unwrap(),
            "--cache",
            bogus.to_str().unwrap(),
        ]);
        one_line_error(&out, &["notes.sqlite", "not a tabcontam cache"]);
    }
    one_line_error(
        &env.run(&["status", "--cache", bogus.to_str().unwrap()]),
        &["notes.sqlite"],
    );
    assert_eq!(
        std::fs::read_to_string(&bogus).unwrap(),
        "these are my notes, not a database\n"
    );
    assert_eq!(server.request_count(), 0);
}

#[test]
fn ctrl_c_stops_cleanly_keeps_what_arrived_and_a_rerun_finishes() {
    let env = Env::new().var(KEY_ENV, SECRET);
    let server = env.server(MockConfig::new().latency(Duration::from_millis(50)));
    let spec = env.spec(
        "mini.toml",
        &spec_body(&server.url(), &["mock-base"], &["the-is", "colon"], ""),
    );
    let cache = env.cache();
    let cache_arg = cache.to_str().unwrap();
    let child = env
        .command(&[
            "run",
            spec.to_str().unwrap(),
            "--cache",
            cache_arg,
            "--quiet",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while server.request_count() < 60 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: sends SIGINT (what Ctrl-C sends) to the child we spawned.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let store = Store::open_read_only(&cache).unwrap();
    let status = store.status().unwrap();
    assert!(
        status.responses > 0 && status.responses < TOTAL,
        "{}",
        status.responses
    );
    assert_eq!(status.last_runs[0].status.id(), "interrupted");
    let stored = status.responses;
    drop(store);

    let before = server.request_count();
    let out = env.run(&[
        "run",
        spec.to_str().unwrap(),
        "--cache",
        cache_arg,
        "--json",
    ]);
    succeeded(&out);
    assert_eq!(json(&out)["counts"]["cached"], stored);
    assert_eq!(server.request_count() - before, TOTAL - stored);
}
