#!/usr/bin/env bash
# CPU step time with the data-parallel gradient reduction overlapped with the backward (and with
# ZeRO-1 the parameter gather with the next forward) against the same job communicating after the
# backward and inside the optimizer step (parallel.overlap_grad_reduce and overlap_param_gather
# true/false; bench/parallel_step_time.cc under mpirun): small-25m, DP2, DP2 with ZeRO-1 and
# TP2xDP2, 4 micro-batches of 1 x 256 tokens per replica, buckets of 2M gradient elements, one
# OpenMP thread per rank. The two runs alternate, `rounds` times each; prints the median step time
# of each, their ratio, the communication seconds per step that computing did not hide, and the
# hidden share of the non-overlapped run's communication.
# Usage: bench/overlap_cpu_step.sh BUILD_DIR [timed_steps] [rounds]
set -euo pipefail
build="${1:?usage: $0 BUILD_DIR [timed_steps] [rounds]}"
steps="${2:-3}"
rounds="${3:-3}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpi=(mpirun --oversubscribe --mca btl_vader_single_copy_mechanism none --bind-to none)
job=(--set 'model.preset="small-25m"' --set training.seq_length=256
     --set training.micro_batch_size=1 --set training.global_batch_size=8
     --set training.eval_interval=0 --set 'training.export_hf_dir=""'
     --set logging.log_interval=1000 --set training.threads=1
     --set parallel.grad_bucket_elements=2000000)
run() {  # ranks overlap [extra --set pairs]
  local ranks="$1" overlap="$2"
  shift 2
  "${mpi[@]}" -np "$ranks" "$build/bench/parallel_step_time" \
    "$root/configs/passkey_tiny_cpu.textproto" "$steps" "${job[@]}" \
    --set "parallel.overlap_grad_reduce=$overlap" --set "parallel.overlap_param_gather=$overlap" \
    "$@" 2>/dev/null | tail -1
}
for layout in "DP2 2" "DP2_ZeRO1 2 --set parallel.distributed_optimizer=true" \
              "TP2xDP2 4 --set parallel.tensor_parallel=2"; do
  read -r name ranks extra <<<"$layout"
  lines=()
  for ((r = 0; r < rounds; ++r)); do
    # shellcheck disable=SC2086
    lines+=("on $(run "$ranks" true $extra)" "off $(run "$ranks" false $extra)")
  done
  python3 - "$name" "${lines[@]}" <<'PY'
import json, statistics, sys
name, runs = sys.argv[1], sys.argv[2:]
by = {"on": [], "off": []}
for line in runs:
    kind, text = line.split(" ", 1)
    by[kind].append(json.loads(text))
def median(kind, key):
    return statistics.median(r[key] for r in by[kind])
on, off = median("on", "step_seconds"), median("off", "step_seconds")
comm_on = statistics.median(r["step_seconds"] * r["communication_share"] for r in by["on"])
comm_off = statistics.median(r["step_seconds"] * r["communication_share"] for r in by["off"])
print(f"{name}: overlapped {on:.3f} s/step, after the backward {off:.3f} s/step, "
      f"ratio off/on {off / on:.3f}; communication not hidden {comm_on:.3f} s/step vs "
      f"{comm_off:.3f} s/step ({100 * (1 - comm_on / comm_off):.1f}% hidden); "
      f"{len(by['on'])} runs each, medians")
PY
done
