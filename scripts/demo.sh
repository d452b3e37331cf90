#!/usr/bin/env bash
# The README's main command: sets everything up, builds, and runs Kelvin's main job on its small
# embedded default: a tiny Llama-shaped model fine-tuned on the synthetic passkey-retrieval task on
# the CPU (configs/passkey_tiny_cpu.textproto). Progress lines show the loss falling; evaluation
# lines show held-out loss and passkey retrieval accuracy. Extra arguments go to `kelvin train`
# (e.g. --set training.steps=600).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build/release"
"$root/scripts/setup.sh" --build-dir "$build" --target kelvin
cd "$root"
exec "$build/launcher/kelvin" train configs/passkey_tiny_cpu.textproto "$@"
