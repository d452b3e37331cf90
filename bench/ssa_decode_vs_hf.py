"""SSA decode speed on a deep real-shaped model: Kelvin vanilla, Kelvin SSA and transformers'
generate() on the SSA export, batch 1 and 8, measured in the same rounds (medians); optionally a
second (older) kelvin beside.

Needs the tools/requirements.txt packages (torch, transformers).
Usage: python bench/ssa_decode_vs_hf.py BUILD/launcher/kelvin [--baseline OTHER/launcher/kelvin]
           [--threads N] [--new-tokens K] [--batches 1,8] [--prompt-tokens P] [--rounds R]
           [--model-dir DIR]

The model has SmolLM2-135M's shape (30 layers, hidden 576, 9 query / 3 KV heads of dim 64, FFN 1536,
vocabulary 49,152): `kelvin train` (the first binary) runs one step of it with SSA off and one with
SSA on and exports each to a Hugging Face directory; the SSA export's read-outs and alphas are then
set to normal(0, 0.5) draws, so that every temperature differs from 1. Each binary decodes both
exports; transformers decodes the SSA export through the modeling code Kelvin ships with it
(trust_remote_code). f32, CPU, greedy. Each round runs every (binary, model) and transformers at
every batch size, in turn, printing each rate as it comes; the MEDIAN over rounds is the table.
--model-dir keeps the two exports in DIR (vanilla/, ssa/) and reuses them when they are there.
Rates count the decode steps only, as bench/generate_vs_hf.py's (whose functions this uses):
Kelvin's "decode D tokens in S s", transformers' t(K + 1 new) - t(1 new).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generate_vs_hf import (  # noqa: E402
    JOB, agreeing, hf_decode, kelvin_decode, prompts_of, thread_env)

SHAPE = {"num_layers": 30, "hidden_size": 576, "num_attention_heads": 9,
         "num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152}
SSA_PARAMETERS = ("query_readout", "value_readout", "alpha")  # substrings of their tensor names


def export_model(kelvin, directory, name, ssa, threads):
    """The deep model after one training step, as a Hugging Face directory."""
    model = os.path.join(directory, name)
    command = [kelvin, "train", JOB, "--set", 'model.preset="small-25m"',
               "--set", "training.steps=1", "--set", "training.micro_batch_size=1",
               "--set", "training.global_batch_size=1", "--set", "training.seq_length=128",
               "--set", "training.eval_interval=0", "--set", "lr_schedule.warmup_steps=0",
               "--set", f"model.ssa.enabled={'true' if ssa else 'false'}",
               "--set", f'training.export_hf_dir="{model}"',
               "--set", f'launch.run_dir="{os.path.join(directory, name + "_run")}"']
    for field, value in SHAPE.items():
        command += ["--set", f"model.architecture.{field}={value}"]
    run = subprocess.run(command, capture_output=True, text=True, env=thread_env(threads))
    if run.returncode != 0:
        sys.exit(f"ssa_decode_vs_hf: kelvin train failed:\n{run.stderr[-3000:]}")
    return model


def randomize_temperatures(model):
    """Sets the SSA read-outs and alphas of every safetensors file of `model` to normal(0, 0.5)."""
    generator = torch.Generator().manual_seed(5)
    changed = 0
    for name in sorted(os.listdir(model)):
        if not name.endswith(".safetensors"):
            continue
        path = os.path.join(model, name)
        tensors = load_file(path)
        for key, value in tensors.items():
            if any(part in key for part in SSA_PARAMETERS):
                tensors[key] = (torch.randn(value.shape, generator=generator) * 0.5).to(value.dtype)
                changed += 1
        save_file(tensors, path, metadata={"format": "pt"})
    if changed == 0:
        sys.exit(f"ssa_decode_vs_hf: no SSA read-out in {model}")
    return changed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("kelvin")
    parser.add_argument("--baseline", help="a second kelvin binary measured in the same rounds")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model-dir", help="where the exports are kept (default: a temporary one)")
    args = parser.parse_args()
    binaries = {"kelvin": args.kelvin}
    if args.baseline:
        binaries["baseline"] = args.baseline
    for path in binaries.values():
        if not os.access(path, os.X_OK):
            sys.exit(f"ssa_decode_vs_hf: no kelvin binary at {path}")
    torch.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",")]
    rates = {}  # (who, model, batch) -> [tokens/s per round]
    agreement = {}
    with tempfile.TemporaryDirectory() as temporary:
        directory = args.model_dir or temporary
        models = {}
        for name, ssa in (("vanilla", False), ("ssa", True)):
            models[name] = os.path.join(directory, name)
            if os.path.exists(os.path.join(models[name], "config.json")):
                print(f"reusing {models[name]}", flush=True)
                continue
            export_model(args.kelvin, directory, name, ssa, args.threads)
            if ssa:
                print(f"set {randomize_temperatures(models[name])} SSA parameter tensors to "
                      "N(0, 0.5)", flush=True)
        hf_ssa = AutoModelForCausalLM.from_pretrained(models["ssa"], dtype=torch.float32,
                                                      trust_remote_code=True).eval()

        def record(who, model_name, batch, rate):
            rates.setdefault((who, model_name, batch), []).append(rate)
            print(f"  {who} {model_name} batch {batch}: {rate:.2f} tok/s "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)

        for round_index in range(args.rounds):
            for batch in batches:
                prompts = prompts_of(batch, args.prompt_tokens)
                for model_name, model_dir in models.items():
                    for who, kelvin in binaries.items():
                        rate, tokens, _ = kelvin_decode(kelvin, model_dir, prompts,
                                                        args.new_tokens, args.threads)
                        record(who, model_name, batch, rate)
                        if who == "kelvin" and model_name == "ssa":
                            kelvin_tokens = tokens
                rate, hf_tokens = hf_decode(hf_ssa, prompts, args.new_tokens)
                record("hf", "ssa", batch, rate)
                agreement[batch] = (agreeing(kelvin_tokens, hf_tokens),
                                    batch * (args.new_tokens + 1))
            print(f"round {round_index + 1} of {args.rounds} done", flush=True)

    def median(who, model, batch):
        return statistics.median(rates[(who, model, batch)])

    print(f"SmolLM2-135M shape (30 layers, 576 hidden, 9/3 heads of 64, FFN 1536, vocab 49152), "
          f"f32 greedy, {args.threads} threads, prompts of {args.prompt_tokens} tokens, "
          f"{args.new_tokens} decode steps, median of {args.rounds} rounds, "
          f"transformers {__import__('transformers').__version__}, torch {torch.__version__}")
    print("binary    batch  vanilla tok/s  SSA tok/s  SSA/vanilla  hf SSA tok/s  SSA/hf SSA  "
          "greedy SSA tokens agreeing with hf")
    for who in binaries:
        for batch in batches:
            vanilla, ssa = median(who, "vanilla", batch), median(who, "ssa", batch)
            hf = median("hf", "ssa", batch)
            same, total = agreement[batch]
            print(f"{who:8s}  {batch:5d}  {vanilla:13.1f}  {ssa:9.1f}  {ssa / vanilla:11.3f}  "
                  f"{hf:12.1f}  {ssa / hf:10.3f}  {same} of {total} (kelvin)")


if __name__ == "__main__":
    main()
