#!/usr/bin/env bash
# A preemption warning (SIGUSR1) that reaches `kelvin train` during its start-up (MPI, the model,
# the restore) is kept for the training loop: the run saves after its first step and stops with
# exit code 3, ready to resume, instead of dying of the signal (exit 138) and ending a requeue
# chain. Usage: startup_signal_test.sh KELVIN SOURCE_DIR
set -u
kelvin=$1 source_dir=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
"$kelvin" train "$source_dir/configs/passkey_tiny_cpu.textproto" --set training.steps=50 \
  --set lr_schedule.warmup_steps=1 --set training.eval_interval=0 \
  --set checkpoint.dir=\""$dir/ckpt"\" --set launch.run_dir=\""$dir/run"\" > log 2>&1 &
pid=$!
sleep 0.2  # well after main() installed the handlers, before the first step ends
kill -USR1 "$pid"
wait "$pid"
status=$?
cat log | tail -n 3
failed=0
[ "$status" -eq 3 ] || { echo "FAIL: exit status $status, expected 3"; failed=1; }
grep -q "stopped by SIGUSR1 (a preemption warning) after step" log || { echo "FAIL: no stop line"; failed=1; }
[ -e "$dir/run/STOPPED_FOR_PREEMPTION" ] || { echo "FAIL: no stop marker"; failed=1; }
compgen -G "$dir/ckpt/step_*" > /dev/null || { echo "FAIL: no checkpoint"; failed=1; }
[ "$failed" -eq 0 ] && echo "PASS"
exit "$failed"
