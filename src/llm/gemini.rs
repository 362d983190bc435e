//! Gemini wire format: `POST {base}/v1beta/models/{model}:generateContent` with one user turn.
//!
//! The key travels in the `x-goog-api-key` header, never in the `?key=` query parameter
//! Google's examples use: URLs end up in logs, proxies and error messages.

use serde::Deserialize;
use serde_json::{Value, json};

use super::error::{BodyError, decode_body};
use super::{Request, Response};

pub const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com";

/// Accepts both `gemini-1.5-pro` and the resource name `models/gemini-1.5-pro`.
pub fn path(model: &str) -> String {
    let model = model.strip_prefix("models/").unwrap_or(model);
    format!("/v1beta/models/{model}:generateContent")
}

pub fn request_body(request: &Request) -> Value {
    let params = &request.params;
    let mut config = json!({
        "maxOutputTokens": params.max_tokens,
        "temperature": params.temperature,
        "candidateCount": 1,
    });
    if let Some(top_p) = params.top_p {
        config["topP"] = json!(top_p);
    }
    if let Some(seed) = params.seed {
        config["seed"] = json!(seed);
    }
    if !params.stop.is_empty() {
        config["stopSequences"] = json!(params.stop);
    }
    json!({
        "contents": [{ "role": "user", "parts": [{ "text": request.prompt }] }],
        "generationConfig": config,
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Body {
    candidates: Option<Vec<Candidate>>,
    usage_metadata: Option<UsageMetadata>,
    prompt_feedback: Option<PromptFeedback>,
    /// The model version that answered (e.g. `gemini-1.5-flash-002` for
    /// `gemini-1.5-flash`).
    model_version: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    content: Option<Content>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Content {
    parts: Option<Vec<Part>>,
}

#[derive(Deserialize)]
struct Part {
    text: Option<String>,
    /// Thought summaries (only sent when asked for) are not the answer.
    #[serde(default)]
    thought: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UsageMetadata {
    prompt_token_count: Option<u32>,
    candidates_token_count: Option<u32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    block_reason: Option<String>,
}

/// The first candidate's text parts joined. A candidate without content (blocked for
/// safety, recitation…) is a format error naming the reason; content without parts (the
/// output budget ran out before any text) is empty text.
pub fn parse_response(body: &[u8]) -> Result<Response, BodyError> {
    let body: Body = decode_body(body)?;
    let candidate = body
        .candidates
        .and_then(|c| c.into_iter().next())
        .ok_or_else(|| {
            let reason = body.prompt_feedback.and_then(|f| f.block_reason);
            BodyError::Format(match reason {
                Some(reason) => format!("no candidates: prompt blocked ({reason})"),
                None => "no candidates in the response".into(),
            })
        })?;
    let Some(content) = candidate.content else {
        let reason = candidate
            .finish_reason
            .as_deref()
            .unwrap_or("no finishReason");
        return Err(BodyError::Format(format!(
            "candidate without content ({reason})"
        )));
    };
    let text: String = content
        .parts
        .unwrap_or_default()
        .into_iter()
        .filter(|p| !p.thought)
        .filter_map(|p| p.text)
        .collect();
    let (prompt_tokens, completion_tokens) = body.usage_metadata.map_or((None, None), |u| {
        (u.prompt_token_count, u.candidates_token_count)
    });
    Ok(Response {
        text,
        finish_reason: candidate.finish_reason,
        prompt_tokens,
        completion_tokens,
        latency_ms: 0,
        served_model: super::served_version(body.model_version),
        served_fingerprint: None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{ApiMode, BackendKind, GenerationParams, ModelIdentity};
    use super::*;

    #[test]
    fn body_maps_generation_config() {
        let request = Request {
            model: ModelIdentity {
                backend: BackendKind::Gemini,
                model: "gemini".into(),
                revision: "r".into(),
            },
            api: ApiMode::Chat,
            prompt: "p".into(),
            params: GenerationParams {
                max_tokens: 8,
                temperature: 0.0,
                top_p: Some(1.0),
                seed: Some(0),
                stop: vec!["\n".into()],
                stop_rule: None,
            },
            sample: 0,
        };
        assert_eq!(
            request_body(&request),
            json!({"contents": [{"role": "user", "parts": [{"text": "p"}]}],
                   "generationConfig": {"maxOutputTokens": 8, "temperature": 0.0, "candidateCount": 1,
                                        "topP": 1.0, "seed": 0, "stopSequences": ["\n"]}})
        );
        assert_eq!(
            path("models/gemini-1.5-pro"),
            "/v1beta/models/gemini-1.5-pro:generateContent"
        );
    }

    #[test]
    fn responses_parse() {
        let ok = br#"{"candidates":[{"content":{"role":"model","parts":[{"text":"a"},{"text":"b"}]},"finishReason":"STOP"}],
                      "usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":2,"totalTokenCount":6},
                      "modelVersion":"gemini-1.5-flash-002"}"#;
        let r = parse_response(ok).unwrap();
        assert_eq!(r.served_model.as_deref(), Some("gemini-1.5-flash-002"));
        assert_eq!(
            (r.text.as_str(), r.finish_reason.as_deref()),
            ("ab", Some("STOP"))
        );
        assert_eq!((r.prompt_tokens, r.completion_tokens), (Some(4), Some(2)));
        let blocked = br#"{"promptFeedback":{"blockReason":"SAFETY"}}"#;
        assert_eq!(
            parse_response(blocked),
            Err(BodyError::Format(
                "no candidates: prompt blocked (SAFETY)".into()
            ))
        );
        let no_content = br#"{"candidates":[{"finishReason":"RECITATION"}]}"#;
        assert!(
            matches!(parse_response(no_content), Err(BodyError::Format(m)) if m.contains("RECITATION"))
        );
    }
}
