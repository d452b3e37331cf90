#!/usr/bin/env bash
# `kelvin eval MODEL --data CORPUS` timed as a whole process, binary A against binary B (e.g. a
# change against the main it branched from), the two alternating run by run: a small-25m model
# (8 layers, hidden 512, vocabulary 8192) trained 2 steps and exported by A, scored on 4096 random
# ids in non-overlapping windows of 1024 and in windows of 1024 sliding at 256, on the CPU. Prints,
# per case, each binary's loss (the same corpus and weights: the losses agree to f32 rounding), the
# median CPU seconds (user + system, GNU time) and wall seconds of each, and the medians of the
# paired ratios A/B (CPU seconds move less than wall seconds on a shared machine).
# Usage: bench/score_corpus_ab.sh KELVIN_A KELVIN_B [rounds] [threads]
set -euo pipefail
a="${1:?usage: $0 KELVIN_A KELVIN_B [rounds] [threads]}"
b="${2:?usage: $0 KELVIN_A KELVIN_B [rounds] [threads]}"
rounds="${3:-5}"
export OMP_NUM_THREADS="${4:-1}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d /tmp/kelvin_score_ab.XXXXXX)"
trap 'rm -rf "$work"' EXIT

"$a" train "$root/configs/passkey_tiny_cpu.textproto" --set 'model.preset="small-25m"' \
  --set training.steps=2 --set lr_schedule.warmup_steps=1 --set training.eval_interval=0 \
  --set training.micro_batch_size=2 --set training.global_batch_size=2 \
  --set "training.export_hf_dir=\"$work/model\"" --set "launch.run_dir=\"$work/run\"" \
  > "$work/train.log" 2>&1 || { tail -n 5 "$work/train.log"; exit 1; }
python3 - "$work/corpus.int32" <<'PY'
import random, struct, sys
random.seed(0)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<4096i", *(random.randrange(8192) for _ in range(4096))))
PY

# One timed run: "wall cpu" seconds on stdout, the score line in $work/last.log.
timed() {
  /usr/bin/time -f "%e %U %S" -o "$work/time" "$@" > "$work/last.log" 2>&1 ||
    { tail -n 3 "$work/last.log" >&2; exit 1; }
  awk '{ printf "%s %.2f\n", $1, $2 + $3 }' "$work/time"
}
for case in "windows of 1024:--seq-length 1024" "sliding at 256:--seq-length 1024 --stride 256"; do
  name="${case%%:*}"
  read -r -a options <<<"${case#*:}"
  score=(eval "$work/model" --data "$work/corpus.int32" "${options[@]}" --device cpu)
  timed "$a" "${score[@]}" > /dev/null  # warm-up (page cache)
  timed "$b" "${score[@]}" > /dev/null
  times_a=() times_b=()
  for ((r = 0; r < rounds; ++r)); do
    times_a+=("$(timed "$a" "${score[@]}")")
    line_a=$(grep -o 'loss [0-9.]* |' "$work/last.log")
    times_b+=("$(timed "$b" "${score[@]}")")
    line_b=$(grep -o 'loss [0-9.]* |' "$work/last.log")
  done
  python3 - "$name" "$line_a" "$line_b" "${#times_a[@]}" "${times_a[@]}" "${times_b[@]}" <<'PY'
import statistics, sys
name, line_a, line_b, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
a = [tuple(map(float, t.split())) for t in sys.argv[5:5 + n]]  # (wall, cpu)
b = [tuple(map(float, t.split())) for t in sys.argv[5 + n:]]
def summary(k):
    ratios = [x[k] / y[k] for x, y in zip(a, b)]
    return (f"A median {statistics.median(x[k] for x in a):.2f} s, "
            f"B median {statistics.median(y[k] for y in b):.2f} s, A/B median "
            f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
print(f"{name} ({n} rounds): A {line_a} B {line_b}\n  cpu: {summary(1)}\n  wall: {summary(0)}")
PY
done
