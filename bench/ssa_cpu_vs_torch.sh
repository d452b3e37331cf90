#!/bin/bash
# Tiled CPU SSA attention against PyTorch's CPU SDPA (bench/torch_sdpa_cpu.py): f32 forward +
# backward at the same thread count. The development machine is shared, so Kelvin and PyTorch run
# alternately, case by case, for ROUNDS rounds; each round's figure is a mean step time over >= 2 s
# and the table keeps each one's best round. Columns: Kelvin's "ssa" group (default SSA options)
# and "vanilla" group (no temperatures), PyTorch, and torch / kelvin (> 1: Kelvin is faster).
# PyTorch has no SSA temperatures and applies no RoPE: torch/vanilla is the like-for-like ratio.
# Usage: bench/ssa_cpu_vs_torch.sh BUILD_DIR [CASE ...]   (cases named as in ssa_attention_bench,
#        default H8G2_d128_T512 H8G2_d128_T1024 H8G2_d128_T2048)
# Env: PYTHON (default /work/venv-tools/bin/python), OMP_NUM_THREADS (default nproc), ROUNDS (3).
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [CASE ...]}
shift
cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then cases=(H8G2_d128_T512 H8G2_d128_T1024 H8G2_d128_T2048); fi
bench="$build/bench/ssa_attention_bench"
if [ ! -x "$bench" ]; then
  echo "$bench not found: build the ssa_attention_bench target in $build first" >&2
  exit 1
fi
python=${PYTHON:-/work/venv-tools/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
rounds=${ROUNDS:-3}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "threads $OMP_NUM_THREADS, $(getconf _NPROCESSORS_ONLN) cores," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$rounds"); do
  for c in "${cases[@]}"; do
    if ! "$bench" --benchmark_filter="^(ssa|vanilla)/kelvin/$c/" \
      --benchmark_out="$tmp/kelvin_${c}_$round.json" --benchmark_out_format=json \
      >"$tmp/kelvin.log" 2>&1; then
      cat "$tmp/kelvin.log" >&2
      exit 1
    fi
    "$python" "$here/torch_sdpa_cpu.py" --threads "$OMP_NUM_THREADS" "$c" \
      >"$tmp/torch_${c}_$round.json"
  done
done
echo "load average after $(cut -d' ' -f1-3 /proc/loadavg); best of $rounds rounds (ms per step):"
"$python" - "$tmp" "$rounds" "${cases[@]}" <<'PY'
import json, sys
tmp, rounds, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"{'case':<16} {'kelvin_ssa':>11} {'kelvin_vanilla':>15} {'torch_sdpa':>11} "
      f"{'torch/ssa':>10} {'torch/vanilla':>14}   rounds ssa / vanilla / torch")
for case in cases:
    runs = {"ssa": [], "vanilla": [], "torch": []}
    for r in range(1, rounds + 1):
        for b in json.load(open(f"{tmp}/kelvin_{case}_{r}.json"))["benchmarks"]:
            runs[b["run_name"].split("/")[0]].append(b["real_time"])  # ms (time_unit ms)
        runs["torch"].append(json.load(open(f"{tmp}/torch_{case}_{r}.json"))["mean_ms"])
    ssa, vanilla, torch = (min(runs[k]) for k in ("ssa", "vanilla", "torch"))
    detail = " / ".join(",".join(f"{t:.0f}" for t in runs[k]) for k in ("ssa", "vanilla", "torch"))
    print(f"{case:<16} {ssa:>11.1f} {vanilla:>15.1f} {torch:>11.1f} {torch / ssa:>10.3f} "
          f"{torch / vanilla:>14.3f}   {detail}")
PY
