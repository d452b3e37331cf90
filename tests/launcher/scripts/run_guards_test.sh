#!/usr/bin/env bash
# What guards a run from its surroundings: a first Ctrl-C (SIGINT) stops `kelvin train` after its
# step with a checkpoint (exit 3), a second ends it at once; a closed stdout pipe does not kill it;
# a second training into a checkpoint.dir in use is refused, naming the holder; prepare-data never
# writes over its own samples file; a job refused at its start leaves no run directory.
# Usage: run_guards_test.sh KELVIN SOURCE_DIR
set -u
kelvin=$1 source_dir=$2
dir=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
cd "$dir"
job="$source_dir/configs/passkey_tiny_cpu.textproto"
failed=0
fail() { echo "FAIL: $*"; failed=1; }
# train NAME [--set ...]: a run with its own directories under $dir/NAME. Called only in the
# background or in a pipeline (a subshell), which exec turns into kelvin itself, so that $! is
# kelvin's pid.
train() {
  local name=$1; shift
  exec "$kelvin" train "$job" --set lr_schedule.warmup_steps=1 --set training.eval_interval=0 \
    --set checkpoint.dir=\""$dir/$name/ckpt"\" --set launch.run_dir=\""$dir/$name/run"\" "$@"
}
wait_for_step() {  # wait_for_step LOG: until the run logged a step (at most 60 s)
  for _ in $(seq 600); do grep -q "step 1/" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

# Ctrl-C once: the step ends, the checkpoint is saved, exit 3.
train int --set training.steps=200 --set logging.log_interval=1 > int.log 2>&1 &
pid=$!
wait_for_step int.log || fail "the run did not start"
kill -INT "$pid"
wait "$pid"; status=$?
[ "$status" -eq 3 ] || fail "one SIGINT: exit status $status, expected 3"
grep -q "interrupted (Ctrl-C): stopping after this step with a checkpoint" int.log ||
  fail "one SIGINT: no line when it came"
grep -q "stopped by SIGINT (Ctrl-C) after step" int.log || fail "one SIGINT: no stop line"
compgen -G "$dir/int/ckpt/step_*" > /dev/null || fail "one SIGINT: no checkpoint"

# Ctrl-C twice: the second one ends the run at once (killed by SIGINT: status 130).
train int2 --set training.steps=200 --set logging.log_interval=1 > int2.log 2>&1 &
pid=$!
wait_for_step int2.log || fail "the second run did not start"
kill -INT "$pid"; sleep 0.05; kill -INT "$pid"
wait "$pid"; status=$?
[ "$status" -eq 130 ] || fail "two SIGINTs: exit status $status, expected 130"

# Its output into a pipe that closes: the run goes on to its end.
train pipe --set training.steps=3 --set logging.log_interval=1 2>&1 | head -c 20 > /dev/null
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || fail "closed pipe: exit status $status, expected 0"
[ -d "$dir/pipe/ckpt/step_00000003" ] || fail "closed pipe: no final checkpoint"

# A second training into a checkpoint.dir in use: refused at once, the first one unharmed.
train shared --set training.steps=200 --set logging.log_interval=1 > first.log 2>&1 &
pid=$!
wait_for_step first.log || fail "the first shared run did not start"
"$kelvin" train "$job" --set training.steps=2 --set lr_schedule.warmup_steps=1 \
  --set checkpoint.dir=\""$dir/shared/ckpt"\" --set launch.run_dir=\""$dir/second/run"\" \
  > second.log 2>&1
status=$?
[ "$status" -eq 1 ] || fail "second training: exit status $status, expected 1"
grep -q "is in use by another training (pid $pid on host" second.log ||
  fail "second training: no refusal naming the first run's pid $pid"
kill -TERM "$pid"
wait "$pid"; status=$?
[ "$status" -eq 3 ] || fail "the first shared run: exit status $status after SIGTERM, expected 3"

# prepare-data whose --out would write over the samples file itself.
cp "$source_dir/tests/fixtures/sft/copy_digits.jsonl" samples.bin
"$kelvin" prepare-data samples.bin --out "$dir/samples" > prepare.log 2>&1
status=$?
[ "$status" -eq 1 ] || fail "prepare-data onto its input: exit status $status, expected 1"
grep -q "which is the samples file 'samples.bin' itself" prepare.log ||
  fail "prepare-data onto its input: no message"
cmp -s samples.bin "$source_dir/tests/fixtures/sft/copy_digits.jsonl" ||
  fail "prepare-data onto its input: the samples file changed"

# A layout one process cannot run: refused before the run directory (and its resolved config)
# is written.
"$kelvin" train "$job" --set parallel.tensor_parallel=2 \
  --set launch.run_dir=\""$dir/refused/run"\" > refused.log 2>&1
status=$?
[ "$status" -eq 1 ] || fail "refused layout: exit status $status, expected 1"
grep -q "kelvin: .*tensor" refused.log || fail "refused layout: no message naming the layout"
[ ! -e "$dir/refused" ] || fail "refused layout: left $(find "$dir/refused" | tr '\n' ' ')"

[ "$failed" -eq 0 ] && echo "PASS"
[ "$failed" -eq 0 ] || for log in *.log; do echo "== $log"; tail -n 5 "$log"; done
exit "$failed"
