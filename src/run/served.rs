//! The version that really answered (issue 27): API names are aliases (`gpt-4o`, a
//! `-latest` name) that serve different snapshots over time, so a run compares the version
//! the server reports now with the versions its cached answers came from. Without
//! `--pin-served` a change is a one-line warning (the old answers are still reused); with
//! it, the run asks each remote model once (the first request of its plan) which version it
//! serves, and when that differs from the cached answers' version, the model's requests go
//! under a revision naming the new version ([`pinned_revision`]): sent again, with the old
//! answers kept for the old version.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::plan::Plan;
use super::session::Prepared;
use super::spec::Spec;
use crate::llm::client::Client;
use crate::request::{BackendKind, ModelIdentity, Request, Response};
use crate::store::{ServedVersion, Store, served_models};

/// How long a server may take to accept the connection of a `--pin-served` probe.
const PROBE_PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(5);

/// What separates a spec's revision from the served version `--pin-served` adds to it.
pub const PINNED_SEPARATOR: &str = "+served:";

/// The revision `--pin-served` keys a model's answers with when its server serves `served`
/// (`gpt-4o+served:gpt-4o-2024-11-20`): a new revision, so new requests.
pub fn pinned_revision(revision: &str, served: &str) -> String {
    format!("{revision}{PINNED_SEPARATOR}{served}")
}

/// A model whose served version changed, as the run saw it.
#[derive(Debug, Clone, Serialize)]
pub struct ServedChange {
    /// The spec's model id.
    pub model: String,
    /// The model name the requests ask for (the alias).
    pub requested: String,
    /// Served versions of the answers cached before the run, with their counts.
    pub cached: Vec<ServedVersion>,
    /// The version(s) the server reported in this run (the probe and every new answer).
    pub now: Vec<String>,
    /// With `--pin-served`: the revision this run's answers are keyed with (the old
    /// answers stay under the old one). `None`: the old answers were reused, mixed with
    /// the new version's.
    pub pinned_revision: Option<String>,
    /// The model row of the cache had been pinned to another revision by an earlier
    /// `--pin-served` run, and this run went back to the spec's revision.
    pub unpinned_from: Option<String>,
}

impl ServedChange {
    /// The one line `run` prints for this change.
    pub fn message(&self) -> String {
        let cached_names = served_models(&self.cached);
        let cached_answers: u64 = self
            .cached
            .iter()
            .filter(|v| v.model.is_some())
            .map(|v| v.answers)
            .sum();
        let quoted = |names: &[&str]| {
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let now: Vec<&str> = self.now.iter().map(String::as_str).collect();
        if let Some(pinned) = &self.pinned_revision {
            return format!(
                "model `{}` (`{}`): the server now serves {} and the cached answers came from {}; --pin-served keys its answers as revision `{pinned}`, asking anew what that revision lacks (the old answers stay for the old version)",
                self.model,
                self.requested,
                quoted(&now),
                quoted(&cached_names)
            );
        }
        if let Some(earlier) = &self.unpinned_from {
            return format!(
                "warning: model `{}` (`{}`): an earlier --pin-served run keyed its answers as revision `{earlier}`; without --pin-served this run uses the spec's revision again and its answers from {}: add --pin-served to keep the pinned version",
                self.model,
                self.requested,
                quoted(&cached_names)
            );
        }
        format!(
            "warning: model `{}` (`{}`): the server now serves {}, but {cached_answers} cached answers came from {}: this run's results mix versions; rerun with --pin-served to ask {} anew (the old answers stay for the old version)",
            self.model,
            self.requested,
            quoted(&now),
            quoted(&cached_names),
            quoted(&now)
        )
    }
}

/// Whether the versions seen now differ from the cached ones (only known versions count:
/// a server that does not report one changes nothing).
fn differs(cached: &[ServedVersion], now: &[String]) -> bool {
    let cached = served_models(cached);
    now.iter().any(|n| cached.iter().any(|c| c != n))
}

/// Per model index, the served versions of its cached answers (`None` for local models,
/// whose identity is their weights).
pub type ServedBefore = Vec<Option<Vec<ServedVersion>>>;

/// What `--pin-served` decides for one model from its probe's answer: the identity to use
/// (`Some` when it must change) and the change to report.
pub fn decide_pin(
    model_id: &str,
    identity: &ModelIdentity,
    cached: &[ServedVersion],
    probe: &Response,
) -> Option<(ModelIdentity, ServedChange)> {
    let now = probe.served_model.clone()?;
    if !differs(cached, std::slice::from_ref(&now)) {
        return None;
    }
    let pinned = ModelIdentity {
        revision: pinned_revision(&identity.revision, &now),
        ..identity.clone()
    };
    let change = ServedChange {
        model: model_id.to_string(),
        requested: identity.model.clone(),
        cached: cached.to_vec(),
        now: vec![now],
        pinned_revision: Some(pinned.revision.clone()),
        unpinned_from: None,
    };
    Some((pinned, change))
}

/// After sending: per remote model, the versions reported by the answers that arrived in
/// this run (`after` minus `before`, by served model name) against those cached before.
/// A model whose new answers report another version than its cached ones is a change
/// (reused old answers mixed with the new version's).
pub fn changes_after_run(
    spec: &Spec,
    plan: &Plan,
    before: &ServedBefore,
    after: &[Option<Vec<ServedVersion>>],
) -> Vec<ServedChange> {
    let mut changes = Vec::new();
    for (index, model) in spec.models.iter().enumerate() {
        let (Some(before), Some(after)) = (&before[index], &after[index]) else {
            continue;
        };
        let counts = |versions: &[ServedVersion]| {
            let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
            for v in versions {
                if let Some(name) = &v.model {
                    *by_name.entry(name.clone()).or_default() += v.answers;
                }
            }
            by_name
        };
        let old = counts(before);
        let now: Vec<String> = counts(after)
            .into_iter()
            .filter(|(name, n)| old.get(name).copied().unwrap_or(0) < *n)
            .map(|(name, _)| name)
            .collect();
        if differs(before, &now) {
            changes.push(ServedChange {
                model: model.id.clone(),
                requested: plan.identities[index].model.clone(),
                cached: before.clone(),
                now,
                pinned_revision: None,
                unpinned_from: None,
            });
        }
    }
    changes
}

/// The served versions of a run, before sending.
pub struct ServedStart {
    pub before: ServedBefore,
    pub changes: Vec<ServedChange>,
    /// With `--pin-served`: each probe's request (under the identity the run keeps) and
    /// the server's answer.
    pub probe_answers: Vec<(Request, Response)>,
    pub probes: u64,
}

/// Per remote model, the versions its cached answers were served by; with `pin_served`
/// (`--pin-served`, never offline), each model with a known cached version is asked once, with the first
/// request of its plan, which version it serves now, and a changed version moves its plan
/// to the pinned revision ([`pinned_revision`]). Probing with a planned
/// request rather than a made-up one means its answer is never wasted when the model is
/// pinned: it is that request's answer under the new revision. Writes nothing.
pub fn served_start(
    prepared: &mut Prepared,
    read_store: &Store,
    pin_served: bool,
    spec_path: &Path,
) -> anyhow::Result<ServedStart> {
    let mut start = ServedStart {
        before: Vec::with_capacity(prepared.spec.models.len()),
        changes: Vec::new(),
        probe_answers: Vec::new(),
        probes: 0,
    };
    let stored_models = read_store.models()?;
    for (index, model) in prepared.spec.models.iter().enumerate() {
        if model.backend == BackendKind::Local {
            start.before.push(None);
            continue;
        }
        let identity = &prepared.plan.identities[index];
        let before = read_store.served_versions(identity)?;
        // An earlier `--pin-served` run keyed this model with a pinned revision; going back
        // to the spec's revision silently would swap versions under the same model id.
        let stored = stored_models.iter().find(|m| m.id == model.id);
        if let Some(stored) = stored.filter(|m| {
            !pin_served
                && m.identity.model == identity.model
                && m.identity
                    .revision
                    .starts_with(&format!("{}{PINNED_SEPARATOR}", identity.revision))
        }) {
            start.changes.push(ServedChange {
                model: model.id.clone(),
                requested: identity.model.clone(),
                cached: before.clone(),
                now: Vec::new(),
                pinned_revision: None,
                unpinned_from: Some(stored.identity.revision.clone()),
            });
        }
        start.before.push(Some(before));
    }
    if !pin_served {
        return Ok(start);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    for index in 0..prepared.spec.models.len() {
        let Some(before) = &start.before[index] else {
            continue;
        };
        if served_models(before).is_empty() {
            continue; // nothing known to compare with (a first run, or an older cache)
        }
        let Some(source) = prepared
            .plan
            .requests
            .values()
            .find(|source| source.model == index)
            .cloned()
        else {
            continue;
        };
        let model = &prepared.spec.models[index];
        let request = prepared.plan.request(&prepared.spec, &source);
        let client = Client::new(prepared.spec.client_config(model))
            .map_err(|e| anyhow::anyhow!("{}: {e}", spec_path.display()))?;
        let answer = runtime
            .block_on(async {
                client.preflight(PROBE_PREFLIGHT_TIMEOUT).await?;
                client.complete(&request).await
            })
            .map_err(|e| {
                anyhow::anyhow!(
                    "{}: --pin-served could not ask model `{}` which version it serves: {e}",
                    spec_path.display(),
                    model.id
                )
            })?;
        start.probes += 1;
        let identity = &prepared.plan.identities[index];
        match decide_pin(&model.id, identity, before, &answer) {
            Some((pinned, change)) => {
                let before = read_store.served_versions(&pinned)?;
                prepared.plan.repin(&prepared.spec, index, pinned);
                start.before[index] = Some(before);
                start.changes.push(change);
                let request = prepared.plan.request(&prepared.spec, &source);
                start.probe_answers.push((request, answer));
            }
            None => start.probe_answers.push((request, answer)),
        }
    }
    Ok(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(model: &str, answers: u64) -> ServedVersion {
        ServedVersion {
            model: Some(model.into()),
            fingerprint: None,
            answers,
        }
    }

    fn answer(served: Option<&str>) -> Response {
        Response {
            text: "x".into(),
            finish_reason: None,
            prompt_tokens: None,
            completion_tokens: None,
            latency_ms: 0,
            served_model: served.map(str::to_string),
            served_fingerprint: None,
        }
    }

    #[test]
    fn a_changed_version_pins_a_new_revision_and_the_same_one_keeps_the_old() {
        let identity = ModelIdentity {
            backend: BackendKind::OpenaiCompatible,
            model: "gpt-4o".into(),
            revision: "gpt-4o".into(),
        };
        let cached = [version("gpt-4o-2024-08-06", 10)];
        assert!(decide_pin("m", &identity, &cached, &answer(Some("gpt-4o-2024-08-06"))).is_none());
        assert!(decide_pin("m", &identity, &cached, &answer(None)).is_none());
        let (pinned, change) =
            decide_pin("m", &identity, &cached, &answer(Some("gpt-4o-2024-11-20"))).unwrap();
        assert_eq!(pinned.revision, "gpt-4o+served:gpt-4o-2024-11-20");
        assert_eq!(
            (pinned.backend, pinned.model.as_str()),
            (identity.backend, "gpt-4o")
        );
        assert!(
            change
                .message()
                .contains("--pin-served keys its answers as revision")
        );
        // Answers of two versions already cached: either one alone differs from the other.
        let mixed = [version("a", 1), version("b", 1)];
        assert!(decide_pin("m", &identity, &mixed, &answer(Some("b"))).is_some());
        // Nothing known cached: nothing to compare with.
        let unknown = [ServedVersion {
            model: None,
            fingerprint: None,
            answers: 3,
        }];
        assert!(decide_pin("m", &identity, &unknown, &answer(Some("b"))).is_none());
    }

    #[test]
    fn the_warning_is_one_line_naming_old_new_and_the_flag() {
        let change = ServedChange {
            model: "gpt4o".into(),
            requested: "gpt-4o".into(),
            cached: vec![version("v1", 424)],
            now: vec!["v2".into()],
            pinned_revision: None,
            unpinned_from: None,
        };
        let line = change.message();
        assert_eq!(line.lines().count(), 1);
        for needle in [
            "gpt4o",
            "`v2`",
            "424 cached answers came from `v1`",
            "--pin-served",
        ] {
            assert!(line.contains(needle), "{needle}: {line}");
        }
    }
}
