#!/usr/bin/env bash
# Runs comm_failure_program under mpirun and checks that the job fails fast and clearly:
#   comm_failure_test.sh MPIEXEC "MPIEXEC_FLAGS" PROGRAM NP MODE MAX_SECONDS EXIT PATTERN...
# passes when mpirun ends within MAX_SECONDS, its exit status is non-zero (EXIT=nonzero; EXIT=any
# skips this check, for mpirun --enable-recovery, which exits 0 even after MPI_Abort) and its
# output matches every PATTERN (extended regular expressions; a PATTERN starting with "!" must
# not match).
set -u
mpiexec=$1 mpiexec_flags=$2 program=$3 np=$4 mode=$5 max_seconds=$6 expected_exit=$7
shift 7
output=$(mktemp)
trap 'rm -f "$output"' EXIT
start_ns=$(date +%s%N)
# shellcheck disable=SC2086  # the flags are a list
"$mpiexec" --oversubscribe $mpiexec_flags -np "$np" "$program" "$mode" >"$output" 2>&1
status=$?
elapsed_ms=$((($(date +%s%N) - start_ns) / 1000000))
cat "$output"
echo "--- mode $mode: exit status $status after $elapsed_ms ms"
failed=0
if [ "$expected_exit" = nonzero ] && [ "$status" -eq 0 ]; then
  echo "FAIL: the job exited 0; expected a non-zero exit"
  failed=1
fi
if [ "$elapsed_ms" -gt $((max_seconds * 1000)) ]; then
  echo "FAIL: took $elapsed_ms ms; expected at most $max_seconds s"
  failed=1
fi
for pattern in "$@"; do
  if [[ "$pattern" == !* ]]; then
    if grep -Eq -- "${pattern:1}" "$output"; then
      echo "FAIL: the output matches what it must not: ${pattern:1}"
      failed=1
    fi
  elif ! grep -Eq -- "$pattern" "$output"; then
    echo "FAIL: the output does not match: $pattern"
    failed=1
  fi
done
[ "$failed" -eq 0 ] && echo "PASS"
exit "$failed"
