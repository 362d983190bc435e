//! Declared exposure (SPEC §8, controlled contamination): what a checkpoint was trained on,
//! for the calibration analysis. Read from a local model folder's `tabcontam-manifest.json`
//! (written by `tabcontam contaminate`) or from the spec's model keys (`trained_on`, `dose`,
//! `base`). Plain data: no I/O except [`Exposure::from_manifest`].

use std::path::Path;

use serde::{Deserialize, Serialize};

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
    /// Row indexes trained on (a held-out split leaves the others unseen); `None` = all rows
    /// or not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trained_rows: Option<Vec<usize>>,
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
    #[serde(default)]
    trained_rows: Option<Vec<usize>>,
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
            dose: raw.epoch.or(raw.step).unwrap_or(0.0),
            base,
            trained_rows: raw.rows.and_then(|r| r.trained_rows),
        })
    }

    /// Whether the model was trained on `dataset`.
    pub fn trained_on(&self, dataset: &str) -> bool {
        self.trained_on.iter().any(|d| d == dataset)
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
        assert_eq!(exposure.trained_rows, Some(vec![0, 3]));
        assert!(Exposure::parse_manifest(r#"{"epoch": 1}"#).is_err());
    }
}
