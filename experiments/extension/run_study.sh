#!/usr/bin/env bash
# The context-extension study: per seed, a base model trained at L tokens (base.textproto), then
# each variant's fine-tune at factor x L for the same number of tokens (extend.textproto), each
# model scored at L, 2L, 4L and 8L: the single needle and multi-key needle by generation and the
# teacher-forced passkey loss and retrieval. One JSON line per run appended to the results file;
# resumable (a run whose line is there is skipped, a trained model is not trained again). Usage:
#   bash experiments/extension/run_study.sh [--kelvin BIN] [--out DIR] [--results FILE]
#        [--variants a,b] [--seeds 1,2] [--factors 4,8] [--base-length L] [--base-steps N]
#        [--ext-steps N] [--ext-lr LR] [--step-tokens N] [--alpha-init A] [--needle-samples N]
#        [--task-samples N] [--heldout-rows N] [--min-length N] [--jobs N] [--threads N]
# README.md describes the protocol, the variants and the study's size.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
kelvin="$root/build/release/launcher/kelvin"
out="$root/runs/extension_study"  # /runs/ is ignored by git
results=""
all_variants="raw,finetune,abf,pi,yarn,yarn_ssa,ssa,ssa_pos,clamp,raw_ssa_base,ssa_base"
variants="$all_variants"
seeds="1,2,3,4,5,6,7,8,9,10"
factors="4,8"
base_length=192
base_steps=250
ext_steps=100
ext_lr=1e-3          # the fine-tune's peak learning rate, the same for every variant
step_tokens=12288    # tokens per extension step, whatever the length: the budget is steps x this
micro_tokens=6144   # tokens per micro-batch of the fine-tune
alpha_init=-2.2      # sigma(-2.2) = 0.0998: README.md, "The shared initialisation"
needle_samples=10    # per cell of the single-needle grid (5 depths)
task_samples=4       # per cell of the multi-key grid (3 depths)
heldout_rows=64      # teacher-forced passkey samples per evaluation length
min_length=0         # data.passkey.min_length of the base and the fine-tune (0: every sample fills its row)
jobs=1
threads=1

# The scaling of a variant at extension factor $2 over the base length: its --set flags. raw and
# raw_ssa_base are the bases themselves, not fine-tuned.
scaling_flags() {
  local variant="$1" factor="$2" rs="model.architecture.rope_scaling"
  case "$variant" in
    abf)
      # The NTK-aware base, theta s^(d / (d - 2)) with head dim d = 32 (the tiny preset): the
      # raised theta that stretches the slowest frequency's wavelength by the factor.
      echo "--set model.architecture.rope_theta=$(awk -v s="$factor" \
        'BEGIN { printf "%.1f", 10000 * exp(log(s) * 32 / 30) }')"
      ;;
    pi) echo "--set $rs.rope_type=\"linear\" --set $rs.factor=$factor" ;;
    yarn | yarn_ssa)
      echo "--set $rs.rope_type=\"yarn\" --set $rs.factor=$factor" \
        "--set $rs.original_max_position_embeddings=$base_length"
      ;;
  esac
}
# SSA's flags of a variant (the same alpha_init for all, temperature_lr_scale at its default).
ssa_flags() {
  local on="--set model.ssa.enabled=true --set model.ssa.alpha_init=$alpha_init"
  case "$1" in
    yarn_ssa | ssa | ssa_base | raw_ssa_base) echo "$on" ;;
    ssa_pos) echo "$on --set model.ssa.token_aware=false" ;;
    clamp)
      echo "$on --set model.ssa.temperature_clamp.lo=0.9 --set model.ssa.temperature_clamp.hi=1.1"
      ;;
    raw | finetune | abf | pi | yarn) echo "--set model.ssa.enabled=false" ;;
    *) return 1 ;;
  esac
}
# Which base a variant starts from: SSA from the base training, or vanilla.
base_of() {
  case "$1" in ssa_base | raw_ssa_base) echo ssa ;; *) echo vanilla ;; esac
}
is_raw() { [[ "$1" == raw || "$1" == raw_ssa_base ]]; }
uses_ssa() { [[ "$(ssa_flags "$1")" == *enabled=true* ]]; }

# timed FILE COMMAND...: runs COMMAND and writes its wall and CPU (user + system) seconds to FILE.
timed() {
  local file="$1" TIMEFORMAT="%R %U %S"
  shift
  if ! { time "$@" 2>&3; } 3>&2 2>"$file.part"; then
    rm -f "$file.part"
    return 1
  fi
  awk '{ printf "%.0f %.1f\n", $1, $2 + $3 }' "$file.part" >"$file"
  rm -f "$file.part"
}
# Runs kelvin with its log; on failure names the log and fails the run.
run_logged() {
  local log="$1" what="$2"
  shift 2
  if ! "$kelvin" "$@" >"$log" 2>&1; then
    echo "run_study: $what failed; its log: $log" >&2
    return 1
  fi
}

# The base of one seed (vanilla or SSA), trained once and exported; locked against a second driver.
train_base() {
  local kind="$1" seed="$2" dir="$out/base/$1/seed$2"
  mkdir -p "$dir"
  (
    flock 7
    [[ -f "$dir/final/config.json" ]] && exit 0
    local -a flags
    read -r -a flags <<<"$(ssa_flags "$([[ $kind == ssa ]] && echo ssa || echo raw)") \
      --set training.seed=$seed --set training.steps=$base_steps \
      --set lr_schedule.warmup_steps=$((base_steps * 3 / 25)) \
      --set training.seq_length=$base_length --set data.passkey.min_length=$min_length \
      --set launch.run_dir=\"$dir\" \
      --set checkpoint.dir=\"$dir/checkpoints\" --set checkpoint.interval_steps=$base_steps \
      --set checkpoint.keep_last=1 --set logging.metrics_file=\"$dir/metrics.jsonl\" \
      --set training.export_hf_dir=\"$dir/final\""
    "$kelvin" --version | paste -sd ';' >"$dir/kelvin_version"
    timed "$dir/train_seconds" run_logged "$dir/train.log" "the $kind base of seed $seed" \
      train "$here/base.textproto" "${flags[@]}"
  ) 7>"$dir.lock"
}

# The evaluations of one model (kelvin eval JOB FLAGS...) into $dir: the needle grids and the
# teacher-forced passkey loss and retrieval at each evaluation length.
evaluate() {
  local dir="$1" variant="$2" job="$3"
  shift 3
  local lengths="$base_length,$((2 * base_length)),$((4 * base_length)),$((8 * base_length))"
  local -a histograms=()
  uses_ssa "$variant" && histograms=(--temperatures)
  # (Each step fails the run on its own: `timed` runs this function where set -e is off.)
  [[ -f "$dir/needle.json" ]] || run_logged "$dir/needle.log" "the needle grid in $dir" \
    eval "$job" "$@" --needle --lengths "$lengths" --depths 0,0.25,0.5,0.75,1 \
    --samples "$needle_samples" "${histograms[@]}" --json "$dir/needle.json" || return 1
  # The multi-key grid needs about 270 tokens before any filler: the lengths from 4L.
  [[ -f "$dir/multikey.json" ]] || run_logged "$dir/multikey.log" "the multikey grid in $dir" \
    eval "$job" "$@" --needle --task multikey \
    --lengths "$((4 * base_length)),$((8 * base_length))" \
    --depths 0,0.5,1 --samples "$task_samples" --json "$dir/multikey.json" || return 1
  local n
  for n in ${lengths//,/ }; do
    [[ -f "$dir/heldout_$n.json" ]] || run_logged "$dir/heldout_$n.log" \
      "the held-out evaluation at $n tokens in $dir" eval "$job" "$@" \
      --set training.seq_length="$n" --set data.passkey.min_length=0 \
      --set training.micro_batch_size=8 \
      --set training.global_batch_size=8 --set training.eval_steps=$((heldout_rows / 8)) \
      --json "$dir/heldout_$n.json" || return 1
  done
}

# One run: the base it needs, its fine-tune (unless raw or finished), its evaluations, its line.
run_cell() {
  local variant="$1" factor="$2" seed="$3"
  local id="\"variant\": \"$variant\", \"factor\": $factor, \"seed\": $seed"
  if [[ -f "$results" ]] && grep -qF "{$id," "$results"; then return 0; fi
  local base="$out/base/$(base_of "$variant")/seed$seed"
  train_base "$(base_of "$variant")" "$seed"
  local dir="$out/x$factor/$variant/seed$seed" length=$((factor * base_length))
  mkdir -p "$dir"
  exec 8>"$dir/cell.lock"
  if ! flock -n 8; then
    echo "run_study: $variant x$factor seed $seed is being run by another driver; skipped"
    return 0
  fi
  local -a flags
  local job="$here/extend.textproto" train_seconds="0 0"
  if is_raw "$variant"; then
    # The base as it is: its own job and checkpoint.
    job="$here/base.textproto"
    read -r -a flags <<<"$(ssa_flags "$variant") --set training.seed=$seed \
      --set training.seq_length=$base_length --set checkpoint.dir=\"$base/checkpoints\""
  else
    # A scaling sets max_position_embeddings to factor x L by itself; it is set to the longest
    # evaluation for every variant, so that a 4x model is scored at 8L too (the RoPE of every
    # scaling here reads its factor and original length, never this field).
    local rows=$((step_tokens / length)) micro=$((micro_tokens / length))
    local longest=$(((factor > 8 ? factor : 8) * base_length))
    read -r -a flags <<<"--set model.hf_dir=\"$base/final\" $(scaling_flags "$variant" "$factor") \
      --set model.architecture.max_position_embeddings=$longest \
      $(ssa_flags "$variant") --set training.seed=$seed --set training.steps=$ext_steps \
      --set optimizer.lr=$ext_lr \
      --set lr_schedule.warmup_steps=$((ext_steps / 10)) \
      --set training.seq_length=$length --set data.passkey.min_length=$min_length \
      --set training.global_batch_size=$rows \
      --set training.micro_batch_size=$micro --set launch.run_dir=\"$dir\" \
      --set checkpoint.dir=\"$dir/checkpoints\" --set checkpoint.interval_steps=$ext_steps \
      --set checkpoint.keep_last=1 --set logging.metrics_file=\"$dir/metrics.jsonl\""
    if [[ ! -f "$dir/FINISHED" ]]; then
      # The binary that trains it (a raw run records the one that scores it).
      "$kelvin" --version | paste -sd ';' >"$dir/kelvin_version"
      timed "$dir/train_seconds" run_logged "$dir/train.log" \
        "the fine-tune $variant x$factor seed $seed" train "$job" "${flags[@]}"
      touch "$dir/FINISHED"
    fi
    train_seconds=$(cat "$dir/train_seconds")
  fi
  [[ -f "$dir/kelvin_version" ]] || "$kelvin" --version | paste -sd ';' >"$dir/kelvin_version"
  # A resumed evaluation times only what it ran.
  [[ -f "$dir/eval_seconds" ]] || timed "$dir/eval_seconds" evaluate "$dir" "$variant" "$job" \
    "${flags[@]}"
  # The line, composed without parsing: identity, sizes, wall times, the binary, the base's and
  # the fine-tune's evaluation records, the grids and the held-out evaluations by length.
  local line n sep=""
  line="{$id, \"base_length\": $base_length, \"length\": $length,"
  line+=" \"ext_steps\": $(is_raw "$variant" && echo 0 || echo "$ext_steps"),"
  line+=" \"ext_tokens\": $(is_raw "$variant" && echo 0 || echo $((ext_steps * step_tokens))),"
  line+=" \"ext_lr\": $(is_raw "$variant" && echo 0 || echo "$ext_lr"),"
  line+=" \"base_steps\": $base_steps, \"alpha_init\": $alpha_init, \"min_length\": $min_length,"
  # Wall and CPU seconds: [wall, user + system].
  line+=" \"base_seconds\": [$(tr ' ' , <"$base/train_seconds")],"
  line+=" \"train_seconds\": [${train_seconds/ /,}],"
  line+=" \"eval_seconds\": [$(tr ' ' , <"$dir/eval_seconds")],"
  line+=" \"kelvin\": \"$(cat "$dir/kelvin_version")\","
  line+=" \"base_kelvin\": \"$(cat "$base/kelvin_version" 2>/dev/null || echo not recorded)\","
  line+=" \"base_metrics\": [$({ grep -F '"eval/' "$base/metrics.jsonl" || true; } | paste -sd,)],"
  # The fine-tune's evaluations and its last step's record (its loss, SSA's temperatures).
  line+=" \"metrics\": [$({ grep -sE "\"eval/|^\\{\"step\":$ext_steps," \
    "$dir/metrics.jsonl" || true; } | paste -sd,)],"
  line+=" \"needle\": $(tr -d '\n' <"$dir/needle.json" | tr -s ' '),"
  line+=" \"multikey\": $(tr -d '\n' <"$dir/multikey.json" | tr -s ' '), \"heldout\": {"
  for n in $base_length $((2 * base_length)) $((4 * base_length)) $((8 * base_length)); do
    line+="$sep\"$n\": $(tr -d '\n' <"$dir/heldout_$n.json" | tr -s ' ')"
    sep=", "
  done
  line+="}}"
  (
    flock 9
    echo "$line" >>"$results"
  ) 9>>"$results.lock"
  echo "run_study: $variant x$factor seed $seed done"
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --kelvin) kelvin="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --results) results="$2"; shift 2 ;;
    --variants) variants="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --factors) factors="$2"; shift 2 ;;
    --base-length) base_length="$2"; shift 2 ;;
    --base-steps) base_steps="$2"; shift 2 ;;
    --ext-steps) ext_steps="$2"; shift 2 ;;
    --ext-lr) ext_lr="$2"; shift 2 ;;
    --step-tokens) step_tokens="$2"; shift 2 ;;
    --micro-tokens) micro_tokens="$2"; shift 2 ;;
    --alpha-init) alpha_init="$2"; shift 2 ;;
    --needle-samples) needle_samples="$2"; shift 2 ;;
    --task-samples) task_samples="$2"; shift 2 ;;
    --heldout-rows) heldout_rows="$2"; shift 2 ;;
    --min-length) min_length="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --cell) shift; run_cell "$@"; exit $? ;;  # internal: one run, from the pool below
    *) echo "run_study: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
die() { echo "run_study: $*" >&2; exit 2; }
[[ -x "$kelvin" ]] || die "no kelvin binary at $kelvin (give --kelvin)"
for v in ${variants//,/ }; do
  [[ ",$all_variants," == *",$v,"* ]] || die "unknown variant $v (variants: $all_variants)"
done
positive='^[1-9][0-9]*$'
for value in "$base_length" "$base_steps" "$ext_steps" "$step_tokens" "$micro_tokens" \
  "$needle_samples" "$task_samples" "$heldout_rows" "$jobs" "$threads" ${seeds//,/ }; do
  [[ "$value" =~ $positive ]] || die "'$value' is not a positive integer (see the header of $0)"
done
[[ "$min_length" =~ ^[0-9]+$ ]] || die "--min-length '$min_length' is not a non-negative integer"
(( heldout_rows % 8 == 0 )) || die "--heldout-rows $heldout_rows is not a multiple of 8"
for factor in ${factors//,/ }; do
  [[ "$factor" =~ $positive && "$factor" -ge 2 ]] || die "factor '$factor' is not an integer >= 2"
  length=$((factor * base_length))
  # Each fine-tune step is step_tokens tokens in whole rows, in micro-batches of micro_tokens.
  (( step_tokens % length == 0 && micro_tokens % length == 0 &&
    step_tokens % micro_tokens == 0 )) ||
    die "at ${length} tokens (factor $factor) --step-tokens $step_tokens and --micro-tokens" \
      "$micro_tokens must be multiples of the length, and the first of the second"
done
[[ "$alpha_init" =~ ^-?[0-9]+(\.[0-9]+)?$ ]] || die "--alpha-init '$alpha_init' is not a number"
[[ "$ext_lr" =~ ^[0-9]+(\.[0-9]+)?(e-?[0-9]+)?$ ]] && awk -v x="$ext_lr" 'BEGIN { exit !(x > 0) }' ||
  die "--ext-lr '$ext_lr' is not a positive number (e.g. 1e-3)"
results="${results:-$out/study.jsonl}"
mkdir -p "$out" "$(dirname "$results")"  # after the checks: a refused call leaves nothing
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
cells=()
for seed in ${seeds//,/ }; do
  for variant in ${variants//,/ }; do
    if is_raw "$variant"; then
      cells+=("$variant 1 $seed")  # one evaluation of the base, whatever the factors
    else
      for factor in ${factors//,/ }; do cells+=("$variant $factor $seed"); done
    fi
  done
done
printf '%s\n' "${cells[@]}" |
  xargs -P "$jobs" -L 1 bash "$0" --kelvin "$kelvin" --out "$out" --results "$results" \
    --base-length "$base_length" --base-steps "$base_steps" --ext-steps "$ext_steps" \
    --ext-lr "$ext_lr" \
    --step-tokens "$step_tokens" --micro-tokens "$micro_tokens" --alpha-init "$alpha_init" \
    --needle-samples "$needle_samples" --task-samples "$task_samples" \
    --heldout-rows "$heldout_rows" --min-length "$min_length" --cell
echo "run_study: ${#cells[@]} runs in $results"
