#!/usr/bin/env bash
# The README's test command: sets everything up, then three stages, each timed:
# 1. the default build (CUDA when the toolkit is present, warnings as errors). With a usable GPU
#    every test runs; without one (nvidia-smi finds none) the CUDA code is compiled and linked,
#    and its CUDA cases (they skip with the reason) and the kelvin command's tests run: its other
#    tests are the CPU-only build's, from the same sources.
# 2. the CPU-only build (KELVIN_CUDA=OFF) and every test (KELVIN_SKIP_CPU_ONLY=1 skips it).
# 3. the parsers under ASan+UBSan (KELVIN_SKIP_SANITIZE=1 skips it): parser_tests
#    (tests/CMakeLists.txt: the parser, fuzz, job-config and checkpoint tests) in a CPU-only build
#    whose code that reads user input is instrumented (KELVIN_SANITIZE_INPUTS; the rest comes from
#    stage 2 through ccache).
# KELVIN_SANITIZE=1 instead builds and tests everything with ASan+UBSan (stage 1, all of it).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# MPI tests run as root in containers and oversubscribe the cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none

start=$(date +%s)
stage_start=$start
stage_done() {  # stage_done NAME: its time, and the whole so far
  local now
  now=$(date +%s)
  echo "test.sh: $1 passed in $(( now - stage_start )) s ($(( now - start )) s so far)"
  stage_start=$now
}
run_suite() {  # run_suite BUILD_DIR CTEST_ARGS -- SETUP_ARGS...
  local dir="$1"; shift
  local ctest_args=()
  while [[ "$1" != "--" ]]; do ctest_args+=("$1"); shift; done
  shift
  "$root/scripts/setup.sh" --build-dir "$dir" --werror "$@"
  ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" --timeout 1200 "${ctest_args[@]}"
}

if [[ "${KELVIN_SANITIZE:-0}" == "1" ]]; then
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1"
  run_suite "$root/build/test-asan" -- --sanitize --build-type RelWithDebInfo
  stage_done "the sanitizer build's suite"
  exit 0
fi

if nvidia-smi -L > /dev/null 2>&1; then
  run_suite "$root/build/test" --
else
  echo "test.sh: no GPU here: the default build runs its CUDA cases (skipped, with the reason)" \
       "and the kelvin command's tests; the CPU-only build runs the rest"
  run_suite "$root/build/test" -R "_cuda|^kelvin_" -E "^kelvin_slurm" --
fi
stage_done "the default build"

if [[ "${KELVIN_SKIP_CPU_ONLY:-0}" != "1" ]]; then
  run_suite "$root/build/test-cpu-only" -- --cuda OFF
  stage_done "the CPU-only build"
fi

# What users hand Kelvin (safetensors, datasets, JSON Lines, config.json, checkpoints, job files)
# parsed under ASan+UBSan, fuzz tests included (cmake/KelvinWarnings.cmake says what is instrumented).
if [[ "${KELVIN_SKIP_SANITIZE:-0}" != "1" ]]; then
  asan_dir="$root/build/test-parsers-asan"
  "$root/scripts/setup.sh" --build-dir "$asan_dir" --cuda OFF --sanitize-inputs --werror \
    --target parser_tests
  (
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    cd "$asan_dir/tests"  # where CTest runs the same cases
    # The model's numerics are not a parser; the planner fuzz runs 250 of its 1000 jobs.
    KELVIN_PLAN_FUZZ_JOBS=250 ./parser_tests --gtest_filter="-LlamaModel.*"
  )
  stage_done "the parsers under ASan+UBSan"
fi
echo "test.sh: all suites passed in $(( $(date +%s) - start )) s"
