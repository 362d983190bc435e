//! `tabcontam rows` on a real run: a tiny llama checkpoint (written by the test, with a
//! `tabcontam-manifest.json` listing the iris rows it was trained on) scores every iris row
//! through the local engine; `rows` gives each row a conformal p-value against the held-out
//! rows and selects by Benjamini–Hochberg. The figures are recomputed here from the scores
//! the command prints, and the errors name their fix.

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/tiny_llama.rs"]
mod tiny_llama;

use cli_env::{Env, one_line_error};

#[test]
fn rows_judges_every_row_of_a_checkpoint_against_its_held_out_rows() {
    let env = Env::new().default_cache();
    let base = env.path("base");
    tiny_llama::write_tiny_llama(&base, tiny_llama::VOCAB);
    let checkpoint = env.path("checkpoint");
    tiny_llama::write_tiny_llama(&checkpoint, tiny_llama::VOCAB);
    // Rows 0, 3, 6, …: 50 trained on, 100 held out.
    let trained: Vec<usize> = (0..150).step_by(3).collect();
    std::fs::write(
        checkpoint.join("tabcontam-manifest.json"),
        serde_json::json!({
            "datasets": ["iris"],
            "epoch": 1,
            "rows": {"selection": "split", "trained_rows": trained},
        })
        .to_string(),
    )
    .unwrap();
    let spec = env.spec(
        "study.toml",
        &format!(
            r#"name = "rows"
datasets = ["iris", "synthetic:5:30"]
tests = ["likelihood-zlib"]
serializations = ["the-is"]

[[models]]
id = "base"
backend = "local"
model = "{base}"

[[models]]
id = "ckpt"
backend = "local"
model = "{checkpoint}"
datasets = ["iris"]
"#,
            base = base.display(),
            checkpoint = checkpoint.display()
        ),
    );
    let spec = spec.to_str().unwrap();
    env.ok(&["run", spec, "--quiet"]);

    let csv = env.path("seen.csv");
    let judged = env.json(&[
        "rows",
        spec,
        "--model",
        "ckpt",
        "--dataset",
        "iris",
        "--detector",
        "zlib",
        "--fdr",
        "0.2",
        "--out",
        csv.to_str().unwrap(),
        "--json",
    ]);
    let rows = judged["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 150);
    assert_eq!(judged["detector"], "likelihood-zlib");
    // Each p-value from the scores: (1 + references scoring at least as high, the row
    // itself left out) / (1 + references counted).
    let references: Vec<f64> = rows
        .iter()
        .filter(|r| r["reference"] == true)
        .map(|r| r["score"].as_f64().unwrap())
        .collect();
    assert_eq!(references.len(), 100);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["row"], i);
        assert_eq!(row["reference"], i % 3 != 0, "{row}");
        let score = row["score"].as_f64().unwrap();
        let reference = row["reference"] == true;
        let at_least = references.iter().filter(|&&r| r >= score).count();
        let (above, counted) = match reference {
            true => (at_least - 1, references.len() - 1),
            false => (at_least, references.len()),
        };
        let p = (1 + above) as f64 / (1 + counted) as f64;
        assert!(
            (row["p_value"].as_f64().unwrap() - p).abs() < 1e-12,
            "{row}"
        );
        let q = row["q_value"].as_f64().unwrap();
        assert!(q >= p - 1e-15 && q <= 1.0, "{row}");
        assert_eq!(row["selected"], q <= 0.2, "{row}");
    }
    // The truth block counts what the rows say.
    let selected = rows.iter().filter(|r| r["selected"] == true).count();
    let false_ids = rows
        .iter()
        .filter(|r| r["selected"] == true && r["reference"] == true)
        .count();
    assert_eq!(judged["truth"]["selected"], selected);
    assert_eq!(judged["truth"]["false_identifications"], false_ids);
    assert_eq!(judged["truth"]["trained"], 50);
    // Dataset inference over the same split: all four detectors of the local engine.
    let inference = &judged["dataset_inference"];
    assert_eq!(inference["suspect_rows"], 50, "{inference}");
    assert_eq!(inference["held_out_rows"], 100, "{inference}");
    assert_eq!(
        inference["weights"].as_array().unwrap().len(),
        4,
        "{inference}"
    );
    let p = inference["p_value"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&p) && inference["t"].as_f64().unwrap().is_finite());
    // The export holds every row.
    let exported = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(exported.lines().count(), 151);
    assert!(exported.starts_with("row,score,p_value,q_value,selected,trained\n"));
    let parquet = env.path("seen.parquet");
    env.ok(&[
        "rows",
        spec,
        "--model",
        "ckpt",
        "--dataset",
        "iris",
        "--detector",
        "zlib",
        "--out",
        parquet.to_str().unwrap(),
    ]);
    assert_eq!(&std::fs::read(&parquet).unwrap()[..4], b"PAR1");

    // A model without held-out rows (issue 26 item 4): each distinct row the membership
    // test drew, against the distinct perturbed copies scored beside it; BH over the rows
    // alone; the blind baseline says whether the copies are a fair reference.
    let public_args = iris_rows(
        spec,
        "base",
        &["--detector", "zlib", "--reference", "perturbed"],
    );
    let public = env.json(&[&public_args[..], &["--json"]].concat());
    assert!(public["truth"].is_null(), "no truth without a manifest");
    let rows = public["rows"].as_array().unwrap();
    let mut indexes: Vec<u64> = rows.iter().map(|r| r["row"].as_u64().unwrap()).collect();
    indexes.dedup();
    assert_eq!(indexes.len(), rows.len(), "each row once");
    assert!((30..100).contains(&rows.len()) && indexes.iter().all(|&i| i < 150));
    let copies: usize = public["references"]
        .as_str()
        .unwrap()
        .strip_prefix("the ")
        .and_then(|r| r.split_once(' '))
        .and_then(|(n, _)| n.parse().ok())
        .expect("the references' count");
    for row in rows {
        assert_eq!(row["reference"], false, "{row}");
        let (p, q) = (
            row["p_value"].as_f64().unwrap(),
            row["q_value"].as_f64().unwrap(),
        );
        assert!(
            p >= 1.0 / (1 + copies) as f64 && p <= 1.0 && q >= p - 1e-15,
            "{row}"
        );
        assert_eq!(row["selected"], q <= 0.1, "{row}");
    }
    let blind = &public["reference_blind"];
    let low = blind["auroc_low"]
        .as_f64()
        .expect("the blind baseline of rows vs copies");
    assert_eq!(public["fair_references"], low <= 0.5);
    assert!(
        public["references"]
            .as_str()
            .unwrap()
            .contains("perturbed copies")
    );
    assert!(public["dataset_inference"]["p_value"].as_f64().is_some());
    let text = env.ok(&public_args);
    assert!(
        text.contains("rows vs perturbed copies") && !text.contains("against the manifest"),
        "{text}"
    );

    // The default for a model without held-out rows: column-matched synthetic rows (as
    // many as the distinct rows drawn, none a row of the file), scored by the run.
    let matched_args = iris_rows(spec, "base", &["--detector", "zlib"]);
    let matched = env.json(&[&matched_args[..], &["--json"]].concat());
    assert_eq!(matched["reference"], "matched");
    assert!(matched["truth"].is_null());
    let rows = matched["rows"].as_array().unwrap();
    let references: usize = matched["references"]
        .as_str()
        .unwrap()
        .split_once(' ')
        .and_then(|(n, _)| n.parse().ok())
        .expect("the references' count");
    assert_eq!(
        references,
        rows.len(),
        "one matched row per distinct row drawn"
    );
    for row in rows {
        let p = row["p_value"].as_f64().unwrap();
        assert!(p >= 1.0 / (1 + references) as f64 && p <= 1.0, "{row}");
        assert!(row["trained"].is_null(), "{row}");
    }
    let blind_low = matched["reference_blind"]["auroc_low"]
        .as_f64()
        .expect("the blind baseline of rows vs column-matched rows");
    assert_eq!(matched["fair_references"], blind_low <= 0.5);
    assert!(
        env.ok(&matched_args)
            .contains("rows vs column-matched rows")
    );
    // On the checkpoint the matched reference is measured against its manifest: every
    // row of the file a candidate, a selected row not trained on a false identification.
    let on_checkpoint = env.json(&iris_rows(
        spec,
        "ckpt",
        &["--detector", "zlib", "--reference", "matched", "--json"],
    ));
    let rows = on_checkpoint["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 150);
    let truth = &on_checkpoint["truth"];
    assert_eq!(truth["trained"], 50);
    let selected = rows.iter().filter(|r| r["selected"] == true).count();
    let wrong = rows
        .iter()
        .filter(|r| r["selected"] == true && r["trained"] == false)
        .count();
    assert_eq!(truth["selected"], selected);
    assert_eq!(truth["false_identifications"], wrong);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["trained"], i % 3 == 0, "{row}");
    }
    let refused = env.run(&iris_rows(spec, "base", &["--reference", "held-out"]));
    one_line_error(
        &refused,
        &["no held-out rows of `iris`", "--reference matched"],
    );
    let unknown = env.run(&iris_rows(spec, "ckpt", &["--reference", "nearby"]));
    one_line_error(
        &unknown,
        &["--reference \"nearby\"", "held-out, matched, perturbed"],
    );

    // A dataset never scored, a bad rate: one line each. (The checkpoint's weights are
    // the base's here, so the cache shares the base's scores of synthetic:5:30 with it.)
    let unscored = env.run(&[
        "rows",
        spec,
        "--model",
        "ckpt",
        "--dataset",
        "synthetic:6:30",
    ]);
    one_line_error(
        &unscored,
        &[
            "column-matched rows) have no cached log-probabilities",
            "`synthetic-6-30`",
        ],
    );
    let other_cache = env.path("other.sqlite");
    one_line_error(
        &env.run(&[
            "rows",
            spec,
            "--model",
            "ckpt",
            "--dataset",
            "iris",
            "--cache",
            other_cache.to_str().unwrap(),
        ]),
        &["150 of 150 rows of `iris`", "tabcontam run"],
    );
    one_line_error(
        &env.run(&[
            "rows",
            spec,
            "--model",
            "ckpt",
            "--dataset",
            "iris",
            "--detector",
            "min-k-plus-plus",
            "--serialization",
            "equals",
        ]),
        &["no template `equals`"],
    );
    one_line_error(
        &env.run(&[
            "rows",
            spec,
            "--model",
            "ckpt",
            "--dataset",
            "iris",
            "--fdr",
            "1.5",
        ]),
        &["--fdr 1.5"],
    );
    one_line_error(
        &env.run(&["rows", spec, "--model", "nobody", "--dataset", "iris"]),
        &["no model `nobody`", "base, ckpt"],
    );
}

/// `tabcontam rows SPEC --model MODEL --dataset iris` followed by `extra`.
fn iris_rows<'a>(spec: &'a str, model: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    [
        &["rows", spec, "--model", model, "--dataset", "iris"][..],
        extra,
    ]
    .concat()
}
