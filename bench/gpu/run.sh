#!/usr/bin/env bash
# Run ON THE GPU MACHINE (CUDA toolkit, CMake and Python with PyTorch; no Debian packages), from
# the repository root, with build/device-kit carried (bench/gpu/make_kit.sh built it here):
#   bash bench/gpu/run.sh [stages]   stages: comma-separated; default
#                                    tests,sanitize,gemm,ssa,llama,decode
# First it unpacks the prebuilt programs and their libraries, recreates this machine's root path
# (a link to the repository copy there) so CTest's files and the compiled-in fixture paths
# resolve, and points the loader and OpenMPI at the kit (NCCL: PyTorch's nvidia-nccl wheel;
# cuDNN, which the cuDNN attention core opens at run time: the toolkit's libcudnn.so.9 where
# /usr/local/cuda has one, else the one in PyTorch's nvidia-cudnn wheel; the kit cannot carry
# cuDNN's ~500 MB).
#   tests     every CUDA-labelled CTest entry: the op, SSA, model and trainer CUDA cases (each
#             against the CPU reference on fresh inputs), the NCCL one-rank tests, host staging
#             with two ranks, and TP2xPP2 training with 4 processes sharing the GPU. They must
#             all pass; none may skip;
#   ssa_cases the SSA program's CUDA cases alone (SSA_FILTER narrows them; not a default stage);
#   profile   Nsight Compute (ncu) over the SSA kernels, every section (not a default stage);
#   sanitize  compute-sanitizer's memcheck over the SSA operator's block and packed test cases on
#             both attention cores (the own kernels, the adjoint's bf16 input, cuDNN's);
#   gemm      Kelvin's cuBLASLt bf16 GEMM against torch.matmul;
#   ssa       SSA attention on each Kelvin core (fused, cuDNN), SSA on and off, against torch
#             SDPA's flash and cuDNN backends on the same shapes in the same run (T = 1K..16K and
#             packed 1K documents in 8K rows), with the issue's ratios;
#   llama     the training step of a 4-layer Llama-3-8B-shaped model at 8K tokens (MFU), SSA on
#             and off, on each core;
#   decode    greedy decode tokens/s of a 2-layer Llama-3-8B-shaped model at batch 1 and 8:
#             Kelvin's KV-cache decoder as `kelvin generate` runs it (SSA on and off) against torch
#             on the same shapes in the same run (an eager loop with a KV cache, and transformers'
#             generate() where installed).
# Device time is scarce, so every stage runs under its own deadline (the stages before decode took
# about 6 minutes together on 2026-11-30, before the cuDNN core doubled the ssa and llama stages'
# runs; decode, not yet run, has 4.5 minutes of deadlines: give `tests,sanitize` and `ssa,llama`
# and `decode` calls of their own where the call's limit is near). What comes back under $OUT
# (the device tool returns at most 8 files): summary.txt (written as it goes: each stage's exit
# status and seconds, the ratios), tests.txt (CTest's log) and results.tar.gz (every result
# file: the benchmarks' JSON lines, their stderr, CTest's JUnit XML).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${OUT:-$root/build/gpu-out}"
stages=",${1:-tests,sanitize,gemm,ssa,llama,decode},"
work=/tmp/kelvin-gpu-results  # every result file, packed into $out/results.tar.gz at the end
kit=/tmp/kelvin-kit
rm -rf "$work" && mkdir -p "$out" "$work"
summary="$out/summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }

[[ -f "$root/build/device-kit/kit.tar.xz" ]] ||
  { say "run.sh: build/device-kit/kit.tar.xz missing: run bench/gpu/make_kit.sh and carry build/device-kit"; exit 1; }
rm -rf "$kit" && mkdir -p "$kit" && tar -C "$kit" -xJf "$root/build/device-kit/kit.tar.xz"
built_root="$(cat "$kit/root.txt")"
build_dir="$(cat "$kit/build-dir.txt")"
if [[ "$built_root" != "$root" && ! -e "$built_root" ]]; then
  mkdir -p "$(dirname "$built_root")" && ln -s "$root" "$built_root"
fi
rm -rf "${root:?}/${build_dir:?}" && mkdir -p "$(dirname "$root/$build_dir")"
cp -r "$kit/$build_dir" "$root/$build_dir"
build="$built_root/$build_dir"
# CTest's MPI entries name this machine's mpiexec: use the kit's.
find "$root/$build_dir" -name CTestTestfile.cmake -exec sed -i "s|\"/usr/bin/mpiexec\"|\"$kit/openmpi/bin/mpirun\"|g" {} +

# NCCL from the Python packages (nvidia-nccl-cu13 installs libnccl.so.2 somewhere under nvidia/).
nccl_so="$(python3 -c 'import nvidia, os; print(*[os.path.join(r, f) for p in nvidia.__path__ for r, _, fs in os.walk(p) for f in fs if f.startswith("libnccl.so")], sep="\n")' 2>/dev/null | head -n 1)"
nccl_lib="$(dirname "${nccl_so:-/nonexistent/x}")"
cuda_lib=/usr/local/cuda/lib64
# cuDNN for the cuDNN attention core (opened by dlopen, so nothing fails to start without it; its
# cases then skip and AUTO keeps the own kernel): the toolkit's first, then PyTorch's wheel.
cudnn_so="$(python3 -c 'import nvidia, os; print(*[os.path.join(r, f) for p in nvidia.__path__ for r, _, fs in os.walk(p) for f in fs if f == "libcudnn.so.9"], sep="\n")' 2>/dev/null | head -n 1)"
cudnn_lib="$(dirname "${cudnn_so:-/nonexistent/x}")"
export LD_LIBRARY_PATH="$kit/lib:$nccl_lib:$cuda_lib:$cudnn_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$kit/openmpi" OPAL_BINDIR="$kit/openmpi/bin" OPAL_LIBDIR="$kit/lib" \
  OPAL_PKGLIBDIR="$kit/openmpi/plugins" OPAL_PKGDATADIR="$kit/openmpi/help" \
  OPAL_DATADIR="$kit/openmpi/help" OPAL_SYSCONFDIR="$kit/openmpi" \
  PMIX_MCA_mca_base_component_path="$kit/openmpi/pmix-plugins"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$summary"
say "nvcc: $(nvcc --version | tail -n 1); NCCL: ${nccl_so:-not found}"
cudnn_used="$(for d in ${LD_LIBRARY_PATH//:/ }; do [[ -e "$d/libcudnn.so.9" ]] && echo "$d/libcudnn.so.9" && break; done)"
say "cuDNN (first libcudnn.so.9 on LD_LIBRARY_PATH): ${cudnn_used:-none, so the cuDNN core cases will skip}"
missing_libs="$(ldd "$build/kelvin" "$build/tests/ssa_test" 2>&1 | grep 'not found' | sort -u)"
[[ -z "$missing_libs" ]] || say "libraries not found: $missing_libs"

status=0
# stage NAME SECONDS OUTPUT_FILE COMMAND...: runs COMMAND under a deadline, stdout to
# $work/OUTPUT_FILE, stderr to $work/stderr.txt; records the exit status and the seconds taken.
stage() {
  local name=$1 secs=$2 file=$3 t0=$SECONDS rc
  shift 3
  echo "== $name" >> "$work/stderr.txt"
  timeout -k 5 "$secs" "$@" > "$work/$file" 2>> "$work/stderr.txt"
  rc=$?
  say "[$name: exit $rc$([[ $rc -eq 124 ]] && echo " (deadline ${secs} s)"), $((SECONDS - t0)) s]"
  [[ $rc -eq 0 ]] || status=1
  return $rc
}
wants() { [[ "$stages" == *",$1,"* ]]; }

if wants tests; then
  (cd "$build" && timeout -k 5 200 ctest -L cuda -j 4 --output-on-failure --timeout 120 \
     --output-junit "$work/ctest.xml") > "$out/tests.txt" 2>&1 || status=1
  say "CUDA CTest entries: $(grep -E "tests passed|tests failed" "$out/tests.txt" | tail -n 1)"
  skipped="$(grep -c "\*\*\*Skipped" "$out/tests.txt" || true)"
  say "skipped entries: $skipped (a GPU run must skip none)"
  [[ $skipped -eq 0 ]] || status=1
  grep -E "^\s*[0-9]+/[0-9]+ Test" "$out/tests.txt" | grep -v "Passed" | tee -a "$summary"
fi

if wants ssa_cases; then
  # Only the SSA program's CUDA cases (SSA_FILTER narrows them), for a quick look at the kernel.
  stage ssa_cases 120 ssa_cases.txt "$build/tests/ssa_test" --gtest_filter="${SSA_FILTER:-*Cuda*}"
  grep -E "DIAG|FAILED|PASSED" "$work/ssa_cases.txt" | tee -a "$summary"
fi

if wants profile; then
  # Nsight Compute over the first forward and backward attention kernels of the SSA benchmark
  # (T = 1024, SSA on): every section, as text in ncu.txt.
  for kernel in ForwardKernel BackwardKernel; do
    stage "profile $kernel" 100 "ncu_$kernel.txt" ncu --clock-control none --set full \
      -k "regex:(^|:)$kernel" -c 1 "$build/bench/ssa_attention_gpu"
  done
  cat "$work"/ncu_*.txt > "$work/ncu.txt"
  grep -E "^  [A-Za-z].*Kernel|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Executed Ipc A|Issue Slots Busy" \
    "$work/ncu.txt" | tee -a "$summary"
fi

if wants sanitize; then
  # compute-sanitizer's memcheck over the SSA kernels' block and packed cases (out-of-bounds and
  # misaligned accesses; it runs the kernels many times slower, so only these).
  stage sanitize 240 sanitize.txt compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$build/tests/ssa_test" \
    --gtest_filter='*SsaAttentionCudaCore.MergedKeyBlocks*:*SsaAttentionCudaCore.QueryChunks*:*d64_h4g2_t100_b2_packed*'
  tail -n 5 "$work/sanitize.txt" | tee -a "$summary"
fi

if wants gemm; then
  stage gemm_kelvin 40 gemm_kelvin.jsonl "$build/bench/gemm_gpu_tflops" &&
    stage gemm_torch 40 gemm_torch.jsonl python3 "$root/bench/gpu/torch_matmul.py" &&
    python3 - "$work" <<'PY' | tee -a "$summary"
import json, sys
w = sys.argv[1]
ours = [json.loads(l) for l in open(f"{w}/gemm_kelvin.jsonl")]
torch = [json.loads(l) for l in open(f"{w}/gemm_torch.jsonl")]
for o, t in zip(ours, torch):
    print(f"bf16 GEMM {o['m']}x{o['n']}x{o['k']}: kelvin {o['tflops']} TFLOP/s, "
          f"torch.matmul {t['tflops']} TFLOP/s, ratio {o['tflops'] / t['tflops']:.3f}")
PY
fi

if wants ssa; then
  stage ssa_kelvin 300 ssa_kelvin.jsonl "$build/bench/ssa_attention_gpu"
  stage ssa_torch 150 ssa_torch.jsonl python3 "$root/bench/gpu/torch_sdpa.py"
  python3 - "$work" <<'PY' | tee -a "$summary"
import json, os, sys
w = sys.argv[1]
rows = [json.loads(l) for name in ("ssa_kelvin", "ssa_torch") if os.path.exists(f"{w}/{name}.jsonl")
        for l in open(f"{w}/{name}.jsonl") if l.strip()]
for r in rows:
    if "skipped" in r or "error" in r:
        print(f"{r['impl']}: {r.get('skipped') or r.get('error')}")
by = {(r["impl"], r["seq"], r["document"]): r for r in rows if "fwd_tflops" in r}
print("SSA attention, B x T = 16K, H 32, G 8, d 128, causal, bf16: fwd / bwd / fwd+bwd TFLOP/s "
      "(FlashAttention FLOPs); goals (fwd+bwd, SSA on): >= 1.5x torch flash and >= 1.0x torch "
      "cuDNN at T >= 4K, SSA on / off >= 0.97 at every T")
for seq, document in sorted({(r["seq"], r["document"]) for r in by.values()}):
    shape = f"T={seq}" + (f" packed {document}-token documents" if document != seq else "")
    flash, cudnn = (by.get((f"torch_sdpa_{b}", seq, document)) for b in ("flash", "cudnn"))
    for t in (flash, cudnn):
        if t:
            print(f"  {shape} {t['impl']}: {t['fwd_tflops']} / {t['bwd_tflops']} / "
                  f"{t['fwd_bwd_tflops']} (gqa: {t['gqa']}, cuDNN {t['cudnn']})")
    for core in ("fused", "cudnn"):
        on, off = (by.get((f"kelvin_{core}_{m}", seq, document)) for m in ("ssa", "vanilla"))
        if not (on and off):
            print(f"  {shape} kelvin {core}: missing results"); continue
        k = "fwd_bwd_tflops"
        line = [f"  {shape} kelvin {core} (ran {on['core_run']}): SSA on {on['fwd_tflops']} / "
                f"{on['bwd_tflops']} / {on[k]}, off {off[k]}; SSA on/off {on[k] / off[k]:.3f} "
                f"(goal 0.97 {'met' if on[k] / off[k] >= 0.97 else 'short'})"]
        for name, t, goal in (("flash", flash, 1.5), ("cudnn", cudnn, 1.0)):
            if t:
                ratio = on[k] / t[k]
                verdict = ("" if document < 4096 else " met" if ratio >= goal else " short")
                line.append(f"on/torch {name} {ratio:.2f} (goal {goal}{verdict})")
        print("; ".join(line))
PY
fi

if wants llama; then
  say "Llama-3-8B-shaped, 4 layers, 1 x 8192 tokens, bf16 training step, per attention core (MFU: models::TrainingFlopsPerToken vs 989.4 TFLOP/s; goal >= 45% with SSA):"
  for core in fused cudnn; do
    stage "llama $core" 120 "llama_gpu_$core.jsonl" "$build/bench/llama_layers_gpu" 4 1 8192 5 "$core"
    tee -a "$summary" < "$work/llama_gpu_$core.jsonl"
  done
fi

if wants decode; then
  say "Llama-3-8B-shaped, 2 layers, bf16 greedy decode, prompts of 128 tokens + 128 new (decode steps only):"
  stage decode_kelvin 120 decode_kelvin.jsonl "$build/bench/llama_decode_gpu" 2 128 128
  stage decode_torch 150 decode_torch.jsonl python3 "$root/bench/gpu/torch_decode.py" 2 128 128
  python3 - "$work" <<'PY' | tee -a "$summary"
import json, os, sys
w = sys.argv[1]
rows = [json.loads(l) for name in ("decode_kelvin", "decode_torch")
        if os.path.exists(f"{w}/{name}.jsonl") for l in open(f"{w}/{name}.jsonl") if l.strip()]
by = {(r["impl"], r["batch"]): r["decode_tokens_per_s"] for r in rows}
for batch in (1, 8):
    rates = {impl: by[(impl, batch)] for impl in
             ("kelvin_ssa", "kelvin_vanilla", "torch_loop", "hf_generate") if (impl, batch) in by}
    line = [f"batch {batch}: tokens/s " + ", ".join(f"{i} {r}" for i, r in rates.items()) + ";"]
    for ours in ("kelvin_vanilla", "kelvin_ssa"):
        for base in ("torch_loop", "hf_generate"):
            if ours in rates and base in rates:
                line.append(f"{ours}/{base} {rates[ours] / rates[base]:.3f}")
    print(" ".join(line))
PY
fi

if [[ -s "$work/stderr.txt" ]]; then
  say "--- benchmark stderr (last 40 lines; all of it in results.tar.gz)"
  tail -n 40 "$work/stderr.txt" | tee -a "$summary"
fi
tar -C "$work" -czf "$out/results.tar.gz" .
exit $status
