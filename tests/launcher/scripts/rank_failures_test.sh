#!/usr/bin/env bash
# How kelvin train under mpirun reports a failure (launcher/commands/rank_failures.h): one that
# every rank meets (a misspelt field) printed once and no MPI_Abort; ranks failing differently
# (mpirun's MPMD form gives each its own overrides) each print theirs, named; one rank's own
# failure printed and the job aborted within seconds, nothing left behind.
# Usage: rank_failures_test.sh KELVIN SOURCE_DIR MPIEXEC
set -u
kelvin=$1 source_dir=$2 mpiexec=$3
source "$source_dir/tests/testing/script_testing.sh"
job="$source_dir/configs/passkey_tiny_cpu.textproto"
run() {  # run NAME MPIEXEC-ARGUMENTS...: its output in $dir/NAME.log, its exit code in $rc
  local name=$1
  shift
  timeout 120 "$mpiexec" --oversubscribe "$@" > "$dir/$name.log" 2>&1
  rc=$?
}
misspelt="has no field \"stepz\" (did you mean \"steps\"?)"

run alike -np 4 "$kelvin" train "$job" --set training.stepz=3
[[ $rc -ne 0 ]] || fail "4 ranks with a misspelt field exited 0"
[[ $(grep -cF "$misspelt" "$dir/alike.log") -eq 1 ]] ||
  fail "the failure every rank met was not printed once: $(cat "$dir/alike.log")"
grep -q "MPI_ABORT" "$dir/alike.log" && fail "a failure every rank met aborted the job"

run differently -np 1 "$kelvin" train "$job" --set training.stepz=3 : \
  -np 1 "$kelvin" train "$job" --set training.seedz=3
[[ $rc -ne 0 ]] || fail "ranks failing differently exited 0"
grep -qF "rank 0: kelvin: override \"training.stepz=3\"" "$dir/differently.log" ||
  fail "rank 0's own failure not named: $(cat "$dir/differently.log")"
grep -qF "rank 1: kelvin: override \"training.seedz=3\"" "$dir/differently.log" ||
  fail "rank 1's own failure not named: $(cat "$dir/differently.log")"

start=$SECONDS
run one -np 1 "$kelvin" train "$job" --set launch.run_dir=\""$dir/run"\" \
  --set checkpoint.dir=\""$dir/run/checkpoints"\" : \
  -np 1 "$kelvin" train "$job" --set training.seedz=3 --set launch.run_dir=\""$dir/run"\"
[[ $rc -ne 0 ]] || fail "one rank's failure exited 0"
[[ $(grep -cF "has no field \"seedz\"" "$dir/one.log") -eq 1 ]] ||
  fail "one rank's failure not printed once: $(cat "$dir/one.log")"
# Ended by rank 1's abort while rank 0 waits in a collective of its start-up (OpenMPI's "MPI_ABORT
# was invoked" banner is not checked: its help system drops it at times, see tests/parallel).
[[ $((SECONDS - start)) -le 60 ]] || fail "one rank's failure took $((SECONDS - start)) s to end"
[[ -e "$dir/run" ]] && fail "the aborted job left its run directory: $(ls -R "$dir/run")"

finish
