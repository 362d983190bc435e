//! Backends against the loopback mock server: wire formats, retries, limits, balancing,
//! secrets, and the throughput of the pooled client.

#[path = "support/mock_server.rs"]
mod mock_server;

use std::time::{Duration, Instant};

use mock_server::{Fault, MockConfig, MockServer, Plan, answer, fail_first};
use tabcontam::llm::client::{Balance, Client, ClientConfig};
use tabcontam::llm::error::{ErrorClass, LlmError};
use tabcontam::llm::{ApiMode, BackendKind, GenerationParams, ModelIdentity, Request};

const KEY: &str = "sk-test-secret-0123456789abcdefXYZ";

fn request(config: &ClientConfig, prompt: &str, max_tokens: u32) -> Request {
    Request {
        model: ModelIdentity {
            backend: config.backend,
            model: config.model.clone(),
            revision: "test".into(),
        },
        api: config.api,
        prompt: prompt.into(),
        params: GenerationParams {
            max_tokens,
            temperature: 0.0,
            top_p: None,
            seed: Some(0),
            stop: Vec::new(),
            stop_rule: None,
        },
        sample: 0,
    }
}

/// A client whose key (if any) comes from a fake environment: tests never touch the real one.
fn client(mut config: ClientConfig, key: Option<&'static str>) -> Client {
    if key.is_some() {
        config.api_key_env = Some("TABCONTAM_TEST_API_KEY".into());
    }
    Client::with_env(config, move |_| key.map(str::to_owned)).expect("client builds")
}

fn openai(server: &MockServer) -> ClientConfig {
    server.client_config(
        BackendKind::OpenaiCompatible,
        ApiMode::Completions,
        "mock-base",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_completions_maps_parameters_and_parses_the_answer() {
    let server = MockServer::start(MockConfig::new().required_api_key(KEY)).await;
    let config = openai(&server);
    let client = client(config.clone(), Some(KEY));
    let mut req = request(&config, "The age is 39, The sex is", 3);
    req.params.stop = vec!["\n".into()];
    let response = client.complete(&req).await.unwrap();

    let (expected, truncated) = answer(&req.prompt, 3, &[]);
    assert!(truncated);
    assert_eq!(response.text, expected);
    assert_eq!(response.finish_reason.as_deref(), Some("length"));
    assert_eq!(
        (response.prompt_tokens, response.completion_tokens),
        (Some(7), Some(3))
    );

    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/completions");
    assert_eq!(sent.json["model"], "mock-base");
    assert_eq!(sent.json["prompt"], "The age is 39, The sex is");
    assert_eq!(sent.json["temperature"], 0.0);
    assert_eq!(sent.json["seed"], 0);
    assert_eq!(sent.json["max_tokens"], 3);
    assert_eq!(sent.json["n"], 1);
    assert_eq!(sent.json["stop"], serde_json::json!(["\n"]));
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_chat_sends_one_user_message() {
    let server = MockServer::start_default().await;
    let config = server.client_config(BackendKind::OpenaiCompatible, ApiMode::Chat, "mock-chat");
    let client = client(config.clone(), None);
    let req = request(&config, "Which dataset is this?", 64);
    let response = client.complete(&req).await.unwrap();
    assert_eq!(response.text, answer("Which dataset is this?", 64, &[]).0);
    assert_eq!(response.finish_reason.as_deref(), Some("stop"));
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(
        sent.json["messages"],
        serde_json::json!([{"role": "user", "content": "Which dataset is this?"}])
    );
    assert!(
        sent.header("authorization").is_none(),
        "no key configured, none sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_messages_happy_path() {
    let server = MockServer::start(MockConfig::new().required_api_key(KEY)).await;
    let config = server.client_config(BackendKind::Anthropic, ApiMode::Chat, "claude-mock");
    let client = client(config.clone(), Some(KEY));
    let mut req = request(&config, "Name the dataset: sepal length, petal width", 64);
    req.params.stop = vec!["petal".into()];
    let response = client.complete(&req).await.unwrap();
    assert_eq!(
        response.text,
        "mock answer to: Name the dataset: sepal length, "
    );
    assert_eq!(response.finish_reason.as_deref(), Some("end_turn"));
    assert_eq!(
        (response.prompt_tokens, response.completion_tokens),
        (Some(7), Some(8))
    );

    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some(KEY));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.json["max_tokens"], 64);
    assert_eq!(sent.json["temperature"], 0.0);
    assert_eq!(sent.json["stop_sequences"], serde_json::json!(["petal"]));
    assert!(
        sent.json.get("seed").is_none(),
        "the Messages API has no seed"
    );
    assert!(sent.header("authorization").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_happy_path_keeps_the_key_out_of_the_url() {
    let server = MockServer::start(MockConfig::new().required_api_key(KEY)).await;
    let config = server.client_config(BackendKind::Gemini, ApiMode::Chat, "gemini-mock");
    let client = client(config.clone(), Some(KEY));
    let req = request(&config, "Is the income above 50K?", 2);
    let response = client.complete(&req).await.unwrap();
    assert_eq!(response.text, "mock answer");
    assert_eq!(response.finish_reason.as_deref(), Some("MAX_TOKENS"));
    assert_eq!(
        (response.prompt_tokens, response.completion_tokens),
        (Some(5), Some(2))
    );

    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1beta/models/gemini-mock:generateContent");
    assert_eq!(sent.header("x-goog-api-key"), Some(KEY));
    let config = &sent.json["generationConfig"];
    assert_eq!(
        (config["maxOutputTokens"].as_u64(), config["seed"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(config["temperature"], 0.0);
    for r in server.requests() {
        assert!(
            !r.path.contains(KEY) && !r.path.contains("key="),
            "key in URL: {}",
            r.path
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_waits_at_least_retry_after() {
    let server =
        MockServer::start(MockConfig::new().script(fail_first(1, Fault::rate_limited("1")))).await;
    let config = openai(&server);
    let client = client(config.clone(), None);
    let started = Instant::now();
    let response = client.complete(&request(&config, "p", 4)).await.unwrap();
    let waited = started.elapsed();
    assert!(!response.text.is_empty());
    assert_eq!(server.request_count(), 2);
    assert!(
        waited >= Duration::from_secs(1),
        "retried after {waited:?}, Retry-After said 1 s"
    );
    assert!(waited < Duration::from_secs(3), "{waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_retried_until_success() {
    let server = MockServer::start(MockConfig::new().script(|r| Plan {
        latency: Duration::ZERO,
        fault: match r.index {
            0 => Fault::status(500),
            1 => Fault::status(503),
            2 => Fault::status(502),
            _ => Fault::None,
        },
    }))
    .await;
    let config = openai(&server);
    let response = client(config.clone(), None)
        .complete(&request(&config, "p", 4))
        .await
        .unwrap();
    assert_eq!(response.text, answer("p", 4, &[]).0);
    assert_eq!(server.request_count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_are_retried() {
    let server = MockServer::start(MockConfig::new().script(fail_first(1, Fault::Hang))).await;
    let mut config = openai(&server);
    config.timeout_s = 0.3;
    let started = Instant::now();
    let response = client(config.clone(), None)
        .complete(&request(&config, "p", 4))
        .await
        .unwrap();
    assert!(!response.text.is_empty());
    assert_eq!(server.request_count(), 2);
    assert!(started.elapsed() >= Duration::from_millis(300));

    let hung = MockServer::start(MockConfig::new().script(|_| Plan {
        latency: Duration::ZERO,
        fault: Fault::Hang,
    }))
    .await;
    let mut config = openai(&hung);
    config.timeout_s = 0.2;
    let error = client(config.clone(), None)
        .complete_once(&request(&config, "p", 4))
        .await
        .unwrap_err();
    assert!(matches!(error, LlmError::Timeout { .. }), "{error}");
    assert!(error.is_retryable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_bodies_are_retried() {
    let server =
        MockServer::start(MockConfig::new().script(fail_first(2, Fault::TruncatedBody))).await;
    let config = openai(&server);
    let client = client(config.clone(), None);
    let once = client
        .complete_once(&request(&config, "p", 4))
        .await
        .unwrap_err();
    assert!(matches!(once, LlmError::InvalidBody { .. }), "{once}");
    assert!(once.is_retryable());
    let response = client.complete(&request(&config, "p", 4)).await.unwrap();
    assert_eq!(response.text, answer("p", 4, &[]).0);
    assert_eq!(server.request_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_resets_are_retried() {
    let server = MockServer::start(MockConfig::new().script(fail_first(2, Fault::Reset))).await;
    let config = openai(&server);
    let client = client(config.clone(), None);
    let once = client
        .complete_once(&request(&config, "p", 4))
        .await
        .unwrap_err();
    assert!(matches!(once, LlmError::Connection { .. }), "{once}");
    assert!(once.is_retryable());
    let response = client.complete(&request(&config, "p", 4)).await.unwrap();
    assert_eq!(response.text, answer("p", 4, &[]).0);
    assert_eq!(server.request_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthorized_is_fatal_names_the_variable_and_never_the_key() {
    let server = MockServer::start(MockConfig::new().required_api_key("the-right-key")).await;
    for backend in [
        BackendKind::OpenaiCompatible,
        BackendKind::Anthropic,
        BackendKind::Gemini,
    ] {
        let config = server.client_config(backend, ApiMode::Chat, "m");
        let before = server.request_count();
        let error = client(config.clone(), Some(KEY))
            .complete(&request(&config, "p", 4))
            .await
            .unwrap_err();
        assert_eq!(
            server.request_count(),
            before + 1,
            "{backend:?}: 401 must not be retried"
        );
        assert_eq!(error.class(), ErrorClass::FailsModel);
        assert_eq!(error.status(), Some(401));
        let message = error.to_string();
        assert!(message.contains("TABCONTAM_TEST_API_KEY"), "{message}");
        assert!(
            message.contains("model m") && message.contains("401"),
            "{message}"
        );
        assert!(
            message.contains("Incorrect API key provided"),
            "the server's message is kept: {message}"
        );
        assert!(
            !message.contains(KEY) && !message.contains("abcdefXYZ"),
            "key leaked: {message}"
        );
        assert!(!format!("{error:?}").contains(KEY), "key leaked into Debug");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_environment_variable_is_reported_before_any_request() {
    let server = MockServer::start_default().await;
    let mut config = openai(&server);
    config.id = Some("local-llama".into());
    config.api_key_env = Some("TABCONTAM_TEST_SURELY_UNSET_VARIABLE".into());
    let error = Client::new(config).unwrap_err();
    assert_eq!(
        error.to_string(),
        "model local-llama: environment variable TABCONTAM_TEST_SURELY_UNSET_VARIABLE is not set \
         (api_key_env in the spec); export it or remove api_key_env for a server without keys"
    );
    assert_eq!(error.class(), ErrorClass::FailsModel);
    assert_eq!(server.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_retries_report_the_attempts() {
    let server = MockServer::start(MockConfig::new().script(|_| Plan {
        latency: Duration::ZERO,
        fault: Fault::status(503),
    }))
    .await;
    let mut config = openai(&server);
    config.max_retries = 2;
    let error = client(config.clone(), None)
        .complete(&request(&config, "p", 4))
        .await
        .unwrap_err();
    assert_eq!(server.request_count(), 3);
    assert_eq!(error.attempts(), Some(3));
    assert_eq!(error.status(), Some(503));
    let message = error.to_string();
    assert!(
        message.contains("503") && message.ends_with("(gave up after 3 attempts)"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fatal_statuses_are_not_retried_and_empty_choices_are_format_errors() {
    for (status, class) in [
        (400, ErrorClass::FailsRequest),
        (404, ErrorClass::FailsModel),
        (422, ErrorClass::FailsRequest),
    ] {
        let server = MockServer::start(MockConfig::new().script(move |_| Plan {
            latency: Duration::ZERO,
            fault: Fault::status(status),
        }))
        .await;
        let config = openai(&server);
        let error = client(config.clone(), None)
            .complete(&request(&config, "p", 4))
            .await
            .unwrap_err();
        assert_eq!(
            (error.status(), error.class()),
            (Some(status), class),
            "{error}"
        );
        assert!(
            error.to_string().contains(&format!("mock status {status}")),
            "{error}"
        );
        assert_eq!(server.request_count(), 1);
    }
    let empty = Fault::Body(serde_json::json!({"choices": [], "usage": {"prompt_tokens": 1}}));
    let server = MockServer::start(MockConfig::new().script(move |_| Plan {
        latency: Duration::ZERO,
        fault: empty.clone(),
    }))
    .await;
    let config = openai(&server);
    let error = client(config.clone(), None)
        .complete(&request(&config, "p", 4))
        .await
        .unwrap_err();
    assert!(matches!(error, LlmError::ResponseFormat { .. }), "{error}");
    assert!(error.to_string().contains("empty `choices`"), "{error}");
    assert_eq!(server.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_another_model_is_refused_without_sending() {
    let server = MockServer::start_default().await;
    let config = openai(&server);
    let mut req = request(&config, "p", 4);
    req.model.model = "another-model".into();
    let error = client(config, None).complete(&req).await.unwrap_err();
    assert!(matches!(error, LlmError::Config { .. }), "{error}");
    assert_eq!(server.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_balanced_across_base_urls() {
    for balance in [Balance::LeastInFlight, Balance::RoundRobin] {
        let a = MockServer::start(MockConfig::new().latency(Duration::from_millis(5))).await;
        let b = MockServer::start(MockConfig::new().latency(Duration::from_millis(5))).await;
        let mut config = openai(&a);
        config.base_url = vec![
            a.base_url(BackendKind::OpenaiCompatible),
            b.base_url(BackendKind::OpenaiCompatible),
        ];
        config.balance = balance;
        config.concurrency = 4;
        let client = client(config.clone(), None);
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..40 {
            let (client, req) = (client.clone(), request(&config, &format!("prompt {i}"), 4));
            tasks.spawn(async move { client.complete(&req).await });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap().unwrap();
        }
        let (to_a, to_b) = (a.request_count(), b.request_count());
        assert_eq!(to_a + to_b, 40);
        assert!(to_a >= 10 && to_b >= 10, "{balance:?}: {to_a} vs {to_b}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limit_is_respected() {
    let server = MockServer::start(MockConfig::new().latency(Duration::from_millis(20))).await;
    let mut config = openai(&server);
    config.concurrency = 4;
    let client = client(config.clone(), None);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..40 {
        let (client, req) = (client.clone(), request(&config, &format!("prompt {i}"), 4));
        tasks.spawn(async move { client.complete(&req).await });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap().unwrap();
    }
    assert_eq!(server.request_count(), 40);
    assert_eq!(
        server.max_in_flight(),
        4,
        "the limit is reached and never exceeded"
    );
    assert!(
        server.connections() <= 4,
        "connections are reused: {}",
        server.connections()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_per_minute_paces_requests() {
    let server = MockServer::start_default().await;
    let mut config = openai(&server);
    config.requests_per_minute = Some(300); // one every 200 ms after the first
    let client = client(config.clone(), None);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..5 {
        let (client, req) = (client.clone(), request(&config, &format!("prompt {i}"), 4));
        tasks.spawn(async move { client.complete(&req).await });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap().unwrap();
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(780),
        "5 requests at 300/min took {took:?}"
    );
    assert!(took < Duration::from_millis(2000), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_faults_are_survived() {
    let server = MockServer::start(MockConfig::new().faults(0.2, 42)).await;
    let mut config = openai(&server);
    config.concurrency = 16;
    config.max_retries = 8;
    let client = client(config.clone(), None);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200 {
        let (client, req) = (client.clone(), request(&config, &format!("row {i}"), 8));
        tasks.spawn(async move { (client.complete(&req).await, req.prompt) });
    }
    while let Some(done) = tasks.join_next().await {
        let (result, prompt) = done.unwrap();
        assert_eq!(result.unwrap().text, answer(&prompt, 8, &[]).0);
    }
    assert!(
        server.fault_count() >= 20,
        "faults injected: {}",
        server.fault_count()
    );
    assert_eq!(server.request_count(), 200 + server.fault_count());
}

/// 64 slots against a server answering in 100 ms: 1,024 requests are 16 waves, 1.6 s ideal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_client_sustains_64_concurrent_requests() {
    const REQUESTS: usize = 1024;
    const SLOTS: usize = 64;
    let latency = Duration::from_millis(100);
    let server = MockServer::start(MockConfig {
        record_bodies: false,
        ..MockConfig::new().latency(latency)
    })
    .await;
    let mut config = openai(&server);
    config.concurrency = SLOTS;
    let client = client(config.clone(), None);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..REQUESTS {
        let (client, req) = (
            client.clone(),
            request(&config, &format!("The age is {i}"), 8),
        );
        tasks.spawn(async move { client.complete(&req).await });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap().unwrap();
    }
    let took = started.elapsed();
    let ideal = latency * (REQUESTS / SLOTS) as u32;
    eprintln!(
        "{REQUESTS} requests, {SLOTS} slots, {latency:?} latency: {took:.2?} (ideal {ideal:.2?}, ratio {:.3}), \
         {} connections, max in flight {}",
        took.as_secs_f64() / ideal.as_secs_f64(),
        server.connections(),
        server.max_in_flight()
    );
    assert_eq!(server.max_in_flight(), SLOTS);
    assert!(
        server.connections() <= SLOTS,
        "keep-alive: {} connections",
        server.connections()
    );
    assert!(
        took.as_secs_f64() <= ideal.as_secs_f64() * 1.5,
        "{took:?} vs ideal {ideal:?}"
    );
}
