"""Encode throughput: `kelvin prepare-data --tokenizer` against Hugging Face tokenizers, one run.

Needs the tools/requirements.txt packages (tokenizers, numpy).
Usage: python bench/tokenizer_vs_hf.py BUILD/launcher/kelvin [--threads N] [--copies C]

The corpus is tools/make_tokenizer_fixture.py's (5.2 MB of mixed scripts, code, emoji and
whitespace), C copies of it (default 4), as {"text": ...} JSON Lines; the tokenizer is the
committed Llama-3-style one (tests/fixtures/tokenizer/llama3_style). Each side runs with N threads
(default 2; OMP_NUM_THREADS for Kelvin, RAYON_NUM_THREADS for tokenizers), alternately, 3 rounds,
best round kept:
  kelvin:        prepare-data end to end (process start, tokenizer load, JSON parse, encode,
                 EOD, both Megatron datasets with indexes written);
  encode_batch:  tokenizers' encode_batch on the texts already in memory (encoding only);
  python e2e:    json.loads per line, encode_batch, the eos appended, the ids written with numpy
                 (no index): the plain Python route to the same tokens.
Prints the times, MB/s and the ratios baseline time / Kelvin time (> 1: Kelvin is faster).
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TOKENIZER = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "llama3_style")
sys.path.insert(0, os.path.join(ROOT, "tools"))

HF_SIDE = r'''
import json, sys, time
import numpy as np
from tokenizers import Tokenizer
tokenizer = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")
eos = tokenizer.token_to_id("<|end_of_text|>")
start = time.perf_counter()
with open(sys.argv[2], encoding="utf-8") as f:
    texts = [json.loads(line)["text"] for line in f]
read = time.perf_counter()
encodings = tokenizer.encode_batch(texts)
encoded = time.perf_counter()
ids = np.fromiter((i for e in encodings for i in e.ids + [eos]), dtype=np.int32)
ids.tofile(sys.argv[3])
done = time.perf_counter()
print(json.dumps({"encode_batch": encoded - read, "e2e": done - start, "tokens": int(ids.size)}))
'''


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("kelvin")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--copies", type=int, default=4)
    args = parser.parse_args()
    from make_tokenizer_fixture import make_corpus

    lines = [line for line in make_corpus(random.Random(0)) if line] * args.copies
    work = tempfile.mkdtemp(prefix="kelvin_tokenizer_bench_")
    corpus = os.path.join(work, "corpus.jsonl")
    with open(corpus, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps({"text": line}, ensure_ascii=False) + "\n")
    text_mb = sum(len(line.encode()) for line in lines) / 1e6
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads),
               RAYON_NUM_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="true")
    best = {"kelvin": float("inf"), "encode_batch": float("inf"), "e2e": float("inf")}
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run([args.kelvin, "prepare-data", corpus, "--out", os.path.join(work, "k"),
                        "--tokenizer", TOKENIZER], check=True, capture_output=True, env=env)
        best["kelvin"] = min(best["kelvin"], time.perf_counter() - start)
        hf = json.loads(subprocess.run(
            [sys.executable, "-c", HF_SIDE, TOKENIZER, corpus, os.path.join(work, "hf.bin")],
            check=True, capture_output=True, env=env, text=True).stdout)
        best["encode_batch"] = min(best["encode_batch"], hf["encode_batch"])
        best["e2e"] = min(best["e2e"], hf["e2e"])
    print(f"corpus: {len(lines)} lines, {text_mb:.1f} MB of text, {hf['tokens']} tokens; "
          f"threads {args.threads}; load average {os.getloadavg()[0]:.2f}")
    for name, label in (("kelvin", "kelvin prepare-data (end to end)"),
                        ("encode_batch", "tokenizers encode_batch (encoding only)"),
                        ("e2e", "python json.loads + encode_batch + write")):
        print(f"{label}: {best[name]:.2f} s ({text_mb / best[name]:.1f} MB/s)")
    print(f"ratio encode_batch / kelvin: {best['encode_batch'] / best['kelvin']:.2f}x; "
          f"python e2e / kelvin: {best['e2e'] / best['kelvin']:.2f}x")


if __name__ == "__main__":
    main()
