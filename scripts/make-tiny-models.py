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
file (transformers dequantizes it to float32) into OUT/smollm2/expected.json; with
--gemma3 PATH.gguf the same for Gemma 3 270M on the real prompts of GEMMA3_PROMPTS, with
the five best log-probabilities of every step (OUT/gemma3/expected.json): the float32
reference that tells whether a difference from llama.cpp is ours or its quantization.

Usage: make-tiny-models.py OUT_DIR [--smollm2 FILE.gguf] [--gemma3 FILE.gguf]
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
        # Gemma 3 text: per-head q/k norms, one sliding (window 8) and one global layer with
        # their own rotary bases, a query scale that is not head_dim's; transformers 5
        # writes `rope_parameters` per attention kind.
        "gemma3-text": transformers.Gemma3TextConfig(
            **common,
            head_dim=16,
            sliding_window=8,
            query_pre_attn_scalar=32,
            layer_types=["sliding_attention", "full_attention"],
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
# biases (qwen2) and the q/k and post-branch norms (qwen3, olmo2, gemma3) are what they add to
# llama, so they get random values, else a model that ignored them would still pass.
PERTURBED = {"qwen2", "qwen3", "olmo2", "gemma3-text"}


def perturb_biases_and_norms(model) -> None:
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0.0, 0.5)
            elif "norm" in name and model.config.model_type == "gemma3_text":
                # Gemma stores w of x·(1 + w) and initializes it to 0.
                param.normal_(0.0, 0.3)
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


def greedy(model, input_ids: list, eos, max_new_tokens: int = MAX_NEW_TOKENS, top: int = 0) -> dict:
    ids = torch.tensor([input_ids])
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
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
    eos_ids = eos if isinstance(eos, list) else [eos]
    stopped = bool(new) and new[-1] in eos_ids
    if stopped:
        new = new[:-1]
    gaps = []
    tops = []
    for scores in out.scores:
        best = torch.topk(scores[0].float(), 2).values
        gaps.append(float(best[0] - best[1]))
        if top:
            logprobs = torch.log_softmax(scores[0].double(), dim=-1)
            values, indices = torch.topk(logprobs, top)
            tops.append([[int(i), float(v)] for v, i in zip(values, indices)])
    result = {"output_ids": new, "stopped": stopped, "min_gap": min(gaps) if gaps else None, "gaps": gaps}
    if top:
        result["top_logprobs"] = tops
    return result


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


# The Gemma 3 prompts of tests/local_inference.rs (GEMMA3_PROMPTS): real test prompts and
# a chat turn; generated for GEMMA3_NEW_TOKENS tokens like the llama.cpp comparison.
GEMMA3_PROMPTS = [
    "The iris dataset has these columns: sepal_length, sepal_width, petal_length, petal_width, species\nIts first records, in file order, one per line:\nThe sepal_length is 5.1, The sepal_width is 3.5, The petal_length is 1.4, The petal_width is 0.2, The species is Iris-setosa\nThe sepal_length is 4.9, The sepal_width is 3, The petal_length is 1.4, The petal_width is 0.2, The species is Iris-setosa\nThe sepal_length is 4.7, The sepal_width is 3.2, The petal_length is 1.3, The petal_width is 0.2, The species is Iris-setosa\nThe sepal_length is 4.6, The sepal_width is 3.1, The petal_length is 1.5, The petal_width is 0.2, The species is Iris-setosa\n",
    "The titanic dataset has these columns: Survived, Pclass, Name, Sex, Age, SibSp, Parch, Ticket, Fare, Cabin, Embarked, PassengerId\nRecords, one per line:\nThe Survived is 1, The Pclass is 3, The Name is Mannion, Miss. Margareth, The Sex is female, The Age is , The SibSp is 0, The Parch is 0, The Ticket is 36866, The Fare is 7.7375, The Cabin is , The Embarked is Q, The PassengerId is 728\nThe Survived is 1, The Pclass is 3, The Name is Dowdell, Miss. Elizabeth, The Sex is female, The Age is 30, The SibSp is 0, The Parch is 0, The Ticket is 364516, The Fare is 12.475, The Cabin is , The Embarked is S, The PassengerId is",
    "A well-known public tabular dataset has exactly these columns:\ntarget, alcohol, malic_acid, ash, alcalinity_of_ash, magnesium, total_phenols, flavanoids, nonflavanoid_phenols, proanthocyanins, color_intensity, hue, od280_od315_of_diluted_wines, proline\nWhich dataset is it? Give only its usual name.\nDataset name:",
    "<start_of_turn>user\nName the capital of France.<end_of_turn>\n<start_of_turn>model\n",
]
GEMMA3_NEW_TOKENS = 32
GEMMA3_TOP = 5


def gemma3(out: str, gguf_path: str) -> None:
    directory = os.path.join(out, "gemma3")
    os.makedirs(directory, exist_ok=True)
    folder, name = os.path.split(os.path.abspath(gguf_path))
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    # <eos> and <end_of_turn> end generation, as in llama.cpp and in our engine.
    eos = [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<end_of_turn>")]
    cases = []
    for prompt in GEMMA3_PROMPTS:
        input_ids = tokenizer(prompt)["input_ids"]
        case = {"prompt": prompt, "input_ids": input_ids}
        case.update(greedy(model, input_ids, eos, GEMMA3_NEW_TOKENS, GEMMA3_TOP))
        cases.append(case)
    expected = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "max_new_tokens": GEMMA3_NEW_TOKENS,
        "architecture": "gemma3-gguf",
        "gguf": name,
        "cases": cases,
    }
    with open(os.path.join(directory, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    print(f"gemma3: transformers greedy output -> {directory}/expected.json")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--smollm2", help="SmolLM2 GGUF file to record transformers' output for")
    parser.add_argument("--gemma3", help="Gemma 3 270M GGUF file to record transformers' output for")
    parser.add_argument("--only-gguf", action="store_true", help="skip the tiny models (re-record the GGUF references only)")
    args = parser.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    if not args.only_gguf:
        build(args.out)
    if args.smollm2:
        smollm2(args.out, args.smollm2)
    if args.gemma3:
        gemma3(args.out, args.gemma3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
