//! Turning cached responses into trial verdicts and cell results (pure, given responses).

use std::collections::HashMap;

use super::plan::{NO_SERIALIZATION, Plan};
use super::spec::Spec;
use crate::decide::{Alg1Profile, Dictionary};
use crate::probe::{self, TrialVerdict};
use crate::request::{RequestKey, Response};
use crate::store::{CellRow, OWN_SOURCE, TrialRow};

/// Verdicts of the trials of every complete cell, and those cells.
pub struct Decisions {
    /// Every trial of every cell in `cells` (and nothing else: a cell's stored trials are
    /// exactly those of its latest decision).
    pub trials: Vec<TrialRow>,
    pub cells: Vec<CellRow>,
    /// Cells left undecided because some of their trials have no response yet.
    pub incomplete_cells: usize,
}

/// Decides every complete cell of the plan from `responses`. A cell is only written when
/// all its trials are answered, so a partial run never publishes a partial cell.
///
/// With several samples (SPEC §5), the test's rule is applied to each sample's trials on
/// its own ([`probe::decide_cell`]), and the cell combines the samples with
/// [`probe::aggregate_samples`]: it passes when any sample passes.
pub fn decide(
    spec: &Spec,
    plan: &Plan,
    responses: &HashMap<RequestKey, Response>,
    dictionary: &Dictionary,
    profile: Alg1Profile,
) -> Decisions {
    let mut trials = Vec::new();
    let mut cells = Vec::new();
    let mut incomplete_cells = 0;
    // The same output judged against the same expectation is decided once (with its echo
    // guard: both depend on the prompt and the output only).
    let mut memo: HashMap<(RequestKey, *const probe::Prompt), (TrialVerdict, bool)> =
        HashMap::new();
    for cell in &plan.cells {
        if cell
            .trials
            .iter()
            .any(|planned| !responses.contains_key(&planned.key))
        {
            incomplete_cells += 1;
            continue;
        }
        let model_id = &spec.models[cell.model].id;
        let samples = spec.models[cell.model].samples.max(1) as usize;
        let serialization =
            (cell.serialization != NO_SERIALIZATION).then(|| cell.serialization.clone());
        let mut judged: Vec<Vec<probe::JudgedTrial<'_>>> =
            (0..samples).map(|_| Vec::new()).collect();
        let mut echo_trials = 0;
        // Every sample's (expectation, verdict), for the cell's chance level.
        let mut all_verdicts = Vec::with_capacity(cell.trials.len());
        for planned in &cell.trials {
            let response = &responses[&planned.key];
            let (verdict, echo) = *memo
                .entry((planned.key, std::sync::Arc::as_ptr(&planned.prompt)))
                .or_insert_with(|| {
                    let expected = &planned.prompt.expected;
                    let verdict = probe::judge(expected, &response.text, dictionary, profile);
                    let echo = probe::echo::is_echo(
                        &planned.prompt.text,
                        &response.text,
                        expected,
                        verdict,
                        dictionary,
                        profile,
                    );
                    (verdict, echo)
                });
            judged[planned.sample as usize].push(probe::JudgedTrial {
                expected: &planned.prompt.expected,
                output: &response.text,
                verdict,
            });
            echo_trials += usize::from(echo);
            all_verdicts.push((&planned.prompt.expected, verdict));
            trials.push(TrialRow {
                model: model_id.clone(),
                dataset: cell.dataset.clone(),
                test: cell.test,
                serialization: serialization.clone(),
                seed: spec.seed,
                sample: planned.sample,
                trial: planned.prompt.trial,
                request_key: planned.key,
                note: planned.prompt.note.clone(),
                expected: planned.prompt.expected.clone(),
                verdict,
                echo,
                run_id: None,
            });
        }
        let per_sample: Vec<probe::CellResult> = judged
            .iter()
            .map(|trials| probe::decide_cell(cell.test, trials, dictionary, profile))
            .collect();
        cells.push(CellRow {
            source: OWN_SOURCE.to_string(),
            model: model_id.clone(),
            dataset: cell.dataset.clone(),
            test: cell.test,
            serialization,
            seed: spec.seed,
            result: probe::aggregate_samples(cell.test, &per_sample),
            samples: per_sample,
            skipped: cell.skipped.clone(),
            echo_trials: Some(echo_trials),
            chance: Some(probe::chance::chance_level(
                cell.test,
                &cell.guess,
                &all_verdicts,
                samples,
            )),
            run_id: None,
        });
    }
    Decisions {
        trials,
        cells,
        incomplete_cells,
    }
}
