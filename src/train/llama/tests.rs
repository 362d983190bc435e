//! The llama/Gemma 3 trainer against its composed reference, finite differences, the
//! engine, and its own saved checkpoints.

use super::super::gemma3_config::Gemma3Shape;
use super::ops::composed::*;
use super::*;

/// The hand-written ops agree with candle's fused inference kernels.
#[test]
fn composed_ops_match_the_fused_kernels() {
    let device = Device::Cpu;
    let xs = Tensor::randn(0f32, 1.0, (3, 2, 5, 8), &device).unwrap();
    let close = |a: &Tensor, b: &Tensor| {
        let diff = (a - b).unwrap().abs().unwrap().max_all().unwrap();
        diff.to_scalar::<f32>().unwrap()
    };
    let fused = candle_nn::ops::softmax_last_dim(&xs).unwrap();
    assert!(close(&softmax(&xs).unwrap(), &fused) < 1e-6);
    let w = Var::from_tensor(&Tensor::randn(0f32, 1.0, 8, &device).unwrap()).unwrap();
    let fused = candle_nn::ops::rms_norm(&xs, w.as_tensor(), 1e-6).unwrap();
    assert!(close(&rms_norm(&xs, w.as_tensor(), 1e-6).unwrap(), &fused) < 1e-5);
    assert!(close(&silu(&xs).unwrap(), &candle_nn::ops::silu(&xs).unwrap()) < 1e-6);
    // Rotary tables of the halves layout against candle's `rope` kernel.
    let half = 4;
    let cos = Tensor::randn(0f32, 1.0, (5, half), &device).unwrap();
    let sin = Tensor::randn(0f32, 1.0, (5, half), &device).unwrap();
    let fused = candle_nn::rotary_emb::rope(&xs, &cos, &sin).unwrap();
    let cos2 = Tensor::cat(&[&cos, &cos], 1).unwrap();
    let sin2 = Tensor::cat(&[&sin, &sin], 1).unwrap();
    assert!(close(&rotate(&xs, &cos2, &sin2).unwrap(), &fused) < 1e-5);
    let log = log_softmax(&xs).unwrap().exp().unwrap();
    assert!(close(&log, &softmax(&xs).unwrap()) < 1e-6);
}

/// A 2-layer network of random weights (tied embeddings, grouped-query attention).
fn tiny_model() -> LlamaTrainer {
    tiny(None)
}

/// A 2-layer network of random weights: llama, or Gemma 3 when `gemma3` is given.
fn tiny(gemma3: Option<Gemma3Shape>) -> LlamaTrainer {
    let device = Device::Cpu;
    let gemma = gemma3.is_some();
    let config = LlamaConfig {
        vocab_size: 40,
        hidden_size: 16,
        intermediate_size: 24,
        num_layers: 2,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 4,
        rms_eps: 1e-5,
        rope_theta: if gemma { 1_000_000.0 } else { 10_000.0 },
        tie_embeddings: true,
        max_position_embeddings: 64,
        bos_token_id: None,
        eos_token_id: None,
        gemma3,
    };
    let randn = |shape: &[usize], std: f32| Tensor::randn(0f32, std, shape, &device).unwrap();
    // A norm's weight around 1 as it multiplies (Gemma stores it as `w` of `1 + w`).
    let norm = |n: usize| {
        let offset = if gemma { 0.0 } else { 1.0 };
        (randn(&[n], 0.1) + offset).unwrap()
    };
    let (h, i) = (config.hidden_size, config.intermediate_size);
    let layers = (0..config.num_layers)
        .map(|_| {
            let extra = gemma.then(|| [norm(4), norm(4), norm(h), norm(h)]);
            let main = [
                norm(h),
                randn(&[16, h], 0.3),
                randn(&[8, h], 0.3),
                randn(&[8, h], 0.3),
                randn(&[h, 16], 0.3),
                norm(h),
                randn(&[i, h], 0.3),
                randn(&[i, h], 0.3),
                randn(&[h, i], 0.3),
            ];
            (main, extra)
        })
        .collect();
    LlamaTrainer::from_tensors(config, randn(&[40, h], 1.0), None, norm(h), layers).unwrap()
}

/// Token ids `(3, 10)` and loss weights `(3, 9)` with some positions out of the loss.
fn tiny_batch() -> (Tensor, Tensor) {
    let device = Device::Cpu;
    let ids: Vec<u32> = (0..3 * 10).map(|i| (i * 13 % 40) as u32).collect();
    let ids = Tensor::from_vec(ids, (3, 10), &device).unwrap();
    let mut weights = vec![1f32; 3 * 9];
    weights[20..].fill(0.0);
    (ids, Tensor::from_vec(weights, (3, 9), &device).unwrap())
}

/// The network through the fused ops gives the loss and every weight's gradient of the
/// network composed of plain candle ops (tied embeddings, grouped-query attention, some
/// positions out of the loss).
#[test]
fn fused_network_matches_the_composed_one() {
    let model = tiny_model();
    let (ids, weights) = tiny_batch();
    let fused = model.loss(&ids, &weights).unwrap();
    let composed = model.composed_loss(&ids, &weights).unwrap();
    let (a, b) = (
        fused.to_scalar::<f32>().unwrap(),
        composed.to_scalar::<f32>().unwrap(),
    );
    assert!((a - b).abs() < 1e-4, "fused loss {a}, composed {b}");
    let (ga, gb) = (
        model.backward(&fused).unwrap(),
        composed.backward().unwrap(),
    );
    for (name, var) in model.named_vars() {
        let (x, y) = (
            ga.get(var.as_tensor()).unwrap(),
            gb.get(var.as_tensor()).unwrap(),
        );
        let diff = (x - y).unwrap().abs().unwrap().max_all().unwrap();
        let diff = diff.to_scalar::<f32>().unwrap();
        assert!(diff < 1e-4, "{name}: gradients differ by {diff}");
    }
}

/// In bf16 the loss and every gradient stay within bf16 rounding of the f32 network's
/// (llama and Gemma 3, full fine-tuning and LoRA), and the gradients point the same way:
/// what autocast gives, not another network.
#[test]
fn bf16_products_keep_the_loss_and_gradients_of_f32() {
    use crate::train::lora::LoraSettings;
    let gemma = Gemma3Shape {
        query_pre_attn_scalar: 8.0,
        local_rope_theta: 10_000.0,
        sliding_window: 4,
        sliding: vec![true, false],
    };
    for (family, lora) in [(None, false), (Some(gemma), false), (None, true)] {
        let (ids, weights) = tiny_batch();
        let model = tiny(family.clone());
        let model = match lora {
            true => model
                .with_lora(LoraSettings::from_options(2, Some("all"), None).unwrap(), 3)
                .unwrap(),
            false => model,
        };
        let a = model.loss(&ids, &weights).unwrap();
        let ga = model.backward(&a).unwrap();
        // The same weights (and adapters), multiplied in bf16.
        let half = model.with_precision(Precision::Bf16);
        assert_eq!(half.precision(), Precision::Bf16);
        let b = half.loss(&ids, &weights).unwrap();
        let gb = half.backward(&b).unwrap();
        let (la, lb) = (a.to_scalar::<f32>().unwrap(), b.to_scalar::<f32>().unwrap());
        assert!(la != lb, "bf16 products change the loss a little");
        assert!(
            (la - lb).abs() < 0.02 * la.abs(),
            "loss f32 {la}, bf16 {lb}"
        );
        for (name, var) in half.trainable_vars() {
            let (x, y) = (
                ga.get(var.as_tensor()).unwrap().flatten_all().unwrap(),
                gb.get(var.as_tensor()).unwrap().flatten_all().unwrap(),
            );
            let dot = (&x * &y)
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            let norm = |t: &Tensor| {
                t.sqr()
                    .unwrap()
                    .sum_all()
                    .unwrap()
                    .to_scalar::<f32>()
                    .unwrap()
                    .sqrt()
            };
            let cosine = dot / (norm(&x) * norm(&y)).max(1e-30);
            assert!(
                cosine > 0.99 || norm(&x) < 1e-6,
                "{name} ({family:?}, lora {lora}): cosine of the gradients {cosine}"
            );
        }
    }
}

/// Under LoRA (every projection adapted, B made non-zero) the loss is that of the
/// merged weights, only the adapters get gradients, and an adapter's gradient is the
/// loss's slope along it (central difference).
#[test]
fn lora_trains_adapters_only_and_merges_to_the_same_network() {
    let mut settings = LoraSettings::new(2);
    settings.targets = LoraTarget::ALL.to_vec();
    settings.alpha = 4.0;
    let model = tiny_model().with_lora(settings, 1).unwrap();
    let lora = model.lora().unwrap();
    for (_, var) in lora.named_vars() {
        if var.dims()[1] == 2 {
            var.set(&Tensor::randn(0f32, 0.3, var.dims(), &Device::Cpu).unwrap())
                .unwrap();
        }
    }
    let (ids, weights) = tiny_batch();
    let loss = model.loss(&ids, &weights).unwrap();
    let dir = std::env::temp_dir().join(format!("tabcontam-lora-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    model.save(&dir).unwrap();
    let merged =
        candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu).unwrap();
    let adapters =
        candle_core::safetensors::load(dir.join(super::super::lora::ADAPTER_FILE), &Device::Cpu)
            .unwrap();
    assert_eq!(adapters.len(), 2 * 7 * 2);
    assert!(adapters.contains_key("model.layers.1.mlp.down_proj.lora_B.weight"));
    let layers = (0..2)
        .map(|i| {
            let get = |n: &str| merged[&format!("model.layers.{i}.{n}.weight")].clone();
            let main = [
                get("input_layernorm"),
                get("self_attn.q_proj"),
                get("self_attn.k_proj"),
                get("self_attn.v_proj"),
                get("self_attn.o_proj"),
                get("post_attention_layernorm"),
                get("mlp.gate_proj"),
                get("mlp.up_proj"),
                get("mlp.down_proj"),
            ];
            (main, None)
        })
        .collect();
    let full = LlamaTrainer::from_tensors(
        model.config.clone(),
        merged["model.embed_tokens.weight"].clone(),
        None,
        merged["model.norm.weight"].clone(),
        layers,
    )
    .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let (a, b) = (
        loss.to_scalar::<f32>().unwrap(),
        full.loss(&ids, &weights)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap(),
    );
    assert!((a - b).abs() < 1e-4, "adapted {a}, merged {b}");

    let grads = model.backward(&loss).unwrap();
    for (name, var) in model.named_vars() {
        assert!(
            grads.get(var.as_tensor()).is_none(),
            "{name} got a gradient"
        );
    }
    for (name, var) in model.trainable_vars() {
        assert!(
            grads.get(var.as_tensor()).is_some(),
            "{name} got no gradient"
        );
    }
    let (name, var) = &model.trainable_vars()[3];
    let grad = grads.get(var.as_tensor()).unwrap();
    let direction = Tensor::randn(0f32, 1.0, var.dims(), &Device::Cpu).unwrap();
    let slope = (grad * &direction)
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let original = var.as_tensor().copy().unwrap();
    let at = |step: f64| {
        var.set(&(&original + (&direction * step).unwrap()).unwrap())
            .unwrap();
        model
            .loss(&ids, &weights)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap() as f64
    };
    // Richardson extrapolation of two central differences cancels their h² error: the
    // random network's third derivative alone put one plain difference 4 % off in CI.
    let central = |h: f64| (at(h) - at(-h)) / (2.0 * h);
    let h = 1e-2;
    let numeric = ((4.0 * central(h / 2.0) - central(h)) / 3.0) as f32;
    assert!(
        (numeric - slope).abs() < 2e-2 * slope.abs().max(1.0),
        "{name}: gradient slope {slope}, central difference {numeric}"
    );
}

/// Gemma 3's additions on the tiny network: one sliding and one global layer (rotary
/// bases 10 000 and 1 000 000), a query scale that is not `head_dim`'s.
fn tiny_gemma3(sliding_window: usize) -> LlamaTrainer {
    tiny(Some(Gemma3Shape {
        query_pre_attn_scalar: 8.0,
        local_rope_theta: 10_000.0,
        sliding_window,
        sliding: vec![true, false],
    }))
}

/// The gradient `grads` holds for `var` against the loss's slope along a random
/// direction (Richardson extrapolation of two central differences, in f64).
fn assert_slope_matches(
    model: &LlamaTrainer,
    name: &str,
    var: &Var,
    grads: &candle_core::backprop::GradStore,
) {
    let (ids, weights) = tiny_batch();
    let grad = grads.get(var.as_tensor()).expect("a gradient");
    let direction = Tensor::randn(0f32, 1.0, var.dims(), &Device::Cpu).unwrap();
    let slope = (grad * &direction)
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let original = var.as_tensor().copy().unwrap();
    let at = |step: f64| {
        var.set(&(&original + (&direction * step).unwrap()).unwrap())
            .unwrap();
        let loss = model.loss(&ids, &weights).unwrap();
        loss.to_scalar::<f32>().unwrap() as f64
    };
    let central = |h: f64| (at(h) - at(-h)) / (2.0 * h);
    let numeric = ((4.0 * central(5e-3) - central(1e-2)) / 3.0) as f32;
    var.set(&original).unwrap();
    assert!(
        (numeric - slope).abs() < 2e-2 * slope.abs().max(1.0),
        "{name}: gradient slope {slope}, central difference {numeric}"
    );
}

/// Every Gemma 3 weight gets the gradient of its loss: the extra norms, the scaled
/// embeddings, the GELU gate, both rotary bases, the sliding window.
#[test]
fn gemma3_gradients_match_the_loss_slopes() {
    // A window shorter than the batch's 9 positions: the banded attention takes part.
    let model = tiny_gemma3(4);
    let (ids, weights) = tiny_batch();
    let grads = model
        .backward(&model.loss(&ids, &weights).unwrap())
        .unwrap();
    let vars = model.named_vars();
    assert_eq!(vars.len(), 2 + 2 * 13);
    for (name, var) in &vars {
        assert!(
            grads.get(var.as_tensor()).is_some(),
            "{name} got no gradient"
        );
    }
    for wanted in [
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.q_norm.weight",
        "model.layers.0.self_attn.k_proj.weight",
        "model.layers.1.post_attention_layernorm.weight",
        "model.layers.1.pre_feedforward_layernorm.weight",
        "model.layers.1.mlp.gate_proj.weight",
        "model.layers.1.post_feedforward_layernorm.weight",
        "model.norm.weight",
    ] {
        let (name, var) = vars.iter().find(|(n, _)| n == wanted).unwrap();
        assert_slope_matches(&model, name, var, &grads);
    }
}

/// A Gemma 3 network trained with LoRA, saved, gives the same next-token
/// log-probabilities through the local engine (an independent implementation, checked
/// against transformers by the parity tests) as its own loss, and reloads into the
/// trainer as the same network: with a sliding window longer than the text (the fused
/// causal op) and shorter (the banded attention).
#[test]
fn gemma3_checkpoint_scores_the_same_in_the_engine_and_reloads() {
    for window in [16, 4] {
        gemma3_checkpoint_round_trip(window);
    }
}

fn gemma3_checkpoint_round_trip(window: usize) {
    use crate::infer::arch::{Architecture, from_config_file};
    use crate::infer::decoder::DecoderModel;
    use crate::infer::score::score_decoder;

    let mut settings = LoraSettings::new(2);
    settings.targets = LoraTarget::ALL.to_vec();
    let model = tiny_gemma3(window).with_lora(settings, 3).unwrap();
    for (_, var) in model.lora().unwrap().named_vars() {
        if var.dims()[1] == 2 {
            var.set(&Tensor::randn(0f32, 0.3, var.dims(), &Device::Cpu).unwrap())
                .unwrap();
        }
    }
    let row: Vec<u32> = (0..12).map(|i| (i * 7 % 40) as u32).collect();
    let ids = Tensor::from_vec(row.clone(), (1, 12), &Device::Cpu).unwrap();
    let weights = Tensor::ones((1, 11), DType::F32, &Device::Cpu).unwrap();
    let trained = model
        .loss(&ids, &weights)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    model.save(dir.path()).unwrap();
    let config = dir.path().join("config.json");
    let shards = vec![dir.path().join("model.safetensors")];
    let Architecture::Decoder(spec) = from_config_file(&config).unwrap().0 else {
        panic!("a decoder")
    };
    assert_eq!(spec.arch, "gemma3_text");
    assert_eq!(spec.sliding_window, vec![Some(window), None]);
    let mut engine_weights = Weights::open_safetensors(&shards, &Device::Cpu, DType::F32).unwrap();
    let engine = DecoderModel::load(&mut engine_weights, *spec).unwrap();
    let scored = score_decoder(&engine, &row).unwrap();
    let engine_loss = -scored.logprobs.iter().sum::<f64>() / scored.logprobs.len() as f64;
    assert!(
        (engine_loss as f32 - trained).abs() < 1e-4,
        "window {window}: trainer {trained}, engine {engine_loss}"
    );

    let files = ModelFiles {
        dir: dir.path().to_path_buf(),
        format: WeightFormat::Safetensors { config, shards },
        tokenizer: None,
        generation_config: None,
    };
    let reloaded = LlamaTrainer::load(&files).unwrap();
    assert_eq!(reloaded.config, model.config);
    let again = reloaded
        .loss(&ids, &weights)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(
        (again - trained).abs() < 1e-5,
        "merged {again}, adapted {trained}"
    );
}

impl LlamaTrainer {
    /// The loss composed of plain candle ops (the forward pass before the fused ops), the
    /// reference the fused network is checked against.
    fn composed_loss(&self, ids: &Tensor, weights: &Tensor) -> candle_core::Result<Tensor> {
        use ops::composed::*;
        let (batch, len) = ids.dims2()?;
        let seq = len - 1;
        let inputs = ids.narrow(1, 0, seq)?;
        let targets = ids.narrow(1, 1, seq)?.flatten_all()?;
        let c = &self.config;
        let mut xs = self
            .embed
            .as_tensor()
            .index_select(&inputs.flatten_all()?, 0)?;
        let (cos, sin) = rope_tables(seq, c.head_dim, c.rope_theta, &Device::Cpu)?;
        let mask = causal_mask(seq, &Device::Cpu)?;
        for layer in &self.layers {
            let h = rms_norm(&xs, layer.attn_norm.as_tensor(), c.rms_eps)?;
            let q = linear(&h, &layer.q)?
                .reshape((batch, seq, c.num_heads, c.head_dim))?
                .transpose(1, 2)?;
            let k = linear(&h, &layer.k)?
                .reshape((batch, seq, c.num_kv_heads, c.head_dim))?
                .transpose(1, 2)?;
            let v = linear(&h, &layer.v)?
                .reshape((batch, seq, c.num_kv_heads, c.head_dim))?
                .transpose(1, 2)?
                .contiguous()?;
            let q = rotate(&q, &cos, &sin)?;
            let k = rotate(&k, &cos, &sin)?;
            let group = c.num_heads / c.num_kv_heads;
            let q = q.reshape((batch, c.num_kv_heads, group * seq, c.head_dim))?;
            let scores = (q.matmul(&k.t()?)? * (1.0 / (c.head_dim as f64).sqrt()))?
                .reshape((batch, c.num_kv_heads, group, seq, seq))?
                .broadcast_add(&mask)?;
            let probs = softmax(&scores)?.reshape((batch, c.num_kv_heads, group * seq, seq))?;
            let attended = probs
                .matmul(&v)?
                .reshape((batch, c.num_heads, seq, c.head_dim))?
                .transpose(1, 2)?
                .reshape((batch * seq, c.num_heads * c.head_dim))?;
            xs = (xs + linear(&attended, &layer.o)?)?;
            let h = rms_norm(&xs, layer.ffn_norm.as_tensor(), c.rms_eps)?;
            let gate = linear(&h, &layer.gate)?;
            let gated = (silu(&gate)? * linear(&h, &layer.up)?)?;
            xs = (xs + linear(&gated, &layer.down)?)?;
        }
        let xs = rms_norm(&xs, self.final_norm.as_tensor(), c.rms_eps)?;
        let logits = linear(&xs, self.lm_head.as_ref().unwrap_or(&self.embed))?;
        let picked = log_softmax(&logits)?
            .gather(&targets.unsqueeze(1)?, 1)?
            .squeeze(1)?
            .reshape((batch, seq))?;
        let weights = weights.to_dtype(DType::F32)?;
        let count = weights.sum_all()?.to_scalar::<f32>()?.max(1.0);
        (picked * weights)?
            .sum_all()?
            .affine(-1.0 / count as f64, 0.0)
    }
}

/// `x Wᵀ` over rows `(n, in)` through candle's matmul (the composed reference's).
fn linear(xs: &Tensor, w: &Var) -> candle_core::Result<Tensor> {
    xs.matmul(&w.as_tensor().t()?)
}

/// A micro-batch's rows as two streams side by side (`streams.rs`: halves of 2 rows and 1,
/// the second mostly padding) give the loss and every weight's gradient of one pass over
/// all the rows, and the same bits on every run: llama, Gemma 3, and LoRA on every
/// projection.
#[test]
fn two_streams_give_the_one_pass_gradients_with_fixed_bits() {
    use crate::train::lora::LoraSettings;
    use crate::train::streams::two_streams;
    let adapted = || {
        tiny_model()
            .with_lora(LoraSettings::from_options(2, Some("all"), None).unwrap(), 3)
            .unwrap()
    };
    for (family, model) in [
        ("llama", tiny_model()),
        ("gemma3", tiny_gemma3(4)),
        ("lora", adapted()),
    ] {
        let (ids, weights) = tiny_batch();
        let targets = f64::from(weights.sum_all().unwrap().to_scalar::<f32>().unwrap());
        let whole = model.loss(&ids, &weights).unwrap();
        let mean = f64::from(whole.to_scalar::<f32>().unwrap());
        let one_pass = model.backward(&whole).unwrap();
        let vars = model.vars();
        let (streamed, summed) = two_streams(&model, &vars, &ids, &weights, targets).unwrap();
        assert!(
            (summed / targets - mean).abs() < 1e-5 * mean.abs(),
            "{family}: loss {mean} in one pass, {} in two streams",
            summed / targets
        );
        let (again, _) = two_streams(&model, &vars, &ids, &weights, targets).unwrap();
        let values = |grads: &GradStore, var: &Var| {
            let grad = grads
                .get(var.as_tensor())
                .expect("every trained weight's gradient");
            grad.flatten_all().unwrap().to_vec1::<f32>().unwrap()
        };
        for (name, var) in model.trainable_vars() {
            let (expected, got) = (values(&one_pass, var), values(&streamed, var));
            let largest = expected.iter().fold(0f32, |m, v| m.max(v.abs()));
            let error = expected
                .iter()
                .zip(&got)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(
                error <= 1e-5 * largest.max(1e-3),
                "{family} {name}: largest difference {error} (largest gradient {largest})"
            );
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&got),
                bits(&values(&again, var)),
                "{family} {name}: two runs of the streams differ"
            );
        }
    }
}
