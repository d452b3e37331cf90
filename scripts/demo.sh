#!/usr/bin/env bash
# The README's main command: sets everything up, builds, and runs Kelvin's main job on its small
# embedded default: a tiny Llama-shaped model fine-tuned on the synthetic passkey-retrieval task on
# the CPU (configs/passkey_tiny_cpu.textproto), and beside it the same job with SSA (same seed,
# data and steps; each run on half the cores). The main job's progress lines show the loss
# falling and its evaluations the held-out loss and passkey retrieval; at the end a table puts the
# two runs' evaluations side by side. Extra arguments go to both `kelvin train` runs (e.g. --set
# training.steps=600).
# It builds what this machine can run: CUDA only where nvidia-smi finds a GPU (or KELVIN_DEMO_CUDA=1
# asks for it), else CPU-only, which spares a machine with the CUDA toolkit and no GPU most of the
# build (the CUDA kernels for every architecture); scripts/test.sh builds CUDA regardless. Each
# stage prints its time.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build/release"
if [[ "${KELVIN_DEMO_CUDA:-0}" == 1 ]] || nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  cuda=AUTO why="a GPU is present, or KELVIN_DEMO_CUDA=1"
else
  cuda=OFF why="nvidia-smi finds no GPU; KELVIN_DEMO_CUDA=1 builds CUDA anyway"
fi
echo "demo: building with --cuda $cuda ($why)"
SECONDS=0
"$root/scripts/setup.sh" --build-dir "$build" --cuda "$cuda" --target kelvin
echo "demo: set up and built in ${SECONDS} s"
SECONDS=0
cd "$root"
kelvin="$build/launcher/kelvin"
job=configs/passkey_tiny_cpu.textproto
threads=$(($(nproc) / 2 > 0 ? $(nproc) / 2 : 1))
mkdir -p runs/passkey_tiny_cpu runs/passkey_tiny_cpu_ssa
ssa_log=runs/passkey_tiny_cpu_ssa/train.log
OMP_NUM_THREADS=$threads "$kelvin" train "$job" --set model.ssa.enabled=true \
  --set launch.run_dir=\"runs/passkey_tiny_cpu_ssa\" \
  --set training.export_hf_dir=\"runs/passkey_tiny_cpu_ssa/final\" "$@" >"$ssa_log" 2>&1 &
ssa_pid=$!
trap 'kill $ssa_pid 2>/dev/null' EXIT
echo "demo: the same job with SSA runs beside this one (its log: $ssa_log)"
OMP_NUM_THREADS=$threads "$kelvin" train "$job" "$@" 2>&1 | tee runs/passkey_tiny_cpu/train.log
if ! wait $ssa_pid; then
  echo "demo: the SSA run failed; its log: $ssa_log" >&2
  exit 1
fi
trap - EXIT
echo "demo: both trainings ran in ${SECONDS} s"
# The evaluations side by side: "eval at step N | loss L | token accuracy A% | passkey retrieval R%".
evals() { sed -n 's/.*eval at step \([0-9]*\) | loss \([0-9.]*\) | token accuracy \([0-9.]*%\) .*passkey retrieval \([0-9.]*%\).*/\1 \2 \3 \4/p' "$1"; }
echo
echo "held-out evaluations, vanilla vs SSA (the same seed, data and steps):"
printf '%6s | %-30s | %-30s\n' step "vanilla: loss, token acc, retrieval" "SSA: loss, token acc, retrieval"
paste -d' ' <(evals runs/passkey_tiny_cpu/train.log) <(evals "$ssa_log") |  # the same steps
  awk '{printf "%6s | %8s %10s %10s    | %8s %10s %10s\n", $1, $2, $3, $4, $6, $7, $8}'
echo "One seed at this scale is an anecdote: experiments/ssa/RESULTS.md compares them over seeds."
