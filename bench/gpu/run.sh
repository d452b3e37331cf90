#!/usr/bin/env bash
# Run ON THE GPU MACHINE (CUDA toolkit, CMake and Python with PyTorch; no Debian dev packages), from
# the repository root, with build/device-kit carried (bench/gpu/make_kit.sh made it here):
#   1. builds the op and SSA tests and GPU benchmarks (CUDA on, sm_90, no MPI) against the kit;
#   2. runs every op and SSA test, CUDA cases included (they must pass, none may skip);
#   3. times Kelvin's cuBLASLt bf16 GEMM against torch.matmul, and the fused SSA attention (SSA on
#      and off) against torch SDPA's flash backend, on the same shapes in the same run.
# Writes tests.txt, *.xml, gemm_*.jsonl, ssa_*.jsonl, ratio files and summary.txt under $OUT.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${OUT:-$root/build/gpu-out}"
mkdir -p "$out"
kit="$root/build/device-kit/usr"
arch=x86_64-linux-gnu
[[ -d "$kit" ]] || { echo "run.sh: $kit missing: run bench/gpu/make_kit.sh and carry build/device-kit" | tee "$out/summary.txt"; exit 1; }
export LD_LIBRARY_PATH="$kit/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt" 2>&1
nvcc --version | tail -n 2 >> "$out/gpu.txt"

build="$root/build/gpu"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKELVIN_CUDA=ON -DKELVIN_CORE_ONLY=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$kit" \
  -Dabsl_DIR="$kit/lib/$arch/cmake/absl" -DGTest_DIR="$kit/lib/$arch/cmake/GTest" \
  -Dbenchmark_DIR="$kit/lib/$arch/cmake/benchmark" \
  -Dnlohmann_json_DIR="$kit/share/cmake/nlohmann_json" \
  -DKELVIN_OPENBLAS_LIBRARY="$kit/lib/$arch/libopenblas.so" \
  -DKELVIN_CBLAS_INCLUDE_DIR="$kit/include/$arch/openblas-openmp" > "$out/build.txt" 2>&1 &&
cmake --build "$build" -j "$(nproc)" --target core_test ops_test ssa_test gemm_gpu_tflops \
  ssa_attention_gpu >> "$out/build.txt" 2>&1
if [[ $? -ne 0 ]]; then
  tail -n 40 "$out/build.txt"; echo "run.sh: build failed (see build.txt)" | tee "$out/summary.txt"; exit 1
fi

status=0
for t in core_test ops_test ssa_test; do
  "$build/tests/$t" --gtest_output="xml:$out/$t.xml" >> "$out/tests.txt" 2>&1 || status=1
done
skipped=$(grep -c "^\[  SKIPPED \] " "$out/tests.txt" || true)
failed=$(grep -c "^\[  FAILED  \] .*ms)" "$out/tests.txt" || true)
passed=$(grep -c "^\[       OK \] " "$out/tests.txt" || true)

"$build/bench/gemm_gpu_tflops" > "$out/gemm_kelvin.jsonl" 2>> "$out/build.txt" || status=1
python3 "$root/bench/gpu/torch_matmul.py" > "$out/gemm_torch.jsonl" || status=1
python3 - "$out" > "$out/gemm_ratio.txt" <<'PY'
import json, sys
out = sys.argv[1]
ours = [json.loads(l) for l in open(f"{out}/gemm_kelvin.jsonl")]
torch = [json.loads(l) for l in open(f"{out}/gemm_torch.jsonl")]
for o, t in zip(ours, torch):
    print(f"bf16 GEMM {o['m']}x{o['n']}x{o['k']}: kelvin {o['tflops']} TFLOP/s, "
          f"torch.matmul {t['tflops']} TFLOP/s, ratio {o['tflops'] / t['tflops']:.3f}")
PY

"$build/bench/ssa_attention_gpu" > "$out/ssa_kelvin.jsonl" 2>> "$out/build.txt" || status=1
python3 "$root/bench/gpu/torch_sdpa.py" > "$out/ssa_torch.jsonl" 2>> "$out/build.txt" || status=1
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
{
  cat "$out/gpu.txt"
  echo "op and SSA tests: $passed passed, $failed failed, $skipped skipped (a GPU run must skip none)"
  cat "$out/gemm_ratio.txt"
  cat "$out/ssa_ratio.txt"
} | tee "$out/summary.txt"
[[ $skipped -eq 0 && $failed -eq 0 ]] || status=1
exit $status
