//! What servers said answered: per model identity, the versions (`served_model`,
//! `served_fingerprint`) its cached answers were reported with, and how many answers each.
//! A run compares them with what the server reports now; reports show them beside a model.

use std::collections::BTreeMap;

use serde::Serialize;

use super::Store;
use super::error::{AtPath, Result};
use crate::request::ModelIdentity;

/// One version a server reported, with the number of cached answers that carry it.
/// `model` and `fingerprint` are `None` where the server did not say (or the answer was
/// cached before schema 9): unknown, never guessed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServedVersion {
    pub model: Option<String>,
    pub fingerprint: Option<String>,
    pub answers: u64,
}

/// Known versions first, by name then fingerprint; unknown ones last (a stable order, so
/// reports stay byte-identical).
const SERVED_ORDER: &str =
    "served_model IS NULL, served_model, served_fingerprint IS NULL, served_fingerprint";

impl Store {
    /// The versions the cached answers of `identity` were served by.
    pub fn served_versions(&self, identity: &ModelIdentity) -> Result<Vec<ServedVersion>> {
        let sql = format!(
            "SELECT r.served_model, r.served_fingerprint, count(*)
             FROM responses r JOIN identities i ON i.id = r.identity_id
             WHERE i.backend = ?1 AND i.model = ?2 AND i.revision = ?3
             GROUP BY 1, 2 ORDER BY {SERVED_ORDER}"
        );
        let mut stmt = self.conn.prepare_cached(&sql).at(&self.path)?;
        let rows = stmt
            .query_map(
                (identity.backend.id(), &identity.model, &identity.revision),
                |row| {
                    Ok(ServedVersion {
                        model: row.get(0)?,
                        fingerprint: row.get(1)?,
                        answers: row.get::<_, i64>(2)? as u64,
                    })
                },
            )
            .at(&self.path)?;
        rows.collect::<rusqlite::Result<_>>().at(&self.path)
    }

    /// Per model of the cache (spec model id), the versions that served the cached answers
    /// of its identity; models without answers are absent.
    pub fn served_versions_by_model(&self) -> Result<BTreeMap<String, Vec<ServedVersion>>> {
        let sql = format!(
            "SELECT m.id, r.served_model, r.served_fingerprint, count(*)
             FROM models m
             JOIN identities i ON (i.backend, i.model, i.revision) = (m.backend, m.model, m.revision)
             JOIN responses r ON r.identity_id = i.id
             GROUP BY 1, 2, 3 ORDER BY m.id, {SERVED_ORDER}"
        );
        let mut stmt = self.conn.prepare_cached(&sql).at(&self.path)?;
        let mut rows = stmt.query([]).at(&self.path)?;
        let mut by_model: BTreeMap<String, Vec<ServedVersion>> = BTreeMap::new();
        while let Some(row) = rows.next().at(&self.path)? {
            let id: String = row.get(0).at(&self.path)?;
            by_model.entry(id).or_default().push(ServedVersion {
                model: row.get(1).at(&self.path)?,
                fingerprint: row.get(2).at(&self.path)?,
                answers: row.get::<_, i64>(3).at(&self.path)? as u64,
            });
        }
        Ok(by_model)
    }
}

/// The distinct served model names among `versions` (unknown ones left out), in order.
pub fn served_models(versions: &[ServedVersion]) -> Vec<&str> {
    let mut names: Vec<&str> = versions.iter().filter_map(|v| v.model.as_deref()).collect();
    names.dedup();
    names
}

/// One line for people: `gpt-4o-2024-08-06 (fp_1) ×424, gpt-4o-2024-11-20 ×50`, with
/// `not reported ×N` for answers whose server did not say; empty without answers.
pub fn describe_served(versions: &[ServedVersion]) -> String {
    versions
        .iter()
        .map(|v| {
            let name = v.model.as_deref().unwrap_or("not reported");
            match &v.fingerprint {
                Some(fp) => format!("{name} ({fp}) ×{}", v.answers),
                None => format!("{name} ×{}", v.answers),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}
