//! OpenAI-compatible wire format: `POST {base}/completions` (raw prompt) and
//! `POST {base}/chat/completions` (one user message); `Authorization: Bearer <key>`.
//!
//! Pure mapping between our `Request`/`Response` and the JSON bodies; `client` does the IO.
//! Served by OpenAI, vLLM, llama.cpp's llama-server, Ollama, TGI, LM Studio and most gateways.

use serde::Deserialize;
use serde_json::{Value, json};

use super::error::{BodyError, decode_body};
use super::{ApiMode, Request, Response};

/// Appended to the base URL, which carries the version (`https://api.openai.com/v1`).
pub fn path(api: ApiMode) -> &'static str {
    match api {
        ApiMode::Completions => "/completions",
        ApiMode::Chat => "/chat/completions",
    }
}

/// One completion, never streamed: `n` = 1 (samples are separate requests with their own
/// cache entries), parameters exactly as the request says (SPEC §5 defaults are the caller's).
pub fn request_body(model: &str, request: &Request) -> Value {
    let params = &request.params;
    let mut body = json!({
        "model": model,
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "n": 1,
        "stream": false,
    });
    match request.api {
        ApiMode::Completions => body["prompt"] = json!(request.prompt),
        ApiMode::Chat => body["messages"] = json!([{ "role": "user", "content": request.prompt }]),
    }
    if let Some(top_p) = params.top_p {
        body["top_p"] = json!(top_p);
    }
    if let Some(seed) = params.seed {
        body["seed"] = json!(seed);
    }
    if !params.stop.is_empty() {
        body["stop"] = json!(params.stop);
    }
    body
}

#[derive(Deserialize)]
struct Body {
    choices: Option<Vec<Choice>>,
    usage: Option<Usage>,
    /// The snapshot that answered (OpenAI: `gpt-4o-2024-08-06` for `gpt-4o`; vLLM: the
    /// served model name; llama.cpp: its model alias or file).
    model: Option<String>,
    system_fingerprint: Option<String>,
}

#[derive(Deserialize)]
struct Choice {
    /// `/completions`
    text: Option<String>,
    /// `/chat/completions`
    message: Option<Message>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Message {
    content: Option<String>,
    refusal: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    prompt_tokens: Option<u32>,
    completion_tokens: Option<u32>,
}

/// Text, finish reason and token counts of the first choice; `latency_ms` is left at 0.
pub fn parse_response(api: ApiMode, body: &[u8]) -> Result<Response, BodyError> {
    let body: Body = decode_body(body)?;
    let choice = match body.choices {
        None => return Err(BodyError::Format("no `choices` in the response".into())),
        Some(choices) => choices
            .into_iter()
            .next()
            .ok_or_else(|| BodyError::Format("empty `choices` array".into()))?,
    };
    let text = match api {
        ApiMode::Completions => choice
            .text
            .ok_or_else(|| BodyError::Format("`choices[0].text` is missing".into()))?,
        ApiMode::Chat => match choice.message {
            Some(Message {
                content: Some(content),
                ..
            }) => content,
            Some(Message {
                content: None,
                refusal: Some(refusal),
            }) => {
                return Err(BodyError::Format(format!("the model refused: {refusal}")));
            }
            _ => {
                return Err(BodyError::Format(
                    "`choices[0].message.content` is missing".into(),
                ));
            }
        },
    };
    let (prompt_tokens, completion_tokens) = body
        .usage
        .map_or((None, None), |u| (u.prompt_tokens, u.completion_tokens));
    Ok(Response {
        text,
        finish_reason: choice.finish_reason,
        prompt_tokens,
        completion_tokens,
        latency_ms: 0,
        served_model: super::served_version(body.model),
        served_fingerprint: super::served_version(body.system_fingerprint),
    })
}

#[cfg(test)]
mod tests {
    use super::super::{BackendKind, GenerationParams, ModelIdentity};
    use super::*;

    fn request(api: ApiMode) -> Request {
        Request {
            model: ModelIdentity {
                backend: BackendKind::OpenaiCompatible,
                model: "m".into(),
                revision: "r".into(),
            },
            api,
            prompt: "The age is".into(),
            params: GenerationParams {
                max_tokens: 16,
                temperature: 0.0,
                top_p: None,
                seed: Some(0),
                stop: vec!["\n".into()],
                stop_rule: None,
            },
            sample: 0,
        }
    }

    #[test]
    fn completion_body_maps_every_parameter() {
        let body = request_body("gpt-x", &request(ApiMode::Completions));
        assert_eq!(
            body,
            json!({"model": "gpt-x", "prompt": "The age is", "max_tokens": 16, "temperature": 0.0,
                   "seed": 0, "stop": ["\n"], "n": 1, "stream": false})
        );
        let chat = request_body("gpt-x", &request(ApiMode::Chat));
        assert_eq!(
            chat["messages"],
            json!([{"role": "user", "content": "The age is"}])
        );
        assert!(chat.get("prompt").is_none() && chat.get("top_p").is_none());
    }

    #[test]
    fn responses_parse_and_empty_choices_are_format_errors() {
        let ok = br#"{"choices":[{"text":" 39","finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;
        let r = parse_response(ApiMode::Completions, ok).unwrap();
        assert_eq!(
            (r.text.as_str(), r.finish_reason.as_deref()),
            (" 39", Some("stop"))
        );
        assert_eq!((r.prompt_tokens, r.completion_tokens), (Some(3), Some(2)));
        assert_eq!((r.served_model, r.served_fingerprint), (None, None));
        let chat = br#"{"choices":[{"message":{"role":"assistant","content":"Yes"},"finish_reason":"length"}],
                        "model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4"}"#;
        let r = parse_response(ApiMode::Chat, chat).unwrap();
        assert_eq!(r.text, "Yes");
        assert_eq!(r.served_model.as_deref(), Some("gpt-4o-2024-08-06"));
        assert_eq!(r.served_fingerprint.as_deref(), Some("fp_50cad350e4"));
        let odd = br#"{"choices":[{"text":"x"}],"model":"  ","system_fingerprint":"fp\n1"}"#;
        let r = parse_response(ApiMode::Completions, odd).unwrap();
        assert_eq!(r.served_model, None, "blank is not a version");
        assert_eq!(r.served_fingerprint.as_deref(), Some("fp1"));
        assert!(matches!(
            parse_response(ApiMode::Completions, br#"{"choices":[]}"#),
            Err(BodyError::Format(_))
        ));
        assert!(matches!(
            parse_response(ApiMode::Chat, br#"{"choices":[{"text":"x"}]}"#),
            Err(BodyError::Format(_))
        ));
        assert!(matches!(
            parse_response(ApiMode::Completions, br#"{"choices":[{"te"#),
            Err(BodyError::Unreadable(_))
        ));
    }
}
