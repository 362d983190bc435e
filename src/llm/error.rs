//! Errors of model backends and their classification: retry, fail the request, or stop the model.
//!
//! Architecture Invariant: no error message ever contains an API key. Server messages are
//! truncated and scrubbed of the key (some servers echo part of a bad key back) before they
//! are stored here; nothing here holds a header map or a request body.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest server message kept in an error (characters).
pub const SERVER_MESSAGE_LIMIT: usize = 300;

/// What a caller should do about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Transient: try the same request again after a delay (429, 5xx, timeouts, broken
    /// connections, truncated or unparsable bodies).
    Retryable,
    /// This request cannot succeed as sent (400, 422, a response without text); other
    /// requests to the same model may. Not cached; the next run tries again.
    FailsRequest,
    /// No request to this model can succeed until the user acts (missing key, 401, 403,
    /// 404, bad configuration): stop sending to this model.
    FailsModel,
}

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error(
        "model {model}: environment variable {var} is not set (api_key_env in the spec); \
         export it or remove api_key_env for a server without keys"
    )]
    MissingApiKey { model: String, var: String },

    #[error("model {model}: invalid client configuration: {message}")]
    Config { model: String, message: String },

    #[error("model {model}: HTTP {status}{} from {url}: {message}{hint}", status_reason(*.status))]
    Http {
        model: String,
        status: u16,
        url: String,
        /// Truncated, key-scrubbed server message (the API's `error.message` when it has one).
        message: String,
        /// What to do about it, starting with "; " (empty when there is nothing to add).
        hint: String,
        retry_after: Option<Duration>,
    },

    #[error("model {model}: no response from {url} within {timeout:?}")]
    Timeout {
        model: String,
        url: String,
        timeout: Duration,
    },

    #[error("model {model}: connection to {url} failed: {message}")]
    Connection {
        model: String,
        url: String,
        message: String,
    },

    /// A body that ended early or is not JSON: a transport fault, so it is retried.
    #[error("model {model}: unreadable response body from {url}: {message}")]
    InvalidBody {
        model: String,
        url: String,
        message: String,
    },

    /// Well-formed JSON without the expected text (empty `choices`, blocked prompt…).
    #[error("model {model}: unexpected response format from {url}: {message}")]
    ResponseFormat {
        model: String,
        url: String,
        message: String,
    },

    #[error("{last} (gave up after {attempts} attempts)")]
    RetriesExhausted { attempts: u32, last: Box<LlmError> },
}

impl LlmError {
    pub fn class(&self) -> ErrorClass {
        match self {
            LlmError::MissingApiKey { .. } | LlmError::Config { .. } => ErrorClass::FailsModel,
            LlmError::Http { status, .. } => classify_status(*status),
            LlmError::Timeout { .. }
            | LlmError::Connection { .. }
            | LlmError::InvalidBody { .. } => ErrorClass::Retryable,
            LlmError::ResponseFormat { .. } | LlmError::RetriesExhausted { .. } => {
                ErrorClass::FailsRequest
            }
        }
    }

    pub fn is_retryable(&self) -> bool {
        self.class() == ErrorClass::Retryable
    }

    /// The server's requested wait (`Retry-After`, or OpenAI's `x-ratelimit-reset-*` on 429).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// HTTP status of the (last) failed attempt, if the server answered at all.
    pub fn status(&self) -> Option<u16> {
        match self {
            LlmError::Http { status, .. } => Some(*status),
            LlmError::RetriesExhausted { last, .. } => last.status(),
            _ => None,
        }
    }

    /// Attempts made before giving up (`None` when the error was not retried to exhaustion).
    pub fn attempts(&self) -> Option<u32> {
        match self {
            LlmError::RetriesExhausted { attempts, .. } => Some(*attempts),
            _ => None,
        }
    }
}

/// Why a successful (2xx) body could not be turned into a `Response`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Not JSON, or JSON cut short: the transfer broke, so retrying may help.
    Unreadable(String),
    /// JSON of the wrong shape or without text: the server meant it.
    Format(String),
}

/// Deserializes a response body, telling a broken transfer from a wrong shape.
pub fn decode_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, BodyError> {
    serde_json::from_slice(body).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => BodyError::Format(e.to_string()),
        _ => BodyError::Unreadable(format!("{e} ({} bytes)", body.len())),
    })
}

/// " Not Found", " Too Many Requests"… (empty for statuses without a standard name).
fn status_reason(status: u16) -> String {
    reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .map_or_else(String::new, |reason| format!(" {reason}"))
}

/// Retryable: rate limits, overload and gateway failures. Fatal: what the user must fix.
pub fn classify_status(status: u16) -> ErrorClass {
    match status {
        408 | 409 | 425 | 429 | 500 | 502 | 503 | 504 | 529 => ErrorClass::Retryable,
        401 | 403 | 404 => ErrorClass::FailsModel,
        // Other 5xx are server faults too (520-524 from proxies, 598/599 from gateways).
        500..=599 => ErrorClass::Retryable,
        _ => ErrorClass::FailsRequest,
    }
}

/// What to tell the user about a fatal status (starts with "; ", or is empty).
pub fn status_hint(status: u16, api_key_env: Option<&str>) -> String {
    match (status, api_key_env) {
        (401, Some(var)) => {
            format!("; the server rejected the API key: check environment variable {var} (api_key_env in the spec)")
        }
        (401, None) => {
            "; the server requires an API key: set api_key_env in the spec to the name of the environment variable that holds it".into()
        }
        (403, Some(var)) => {
            format!("; the key in environment variable {var} (api_key_env) has no access to this model")
        }
        (403, None) => "; access denied: the server may require an API key (api_key_env in the spec)".into(),
        (404, _) => "; check the model name and base_url in the spec".into(),
        (400 | 422, _) => "; the server refused the request as sent (prompt too long for the context? unsupported parameter?)".into(),
        _ => String::new(),
    }
}

/// The server's own explanation, from the JSON error shapes of OpenAI (`{"error":{"message"}}`),
/// Anthropic (`{"type":"error","error":{"message"}}`) and Gemini (`{"error":{"message"}}`),
/// else the raw body; truncated and with every occurrence of `secret` replaced.
pub fn server_message(body: &[u8], secret: Option<&str>) -> String {
    let from_json = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let error = v.get("error")?;
            match error {
                serde_json::Value::String(s) => Some(s.clone()),
                _ => error
                    .get("message")
                    .and_then(|m| m.as_str())
                    .map(str::to_owned),
            }
        });
    let raw = from_json.unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    let collapsed = raw.split_whitespace().collect::<Vec<_>>().join(" ");
    let scrubbed = redact(&collapsed, secret);
    let text = if scrubbed.is_empty() {
        "(empty body)".to_owned()
    } else {
        scrubbed
    };
    truncate_chars(&text, SERVER_MESSAGE_LIMIT)
}

/// Replaces the secret (and, for keys long enough to be recognised by it, its last 8
/// characters, which APIs like to echo as `sk-...abcd1234`) with `[redacted]`.
pub fn redact(text: &str, secret: Option<&str>) -> String {
    let Some(secret) = secret.filter(|s| !s.is_empty()) else {
        return text.to_owned();
    };
    let mut out = text.replace(secret, "[redacted]");
    let chars: Vec<char> = secret.chars().collect();
    if chars.len() >= 20 {
        let tail: String = chars[chars.len() - 8..].iter().collect();
        out = out.replace(&tail, "[redacted]");
    }
    out
}

/// What a redacted credential reads as in stored specs and messages.
pub const REDACTED: &str = "REDACTED";

/// A URL with its credentials replaced: the userinfo (`user:pass@`) and every query value
/// (`?api_key=…`, `key=…`). Works on text that is not a valid URL too.
pub fn redact_url(url: &str) -> String {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let mut out = String::with_capacity(url.len());
    out.push_str(&url[..scheme_end]);
    match authority.rfind('@') {
        Some(at) => {
            out.push_str(REDACTED);
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    let tail = &rest[authority_end..];
    let Some(question) = tail.find('?') else {
        out.push_str(tail);
        return out;
    };
    out.push_str(&tail[..=question]);
    let after = &tail[question + 1..];
    let (query, fragment) = match after.find('#') {
        Some(hash) => (&after[..hash], &after[hash..]),
        None => (after, ""),
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) => format!("{name}={REDACTED}"),
            None if pair.is_empty() => String::new(),
            // A bare value (`?sk-…`) may be a key as well.
            None => REDACTED.to_string(),
        })
        .collect();
    out.push_str(&pairs.join("&"));
    out.push_str(fragment);
    out
}

pub fn truncate_chars(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// `Retry-After` is either delta-seconds or an HTTP date (RFC 9110 §10.2.3).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds));
    }
    let at = parse_http_date(value)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// IMF-fixdate only (`Sun, 06 Nov 1994 08:49:37 GMT`): the form RFC 9110 requires senders
/// to use. The obsolete forms are rejected (the caller then falls back to backoff).
pub fn parse_http_date(value: &str) -> Option<SystemTime> {
    let rest = value.trim().split_once(", ")?.1;
    let parts: Vec<&str> = rest.split(' ').collect();
    let [day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    let day: u32 = day.parse().ok()?;
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| m == month)? as u32
        + 1;
    let year: i64 = year.parse().ok()?;
    let mut hms = time.split(':').map(|p| p.parse::<u32>().ok());
    let (Some(Some(h)), Some(Some(m)), Some(Some(s)), None) =
        (hms.next(), hms.next(), hms.next(), hms.next())
    else {
        return None;
    };
    if !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + i64::from(h) * 3600 + i64::from(m) * 60 + i64::from(s);
    let seconds = u64::try_from(seconds).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(seconds))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// OpenAI's `x-ratelimit-reset-requests` / `-tokens` values are Go durations: `1s`, `6m0s`,
/// `20ms`, `1h2m3.5s`.
pub fn parse_go_duration(value: &str) -> Option<Duration> {
    let mut rest = value.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0.0_f64;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[unit_len..];
    }
    total.is_finite().then(|| Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_accepts_seconds_and_http_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_retry_after(" 0.5 ", now),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("-1", now), None);
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(
            parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(UNIX_EPOCH)
        );
        assert_eq!(
            parse_http_date("Tue, 29 Feb 2028 12:00:00 GMT"),
            Some(UNIX_EPOCH + Duration::from_secs(1_835_438_400))
        );
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_go_duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(parse_go_duration("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(
            parse_go_duration("1h2m3.5s"),
            Some(Duration::from_secs_f64(3723.5))
        );
        assert_eq!(parse_go_duration("5"), None);
        assert_eq!(parse_go_duration("1x"), None);
    }

    #[test]
    fn statuses_are_classified() {
        for s in [429, 500, 502, 503, 504, 529] {
            assert_eq!(classify_status(s), ErrorClass::Retryable, "{s}");
        }
        for s in [401, 403, 404] {
            assert_eq!(classify_status(s), ErrorClass::FailsModel, "{s}");
        }
        for s in [400, 422] {
            assert_eq!(classify_status(s), ErrorClass::FailsRequest, "{s}");
        }
    }

    #[test]
    fn server_messages_are_extracted_truncated_and_scrubbed() {
        let key = "sk-test-0123456789abcdefghijklmnop";
        let body = format!(
            r#"{{"error":{{"message":"Incorrect API key provided: {key} or sk-...ijklmnop"}}}}"#
        );
        let message = server_message(body.as_bytes(), Some(key));
        assert_eq!(
            message,
            "Incorrect API key provided: [redacted] or sk-...[redacted]"
        );
        let long = "x".repeat(1000);
        assert_eq!(
            server_message(long.as_bytes(), None).chars().count(),
            SERVER_MESSAGE_LIMIT + 1
        );
        assert_eq!(server_message(b"", None), "(empty body)");
    }
}
