#!/usr/bin/env bash
# What `kelvin prepare-data` costs on a fine-tuning set of realistic shape: SAMPLES JSON Lines
# samples of 50-400 token ids below 128256 (Llama-3's vocabulary) with Hugging Face-style labels
# (-100 on a random prompt prefix), written by Python with a fixed seed. Baseline, same run: the
# plain Python route to the same bytes (json.loads per line, the ids and the 0/1 targets appended to
# two int32 / uint8 arrays and written with tofile; one pass, no validation, no index). Kelvin
# validates every line as it writes both Megatron datasets with their indexes (one pass).
# Prints both wall times, tokens/s and the ratio. Needs python3 (standard library only).
# Usage: bench/prepare_data_throughput.sh BUILD_DIR [samples]
set -euo pipefail
build="${1:?usage: $0 BUILD_DIR [samples]}"
samples="${2:-100000}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$work/samples.jsonl" "$samples" <<'PY'
import json, random, sys
rng = random.Random(1)
with open(sys.argv[1], "w") as out:
    for _ in range(int(sys.argv[2])):
        ids = [rng.randint(0, 128255) for _ in range(rng.randint(50, 400))]
        prompt = rng.randint(10, len(ids) - 5)
        out.write(json.dumps({"input_ids": ids, "labels": [-100] * prompt + ids[prompt:]},
                             separators=(",", ":")) + "\n")
PY
bytes=$(stat -c %s "$work/samples.jsonl")
start=$(date +%s.%N)
"$build/launcher/kelvin" prepare-data "$work/samples.jsonl" --out "$work/kelvin/sft" > "$work/kelvin.log"
kelvin_s=$(echo "$(date +%s.%N) - $start" | bc)
tokens=$(sed -n 's/.* samples (one document each), \([0-9]*\) tokens.*/\1/p' "$work/kelvin.log")
start=$(date +%s.%N)
python3 - "$work/samples.jsonl" "$work/python" <<'PY'
import array, json, sys
tokens, targets = array.array("i"), array.array("B")
with open(sys.argv[1]) as lines:
    for line in lines:
        sample = json.loads(line)
        tokens.extend(sample["input_ids"])
        targets.extend(0 if label == -100 else 1 for label in sample["labels"])
with open(sys.argv[2] + ".bin", "wb") as out:
    tokens.tofile(out)
with open(sys.argv[2] + "_loss_mask.bin", "wb") as out:
    targets.tofile(out)
PY
python_s=$(echo "$(date +%s.%N) - $start" | bc)
printf 'input: %d samples, %d tokens, %.0f MB of JSON Lines\n' "$samples" "$tokens" \
  "$(echo "$bytes / 1000000" | bc -l)"
printf 'kelvin prepare-data: %.2f s (%.2f M tokens/s)\n' "$kelvin_s" \
  "$(echo "$tokens / $kelvin_s / 1000000" | bc -l)"
printf 'python json.loads baseline: %.2f s (%.2f M tokens/s)\n' "$python_s" \
  "$(echo "$tokens / $python_s / 1000000" | bc -l)"
printf 'ratio (python time / kelvin time): %.2fx\n' "$(echo "$python_s / $kelvin_s" | bc -l)"
