"""torch.matmul (cuBLAS) bf16 throughput on the shapes gemm_gpu_tflops.cc times, same layout:
A [M, K] @ B[N, K]^T -> C [M, N]. Prints one JSON object per shape."""
import json

import torch


def time_ms(m, n, k, iters=50):
    a = torch.rand(m, k, dtype=torch.bfloat16, device="cuda") * 2 - 1
    b = torch.rand(n, k, dtype=torch.bfloat16, device="cuda") * 2 - 1
    for _ in range(3):
        torch.matmul(a, b.t())
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        torch.matmul(a, b.t())
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / iters


for m, n, k in [(4096, 4096, 4096), (8192, 4096, 14336)]:
    ms = time_ms(m, n, k)
    print(json.dumps({"m": m, "n": n, "k": k, "ms": round(ms, 4),
                      "tflops": round(2.0 * m * n * k / (ms * 1e-3) / 1e12, 1)}))
