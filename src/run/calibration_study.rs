//! The controlled-contamination study of a spec's `[calibration]` table, end to end, in one
//! call: every checkpoint (built or reused), the run on the base model and the checkpoints
//! through the cache, the calibration of every test over the spec's own models, datasets and tests, and the
//! calibration card written from the cache (`docs/calibration.md` by default).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::local_exec::ensure_weights;
use super::spec::Spec;
use super::workflow::{RunObserver, RunReport, RunSettings, run_keeping_store};
use crate::analyze::DEFAULT_SERIALIZATION;
use crate::analyze::calibration::Calibration;
use crate::analyze::card::{Card, CardDataset, CardSpec, CardTreatment, StudyRows, card_from_rows};
use crate::dataset::catalog::Catalog;
use crate::dataset::entropy::entropy_per_row;
use crate::train;

/// One treatment's checkpoint series.
#[derive(Debug, Clone)]
pub struct SeriesBuilt {
    /// The treatment's slug (`iris`, `synthetic-101-60`).
    pub label: String,
    pub folder: PathBuf,
    pub checkpoints: usize,
    pub reused: usize,
    pub seconds: f64,
}

/// What [`run_study`] did.
#[derive(Debug)]
pub struct StudyOutcome {
    pub series: Vec<SeriesBuilt>,
    /// The run of the tests (`None` with `train_only`).
    pub run: Option<RunReport>,
    /// The calibration table (`None` with `train_only`).
    pub calibration: Option<Calibration>,
    /// The card and where it was written (`None` with `train_only`).
    pub card: Option<(Card, PathBuf)>,
}

/// Runs the study of `spec` (which must have a `[calibration]` table). `run` holds the
/// cache, data folder and progress of the tests' run (its `spec` is `spec.path`);
/// `train_log` hears each training line prefixed with its treatment; the card is written
/// to `card` (see [`CalibrationSpec::card_path`](super::study::CalibrationSpec::card_path)).
pub fn run_study(
    spec: &Spec,
    run: &RunSettings,
    train_only: bool,
    card: &Path,
    observer: &mut dyn RunObserver,
    train_log: &mut dyn FnMut(&str),
) -> anyhow::Result<StudyOutcome> {
    let Some(study) = &spec.calibration else {
        anyhow::bail!(
            "{}: no [calibration] table; add one (base, treatments, doses) or use `tabcontam run` for an ordinary experiment",
            spec.path.display()
        );
    };
    let spec_dir = spec.path.parent().unwrap_or(Path::new("."));
    let base = spec
        .models
        .iter()
        .find(|m| m.id == study.base)
        .expect("the spec checks that the base model exists");
    let base_weights = ensure_weights(base, spec_dir)
        .map_err(|e| anyhow::anyhow!("{}: {e:#}", spec.path.display()))?;

    // 1. Checkpoints: one series per treatment, each cached by its inputs.
    let mut series = Vec::new();
    for treatment in &study.treatments {
        let folder = study.series(treatment, spec_dir, &spec.name);
        let mut settings = study
            .settings(&base_weights, treatment, &folder, spec.seed)
            .map_err(|m| anyhow::anyhow!("{}: {m}", spec.path.display()))?;
        settings.data_dir = run.data_dir.clone();
        let label = treatment.slug();
        let trained = Instant::now();
        let checkpoints = train::build_checkpoints(&settings, &mut |line| {
            train_log(&format!("[{label}] {line}"))
        })?;
        let built = SeriesBuilt {
            label,
            folder,
            checkpoints: checkpoints.len(),
            reused: checkpoints.iter().filter(|c| c.reused).count(),
            seconds: trained.elapsed().as_secs_f64(),
        };
        train_log(&format!(
            "[{}] {} checkpoint(s) in {} ({} reused) in {:.1} s",
            built.label,
            built.checkpoints,
            built.folder.display(),
            built.reused,
            built.seconds
        ));
        series.push(built);
    }
    if train_only {
        return Ok(StudyOutcome {
            series,
            run: None,
            calibration: None,
            card: None,
        });
    }

    // 2. The tests on the base model and every checkpoint, through the cache.
    let (report, store) = run_keeping_store(spec, run, observer)?;

    // 3. The calibration of every test, over this spec's models, datasets and tests only,
    // read from the store the run wrote. The cache may hold other studies, and a base model
    // shared with one (the same id) has cells there: counted, they would change this card's
    // false-positive rates with whatever else the cache ran.
    let catalog = Catalog::open(run.data_dir.as_deref())?;
    let dataset_ids: HashSet<String> = spec
        .datasets
        .iter()
        .map(|name| catalog.load(name).map(|d| d.id))
        .collect::<anyhow::Result<_>>()?;
    let our_model = |id: &str| spec.models.iter().any(|m| m.id == id);
    let ours = |model: &str, dataset: &str| our_model(model) && dataset_ids.contains(dataset);
    let models: Vec<_> = store
        .models()?
        .into_iter()
        .filter(|m| our_model(&m.id))
        .collect();
    let cells: Vec<_> = store
        .cells()?
        .into_iter()
        .filter(|c| ours(&c.model, &c.dataset) && spec.tests.contains(&c.test))
        .collect();
    let trials: Vec<_> = store
        .trials()?
        .into_iter()
        .filter(|t| ours(&t.model, &t.dataset) && spec.tests.contains(&t.test))
        .collect();
    let primary = spec
        .serializations
        .first()
        .map_or(DEFAULT_SERIALIZATION, |s| s.id.as_str());
    let likelihood: Vec<_> = store
        .likelihood_cells()?
        .into_iter()
        .filter(|c| ours(&c.model, &c.dataset))
        .collect();
    let row_order: Vec<_> = store
        .row_order_cells()?
        .into_iter()
        .filter(|c| spec.row_order && ours(&c.model, &c.dataset))
        .collect();
    let rows = StudyRows {
        models: &models,
        cells: &cells,
        trials: &trials,
        likelihood: &likelihood,
        row_order: &row_order,
    };
    let Some((calibration, mut study_card)) = card_from_rows(rows, primary) else {
        anyhow::bail!(
            "{}: the cache holds no model with a declared exposure after the run; was it interrupted?",
            run.cache.display()
        );
    };

    // 4. The card: the study's spec, base and treatments beside the measurements.
    study_card.spec = Some(CardSpec {
        name: spec.name.clone(),
        blake3: spec.digest.clone(),
        base: study.base.clone(),
        base_revision: models
            .iter()
            .find(|m| m.id == study.base)
            .map(|m| m.identity.revision.clone()),
        training: study.training_summary(spec.seed),
    });
    study_card.treatments = study
        .treatments
        .iter()
        .map(|t| CardTreatment {
            datasets: t
                .datasets()
                .into_iter()
                .map(|name| match catalog.load(&name) {
                    Ok(d) => CardDataset {
                        rows: d.table.n_rows(),
                        columns: d.table.n_cols(),
                        entropy_bits: Some(entropy_per_row(&d.table)),
                        name,
                    },
                    Err(_) => CardDataset {
                        name,
                        rows: 0,
                        columns: 0,
                        entropy_bits: None,
                    },
                })
                .collect(),
        })
        .collect();
    crate::report::card::write(card, &study_card)?;
    Ok(StudyOutcome {
        series,
        run: Some(report),
        calibration: Some(calibration),
        card: Some((study_card, card.to_path_buf())),
    })
}
