#!/usr/bin/env bash
# scripts/demo.sh builds what the machine can run: CPU-only where nvidia-smi finds no GPU (or is
# missing), CUDA (--cuda AUTO) where it lists one or KELVIN_DEMO_CUDA=1 asks. Runs the script in a
# scratch copy whose setup.sh only records its arguments and stops the demo.
# Usage: demo_cuda_choice_test.sh SOURCE_ROOT
set -euo pipefail
source_root="$1"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/scripts" "$scratch/bin_gpu" "$scratch/bin_none"
cp "$source_root/scripts/demo.sh" "$scratch/scripts/demo.sh"
cat >"$scratch/scripts/setup.sh" <<'STUB'
#!/usr/bin/env bash
echo "$*" >"$(dirname "$0")/setup_args"
exit 42
STUB
chmod +x "$scratch/scripts/setup.sh"
printf '#!/bin/sh\necho "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"\n' >"$scratch/bin_gpu/nvidia-smi"
printf '#!/bin/sh\necho "No devices were found"; exit 6\n' >"$scratch/bin_none/nvidia-smi"
chmod +x "$scratch/bin_gpu/nvidia-smi" "$scratch/bin_none/nvidia-smi"

failures=0
expect_cuda() {  # expect_cuda MODE PATH_PREFIX [ENV...]: the --cuda the demo passes to setup.sh
  local mode="$1" prefix="$2"; shift 2
  rm -f "$scratch/scripts/setup_args"
  env "$@" PATH="$prefix:/usr/bin:/bin" bash "$scratch/scripts/demo.sh" >/dev/null 2>&1 || true
  local args
  args="$(cat "$scratch/scripts/setup_args" 2>/dev/null || echo "(setup.sh not called)")"
  if [[ "$args" != *"--cuda $mode "* ]]; then
    echo "FAIL: expected --cuda $mode with PATH=$prefix $*; setup.sh got: $args"
    failures=$((failures + 1))
  fi
}
expect_cuda OFF "$scratch/bin_none"                      # nvidia-smi finds no GPU
expect_cuda OFF "$scratch/empty"                         # no nvidia-smi at all
expect_cuda AUTO "$scratch/bin_gpu"                      # a GPU
expect_cuda AUTO "$scratch/bin_none" KELVIN_DEMO_CUDA=1  # asked for
[[ $failures -eq 0 ]] && echo "demo cuda choice test passed"
exit "$failures"
