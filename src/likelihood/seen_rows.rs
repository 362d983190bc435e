//! Which rows were seen, with a false-discovery guarantee (Liu et al., "Provable Training
//! Data Identification for Large Language Models", ICML 2026): each candidate row's
//! detector score gets a conformal p-value against rows known to be unseen, and
//! Benjamini–Hochberg on those p-values selects the rows called seen with an expected
//! false-identification rate of at most q.
//!
//! A reference row is itself judged leave-one-out (against the other reference rows), so
//! every row of a checkpoint's dataset gets a p-value and the selection's false
//! identifications among held-out rows can be counted.
//!
//! Architecture Invariant: pure. Scores come in as numbers (higher = more likely seen).

use serde::Serialize;

/// One judged row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowJudgement {
    /// The row's index in the dataset file.
    pub row: usize,
    pub score: f64,
    /// Whether the row is one of the references (known unseen).
    pub reference: bool,
    /// Conformal p-value: (1 + #{references scoring ≥ this row}) / (1 + references), the
    /// row itself left out of the references.
    pub p_value: f64,
    /// Benjamini–Hochberg q-value across every judged row.
    pub q_value: f64,
    /// `q_value ≤ fdr`.
    pub selected: bool,
    /// Whether the model was trained on the row, where a checkpoint's manifest says.
    pub trained: Option<bool>,
}

/// Judges `candidates` (rows whose status is asked) and `references` (rows known unseen,
/// judged leave-one-out) at false-discovery rate `fdr`. Rows come as (row index, score).
/// The result is in row order. Empty references give p = 1 for every row.
pub fn judge_rows(
    candidates: &[(usize, f64)],
    references: &[(usize, f64)],
    fdr: f64,
) -> Vec<RowJudgement> {
    judge(candidates, references, true, fdr)
}

/// [`judge_rows`] for candidates only: the references (texts known unseen that are not rows
/// of the dataset, such as perturbed copies) give the p-values and are not judged, so
/// Benjamini–Hochberg runs over the candidates alone.
pub fn judge_candidates(
    candidates: &[(usize, f64)],
    references: &[(usize, f64)],
    fdr: f64,
) -> Vec<RowJudgement> {
    judge(candidates, references, false, fdr)
}

/// Why no candidate can be selected whatever the scores, or `None`. A conformal p-value is
/// at least `1 / (references + 1)`, and Benjamini–Hochberg at rate `fdr` over `m` judged
/// rows selects `k` of them only if the k-th smallest p-value is at most `fdr · k / m`. The
/// most lenient case gives every candidate that smallest p-value, so a selection is possible
/// only if `1 / (references + 1) ≤ fdr · candidates / m`, where `m` counts the references too
/// when they are judged (leave-one-out, as for a checkpoint's held-out rows). A checkpoint
/// holding out 10 of 20 rows can never name a row at 0.1 (1/11 > 0.1 × 10/20): say so, with
/// the fix.
pub fn selection_floor(
    candidates: usize,
    references: usize,
    references_judged: bool,
    fdr: f64,
) -> Option<String> {
    let judged = |references: usize| candidates + if references_judged { references } else { 0 };
    let selectable = |references: usize| {
        candidates > 0
            && 1.0 / (references + 1) as f64 <= fdr * candidates as f64 / judged(references) as f64
    };
    if candidates == 0 || selectable(references) {
        return None;
    }
    let floor = 1.0 / (references + 1) as f64;
    let bound = fdr * candidates as f64 / judged(references) as f64;
    let lowest_fdr = judged(references) as f64 / (candidates as f64 * (references + 1) as f64);
    // Holding out more rows lowers the floor; when the references are judged they also widen
    // the family, so some candidate counts cannot reach the rate with any number of them.
    let fix = match (references + 1..=1_000_000).find(|&more| selectable(more)) {
        Some(needed) => format!("hold out at least {needed} rows, or use --fdr {lowest_fdr:.3}"),
        None => format!(
            "with {candidates} candidate rows no number of held-out rows reaches {fdr} (it takes more than 1/{fdr} candidates); use --fdr {lowest_fdr:.3}"
        ),
    };
    Some(format!(
        "with {references} references no p-value falls below 1/{} = {floor:.3}, above {fdr} x {candidates}/{} = {bound:.3} even if all {candidates} candidate rows reached it, so no row can be selected: {fix}",
        references + 1,
        judged(references),
    ))
}

fn judge(
    candidates: &[(usize, f64)],
    references: &[(usize, f64)],
    judge_references: bool,
    fdr: f64,
) -> Vec<RowJudgement> {
    let mut sorted: Vec<f64> = references.iter().map(|&(_, s)| s).collect();
    sorted.sort_by(f64::total_cmp);
    // #{references ≥ score}: the sorted tail from the first reference not below it.
    let at_least = |score: f64| sorted.len() - sorted.partition_point(|&r| r < score);
    let mut rows: Vec<RowJudgement> = candidates
        .iter()
        .map(|&(row, score)| (row, score, false))
        .chain(
            references
                .iter()
                .filter(|_| judge_references)
                .map(|&(row, score)| (row, score, true)),
        )
        .map(|(row, score, reference)| {
            // A reference counts itself once in `at_least`; leave it out.
            let (others_above, others) = match reference {
                true => (at_least(score) - 1, sorted.len() - 1),
                false => (at_least(score), sorted.len()),
            };
            RowJudgement {
                row,
                score,
                reference,
                p_value: (1 + others_above) as f64 / (1 + others) as f64,
                q_value: 1.0,
                selected: false,
                trained: None,
            }
        })
        .collect();
    let p: Vec<f64> = rows.iter().map(|r| r.p_value).collect();
    for (row, q) in rows
        .iter_mut()
        .zip(crate::significance::benjamini_hochberg(&p))
    {
        row.q_value = q;
        row.selected = q <= fdr;
    }
    rows.sort_by_key(|r| r.row);
    rows
}

/// The selection measured against the truth: of the rows selected, how many were
/// references (false identifications), and how many of the `trained` rows were found.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SelectionTruth {
    pub selected: usize,
    pub false_identifications: usize,
    /// false identifications / selected (0 when nothing is selected).
    pub false_identification_rate: f64,
    pub trained: usize,
    pub trained_found: usize,
    /// trained rows selected / trained rows.
    pub power: f64,
}

/// Scores a selection where every candidate is a row trained on and every reference a row
/// held out.
pub fn against_truth(rows: &[RowJudgement]) -> SelectionTruth {
    let selected = rows.iter().filter(|r| r.selected).count();
    let false_identifications = rows.iter().filter(|r| r.selected && r.reference).count();
    let trained = rows.iter().filter(|r| !r.reference).count();
    let trained_found = rows.iter().filter(|r| r.selected && !r.reference).count();
    SelectionTruth {
        selected,
        false_identifications,
        false_identification_rate: match selected {
            0 => 0.0,
            n => false_identifications as f64 / n as f64,
        },
        trained,
        trained_found,
        power: match trained {
            0 => 0.0,
            n => trained_found as f64 / n as f64,
        },
    }
}

/// Scores a selection whose references are not rows of the dataset (column-matched rows)
/// on a model whose trained rows are known (each judged row's `trained`): a selected row
/// not trained on is a false identification.
pub fn against_trained_rows(rows: &[RowJudgement]) -> SelectionTruth {
    let judged: Vec<RowJudgement> = rows
        .iter()
        .map(|r| RowJudgement {
            reference: r.trained == Some(false),
            ..r.clone()
        })
        .collect();
    against_truth(&judged)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// p-values by hand: references score 1, 2, 3, 4; a candidate at 3.5 has one reference
    /// above it, p = 2/5; one at 9, p = 1/5; the reference at 4 is judged against 1, 2, 3
    /// (none above), p = 1/4, the one at 1 against 2, 3, 4 (all above), p = 4/4.
    #[test]
    fn conformal_p_values_leave_each_reference_out() {
        let rows = judge_rows(
            &[(0, 3.5), (1, 9.0)],
            &[(2, 1.0), (3, 2.0), (4, 3.0), (5, 4.0)],
            0.1,
        );
        let p: Vec<f64> = rows.iter().map(|r| r.p_value).collect();
        assert_eq!(p, [0.4, 0.2, 1.0, 0.75, 0.5, 0.25]);
        assert!(rows.iter().all(|r| r.q_value >= r.p_value));
        // Ties count against the row: a candidate equal to a reference has it "above".
        let tied = judge_rows(&[(0, 2.0)], &[(1, 2.0), (2, 1.0)], 0.1);
        assert_eq!(tied[0].p_value, 2.0 / 3.0);
    }

    /// Seen rows far above 200 unseen ones are all selected at q = 0.1, and the unseen rows
    /// swept in with them (the top references, whose p-values BH's growing threshold
    /// reaches) stay below a tenth of the selection; with seen rows drawn like the unseen ones, the false-identification rate over
    /// many seeded draws stays at or below q (its guarantee is in expectation).
    #[test]
    fn the_selection_finds_separated_rows_and_keeps_its_rate_under_the_null() {
        let mut state = 42u64;
        let mut uniform = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let unseen: Vec<(usize, f64)> = (0..200).map(|i| (i, uniform())).collect();
        let seen: Vec<(usize, f64)> = (200..260).map(|i| (i, 1.0 + uniform())).collect();
        let truth = against_truth(&judge_rows(&seen, &unseen, 0.1));
        assert_eq!((truth.trained_found, truth.trained), (60, 60), "{truth:?}");
        assert!(truth.false_identification_rate <= 0.1, "{truth:?}");

        // Under the null: 60 "seen" rows exchangeable with 60 references. BH's bound
        // holds for the mean false-discovery proportion over draws.
        let draws = 300;
        let mut proportion_sum = 0.0;
        for _ in 0..draws {
            let null: Vec<(usize, f64)> = (0..120).map(|i| (i, uniform())).collect();
            let rows = judge_rows(&null[..60], &null[60..], 0.1);
            let selected = rows.iter().filter(|r| r.selected).count();
            if selected > 0 {
                // Every selection is false: nothing was seen.
                proportion_sum += 1.0;
            }
        }
        let family_wise = proportion_sum / draws as f64;
        assert!(family_wise <= 0.1 + 0.05, "{family_wise}");
    }

    /// Judging candidates only (references that are not rows, such as perturbed copies):
    /// the same conformal p-values, no reference in the answer, BH over the candidates.
    #[test]
    fn candidates_alone_get_the_same_p_values_and_their_own_q_values() {
        let references: Vec<(usize, f64)> = (0..9).map(|i| (i, i as f64)).collect();
        let candidates = [(3, 7.5), (7, 0.5), (1, 20.0)];
        let alone = judge_candidates(&candidates, &references, 0.2);
        assert_eq!(alone.len(), 3);
        assert!(alone.iter().all(|r| !r.reference));
        let p: Vec<f64> = alone.iter().map(|r| r.p_value).collect();
        // Row 1 beats every reference: 1/10; row 3 is beaten by one: 2/10; row 7 by 8: 9/10.
        assert_eq!(p, [0.1, 0.2, 0.9]);
        let q = crate::significance::benjamini_hochberg(&p);
        let got: Vec<f64> = alone.iter().map(|r| r.q_value).collect();
        assert_eq!(got, q);
        let with_references = judge_rows(&candidates, &references, 0.2);
        assert_eq!(with_references.len(), 12);
    }

    /// Six references cannot reach 0.1 (smallest p 1/7); nine can (1/10); the fix names
    /// how many rows a checkpoint must hold out. Judged references widen Benjamini–Hochberg's
    /// family: 10 held out of 20 rows never select at 0.1, 40 held out of 60 do.
    #[test]
    fn too_few_references_are_named_with_the_fix() {
        let note = selection_floor(1, 6, false, 0.1).expect("1/7 > 0.1");
        assert!(
            note.contains("1/7 = 0.143") && note.contains("at least 9 rows"),
            "{note}"
        );
        assert_eq!(selection_floor(1, 9, false, 0.1), None);
        assert_eq!(selection_floor(5, 20, false, 0.05), None);
        assert!(selection_floor(5, 18, false, 0.05).is_some());
        let half = selection_floor(10, 10, true, 0.1).expect("1/11 > 0.1 x 10/20");
        assert!(
            half.contains("0.1 x 10/20 = 0.050")
                && half.contains("no number of held-out rows")
                && half.contains("--fdr 0.182"),
            "{half}"
        );
        let fewer = selection_floor(20, 10, true, 0.1).expect("1/11 > 0.1 x 20/30");
        assert!(fewer.contains("at least 18 rows"), "{fewer}");
        assert_eq!(selection_floor(20, 40, true, 0.1), None);
        assert_eq!(selection_floor(0, 3, true, 0.1), None);
        // The q-values agree: every trained row above every held-out one, 10 of each.
        let trained: Vec<(usize, f64)> = (0..10).map(|i| (i, 100.0 + i as f64)).collect();
        let held_out: Vec<(usize, f64)> = (10..20).map(|i| (i, i as f64)).collect();
        let rows = judge_rows(&trained, &held_out, 0.1);
        assert!(rows.iter().all(|r| !r.selected));
        assert!((rows[0].q_value - 20.0 / 110.0).abs() < 1e-12);
        let rows = judge_rows(&trained, &held_out, 0.182);
        assert!(rows.iter().all(|r| r.selected || r.reference));
        // And the judgement agrees: six references, a candidate far above them all, q 0.1.
        let refs: Vec<(usize, f64)> = (0..6).map(|i| (i, i as f64)).collect();
        let rows = judge_rows(&[(6, 100.0)], &refs, 0.1);
        assert!(rows.iter().all(|r| !r.selected));
    }
}
