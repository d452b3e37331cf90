#!/usr/bin/env bash
# End-to-end test of `kelvin launch --submit` on a real single-node SLURM cluster
# (scripts/slurm_test_cluster.sh):
#  1. preemption and requeue: a 2-task job of the tiny passkey model is preempted with SIGUSR1 sent
#     to its job steps after a few steps; its batch script must requeue it, the requeued job must
#     resume from the checkpoint and complete, and its per-step losses must equal, bit for bit (as
#     printed in logging.metrics_file), those of an uninterrupted `mpirun -np 2 kelvin train` run;
#  2. a relaunch does not change a pending job: a second `kelvin launch --submit` into the run
#     directory of a pending job must refuse, naming that job, and the pending job must still train
#     the config it was submitted with.
# Prints one PASS/FAIL line per check; exit 0 when all pass, 77 (SKIP) when the cluster cannot run
# here (no root or passwordless sudo, slurm-wlm/munge not installable), 1 otherwise.
# Usage: tests/slurm/slurm_requeue_test.sh KELVIN_BINARY SOURCE_DIR
# Environment: KELVIN_SLURM_DIR (default /tmp/kelvin-slurm-test) and KELVIN_SLURM_PORT (default
# 16827): the test cluster's state directory and ports; KELVIN_REQUEUE_TEST_STEPS (default 40, ~30 s):
# training steps of the job; KELVIN_TEST_KEEP=1 keeps the scratch directory.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 KELVIN_BINARY SOURCE_DIR" >&2
  exit 2
fi
kelvin="$(realpath "$1")"
source_dir="$(realpath "$2")"
[[ -x "$kelvin" ]] || { echo "FAIL: no executable kelvin at $1"; exit 1; }
base_job="$source_dir/configs/passkey_tiny_cpu.textproto"
cluster_script="$source_dir/scripts/slurm_test_cluster.sh"
[[ -r "$base_job" && -r "$cluster_script" ]] || { echo "FAIL: $base_job or $cluster_script missing"; exit 1; }

export KELVIN_SLURM_DIR="${KELVIN_SLURM_DIR:-/tmp/kelvin-slurm-test}"
export KELVIN_SLURM_PORT="${KELVIN_SLURM_PORT:-16827}"
export SLURM_CONF="$KELVIN_SLURM_DIR/slurm.conf"
steps="${KELVIN_REQUEUE_TEST_STEPS:-40}"
# Open MPI under mpirun and under srun (the job inherits this environment: sbatch --export=ALL).
export OMPI_MCA_btl_vader_single_copy_mechanism=none
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

failures=0
jobs_to_cancel=()
cluster_started=0
scratch=""
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
note() { echo "  $*"; }

cleanup() {
  local rc=$?
  set +e
  if [[ $cluster_started -eq 1 ]]; then
    [[ ${#jobs_to_cancel[@]} -gt 0 ]] && scancel "${jobs_to_cancel[@]}" 2>/dev/null
    bash "$cluster_script" stop >/dev/null 2>&1 || echo "  (stopping the test cluster failed)"
  fi
  if [[ -n "$scratch" && -d "$scratch" ]]; then
    if [[ $failures -eq 0 && $rc -eq 0 && "${KELVIN_TEST_KEEP:-0}" != 1 ]]; then
      rm -rf "$scratch"
    else
      echo "  scratch directory kept: $scratch"
    fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "FAIL: interrupted"; exit 1' INT TERM

# --- the cluster
set +e
started="$(bash "$cluster_script" start 2>&1)"
start_rc=$?
set -e
if [[ $start_rc -eq 77 ]]; then
  reason="$(grep -m1 'SKIP' <<<"$started" | sed 's/.*SKIP: *//')"
  echo "SKIP: ${reason:-the test SLURM cluster cannot run here}"
  exit 77
fi
if [[ $start_rc -ne 0 ]]; then
  echo "$started"
  echo "FAIL: scripts/slurm_test_cluster.sh start exited $start_rc"
  exit 1
fi
cluster_started=1
pass "test cluster up ($(grep -m1 'cluster up' <<<"$started" | sed 's/.*cluster up in //'))"

scratch="$(mktemp -d /tmp/kelvin-slurm-requeue.XXXXXX)"
cd "$scratch"  # kelvin launch: the job's relative paths, #SBATCH --chdir

# Field `field` of `scontrol show job`.
job_field() {
  { scontrol show job "$1" 2>/dev/null || true; } | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}
# The train losses of a metrics file, one "STEP LOSS" line per step record, numbers as printed.
losses() {
  local line step loss
  [[ -r "$1" ]] || return 0
  while IFS= read -r line; do
    [[ "$line" == *'"train/loss"'* ]] || continue
    step="$(sed -nE 's/.*"step" *: *([0-9]+).*/\1/p' <<<"$line")"
    loss="$(sed -nE 's/.*"train\/loss" *: *([^,}]+).*/\1/p' <<<"$line")"
    echo "$step $loss"
  done <"$1"
}
train_steps_done() { losses "$1" | wc -l; }

# --- the job: the tiny passkey model on 2 processes (data parallel), 1 thread each
common=(--set launch.processes_per_node=2 --set training.threads=1
        --set "training.steps=$steps" --set lr_schedule.warmup_steps=10 --set training.export_hf_dir=
        --set checkpoint.interval_steps=10 --set logging.log_interval=10)
cp "$base_job" job.textproto

# Reference: the same job uninterrupted under mpirun.
ref_start=$SECONDS
set +e
timeout 300 mpirun --oversubscribe -np 2 "$kelvin" train job.textproto "${common[@]}" \
  --set checkpoint.dir="$scratch/ckpt_ref" --set logging.metrics_file="$scratch/ref_metrics.jsonl" \
  >"$scratch/ref.log" 2>&1
ref_rc=$?
set -e
ref_seconds=$((SECONDS - ref_start))
ref_steps="$(train_steps_done "$scratch/ref_metrics.jsonl")"
if [[ $ref_rc -eq 0 && "$ref_steps" -eq "$steps" ]]; then
  pass "reference run (mpirun -np 2 kelvin train): $steps steps in ${ref_seconds} s"
else
  fail "reference run exited $ref_rc after ${ref_seconds} s with $ref_steps of $steps step records; its log's end:"
  tail -n 15 "$scratch/ref.log" | sed 's/^/    /'
fi

# --- part 1: preemption and requeue
run_dir="$scratch/run"
set +e
launched="$("$kelvin" launch job.textproto "${common[@]}" \
  --set checkpoint.dir="$scratch/ckpt_slurm" --set logging.metrics_file="$scratch/slurm_metrics.jsonl" \
  --set launch.requeue=true --set launch.preemption_warning_seconds=30 --set launch.time_limit=10 \
  --set launch.run_dir="$run_dir" --submit 2>&1)"
launch_rc=$?
set -e
job="$(sed -nE 's/.*submitted batch job ([0-9]+).*/\1/p' <<<"$launched" | head -n 1)"
if [[ $launch_rc -ne 0 || -z "$job" ]]; then
  fail "kelvin launch --submit exited $launch_rc without 'submitted batch job N':"
  sed 's/^/    /' <<<"$launched" | tail -n 15
  exit 1
fi
jobs_to_cancel+=("$job")
log="$run_dir/slurm-$job.out"
pass "kelvin launch --submit: batch job $job"

show_job_log() {
  note "scontrol show job $job: JobState=$(job_field "$job" JobState) Reason=$(job_field "$job" Reason) Restarts=$(job_field "$job" Restarts) ExitCode=$(job_field "$job" ExitCode)"
  if [[ -r "$log" ]]; then
    note "the end of $log:"
    tail -n 20 "$log" | sed 's/^/    /'
  fi
}

# Running, with a few steps done.
min_steps=3
deadline=$((SECONDS + 120))
done_steps=0
state=""
while ((SECONDS < deadline)); do
  state="$(job_field "$job" JobState)"
  done_steps="$(train_steps_done "$scratch/slurm_metrics.jsonl")"
  [[ "$state" == RUNNING && "$done_steps" -ge $min_steps ]] && break
  [[ "$state" =~ ^(PENDING|CONFIGURING|RUNNING)$ ]] || break
  sleep 0.5
done
if [[ "$state" == RUNNING && "$done_steps" -ge $min_steps ]]; then
  pass "job $job running, $done_steps steps done"
else
  fail "job $job did not reach $min_steps steps while running within 120 s (state ${state:-unknown}, $done_steps steps)"
  show_job_log
  exit 1
fi
if ((done_steps >= steps - 10)); then
  note "warning: the job is already at step $done_steps of $steps; raise KELVIN_REQUEUE_TEST_STEPS"
fi

# Preempt: SIGUSR1 to the job steps (the training processes), not to the batch shell.
scancel --signal=USR1 "$job"
preempted_at=$SECONDS
note "sent SIGUSR1 to the steps of job $job after step $done_steps"

# The batch script requeues the job: Restarts >= 1, and its log says so.
deadline=$((SECONDS + 90))
restarts=0
while ((SECONDS < deadline)); do
  restarts="$(job_field "$job" Restarts)"
  [[ "${restarts:-0}" -ge 1 ]] && break
  state="$(job_field "$job" JobState)"
  [[ "$state" =~ ^(RUNNING|COMPLETING|PENDING|REQUEUED|CONFIGURING)$ ]] || break
  sleep 0.5
done
requeue_line="$(grep -m1 "requeueing job $job" "$log" 2>/dev/null || true)"
if [[ "${restarts:-0}" -ge 1 && -n "$requeue_line" ]]; then
  pass "the batch script requeued job $job ($((SECONDS - preempted_at)) s after the signal; log: '${requeue_line}')"
else
  fail "job $job was not requeued by its batch script within 90 s (Restarts=${restarts:-?}, 'requeueing job $job' in the log: $([[ -n "$requeue_line" ]] && echo yes || echo no))"
  show_job_log
fi

# Slurm holds a requeued job until BeginTime (cred_expire + 1 s: 11 s on the test cluster, ~2 min
# by default). `scontrol update StartTime=now` lifts the hold, but only once the previous run's
# step daemons are gone: a step started before that fails to bind its PMIx socket (the old step's
# stepd.slurm.pmix.<job>.<step> is still there), and srun then exits 0 without running anything.
old_steps() { ps -eo args= | grep -cE "^slurmstepd: \[$job\." || true; }
deadline=$((SECONDS + 240))
lifted=0
while ((SECONDS < deadline)); do
  state="$(job_field "$job" JobState)"
  if [[ $lifted -eq 0 && "$state" == PENDING && "$(job_field "$job" Reason)" == BeginTime &&
        "$(old_steps)" -eq 0 ]]; then
    note "requeued job $job held until $(job_field "$job" EligibleTime); its old steps are gone: scontrol update JobId=$job StartTime=now"
    scontrol update JobId="$job" StartTime=now || note "(scontrol update StartTime=now failed)"
    lifted=1
  fi
  [[ "$state" =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|PREEMPTED|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE)$ ]] && break
  sleep 0.5
done
exit_code="$(job_field "$job" ExitCode)"
final_steps="$(train_steps_done "$scratch/slurm_metrics.jsonl")"
if [[ "$state" == COMPLETED && "$exit_code" == 0:0 && "$final_steps" -eq "$steps" ]]; then
  pass "requeued job $job completed ($((SECONDS - preempted_at)) s after the signal, restarts $(job_field "$job" Restarts))"
elif [[ "$state" == COMPLETED && "$exit_code" == 0:0 ]]; then
  fail "SLURM says job $job COMPLETED with exit code 0:0, but only $final_steps of $steps steps ran (srun exits 0 when a step fails to launch)"
  show_job_log
else
  fail "requeued job $job did not complete within 240 s (state ${state:-unknown}, ExitCode ${exit_code:-?})"
  show_job_log
fi
# The requeued run resumed from the checkpoint the preempted one saved (a restart from step 0
# would give the same losses too), and the job ran as one world of 2 ranks (not 2 lone rank 0s).
resumed_line="$(grep -m1 -E "resumed from .*step_0*[0-9]+ \(([0-9]+) steps done\)" "$log" 2>/dev/null || true)"
resumed_steps="$(sed -nE 's/.*\(([0-9]+) steps done\).*/\1/p' <<<"$resumed_line")"
if [[ -n "$resumed_steps" && "$resumed_steps" -ge "$done_steps" && "$resumed_steps" -lt "$steps" ]]; then
  pass "the requeued run resumed after step $resumed_steps (signalled after step $done_steps)"
else
  fail "the requeued run did not resume from the preemption checkpoint (log: '${resumed_line:-no "resumed from" line}'; signalled after step $done_steps)"
fi
if grep -q "layout: 2 processes" "$log" 2>/dev/null; then
  pass "srun --mpi=pmix started one world of 2 ranks ('layout: 2 processes' in the log)"
else
  fail "the job's log has no 'layout: 2 processes': srun did not start the 2 ranks as one world"
fi

# Same losses, bit for bit, as the uninterrupted run.
losses "$scratch/ref_metrics.jsonl" >"$scratch/ref_losses.txt"
losses "$scratch/slurm_metrics.jsonl" >"$scratch/slurm_losses.txt"
slurm_steps="$(wc -l <"$scratch/slurm_losses.txt")"
if [[ "$slurm_steps" -eq "$steps" && "$ref_steps" -eq "$steps" ]] &&
   cmp -s "$scratch/ref_losses.txt" "$scratch/slurm_losses.txt"; then
  pass "interrupted + requeued run: the $steps losses equal the uninterrupted run's bit for bit"
else
  first_diff="$(diff "$scratch/ref_losses.txt" "$scratch/slurm_losses.txt" | grep -m2 '^[<>]' | tr '\n' ' ' || true)"
  fail "losses of the requeued run (${slurm_steps} step records) differ from the uninterrupted run's (${ref_steps}); first difference (< reference, > requeued): ${first_diff:-none}"
fi

# --- part 2: a relaunch does not change a pending job
# launch.extra_sbatch_options is repeated (no --set): it goes into the job file.
cp "$base_job" job_pending.textproto
printf '\nlaunch {\n  extra_sbatch_options: "--begin=now+1hour"\n}\n' >>job_pending.textproto
pending_common=("${common[@]}" --set checkpoint.dir="$scratch/ckpt_pending"
                --set logging.metrics_file="$scratch/pending_metrics.jsonl"
                --set launch.run_dir="$scratch/run_pending")
set +e
first="$("$kelvin" launch job_pending.textproto "${pending_common[@]}" --set optimizer.lr=0.00125 --submit 2>&1)"
first_rc=$?
set -e
pending="$(sed -nE 's/.*submitted batch job ([0-9]+).*/\1/p' <<<"$first" | head -n 1)"
if [[ $first_rc -eq 0 && -n "$pending" ]]; then
  jobs_to_cancel+=("$pending")
  sleep 1
  if [[ "$(job_field "$pending" JobState)" == PENDING ]]; then
    pass "pending job $pending submitted (--begin=now+1hour, optimizer.lr=0.00125)"
  else
    fail "job $pending is $(job_field "$pending" JobState), not PENDING (--begin=now+1hour)"
  fi

  set +e
  second="$("$kelvin" launch job_pending.textproto "${pending_common[@]}" --set optimizer.lr=0.0025 --submit 2>&1)"
  second_rc=$?
  set -e
  second_job="$(sed -nE 's/.*submitted batch job ([0-9]+).*/\1/p' <<<"$second" | head -n 1)"
  [[ -n "$second_job" ]] && jobs_to_cancel+=("$second_job")
  names_job="job( ?id)?[ =:#]*${pending}([^0-9]|\$)"
  if [[ $second_rc -ne 0 ]] && grep -qiE "$names_job" <<<"$second"; then
    pass "the second launch into the pending job's run directory refused, naming job $pending: $(grep -m1 -iE "$names_job" <<<"$second" | cut -c1-200)"
  elif [[ $second_rc -eq 0 ]]; then
    fail "the second launch into the run directory of pending job $pending succeeded (exit 0$([[ -n "$second_job" ]] && echo ", submitted job $second_job")); expected a refusal naming job $pending"
  else
    fail "the second launch failed (exit $second_rc) but its message does not name job $pending: $(tail -n 3 <<<"$second" | tr '\n' ' ' | cut -c1-300)"
  fi

  # What the pending job will run: its stored batch script, plus any config file it reads.
  script="$(scontrol write batch_script "$pending" - 2>/dev/null || true)"
  if [[ -z "$script" ]]; then
    fail "scontrol write batch_script $pending - printed nothing"
  else
    # A script that embeds its config decides by itself; else the config file(s) it names.
    lr_pattern='lr[:=] *"?'
    will_train="$script"
    read_files=""
    if ! grep -qE "$lr_pattern" <<<"$script"; then
      read_files="$(grep -oE "/[^' \"]+\.textproto" <<<"$script" | sort -u || true)"
      for f in $read_files; do
        [[ -r "$f" ]] && will_train+=$'\n'"$(cat "$f")"
      done
    fi
    has_old=0 has_new=0
    grep -qE "${lr_pattern}(0\.00125|1\.25e-0?3)\b" <<<"$will_train" && has_old=1
    grep -qE "${lr_pattern}(0\.0025|2\.5e-0?3)\b" <<<"$will_train" && has_new=1
    where="the batch script"
    [[ -n "$read_files" ]] && where+=" and the file(s) it reads: $(tr '\n' ' ' <<<"$read_files")"
    if [[ $has_old -eq 1 && $has_new -eq 0 ]]; then
      pass "pending job $pending still trains optimizer.lr=0.00125 (from $where)"
    elif [[ $has_new -eq 1 ]]; then
      fail "pending job $pending would now train the relaunch's optimizer.lr=0.0025 (found in $where), not the submitted 0.00125"
    else
      fail "pending job $pending: found neither lr 0.00125 nor 0.0025 in $where"
    fi
  fi
else
  fail "kelvin launch --submit of the pending job exited $first_rc without a job id:"
  tail -n 10 <<<"$first" | sed 's/^/    /'
fi

if [[ $failures -eq 0 ]]; then
  echo "slurm_requeue_test: all checks passed"
  exit 0
fi
echo "slurm_requeue_test: $failures check(s) failed"
exit 1
