//! Echo guard, chance level, strict scoring and the calibration analysis (issue 10, SPEC
//! §8) on real data: real prompts of the shipped iris file and of a generated synthetic
//! dataset, and a real `tabcontam run` of local models (a tiny llama written by the test)
//! whose exposure is declared by spec keys and by a checkpoint manifest.

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/tiny_llama.rs"]
mod tiny_llama;

use std::collections::HashMap;

use tabcontam::analyze::{Options, Scoring, analyze_store};
use tabcontam::dataset::catalog::Catalog;
use tabcontam::dataset::serialize::Serialization;
use tabcontam::decide::{Alg1Profile, Cell, Dictionary};
use tabcontam::probe::{self, Expected, ProbeContext, PromptPack, TestId, Variant};
use tabcontam::report::{self, Format};
use tabcontam::run::workflow::{RunSettings, run_experiment};
use tabcontam::store::{RunStatus, Store};

fn prompts(dataset: &str, test: TestId) -> Vec<probe::Prompt> {
    let catalog = Catalog::open(None).unwrap();
    let dataset = catalog.load(dataset).unwrap();
    let serialization = Serialization::builtin("the-is").unwrap();
    let pack = PromptPack::builtin();
    let ctx = ProbeContext {
        dataset: &dataset,
        serialization: &serialization,
        seed: 0,
        pack: &pack,
        variant: Variant::Paper,
    };
    probe::build(test, &ctx).unwrap().prompts
}

/// The issue's example: recognition from iris rows prints `Iris-setosa`-like values, so an
/// answer naming iris only repeats the prompt. On a synthetic dataset the rows do not name
/// it, so naming it is not an echo.
#[test]
fn naming_iris_after_rows_that_print_iris_values_is_an_echo() {
    let dictionary = Dictionary::shipped().unwrap();
    let iris = prompts("iris", TestId::RecognitionExamples);
    assert_eq!(iris.len(), 1);
    let prompt = &iris[0];
    assert!(
        prompt.text.contains("Iris-"),
        "the shipped iris rows print their species: {}",
        prompt.text
    );
    let output = " This is the Iris dataset.";
    let verdict = probe::judge(&prompt.expected, output, &dictionary, Alg1Profile::Hunspell);
    assert!(verdict.passed);
    assert!(probe::echo::is_echo(
        &prompt.text,
        output,
        &prompt.expected,
        verdict,
        &dictionary,
        Alg1Profile::Hunspell
    ));

    let synthetic = prompts("synthetic:11:40", TestId::RecognitionExamples);
    let Expected::Names { names } = &synthetic[0].expected else {
        panic!("recognition expects names")
    };
    let output = format!(" It is the {} dataset.", names[0]);
    let verdict = probe::judge(
        &synthetic[0].expected,
        &output,
        &dictionary,
        Alg1Profile::Hunspell,
    );
    assert!(verdict.passed);
    assert!(!probe::echo::is_echo(
        &synthetic[0].text,
        &output,
        &synthetic[0].expected,
        verdict,
        &dictionary,
        Alg1Profile::Hunspell
    ));
}

/// Share of the file's rows whose column value equals `value` numerically, counted by hand
/// from the CSV text (independently of the crate's table).
fn share(csv: &str, column: &str, value: f64) -> f64 {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == column).unwrap();
    let rows: Vec<&str> = lines.filter(|l| !l.trim().is_empty()).collect();
    let equal = rows
        .iter()
        .filter(|l| l.split(',').nth(col).unwrap().parse::<f64>().unwrap() == value)
        .count();
    equal as f64 / rows.len() as f64
}

/// The issue's other example: feature completion on iris (sepal length, few distinct
/// values, any of 5 trials) passes by guessing with a probability the report states.
#[test]
fn chance_of_feature_completion_on_iris_is_the_guessers_any_of_five() {
    let prompts = prompts("iris", TestId::FeatureCompletion);
    assert_eq!(prompts.len(), 5);
    let catalog = Catalog::open(None).unwrap();
    let dataset = catalog.load("iris").unwrap();
    let csv = std::str::from_utf8(tabcontam::dataset::catalog::builtin_file("iris.csv").unwrap())
        .unwrap()
        .to_string();
    let mut none = 1.0;
    for p in &prompts {
        let Expected::Row { fields, .. } = &p.expected else {
            panic!("feature completion expects a row")
        };
        let [(column, value)] = fields.as_slice() else {
            panic!("one asked value")
        };
        let value = match value {
            Cell::Int(i) => *i as f64,
            Cell::Float(f) => *f,
            Cell::Text(t) => t.parse().unwrap(),
        };
        none *= 1.0 - share(&csv, column, value);
    }
    let by_hand = 1.0 - none;
    let the_is = Serialization::builtin("the-is").unwrap();
    let rates =
        probe::chance::guess_rates(TestId::FeatureCompletion, &dataset.table, &the_is, &prompts);
    let chance = probe::chance::chance_level(TestId::FeatureCompletion, &rates, &[], 1);
    let level = chance.level.unwrap();
    assert!((level - by_hand).abs() < 1e-12, "{level} vs {by_hand}");
    // Far above any significance threshold: a pass here is weak evidence.
    assert!(level > 0.05, "{level}");
    println!(
        "chance of feature-completion on iris: {level:.4} ({})",
        chance.basis
    );

    // Free-text tests say why they have none instead of inventing one.
    let recognition = prompts_of("iris", TestId::RecognitionFeatures, &dataset);
    let none = probe::chance::chance_level(TestId::RecognitionFeatures, &recognition, &[], 1);
    assert_eq!(none.level, None);
    assert!(none.basis.contains("free-text"));
}

fn prompts_of(
    name: &str,
    test: TestId,
    dataset: &tabcontam::dataset::Dataset,
) -> probe::chance::GuessRates {
    let the_is = Serialization::builtin("the-is").unwrap();
    probe::chance::guess_rates(test, &dataset.table, &the_is, &prompts(name, test))
}

fn binomial_tail_by_hand(n: u64, k: u64, p: f64) -> f64 {
    let mut total = 0.0;
    for i in k..=n {
        let mut choose = 1.0;
        for j in 0..i {
            choose *= (n - j) as f64 / (j + 1) as f64;
        }
        total += choose * p.powi(i as i32) * (1.0 - p).powi((n - i) as i32);
    }
    total
}

#[test]
fn a_run_of_models_with_declared_exposure_is_calibrated() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base");
    tiny_llama::write_tiny_llama(&base, tiny_llama::VOCAB);
    // A checkpoint folder as `tabcontam contaminate` writes it: weights and a manifest.
    let checkpoint = dir.path().join("checkpoint");
    tiny_llama::write_tiny_llama(&checkpoint, tiny_llama::VOCAB);
    let seen: Vec<usize> = (0..150).step_by(2).collect();
    std::fs::write(
        checkpoint.join("tabcontam-manifest.json"),
        serde_json::json!({
            "datasets": ["iris"],
            "epoch": 2,
            "rows": {"selection": "split", "trained_rows": seen},
        })
        .to_string(),
    )
    .unwrap();
    let spec = dir.path().join("study.toml");
    std::fs::write(
        &spec,
        format!(
            r#"name = "study"
datasets = ["iris", "synthetic:5:40"]
tests = ["recognition-examples", "feature-completion", "incomplete-completion", "membership"]
serializations = ["the-is"]

[[models]]
id = "base"
backend = "local"
model = "{base}"
trained_on = []
dose = 0

[[models]]
id = "declared-1"
backend = "local"
model = "{base}"
trained_on = ["iris", "synthetic:5:40"]
dose = 1
base = "base"

[[models]]
id = "manifest-2"
backend = "local"
model = "{checkpoint}"
base = "base"
"#,
            base = base.display(),
            checkpoint = checkpoint.display()
        ),
    )
    .unwrap();
    let cache = dir.path().join("cache.sqlite");
    let settings = RunSettings {
        spec,
        only_models: Vec::new(),
        data_dir: None,
        cache: cache.clone(),
        offline: true,
        progress: tabcontam::run::execute::ProgressMode::Off,
        shard: None,
        pin_served: false,
    };
    let run = run_experiment(&settings, &mut ()).unwrap();
    assert_eq!(run.status, RunStatus::Finished, "{run:?}");

    let store = Store::open_read_only(&cache).unwrap();
    let models = store.models().unwrap();
    let exposure: HashMap<&str, _> = models
        .iter()
        .map(|m| (m.id.as_str(), m.exposure.clone().unwrap()))
        .collect();
    assert_eq!(exposure["manifest-2"].trained_on, vec!["iris".to_string()]);
    assert_eq!(exposure["manifest-2"].dose, 2.0);
    assert_eq!(exposure["declared-1"].trained_on[1], "synthetic-5-40");

    let cells = store.cells().unwrap();
    let analysis = analyze_store(&store, &Options::default()).unwrap();
    let calibration = analysis.calibration.as_ref().expect("a study");
    assert_eq!(calibration.doses, vec![1.0, 2.0]);
    for t in &calibration.tests {
        let test = TestId::parse(&t.test).unwrap();
        let of_test: Vec<_> = cells
            .iter()
            .filter(|c| c.test == test && c.skipped.is_none())
            .collect();
        if of_test.is_empty() {
            continue;
        }
        // Positives: declared-1 on both datasets (dose 1), manifest-2 on iris (dose 2).
        let positives = |model: &str, datasets: &[&str]| {
            of_test
                .iter()
                .filter(|c| c.model == model && datasets.contains(&c.dataset.as_str()))
                .collect::<Vec<_>>()
        };
        let dose1 = positives("declared-1", &["iris", "synthetic-5-40"]);
        let dose2 = positives("manifest-2", &["iris"]);
        assert_eq!(t.sensitivity[0].sensitivity.total, dose1.len() as u64);
        assert_eq!(
            t.sensitivity[0].sensitivity.hits,
            dose1.iter().filter(|c| c.result.passed).count() as u64
        );
        assert_eq!(t.sensitivity[1].sensitivity.total, dose2.len() as u64);
        // Negatives: base on both, manifest-2 on the synthetic one.
        let negatives: Vec<_> = of_test
            .iter()
            .filter(|c| c.model == "base" || (c.model == "manifest-2" && c.dataset != "iris"))
            .collect();
        assert_eq!(t.false_positives.total, negatives.len() as u64);
        assert_eq!(
            t.false_positives.hits,
            negatives.iter().filter(|c| c.result.passed).count() as u64
        );
        assert_eq!(t.synthetic_false_positives.total, 2);
        assert!(t.sentence.starts_with(&t.test), "{}", t.sentence);
        // The minimum detectable dose is the first dose whose Wilson lower bound clears
        // the false-positive rate's upper bound.
        let ceiling = t.false_positives.interval.unwrap().high;
        let first_clear = t
            .sensitivity
            .iter()
            .find(|d| d.sensitivity.interval.is_some_and(|i| i.low > ceiling))
            .map(|d| d.dose);
        assert_eq!(t.minimum_detectable_dose, first_clear, "{t:?}");
    }
    // The manifest's split maps membership trials to rows seen and held out.
    let rows = &calibration.membership_rows;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].model, "manifest-2");
    assert_eq!(rows[0].seen.total + rows[0].held_out.total, 100);
    assert!(rows[0].seen.total > 20 && rows[0].held_out.total > 20);
    assert_eq!(calibration.flips.len(), 2);

    // Every cell carries its evidence: membership's chance is the binomial tail vs 0.5.
    for cell in cells.iter().filter(|c| c.test == TestId::Membership) {
        let chance = cell.chance.as_ref().unwrap().level.unwrap();
        let by_hand = binomial_tail_by_hand(
            cell.result.trials as u64,
            cell.result.passed_trials as u64,
            0.5,
        );
        assert!((chance - by_hand).abs() < 1e-9, "{chance} vs {by_hand}");
        assert_eq!(cell.echo_trials, Some(0));
    }
    let evidence_of = |model: &str, dataset: &str, test: &str| {
        analysis
            .evidence
            .iter()
            .find(|e| e.model == model && e.dataset == dataset && e.test == test)
            .unwrap()
    };
    let fc = evidence_of("base", "iris", "feature-completion");
    assert!(fc.chance.unwrap() > 0.05);
    assert!(fc.summary.contains("chance"), "{}", fc.summary);

    // Strict never passes more than the paper's rule.
    let strict = analyze_store(
        &store,
        &Options {
            scoring: Scoring::Strict,
            ..Options::default()
        },
    )
    .unwrap();
    for (paper, strict) in analysis.series.iter().zip(&strict.series) {
        assert!(strict.passed <= paper.passed);
    }

    // Every format shows it.
    let files = report::render(
        &analysis,
        &[Format::Json, Format::Html, Format::Latex, Format::Csv],
        &report::Options::default(),
    )
    .unwrap();
    let file = |name: &str| {
        files
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.contents.clone())
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let json: serde_json::Value = serde_json::from_str(&file("scores.json")).unwrap();
    assert_eq!(json["calibration"]["doses"], serde_json::json!([1.0, 2.0]));
    assert!(json["evidence"].as_array().unwrap().len() >= cells.len());
    assert!(file("report.html").contains("Calibration: how often each test catches"));
    assert!(file("report.html").contains(&calibration.tests[3].sentence));
    assert!(file("report.html").contains("Minimum detectable dose (exposures;"));
    assert!(file("report.tex").contains("\\section{Calibration"));
    assert!(file("calibration.csv").starts_with("test,measure,dose"));
    assert!(file("evidence.csv").contains("feature-completion"));

    // And the results site: its calibration page, linked from every page.
    let site = report::site::render(
        &analysis,
        &report::site::Options {
            cache: "cache.sqlite".into(),
        },
    )
    .unwrap();
    let page = |name: &str| &site.iter().find(|f| f.name == name).unwrap().contents;
    assert!(page("calibration.html").contains("Calibration: how often each test catches"));
    assert!(page("calibration.html").contains(&calibration.tests[3].sentence));
    assert!(page("index.html").contains(r#"<a href="calibration.html">Calibration</a>"#));
}

/// `tabcontam contaminate` killed mid-run (SIGKILL, after a few saved steps) continues from
/// its resume state and writes the same checkpoint, byte for byte, and the same loss log as
/// a run that was never interrupted. The finished series keeps its final state, and more
/// epochs of the same inputs continue from it: the same bytes as a longer run from the start.
#[test]
fn a_killed_contaminate_resumes_and_writes_the_uninterrupted_checkpoint() {
    use std::process::Stdio;
    let env = cli_env::Env::new();
    let model = env.path("tiny");
    tiny_llama::write_tiny_llama(&model, tiny_llama::VOCAB);
    let contaminate_epochs = |out: &std::path::Path, epochs: &str| {
        let mut command = env.command(&[
            "contaminate",
            "--dataset",
            "iris",
            "--epochs",
            epochs,
            "--seq-len",
            "48",
            "--batch-size",
            "2",
            "--lr",
            "1e-3",
            "--resume-every",
            "0",
        ]);
        command
            .arg("--model")
            .arg(&model)
            .arg("--out")
            .arg(out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        command
    };
    let contaminate = |out: &std::path::Path| contaminate_epochs(out, "6");
    let whole = env.path("whole");
    let done = contaminate(&whole).output().unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );

    let killed = env.path("killed");
    let mut child = contaminate(&killed).spawn().unwrap();
    let state = killed.join("resume").join("state.json");
    let saved_step = loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("contaminate ended ({status}) before a resume state past step 3 was seen");
        }
        let step = std::fs::read_to_string(&state)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["step"].as_u64());
        if let Some(step) = step.filter(|&s| s >= 3) {
            child.kill().unwrap();
            child.wait().unwrap();
            break step;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    let last = |out: &std::path::Path| out.join("epoch-006").join("model.safetensors");
    assert!(
        !last(&killed).exists(),
        "killed after step {saved_step}, yet complete"
    );

    let resumed = contaminate(&killed).output().unwrap();
    let log = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{log}");
    assert!(log.contains("resuming from epoch"), "{log}");
    assert_eq!(
        std::fs::read(last(&killed)).unwrap(),
        std::fs::read(last(&whole)).unwrap(),
        "the resumed checkpoint differs from the uninterrupted one (killed after step {saved_step})"
    );
    // The loss log: every step once, the same losses (the seconds column differs).
    let steps = |out: &std::path::Path| -> Vec<String> {
        std::fs::read_to_string(out.join("loss.csv"))
            .unwrap()
            .lines()
            .map(|l| l.rsplit_once(',').unwrap().0.to_string())
            .collect()
    };
    assert_eq!(steps(&killed), steps(&whole));
    assert!(
        log.contains("kept the state after epoch 6"),
        "the final state stays: {log}"
    );
    // It holds the optimizer's moments; its weights are the last checkpoint's.
    let final_state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(final_state["weights_in"]["checkpoint"], "epoch-006");

    // Two epochs more: continued from the final state, the same checkpoint and loss log as
    // eight epochs from the start.
    let longer = env.path("longer");
    let done = contaminate_epochs(&longer, "8").output().unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let extended = contaminate_epochs(&killed, "8").output().unwrap();
    let log = String::from_utf8_lossy(&extended.stderr);
    assert!(extended.status.success(), "{log}");
    assert!(log.contains("resuming from epoch 6"), "{log}");
    assert!(
        !log.contains("epoch 6/8 step"),
        "epoch 6 trained again: {log}"
    );
    let eighth = |out: &std::path::Path| out.join("epoch-008").join("model.safetensors");
    assert_eq!(
        std::fs::read(eighth(&killed)).unwrap(),
        std::fs::read(eighth(&longer)).unwrap(),
        "continuing a finished series differs from training it longer"
    );
    assert_eq!(steps(&killed), steps(&longer));

    // A checkpoint changed after the final state named it is not continued from: a one-line
    // error naming it and the fix, and no epoch trained.
    let weights = last(&whole);
    let mut bytes = std::fs::read(&weights).unwrap();
    let end = bytes.len() - 1;
    bytes[end] ^= 1;
    std::fs::write(&weights, bytes).unwrap();
    let refused = contaminate_epochs(&whole, "8").output().unwrap();
    let log = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{log}");
    let error = log
        .lines()
        .find(|l| l.contains("error"))
        .unwrap_or_default();
    assert!(
        error.contains("epoch-006")
            && error.contains("has changed since")
            && error.contains("delete"),
        "{log}"
    );
    assert!(!whole.join("epoch-007").exists(), "{log}");
}

/// `--lr-schedule cosine` decays the learning rate over the series: the weights differ from
/// a constant rate's, the manifest says so, and the epochs become inputs (another digest).
/// An unknown schedule is a one-line error naming the flag, and nothing is written.
#[test]
fn a_cosine_schedule_trains_other_weights_and_is_an_input() {
    let env = cli_env::Env::new();
    let model = env.path("tiny");
    tiny_llama::write_tiny_llama(&model, tiny_llama::VOCAB);
    let contaminate = |out: &str, schedule: &str| {
        let mut command = env.command(&[
            "contaminate",
            "--dataset",
            "iris",
            "--epochs",
            "2",
            "--seq-len",
            "48",
            "--lr",
            "1e-3",
            "--lr-schedule",
            schedule,
            "--json",
        ]);
        command
            .arg("--model")
            .arg(&model)
            .arg("--out")
            .arg(env.path(out));
        command.output().unwrap()
    };
    let manifest = |out: &std::path::Path| -> serde_json::Value {
        let text =
            std::fs::read_to_string(out.join("epoch-002").join(tabcontam::train::MANIFEST_FILE))
                .unwrap();
        serde_json::from_str(&text).unwrap()
    };
    let weights = |out: &std::path::Path| {
        std::fs::read(out.join("epoch-002").join("model.safetensors")).unwrap()
    };
    for (out, schedule) in [("constant", "constant"), ("cosine", "cosine")] {
        let done = contaminate(out, schedule);
        assert!(
            done.status.success(),
            "{}",
            String::from_utf8_lossy(&done.stderr)
        );
    }
    let (constant, cosine) = (env.path("constant"), env.path("cosine"));
    assert_ne!(
        weights(&constant),
        weights(&cosine),
        "the schedule changed nothing"
    );
    assert_eq!(
        manifest(&cosine)["lr_schedule"],
        "cosine from lr to 0.1 × lr over 2 epoch(s)"
    );
    assert!(manifest(&constant).get("lr_schedule").is_none());
    // Only a constant-rate series keeps its final state: a decayed one cannot be continued.
    assert!(constant.join("resume").exists());
    assert!(!cosine.join("resume").exists());
    assert_ne!(
        manifest(&constant)["inputs_digest"],
        manifest(&cosine)["inputs_digest"]
    );

    let refused = contaminate("linear", "linear");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--lr-schedule") && stderr.contains("`constant` or `cosine`"),
        "{stderr}"
    );
    assert!(!env.path("linear").exists(), "nothing written");
}
