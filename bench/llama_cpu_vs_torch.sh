#!/usr/bin/env bash
# Training tokens/s of the ~25M-parameter Llama (small-25m) on the CPU: Kelvin vs PyTorch eager
# (transformers), same shape, same thread count, measured in one run, alternating A/B/A/B so that
# load changes hit both. Prints both rates and the ratio of the medians.
# Usage: bench/llama_cpu_vs_torch.sh BUILD_DIR [threads] [repeats]   (PYTHON: the tools venv)
set -euo pipefail
build="${1:?usage: $0 BUILD_DIR [threads] [repeats]}"
threads="${2:-$(nproc)}"
repeats="${3:-3}"
python="${PYTHON:-/work/venv-tools/bin/python}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export OMP_NUM_THREADS="$threads"
kelvin=() torch=()
for ((i = 0; i < repeats; ++i)); do
  kelvin+=("$("$build/bench/llama_train_tokens" small-25m 4 512 5)")
  torch+=("$("$python" "$root/bench/torch_llama_train.py" 4 512 5 2>/dev/null)")
done
printf '%s\n' "${kelvin[@]}" "${torch[@]}"
"$python" - "${kelvin[@]}" "${torch[@]}" <<'PY'
import json, statistics, sys
runs = [json.loads(a) for a in sys.argv[1:]]
k = statistics.median(r["tokens_per_s"] for r in runs if r["impl"] == "kelvin")
t = statistics.median(r["tokens_per_s"] for r in runs if r["impl"] == "torch")
print(f"small-25m train step, B=4 T=512 f32, {runs[0]['threads']} threads: kelvin {k:.0f} tok/s, "
      f"torch eager {t:.0f} tok/s, ratio {k / t:.3f} (medians)")
PY
