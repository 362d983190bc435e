//! HTTP helpers of the model client that know nothing of a model: headers a spec may add
//! (never credentials), how long a server asks us to wait, loopback URLs, URL roots and the
//! causes under a transport error.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::error;

/// The causes under a reqwest error ("connection refused", "connection closed before
/// message completed"), which its own message hides.
pub fn error_chain(e: &reqwest::Error) -> String {
    let mut parts = Vec::new();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.contains(&text) {
            parts.push(text);
        }
        source = cause.source();
    }
    if parts.is_empty() {
        e.to_string()
    } else {
        parts.join(": ")
    }
}

/// Headers that carry credentials: refused in `headers`, which is written in the spec.
const CREDENTIAL_HEADERS: [&str; 6] = [
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "cookie",
];

pub fn extra_headers(headers: &BTreeMap<String, String>) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("header name {name:?} is not valid"))?;
        if CREDENTIAL_HEADERS.contains(&header.as_str()) {
            return Err(format!(
                "header {name:?} carries credentials and would be written in the spec: \
                 put the key in an environment variable and name it in api_key_env"
            ));
        }
        let value = HeaderValue::from_str(value)
            .map_err(|_| format!("header {name:?} has an invalid value"))?;
        map.insert(header, value);
    }
    Ok(map)
}

/// `Retry-After` on any status; OpenAI's `x-ratelimit-reset-requests`/`-tokens` on 429
/// (the longer of the two: both limits must have reset).
pub fn retry_after(status: StatusCode, headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(value) = header("retry-after")
        && let Some(wait) = error::parse_retry_after(value, SystemTime::now())
    {
        return Some(wait);
    }
    if status == StatusCode::TOO_MANY_REQUESTS {
        return ["x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"]
            .into_iter()
            .filter_map(|name| header(name).and_then(error::parse_go_duration))
            .max();
    }
    None
}

pub fn is_loopback(url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(url) else {
        return false;
    };
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `base` without a trailing `/`, and without its `/v1` when `from_root` (llama.cpp's own
/// `/tokenize` and `/completion` live beside `/v1`).
pub fn url_root(base: &str, from_root: bool) -> String {
    let base = base.trim_end_matches('/');
    match (from_root, base.strip_suffix("/v1")) {
        (true, Some(stripped)) => stripped.to_owned(),
        _ => base.to_owned(),
    }
}
