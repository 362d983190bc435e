//! Anthropic Messages wire format: `POST {base}/v1/messages` with one user message;
//! `x-api-key` and `anthropic-version` headers.
//!
//! The Messages API has no raw-completion mode and no seed: both API modes send the prompt
//! as the single user message (the mode still separates cache entries), and `seed` is dropped.

use serde::Deserialize;
use serde_json::{Value, json};

use super::error::{BodyError, decode_body};
use super::{Request, Response};

pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The API version header value; override with `anthropic_version` in the spec.
pub const DEFAULT_VERSION: &str = "2023-06-01";
pub const PATH: &str = "/v1/messages";

pub fn request_body(model: &str, request: &Request) -> Value {
    let params = &request.params;
    let mut body = json!({
        "model": model,
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "messages": [{ "role": "user", "content": request.prompt }],
    });
    if let Some(top_p) = params.top_p {
        body["top_p"] = json!(top_p);
    }
    if !params.stop.is_empty() {
        body["stop_sequences"] = json!(params.stop);
    }
    body
}

#[derive(Deserialize)]
struct Body {
    content: Option<Vec<Block>>,
    stop_reason: Option<String>,
    usage: Option<Usage>,
    /// The model that answered (an alias such as `claude-3-5-sonnet-latest` names the
    /// snapshot here).
    model: Option<String>,
}

#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    input_tokens: Option<u32>,
    output_tokens: Option<u32>,
}

/// The text blocks joined (an empty `content` is a model that stopped at once: empty text).
pub fn parse_response(body: &[u8]) -> Result<Response, BodyError> {
    let body: Body = decode_body(body)?;
    let blocks = body
        .content
        .ok_or_else(|| BodyError::Format("no `content` in the response".into()))?;
    let mut text = String::new();
    let mut text_blocks = 0;
    for block in &blocks {
        if block.kind == "text" {
            text_blocks += 1;
            text.push_str(block.text.as_deref().unwrap_or_default());
        }
    }
    if text_blocks == 0 && !blocks.is_empty() {
        let kinds: Vec<&str> = blocks.iter().map(|b| b.kind.as_str()).collect();
        return Err(BodyError::Format(format!(
            "no text block in `content` (blocks: {})",
            kinds.join(", ")
        )));
    }
    let (prompt_tokens, completion_tokens) = body
        .usage
        .map_or((None, None), |u| (u.input_tokens, u.output_tokens));
    Ok(Response {
        text,
        finish_reason: body.stop_reason,
        prompt_tokens,
        completion_tokens,
        latency_ms: 0,
        served_model: super::served_version(body.model),
        served_fingerprint: None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{ApiMode, BackendKind, GenerationParams, ModelIdentity};
    use super::*;

    #[test]
    fn body_maps_parameters_and_drops_the_seed() {
        let request = Request {
            model: ModelIdentity {
                backend: BackendKind::Anthropic,
                model: "claude".into(),
                revision: "r".into(),
            },
            api: ApiMode::Chat,
            prompt: "Name the dataset.".into(),
            params: GenerationParams {
                max_tokens: 16,
                temperature: 0.0,
                top_p: None,
                seed: Some(0),
                stop: vec!["\n".into()],
                stop_rule: None,
            },
            sample: 0,
        };
        assert_eq!(
            request_body("claude-x", &request),
            json!({"model": "claude-x", "max_tokens": 16, "temperature": 0.0,
                   "messages": [{"role": "user", "content": "Name the dataset."}], "stop_sequences": ["\n"]})
        );
    }

    #[test]
    fn responses_parse() {
        let ok = br#"{"type":"message","content":[{"type":"text","text":"iris"},{"type":"text","text":"!"}],
                      "model":"claude-3-5-sonnet-20241022",
                      "stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":2}}"#;
        let r = parse_response(ok).unwrap();
        assert_eq!(
            r.served_model.as_deref(),
            Some("claude-3-5-sonnet-20241022")
        );
        assert_eq!(
            (r.text.as_str(), r.finish_reason.as_deref()),
            ("iris!", Some("end_turn"))
        );
        assert_eq!((r.prompt_tokens, r.completion_tokens), (Some(5), Some(2)));
        assert_eq!(
            parse_response(br#"{"content":[],"stop_reason":"end_turn"}"#)
                .unwrap()
                .text,
            ""
        );
        assert!(matches!(
            parse_response(br#"{"type":"message"}"#),
            Err(BodyError::Format(_))
        ));
        assert!(matches!(
            parse_response(br#"{"content":[{"type":"tool_use"}]}"#),
            Err(BodyError::Format(_))
        ));
    }
}
