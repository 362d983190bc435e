//! Declared exposure (SPEC §8, controlled contamination): what a checkpoint was trained on,
//! for the calibration analysis. Read from a local model folder's `tabcontam-manifest.json`
//! (written by `tabcontam contaminate`) or from the spec's model keys (`trained_on`, `dose`,
//! `base`). Plain data: no I/O except [`Exposure::from_manifest`].

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize};

/// The manifest file a checkpoint folder carries.
pub const MANIFEST_FILE: &str = "tabcontam-manifest.json";

/// What a model was deliberately trained on. A model without exposure is not part of a
/// calibration study; a base model has `trained_on = []` and `dose = 0`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Exposure {
    /// Dataset ids trained on (positives); every other dataset tested is a negative.
    #[serde(default)]
    pub trained_on: Vec<String>,
    /// Epochs over the data (0 for the base model).
    #[serde(default)]
    pub dose: f64,
    /// The spec id of the model this checkpoint was trained from (flips are counted
    /// against it); `None` for a base model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// Dataset id → row indexes trained on (a held-out split leaves the others unseen);
    /// `None` = all rows or not known. The key [`EVERY_DATASET`] applies to every dataset
    /// trained on (what a bare list of rows means).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "rows_per_dataset"
    )]
    pub trained_rows: Option<BTreeMap<String, Vec<usize>>>,
    /// The optimizer step of a checkpoint (from its manifest): the x-axis of its series'
    /// timeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
}

/// The `trained_rows` key that stands for every dataset trained on.
pub const EVERY_DATASET: &str = "*";

/// Reads `trained_rows` as written by `contaminate` (`{dataset: [rows]}`) or as a bare list
/// of rows (one list for every dataset trained on).
fn rows_per_dataset<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<BTreeMap<String, Vec<usize>>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Rows {
        PerDataset(BTreeMap<String, Vec<usize>>),
        Every(Vec<usize>),
    }
    Ok(
        Option::<Rows>::deserialize(deserializer)?.map(|rows| match rows {
            Rows::PerDataset(map) => map,
            Rows::Every(list) => BTreeMap::from([(EVERY_DATASET.to_string(), list)]),
        }),
    )
}

/// Errors reading a manifest.
#[derive(Debug, thiserror::Error)]
pub enum ExposureError {
    #[error(
        "{path}: {source} (the checkpoint's manifest; rebuild it with `tabcontam contaminate`)"
    )]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path}: {message} (expected {{\"datasets\": [ids], \"epoch\": N, \"rows\": {{\"trained_rows\": [...]}}}})"
    )]
    Parse { path: String, message: String },
}

#[derive(Deserialize)]
struct RawManifest {
    datasets: Vec<String>,
    #[serde(default)]
    exposures: Option<f64>,
    #[serde(default)]
    epoch: Option<f64>,
    #[serde(default)]
    step: Option<f64>,
    #[serde(default)]
    rows: Option<RawRows>,
    #[serde(default)]
    base: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawRows {
    #[serde(default, deserialize_with = "rows_per_dataset")]
    trained_rows: Option<BTreeMap<String, Vec<usize>>>,
}

impl Exposure {
    /// Reads `tabcontam-manifest.json` from a model folder, when there is one.
    pub fn from_manifest(folder: &Path) -> Result<Option<Exposure>, ExposureError> {
        let path = folder.join(MANIFEST_FILE);
        if !folder.is_dir() || !path.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path).map_err(|source| ExposureError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Exposure::parse_manifest(&text)
            .map(Some)
            .map_err(|message| ExposureError::Parse {
                path: path.display().to_string(),
                message,
            })
    }

    /// Parses a manifest's text (the fields the analysis needs; others are ignored).
    pub fn parse_manifest(text: &str) -> Result<Exposure, String> {
        let raw: RawManifest = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let base = match raw.base {
            Some(serde_json::Value::String(s)) => Some(s),
            _ => None,
        };
        Ok(Exposure {
            trained_on: raw.datasets,
            dose: raw.exposures.or(raw.epoch).or(raw.step).unwrap_or(0.0),
            base,
            trained_rows: raw.rows.and_then(|r| r.trained_rows),
            step: raw
                .step
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(|s| s as u64),
        })
    }

    /// Whether the model was trained on `dataset`.
    pub fn trained_on(&self, dataset: &str) -> bool {
        self.trained_on.iter().any(|d| d == dataset)
    }

    /// The rows of `dataset` trained on, when the model was trained on it and they are known.
    pub fn rows_trained(&self, dataset: &str) -> Option<&[usize]> {
        if !self.trained_on(dataset) {
            return None;
        }
        let rows = self.trained_rows.as_ref()?;
        rows.get(dataset)
            .or_else(|| rows.get(EVERY_DATASET))
            .map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_gives_datasets_epoch_and_rows() {
        let exposure = Exposure::parse_manifest(
            r#"{"datasets": ["iris"], "epoch": 2, "rows": {"selection": "split:0.5", "trained_rows": [0, 3]}, "loss": 1.2}"#,
        )
        .unwrap();
        assert_eq!(exposure.trained_on, vec!["iris".to_string()]);
        assert_eq!(exposure.dose, 2.0);
        assert_eq!(exposure.rows_trained("iris"), Some(&[0, 3][..]));
        assert_eq!(exposure.rows_trained("wine"), None);
        assert!(Exposure::parse_manifest(r#"{"epoch": 1}"#).is_err());
    }

    /// What `tabcontam contaminate` writes: rows per dataset, the base model as an object.
    #[test]
    fn a_contaminate_manifest_gives_rows_per_dataset() {
        let exposure = Exposure::parse_manifest(
            r#"{"format": 1, "base_model": {"path": "/m", "digest": "blake3:00"},
                "datasets": ["iris", "wine"], "epoch": 3, "step": 12,
                "rows": {"selection": "holdout:0.2", "trained_rows": {"iris": [1, 2], "wine": [0]},
                         "unseen_rows": {"iris": [0], "wine": [1]}}}"#,
        )
        .unwrap();
        assert_eq!(exposure.dose, 3.0);
        assert_eq!(exposure.step, Some(12));
        assert_eq!(exposure.base, None);
        assert_eq!(exposure.rows_trained("iris"), Some(&[1, 2][..]));
        assert_eq!(exposure.rows_trained("wine"), Some(&[0][..]));
        // Stored and read back (models.exposure) the same.
        let stored = serde_json::to_string(&exposure).unwrap();
        assert_eq!(serde_json::from_str::<Exposure>(&stored).unwrap(), exposure);
        // A manifest that counts exposures (`rows` windows: 8.5 per epoch) doses by them.
        let by_exposures = Exposure::parse_manifest(
            r#"{"datasets": ["iris"], "epoch": 2, "step": 12, "exposures": 17.0}"#,
        )
        .unwrap();
        assert_eq!(by_exposures.dose, 17.0);
    }
}
