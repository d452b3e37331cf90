#!/usr/bin/env bash
# Records the per-step losses and gradient norms of a fixed set of short jobs (the demo with and
# without SSA, the SFT example of docs/data.md, and the demo under every parallel layout and
# through a checkpoint resume) from one kelvin binary, so that a refactor can show it changed no
# bit:
#   tools/loss_parity.sh record KELVIN OUT_DIR     (before and after, each into its own OUT_DIR)
#   tools/loss_parity.sh compare DIR_A DIR_B       (exit 1 and the first difference unless equal)
# Needs mpirun; runs on the CPU, one thread per process; about 5 minutes on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The step records' losses and norms, in step order, at full precision.
losses_of() { grep -o '"step":[0-9]*\|"train/loss":[^,}]*\|"train/grad_norm":[^,}]*\|"eval/loss":[^,}]*' "$1"; }

usage() { sed -n 2,7p "$0" >&2; exit 2; }
fail() { echo "loss_parity: $*" >&2; exit 1; }

if [[ "${1:-}" == compare ]]; then
  [[ $# -eq 3 ]] || usage
  a="$2" b="$3" status=0
  for dir in "$a" "$b"; do
    compgen -G "$dir/*.jsonl" >/dev/null || fail "no records (*.jsonl) in $dir: give two directories of tools/loss_parity.sh record"
  done
  for file in "$b"/*.jsonl; do
    [[ -f "$a/$(basename "$file")" ]] || { echo "loss_parity: $(basename "$file") is missing from $a"; status=1; }
  done
  for file in "$a"/*.jsonl; do
    name=$(basename "$file")
    if [[ ! -f "$b/$name" ]]; then echo "loss_parity: $name is missing from $b"; status=1; continue; fi
    if diff <(losses_of "$file") <(losses_of "$b/$name") >/dev/null; then
      echo "loss_parity: $name: $(losses_of "$file" | grep -c train/loss) steps bit-identical"
    else
      echo "loss_parity: $name DIFFERS:"; diff <(losses_of "$file") <(losses_of "$b/$name") | head -4
      status=1
    fi
  done
  exit $status
fi
[[ "${1:-}" == record && $# -eq 3 ]] || usage
[[ -x "$2" && -f "$2" ]] || fail "no kelvin binary at $2 (give the path of a built launcher/kelvin)"
[[ ! -e "$3" ]] || fail "$3 exists: record into a new directory, so that no old record is compared"
kelvin="$(realpath "$2")" out="$(realpath -m "$3")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
records="$work/records"  # moved to OUT_DIR once every job has run
mkdir -p "$records"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
demo="$root/configs/passkey_tiny_cpu.textproto"
common=(--set training.steps=40 --set lr_schedule.warmup_steps=10 --set training.eval_interval=20
        --set logging.log_interval=10
        --set training.export_hf_dir=\"\")

# run NAME RANKS CONFIG ARGS...: a job's metrics into OUT/NAME.jsonl.
run() {
  local name=$1 ranks=$2 config=$3
  shift 3
  local launch=()
  ((ranks > 1)) && launch=(mpirun --oversubscribe -np "$ranks")
  (cd "$work" && "${launch[@]}" "$kelvin" train "$config" "${common[@]}" \
     --set launch.run_dir=\"$work/$name\" --set logging.metrics_file=\"$records/$name.jsonl\" "$@" \
     >"$work/$name.log" 2>&1) || { tail -5 "$work/$name.log" >&2; fail "$name failed (its log's end above); nothing recorded"; }
  echo "loss_parity: recorded $name"
}

run demo 1 "$demo"
run demo_ssa 1 "$demo" --set model.ssa.enabled=true
run tp2_sp 2 "$demo" --set model.ssa.enabled=true --set parallel.tensor_parallel=2 \
  --set parallel.sequence_parallel=true
run dp2 2 "$demo"
run dp2_zero1 2 "$demo" --set model.ssa.enabled=true --set parallel.distributed_optimizer=true
run pp2 2 "$demo" --set parallel.pipeline_parallel=2
run cp2 2 "$demo" --set model.ssa.enabled=true --set parallel.context_parallel=2
run tp2_dp2_zero1 4 "$demo" --set parallel.tensor_parallel=2 --set parallel.distributed_optimizer=true
# Through a checkpoint: 20 steps saved, then resumed to 40 (the records of both runs).
run resume_zero1 2 "$demo" --set training.steps=20 --set checkpoint.dir=\"$work/ckpt\" \
  --set parallel.distributed_optimizer=true
run resume_zero1_continued 2 "$demo" --set checkpoint.dir=\"$work/ckpt\" \
  --set parallel.distributed_optimizer=true
run resume_one 1 "$demo" --set training.steps=20 --set checkpoint.dir=\"$work/ckpt1\"
run resume_one_continued 1 "$demo" --set checkpoint.dir=\"$work/ckpt1\"
# The SFT example of docs/data.md: samples prepared with the tokenizer fixture, then trained.
(cd "$work" && "$kelvin" prepare-data "$root/tests/fixtures/sft/copy_digits_chat.jsonl" \
   --out "$work/sft/copy_digits_chat" --tokenizer "$root/tests/fixtures/tokenizer/llama3_style" \
   >"$work/prepare.log" 2>&1) || { tail -5 "$work/prepare.log" >&2; fail "prepare-data failed"; }
run sft 1 "$root/configs/sft_chat_tiny_cpu.textproto" \
  --set data.megatron.path_prefix=\"$work/sft/copy_digits_chat\" \
  --set data.megatron.loss_mask_path_prefix=\"$work/sft/copy_digits_chat_loss_mask\"
mkdir -p "$(dirname "$out")"
mv "$records" "$out"
echo "loss_parity: $(compgen -G "$out/*.jsonl" | wc -l) jobs recorded in $out"
