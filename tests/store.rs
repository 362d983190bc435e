//! The SQLite store on real files: cache round trips, migrations, refusing files that are
//! not caches, read-only use, concurrent writers (threads and processes), durability,
//! bulk lookup speed, that secrets never reach the file, and the blind baselines through
//! an upgrade and a merge.

#[path = "support/tiny_llama.rs"]
mod tiny_llama;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tabcontam::decide::{Alg2Scope, Cell, Word};
use tabcontam::likelihood::blind::ORIGINAL_VS_PERTURBED;
use tabcontam::likelihood::{BlindAuroc, bootstrap_stats};
use tabcontam::llm::{
    ApiMode, BackendKind, GenerationParams, ModelIdentity, Request, RequestKey, Response,
};
use tabcontam::probe::{CellResult, Expected, TestId, TrialVerdict};
use tabcontam::store::{
    BlindBaselineRow, CellRow, DatasetRow, LikelihoodCellRow, ModelRow, OWN_SOURCE, RunCounts,
    RunStatus, SCHEMA_VERSION, Store, StoreError, TrialRow,
};

fn identity(model: &str) -> ModelIdentity {
    ModelIdentity {
        backend: BackendKind::OpenaiCompatible,
        model: model.into(),
        revision: "2024-08-06".into(),
    }
}

/// A request shaped like a memorization prompt (a few hundred bytes of rows).
fn request(model: &str, i: usize) -> Request {
    Request {
        model: identity(model),
        api: ApiMode::Completions,
        prompt: format!(
            "adult income, rows 1 to 4:\nThe age is {i}, The workclass is Private, The fnlwgt is 77516, \
             The education is Bachelors\nThe age is 50, The workclass is Self-emp-not-inc, The fnlwgt is 83311\n\
             Complete the next row:\nThe age is 38, The workclass is"
        ),
        params: GenerationParams {
            max_tokens: 256,
            temperature: 0.0,
            top_p: None,
            seed: Some(0),
            stop: vec![],
            stop_rule: None,
        },
        sample: 0,
    }
}

fn response(i: usize) -> Response {
    Response {
        text: format!(" Private, The fnlwgt is {i}, The education is HS-grad"),
        finish_reason: Some("stop".into()),
        prompt_tokens: Some(120),
        completion_tokens: Some(17),
        latency_ms: 350,
        served_model: None,
        served_fingerprint: None,
    }
}

fn cache_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("cache").join("tabcontam.sqlite")
}

/// Reads a number straight from the file, bypassing the store (tests may; `src` may not).
fn count(path: &Path, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[test]
fn a_response_round_trips_with_its_request() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(cache_path(&dir)).unwrap();
    let mut req = request("gpt-4o", 1);
    req.api = ApiMode::Chat;
    req.params.top_p = Some(0.9);
    req.params.temperature = 0.7;
    req.params.stop = vec!["\n".into()];
    req.sample = 3;
    let resp = Response {
        finish_reason: None,
        prompt_tokens: None,
        ..response(1)
    };

    assert!(store.put_response(&req, &resp).unwrap());

    let key = req.key();
    let stored = store.request(&key).unwrap().expect("request stored");
    assert_eq!(stored, req);
    assert_eq!(stored.key(), key, "the stored fields reproduce the key");
    assert_eq!(store.responses(&[key]).unwrap().get(&key), Some(&resp));
    assert!(
        store
            .cached_keys(&[key, request("gpt-4o", 2).key()])
            .unwrap()
            == [key].into()
    );
}

#[test]
fn the_same_request_is_stored_once_and_prompts_are_shared_across_models() {
    let dir = tempfile::tempdir().unwrap();
    let path = cache_path(&dir);
    let mut store = Store::open(&path).unwrap();
    assert!(store.put_response(&request("a", 1), &response(1)).unwrap());
    assert!(
        !store.put_response(&request("a", 1), &response(2)).unwrap(),
        "second put is a no-op"
    );
    assert!(store.put_response(&request("b", 1), &response(3)).unwrap());
    let stored = store.responses(&[request("a", 1).key()]).unwrap();
    assert_eq!(
        stored[&request("a", 1).key()],
        response(1),
        "the first response stays"
    );

    let status = store.status().unwrap();
    assert_eq!(status.responses, 2);
    assert_eq!(status.prompts, 1, "one prompt text for both models");
    assert_eq!(count(&path, "SELECT count(*) FROM requests"), 2);
}

#[test]
fn put_responses_stores_a_batch_and_counts_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(cache_path(&dir)).unwrap();
    store.put_response(&request("m", 0), &response(0)).unwrap();
    let items: Vec<(Request, Response)> =
        (0..100).map(|i| (request("m", i), response(i))).collect();
    assert_eq!(
        store
            .put_responses(items.iter().map(|(q, r)| (q, r)))
            .unwrap(),
        99
    );
    let keys: Vec<RequestKey> = items.iter().map(|(q, _)| q.key()).collect();
    assert_eq!(store.cached_keys(&keys).unwrap().len(), 100);
    assert_eq!(store.responses(&keys).unwrap().len(), 100);
}

#[test]
fn migrations_apply_once_and_record_the_schema_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = cache_path(&dir);
    {
        let mut store = Store::open(&path).unwrap();
        store.put_response(&request("m", 1), &response(1)).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    }
    for _ in 0..3 {
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        assert_eq!(
            store.status().unwrap().responses,
            1,
            "reopening keeps the data"
        );
    }
    assert_eq!(
        count(&path, "SELECT count(*) FROM schema_migrations"),
        SCHEMA_VERSION
    );
    assert_eq!(
        count(&path, "SELECT max(version) FROM schema_migrations"),
        SCHEMA_VERSION
    );
    assert_eq!(
        count(
            &path,
            "SELECT count(*) FROM schema_migrations WHERE length(checksum) = 64"
        ),
        SCHEMA_VERSION
    );
    let journal: String = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(journal, "wal");
}

#[test]
fn a_cache_from_a_newer_tabcontam_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = cache_path(&dir);
    drop(Store::open(&path).unwrap());
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "INSERT INTO schema_migrations (version, name, checksum, applied_at) VALUES (999, '0999_future', '', '')",
            [],
        )
        .unwrap();
    for err in [
        Store::open(&path).unwrap_err(),
        Store::open_read_only(&path).unwrap_err(),
    ] {
        assert!(
            matches!(err, StoreError::NewerSchema { found: 999, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("newer tabcontam"), "{err}");
    }
}

#[test]
fn a_file_that_is_not_sqlite_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.sqlite");
    let bytes = b"model,answer\ngpt-4o,yes\n".repeat(300);
    std::fs::write(&path, &bytes).unwrap();

    for err in [
        Store::open(&path).unwrap_err(),
        Store::open_read_only(&path).unwrap_err(),
    ] {
        let message = err.to_string();
        assert!(
            message.contains("x.sqlite is not a tabcontam cache (not an SQLite database)"),
            "{message}"
        );
        assert!(
            message.contains("pass another --cache or move it away"),
            "{message}"
        );
        assert!(!message.contains('\n'), "one line: {message}");
    }
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "file unchanged");
    let siblings: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        siblings.len(),
        1,
        "no -wal/-shm files left behind: {siblings:?}"
    );
}

#[test]
fn another_programs_sqlite_database_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("places.sqlite");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE bookmarks (url TEXT); INSERT INTO bookmarks VALUES ('https://example.org');")
            .unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(
        err.to_string()
            .contains("is not a tabcontam cache (an SQLite database of another program)"),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn an_empty_file_becomes_a_cache() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.sqlite");
    std::fs::write(&path, b"").unwrap();
    let store = Store::open_read_only(&path).unwrap();
    assert_eq!(store.status().unwrap().responses, 0);
    let mut store = Store::open(&path).unwrap();
    store.put_response(&request("m", 1), &response(1)).unwrap();
}

#[test]
fn a_corrupt_cache_is_reported_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = cache_path(&dir);
    {
        let mut store = Store::open(&path).unwrap();
        let items: Vec<(Request, Response)> =
            (0..200).map(|i| (request("m", i), response(i))).collect();
        store
            .put_responses(items.iter().map(|(q, r)| (q, r)))
            .unwrap();
    }
    // Close cleanly (checkpointing the WAL into the file), then overwrite everything after
    // the 100-byte header: the schema page and all table pages become garbage.
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 8192);
    for (i, b) in bytes.iter_mut().enumerate().skip(100) {
        *b = (i % 251) as u8;
    }
    std::fs::write(&path, &bytes).unwrap();
    let err = Store::open(&path).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{message}");
    assert!(
        message.contains("is corrupt") && message.contains("move it away"),
        "{message}"
    );
}

#[test]
fn a_read_only_cache_file_is_refused_for_writing_and_still_readable() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = cache_path(&dir);
    {
        let mut store = Store::open(&path).unwrap();
        store.put_response(&request("m", 1), &response(1)).unwrap();
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    let bytes = std::fs::read(&path).unwrap();

    // Decided from the permission bits, so it holds when the tests run as root too.
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::ReadOnly { .. }), "{err}");
    assert!(
        err.to_string().contains("tabcontam.sqlite is read-only;"),
        "{err}"
    );

    let mut store = Store::open_read_only(&path).unwrap();
    assert!(store.is_read_only());
    assert_eq!(
        store.cached_keys(&[request("m", 1).key()]).unwrap().len(),
        1
    );
    let err = store
        .put_response(&request("m", 2), &response(2))
        .unwrap_err();
    assert!(matches!(err, StoreError::OpenedReadOnly { .. }), "{err}");
    drop(store);
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn opening_read_only_a_missing_cache_reads_empty_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = cache_path(&dir);
    let mut store = Store::open_read_only(&path).unwrap();
    let status = store.status().unwrap();
    assert_eq!(
        (status.responses, status.file_bytes, status.schema_version),
        (0, 0, SCHEMA_VERSION)
    );
    assert!(
        store
            .cached_keys(&[request("m", 1).key()])
            .unwrap()
            .is_empty()
    );
    assert!(store.trials().unwrap().is_empty());
    assert!(store.begin_run("demo", "").is_err(), "writes are refused");
    assert!(
        !path.exists() && !path.parent().unwrap().exists(),
        "nothing created"
    );
}

#[test]
fn a_cache_folder_that_cannot_be_created_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("not-a-folder");
    std::fs::write(&blocker, b"x").unwrap();
    let err = Store::open(blocker.join("cache.sqlite")).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, StoreError::CreateDir { .. }), "{message}");
    assert!(
        message.contains("cannot create the cache folder") && message.contains("not-a-folder"),
        "{message}"
    );

    let err = Store::open(dir.path()).unwrap_err();
    assert!(
        err.to_string()
            .contains("is not a tabcontam cache (a folder)"),
        "{err}"
    );
}

#[test]
fn a_store_can_move_to_a_writer_thread() {
    fn assert_send<T: Send>() {}
    assert_send::<Store>();
}

/// Several processes starting on a new cache at once: one applies the migrations, the
/// others wait for it and find them applied.
#[test]
fn concurrent_first_opens_migrate_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = cache_path(&dir);
    let openers: Vec<_> = (0..4)
        .map(|i| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut store = Store::open(&path).unwrap();
                store.put_response(&request("m", i), &response(i)).unwrap();
            })
        })
        .collect();
    for opener in openers {
        opener.join().unwrap();
    }
    assert_eq!(
        count(&path, "SELECT count(*) FROM schema_migrations"),
        SCHEMA_VERSION
    );
    assert_eq!(count(&path, "SELECT count(*) FROM responses"), 4);
}

#[test]
fn a_response_is_durable_as_soon_as_put_returns() {
    let dir = tempfile::tempdir().unwrap();
    let path = cache_path(&dir);
    let mut writer = Store::open(&path).unwrap();
    let reader = Store::open(&path).unwrap();
    for i in 0..20 {
        writer.put_response(&request("m", i), &response(i)).unwrap();
        // Another connection sees it at once: it is committed, not buffered.
        assert!(
            reader
                .cached_keys(&[request("m", i).key()])
                .unwrap()
                .contains(&request("m", i).key())
        );
    }
    // A process that dies without closing loses nothing either.
    std::mem::forget(writer);
    assert_eq!(
        Store::open_read_only(&path)
            .unwrap()
            .status()
            .unwrap()
            .responses,
        20
    );
}

/// Two stores (two connections, as two processes would have) write 2,000 responses each,
/// interleaved with reads; nothing fails with SQLITE_BUSY and nothing is lost.
#[test]
fn two_writers_on_one_file_both_finish_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = cache_path(&dir);
    drop(Store::open(&path).unwrap());
    let writers: Vec<_> = ["alpha", "beta"]
        .into_iter()
        .map(|model| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut store = Store::open(&path).unwrap();
                for i in 0..2_000 {
                    store
                        .put_response(&request(model, i), &response(i))
                        .unwrap();
                    // Shared keys too: both writers insert these, the first one wins.
                    if i % 10 == 0 {
                        store
                            .put_response(&request("shared", i), &response(i))
                            .unwrap();
                    }
                    if i % 50 == 0 {
                        let keys: Vec<_> = (0..=i).map(|j| request(model, j).key()).collect();
                        assert_eq!(store.cached_keys(&keys).unwrap().len(), i + 1);
                        store.status().unwrap();
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.status().unwrap().responses, 4_200);
}

/// Why every write is `BEGIN IMMEDIATE`: a deferred transaction that read a snapshot and
/// then tries to write after another connection committed fails at once with SQLITE_BUSY,
/// whatever the busy timeout. The store's writes take the lock first and wait instead.
#[test]
fn writes_wait_for_the_lock_instead_of_failing_busy() {
    let dir = tempfile::tempdir().unwrap();
    let path = cache_path(&dir);
    let mut store = Store::open(&path).unwrap();
    store.put_response(&request("m", 0), &response(0)).unwrap();

    // The hazard, with a plain connection.
    let mut other = rusqlite::Connection::open(&path).unwrap();
    other.busy_timeout(Duration::from_secs(5)).unwrap();
    let tx = other
        .transaction_with_behavior(rusqlite::TransactionBehavior::Deferred)
        .unwrap();
    let _: i64 = tx
        .query_row("SELECT count(*) FROM responses", [], |r| r.get(0))
        .unwrap();
    store.put_response(&request("m", 1), &response(1)).unwrap();
    let started = Instant::now();
    let err = tx
        .execute("INSERT INTO datasets VALUES ('x', 'x', NULL, 'x', 'x')", [])
        .unwrap_err();
    assert_eq!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "failed without waiting"
    );
    drop(tx);

    // The store waits: another connection holds the write lock for 300 ms.
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let holder = {
        let path = path.clone();
        std::thread::spawn(move || {
            let mut conn = rusqlite::Connection::open(&path).unwrap();
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .unwrap();
            tx.execute("INSERT INTO datasets VALUES ('y', 'y', NULL, 'y', 'y')", [])
                .unwrap();
            locked_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            tx.commit().unwrap();
        })
    };
    locked_rx.recv().unwrap();
    let started = Instant::now();
    // Reads first, then writes, all inside one transaction.
    store.put_response(&request("m", 2), &response(2)).unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "it waited for the lock"
    );
    let run = store.begin_run("demo", "").unwrap();
    store
        .finish_run(run, RunStatus::Finished, &RunCounts::default())
        .unwrap();
    holder.join().unwrap();
    assert_eq!(store.status().unwrap().responses, 3);
}

/// A writer process for `two_processes_write_one_cache` (does nothing when run alone).
#[test]
#[ignore = "helper: run by two_processes_write_one_cache"]
fn helper_process_writer() {
    let (Ok(path), Ok(model)) = (
        std::env::var("TABCONTAM_TEST_CACHE"),
        std::env::var("TABCONTAM_TEST_MODEL"),
    ) else {
        return;
    };
    let mut store = Store::open(&path).unwrap();
    let run = store.begin_run(&model, "").unwrap();
    for i in 0..1_000 {
        store
            .put_response(&request(&model, i), &response(i))
            .unwrap();
        store
            .put_response(&request("shared", i), &response(i))
            .unwrap();
    }
    store
        .finish_run(
            run,
            RunStatus::Finished,
            &RunCounts {
                sent: 1_000,
                ..RunCounts::default()
            },
        )
        .unwrap();
}

/// Two real processes on one cache file (this test binary, running the helper above).
#[test]
fn two_processes_write_one_cache() {
    let dir = tempfile::tempdir().unwrap();
    let path = cache_path(&dir);
    let children: Vec<_> = ["proc-a", "proc-b"]
        .into_iter()
        .map(|model| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "helper_process_writer",
                    "--ignored",
                    "--test-threads=1",
                ])
                .env("TABCONTAM_TEST_CACHE", &path)
                .env("TABCONTAM_TEST_MODEL", model)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "child failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("1 passed"),
            "the helper ran"
        );
    }
    let store = Store::open_read_only(&path).unwrap();
    let status = store.status().unwrap();
    assert_eq!(status.responses, 3_000);
    assert_eq!(status.runs, 2);
    assert!(
        status
            .last_runs
            .iter()
            .all(|r| r.status == RunStatus::Finished && r.counts.sent == 1_000)
    );
}

#[test]
fn models_datasets_runs_and_failures_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(cache_path(&dir)).unwrap();
    let mut gpt = ModelRow {
        id: "gpt-4o".into(),
        label: "GPT-4o".into(),
        family: Some("gpt".into()),
        identity: identity("gpt-4o"),
        release_date: Some("2024-08-06".into()),
        training_cutoff: Some("2023-10".into()),
        exposure: None,
        step: Some(1200),
        updated_at: None,
    };
    store.upsert_model(&gpt).unwrap();
    gpt.label = "GPT-4o (Aug)".into();
    store.upsert_model(&gpt).unwrap();
    let models = store.models().unwrap();
    assert_eq!(models.len(), 1);
    assert_eq!(models[0].label, "GPT-4o (Aug)");
    assert_eq!(models[0].identity, gpt.identity);
    assert!(models[0].updated_at.is_some());
    assert_eq!(models[0].step, Some(1200));

    let iris = DatasetRow {
        id: "iris".into(),
        name: "iris".into(),
        variant: None,
        checksum: "blake3:abc".into(),
        updated_at: None,
    };
    store.upsert_dataset(&iris).unwrap();
    store.upsert_dataset(&iris).unwrap();
    assert_eq!(store.datasets().unwrap()[0].checksum, "blake3:abc");

    let spec = "[experiment]\nname = \"demo\"\n";
    let run = store.begin_run("demo", spec).unwrap();
    assert_eq!(store.run_spec(run).unwrap().as_deref(), Some(spec));
    assert_eq!(store.runs().unwrap()[0].status, RunStatus::Running);
    store
        .record_failure(
            run,
            &request("gpt-4o", 7),
            "gpt-4o",
            "http-500",
            "server error",
            3,
        )
        .unwrap();
    store
        .record_failure(
            run,
            &request("gpt-4o", 8),
            "gpt-4o",
            "timeout",
            &"x".repeat(10_000),
            5,
        )
        .unwrap();
    store
        .put_response(&request("gpt-4o", 1), &response(1))
        .unwrap();
    let counts = RunCounts {
        requests: 3,
        cached: 0,
        sent: 1,
        failed: 2,
        prompt_tokens: 120,
        completion_tokens: 17,
    };
    store
        .finish_run(run, RunStatus::Interrupted, &counts)
        .unwrap();

    let runs = store.runs().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        (runs[0].status, runs[0].counts),
        (RunStatus::Interrupted, counts)
    );
    assert!(runs[0].finished_at.is_some());
    let failures = store.failures(Some(run)).unwrap();
    assert_eq!(failures.len(), 2);
    assert_eq!(failures[0].request_key, request("gpt-4o", 7).key());
    assert_eq!(
        (failures[0].kind.as_str(), failures[0].attempts),
        ("http-500", 3)
    );
    assert!(
        failures[1].message.chars().count() <= 2_001,
        "long messages are cut"
    );
    // The failed request is kept for inspection, but it is not a cache hit.
    assert_eq!(
        store.request(&request("gpt-4o", 7).key()).unwrap(),
        Some(request("gpt-4o", 7))
    );
    assert!(
        store
            .cached_keys(&[request("gpt-4o", 7).key()])
            .unwrap()
            .is_empty()
    );

    let status = store.status().unwrap();
    assert_eq!(
        (
            status.responses,
            status.models,
            status.runs,
            status.failures
        ),
        (1, 1, 1, 2)
    );
    assert_eq!(status.per_model.len(), 1);
    let usage = &status.per_model[0];
    assert_eq!(usage.model_ids, vec!["gpt-4o".to_string()]);
    assert_eq!(
        (
            usage.responses,
            usage.prompt_tokens,
            usage.completion_tokens
        ),
        (1, 120, 17)
    );
    assert_eq!(status.recent_failures[0].kind, "timeout", "newest first");
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["last_runs"][0]["counts"]["failed"], 2);
    assert_eq!(
        json["recent_failures"][1]["request_key"],
        request("gpt-4o", 7).key().to_hex()
    );
}

fn trial(test: TestId, serialization: Option<&str>, index: u32, passed: bool) -> TrialRow {
    TrialRow {
        model: "gpt-4o".into(),
        dataset: "adult".into(),
        test,
        serialization: serialization.map(str::to_string),
        seed: u64::MAX - 1,
        sample: 0,
        trial: index,
        request_key: request("gpt-4o", index as usize).key(),
        note: Some("workclass".into()),
        expected: Expected::Row {
            fields: vec![
                ("age".into(), Cell::Int(38)),
                ("fnlwgt".into(), Cell::Float(215646.5)),
            ],
            scope: Alg2Scope::FirstLine,
        },
        verdict: TrialVerdict {
            passed,
            invalid: false,
        },
        run_id: None,
        echo: false,
    }
}

#[test]
fn trials_and_cells_round_trip_and_later_runs_replace_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(cache_path(&dir)).unwrap();
    let first = store.begin_run("demo", "").unwrap();
    let mut words = trial(TestId::FeatureListUninformed, None, 0, true);
    words.expected = Expected::Words {
        words: vec![Word::Text("age".into()), Word::Missing, Word::Bool(true)],
    };
    let mut second_sample = trial(TestId::IncompleteCompletion, Some("the-is"), 0, true);
    second_sample.sample = 1;
    let trials = vec![
        trial(TestId::IncompleteCompletion, Some("the-is"), 0, false),
        trial(TestId::IncompleteCompletion, Some("the-is"), 1, true),
        second_sample.clone(),
        words,
    ];
    store.put_trials(first, &trials).unwrap();
    let stored = store.trials().unwrap();
    assert_eq!(stored.len(), 4, "samples are distinct rows");
    assert!(stored.contains(&TrialRow {
        run_id: Some(first),
        echo: false,
        ..second_sample
    }));

    // The incomplete-completion cell decided again: its trials are exactly the new ones
    // (the old trial 1 and sample 1 are gone); the other cell keeps its trial.
    let second = store.begin_run("demo", "").unwrap();
    let mut changed = trials[0].clone();
    changed.verdict.passed = true;
    store
        .put_trials(second, std::slice::from_ref(&changed))
        .unwrap();

    let stored = store.trials().unwrap();
    assert_eq!(stored.len(), 2, "replaced per cell, not per trial");
    assert!(stored.contains(&TrialRow {
        run_id: Some(second),
        echo: false,
        ..changed.clone()
    }));
    assert!(
        stored.contains(&TrialRow {
            run_id: Some(first),
            echo: false,
            ..trials[3].clone()
        }),
        "None serialization, other cell untouched"
    );

    let cell = CellRow {
        source: OWN_SOURCE.into(),
        model: "gpt-4o".into(),
        dataset: "wine".into(),
        test: TestId::Classify0Shot,
        serialization: Some("the-is".into()),
        seed: 0,
        result: CellResult {
            passed: false,
            score: 0.71,
            trials: 100,
            passed_trials: 71,
            invalid_trials: 4,
            trial_chance: None,
        },
        samples: vec![CellResult {
            passed: false,
            score: 0.71,
            trials: 100,
            passed_trials: 71,
            invalid_trials: 4,
            trial_chance: None,
        }],
        skipped: None,
        echo_trials: None,
        chance: None,
        run_id: None,
    };
    let skipped = CellRow {
        test: TestId::FeatureValuesUninformed,
        serialization: None,
        result: CellResult {
            passed: false,
            score: 0.0,
            trials: 0,
            passed_trials: 0,
            invalid_trials: 0,
            trial_chance: None,
        },
        skipped: Some("wine has no categorical feature".into()),
        echo_trials: None,
        chance: None,
        ..cell.clone()
    };
    store
        .put_cells(first, &[cell.clone(), skipped.clone()])
        .unwrap();
    store
        .put_cells(second, std::slice::from_ref(&cell))
        .unwrap();
    let paper = CellRow {
        source: "paper".into(),
        samples: Vec::new(),
        result: CellResult {
            score: 0.66,
            ..cell.result
        },
        ..cell.clone()
    };
    store.import_cells(std::slice::from_ref(&paper)).unwrap();

    let cells = store.cells().unwrap();
    assert_eq!(cells.len(), 3);
    assert!(cells.contains(&CellRow {
        run_id: Some(second),
        ..cell.clone()
    }));
    assert!(cells.contains(&CellRow {
        run_id: Some(first),
        ..skipped
    }));
    assert!(
        cells.contains(&paper),
        "imported cells sit beside ours, without a run"
    );
}

/// The store has no field for API keys; this guards that no code path smuggles one in
/// (e.g. a request or error serialized with its client).
#[test]
fn secrets_never_reach_the_cache_file() {
    const FAKE_KEY: &str = "sk-test-0123456789abcdefFAKEKEY";
    let dir = tempfile::tempdir().unwrap();
    let path = cache_path(&dir);
    let mut store = Store::open(&path).unwrap();
    let run = store
        .begin_run("demo", "[models.gpt]\nbackend = \"openai-compatible\"\n")
        .unwrap();
    for i in 0..50 {
        let req = request("gpt-4o", i);
        assert!(!req.prompt.contains(FAKE_KEY));
        store.put_response(&req, &response(i)).unwrap();
    }
    store
        .record_failure(
            run,
            &request("gpt-4o", 99),
            "gpt",
            "http-401",
            "unauthorized",
            1,
        )
        .unwrap();
    store
        .finish_run(run, RunStatus::Failed, &RunCounts::default())
        .unwrap();
    drop(store);

    let mut haystack = Vec::new();
    for entry in std::fs::read_dir(path.parent().unwrap()).unwrap() {
        haystack.extend(std::fs::read(entry.unwrap().path()).unwrap());
    }
    assert!(
        haystack.windows(11).any(|w| w == b"The age is "),
        "the search does see stored text"
    );
    assert!(
        !haystack
            .windows(FAKE_KEY.len())
            .any(|w| w == FAKE_KEY.as_bytes()),
        "the key leaked into the cache"
    );
}

/// Sizes the paper's full spec (≈150k–500k keys) needs; prints timings, asserts only
/// generous bounds (debug builds, shared CI machines).
#[test]
fn bulk_lookups_of_200k_keys_are_fast() {
    const N: usize = 200_000;
    let dir = tempfile::tempdir().unwrap();
    let path = cache_path(&dir);
    let mut store = Store::open(&path).unwrap();

    // 16 models share the prompts, as in the paper's spec.
    let models: Vec<String> = (0..16).map(|m| format!("model-{m}")).collect();
    let items: Vec<(Request, Response)> = (0..N)
        .map(|i| (request(&models[i % 16], i / 16), response(i)))
        .collect();
    let started = Instant::now();
    store
        .put_responses(items.iter().map(|(q, r)| (q, r)))
        .unwrap();
    let seeded = started.elapsed();

    let started = Instant::now();
    const SINGLE: usize = 2_000;
    for i in 0..SINGLE {
        store
            .put_response(&request("single", i), &response(i))
            .unwrap();
    }
    let single = started.elapsed();

    // Half cached, half not.
    let mut keys: Vec<RequestKey> = items.iter().step_by(2).map(|(q, _)| q.key()).collect();
    keys.extend((0..N / 2).map(|i| request("missing", i).key()));
    let started = Instant::now();
    let cached = store.cached_keys(&keys).unwrap();
    let lookup = started.elapsed();
    assert_eq!(cached.len(), N / 2);

    let started = Instant::now();
    let responses = store.responses(&keys).unwrap();
    let fetch = started.elapsed();
    assert_eq!(responses.len(), N / 2);

    let few: Vec<RequestKey> = keys.iter().step_by(100).copied().collect();
    let started = Instant::now();
    assert_eq!(store.cached_keys(&few).unwrap().len(), few.len() / 2);
    let probe = started.elapsed();

    let status_started = Instant::now();
    let status = store.status().unwrap();
    let status_time = status_started.elapsed();
    eprintln!(
        "store bench: seeded {N} responses in {seeded:?} (one transaction); {SINGLE} put_response \
         (one commit each) in {single:?} = {:.0}/s; cached_keys of {} keys in {lookup:?}; responses of {} keys \
         in {fetch:?}; cached_keys of {} keys (probing) in {probe:?}; status in {status_time:?}; \
         file {:.1} MB ({} prompts for {} responses)",
        SINGLE as f64 / single.as_secs_f64(),
        keys.len(),
        keys.len(),
        few.len(),
        status.file_bytes as f64 / 1e6,
        status.prompts,
        status.responses,
    );
    drop(store);
    eprintln!(
        "store bench: file after closing (WAL checkpointed) {:.1} MB",
        std::fs::metadata(&path).unwrap().len() as f64 / 1e6
    );
    assert!(
        lookup < Duration::from_secs(5),
        "cached_keys took {lookup:?}"
    );
}

/// A cell decided again keeps exactly its new trials and samples: fewer trials, fewer
/// samples, or none at all (a cell that is now skipped).
#[test]
fn a_cell_decided_again_keeps_no_stale_trials_or_samples() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(cache_path(&dir)).unwrap();
    let result = |trials: usize, passed_trials: usize| CellResult {
        passed: passed_trials > 0,
        score: f64::from(u8::from(passed_trials > 0)),
        trials,
        passed_trials,
        invalid_trials: 0,
        trial_chance: None,
    };
    let cell = |samples: Vec<CellResult>, skipped: Option<&str>| CellRow {
        source: OWN_SOURCE.into(),
        model: "gpt-4o".into(),
        dataset: "adult".into(),
        test: TestId::FeatureCompletion,
        serialization: Some("the-is".into()),
        seed: u64::MAX - 1,
        result: result(
            samples.iter().map(|s| s.trials).sum(),
            samples.iter().map(|s| s.passed_trials).sum(),
        ),
        samples,
        skipped: skipped.map(str::to_string),
        echo_trials: None,
        chance: None,
        run_id: None,
    };
    // Three samples of five trials.
    let first = store.begin_run("demo", "").unwrap();
    let mut trials = Vec::new();
    for sample in 0..3 {
        for index in 0..5 {
            let mut t = trial(TestId::FeatureCompletion, Some("the-is"), index, index == 0);
            t.sample = sample;
            trials.push(t);
        }
    }
    store.put_trials(first, &trials).unwrap();
    store
        .put_cells(first, &[cell(vec![result(5, 1); 3], None)])
        .unwrap();
    assert_eq!(store.trials().unwrap().len(), 15);
    assert_eq!(store.cells().unwrap()[0].samples.len(), 3);

    // One sample of three trials.
    let second = store.begin_run("demo", "").unwrap();
    store.put_trials(second, &trials[..3]).unwrap();
    store
        .put_cells(second, &[cell(vec![result(3, 1)], None)])
        .unwrap();
    let stored = store.trials().unwrap();
    assert_eq!(stored.len(), 3);
    assert!(
        stored
            .iter()
            .all(|t| t.sample == 0 && t.trial < 3 && t.run_id == Some(second))
    );
    let cells = store.cells().unwrap();
    assert_eq!(cells[0].samples, vec![result(3, 1)]);
    assert_eq!(cells[0].result.trials, 3);

    // Now skipped: no trials at all.
    let third = store.begin_run("demo", "").unwrap();
    store.put_trials(third, &[]).unwrap();
    store
        .put_cells(
            third,
            &[cell(vec![result(0, 0)], Some("no completion feature"))],
        )
        .unwrap();
    assert!(store.trials().unwrap().is_empty());
    assert_eq!(store.cells().unwrap()[0].samples, vec![result(0, 0)]);
}

/// Many processes opening one new cache at the same moment (CI once saw the second of two
/// `run`s fail at once with "stayed locked" while the first switched the new file to WAL):
/// every open succeeds, and each connection can then write. Threads with their own
/// connections meet SQLite's file locks exactly as processes do.
#[test]
fn many_openers_of_one_new_cache_all_succeed() {
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache").join("tabcontam.sqlite");
        let start = std::sync::Arc::new(std::sync::Barrier::new(8));
        let openers: Vec<_> = (0..8)
            .map(|_| {
                let path = path.clone();
                let start = std::sync::Arc::clone(&start);
                std::thread::spawn(move || {
                    start.wait();
                    Store::open(&path).map(|store| store.status().map(|s| s.responses))
                })
            })
            .collect();
        for opener in openers {
            let opened = opener.join().unwrap();
            assert!(
                matches!(opened, Ok(Ok(0))),
                "round {round}: {:?}",
                opened.map(|_| ())
            );
        }
    }
}

/// A cache written before local models were identified by their weights' digest alone
/// (schema 7) keeps every answer: migration 8 moves each request, response, trial and
/// scored text of a local identity to the key it has under the digest identity, and two
/// paths of the same weights become one identity. Schema 8 changed no table, so a schema-7
/// cache is this binary's cache with the old identities, without the ledger's rows 8 and 9
/// and without migration 9's columns.
#[test]
fn a_cache_of_the_previous_release_keeps_its_local_answers_under_the_weights_digest() {
    use tabcontam::request::{ScoreRequest, TokenLogprobs};
    let dir = tempfile::tempdir().unwrap();
    let path = cache_path(&dir);
    let digest = "blake3:5eed";
    let old_identity = |model: &str| ModelIdentity {
        backend: BackendKind::Local,
        model: model.into(),
        revision: digest.into(),
    };
    let local_request = |model: &str, i: usize| Request {
        model: old_identity(model),
        ..request("unused", i)
    };
    // Two names of one file (as two specs in two folders wrote them), and a remote model.
    let first = local_request("experiments/../cache/tiny", 1);
    let second = local_request("experiments/../cache/tiny", 2);
    let same_as_first = local_request("../cache/tiny", 1);
    let remote = request("gpt", 1);
    let scored = ScoreRequest {
        model: old_identity("experiments/../cache/tiny"),
        text: "The age is 39, The workclass is State-gov".into(),
    };
    let logprobs = TokenLogprobs {
        tokens: vec![1, 2, 3],
        logprobs: vec![-0.5, -1.25],
        mu: None,
        sigma: None,
    };
    {
        let mut store = Store::open(&path).unwrap();
        store.put_response(&first, &response(1)).unwrap();
        store.put_response(&second, &response(2)).unwrap();
        store.put_response(&same_as_first, &response(9)).unwrap();
        store.put_response(&remote, &response(3)).unwrap();
        store.put_logprobs(&scored, "local", &logprobs).unwrap();
        store.begin_run("old", "name = \"old\"").unwrap();
    }
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "INSERT INTO trials (model, dataset, test, serialization, seed, trial, run_id, request_key, note, expected, passed, invalid, sample)
             VALUES ('tiny', 'iris', 'membership', 'the-is', 0, 0, 1, ?1, NULL, '{}', 1, 0, 0)",
            [first.key().0],
        )
        .unwrap();
        back_to_schema_7(&conn);
    }
    assert_eq!(
        count(
            &path,
            "SELECT count(*) FROM identities WHERE backend = 'local'"
        ),
        2
    );

    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let moved = |r: &Request| Request {
        model: ModelIdentity::local(digest),
        ..r.clone()
    };
    let keys = [moved(&first).key(), moved(&second).key(), remote.key()];
    let found = store.responses(&keys).unwrap();
    assert_eq!(
        found[&keys[0]].text,
        response(1).text,
        "the first stored answer stays"
    );
    assert_eq!(found[&keys[1]].text, response(2).text);
    assert_eq!(
        found[&keys[2]].text,
        response(3).text,
        "remote keys are untouched"
    );
    assert!(
        store
            .cached_keys(&[first.key(), same_as_first.key()])
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        count(
            &path,
            "SELECT count(*) FROM identities WHERE backend = 'local'"
        ),
        1,
        "two paths of one file are one identity"
    );
    assert_eq!(count(&path, "SELECT count(*) FROM requests"), 3);
    assert_eq!(count(&path, "SELECT count(*) FROM responses"), 3);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let trial_key: Vec<u8> = conn
        .query_row("SELECT request_key FROM trials", [], |r| r.get(0))
        .unwrap();
    assert_eq!(trial_key, keys[0].0, "the trial points at its moved answer");
    let rescored = ScoreRequest {
        model: ModelIdentity::local(digest),
        ..scored.clone()
    };
    let cached = store.logprobs(&[rescored.key()]).unwrap();
    assert_eq!(cached[&rescored.key()].1.logprobs, logprobs.logprobs);
    drop(store);
    // Applied once: reopening changes nothing.
    let again = Store::open(&path).unwrap();
    assert_eq!(again.responses(&keys).unwrap().len(), 3);
}

/// The same weights named by two paths (two specs in two folders, under two model ids)
/// are one model to the cache: the second run finds every answer of the first.
#[test]
fn the_same_weights_under_two_paths_share_every_cache_entry() {
    use tabcontam::run::execute::ProgressMode;
    use tabcontam::run::workflow::{RunSettings, run_experiment};
    let dir = tempfile::tempdir().unwrap();
    let weights = dir.path().join("weights").join("tiny");
    tiny_llama::write_tiny_llama(&weights, tiny_llama::VOCAB);
    std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
    let header = "seed = 0\ndatasets = [\"iris\"]\n\
        tests = [\"feature-list-uninformed\", \"incomplete-completion\"]\n\
        serializations = [\"the-is\"]\n";
    let spec = |file: &str, name: &str, id: &str, model: &str| {
        let path = dir.path().join(file);
        std::fs::write(
            &path,
            format!(
                "name = \"{name}\"\n{header}\n[[models]]\nid = \"{id}\"\nbackend = \"local\"\nmodel = \"{model}\"\n"
            ),
        )
        .unwrap();
        path
    };
    let first = spec("first.toml", "first", "tiny", "weights/tiny");
    let second = spec(
        "a/b/second.toml",
        "second",
        "tiny-again",
        "../../a/../weights/./tiny",
    );
    let settings = |spec: PathBuf| RunSettings {
        spec,
        only_models: Vec::new(),
        data_dir: None,
        cache: cache_path(&dir),
        offline: true,
        progress: ProgressMode::Off,
        shard: None,
        pin_served: false,
    };
    // A run opens its cache file once (issue 22 item 7): its first look, its writes and its
    // decisions share one connection, whether the cache is new or upgraded.
    let opened = tabcontam::store::files_opened_on_this_thread();
    let ran = run_experiment(&settings(first), &mut ()).unwrap();
    assert_eq!(ran.status, RunStatus::Finished, "{ran:?}");
    assert!(ran.counts.sent > 0);
    assert_eq!(
        tabcontam::store::files_opened_on_this_thread() - opened,
        1,
        "a run on a new cache opens it once"
    );
    // The next run meets the cache at schema 7, as a previous release left it: a run
    // upgrades it rather than refusing it for being old.
    back_to_schema_7(&rusqlite::Connection::open(cache_path(&dir)).unwrap());
    let opened = tabcontam::store::files_opened_on_this_thread();
    let again = run_experiment(&settings(second), &mut ()).unwrap();
    assert_eq!(
        tabcontam::store::files_opened_on_this_thread() - opened,
        1,
        "a run on an older cache upgrades it through the connection it keeps"
    );
    assert_eq!(again.status, RunStatus::Finished, "{again:?}");
    assert_eq!(again.counts.requests, ran.counts.requests);
    assert_eq!(
        again.counts.cached, again.counts.requests,
        "every answer is shared"
    );
    assert_eq!(again.counts.sent, 0);
    let path = cache_path(&dir);
    assert_eq!(count(&path, "SELECT count(*) FROM identities"), 1);
}

/// Issue 27 item 5: each answer keeps the version the server reported; a cache written
/// before schema 9 keeps every answer, with the version unknown (NULL), never guessed.
#[test]
fn served_versions_round_trip_and_older_answers_stay_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let path = cache_path(&dir);
    let mut store = Store::open(&path).unwrap();
    store.put_response(&request("m", 0), &response(0)).unwrap();
    drop(store);
    // Make it a schema-8 cache: no served columns, migrations 9 and later not applied.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "ALTER TABLE responses DROP COLUMN served_model;
         ALTER TABLE responses DROP COLUMN served_fingerprint;
         DROP TABLE row_order_cells;
         DROP TABLE blind_baselines;
         DELETE FROM schema_migrations WHERE version >= 9;",
    )
    .unwrap();
    drop(conn);

    let mut store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let served = |i: usize, model: &str, fp: Option<&str>| Response {
        served_model: Some(model.into()),
        served_fingerprint: fp.map(str::to_string),
        ..response(i)
    };
    store
        .put_response(&request("m", 1), &served(1, "m-2024-08-06", Some("fp_1")))
        .unwrap();
    store
        .put_response(&request("m", 2), &served(2, "m-2024-08-06", Some("fp_1")))
        .unwrap();
    store
        .put_response(&request("m", 3), &served(3, "m-2024-11-20", None))
        .unwrap();
    let got = store.responses(&[request("m", 1).key()]).unwrap();
    assert_eq!(
        got[&request("m", 1).key()],
        served(1, "m-2024-08-06", Some("fp_1"))
    );
    let versions = store.served_versions(&identity("m")).unwrap();
    let version =
        |model: Option<&str>, fp: Option<&str>, answers| tabcontam::store::ServedVersion {
            model: model.map(str::to_string),
            fingerprint: fp.map(str::to_string),
            answers,
        };
    assert_eq!(
        versions,
        [
            version(Some("m-2024-08-06"), Some("fp_1"), 2),
            version(Some("m-2024-11-20"), None, 1),
            version(None, None, 1),
        ]
    );
    assert_eq!(
        tabcontam::store::describe_served(&versions),
        "m-2024-08-06 (fp_1) ×2, m-2024-11-20 ×1, not reported ×1"
    );
    assert!(
        store
            .served_versions(&identity("other"))
            .unwrap()
            .is_empty()
    );
}

/// Makes a cache of this release look as the release of schema 7 left it: migrations 8
/// and later undone (their ledger rows gone, what they added dropped), so the next open
/// runs them again. A migration that adds a table or column adds its drop here.
fn back_to_schema_7(conn: &rusqlite::Connection) {
    conn.execute_batch(
        "DELETE FROM schema_migrations WHERE version >= 8;
         ALTER TABLE responses DROP COLUMN served_model;
         ALTER TABLE responses DROP COLUMN served_fingerprint;
         DROP TABLE row_order_cells;
         DROP TABLE blind_baselines;",
    )
    .unwrap();
}

fn blind(auroc: f64) -> BlindAuroc {
    BlindAuroc {
        positives: 100,
        negatives: 100,
        auroc,
        auroc_low: auroc - 0.08,
        auroc_high: auroc + 0.08,
    }
}

fn likelihood_cell(model: &str, test: &str, blind: Option<BlindAuroc>) -> LikelihoodCellRow {
    LikelihoodCellRow {
        model: model.into(),
        dataset: "iris".into(),
        test: test.into(),
        serialization: "the-is".into(),
        seed: 0,
        method: "local".into(),
        stats: bootstrap_stats(&[0.3, 0.9, 0.8], &[0.1, 0.5, 0.2], 20, 1),
        skipped: None,
        blind,
        run_id: None,
    }
}

fn baseline(dataset: &str, group_pair: &str, stats: BlindAuroc) -> BlindBaselineRow {
    BlindBaselineRow {
        dataset: dataset.into(),
        serialization: "the-is".into(),
        seed: 0,
        group_pair: group_pair.into(),
        stats,
        run_id: None,
    }
}

/// The blind AUROC of each cell's group pair (issue 26 item 2).
fn blind_of(store: &Store) -> Vec<(String, String, Option<f64>)> {
    store
        .likelihood_cells()
        .unwrap()
        .into_iter()
        .map(|c| (c.model, c.test, c.blind.map(|b| b.auroc)))
        .collect()
}

/// Issue 26 item 2: the blind baselines (migration 11) are kept once per group pair and
/// read back with every cell of that pair, whichever model's; a cache of schema 10 opens,
/// keeps its cells and shows no baseline; `cache merge` carries them, the run that started
/// last winning as for cells.
#[test]
fn blind_baselines_round_trip_survive_the_upgrade_and_merge() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("a.sqlite"), dir.path().join("b.sqlite"));
    let truth = "likelihood-min-k/trained-vs-held-out";
    {
        let mut store = Store::open(&first).unwrap();
        let run = store.begin_run("a", "").unwrap();
        store
            .put_likelihood_cells(
                run,
                &[
                    likelihood_cell("m", "likelihood-min-k", Some(blind(0.55))),
                    likelihood_cell("ckpt", truth, Some(blind(0.9))),
                ],
            )
            .unwrap();
        // A membership-only baseline, and another model's cell of the same pair.
        store
            .put_blind_baselines(run, &[baseline("wine", ORIGINAL_VS_PERTURBED, blind(0.7))])
            .unwrap();
        store
            .put_likelihood_cells(run, &[likelihood_cell("other", "likelihood-zlib", None)])
            .unwrap();
        store
            .finish_run(run, RunStatus::Finished, &RunCounts::default())
            .unwrap();
        assert_eq!(
            blind_of(&store),
            [
                ("ckpt".into(), truth.into(), Some(0.9)),
                ("m".into(), "likelihood-min-k".into(), Some(0.55)),
                ("other".into(), "likelihood-zlib".into(), Some(0.55)),
            ]
        );
        let pairs: Vec<(String, String)> = store
            .blind_baselines()
            .unwrap()
            .into_iter()
            .map(|b| (b.dataset, b.group_pair))
            .collect();
        assert_eq!(
            pairs,
            [
                ("iris".into(), ORIGINAL_VS_PERTURBED.into()),
                ("iris".into(), "trained-vs-held-out:ckpt".into()),
                ("wine".into(), ORIGINAL_VS_PERTURBED.into()),
            ]
        );
    }

    let earlier = dir.path().join("earlier.sqlite");
    std::fs::copy(&first, &earlier).unwrap();
    // A cache of schema 10: no table, migration 11 not applied.
    let old = dir.path().join("old.sqlite");
    std::fs::copy(&first, &old).unwrap();
    rusqlite::Connection::open(&old)
        .unwrap()
        .execute_batch(
            "DROP TABLE blind_baselines; DELETE FROM schema_migrations WHERE version >= 11;",
        )
        .unwrap();
    let upgraded = Store::open(&old).unwrap();
    assert_eq!(upgraded.schema_version().unwrap(), SCHEMA_VERSION);
    assert!(blind_of(&upgraded).iter().all(|(_, _, b)| b.is_none()));
    assert_eq!(upgraded.likelihood_cells().unwrap().len(), 3);
    drop(upgraded);

    // A later run elsewhere computed the iris pair again (another file, say) and a new one.
    std::thread::sleep(Duration::from_millis(5));
    {
        let mut store = Store::open(&second).unwrap();
        let run = store.begin_run("b", "").unwrap();
        store
            .put_blind_baselines(
                run,
                &[
                    baseline("iris", ORIGINAL_VS_PERTURBED, blind(0.6)),
                    baseline("adult", ORIGINAL_VS_PERTURBED, blind(0.5)),
                ],
            )
            .unwrap();
        store
            .finish_run(run, RunStatus::Finished, &RunCounts::default())
            .unwrap();
    }
    let mut target = Store::open(&first).unwrap();
    target.merge_from(std::slice::from_ref(&second)).unwrap();
    let merged: Vec<(String, f64)> = target
        .blind_baselines()
        .unwrap()
        .into_iter()
        .map(|b| (format!("{}/{}", b.dataset, b.group_pair), b.stats.auroc))
        .collect();
    assert_eq!(
        merged,
        [
            ("adult/original-vs-perturbed".into(), 0.5),
            ("iris/original-vs-perturbed".into(), 0.6),
            ("iris/trained-vs-held-out:ckpt".into(), 0.9),
            ("wine/original-vs-perturbed".into(), 0.7),
        ]
    );
    assert_eq!(blind_of(&target)[1].2, Some(0.6));
    // Merging the earlier cache into the later one keeps the later run's figure and takes
    // the pairs it lacks.
    drop(target);
    let mut later = Store::open(&second).unwrap();
    later.merge_from(&[earlier]).unwrap();
    let aurocs: Vec<f64> = later
        .blind_baselines()
        .unwrap()
        .into_iter()
        .map(|b| b.stats.auroc)
        .collect();
    assert_eq!(aurocs, [0.5, 0.6, 0.9, 0.7]);
}
