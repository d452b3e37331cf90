#!/usr/bin/env bash
# CPU step time of tensor, pipeline and context parallelism against one rank on the same model and
# global batch (bench/parallel_step_time.cc under mpirun): small-25m, 8 micro-batches of 1 x 256
# tokens per step, one OpenMP thread per rank. Baselines measured in the same run: one rank with one
# thread, and one rank with as many threads as the parallel runs have ranks (the same cores).
# Prints each layout's median step time, its speed-up over both baselines, its communication
# share, and for the pipeline the measured share of the forward/backward phase spent waiting in
# transfers against the bubble formula (p - 1) / (m + p - 1).
# Usage: bench/parallel_cpu_step.sh BUILD_DIR [timed_steps]
set -euo pipefail
build="${1:?usage: $0 BUILD_DIR [timed_steps]}"
steps="${2:-3}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe --mca btl_vader_single_copy_mechanism none --bind-to none)
job=(--set 'model.preset="small-25m"' --set training.seq_length=256
     --set training.micro_batch_size=1 --set training.global_batch_size=8
     --set training.gradient_accumulation_steps=8 --set training.eval_interval=0
     --set 'training.export_hf_dir=""' --set logging.log_interval=1000 --set training.threads=0)
run() {  # ranks threads [extra --set pairs]
  local ranks="$1" threads="$2"
  shift 2
  OMP_NUM_THREADS="$threads" "${mpi[@]}" -np "$ranks" "$build/bench/parallel_step_time" \
    "$root/configs/passkey_tiny_cpu.textproto" "$steps" "${job[@]}" "$@" 2>/dev/null | tail -1
}
one_thread="$(run 1 1)"
two_threads="$(run 1 2)"
tp2="$(run 2 1 --set parallel.tensor_parallel=2)"
pp2="$(run 2 1 --set parallel.pipeline_parallel=2)"
cp2="$(run 2 1 --set parallel.context_parallel=2)"
printf '1 rank 1 thread : %s\n1 rank 2 threads: %s\nTP2             : %s\nPP2 (1F1B)      : %s\nCP2             : %s\n' \
  "$one_thread" "$two_threads" "$tp2" "$pp2" "$cp2"
python3 - "$one_thread" "$two_threads" "$tp2" "$pp2" "$cp2" <<'PY'
import json, sys
one, two, tp2, pp2, cp2 = (json.loads(a) for a in sys.argv[1:])
for name, r in (("TP2", tp2), ("PP2 1F1B", pp2), ("CP2", cp2)):
    print(f"{name}: {r['step_seconds']:.3f} s/step, {one['step_seconds'] / r['step_seconds']:.2f}x "
          f"1 rank x 1 thread ({one['step_seconds']:.3f} s), "
          f"{two['step_seconds'] / r['step_seconds']:.2f}x 1 rank x 2 threads "
          f"({two['step_seconds']:.3f} s); communication {100 * r['communication_share']:.1f}% "
          "of the step")
p, m = 2, 8
print(f"PP2 bubble: measured {100 * pp2['pipeline_transfer_share']:.1f}% of the forward/backward "
      f"phase waiting in transfers; formula (p-1)/(m+p-1) = {100 * (p - 1) / (m + p - 1):.1f}% "
      f"(p={p}, m={m})")
PY
