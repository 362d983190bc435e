"""PyTorch side of `cargo bench --bench train_vs_torch`: the same llama folder, the same
token windows, batch size, sequence length, thread count and AdamW settings; prints one JSON
line with tokens/s of forward + backward + optimizer step and the process's peak RSS.
Two more arguments (rank, comma-joined module names) train peft LoRA adapters instead, the
base frozen, alpha = rank, no dropout. TABCONTAM_BENCH_PRECISION=bf16 runs the forward pass
and the loss under torch.autocast("cpu", dtype=torch.bfloat16) (f32 master weights)."""
import contextlib
import json
import os
import resource
import sys
import time

import torch
from transformers import LlamaForCausalLM


def main():
    model_dir, windows_path, steps, threads, lr = sys.argv[1:6]
    lora = sys.argv[6:8]
    torch.set_num_threads(int(threads))
    torch.manual_seed(0)
    windows = json.load(open(windows_path))  # [[ids of seq + 1]] × batch, per step
    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    if lora:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError:
            sys.exit("peft is missing from this venv: pip install peft==0.21.2")
        rank, modules = int(lora[0]), lora[1].split(",")
        model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=rank, lora_dropout=0.0,
                                                 target_modules=modules, bias="none"))
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=float(lr), betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0)

    bf16 = os.environ.get("TABCONTAM_BENCH_PRECISION", "f32") == "bf16"

    def autocast():
        if bf16:
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(batch):
        ids = torch.tensor(batch, dtype=torch.long)
        with autocast():
            out = model(input_ids=ids[:, :-1], labels=None)
            logits = out.logits.reshape(-1, out.logits.shape[-1])
            loss = torch.nn.functional.cross_entropy(logits, ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    step(windows[0])  # warm-up
    started = time.perf_counter()
    cpu_started = time.process_time()  # every thread of the process, user and system
    tokens = 0
    losses = []
    for batch in windows[1:1 + int(steps)]:
        losses.append(step(batch))
        tokens += len(batch) * (len(batch[0]) - 1)
    seconds = time.perf_counter() - started
    cpu_seconds = time.process_time() - cpu_started
    print(json.dumps({"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
                      "cpu_percent": 100 * cpu_seconds / seconds,
                      "losses": losses,
                      # ru_maxrss is in KiB on Linux.
                      "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


if __name__ == "__main__":
    main()
