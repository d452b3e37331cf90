"""Golden fixtures for Kelvin's SSA attention, from an independent PyTorch autograd implementation.

Pinned: torch==2.15.0, safetensors==0.8.0 (tools/requirements.txt).
Run:    /work/venv-tools/bin/python tools/ssa_reference.py     (writes tests/fixtures/ssa/)

Written from docs/ssa.md alone ("Notation" to "Backward"), in float64, with autograd for every
gradient:
  z^q = a^q_h . GeLU(src_q)  (exact erf GeLU)     tau^q = tanh(z^q) + 1 + sigmoid(alpha_h) ln(p + 1)
  z^v = a^v_g . GeLU(src_v)                       tau^v = tanh(z^v) + 1
  q~ = tau^q RoPE(u, p), k~ = RoPE(k, p), v~ = tau^v v, O = softmax(q~ k~^T / sqrt(d)) v~ with a
  causal mask inside each packed document (documents start where the position id is 0).
src_q = u and src_v = v with weight sharing, else separate tensors. A temperature that is off is
1; token_aware off drops tanh(z), position_aware off drops the sigmoid(alpha) term; the clamp is
torch.clamp of each active temperature. RoPE is Hugging Face's rotate_half layout with
inv_freq = 1 / theta^(2i/d), theta = 500000.

Each case writes <case>.safetensors (tensor bytes are reproducible; the metadata key order is
not). Inputs are drawn, then rounded to bfloat16 and stored as BF16
(exact in f64, so both sides see the same values): u [N, H, d], k, v [N, G, d], dout [N, H, d],
and without weight sharing query_source [N, H, d], value_source [N, G, d]. positions [N] I32.
F64: inv_freq [d/2], query_readout [H, d], value_readout [G, d], alpha [H], the outputs out
[N, H, d], lse [N, H] (log-sum-exp of the scaled scores), tau_q [N, H], tau_v [N, G], and the
gradients of loss = sum(dout * out): grad.<input or parameter> for every tensor above (not
positions, inv_freq, dout). Metadata (strings): batch, seq, heads, kv_heads, head_dim, the flags
query_temperature, value_temperature, token_aware, position_aware, weight_sharing ("true" /
"false"), clamp_lo, clamp_hi ("none" without a clamp), torch (version).
"""
import math
import os

import torch
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "ssa")
THETA = 500000.0

DEFAULT_FLAGS = dict(query_temperature=True, value_temperature=True, token_aware=True,
                     position_aware=True, weight_sharing=True, clamp=None)


def case(name, batch, seq, heads, kv_heads, head_dim, doc_lengths=None, **flags):
    """doc_lengths: per row, the lengths of its packed documents (None: one document per row)."""
    return dict(name=name, batch=batch, seq=seq, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                doc_lengths=doc_lengths, flags={**DEFAULT_FLAGS, **flags})


PACKED_13 = [[4, 6, 3], [1, 12]]
CASES = [
    case("gqa_h4g2_d64", 2, 11, 4, 2, 64),
    case("mqa_h4g1_d128_packed", 2, 7, 4, 1, 128, doc_lengths=[[3, 4], [2, 5]]),
    case("mha_h2g2_d16_packed", 2, 17, 2, 2, 16, doc_lengths=[[5, 1, 11], [9, 8]]),
    case("query_only", 2, 13, 4, 2, 16, PACKED_13, value_temperature=False),
    case("value_only", 2, 13, 4, 2, 16, PACKED_13, query_temperature=False),
    case("token_aware_off", 2, 13, 4, 2, 16, PACKED_13, token_aware=False),
    case("position_aware_off", 2, 13, 4, 2, 16, PACKED_13, position_aware=False),
    case("weight_sharing_off", 2, 13, 4, 2, 16, PACKED_13, weight_sharing=False),
    case("clamp", 2, 13, 4, 2, 16, PACKED_13, clamp=(0.8, 1.5)),
]


def position_ids(c):
    rows = []
    for r in range(c["batch"]):
        lengths = c["doc_lengths"][r] if c["doc_lengths"] else [c["seq"]]
        assert sum(lengths) == c["seq"], c["name"]
        rows.append(torch.cat([torch.arange(n, dtype=torch.int32) for n in lengths]))
    return torch.stack(rows)  # [B, T]


def rope(x, positions, inv_freq):
    """x [B, T, heads, d] rotated by angle = position * inv_freq (rotate_half pairing)."""
    angle = positions.to(torch.float64)[..., None] * inv_freq  # [B, T, d/2]
    emb = torch.cat([angle, angle], dim=-1)[:, :, None, :]
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * emb.cos() + rotated * emb.sin()


def temperature(flags, enabled, source, readout, position_term):
    """source [B, T, heads, d], readout [heads, d] -> [B, T, heads]."""
    if not enabled:
        return torch.ones(source.shape[:3], dtype=torch.float64)
    tau = torch.ones(source.shape[:3], dtype=torch.float64)
    if flags["token_aware"]:
        z = (torch.nn.functional.gelu(source, approximate="none") * readout).sum(-1)
        tau = torch.tanh(z) + 1
    if position_term is not None:
        tau = tau + position_term
    if flags["clamp"] is not None:
        tau = torch.clamp(tau, min=flags["clamp"][0], max=flags["clamp"][1])
    return tau


def ssa_attention(c, t, positions, inv_freq):
    """t: leaf tensors ([B, T, heads, d] activations, parameters) -> out, lse, tau_q, tau_v."""
    flags = c["flags"]
    h, g, d = c["heads"], c["kv_heads"], c["head_dim"]
    q_src = t["u"] if flags["weight_sharing"] else t["query_source"]
    v_src = t["v"] if flags["weight_sharing"] else t["value_source"]
    position_term = None
    if flags["position_aware"]:
        log_n = torch.log(positions.to(torch.float64) + 1)  # [B, T]
        position_term = torch.sigmoid(t["alpha"]) * log_n[..., None]
    tau_q = temperature(flags, flags["query_temperature"], q_src, t["query_readout"], position_term)
    tau_v = temperature(flags, flags["value_temperature"], v_src, t["value_readout"], None)
    q = tau_q[..., None] * rope(t["u"], positions, inv_freq)
    k = rope(t["k"], positions, inv_freq).repeat_interleave(h // g, dim=2)
    v = (tau_v[..., None] * t["v"]).repeat_interleave(h // g, dim=2)
    scores = torch.einsum("bthe,bshe->bhts", q, k) / math.sqrt(d)
    document = torch.cumsum((positions == 0).to(torch.int64), dim=1)  # [B, T]
    seq = positions.shape[1]
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    visible = causal & (document[:, :, None] == document[:, None, :])  # [B, t, s]
    scores = scores.masked_fill(~visible[:, None], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [B, H, T]
    out = torch.einsum("bhts,bshe->bthe", torch.softmax(scores, dim=-1), v)
    return out, lse.transpose(1, 2), tau_q, tau_v


def bf16_values(shape, lo, hi, generator):
    x = torch.rand(shape, dtype=torch.float64, generator=generator) * (hi - lo) + lo
    return x.to(torch.bfloat16).to(torch.float64)


def make_case(c, seed):
    gen = torch.Generator().manual_seed(seed)
    b, seq, h, g, d = c["batch"], c["seq"], c["heads"], c["kv_heads"], c["head_dim"]
    flags = c["flags"]
    positions = position_ids(c)
    inv_freq = 1.0 / (THETA ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    leaves = {
        "u": bf16_values((b, seq, h, d), -2, 2, gen),
        "k": bf16_values((b, seq, g, d), -2, 2, gen),
        "v": bf16_values((b, seq, g, d), -1, 1, gen),
        "query_readout": torch.randn((h, d), dtype=torch.float64, generator=gen) / math.sqrt(d),
        "value_readout": torch.randn((g, d), dtype=torch.float64, generator=gen) / math.sqrt(d),
        "alpha": torch.rand(h, dtype=torch.float64, generator=gen) * 4 - 3,
    }
    if not flags["weight_sharing"]:
        leaves["query_source"] = bf16_values((b, seq, h, d), -2, 2, gen)
        leaves["value_source"] = bf16_values((b, seq, g, d), -2, 2, gen)
    dout = bf16_values((b, seq, h, d), -1, 1, gen)
    for x in leaves.values():
        x.requires_grad_(True)
    out, lse, tau_q, tau_v = ssa_attention(c, leaves, positions, inv_freq)
    (dout * out).sum().backward()

    n = b * seq
    activations = {"u", "k", "v", "query_source", "value_source"}
    tensors = {"positions": positions.reshape(n).contiguous(), "inv_freq": inv_freq,
               "dout": dout.reshape(n, h, d).to(torch.bfloat16)}
    for name, x in leaves.items():
        flat = x.detach().reshape(n, x.shape[2], d) if name in activations else x.detach()
        tensors[name] = flat.to(torch.bfloat16) if name in activations else flat
        grad = x.grad.reshape(flat.shape) if x.grad is not None else torch.zeros_like(flat)
        tensors["grad." + name] = grad.to(torch.float64)
    tensors["out"] = out.detach().reshape(n, h, d)
    tensors["lse"] = lse.detach().reshape(n, h)
    tensors["tau_q"] = tau_q.detach().reshape(n, h)
    tensors["tau_v"] = tau_v.detach().reshape(n, g)
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    flag = lambda on: "true" if on else "false"
    metadata = {"batch": str(b), "seq": str(seq), "heads": str(h), "kv_heads": str(g),
                "head_dim": str(d), "torch": torch.__version__,
                "clamp_lo": repr(flags["clamp"][0]) if flags["clamp"] else "none",
                "clamp_hi": repr(flags["clamp"][1]) if flags["clamp"] else "none"}
    for key in ("query_temperature", "value_temperature", "token_aware", "position_aware",
                "weight_sharing"):
        metadata[key] = flag(flags[key])
    path = os.path.join(OUT, c["name"] + ".safetensors")
    save_file(tensors, path, metadata=metadata)
    return path, tau_q.detach(), tau_v.detach()


def main():
    os.makedirs(OUT, exist_ok=True)
    total = 0
    for seed, c in enumerate(CASES):
        path, tau_q, tau_v = make_case(c, seed + 1)
        size = os.path.getsize(path)
        total += size
        print(f"{c['name']:24s} {size / 1024:6.1f} KiB"
              f"  tau_q [{tau_q.min():.3f}, {tau_q.max():.3f}]"
              f"  tau_v [{tau_v.min():.3f}, {tau_v.max():.3f}]")
    print(f"total {total / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
