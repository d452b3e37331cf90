"""PyTorch's CPU attention, the baseline of bench/ssa_cpu_vs_torch.sh.

Times torch.nn.functional.scaled_dot_product_attention (is_causal=True, enable_gqa=True, f32,
layout [B, H, T, d]) forward + backward on the CPU for cases named like the Kelvin benchmark's
("H8G2_d128_T2048": H query heads, G key/value heads, head dim d, T tokens, B = 1), and prints one
JSON object per case: {"case", "threads", "mean_ms", "median_ms", "min_ms", "repeats"}. PyTorch has no SSA
temperatures: this is plain causal GQA attention (RoPE is not applied either), the work Kelvin's
"vanilla" group does minus RoPE; Kelvin's "ssa" group does that plus the temperatures.

Usage: python bench/torch_sdpa_cpu.py --threads 2 H8G2_d128_T512 H8G2_d128_T2048
Pinned: torch 2.15.0 (the CPU kernel is ATen's flash attention for CPU).
"""

import argparse
import json
import re
import statistics
import time

import torch
import torch.nn.functional as F

MIN_SECONDS = 2.0  # time each case for at least this long (the machine's cores are shared)


def parse_case(name):
    m = re.fullmatch(r"H(\d+)G(\d+)_d(\d+)_T(\d+)", name)
    if not m:
        raise SystemExit(f"case {name!r} is not of the form H8G2_d128_T2048")
    return tuple(int(x) for x in m.groups())


def time_case(heads, kv_heads, head_dim, seq):
    gen = torch.Generator().manual_seed(0)

    def uniform(*shape):
        return (torch.rand(*shape, generator=gen) * 2 - 1).requires_grad_()

    q = uniform(1, heads, seq, head_dim)
    k = uniform(1, kv_heads, seq, head_dim)
    v = uniform(1, kv_heads, seq, head_dim)
    dout = torch.rand(1, heads, seq, head_dim, generator=gen)

    def step():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        out.backward(dout)

    step()  # warm-up
    times = []
    start = time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < MIN_SECONDS:
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, required=True, help="torch.set_num_threads")
    parser.add_argument("cases", nargs="+", help="e.g. H8G2_d128_T2048")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for name in args.cases:
        times = time_case(*parse_case(name))
        print(json.dumps({"case": name, "threads": args.threads,
                          "mean_ms": statistics.mean(times), "median_ms": statistics.median(times),
                          "min_ms": min(times),
                          "repeats": len(times)}), flush=True)


if __name__ == "__main__":
    main()
