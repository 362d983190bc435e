//! A fine-tuned checkpoint run quantized (`quantize = "q8_0"` or `"q8_0-all"`): the same
//! safetensors folder under three model entries, f32, Q8_0 and Q8_0 with its embeddings
//! and head, answers under three
//! identities (the quantized answers are never taken for the f32 weights' and the other
//! way round), all answer every request, and they agree on most answers; the key on a GGUF
//! file is a one-line error naming it.

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/tiny_llama.rs"]
mod tiny_llama;

use cli_env::{Env, one_line_error};

#[test]
fn a_checkpoint_runs_quantized_under_its_own_identity() {
    let env = Env::new().default_cache();
    let checkpoint = env.path("checkpoint");
    tiny_llama::write_tiny_llama(&checkpoint, tiny_llama::VOCAB);
    let spec = env.spec(
        "study.toml",
        &format!(
            r#"name = "quantized"
datasets = ["iris"]
tests = ["incomplete-completion"]
serializations = ["the-is"]

[[models]]
id = "f32"
backend = "local"
model = "{checkpoint}"

[[models]]
id = "q8"
backend = "local"
model = "{checkpoint}"
quantize = "q8_0"

[[models]]
id = "q8-all"
backend = "local"
model = "{checkpoint}"
quantize = "q8_0-all"
"#,
            checkpoint = checkpoint.display()
        ),
    );
    let spec = spec.to_str().unwrap();
    env.ok(&["run", spec, "--quiet"]);

    let cache = rusqlite::Connection::open(env.path("cache/tabcontam.sqlite")).unwrap();
    let revisions: Vec<String> = cache
        .prepare("SELECT revision FROM identities WHERE backend = 'local' ORDER BY revision")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(revisions.len(), 3, "{revisions:?}");
    assert_eq!(
        revisions[1..],
        [
            format!("{}+q8_0", revisions[0]),
            format!("{}+q8_0-all", revisions[0])
        ],
        "the quantized identity is the weights' digest plus the quantization"
    );
    // Both answered every request of the cell, each under its own identity, prompt by
    // prompt (same prompt, same parameters).
    let answers = |revision: &str| -> Vec<(i64, String, String)> {
        cache
            .prepare(
                "SELECT q.prompt_id, q.params, r.text FROM responses r \
                 JOIN requests q ON q.key = r.key JOIN identities i ON i.id = r.identity_id \
                 WHERE i.revision = ?1 ORDER BY q.prompt_id, q.params",
            )
            .unwrap()
            .query_map([revision], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let full = answers(&revisions[0]);
    let quantized = answers(&revisions[1]);
    let all = answers(&revisions[2]);
    assert!(!full.is_empty());
    for other in [&quantized, &all] {
        assert_eq!(
            full.iter().map(|(p, q, _)| (p, q)).collect::<Vec<_>>(),
            other.iter().map(|(p, q, _)| (p, q)).collect::<Vec<_>>(),
            "the same requests under every identity"
        );
    }
    // 8-bit weights with one scale per 32 move logits by far less than the gaps of most
    // greedy choices, but the tiny model's random weights write 256 tokens of near ties:
    // the answers start alike and part later. Every answer's first 16 words agree.
    let shared_words = |a: &str, b: &str| {
        a.split(' ')
            .zip(b.split(' '))
            .take_while(|(x, y)| x == y)
            .count()
    };
    let shared_with = |other: &[(i64, String, String)]| -> Vec<usize> {
        full.iter()
            .zip(other)
            .map(|(a, b)| shared_words(&a.2, &b.2))
            .collect()
    };
    let shared = shared_with(&quantized);
    assert!(
        shared.iter().all(|&words| words >= 16),
        "words shared by the f32 and Q8_0 answers: {shared:?}"
    );
    // The embeddings and head in Q8_0 too: the tiny model's random logits of near ties
    // part sooner, yet every answer starts alike.
    let shared_all = shared_with(&all);
    assert!(
        shared_all.iter().all(|&words| words >= 4),
        "words shared by the f32 and Q8_0-all answers: {shared_all:?}"
    );

    // A second run sends nothing: both identities answer from the cache.
    let again = env.json(&["run", spec, "--json"]);
    assert_eq!(again["counts"]["sent"], 0, "{again}");
    assert_eq!(
        again["counts"]["cached"], again["counts"]["requests"],
        "{again}"
    );

    // The key on a GGUF file: one line naming the model, the key and the fix.
    let gguf = env.path("model.gguf");
    std::fs::write(&gguf, b"GGUF").unwrap();
    let bad = env.spec(
        "bad.toml",
        &format!(
            r#"name = "bad"
datasets = ["iris"]
tests = ["incomplete-completion"]

[[models]]
id = "quantized-gguf"
backend = "local"
model = "{gguf}"
quantize = "q8_0"
"#,
            gguf = gguf.display()
        ),
    );
    let output = env.run(&["run", bad.to_str().unwrap(), "--quiet"]);
    one_line_error(&output, &["quantized-gguf", "quantize", "remove the key"]);
}

/// The log-probabilities a checkpoint gives a text move little when it is quantized: its
/// matmul weights in Q8_0, and those with its tied embeddings and head. Each moves them
/// (the quantization happened), and the two differ from each other (the head was
/// quantized too). Which of the two moves them more is not fixed: rounding errors in the
/// head may cancel those of the layers, and did on one CPU, so the test does not order them.
#[test]
fn quantized_checkpoints_score_texts_close_to_f32() {
    use tabcontam::infer::{LocalModel, LocalOptions, weights::Quantize};
    let env = Env::new();
    let checkpoint = env.path("checkpoint");
    let (tokenizer, vocab) = tiny_llama::piece_tokenizer(TEXT);
    let shape = tiny_llama::LlamaShape {
        vocab,
        hidden: 128,
        intermediate: 384,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        tied: true,
    };
    tiny_llama::write_llama(&checkpoint, &tokenizer, &shape);
    let score = |quantize: Option<Quantize>| -> Vec<f64> {
        let options = LocalOptions {
            quantize,
            ..LocalOptions::default()
        };
        let mut model = LocalModel::load(&checkpoint, &options).unwrap();
        model.score_text(TEXT).unwrap().logprobs
    };
    let mean_distance = |a: &[f64], b: &[f64]| -> f64 {
        assert_eq!(a.len(), b.len());
        a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum::<f64>() / a.len() as f64
    };
    let full = score(None);
    let layers_only = score(Some(Quantize::Q8_0));
    let with_head = score(Some(Quantize::Q8_0All));
    let (layers, all) = (
        mean_distance(&full, &layers_only),
        mean_distance(&full, &with_head),
    );
    let head = mean_distance(&layers_only, &with_head);
    let mean = full.iter().map(|v| v.abs()).sum::<f64>() / full.len() as f64;
    eprintln!(
        "mean |log p| {mean:.4}; moved by Q8_0 {layers:.6}, Q8_0 with the head {all:.6}, \
         the head alone {head:.6}"
    );
    assert!(layers > 0.0 && all > 0.0, "{layers} vs {all}");
    assert!(head > 0.0, "quantizing the head changed nothing");
    for (name, moved) in [("Q8_0", layers), ("Q8_0-all", all)] {
        assert!(
            moved < 0.002 * mean,
            "{name} moved log-probabilities by {moved} (mean {mean})"
        );
    }
}

const TEXT: &str = "sepal length: 5.1, sepal width: 3.5, petal length: 1.4, species: setosa\n\
sepal length: 4.9, sepal width: 3.0, petal length: 1.4, species: setosa\n";
