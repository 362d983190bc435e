//! Reports from a synthetic cache of our own results: untrusted text (model outputs, ids,
//! labels, dataset names) prints literally and runs or includes nothing; report.tex compiles
//! with pdflatex; report.html loads in headless Chromium without console errors; the same
//! cache gives byte-identical files; the analytics (membership statistics, serialization
//! study, evolution, negative controls) on known data.
//!
//! The pdflatex and Chromium checks are skipped when the tools are absent, except in CI
//! (`TABCONTAM_CI=1`, see `support/skip.rs`; scripts/ci-install-report-tools.sh installs
//! them), where their absence fails the test.

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};
use std::process::Command;

use cli_env::Env;
use tabcontam::analyze::{Analysis, Options, analyze_store};
use tabcontam::llm::{ApiMode, BackendKind, GenerationParams, ModelIdentity, Request, Response};
use tabcontam::probe::{CellResult, Expected, TestId, TrialVerdict, aggregate};
use tabcontam::report::{self, Format};
use tabcontam::store::{CellRow, DatasetRow, ModelRow, OWN_SOURCE, Store, TrialRow};

/// What a hostile model (or spec author) might write.
const SCRIPT: &str = "<script>alert(1)</script>";
const IMG: &str = "<img src=x onerror=alert(3)>";
const INPUT: &str = r"\input{/etc/passwd}";
const WRITE18: &str = r"\write18{touch /tmp/tabcontam-pwned}";
const SPECIALS: &str = r#"$ & % _ # ^ ~ { } ^^5c [x], "q""#;

const EVIL_ID: &str = "m<script>alert(1)</script>";
const EVIL_DATASET: &str = "evil<ds>";
const OLD_ID: &str = "old-model";

fn evil_label() -> String {
    format!("{SCRIPT} {INPUT} {WRITE18} {SPECIALS}")
}

fn evil_output(n: usize) -> String {
    format!("OUTPUT {n} {SCRIPT} {INPUT} {WRITE18} {SPECIALS} {IMG}\nsecond line \u{1F600} — end")
}

/// `text` as askama's HTML escaper writes it.
fn escaped_html(text: &str) -> String {
    text.replace('&', "&#38;")
        .replace('<', "&#60;")
        .replace('>', "&#62;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

fn model(id: &str, label: &str, release: &str, cutoff: &str) -> ModelRow {
    ModelRow {
        id: id.to_string(),
        label: label.to_string(),
        family: Some("fam".to_string()),
        identity: ModelIdentity {
            backend: BackendKind::OpenaiCompatible,
            model: id.to_string(),
            revision: "r1".to_string(),
        },
        release_date: Some(release.to_string()),
        training_cutoff: Some(cutoff.to_string()),
        exposure: None,
        step: None,
        updated_at: None,
    }
}

/// Whether `model` passes contamination test `test` on `dataset` in the synthetic cache.
fn detected(model: &str, dataset: &str, test: TestId, serialization: Option<&str>) -> bool {
    let n = test.number();
    if model == OLD_ID {
        return dataset == "iris" && n == 1;
    }
    // The evil model: knowledge on every dataset (thyroid too: released after its cut-off),
    // recognition from rows only under the default template.
    n <= 3 || (n == 4 && serialization == Some("the-is")) || (dataset == "iris" && n == 8)
}

/// What the synthetic trials expect: the dataset's id for recognition, a hostile row for
/// the completion tests, a Yes/No answer otherwise.
fn expected_of(test: TestId, dataset: &str) -> Expected {
    match test {
        TestId::RecognitionFeatures | TestId::RecognitionExamples => Expected::Names {
            names: vec![dataset.to_string()],
        },
        TestId::IncompleteCompletion | TestId::FullCompletion | TestId::FeatureCompletion => {
            Expected::Row {
                fields: vec![
                    ("sepal".into(), tabcontam::decide::Cell::Text("5.1".into())),
                    ("class".into(), tabcontam::decide::Cell::Text(SCRIPT.into())),
                ],
                scope: tabcontam::decide::Alg2Scope::FirstLine,
            }
        }
        _ => Expected::Choice {
            choices: vec!["Yes".into(), "No".into()],
            correct: 0,
        },
    }
}

/// A cache with two models of one family, three datasets and every test.
fn build_cache(path: &Path) {
    let mut store = Store::open(path).unwrap();
    store
        .upsert_model(&model(EVIL_ID, &evil_label(), "2024-03-01", "2021-06"))
        .unwrap();
    store
        .upsert_model(&model(OLD_ID, "Old model", "2023-01", "2021-01"))
        .unwrap();
    store
        .upsert_dataset(&DatasetRow {
            id: EVIL_DATASET.to_string(),
            name: format!("{IMG} {INPUT}"),
            variant: None,
            checksum: "0".into(),
            updated_at: None,
        })
        .unwrap();
    let run = store.begin_run("synthetic", "# synthetic").unwrap();
    let mut requests = Vec::new();
    let mut trials = Vec::new();
    let mut cells = Vec::new();
    for (model_id, _) in [(EVIL_ID, ()), (OLD_ID, ())] {
        for dataset in ["iris", "thyroid", EVIL_DATASET] {
            for test in TestId::PAPER {
                let mut serializations = vec![test.serializes_rows().then(|| "the-is".to_string())];
                if test == TestId::RecognitionExamples && model_id == EVIL_ID {
                    serializations.push(Some("equals".to_string()));
                }
                for serialization in serializations {
                    let count = match test {
                        TestId::Membership => 20,
                        TestId::Classify0Shot | TestId::Classify1Shot => 10,
                        _ => 1,
                    };
                    let mut verdicts = Vec::new();
                    for trial in 0..count {
                        let verdict = match test.number() {
                            // Membership: 14 of 20 correct, 2 invalid; classification 6 of 10.
                            10 => TrialVerdict {
                                passed: trial < 14,
                                invalid: trial >= 18,
                            },
                            11 | 12 => TrialVerdict {
                                passed: trial < 6,
                                invalid: trial == 9,
                            },
                            _ => TrialVerdict {
                                passed: detected(model_id, dataset, test, serialization.as_deref()),
                                invalid: false,
                            },
                        };
                        let request = Request {
                            model: ModelIdentity {
                                backend: BackendKind::OpenaiCompatible,
                                model: model_id.to_string(),
                                revision: "r1".to_string(),
                            },
                            api: ApiMode::Chat,
                            prompt: format!("{dataset} {test} {serialization:?} {trial}"),
                            params: GenerationParams {
                                max_tokens: 16,
                                temperature: 0.0,
                                top_p: None,
                                seed: Some(0),
                                stop: vec![],
                                stop_rule: None,
                            },
                            sample: 0,
                        };
                        // Test 3 of the evil model names the dataset its prompt already
                        // names (an echo); test 8 writes a row to diff against the truth.
                        let text = match test {
                            TestId::RecognitionFeatures => {
                                format!("{} it is {dataset}", evil_output(requests.len()))
                            }
                            TestId::FullCompletion => format!(
                                "The sepal is 5.2, The class is {SCRIPT}\n{}",
                                evil_output(requests.len())
                            ),
                            _ => evil_output(requests.len()),
                        };
                        let response = Response {
                            text,
                            finish_reason: Some("stop".into()),
                            prompt_tokens: Some(10),
                            completion_tokens: Some(10),
                            latency_ms: 1,
                            served_model: None,
                            served_fingerprint: None,
                        };
                        trials.push(TrialRow {
                            model: model_id.to_string(),
                            dataset: dataset.to_string(),
                            test,
                            serialization: serialization.clone(),
                            seed: 0,
                            sample: 0,
                            trial,
                            request_key: request.key(),
                            note: None,
                            expected: expected_of(test, dataset),
                            verdict,
                            run_id: None,
                            echo: false,
                        });
                        requests.push((request, response));
                        verdicts.push(verdict);
                    }
                    let result: CellResult = aggregate(test, &verdicts);
                    cells.push(CellRow {
                        source: OWN_SOURCE.to_string(),
                        model: model_id.to_string(),
                        dataset: dataset.to_string(),
                        test,
                        serialization,
                        seed: 0,
                        result,
                        samples: vec![result],
                        skipped: None,
                        echo_trials: None,
                        chance: None,
                        run_id: None,
                    });
                }
            }
        }
    }
    store
        .put_responses(requests.iter().map(|(q, r)| (q, r)))
        .unwrap();
    store.put_trials(run, &trials).unwrap();
    store.put_cells(run, &cells).unwrap();
}

fn synthetic() -> (tempfile::TempDir, PathBuf, Analysis) {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache.sqlite");
    build_cache(&cache);
    let store = Store::open_read_only(&cache).unwrap();
    let analysis = analyze_store(&store, &Options::default()).unwrap();
    (tmp, cache, analysis)
}

fn rendered(analysis: &Analysis, name: &str) -> String {
    let files = report::render(
        analysis,
        &[
            Format::Json,
            Format::Html,
            Format::Latex,
            Format::Csv,
            Format::Markdown,
        ],
        &Default::default(),
    )
    .unwrap();
    files
        .into_iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("{name} not rendered"))
        .contents
}

#[test]
fn analytics_on_known_data() {
    let (_tmp, _cache, a) = synthetic();
    assert_eq!(a.series.len(), 2);
    let evil = &a.series[0];
    assert_eq!(evil.key.model, EVIL_ID, "ranked first: more contamination");
    // Tests 1–3 on 3 datasets, test 4 (the-is) on 3, test 8 on iris: 13 of 27.
    assert_eq!((evil.passed, evil.cells, evil.datasets), (13, 27, 3));
    let membership = evil.membership.as_ref().unwrap();
    assert_eq!(
        (membership.trials, membership.correct, membership.invalid),
        (60, 42, 6)
    );
    assert!((membership.mean - 0.7).abs() < 1e-12);
    assert!((membership.invalid_rate - 0.1).abs() < 1e-12);
    let p = membership.p_value.unwrap();
    // One-sided, as every "above chance" p (issue 21): scipy.stats.binomtest(42, 60, 0.5,
    // alternative='greater').pvalue = 0.001335218141403533 (two-sided: 0.00267).
    assert!(
        (p - 0.001_335_218_141_403_533).abs() < 1e-12,
        "binomtest(42, 60, alternative='greater') = 0.0013352, got {p}"
    );
    assert!((membership.pooled - 0.7).abs() < 1e-12);
    let interval = membership.interval.unwrap();
    assert!(interval.low < 0.7 && interval.high > 0.7);
    assert_eq!(evil.zero_shot.as_ref().unwrap().mean, 0.6);

    // Serialization study: test 4 passes under the-is and not under equals, on 3 datasets.
    assert_eq!(a.serialization.summaries.len(), 1);
    assert_eq!(
        (
            a.serialization.summaries[0].compared,
            a.serialization.summaries[0].changed
        ),
        (3, 3)
    );
    let change = &a.serialization.changes[0];
    assert_eq!(
        (change.passed_with.clone(), change.failed_with.clone()),
        (vec!["the-is".to_string()], vec!["equals".to_string()])
    );

    // Evolution: old (2023-01) → evil (2024-03) in family "fam".
    assert_eq!(a.evolution.len(), 1);
    let step = &a.evolution[0];
    assert_eq!(
        (step.from.model.as_str(), step.to.model.as_str()),
        (OLD_ID, EVIL_ID)
    );
    assert_eq!(
        step.gained.len(),
        12,
        "13 passed cells minus the one both pass"
    );
    assert!(step.lost.is_empty());
    assert!((step.delta.unwrap() - 12.0 / 27.0).abs() < 1e-12);

    // Negative controls: thyroid (released 2023) is after both cut-offs; the evil model's
    // knowledge cells there are suspected false positives.
    assert_eq!(a.negative_controls.eligible.len(), 2);
    assert_eq!(
        a.negative_controls.suspected.len(),
        4,
        "tests 1–4 on thyroid"
    );
    assert!(
        a.negative_controls
            .suspected
            .iter()
            .all(|s| s.dataset == "thyroid" && s.key.model == EVIL_ID)
    );

    // Examples: one per model and test, a passed one when there is one.
    assert_eq!(a.examples.len(), 24);
    assert!(a.examples.iter().any(|e| e.output.contains(SCRIPT)));
    let corr = a
        .correlations
        .iter()
        .find(|c| c.against == "zero_shot")
        .unwrap();
    assert_eq!(corr.n, 2);
}

#[test]
fn untrusted_text_prints_literally_in_every_format() {
    let (_tmp, _cache, a) = synthetic();

    let html = rendered(&a, "report.html");
    assert!(
        !html.to_lowercase().contains("<script"),
        "no script element, ever"
    );
    assert!(!html.contains("<img"), "no element from untrusted text");
    assert!(
        html.contains(&escaped_html(SCRIPT)),
        "the payload is shown as text"
    );
    assert!(html.contains(r"\input{/etc/passwd}") && html.contains(r"\write18{touch"));
    assert!(html.contains(&escaped_html(IMG)));
    for attribute in ["src=\"", "href=\"http", "url(", "@import"] {
        assert!(
            !html.contains(attribute),
            "no external asset: found `{attribute}`"
        );
    }
    assert!(html.contains(r#"<meta name="viewport""#));

    let tex = rendered(&a, "report.tex");
    assert!(
        !tex.contains(INPUT) && !tex.contains(r"\write18"),
        "no TeX command from untrusted text"
    );
    assert!(!tex.contains("^^"), "no ^^ character codes");
    assert!(tex.contains(r"\textbackslash{}input\{/etc/passwd\}"));
    assert!(
        tex.contains(r"\textless{}script\textgreater{}alert(1)\textless{}/script\textgreater{}")
    );
    assert!(tex.contains(
        r"\ensuremath{\mathdollar} \& \% \_ \# \textasciicircum{} \textasciitilde{} \{ \}"
    ));
    assert!(
        tex.contains("[U+1F600]"),
        "characters pdflatex cannot print show as code points"
    );

    let json: serde_json::Value = serde_json::from_str(&rendered(&a, "scores.json")).unwrap();
    assert_eq!(json["models"][0]["id"], EVIL_ID);
    assert_eq!(json["models"][0]["label"], evil_label());
    assert!(
        json["examples"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["output"].as_str().unwrap().contains(INPUT))
    );

    let csv = rendered(&a, "scores.csv");
    assert!(
        csv.contains(&format!("\"{}\"", evil_label().replace('"', "\"\""))),
        "fields with commas or quotes are quoted: {csv}"
    );

    // report.md: the label is one literal cell of its Table 2 row (no tag, link or
    // emphasis opens; `_`, `~`, `[`, `]` and `\` escaped), and every row of a table has
    // as many cell borders as its header.
    let md = rendered(&a, "report.md");
    assert!(
        md.contains(concat!(
            r"| 1 | \<script>alert(1)\</script> \\input{/etc/passwd} ",
            r"\\write18{touch /tmp/tabcontam-pwned} $ & % \_ # ^ \~ { } ^^5c \[x\], ",
            r#""q" | tabcontam | **0.48** | 13/27 |"#
        )),
        "{md}"
    );
    let unescaped = md.replace(r"\<", "");
    assert!(
        !unescaped.contains("<script") && !unescaped.contains("</"),
        "no tag opens: {md}"
    );
    assert_table_shapes(&md);

    // Snippet names come from model ids: no path separators.
    let files = report::render(&a, &[Format::Latex], &Default::default()).unwrap();
    for f in &files {
        assert!(
            !f.name.contains('/') && !f.name.starts_with('.'),
            "{}",
            f.name
        );
    }
    assert!(
        files
            .iter()
            .any(|f| f.name == "heatmap-m-script-alert-1---script-.tex"),
        "{:?}",
        files.iter().map(|f| &f.name).collect::<Vec<_>>()
    );
}

/// Every Markdown table of `md` (runs of lines starting with `|`) has as many unescaped
/// `|` on each row as on its header, and a `---` alignment row second.
fn assert_table_shapes(md: &str) {
    let bars = |line: &str| {
        let mut escaped = false;
        line.chars()
            .filter(|&c| {
                let bar = c == '|' && !escaped;
                escaped = c == '\\' && !escaped;
                bar
            })
            .count()
    };
    let lines: Vec<&str> = md.lines().collect();
    let mut tables = 0;
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].starts_with('|') {
            i += 1;
            continue;
        }
        tables += 1;
        let header = bars(lines[i]);
        assert!(lines[i + 1].starts_with("| ---"), "{}", lines[i + 1]);
        while i < lines.len() && lines[i].starts_with('|') {
            assert_eq!(bars(lines[i]), header, "row `{}` of\n{md}", lines[i]);
            i += 1;
        }
    }
    assert!(tables > 0, "no table in\n{md}");
}

/// A report tool on PATH, or `None` after a skip (a failure in CI).
fn tool(candidates: &[&str]) -> Option<PathBuf> {
    skip::tool(candidates, "scripts/ci-install-report-tools.sh")
}

fn write_report(dir: &Path, analysis: &Analysis) {
    let files = report::render(
        analysis,
        &[Format::Html, Format::Latex],
        &Default::default(),
    )
    .unwrap();
    report::write(dir, &files).unwrap();
}

#[test]
fn report_tex_compiles_with_pdflatex_and_includes_nothing() {
    let Some(pdflatex) = tool(&["pdflatex"]) else {
        return;
    };
    let (tmp, _cache, a) = synthetic();
    let dir = tmp.path().join("out");
    write_report(&dir, &a);
    let output = Command::new(pdflatex)
        .args([
            "-no-shell-escape",
            "-interaction=nonstopmode",
            "-halt-on-error",
            "report.tex",
        ])
        .current_dir(&dir)
        .output()
        .unwrap();
    let log = std::fs::read_to_string(dir.join("report.log")).unwrap_or_default();
    assert!(
        output.status.success(),
        "pdflatex failed:\n{}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(dir.join("report.pdf").is_file());
    // TeX logs every file it opens as `(path`; overfull-box warnings may quote the text.
    assert!(!log.contains("(/etc/passwd"), "a file was read:\n{log}");
    assert!(
        !log.contains("runsystem"),
        "a shell escape was attempted:\n{log}"
    );
    assert!(!Path::new("/tmp/tabcontam-pwned").exists());
    // Only the outline fonts every TeX Live has: no bitmap font built by mktexpk (slow, and
    // needs METAFONT on the machine).
    assert!(!log.contains("pk>"), "bitmap fonts were generated:\n{log}");

    // The snippets compile inside a paper.
    let paper = r"\documentclass{article}\usepackage{booktabs}\usepackage{tikz}\begin{document}\input{table2.tex}\input{heatmap-old-model.tex}\end{document}";
    std::fs::write(dir.join("paper.tex"), paper).unwrap();
    let output = Command::new("pdflatex")
        .args([
            "-no-shell-escape",
            "-interaction=nonstopmode",
            "-halt-on-error",
            "paper.tex",
        ])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "snippets failed:\n{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[test]
fn report_html_loads_in_chromium_without_console_errors() {
    let Some(chromium) = tool(&["chromium", "chromium-browser", "google-chrome"]) else {
        return;
    };
    let (tmp, _cache, a) = synthetic();
    let dir = tmp.path().join("out");
    write_report(&dir, &a);
    let profile = tmp.path().join("profile");
    let url = format!("file://{}", dir.join("report.html").display());
    // Console messages (errors, CSP violations, anything a script would print) are logged
    // to stderr as `…:CONSOLE…` lines; the DOM after load shows what was parsed.
    let output = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(&url)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let dom = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "chromium failed: {stderr}");
    let console: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught"))
        .collect();
    assert!(console.is_empty(), "console messages: {console:#?}");
    assert!(dom.contains("Table 2"), "the page rendered: {dom:.200}");
    assert!(
        !dom.to_lowercase().contains("<script"),
        "no script element in the DOM"
    );
    assert!(!dom.contains("<img"), "no img element in the DOM");
    assert!(
        dom.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "the payload is text in the DOM"
    );
}

#[test]
fn same_cache_gives_byte_identical_reports() {
    let (tmp, cache, _a) = synthetic();
    let env = Env::new();
    let run = |out: &Path, extra: &[&str]| {
        let mut args = vec!["report", "--cache", cache.to_str().unwrap()];
        args.extend(["--out", out.to_str().unwrap()].iter().chain(extra));
        env.ok(&args);
    };
    let (first, second) = (tmp.path().join("first"), tmp.path().join("second"));
    run(&first, &[]);
    run(&second, &[]);
    let mut names: Vec<_> = std::fs::read_dir(&first)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert!(names.len() >= 8, "{names:?}");
    for name in &names {
        let (a, b) = (
            std::fs::read(first.join(name)).unwrap(),
            std::fs::read(second.join(name)).unwrap(),
        );
        assert!(
            a == b,
            "{name:?} differs between two reports of the same cache"
        );
    }
    let stamped = tmp.path().join("stamped");
    run(&stamped, &["--timestamp", "--format", "json"]);
    let json = std::fs::read_to_string(stamped.join("scores.json")).unwrap();
    assert!(json.contains("\"generated_at\""));
    assert!(
        !std::fs::read_to_string(first.join("scores.json"))
            .unwrap()
            .contains("generated_at")
    );
}

#[test]
fn report_without_cache_says_what_to_do() {
    let env = Env::new();
    let (missing, out) = (env.path("missing.sqlite"), env.path("out"));
    let output = env.run(&[
        "report",
        "--cache",
        missing.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("missing.sqlite") && stderr.contains("import-results"),
        "{stderr}"
    );
}

/// The explorer cell of `model` on `dataset` for `test` (first template).
fn explorer_cell<'a>(
    a: &'a Analysis,
    model: &str,
    dataset: &str,
    test: TestId,
) -> &'a tabcontam::analyze::ExplorerCell {
    a.explorer
        .iter()
        .find(|c| c.key.model == model && c.dataset == dataset && c.test == test)
        .unwrap_or_else(|| panic!("no explorer cell {model} {dataset} {test}"))
}

#[test]
fn trial_explorer_shows_every_trial_with_expected_words_echoes_and_diffs() {
    let (_tmp, _cache, a) = synthetic();
    // Every cell of ours: the evil model has test 4 under two templates.
    assert_eq!(a.explorer.len(), 3 * 13 + 3 * 12);
    assert_eq!(a.explorer[0].key.model, EVIL_ID, "Table 2's order");
    // Membership: 20 trials, the first 5 shown.
    let membership = explorer_cell(&a, EVIL_ID, "iris", TestId::Membership);
    assert_eq!((membership.total_trials, membership.trials.len()), (20, 5));
    assert_eq!(membership.passed_trials, 14);
    let trial = &membership.trials[3];
    assert_eq!(trial.prompt, r#"iris membership Some("the-is") 3"#);
    assert!(trial.output.contains(SCRIPT));
    assert_eq!(trial.expected, vec!["Yes".to_string()]);
    // Recognition whose output names the dataset its prompt already names: an echo (the
    // old model did not pass, so its trial is no echo).
    let echoed = explorer_cell(&a, EVIL_ID, "iris", TestId::RecognitionFeatures);
    assert!(echoed.trials[0].passed && echoed.trials[0].echo);
    assert_eq!(echoed.echo_trials, 1);
    let old = explorer_cell(&a, OLD_ID, "iris", TestId::RecognitionFeatures);
    assert!(!old.trials[0].echo);
    // A completion: the true row in the cell's template and the judged first line.
    let completion = explorer_cell(&a, EVIL_ID, "iris", TestId::FullCompletion);
    let t = &completion.trials[0];
    assert_eq!(
        t.truth.as_deref(),
        Some(format!("The sepal is 5.1, The class is {SCRIPT}").as_str())
    );
    assert_eq!(
        t.judged.as_deref(),
        Some(format!("The sepal is 5.2, The class is {SCRIPT}").as_str())
    );

    let html = rendered(&a, "report.html");
    let explorer = &html[html.find(r#"<h2 id="explorer">"#).unwrap()..];
    // Anchors: series 1 (evil), dataset 1 (iris), test 3; heatmap squares, Table 2 and
    // the accuracy tables link to them.
    assert!(explorer.contains(r#"<details class="cell" id="trials-1-1-3">"#));
    assert!(
        html.contains(r##"<a href="#trials-1-1-3"><rect"##),
        "heatmap link"
    );
    assert!(html.contains(r##"<a href="#explorer-1">"##), "Table 2 link");
    assert!(
        html.contains(r##"<a href="#trials-1-1-10">"##),
        "accuracy table link"
    );
    assert!(explorer.contains("first 5 of 20 shown"));
    assert!(explorer.contains(r#"<span class="badge">echo</span>"#));
    assert!(
        explorer.contains("<mark>iris</mark>"),
        "expected words highlighted"
    );
    // Each prompt once, linked from its trials: the two models see the same prompts
    // (the evil one has test 4 under a second template too).
    assert!(explorer.contains(r##"<a href="#prompt-1">prompt</a>"##));
    let evil_trials: usize = a
        .explorer
        .iter()
        .filter(|c| c.key.model == EVIL_ID)
        .map(|c| c.trials.len())
        .sum();
    assert_eq!(
        explorer.matches(r#"<details class="prompt" id="#).count(),
        evil_trials
    );
    // The diff marks 1 as missing and 2 as extra; the hostile value is text inside it.
    assert!(explorer.contains(r#"<span class="missing">1</span><span class="extra">2</span>"#));
    assert!(explorer.contains(&format!(
        r#"<span class="same">, The class is {}</span>"#,
        escaped_html(SCRIPT)
    )));
    assert!(!explorer.to_lowercase().contains("<script"));
    assert!(!explorer.contains("<img"));
    assert!(explorer.contains(&escaped_html(IMG)));
    assert!(
        explorer.contains(&escaped_html(EVIL_DATASET)),
        "prompts escaped"
    );
    // The explorer is HTML only: LaTeX stays a paper.
    assert!(!rendered(&a, "report.tex").contains("Trial explorer"));
}

#[test]
fn timelines_per_family_in_html_and_latex_by_date_or_step() {
    let (tmp, cache, a) = synthetic();
    let html = rendered(&a, "report.html");
    let timelines = &html[html.find(r#"<h2 id="timelines">"#).unwrap()..];
    assert!(timelines.contains(r#"<figure class="timeline" id="timeline-1"><svg"#));
    assert!(timelines.contains("fam against release date"));
    assert!(timelines.contains("Old model (2023-01)"));
    let files = report::render(&a, &[Format::Latex], &Default::default()).unwrap();
    let tikz = &files
        .iter()
        .find(|f| f.name == "timeline-fam.tex")
        .expect("one pgfplots snippet per family")
        .contents;
    assert!(tikz.contains(r"\begin{axis}") && tikz.contains(r"\addlegendentry{Contamination}"));
    // Release dates 2023-01 and 2024-03; contamination 1/27 and 13/27.
    assert!(
        tikz.contains("(2023.0000,0.0370) (2024.1667,0.4815)"),
        "{tikz}"
    );
    assert!(!tikz.contains(INPUT), "labels escaped");
    assert!(rendered(&a, "report.tex").contains(r"\begin{axis}"));

    // Checkpoints: with a step on every version the family is drawn against steps.
    {
        let mut store = Store::open(&cache).unwrap();
        for (id, step) in [(EVIL_ID, 2000), (OLD_ID, 500)] {
            let mut row = store
                .models()
                .unwrap()
                .into_iter()
                .find(|m| m.id == id)
                .unwrap();
            row.step = Some(step);
            store.upsert_model(&row).unwrap();
        }
    }
    let store = Store::open_read_only(&cache).unwrap();
    let stepped = analyze_store(&store, &Options::default()).unwrap();
    let html = rendered(&stepped, "report.html");
    assert!(html.contains("fam against training step: Old model (step 500)"));
    let files = report::render(&stepped, &[Format::Latex], &Default::default()).unwrap();
    let tikz = &files
        .iter()
        .find(|f| f.name == "timeline-fam.tex")
        .unwrap()
        .contents;
    assert!(
        tikz.contains("(500.0000,0.0370) (2000.0000,0.4815)"),
        "{tikz}"
    );
    drop(tmp);
}

/// Chromium's command line for a headless, offline, throw-away profile.
fn headless(chromium: &Path, profile: &Path) -> Command {
    let mut command = Command::new(chromium);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()));
    command
}

/// `(width, height)` from a PNG's IHDR chunk.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && &png[12..16] == b"IHDR",
        "not a PNG"
    );
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&png[16..20]), be(&png[20..24]))
}

/// Issue 12, must show #4: headless Chromium renders the trial explorer and the timeline.
/// The DOM after load holds the trials (prompt, highlighted output, echo, diff) and the
/// timeline's SVG; a screenshot of the two sections (the explorer's cells opened) is a
/// real picture, much larger than one of an empty page. The PNG is kept in the test's
/// target tmp folder (`explorer-timeline.png`) for a human look.
#[test]
fn chromium_renders_the_trial_explorer_and_the_timeline() {
    let Some(chromium) = tool(&["chromium", "chromium-browser", "google-chrome"]) else {
        return;
    };
    let (tmp, _cache, a) = synthetic();
    let dir = tmp.path().join("out");
    write_report(&dir, &a);
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();

    let output = headless(&chromium, &tmp.path().join("profile-dom"))
        .arg("--dump-dom")
        .arg(format!("file://{}", dir.join("report.html").display()))
        .output()
        .unwrap();
    assert!(output.status.success());
    let dom = String::from_utf8_lossy(&output.stdout);
    let explorer = &dom[dom.find(r#"id="explorer""#).expect("explorer in the DOM")..];
    assert_eq!(explorer.matches(r#"<details class="cell""#).count(), 75);
    assert!(
        explorer.contains(r#"iris membership Some("the-is") 3"#),
        "a prompt"
    );
    assert!(explorer.contains("<mark>iris</mark>"));
    assert!(explorer.contains(r#"<span class="badge">echo</span>"#));
    assert!(explorer.contains(r#"<span class="missing">1</span>"#));
    assert!(explorer.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(!dom.to_lowercase().contains("<script"));
    let timeline = &dom[dom.find(r#"id="timeline-1""#).expect("timeline in the DOM")..];
    assert!(
        timeline
            .trim_start_matches(r#"id="timeline-1">"#)
            .starts_with("<svg")
    );
    assert!(timeline.contains("Release date") && timeline.contains("Contamination"));

    // The two sections alone, with the page's styles and the first cells opened.
    let head = &html[..html.find("<main>").unwrap() + "<main>".len()];
    let section = |from: &str, to: &str| {
        let start = html.find(from).unwrap();
        let end = start + html[start..].find(to).unwrap();
        html[start..end].to_string()
    };
    let timelines = section(r#"<h2 id="timelines">"#, r#"<h2 id="serialization">"#);
    let cells = section(
        r#"<h2 id="explorer">"#,
        r#"<details class="cell" id="trials-1-1-10">"#,
    )
    .replace(r#"<details class="cell""#, r#"<details open class="cell""#)
        + &section(
            r#"<h3 id="explorer-prompts">"#,
            r#"<details class="prompt" id="prompt-4">"#,
        )
        .replace(
            r#"<details class="prompt""#,
            r#"<details open class="prompt""#,
        );
    let page = format!("{head}{timelines}{cells}</main></body></html>");
    let shot_page = dir.join("shot.html");
    std::fs::write(&shot_page, page).unwrap();
    std::fs::write(
        dir.join("empty.html"),
        "<!DOCTYPE html><title>empty</title>",
    )
    .unwrap();
    let screenshot = |name: &str, png: &Path| {
        let output = headless(&chromium, &tmp.path().join(format!("profile-{name}")))
            .arg(format!("--screenshot={}", png.display()))
            .arg("--window-size=1200,4000")
            .arg(format!("file://{}", dir.join(name).display()))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::read(png).unwrap()
    };
    let shot = screenshot("shot.html", &tmp.path().join("shot.png"));
    let empty = screenshot("empty.html", &tmp.path().join("empty.png"));
    assert_eq!(png_size(&shot), (1200, 4000));
    assert!(
        shot.len() > 20_000 && shot.len() > 5 * empty.len(),
        "a real picture: {} bytes against {} for an empty page",
        shot.len(),
        empty.len()
    );
    let keep = Path::new(env!("CARGO_TARGET_TMPDIR")).join("explorer-timeline.png");
    std::fs::write(&keep, &shot).unwrap();
    eprintln!(
        "screenshot: {} ({} bytes; empty page {} bytes)",
        keep.display(),
        shot.len(),
        empty.len()
    );
}

/// The paper's nine datasets, as `experiments/paper.toml` lists them.
const PAPER_DATASETS: [&str; 9] = [
    "adult",
    "bank",
    "german",
    "housing",
    "iris",
    "wine",
    "titanic",
    "spaceship-titanic",
    "thyroid",
];

/// The single-file size for the paper grid: the paper's 16 models (ids from its published
/// results, also imported beside them as `paper-…`) × nine datasets × twelve tests under
/// the default template, every prompt built from the paper's files, every answer a real
/// output of the parity records for its kind of test (tests 10–12: short answers), judged
/// by the real rules. Prints the sizes; with the default 5 trials per cell the page must
/// stay under 8 MB.
#[test]
fn paper_grid_report_size() {
    use tabcontam::dataset::Serialization;
    use tabcontam::dataset::catalog::Catalog;
    use tabcontam::decide::{Alg1Profile, Dictionary};
    use tabcontam::probe::{ProbeContext, PromptPack, Variant, build, judge};

    let shared = skip::shared_dir();
    let Some(data) = skip::require(
        shared.join("datasets/paper"),
        |d| {
            d.join("thyroid_diff.csv").is_file() && shared.join("parity/algorithm2.jsonl").is_file()
        },
        "the paper's files or parity records are not there (../shared beside the checkout)",
    ) else {
        return;
    };
    let records = |file: &str| -> Vec<(String, String)> {
        std::fs::read_to_string(shared.join("parity").join(file))
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    v["test"].as_str().unwrap().to_string(),
                    v["output"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let mut outputs = records("algorithm1.jsonl");
    outputs.extend(records("algorithm2.jsonl"));
    let output_for = |test: TestId, n: usize| -> String {
        let kind = match test.number() {
            1 | 2 => "FEATURES",
            3 | 4 => "RECOGNITION",
            5 | 6 => "VALUES",
            7 => "INCOMPLETE",
            8 => "FULL",
            9 => "FEATURE COMPLETION",
            _ => return ["Yes", "No", "Answer: 1", "The answer is no."][n % 4].to_string(),
        };
        let pool: Vec<&String> = outputs
            .iter()
            .filter(|(t, _)| t.contains(kind))
            .map(|(_, o)| o)
            .collect();
        if pool.is_empty() {
            return outputs[n % outputs.len()].1.clone();
        }
        pool[n % pool.len()].clone()
    };

    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache.sqlite");
    let results_dir = shared.join("parity/paper-results");
    let paper = tabcontam::analyze::paper::read_paper_results(&results_dir, "paper-").unwrap();
    let own = tabcontam::analyze::paper::read_paper_results(&results_dir, "").unwrap();
    let mut store = Store::open(&cache).unwrap();
    for m in &paper.models {
        store.upsert_model(m).unwrap();
    }
    store.import_cells(&paper.cells).unwrap();
    let catalog = Catalog::open(Some(&data)).unwrap();
    let serialization = Serialization::builtin("the-is").unwrap();
    let pack = PromptPack::builtin();
    let dictionary = Dictionary::shipped().unwrap();
    let run = store.begin_run("paper-grid", "# synthetic").unwrap();
    let mut n = 0usize;
    let mut trial_count = 0usize;
    for dataset_id in PAPER_DATASETS {
        let dataset = catalog.load(dataset_id).unwrap();
        store
            .upsert_dataset(&DatasetRow {
                id: dataset.id.clone(),
                name: dataset.id.clone(),
                variant: None,
                checksum: "0".into(),
                updated_at: None,
            })
            .unwrap();
        let ctx = ProbeContext {
            dataset: &dataset,
            serialization: &serialization,
            seed: 0,
            pack: &pack,
            variant: Variant::Paper,
        };
        let probes: Vec<_> = TestId::PAPER
            .iter()
            .map(|&t| (t, build(t, &ctx).unwrap()))
            .collect();
        for model in &own.models {
            let mut requests = Vec::new();
            let mut trials = Vec::new();
            let mut cells = Vec::new();
            for (test, probe) in &probes {
                let mut verdicts = Vec::new();
                for prompt in &probe.prompts {
                    n += 1;
                    let text = output_for(*test, n);
                    let request = Request {
                        model: model.identity.clone(),
                        api: ApiMode::Chat,
                        prompt: prompt.text.clone(),
                        params: GenerationParams {
                            max_tokens: prompt.max_tokens,
                            temperature: 0.0,
                            top_p: None,
                            seed: Some(0),
                            stop: vec![],
                            stop_rule: None,
                        },
                        sample: 0,
                    };
                    let verdict =
                        judge(&prompt.expected, &text, &dictionary, Alg1Profile::Hunspell);
                    trials.push(TrialRow {
                        model: model.id.clone(),
                        dataset: dataset.id.clone(),
                        test: *test,
                        serialization: prompt.serialization.clone(),
                        seed: 0,
                        sample: 0,
                        trial: prompt.trial,
                        request_key: request.key(),
                        note: prompt.note.clone(),
                        expected: prompt.expected.clone(),
                        verdict,
                        echo: false,
                        run_id: None,
                    });
                    verdicts.push(verdict);
                    requests.push((
                        request,
                        Response {
                            text,
                            finish_reason: Some("stop".into()),
                            prompt_tokens: None,
                            completion_tokens: None,
                            latency_ms: 1,
                            served_model: None,
                            served_fingerprint: None,
                        },
                    ));
                }
                let result = aggregate(*test, &verdicts);
                cells.push(CellRow {
                    source: OWN_SOURCE.to_string(),
                    model: model.id.clone(),
                    dataset: dataset.id.clone(),
                    test: *test,
                    serialization: test.serializes_rows().then(|| "the-is".to_string()),
                    seed: 0,
                    result,
                    samples: vec![result],
                    skipped: probe.skipped.clone(),
                    echo_trials: None,
                    chance: None,
                    run_id: None,
                });
            }
            trial_count += trials.len();
            store
                .put_responses(requests.iter().map(|(q, r)| (q, r)))
                .unwrap();
            store.put_trials(run, &trials).unwrap();
            store.put_cells(run, &cells).unwrap();
            store.upsert_model(model).unwrap();
        }
    }
    drop(store);
    let store = Store::open_read_only(&cache).unwrap();
    let analysis = analyze_store(&store, &Options::default()).unwrap();
    let html = rendered(&analysis, "report.html");
    let explorer = html.len() - html.find(r#"<h2 id="explorer">"#).unwrap();
    // Kept for a look in a browser.
    let keep = Path::new(env!("CARGO_TARGET_TMPDIR")).join("paper-grid-report.html");
    std::fs::write(&keep, &html).unwrap();
    let shown: usize = analysis.explorer.iter().map(|c| c.trials.len()).sum();
    let echoes: usize = analysis.explorer.iter().map(|c| c.echo_trials).sum();
    eprintln!(
        "paper grid: {} series ({} ours), {} cells with trials, {trial_count} trials ({shown} shown, {echoes} echoes); report.html {:.1} MB, of which the trial explorer {:.1} MB",
        analysis.series.len(),
        own.models.len(),
        analysis.explorer.len(),
        html.len() as f64 / 1e6,
        explorer as f64 / 1e6
    );
    assert_eq!(own.models.len(), 16);
    // Every cell with trials (wine has no categorical feature for tests 5–6).
    assert_eq!(analysis.explorer.len(), 16 * 9 * 12 - 16 * 2);
    assert!(
        html.len() < 8_000_000,
        "report.html is {} bytes",
        html.len()
    );
    assert!(analysis.explorer.iter().all(|c| c.trials.len() <= 5));

    // Without the explorer (`report --explorer-trials 0`) the page is the tables and figures.
    let bare = analyze_store(
        &store,
        &Options {
            explorer_trials: 0,
            ..Options::default()
        },
    )
    .unwrap();
    assert!(bare.explorer.is_empty());
    let bare_html = rendered(&bare, "report.html");
    eprintln!(
        "paper grid without the explorer: report.html {:.1} MB",
        bare_html.len() as f64 / 1e6
    );
}

/// Issue 26 item 5 and issue 27 item 4, from a real run (`tabcontam run` against a loopback
/// server: `echo` repeats its prompt, `iris-expert` names iris's columns): tests 7–9 cells
/// with a chance level join the significance family with their verdict's p-value,
/// `q_value` sits beside Holm's, `--scoring fdr` counts exactly the passes of tests 1–9
/// with q < 0.05 (none of tests 1–6), and `--format md` writes Table 2 and the
/// significance table as Markdown.
#[test]
fn fdr_scoring_and_report_md_on_a_run_with_chance_levels() {
    use mock_server::{Fault, MockConfig, Plan};
    let env = Env::new();
    let server = env.server(MockConfig::new().script(|request| {
        let fault = match request.json["model"] == "iris-expert" {
            true => Fault::Body(serde_json::json!({
                "id": "x", "object": "text_completion", "model": "iris-expert",
                "choices": [{"index": 0, "logprobs": null, "finish_reason": "stop",
                    "text": "Yes. sepal_length, sepal_width, petal_length, petal_width, species: Iris-setosa"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}
            })),
            false => Fault::None,
        };
        Plan {
            latency: std::time::Duration::ZERO,
            fault,
        }
    }));
    let mut spec = String::from(
        "name = \"fdr\"\nseed = 0\ndatasets = [\"iris\"]\nserializations = [\"the-is\"]\n\
         tests = [\"feature-list-uninformed\", \"feature-values-uninformed\", \"full-completion\", \
         \"feature-completion\", \"membership\", \"classify-0shot\"]\n",
    );
    for model in ["echo", "iris-expert"] {
        spec.push_str(&format!(
            "\n[[models]]\nid = \"{model}\"\nbackend = \"openai-compatible\"\napi = \"completions\"\n\
             base_url = \"{}/v1\"\nconcurrency = 8\ntimeout_s = 5\n",
            server.url()
        ));
    }
    let spec_path = env.spec("fdr.toml", &spec);
    let cache = env.cache();
    let tabcontam = |args: &[&str]| {
        env.ok(args);
    };
    let cache_arg = cache.to_str().unwrap();
    tabcontam(&[
        "run",
        spec_path.to_str().unwrap(),
        "--cache",
        cache_arg,
        "--quiet",
    ]);
    let report = |scoring: &str| {
        let out = env.path(scoring);
        tabcontam(&[
            "report",
            "--cache",
            cache_arg,
            "--out",
            out.to_str().unwrap(),
            "--format",
            "json,md",
            "--scoring",
            scoring,
        ]);
        let scores: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("scores.json")).unwrap())
                .unwrap();
        (
            scores,
            std::fs::read_to_string(out.join("report.md")).unwrap(),
        )
    };
    let (paper, paper_md) = report("paper");
    let (fdr, fdr_md) = report("fdr");

    // The family, from the cache: tests 10–12 by their per-trial chance, tests 7–9 by a
    // computable cell chance level; tests 1–6 never.
    let cells = Store::open_read_only(&cache).unwrap().cells().unwrap();
    let significance = paper["significance"].as_array().unwrap();
    let in_family = |c: &&CellRow| {
        c.result.p_value().is_some()
            || (TestId::CONTAMINATION.contains(&c.test)
                && c.skipped.is_none()
                && c.chance.as_ref().is_some_and(|ch| ch.level.is_some()))
    };
    assert_eq!(significance.len(), cells.iter().filter(in_family).count());
    let mut verdict_cells = 0;
    for row in significance {
        let cell = cells
            .iter()
            .find(|c| c.model == row["model"] && c.test.id() == row["test"])
            .unwrap();
        let (p, q, holm) = (
            row["p_value"].as_f64().unwrap(),
            row["q_value"].as_f64().unwrap(),
            row["p_holm"].as_f64().unwrap(),
        );
        // (BH's family is the whole report, Holm's one model: q may exceed p(Holm).)
        assert!(p <= q + 1e-15 && p <= holm + 1e-15 && q <= 1.0, "{row}");
        if cell.test.number() <= 9 {
            assert!(cell.test.number() >= 7, "{row}");
            verdict_cells += 1;
            let chance = cell.chance.as_ref().unwrap();
            let level = chance.level.unwrap();
            let level = tabcontam::probe::chance::cell_bound(&chance.basis)
                .map_or(level, |bound| level.max(bound));
            assert_eq!(row["chance_of"], "cell");
            let expected = if cell.result.passed { level } else { 1.0 };
            assert!((p - expected).abs() < 1e-12, "{row}: expected p {expected}");
        } else {
            assert_eq!(row["chance_of"], "trial");
            assert!((p - cell.result.p_value().unwrap()).abs() < 1e-12, "{row}");
        }
    }
    assert_eq!(verdict_cells, 4, "tests 8 and 9 of both models");
    // BH is monotone in p, and the largest p keeps its value.
    for a in significance {
        for b in significance {
            if a["p_value"].as_f64() < b["p_value"].as_f64() {
                assert!(a["q_value"].as_f64() <= b["q_value"].as_f64(), "{a} {b}");
            }
        }
    }
    let top = significance
        .iter()
        .max_by(|a, b| {
            a["p_value"]
                .as_f64()
                .unwrap()
                .total_cmp(&b["p_value"].as_f64().unwrap())
        })
        .unwrap();
    assert_eq!(top["q_value"], top["p_value"]);
    // p and q come from the paper's verdicts whatever the profile.
    assert_eq!(paper["significance"], fdr["significance"]);

    // Table 2 under fdr: exactly the passed tests 1–9 cells with q < 0.05 of each model.
    assert!(
        cells
            .iter()
            .any(|c| c.test.number() <= 6 && c.result.passed),
        "some test 1–6 cell passes by the paper's rule, so fdr has something to drop"
    );
    assert_eq!(fdr["scoring"], "fdr");
    for (p_model, f_model) in paper["models"]
        .as_array()
        .unwrap()
        .iter()
        .zip(fdr["models"].as_array().unwrap())
    {
        let id = f_model["id"].as_str().unwrap();
        let significant = significance
            .iter()
            .filter(|r| {
                r["model"] == id
                    && r["number"].as_u64().unwrap() <= 9
                    && r["passed"] == true
                    && r["q_value"].as_f64().unwrap() < 0.05
            })
            .count();
        assert_eq!(f_model["contamination_passed"], significant, "{id}");
        let paper_model = paper["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .unwrap();
        assert!(
            paper_model["contamination_passed"].as_u64()
                >= f_model["contamination_passed"].as_u64()
        );
        assert_eq!(paper_model["membership"], f_model["membership"], "{id}");
        assert_eq!(
            p_model["contamination_cells"],
            f_model["contamination_cells"]
        );
    }

    // report.md: Table 2 as scores.json ranks it, then every significance row with its q.
    for (md, scores) in [(&paper_md, &paper), (&fdr_md, &fdr)] {
        assert_table_shapes(md);
        assert!(
            md.contains("## Table 2: models ranked by contamination"),
            "{md}"
        );
        for m in scores["models"].as_array().unwrap() {
            let prefix = format!(
                "| {} | {} | tabcontam | ",
                m["rank"],
                m["label"].as_str().unwrap()
            );
            let row = md
                .lines()
                .find(|l| l.starts_with(&prefix))
                .unwrap_or_else(|| panic!("no `{prefix}` row in\n{md}"));
            let fraction = format!(
                " {}/{} ",
                m["contamination_passed"], m["contamination_cells"]
            );
            assert!(row.contains(&fraction), "{row}");
        }
        let section = &md[md.find("## Significance").unwrap()..];
        let rows: Vec<&str> = section
            .lines()
            .filter(|l| l.starts_with("| "))
            .skip(2)
            .collect();
        assert_eq!(rows.len(), significance.len(), "{section}");
        assert!(section.contains("| p | p (Holm) | q (BH) |"), "{section}");
        for (line, row) in rows.iter().zip(significance) {
            let q = row["q_value"].as_f64().unwrap();
            let shown = if q < 0.001 {
                "<0.001".to_string()
            } else {
                format!("{q:.3}")
            };
            let cells: Vec<&str> = line.split(" | ").collect();
            assert_eq!(cells[7], shown, "{line}");
        }
    }
    eprintln!("{fdr_md}");
    assert!(fdr_md.contains("Scoring profile: fdr: a cell of tests 1–9 passes only"));
    assert!(paper_md.contains("Scoring profile: paper: "));
}
