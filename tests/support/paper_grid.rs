//! The paper grid as a cache: the paper's published per-cell results imported (source
//! `paper`, ids `paper-…`), and beside them our own cells for the same 16 models × nine
//! datasets × twelve tests under the default template, every prompt built from the paper's
//! files, every answer a real output of the parity records for its kind of test (tests
//! 10–12: short answers), judged by the real rules and stored through the store API as a
//! run stores them.
//!
//! Include it with `#[path = "support/paper_grid.rs"] mod paper_grid;` (benches:
//! `#[path = "../tests/support/paper_grid.rs"]`); it reads `../shared` (see
//! `support/skip.rs::shared_dir`), so check [`present`] through `skip::require` first.

#![allow(dead_code)] // each test binary uses a different part

use std::path::Path;

use tabcontam::dataset::Serialization;
use tabcontam::dataset::catalog::Catalog;
use tabcontam::decide::{Alg1Profile, Dictionary};
use tabcontam::llm::{ApiMode, GenerationParams, Request, Response};
use tabcontam::probe::{ProbeContext, PromptPack, TestId, Variant, aggregate, judge};
use tabcontam::store::{CellRow, DatasetRow, OWN_SOURCE, Store, TrialRow};

/// The paper's nine datasets, as `experiments/paper.toml` lists them.
pub const DATASETS: [&str; 9] = [
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

/// Whether `shared` holds what [`build`] reads: the paper's data files, its published
/// results and the parity records.
pub fn present(shared: &Path) -> bool {
    shared.join("datasets/paper/thyroid_diff.csv").is_file()
        && shared.join("parity/algorithm2.jsonl").is_file()
        && shared.join("parity/paper-results/gpt4o.csv").is_file()
}

/// What [`build`] stored.
pub struct Grid {
    /// Our models (the imported ones are as many, under `paper-` ids).
    pub own_models: usize,
    pub cells: usize,
    pub trials: usize,
}

/// Writes the paper grid into a new cache at `cache`.
pub fn build(cache: &Path, shared: &Path) -> Grid {
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

    let results_dir = shared.join("parity/paper-results");
    let paper = tabcontam::analyze::paper::read_paper_results(&results_dir, "paper-").unwrap();
    let own = tabcontam::analyze::paper::read_paper_results(&results_dir, "").unwrap();
    let mut store = Store::open(cache).unwrap();
    for m in &paper.models {
        store.upsert_model(m).unwrap();
    }
    store.import_cells(&paper.cells).unwrap();
    let catalog = Catalog::open(Some(&shared.join("datasets/paper"))).unwrap();
    let serialization = Serialization::builtin("the-is").unwrap();
    let pack = PromptPack::builtin();
    let dictionary = Dictionary::shipped().unwrap();
    let run = store
        .begin_run(
            "paper-grid",
            "# The paper grid, stored by tests/support/paper_grid.rs\nname = \"paper-grid\"\n",
        )
        .unwrap();
    let (mut n, mut trial_count, mut cell_count) = (0usize, 0usize, paper.cells.len());
    for dataset_id in DATASETS {
        let (dataset, checksum) = catalog.load_with_checksum(dataset_id).unwrap();
        store
            .upsert_dataset(&DatasetRow {
                id: dataset.id.clone(),
                name: dataset.name.clone(),
                variant: Some(dataset.variant.clone()),
                checksum,
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
            .map(|&t| (t, tabcontam::probe::build(t, &ctx).unwrap()))
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
            cell_count += cells.len();
            store
                .put_responses(requests.iter().map(|(q, r)| (q, r)))
                .unwrap();
            store.put_trials(run, &trials).unwrap();
            store.put_cells(run, &cells).unwrap();
            store.upsert_model(model).unwrap();
        }
    }
    Grid {
        own_models: own.models.len(),
        cells: cell_count,
        trials: trial_count,
    }
}
