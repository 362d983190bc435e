//! Turning cached responses into trial verdicts and cell results (pure, given responses).

use std::collections::HashMap;

use super::plan::{NO_SERIALIZATION, Plan};
use super::spec::Spec;
use crate::decide::{Alg1Profile, Dictionary};
use crate::llm::{RequestKey, Response};
use crate::probe::{self, TrialVerdict};
use crate::store::{CellRow, OWN_SOURCE, TrialRow};

/// Verdicts of every trial whose response is known, and the cells they complete.
pub struct Decisions {
    pub trials: Vec<TrialRow>,
    pub cells: Vec<CellRow>,
    /// Cells left undecided because some of their trials have no response yet.
    pub incomplete_cells: usize,
}

/// Decides every trial of the plan from `responses`. A cell is only written when all its
/// trials are answered, so a partial run never publishes a partial cell.
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
    // The same output judged against the same expectation is decided once.
    let mut memo: HashMap<(RequestKey, *const probe::Prompt), TrialVerdict> = HashMap::new();
    for cell in &plan.cells {
        let model_id = &spec.models[cell.model].id;
        let serialization =
            (cell.serialization != NO_SERIALIZATION).then(|| cell.serialization.clone());
        let mut verdicts = Vec::with_capacity(cell.trials.len());
        let mut complete = true;
        for planned in &cell.trials {
            let Some(response) = responses.get(&planned.key) else {
                complete = false;
                continue;
            };
            let verdict = *memo
                .entry((planned.key, std::sync::Arc::as_ptr(&planned.prompt)))
                .or_insert_with(|| {
                    probe::judge(
                        &planned.prompt.expected,
                        &response.text,
                        dictionary,
                        profile,
                    )
                });
            verdicts.push(verdict);
            trials.push(TrialRow {
                model: model_id.clone(),
                dataset: cell.dataset.clone(),
                test: cell.test,
                serialization: serialization.clone(),
                seed: spec.seed,
                // With several samples, trial indices stay distinct per sample.
                trial: planned.prompt.trial * spec.models[cell.model].samples + planned.sample,
                request_key: planned.key,
                note: planned.prompt.note.clone(),
                expected: planned.prompt.expected.clone(),
                verdict,
                run_id: None,
            });
        }
        if !complete {
            incomplete_cells += 1;
            continue;
        }
        cells.push(CellRow {
            source: OWN_SOURCE.to_string(),
            model: model_id.clone(),
            dataset: cell.dataset.clone(),
            test: cell.test,
            serialization,
            seed: spec.seed,
            result: probe::aggregate(cell.test, &verdicts),
            skipped: cell.skipped.clone(),
            run_id: None,
        });
    }
    Decisions {
        trials,
        cells,
        incomplete_cells,
    }
}
