#!/usr/bin/env bash
# What a checkpoint save costs the training loop, saved in turn and in the background
# (checkpoint.async_save): `kelvin train` of small-25m (8 micro-batches of 1 x 256 tokens per step,
# one OpenMP thread, the second core left to the background writer as a GPU job leaves its CPU cores
# idle) for STEPS steps without checkpoints (the baseline, same run of this script), then saving
# after every step in turn, then in the background. Each save writes 12 bytes per parameter (f32
# masters and two moments, ~300 MB) to a directory under TMPDIR (page cache and local disk).
# Prints the wall time of each run, the cost per save (run - baseline) / STEPS and the ratio.
# Usage: bench/checkpoint_save_cost.sh BUILD_DIR [steps]
set -euo pipefail
build="${1:?usage: $0 BUILD_DIR [steps]}"
steps="${2:-8}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
job=(--set 'model.preset="small-25m"' --set training.steps="$steps" --set lr_schedule.warmup_steps=1
     --set training.seq_length=256
     --set training.micro_batch_size=1 --set training.global_batch_size=8
     --set training.eval_interval=0 --set 'training.export_hf_dir=""'
     --set logging.log_interval=1000 --set training.threads=1)
run() {  # name [extra --set pairs]; prints the wall seconds
  local name="$1"
  shift
  local start end
  start="$(date +%s.%N)"
  if ! "$build/launcher/kelvin" train "$root/configs/passkey_tiny_cpu.textproto" "${job[@]}" "$@" \
    > "$work/$name.log" 2>&1; then
    cat "$work/$name.log" >&2
    exit 1
  fi
  end="$(date +%s.%N)"
  python3 -c "print(f'{$end - $start:.2f}')"
}
checkpoints=(--set checkpoint.interval_steps=1 --set checkpoint.keep_last=2)
none="$(run none)"
in_turn="$(run in_turn --set "checkpoint.dir=\"$work/in_turn\"" "${checkpoints[@]}")"
background="$(run background --set "checkpoint.dir=\"$work/background\"" "${checkpoints[@]}" \
  --set checkpoint.async_save=true)"
python3 - "$steps" "$none" "$in_turn" "$background" <<'PY'
import sys
steps, none, in_turn, background = int(sys.argv[1]), *map(float, sys.argv[2:])
sync_cost, async_cost = (in_turn - none) / steps, (background - none) / steps
print(f"{steps} steps: no checkpoints {none:.2f} s, saving each step in turn {in_turn:.2f} s, "
      f"in the background {background:.2f} s")
print(f"cost per save: in turn {sync_cost:.3f} s, in the background {async_cost:.3f} s "
      f"({sync_cost / max(async_cost, 1e-3):.1f}x less)")
PY
