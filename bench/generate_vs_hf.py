"""Decode speed: `kelvin generate` against transformers' generate() of the same model, one run.

Needs the tools/requirements.txt packages (torch, transformers).
Usage: python bench/generate_vs_hf.py BUILD/launcher/kelvin [--threads N] [--new-tokens K]
                                      [--batches 1,8] [--prompt-tokens P] [--rounds R]

The model is the small-25m preset (8 layers, hidden 512, vocab 8192), trained 2 steps by
`kelvin train` and exported to a Hugging Face directory, which both sides load (f32, CPU, greedy).
Each round runs Kelvin, then transformers, at every batch size; the best round is kept. Both rates
count the decode steps only (every token after the first of each sequence), so model loading and
the prefill are left out on both sides:
  kelvin: the "decode D tokens in S s" of its log (GenerateBatch's timing of the decoder calls
          after the prefill, samples included);
  hf:     (t(K + 1 new tokens) - t(1 new token)) of generate() in one process, its KV cache on.
Prints tokens/s, the ratio kelvin / hf (> 1: Kelvin is faster) and how many greedy tokens agree.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import torch
from transformers import LlamaForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "configs", "passkey_tiny_cpu.textproto")
DECODE_LINE = re.compile(r"decode (\d+) tokens in ([0-9.]+) s")


def export_model(kelvin, directory, threads):
    """small-25m after 2 training steps, as a Hugging Face directory."""
    model = os.path.join(directory, "model")
    command = [kelvin, "train", JOB, "--set", 'model.preset="small-25m"',
               "--set", "training.steps=2", "--set", "training.micro_batch_size=2",
               "--set", "training.global_batch_size=2", "--set", "training.eval_interval=0",
               "--set", "lr_schedule.warmup_steps=1",
               "--set", f'training.export_hf_dir="{model}"',
               "--set", f'launch.run_dir="{os.path.join(directory, "run")}"']
    subprocess.run(command, check=True, capture_output=True, env=thread_env(threads))
    return model


def thread_env(threads):
    return dict(os.environ, OMP_NUM_THREADS=str(threads))


def prompts_of(batch, length):
    return [[(i * 7919 + b * 104729) % 8000 + 100 for i in range(length)] for b in range(batch)]


def kelvin_decode(kelvin, model, prompts, new_tokens, threads):
    """(tokens/s, the generated tokens per prompt, finish reasons)."""
    command = [kelvin, "generate", JOB, "--set", f'model.hf_dir="{model}"',
               "--max-new-tokens", str(new_tokens + 1), "--batch-size", str(len(prompts))]
    for prompt in prompts:
        command += ["--tokens", ",".join(map(str, prompt))]
    run = subprocess.run(command, check=True, capture_output=True, text=True,
                         env=thread_env(threads))
    match = DECODE_LINE.search(run.stderr)
    if match is None:
        sys.exit(f"generate_vs_hf: no decode timing in kelvin's log:\n{run.stderr}")
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    rate = int(match.group(1)) / float(match.group(2))
    return rate, [line["tokens"] for line in lines], [line["finish_reason"] for line in lines]


def hf_generate(model, inputs, new_tokens):
    return model.generate(inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                          do_sample=False, use_cache=True, pad_token_id=0)


def hf_decode(model, prompts, new_tokens):
    """(tokens/s of the decode steps, the generated tokens per prompt)."""
    inputs = torch.tensor(prompts, dtype=torch.long)
    with torch.inference_mode():
        start = time.perf_counter()
        hf_generate(model, inputs, 1)
        first = time.perf_counter() - start
        start = time.perf_counter()
        out = hf_generate(model, inputs, new_tokens + 1)
        whole = time.perf_counter() - start
    generated = out[:, inputs.shape[1]:].tolist()
    return len(prompts) * new_tokens / (whole - first), generated


def agreeing(a, b):
    """Tokens equal before the first difference, summed over the prompts."""
    count = 0
    for x, y in zip(a, b):
        for p, q in zip(x, y):
            if p != q:
                break
            count += 1
    return count


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("kelvin")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not os.access(args.kelvin, os.X_OK):
        sys.exit(f"generate_vs_hf: no kelvin binary at {args.kelvin}")
    torch.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",")]
    with tempfile.TemporaryDirectory() as directory:
        model_dir = export_model(args.kelvin, directory, args.threads)
        model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
        best = {b: {"kelvin": 0.0, "hf": 0.0} for b in batches}
        agreement = {}
        for _ in range(args.rounds):
            for batch in batches:
                prompts = prompts_of(batch, args.prompt_tokens)
                k_rate, k_tokens, reasons = kelvin_decode(args.kelvin, model_dir, prompts,
                                                          args.new_tokens, args.threads)
                h_rate, h_tokens = hf_decode(model, prompts, args.new_tokens)
                best[batch]["kelvin"] = max(best[batch]["kelvin"], k_rate)
                best[batch]["hf"] = max(best[batch]["hf"], h_rate)
                agreement[batch] = (agreeing(k_tokens, h_tokens), batch * (args.new_tokens + 1),
                                    sorted(set(reasons)))
    print(f"small-25m f32 greedy, {args.threads} threads, prompts of {args.prompt_tokens} tokens, "
          f"{args.new_tokens} decode steps, best of {args.rounds} rounds, "
          f"transformers {__import__('transformers').__version__}, torch {torch.__version__}")
    print("batch  kelvin tok/s  hf tok/s  kelvin/hf  greedy tokens agreeing  kelvin finish")
    for batch in batches:
        k, h = best[batch]["kelvin"], best[batch]["hf"]
        same, total, reasons = agreement[batch]
        print(f"{batch:5d}  {k:12.1f}  {h:8.1f}  {k / h:9.3f}  {same:>8d} of {total:<8d}      "
              f"{','.join(reasons)}")


if __name__ == "__main__":
    main()
