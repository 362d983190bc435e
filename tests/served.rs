//! The version that really answered (issue 27 item 5): runs of the binary against a loopback
//! server whose reported version (`model`, `system_fingerprint`) changes between runs. The
//! warning, `--pin-served` sending the prompts again under a pinned revision, and the
//! served versions in the cache, the reports and the site.

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mock_server.rs"]
mod mock_server;

use std::path::Path;

use cli_env::{Env, json, succeeded, text};
use mock_server::MockConfig;
use tabcontam::request::{BackendKind, ModelIdentity};
use tabcontam::store::{ServedVersion, Store};

/// One model asked by an alias (`gpt-alias`), on iris with tests 1, 2 and 8: 1 + 1 + 5
/// requests per template.
fn spec_body(url: &str, serializations: &[&str]) -> String {
    let serializations: Vec<String> = serializations.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        "name = \"served\"\nseed = 0\ndatasets = [\"iris\"]\n\
         tests = [\"feature-list-uninformed\", \"recognition-features\", \"incomplete-completion\"]\n\
         serializations = [{}]\n\n\
         [[models]]\nid = \"alias\"\nmodel = \"gpt-alias\"\nbackend = \"openai-compatible\"\n\
         api = \"completions\"\nbase_url = \"{url}/v1\"\nconcurrency = 4\n\
         backoff_base_ms = 1\nbackoff_max_ms = 20\ntimeout_s = 5\n",
        serializations.join(", ")
    )
}

fn identity(revision: &str) -> ModelIdentity {
    ModelIdentity {
        backend: BackendKind::OpenaiCompatible,
        model: "gpt-alias".into(),
        revision: revision.into(),
    }
}

fn version(model: &str, fingerprint: &str, answers: u64) -> ServedVersion {
    ServedVersion {
        model: Some(model.into()),
        fingerprint: Some(fingerprint.into()),
        answers,
    }
}

fn served(cache: &Path, revision: &str) -> Vec<ServedVersion> {
    Store::open_read_only(cache)
        .unwrap()
        .served_versions(&identity(revision))
        .unwrap()
}

/// Lines of stderr that speak of served versions.
fn served_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("serves") || l.contains("--pin-served"))
        .collect()
}

#[test]
fn a_changed_served_version_warns_and_pin_served_asks_anew() {
    let env = Env::new();
    let server = env.server(MockConfig::new().reported("gpt-alias-2024-08-06", Some("fp_aaa")));
    let one = env.spec("one.toml", &spec_body(&server.url(), &["the-is"]));
    let two = env.spec("two.toml", &spec_body(&server.url(), &["the-is", "colon"]));
    let cache = env.cache();
    let run = |spec: &Path, extra: &[&str]| {
        let mut args = vec![
            "run",
            spec.to_str().unwrap(),
            "--cache",
            cache.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        env.run(&args)
    };

    // Run 1: 7 requests, each answer stored with the version the server reported.
    let first = run(&one, &[]);
    succeeded(&first);
    assert_eq!(server.request_count(), 7);
    assert!(
        served_lines(&text(&first).1).is_empty(),
        "{}",
        text(&first).1
    );
    assert_eq!(
        served(&cache, "gpt-alias"),
        [version("gpt-alias-2024-08-06", "fp_aaa", 7)]
    );

    // The alias now serves another snapshot.
    server
        .reported_version()
        .set("gpt-alias-2024-11-20", Some("fp_bbb"));

    // The same spec again: everything is cached, nothing is sent, nothing can be known.
    let cached = run(&one, &[]);
    succeeded(&cached);
    assert_eq!(server.request_count(), 7);
    assert!(served_lines(&text(&cached).1).is_empty());

    // A spec with a second template sends its 5 new prompts: their answers come from the
    // new version while 7 old answers are reused — the warning, one line, on stderr.
    let mixed = run(&two, &["--json"]);
    let report = json(&mixed);
    assert_eq!(server.request_count(), 12);
    assert_eq!(report["counts"]["cached"], 7);
    assert_eq!(report["counts"]["sent"], 5);
    let stderr = text(&mixed).1;
    let warning = served_lines(&stderr);
    assert_eq!(warning.len(), 1, "{stderr}");
    let warning = warning[0];
    println!("{warning}");
    for needle in [
        "warning: model `alias` (`gpt-alias`)",
        "now serves `gpt-alias-2024-11-20`",
        "7 cached answers came from `gpt-alias-2024-08-06`",
        "--pin-served",
    ] {
        assert!(warning.contains(needle), "`{needle}` missing: {warning}");
    }
    assert_eq!(report["served_changes"][0]["model"], "alias");
    assert_eq!(
        report["served_changes"][0]["now"][0],
        "gpt-alias-2024-11-20"
    );
    assert!(report["served_changes"][0]["pinned_revision"].is_null());
    assert_eq!(
        served(&cache, "gpt-alias"),
        [
            version("gpt-alias-2024-08-06", "fp_aaa", 7),
            version("gpt-alias-2024-11-20", "fp_bbb", 5)
        ]
    );

    // --pin-served: the first planned request asks which version serves now; it differs
    // from the cached answers', so all 12 prompts go under the pinned revision (the probe's
    // answer is one of them): exactly 12 requests, none of the old answers reused.
    let pinned = run(&two, &["--pin-served", "--json"]);
    let report = json(&pinned);
    assert_eq!(report["status"], "finished", "{}", text(&pinned).1);
    assert_eq!(server.request_count(), 24, "the 12 prompts sent again");
    assert_eq!(report["served_probes"], 1);
    assert_eq!(report["counts"]["sent"], 11);
    assert_eq!(report["counts"]["cached"], 1, "the probe's own answer");
    let pinned_revision = "gpt-alias+served:gpt-alias-2024-11-20";
    assert_eq!(
        report["served_changes"][0]["pinned_revision"],
        pinned_revision
    );
    let stderr = text(&pinned).1;
    println!("{}", served_lines(&stderr).join("\n"));
    assert!(
        stderr.contains(&format!(
            "--pin-served keys its answers as revision `{pinned_revision}`"
        )),
        "{stderr}"
    );
    assert_eq!(
        served(&cache, pinned_revision),
        [version("gpt-alias-2024-11-20", "fp_bbb", 12)]
    );
    // The old answers stay for the old version.
    assert_eq!(served(&cache, "gpt-alias").len(), 2);
    let store = Store::open_read_only(&cache).unwrap();
    let model = store
        .models()
        .unwrap()
        .into_iter()
        .find(|m| m.id == "alias");
    assert_eq!(model.unwrap().identity.revision, pinned_revision);
    drop(store);

    // Pinned again while the same version serves: one probe request, nothing else.
    let again = run(&two, &["--pin-served", "--json"]);
    assert_eq!(json(&again)["counts"]["sent"], 0);
    assert_eq!(server.request_count(), 25, "only the probe");

    // Reports and the site show the versions behind the model's answers.
    let out = env.path("reports");
    env.ok(&[
        "report",
        "--cache",
        cache.to_str().unwrap(),
        "--format",
        "json,md,html,latex",
        "--out",
        out.to_str().unwrap(),
    ]);
    let scores: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("scores.json")).unwrap()).unwrap();
    assert_eq!(
        scores["models"][0]["served"],
        serde_json::json!([{"model": "gpt-alias-2024-11-20", "fingerprint": "fp_bbb", "answers": 12}])
    );
    let line = "gpt-alias-2024-11-20 (fp\\_bbb) ×12";
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains(&format!("- alias: {line}")), "{md}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("alias: gpt-alias-2024-11-20 (fp_bbb) ×12"));
    let tex = std::fs::read_to_string(out.join("report.tex")).unwrap();
    // Escaped for LaTeX (`-{}` keeps `--` from becoming a dash, `\_`).
    assert!(
        tex.contains(
            "\\item alias: gpt-{}alias-{}2024-{}11-{}20 (fp\\_bbb) \\ensuremath{\\times}12"
        ),
        "{tex}"
    );
    let site = env.path("site");
    env.ok(&[
        "site",
        "--cache",
        cache.to_str().unwrap(),
        "--out",
        site.to_str().unwrap(),
    ]);
    let page = std::fs::read_to_string(site.join("models/alias.html")).unwrap();
    assert!(page.contains("Served versions"), "{page}");
    assert!(page.contains("gpt-alias-2024-11-20 (fp_bbb) ×12"));

    // Without --pin-served the run goes back to the spec's revision, and says so.
    let unpinned = run(&two, &[]);
    succeeded(&unpinned);
    assert_eq!(server.request_count(), 25);
    let stderr = text(&unpinned).1;
    assert!(
        stderr.contains("an earlier --pin-served run keyed its answers as revision"),
        "{stderr}"
    );
}

#[test]
fn a_server_that_reports_no_version_neither_warns_nor_pins() {
    let env = Env::new();
    // Gemini-like silence: a body without `model` (Fault::Body scripts it).
    let body = serde_json::json!({"choices": [{"text": " x", "finish_reason": "stop"}]});
    let server = env.server(MockConfig::new().script(move |_| mock_server::Plan {
        latency: std::time::Duration::ZERO,
        fault: mock_server::Fault::Body(body.clone()),
    }));
    let spec = env.spec("one.toml", &spec_body(&server.url(), &["the-is"]));
    let cache = env.cache();
    let args = [
        "run",
        spec.to_str().unwrap(),
        "--cache",
        cache.to_str().unwrap(),
        "--pin-served",
    ];
    succeeded(&env.run(&args));
    assert_eq!(server.request_count(), 7);
    let again = env.run(&args);
    succeeded(&again);
    assert_eq!(
        server.request_count(),
        7,
        "nothing known to compare: no probe"
    );
    assert!(served_lines(&text(&again).1).is_empty());
    assert_eq!(
        served(&cache, "gpt-alias"),
        [ServedVersion {
            model: None,
            fingerprint: None,
            answers: 7
        }]
    );
}
