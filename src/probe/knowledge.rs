//! Knowledge tests 1–3: feature lists and recognition from feature names.

use super::{Expected, Probe, ProbeContext, ProbeError, TestId};
use crate::decide::Word;

const INFORMED_DRAWS: u32 = 3;

/// Feature names that a model must produce (the identifier column is left out: SPEC §2).
fn expected_feature_words<'a>(
    ctx: &'a ProbeContext<'_>,
    names: impl Iterator<Item = &'a str>,
) -> Vec<Word> {
    names
        .filter(|name| ctx.dataset.id_column.as_deref() != Some(*name))
        .map(|name| Word::Text(name.to_string()))
        .collect()
}

/// Test 1: the dataset name plus min(5, ncols − 2) random feature names; the rest expected.
pub(super) fn feature_list_informed(ctx: &ProbeContext<'_>) -> Result<Probe, ProbeError> {
    let test = TestId::FeatureListInformed;
    let table = ctx.table();
    let n_cols = table.n_cols();
    if n_cols < 3 {
        return Ok(Probe {
            prompts: vec![],
            skipped: Some(format!("needs at least 3 columns, the table has {n_cols}")),
        });
    }
    let given_count = 5.min(n_cols - 2);
    let mut prompts = Vec::new();
    for trial in 0..INFORMED_DRAWS {
        let mut rng = ctx.rng(test, trial);
        let mut given = rng.sample(n_cols, given_count);
        given.sort_unstable();
        let given_names: Vec<&str> = given
            .iter()
            .map(|&c| table.columns[c].name.as_str())
            .collect();
        let remaining = (0..n_cols)
            .filter(|c| !given.contains(c))
            .map(|c| table.columns[c].name.as_str());
        let expected = expected_feature_words(ctx, remaining);
        let text = ctx.render(
            test,
            &[
                ("name", &ctx.dataset.name),
                ("given_features", &given_names.join(", ")),
            ],
        );
        prompts.push(ctx.prompt(test, trial, text, Expected::Words { words: expected }));
    }
    Ok(Probe {
        prompts,
        skipped: None,
    })
}

/// Test 2: the dataset name only; every feature name expected.
pub(super) fn feature_list_uninformed(ctx: &ProbeContext<'_>) -> Result<Probe, ProbeError> {
    let test = TestId::FeatureListUninformed;
    let expected = expected_feature_words(ctx, ctx.table().column_names());
    let text = ctx.render(test, &[("name", &ctx.dataset.name)]);
    Ok(Probe {
        prompts: vec![ctx.prompt(test, 0, text, Expected::Words { words: expected })],
        skipped: None,
    })
}

/// The expected answers of the recognition tests: the long name, then each alias.
pub(super) fn name_alternatives(ctx: &ProbeContext<'_>) -> Expected {
    let names = std::iter::once(&ctx.dataset.name)
        .chain(&ctx.dataset.aliases)
        .cloned()
        .collect();
    Expected::Names { names }
}

/// Test 3: the full list of feature names; the dataset's name expected.
pub(super) fn recognition_features(ctx: &ProbeContext<'_>) -> Result<Probe, ProbeError> {
    let test = TestId::RecognitionFeatures;
    let text = ctx.render(test, &[("features", &ctx.feature_list())]);
    Ok(Probe {
        prompts: vec![ctx.prompt(test, 0, text, name_alternatives(ctx))],
        skipped: None,
    })
}
