#!/usr/bin/env bash
# The SSA study: every task x variant x seed trained with `kelvin train`, then scored with
# `kelvin eval --needle`, one JSON line per run appended to the results file. Resumable: a run
# whose line is there is skipped, a trained run is not trained again. Usage:
#   bash experiments/ssa/run_study.sh [--kelvin BIN] [--out DIR] [--results FILE] [--jobs N]
#        [--tasks a,b] [--variants a,b] [--seeds 1,2] [--steps N] [--needle-samples N]
#        [--threads N]  (OpenMP threads per run; default: the cores shared out over the --jobs)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
kelvin="$root/build/release/launcher/kelvin"
out="$root/experiments/ssa/runs"
results=""
jobs=2
# The study as RESULTS.md reports it; passkey_512 is defined for a longer budget and not in it.
tasks="passkey_192,passkey_256,passkey_256_tlr10,passkey_256_alpha2,distractor_192"
variants="vanilla,ssa,query_only,value_only,position_only,clamp"
seeds="1,2,3,4,5"
steps=""           # "": each task's own budget
needle_samples=10  # per cell of the needle grid
threads=""

# Each task: its --set flags, its step budget, and the needle grid it is scored on (lengths;
# the depths are 0, 0.25, .., 1). The passkey_192 and passkey_256 grids run to 8x the trained
# length.
task_flags() {
  case "$1" in
    passkey_192) echo "--set training.seq_length=192" ;;
    passkey_256) echo "--set training.seq_length=256" ;;
    passkey_512) echo "--set training.seq_length=512" ;;
    # passkey_256 with the spec's two knobs moved for every variant (the same search for all): the
    # temperatures learning 10x faster, and the position term on from the start (sigma(-2) =
    # 0.12, so 0.12 ln n reaches 0.66 at 256 tokens where alpha_init -8 gives 0.002).
    passkey_256_tlr10) echo "--set training.seq_length=256 --set model.ssa.temperature_lr_scale=10" ;;
    passkey_256_alpha2) echo "--set training.seq_length=256 --set model.ssa.alpha_init=-2" ;;
    distractor_192) echo "--set training.seq_length=192 --set data.passkey.distractors=1" ;;
    smoke) echo "--set training.seq_length=128 --set training.eval_steps=1 --set lr_schedule.warmup_steps=1" ;;
    *) return 1 ;;
  esac
}
task_steps() {
  case "$1" in
    passkey_192 | passkey_256 | passkey_256_* | distractor_192) echo 250 ;;
    passkey_512) echo 250 ;;
    smoke) echo 2 ;;
  esac
}
task_lengths() {
  case "$1" in
    passkey_192) echo "192,384,768,1536" ;;
    passkey_256 | passkey_256_*) echo "256,512,1024,2048" ;;
    passkey_512) echo "512,1024" ;;
    distractor_192) echo "192,384,768" ;;
    smoke) echo "128" ;;
  esac
}
variant_flags() {
  case "$1" in
    vanilla) echo "--set model.ssa.enabled=false" ;;
    ssa) echo "--set model.ssa.enabled=true" ;;
    query_only) echo "--set model.ssa.enabled=true --set model.ssa.value_temperature=false" ;;
    value_only) echo "--set model.ssa.enabled=true --set model.ssa.query_temperature=false" ;;
    position_only) echo "--set model.ssa.enabled=true --set model.ssa.token_aware=false" ;;
    clamp)
      echo "--set model.ssa.enabled=true --set model.ssa.temperature_clamp.lo=0.9" \
        "--set model.ssa.temperature_clamp.hi=1.1"
      ;;
    *) return 1 ;;
  esac
}

# One run: train (unless finished), score the needle grid (unless scored; with the temperature
# histograms of an SSA variant), append its line.
run_cell() {
  local task="$1" variant="$2" seed="$3"
  local dir="$out/$task/$variant/seed$seed"
  local id="\"task\": \"$task\", \"variant\": \"$variant\", \"seed\": $seed"
  if [[ -f "$results" ]] && grep -qF "{$id," "$results"; then return 0; fi
  local budget="${steps:-$(task_steps "$task")}"
  local -a flags
  read -r -a flags <<<"$(task_flags "$task") $(variant_flags "$variant") --set training.seed=$seed \
    --set training.steps=$budget --set launch.run_dir=\"$dir\" \
    --set checkpoint.dir=\"$dir/checkpoints\" --set checkpoint.interval_steps=$budget \
    --set checkpoint.keep_last=1 --set logging.metrics_file=\"$dir/metrics.jsonl\""
  mkdir -p "$dir"
  # Another driver on the same --out may be running this cell: it is left to that one.
  exec 8>"$dir/cell.lock"
  if ! flock -n 8; then
    echo "run_study: $task/$variant/seed$seed is being run by another driver; skipped"
    return 0
  fi
  if [[ ! -f "$dir/FINISHED" ]]; then
    local start=$SECONDS
    if ! "$kelvin" train "$here/passkey_study.textproto" "${flags[@]}" >"$dir/train.log" 2>&1; then
      echo "run_study: $task/$variant/seed$seed failed; its log: $dir/train.log" >&2
      return 1
    fi
    echo $((SECONDS - start)) >"$dir/train_seconds"
    # The binary that trained it and the GEMM kernels OpenBLAS chose for this CPU (its second
    # line): a change in the last bits of the arithmetic moves a run's outcome (RESULTS.md, the
    # noise floor), so runs are compared only where both agree.
    "$kelvin" --version | paste -sd ';' >"$dir/kelvin_version"
  fi
  if [[ ! -f "$dir/needle.json" ]]; then
    local start=$SECONDS
    local -a histograms=()  # the temperatures of an SSA model, at the trained length
    [[ "$variant" == vanilla ]] || histograms=(--temperatures)
    if ! "$kelvin" eval "$here/passkey_study.textproto" "${flags[@]}" --needle \
      --lengths "$(task_lengths "$task")" --depths 0,0.25,0.5,0.75,1 \
      --samples "$needle_samples" "${histograms[@]}" --json "$dir/needle.json" \
      >"$dir/needle.log" 2>&1; then
      echo "run_study: the needle grid of $task/$variant/seed$seed failed: $dir/needle.log" >&2
      return 1
    fi
    echo $((SECONDS - start)) >"$dir/needle_seconds"
  fi
  # The line: the run's identity, its wall times, the metrics records of the evaluations, of every
  # 25th step and of the last (the progress, with the temperatures) and the needle grid, composed
  # without parsing them.
  local line
  line="{$id, \"steps\": $budget, \"train_seconds\": $(cat "$dir/train_seconds"),"
  line+=" \"kelvin\": \"$(cat "$dir/kelvin_version" 2>/dev/null || echo not recorded)\","
  line+=" \"needle_seconds\": $(cat "$dir/needle_seconds"),"
  line+=" \"metrics\": [$(grep -E "\"eval/|^\\{\"step\":($budget|[0-9]*(00|25|50|75))," \
    "$dir/metrics.jsonl" | paste -sd,)],"
  line+=" \"needle\": $(tr -d '\n' <"$dir/needle.json" | tr -s ' ')}"
  (
    flock 9
    echo "$line" >>"$results"
  ) 9>>"$results.lock"
  echo "run_study: $task/$variant/seed$seed done"
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --kelvin) kelvin="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --results) results="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --tasks) tasks="$2"; shift 2 ;;
    --variants) variants="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --needle-samples) needle_samples="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --cell) shift; run_cell "$@"; exit $? ;;  # internal: one run, from the pool below
    *) echo "run_study: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[[ -x "$kelvin" ]] || { echo "run_study: no kelvin binary at $kelvin (give --kelvin)" >&2; exit 2; }
for task in ${tasks//,/ }; do
  task_flags "$task" >/dev/null || {
    echo "run_study: unknown task $task (tasks: passkey_192, passkey_256, passkey_256_tlr10," \
      "passkey_256_alpha2, passkey_512, distractor_192, smoke)" >&2
    exit 2
  }
done
for variant in ${variants//,/ }; do
  variant_flags "$variant" >/dev/null || {
    echo "run_study: unknown variant $variant (variants: vanilla, ssa, query_only, value_only," \
      "position_only, clamp)" >&2
    exit 2
  }
done
results="${results:-$out/study.jsonl}"
mkdir -p "$out" "$(dirname "$results")"  # after the checks: a refused call leaves nothing
# The cores are shared out: each of the --jobs runs gets its part as OpenMP threads.
if [[ -z "$threads" ]]; then
  threads=$(($(nproc) / jobs))
  threads=$((threads > 0 ? threads : 1))
fi
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
export kelvin out results steps needle_samples
cells=()
for task in ${tasks//,/ }; do
  for seed in ${seeds//,/ }; do
    for variant in ${variants//,/ }; do cells+=("$task $variant $seed"); done
  done
done
printf '%s\n' "${cells[@]}" |
  xargs -P "$jobs" -L 1 bash "$0" --kelvin "$kelvin" --out "$out" --results "$results" \
    --needle-samples "$needle_samples" ${steps:+--steps "$steps"} --cell
echo "run_study: ${#cells[@]} runs in $results"
