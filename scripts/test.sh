#!/usr/bin/env bash
# The README's test command: sets everything up, builds (CUDA when the toolkit is present, warnings
# as errors), runs every test (GPU cases skip with the reason where there is no GPU), then builds
# the CPU-only configuration (KELVIN_CUDA=OFF) and runs its tests too.
# KELVIN_SANITIZE=1 builds and tests with ASan+UBSan instead. KELVIN_SKIP_CPU_ONLY=1 skips the
# second configuration.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# MPI tests run as root in containers and oversubscribe the cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none

extra=()
suffix=""
if [[ "${KELVIN_SANITIZE:-0}" == "1" ]]; then
  extra+=(--sanitize --build-type RelWithDebInfo)
  suffix="-asan"
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1"
fi

start=$(date +%s)
run_suite() {  # run_suite BUILD_DIR SETUP_ARGS...
  local dir="$1"; shift
  "$root/scripts/setup.sh" --build-dir "$dir" --werror "$@"
  ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" --timeout 1200
}

run_suite "$root/build/test$suffix" "${extra[@]}"
if [[ "${KELVIN_SKIP_CPU_ONLY:-0}" != "1" ]]; then
  run_suite "$root/build/test-cpu-only$suffix" --cuda OFF "${extra[@]}"
fi
echo "test.sh: all suites passed in $(( $(date +%s) - start )) s"
