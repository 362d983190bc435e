//! Per-token log-probabilities of a given text from an OpenAI-compatible server, for the
//! likelihood detectors (SPEC §8).
//!
//! Two ways, tried in order:
//! 1. `POST {base}/completions` with `echo: true, logprobs: 1, max_tokens: 1` (OpenAI's
//!    legacy completions, vLLM): the answer's `logprobs.token_logprobs` covers the prompt.
//!    `return_tokens_as_token_ids` asks vLLM for ids (`token_id:N`) instead of strings.
//! 2. llama.cpp's `llama-server`, which ignores `echo` (it returns the generated token's
//!    log-probability only; ggml-org/llama.cpp#27174): the text is tokenized with
//!    `POST /tokenize`, then for each token i ≥ 1 `POST /completion` with the first i
//!    tokens as the prompt, `n_predict: 1`, `n_probs: 1` and a logit bias that forces
//!    token i to be the one sampled. llama-server reports the sampled token's probability
//!    from the raw logits (`post_sampling_probs` off), before the bias is applied, so that
//!    is `log p(token i | tokens < i)`. Its prompt cache keeps the common prefix, so each
//!    call evaluates one new token.
//!
//! Neither gives the full next-token distribution, so Min-K%++ (μ, σ) is local-only.

use serde_json::{Value, json};

use super::client::Client;
use super::error::LlmError;
use crate::request::TokenLogprobs;

/// How a server's log-probabilities were obtained (stored with them in the cache).
pub const METHOD_ECHO: &str = "openai echo";
pub const METHOD_LLAMA_CPP: &str = "llama.cpp forced-token";

/// A logit bias no real logit can outweigh: the forced token is always the one sampled.
const FORCE_BIAS: f64 = 1.0e4;

/// Attempts per HTTP call: a pooled keep-alive connection the server has closed meanwhile
/// fails once with a transport error, and the next attempt opens a new one.
const ATTEMPTS: usize = 3;

/// [`Client::post_json`], retried on transport errors (timeouts, closed connections).
async fn post(
    client: &Client,
    path: &str,
    body: &Value,
    from_root: bool,
) -> Result<Value, LlmError> {
    let mut attempt = 1;
    loop {
        match client.post_json(path, body, from_root).await {
            Err(e) if e.is_retryable() && attempt < ATTEMPTS => {
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(100 * attempt as u64)).await;
            }
            other => return other,
        }
    }
}

fn format_error(client: &Client, url: &str, message: String) -> LlmError {
    LlmError::ResponseFormat {
        model: client.id().to_owned(),
        url: url.to_owned(),
        message,
    }
}

/// Parses an echo answer: `Some` when it covers the prompt (vLLM, legacy OpenAI), `None`
/// when the server ignored `echo` (one entry for the generated token only).
fn parse_echo(answer: &Value) -> Option<TokenLogprobs> {
    let choice = answer.get("choices")?.get(0)?;
    let logprobs = choice.get("logprobs")?;
    let values = logprobs.get("token_logprobs")?.as_array()?;
    let tokens = logprobs.get("tokens")?.as_array()?;
    let prompt_tokens = answer.get("usage")?.get("prompt_tokens")?.as_u64()? as usize;
    if prompt_tokens < 2 || values.len() < prompt_tokens || tokens.len() < prompt_tokens {
        return None;
    }
    let ids = tokens[..prompt_tokens]
        .iter()
        .map(|t| t.as_str()?.strip_prefix("token_id:")?.parse::<u32>().ok())
        .collect::<Option<Vec<u32>>>()?;
    // The first prompt token has no log-probability (null).
    let scored = values[1..prompt_tokens]
        .iter()
        .map(Value::as_f64)
        .collect::<Option<Vec<f64>>>()?;
    Some(TokenLogprobs {
        tokens: ids,
        logprobs: scored,
        mu: None,
        sigma: None,
    })
}

/// The log-probabilities of `text` as the server tokenizes it, and the method that
/// obtained them (`METHOD_ECHO` or `METHOD_LLAMA_CPP`).
pub async fn score_text(
    client: &Client,
    text: &str,
) -> Result<(&'static str, TokenLogprobs), LlmError> {
    let model = client.config().model.clone();
    let echo = post(
        client,
        "/completions",
        &json!({
            "model": model,
            "prompt": text,
            "max_tokens": 1,
            "temperature": 0.0,
            "echo": true,
            "logprobs": 1,
            "return_tokens_as_token_ids": true,
        }),
        false,
    )
    .await?;
    if let Some(scores) = parse_echo(&echo) {
        return Ok((METHOD_ECHO, scores));
    }
    score_llama_cpp(client, text)
        .await
        .map(|s| (METHOD_LLAMA_CPP, s))
}

/// The forced-token method of llama.cpp's server (see the module docs).
pub async fn score_llama_cpp(client: &Client, text: &str) -> Result<TokenLogprobs, LlmError> {
    let tokenized = post(
        client,
        "/tokenize",
        &json!({ "content": text, "add_special": true }),
        true,
    )
    .await?;
    let ids: Vec<u32> = tokenized
        .get("tokens")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().map(|t| t.as_u64().map(|v| v as u32)).collect())
        .ok_or_else(|| {
            format_error(
                client,
                "/tokenize",
                "the server gives neither echoed prompt log-probabilities (`echo`) nor llama.cpp's `/tokenize`; this server cannot score texts".into(),
            )
        })?;
    score_llama_cpp_ids(client, &ids).await
}

/// How many texts to score at once: the server's slot count where it says (llama.cpp's
/// `/props` → `total_slots`: each text then keeps its own slot's prompt cache, and the
/// server decodes the slots in one batch), else 1; at most `limit`.
pub async fn parallel_texts(client: &Client, limit: usize) -> usize {
    let slots = match client.get_json("/props", true).await {
        Ok(props) => props
            .get("total_slots")
            .and_then(Value::as_u64)
            .unwrap_or(1) as usize,
        Err(_) => 1,
    };
    slots.clamp(1, limit.max(1))
}

/// Scores `texts` with up to `parallel` of them in flight; results in input order.
pub async fn score_texts(
    client: &Client,
    texts: &[String],
    parallel: usize,
) -> Vec<Result<(&'static str, TokenLogprobs), LlmError>> {
    let semaphore = std::sync::Arc::new(tokio::sync::Semaphore::new(parallel.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    for (index, text) in texts.iter().enumerate() {
        let (client, text, semaphore) = (client.clone(), text.clone(), semaphore.clone());
        tasks.spawn(async move {
            let _permit = semaphore.acquire_owned().await.expect("never closed");
            (index, score_text(&client, &text).await)
        });
    }
    let mut results: Vec<Option<Result<(&'static str, TokenLogprobs), LlmError>>> =
        (0..texts.len()).map(|_| None).collect();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((index, result)) => results[index] = Some(result),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    results
        .into_iter()
        .map(|r| r.expect("every task reports"))
        .collect()
}

/// [`score_llama_cpp`] from token ids.
pub async fn score_llama_cpp_ids(client: &Client, ids: &[u32]) -> Result<TokenLogprobs, LlmError> {
    let mut logprobs = Vec::with_capacity(ids.len().saturating_sub(1));
    for i in 1..ids.len() {
        let answer = post(
            client,
            "/completion",
            &json!({
                "prompt": &ids[..i],
                "n_predict": 1,
                "n_probs": 1,
                "temperature": 0.0,
                "cache_prompt": true,
                "post_sampling_probs": false,
                "logit_bias": [[ids[i], FORCE_BIAS]],
            }),
            true,
        )
        .await?;
        let entry = answer
            .get("completion_probabilities")
            .and_then(|c| c.get(0))
            .ok_or_else(|| {
                format_error(client, "/completion", "no `completion_probabilities` in the answer (is this llama.cpp's llama-server?)".into())
            })?;
        let id = entry.get("id").and_then(Value::as_u64);
        if id != Some(u64::from(ids[i])) {
            return Err(format_error(
                client,
                "/completion",
                format!(
                    "token {i}: the server sampled {id:?} instead of the forced token {}",
                    ids[i]
                ),
            ));
        }
        let logprob = entry
            .get("logprob")
            .and_then(Value::as_f64)
            .ok_or_else(|| {
                format_error(client, "/completion", format!("token {i}: no `logprob`"))
            })?;
        logprobs.push(logprob);
    }
    Ok(TokenLogprobs {
        tokens: ids.to_vec(),
        logprobs,
        mu: None,
        sigma: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_answers_are_read_only_when_they_cover_the_prompt() {
        let vllm = json!({
            "choices": [{ "text": "x", "logprobs": {
                "tokens": ["token_id:5", "token_id:7", "token_id:9", "token_id:2"],
                "token_logprobs": [null, -1.5, -0.25, -3.0]
            }}],
            "usage": { "prompt_tokens": 3 }
        });
        let scores = parse_echo(&vllm).unwrap();
        assert_eq!(scores.tokens, vec![5, 7, 9]);
        assert_eq!(scores.logprobs, vec![-1.5, -0.25]);
        // llama.cpp: `echo` ignored, one entry for the generated token.
        let llama = json!({
            "choices": [{ "text": "2", "logprobs": { "content": [{ "id": 34, "logprob": -1.78 }] } }],
            "usage": { "prompt_tokens": 8 }
        });
        assert_eq!(parse_echo(&llama), None);
    }
}
