#!/usr/bin/env bash
# Run ON THE GPU MACHINE (CUDA toolkit, CMake and Python with PyTorch; no Debian packages), from
# the repository root, with build/device-kit carried (bench/gpu/make_kit.sh built it here):
#   1. unpacks the prebuilt programs and their libraries, recreates this machine's root path (a
#      link to the repository copy there) so CTest's files and the compiled-in fixture paths
#      resolve, and points the loader and OpenMPI at the kit (NCCL: PyTorch's nvidia-nccl wheel);
#   2. runs every CUDA-labelled CTest entry: the op, SSA, model and trainer CUDA cases, the NCCL
#      one-rank tests, host staging with two ranks, and TP2xPP2 training with 4 processes sharing
#      the GPU. They must all pass; none may skip;
#   3. times Kelvin's cuBLASLt bf16 GEMM against torch.matmul and the fused SSA attention (SSA on
#      and off) against torch SDPA's flash backend on the same shapes in the same run, and the
#      training step of a 2-layer Llama-3-8B-shaped model at 8K tokens (TFLOP/s, MFU).
# Writes tests.txt, ctest.xml, gemm_*.jsonl, ssa_*.jsonl, llama_gpu.jsonl, ratio files and
# summary.txt under $OUT.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${OUT:-$root/build/gpu-out}"
mkdir -p "$out"
kit=/tmp/kelvin-kit
[[ -f "$root/build/device-kit/kit.tar.xz" ]] ||
  { echo "run.sh: build/device-kit/kit.tar.xz missing: run bench/gpu/make_kit.sh and carry build/device-kit" | tee "$out/summary.txt"; exit 1; }
rm -rf "$kit" && mkdir -p "$kit" && tar -C "$kit" -xJf "$root/build/device-kit/kit.tar.xz"
built_root="$(cat "$kit/root.txt")"
build_dir="$(cat "$kit/build-dir.txt")"
if [[ "$built_root" != "$root" && ! -e "$built_root" ]]; then
  mkdir -p "$(dirname "$built_root")" && ln -s "$root" "$built_root"
fi
rm -rf "$root/$build_dir" && mkdir -p "$(dirname "$root/$build_dir")"
cp -r "$kit/$build_dir" "$root/$build_dir"
build="$built_root/$build_dir"
# CTest's MPI entries name this machine's mpiexec: use the kit's.
find "$root/$build_dir" -name CTestTestfile.cmake -exec sed -i "s|\"/usr/bin/mpiexec\"|\"$kit/openmpi/bin/mpirun\"|g" {} +

nccl_lib="$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)"
cuda_lib=/usr/local/cuda/lib64
export LD_LIBRARY_PATH="$kit/lib:$nccl_lib:$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$kit/openmpi" OPAL_BINDIR="$kit/openmpi/bin" OPAL_LIBDIR="$kit/lib" \
  OPAL_PKGLIBDIR="$kit/openmpi/plugins" OPAL_PKGDATADIR="$kit/openmpi/help" \
  OPAL_DATADIR="$kit/openmpi/help" OPAL_SYSCONFDIR="$kit/openmpi" \
  PMIX_MCA_mca_base_component_path="$kit/openmpi/pmix-plugins"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt" 2>&1
nvcc --version | tail -n 2 >> "$out/gpu.txt"
echo "NCCL from: ${nccl_lib:-not found}" >> "$out/gpu.txt"

status=0
(cd "$build" && ctest -L cuda --output-on-failure --timeout 400 --output-junit "$out/ctest.xml") \
  > "$out/tests.txt" 2>&1 || status=1
cuda_summary="$(grep -E "tests passed|tests failed" "$out/tests.txt" | tail -n 1)"
skipped_entries="$(grep -c "\*\*\*Skipped" "$out/tests.txt" || true)"

"$build/bench/gemm_gpu_tflops" > "$out/gemm_kelvin.jsonl" 2>> "$out/bench_err.txt" || status=1
python3 "$root/bench/gpu/torch_matmul.py" > "$out/gemm_torch.jsonl" 2>> "$out/bench_err.txt" || status=1
python3 - "$out" > "$out/gemm_ratio.txt" <<'PY'
import json, sys
out = sys.argv[1]
ours = [json.loads(l) for l in open(f"{out}/gemm_kelvin.jsonl")]
torch = [json.loads(l) for l in open(f"{out}/gemm_torch.jsonl")]
for o, t in zip(ours, torch):
    print(f"bf16 GEMM {o['m']}x{o['n']}x{o['k']}: kelvin {o['tflops']} TFLOP/s, "
          f"torch.matmul {t['tflops']} TFLOP/s, ratio {o['tflops'] / t['tflops']:.3f}")
PY

"$build/bench/ssa_attention_gpu" > "$out/ssa_kelvin.jsonl" 2>> "$out/bench_err.txt" || status=1
python3 "$root/bench/gpu/torch_sdpa.py" > "$out/ssa_torch.jsonl" 2>> "$out/bench_err.txt" || status=1
python3 - "$out" > "$out/ssa_ratio.txt" <<'PY'
import json, sys
out = sys.argv[1]
rows = [json.loads(l) for name in ("ssa_kelvin", "ssa_torch") for l in open(f"{out}/{name}.jsonl")]
by = {(r["impl"], r["seq"]): r for r in rows}
print("SSA attention, B x T = 16K, H 32, G 8, d 128, causal, bf16: fwd+bwd TFLOP/s "
      "(FlashAttention FLOPs); goals: SSA-on/torch >= 0.8, SSA-on/SSA-off >= 0.95")
for seq in sorted({r["seq"] for r in rows}):
    ssa, off, torch = (by.get((i, seq)) for i in ("kelvin_ssa", "kelvin_vanilla", "torch_sdpa_flash"))
    if not (ssa and off and torch):
        print(f"T={seq}: missing results"); continue
    line = [f"T={seq} B={ssa['batch']}:"]
    for phase in ("fwd", "bwd", "fwd_bwd"):
        k = f"{phase}_tflops"
        line.append(f"{phase} ssa {ssa[k]} off {off[k]} torch {torch[k]} "
                    f"(ssa/torch {ssa[k] / torch[k]:.2f}, off/torch {off[k] / torch[k]:.2f}, "
                    f"ssa/off {ssa[k] / off[k]:.3f});")
    print(" ".join(line) + f" torch gqa: {torch['gqa']}")
PY

"$build/bench/llama_layers_gpu" 2 1 8192 5 > "$out/llama_gpu.jsonl" 2>> "$out/bench_err.txt" || status=1
{
  cat "$out/gpu.txt"
  echo "CUDA CTest entries: $cuda_summary; $skipped_entries skipped (a GPU run must skip none)"
  cat "$out/gemm_ratio.txt"
  cat "$out/ssa_ratio.txt"
  echo "Llama-3-8B-shaped, 2 layers, 1 x 8192 tokens, bf16 training step (MFU vs 989.4 TFLOP/s):"
  cat "$out/llama_gpu.jsonl"
} | tee "$out/summary.txt"
[[ $skipped_entries -eq 0 ]] || status=1
exit $status
