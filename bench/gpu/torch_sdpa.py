"""torch SDPA bf16 causal attention throughput on the shapes ssa_attention_gpu.cc times, on the
flash (FlashAttention-2) and cuDNN backends (torch.nn.attention.sdpa_kernel with
SDPBackend.FLASH_ATTENTION and SDPBackend.CUDNN_ATTENTION): batch x tokens = 16K, H = 32 query
heads, G = 8 kv heads, d = 128, T = 1K..16K, and the packed case (rows of 8K tokens holding
documents of 1K), which for torch is the same work as 16 rows of 1K tokens. GQA through
enable_gqa=True where the backend accepts it, else K/V repeat_interleave'd to H heads outside the
timed region (the "gqa" field says which). FLOPs as FlashAttention reports them: causal forward
4 B H T^2 d / 2, backward 2.5 x forward. Prints one JSON object per (backend, shape), or the
backend's error where it cannot run the shape."""
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TOKENS, HEADS, KV_HEADS, HEAD_DIM = 16384, 32, 8, 128
WARMUP, ITERS = 3, 10
# (row tokens, document tokens), as in ssa_attention_gpu.cc.
CASES = [(1024, 1024), (2048, 2048), (4096, 4096), (8192, 8192), (16384, 16384), (8192, 1024)]
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def time_ms(fn):
    for _ in range(WARMUP):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(ITERS):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / ITERS


def run(name, backend, seq, document):
    batch = TOKENS // document  # each document is a row of its own for torch
    q = (torch.rand(batch, HEADS, document, HEAD_DIM, dtype=torch.bfloat16, device="cuda") * 4 - 2)
    k = (torch.rand(batch, KV_HEADS, document, HEAD_DIM, dtype=torch.bfloat16, device="cuda") * 4
         - 2)
    v = (torch.rand(batch, KV_HEADS, document, HEAD_DIM, dtype=torch.bfloat16, device="cuda") * 2
         - 1)
    dout = torch.rand(batch, HEADS, document, HEAD_DIM, dtype=torch.bfloat16, device="cuda") * 2 - 1
    gqa = "enable_gqa"
    with sdpa_kernel(backend):
        try:
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        except (RuntimeError, TypeError):
            gqa = "repeat_interleave"
            k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
            v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        kwargs = {"is_causal": True}
        if gqa == "enable_gqa":
            kwargs["enable_gqa"] = True
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        with torch.no_grad():
            fwd_ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, **kwargs))
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)
        bwd_ms = time_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
    fwd_flops = 4.0 * batch * HEADS * document * document * HEAD_DIM / 2
    bwd_flops = 2.5 * fwd_flops
    tflops = lambda flops, ms: round(flops / (ms * 1e-3) / 1e12, 1)
    return {"impl": f"torch_sdpa_{name}", "gqa": gqa, "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(), "batch": TOKENS // seq, "seq": seq,
            "document": document, "heads": HEADS, "kv_heads": KV_HEADS, "head_dim": HEAD_DIM,
            "fwd_ms": round(fwd_ms, 3), "bwd_ms": round(bwd_ms, 3),
            "fwd_tflops": tflops(fwd_flops, fwd_ms), "bwd_tflops": tflops(bwd_flops, bwd_ms),
            "fwd_bwd_tflops": tflops(fwd_flops + bwd_flops, fwd_ms + bwd_ms)}


for name, backend in BACKENDS.items():
    for seq, document in CASES:
        try:
            row = run(name, backend, seq, document)
        except RuntimeError as error:  # the backend cannot run this shape here: say so, go on
            row = {"impl": f"torch_sdpa_{name}", "seq": seq, "document": document,
                   "error": str(error).splitlines()[0]}
        print(json.dumps(row), flush=True)
