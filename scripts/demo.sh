#!/usr/bin/env bash
# The README's main command: sets everything up, builds, and runs Kelvin's main job on its small
# embedded default. Until the trainer lands (Llama issue), the main job is the op library's CPU
# benchmark pass: each line prints Kelvin's rate against a baseline measured in the same run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build/release"
"$root/scripts/setup.sh" --build-dir "$build"
for bench in "$build"/bench/*_bench; do
  echo "== $(basename "$bench")"
  "$bench" --benchmark_min_time=0.2
done
