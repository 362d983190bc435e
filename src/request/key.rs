//! The content-addressed request key: blake3 over a canonical encoding of a request.
//!
//! Architecture Invariant: the key covers backend kind, model name and revision, API mode,
//! exact prompt, every generation parameter and the sample index — nothing else (no test,
//! no run, no endpoint URL), so identical prompts from different tests, serializations or
//! runs share one cache entry. Changing the encoding changes every key: bump `DOMAIN`.

use std::fmt;

use super::{ApiMode, GenerationParams, ModelIdentity, Request};

const DOMAIN: &str = "tabcontam request key v1";

/// 32-byte blake3 digest of a request.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestKey(pub [u8; 32]);

impl RequestKey {
    pub fn of(request: &Request) -> Self {
        Self::compute(
            &request.model,
            request.api,
            &request.prompt,
            &request.params,
            request.sample,
        )
    }

    /// The key of a request given by its parts (the planner keys prompts without copying
    /// their text into a `Request` per model).
    pub fn compute(
        model: &ModelIdentity,
        api: ApiMode,
        prompt: &str,
        params: &GenerationParams,
        sample: u32,
    ) -> Self {
        let mut h = blake3::Hasher::new_derive_key(DOMAIN);
        // Length-prefixed fields: no two different requests encode to the same bytes.
        let mut field = |bytes: &[u8]| {
            h.update(&(bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field(model.backend.id().as_bytes());
        field(model.model.as_bytes());
        field(model.revision.as_bytes());
        field(match api {
            ApiMode::Completions => b"completions",
            ApiMode::Chat => b"chat",
        });
        field(prompt.as_bytes());
        let p = params;
        field(&p.max_tokens.to_le_bytes());
        field(&p.temperature.to_bits().to_le_bytes());
        match p.top_p {
            Some(v) => field(&v.to_bits().to_le_bytes()),
            None => field(b"-"),
        }
        match p.seed {
            Some(v) => field(&v.to_le_bytes()),
            None => field(b"-"),
        }
        field(&(p.stop.len() as u64).to_le_bytes());
        for stop in &p.stop {
            field(stop.as_bytes());
        }
        field(&sample.to_le_bytes());
        // Appended only when present: a request without a rule keeps the key it had before
        // rules existed, so caches keep answering it; one with a rule is a new question.
        if let Some(rule) = p.stop_rule {
            field(b"stop-rule");
            field(rule.id().as_bytes());
        }
        Self(*h.finalize().as_bytes())
    }

    pub fn to_hex(&self) -> String {
        blake3::Hash::from_bytes(self.0).to_hex().to_string()
    }

    pub fn from_hex(hex: &str) -> Option<Self> {
        blake3::Hash::from_hex(hex)
            .ok()
            .map(|h| Self(*h.as_bytes()))
    }
}

impl fmt::Debug for RequestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RequestKey({})", &self.to_hex()[..16])
    }
}

impl fmt::Display for RequestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{BackendKind, GenerationParams, ModelIdentity};
    use super::*;

    fn request() -> Request {
        Request {
            model: ModelIdentity {
                backend: BackendKind::OpenaiCompatible,
                model: "m".into(),
                revision: "r1".into(),
            },
            api: ApiMode::Completions,
            prompt: "The age is".into(),
            params: GenerationParams {
                max_tokens: 16,
                temperature: 0.0,
                top_p: None,
                seed: Some(0),
                stop: vec![],
                stop_rule: None,
            },
            sample: 0,
        }
    }

    #[test]
    fn every_field_changes_the_key() {
        let base = request().key();
        let mut variants: Vec<Request> = Vec::new();
        let mut r = request();
        r.model.backend = BackendKind::Anthropic;
        variants.push(r);
        let mut r = request();
        r.model.model = "m2".into();
        variants.push(r);
        let mut r = request();
        r.model.revision = "r2".into();
        variants.push(r);
        let mut r = request();
        r.api = ApiMode::Chat;
        variants.push(r);
        let mut r = request();
        r.prompt.push(' ');
        variants.push(r);
        let mut r = request();
        r.params.max_tokens = 17;
        variants.push(r);
        let mut r = request();
        r.params.temperature = 0.7;
        variants.push(r);
        let mut r = request();
        r.params.top_p = Some(0.9);
        variants.push(r);
        let mut r = request();
        r.params.seed = None;
        variants.push(r);
        let mut r = request();
        r.params.stop = vec!["\n".into()];
        variants.push(r);
        let mut r = request();
        r.sample = 1;
        variants.push(r);
        let mut r = request();
        r.params.stop_rule = Some(crate::decide::StopRule::FirstLine);
        variants.push(r);
        let mut r = request();
        r.params.stop_rule = Some(crate::decide::StopRule::FirstRowLike);
        variants.push(r);
        for v in variants {
            assert_ne!(v.key(), base, "{v:?}");
        }
        assert_eq!(request().key(), base);
    }

    /// A request without a stop rule keeps the key it had before rules existed (the
    /// value computed from the encoding above by an independent blake3, Python's), so the
    /// answers cached for it are still found.
    #[test]
    fn keys_without_a_stop_rule_are_unchanged() {
        assert_eq!(
            request().key().to_hex(),
            "844558e0fd34543b33d16223b655d8f996133779d8fe89fac4c4dd2c116bce14"
        );
        let mut ruled = request();
        ruled.params.stop_rule = Some(crate::decide::StopRule::FirstLine);
        let json = serde_json::to_string(&request().params).unwrap();
        assert!(!json.contains("stop_rule"), "{json}");
        assert!(
            serde_json::to_string(&ruled.params)
                .unwrap()
                .contains(r#""stop_rule":"first-line""#)
        );
        // Parameters stored before rules existed read back without one.
        let old: GenerationParams = serde_json::from_str(&json).unwrap();
        assert_eq!(old, request().params);
    }

    #[test]
    fn field_boundaries_are_unambiguous() {
        let mut a = request();
        a.model.model = "ab".into();
        a.model.revision = "c".into();
        let mut b = request();
        b.model.model = "a".into();
        b.model.revision = "bc".into();
        assert_ne!(a.key(), b.key());
    }

    #[test]
    fn hex_round_trips() {
        let k = request().key();
        assert_eq!(RequestKey::from_hex(&k.to_hex()), Some(k));
    }
}
