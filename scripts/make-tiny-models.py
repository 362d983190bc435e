#!/usr/bin/env python3
"""Builds tiny random models for tests/local_inference.rs and records what transformers
generates with them, so that the Rust side can check token-for-token greedy parity.

For each architecture (llama with Llama 3.1 rope scaling, mistral with a small sliding
window, gemma, gemma2, phi, phi3, qwen2 with q/k/v biases, tied embeddings and a sliding
window on its upper layer, qwen3 with per-head q/k norms and head_dim != hidden / heads,
olmo2 with whole-projection q/k norms and norms after attention and MLP, t5 gated-GELU as
in T0, t5 ReLU with tied embeddings):
hidden size 64, 2 layers, random weights from a fixed seed, a byte-level BPE tokenizer
trained on a few sentences, saved as safetensors + config.json + tokenizer.json, and
`expected.json` beside them: for every prompt, transformers' token ids of the prompt, its
greedy continuation (float32, eager attention, one prompt at a time), whether it ended on
end-of-sequence, and the smallest gap between the two best logits over the steps (a
step whose gap is tiny may legitimately flip under a different summation order).

With --smollm2 PATH.gguf it also records transformers' greedy output for the SmolLM2 GGUF
file (transformers dequantizes it to float32) into OUT/smollm2/expected.json.

Usage: make-tiny-models.py OUT_DIR [--smollm2 FILE.gguf]
Needs: torch (CPU is enough), transformers, tokenizers, safetensors (and gguf for SmolLM2).
"""

import argparse
import json
import os
import shutil
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
import transformers
from transformers import PreTrainedTokenizerFast

SEED = 20240531
HIDDEN = 64
LAYERS = 2
MAX_NEW_TOKENS = 12

# Shared prefixes, lengths beyond the sliding windows, digits, punctuation, a newline.
PROMPTS = [
    "The age is 39, The sex is Male, The income is",
    "The age is 39, The sex is Female, The income is",
    "Dataset: adult income.\nFeature names: age, workclass, fnlwgt, education, marital status, occupation, relationship, race, sex. Next:",
    "iris",
    "Is this row original or modified? The sepal length is 5.1, The species is setosa. Answer:",
]

CORPUS = [
    "The age is 39, The sex is Male, The income is <=50K.",
    "The age is 50, The sex is Female, The income is >50K.",
    "Dataset: adult income. Feature names: age, workclass, fnlwgt, education.",
    "iris setosa versicolor virginica sepal length petal width species",
    "Is this row original or modified? Answer: Yes. Answer: No.",
    "marital status occupation relationship race sex hours per week native country",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000 3.14 2.5 5.1",
]

# pad 0 and eos 1 as T5 expects; the decoders use bos 3 and eos 1.
SPECIALS = ["<pad>", "</s>", "<unk>", "<s>"]


def train_tokenizer(append_eos: bool) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    if append_eos:
        # T5: `tokenizer(prompt)` appends </s>.
        tokenizer.post_processor = processors.TemplateProcessing(
            single="$A </s>", special_tokens=[("</s>", 1)]
        )
    else:
        # Llama-style: `tokenizer(prompt)` prepends <s>.
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", 3)]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        bos_token="<s>",
    )


def decoder_configs(vocab: int) -> dict:
    common = dict(
        vocab_size=vocab,
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=3,
        eos_token_id=1,
        pad_token_id=0,
        # Larger than the usual 0.02 so that logits are spread and greedy choices robust.
        initializer_range=0.2,
    )
    return {
        "llama": transformers.LlamaConfig(
            **common,
            tie_word_embeddings=False,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
        ),
        "llama-tied": transformers.LlamaConfig(**common, tie_word_embeddings=True),
        "mistral": transformers.MistralConfig(**common, sliding_window=8, tie_word_embeddings=False),
        "gemma": transformers.GemmaConfig(**common, head_dim=16, hidden_activation="gelu_pytorch_tanh"),
        "gemma2": transformers.Gemma2Config(
            **common,
            head_dim=16,
            sliding_window=8,
            query_pre_attn_scalar=16,
            attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0,
        ),
        "phi": transformers.PhiConfig(
            **{k: v for k, v in common.items() if k != "num_key_value_heads"},
            partial_rotary_factor=0.5,
            tie_word_embeddings=False,
        ),
        "phi3": transformers.Phi3Config(**common, tie_word_embeddings=False),
        "qwen2": transformers.Qwen2Config(
            **common,
            tie_word_embeddings=True,
            use_sliding_window=True,
            sliding_window=8,
            max_window_layers=1,
        ),
        "qwen3": transformers.Qwen3Config(**common, head_dim=32, tie_word_embeddings=False),
        "olmo2": transformers.Olmo2Config(**common, tie_word_embeddings=False),
    }


# transformers initializes biases to 0 and norm weights to 1: for these architectures the
# biases (qwen2) and the q/k and post-branch norms (qwen3, olmo2) are what they add to
# llama, so they get random values, else a model that ignored them would still pass.
PERTURBED = {"qwen2", "qwen3", "olmo2"}


def perturb_biases_and_norms(model) -> None:
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0.0, 0.5)
            elif "norm" in name:
                param.copy_(1.0 + 0.3 * torch.randn_like(param))


def t5_configs(vocab: int) -> dict:
    common = dict(
        vocab_size=vocab,
        d_model=HIDDEN,
        d_kv=16,
        d_ff=128,
        num_layers=LAYERS,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=20,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
        initializer_factor=4.0,
    )
    return {
        # T0 is T5 v1.1 (LM-adapted): gated GELU, untied output projection.
        "t5": transformers.T5Config(**common, feed_forward_proj="gated-gelu", tie_word_embeddings=False),
        "t5-tied": transformers.T5Config(**common, feed_forward_proj="relu", tie_word_embeddings=True),
    }


def greedy(model, input_ids: list, eos: int) -> dict:
    ids = torch.tensor([input_ids])
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=MAX_NEW_TOKENS,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=0,
            output_scores=True,
            return_dict_in_generate=True,
        )
    sequence = out.sequences[0].tolist()
    new = sequence if model.config.is_encoder_decoder else sequence[len(input_ids):]
    if model.config.is_encoder_decoder:
        new = new[1:]  # decoder start token
    stopped = bool(new) and new[-1] == eos
    if stopped:
        new = new[:-1]
    gaps = []
    for scores in out.scores:
        top = torch.topk(scores[0].float(), 2).values
        gaps.append(float(top[0] - top[1]))
    return {"output_ids": new, "stopped": stopped, "min_gap": min(gaps) if gaps else None, "gaps": gaps}


def record(model, tokenizer, eos: int, directory: str, extra: dict) -> None:
    cases = []
    for prompt in PROMPTS:
        input_ids = tokenizer(prompt)["input_ids"]
        case = {"prompt": prompt, "input_ids": input_ids}
        case.update(greedy(model, input_ids, eos))
        cases.append(case)
    expected = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "max_new_tokens": MAX_NEW_TOKENS,
        "cases": cases,
    }
    expected.update(extra)
    with open(os.path.join(directory, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


def build(out: str) -> None:
    torch.manual_seed(SEED)
    decoder_tokenizer = train_tokenizer(append_eos=False)
    t5_tokenizer = train_tokenizer(append_eos=True)
    vocab = len(decoder_tokenizer)
    for name, config in {**decoder_configs(vocab), **t5_configs(vocab)}.items():
        torch.manual_seed(SEED)
        directory = os.path.join(out, name)
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
        is_t5 = name.startswith("t5")
        cls = transformers.T5ForConditionalGeneration if is_t5 else transformers.AutoModelForCausalLM
        config._attn_implementation = "eager"
        model = cls.from_config(config, dtype=torch.float32) if not is_t5 else cls(config)
        if name in PERTURBED:
            perturb_biases_and_norms(model)
        model.eval()
        model.save_pretrained(directory, safe_serialization=True)
        tokenizer = t5_tokenizer if is_t5 else decoder_tokenizer
        tokenizer.save_pretrained(directory)
        record(model, tokenizer, 1, directory, {"architecture": name})
        print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters -> {directory}")


def smollm2(out: str, gguf_path: str) -> None:
    directory = os.path.join(out, "smollm2")
    os.makedirs(directory, exist_ok=True)
    folder, name = os.path.split(os.path.abspath(gguf_path))
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.eval()
    record(model, tokenizer, tokenizer.eos_token_id, directory, {"architecture": "smollm2-gguf", "gguf": name})
    print(f"smollm2: transformers greedy output -> {directory}/expected.json")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--smollm2", help="SmolLM2 GGUF file to record transformers' output for")
    args = parser.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    build(args.out)
    if args.smollm2:
        smollm2(args.out, args.smollm2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
