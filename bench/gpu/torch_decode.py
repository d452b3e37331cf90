"""torch decode throughput on the shapes llama_decode_gpu.cc times: a Llama-3-8B-shaped model cut
to LAYERS decoder layers (hidden 4096, 32 heads, 8 KV heads of 128, FFN 14336, vocabulary 128256,
RoPE theta 500000), bf16, random weights, at batch 1 and 8: prompts of PROMPT tokens, then NEW
greedy tokens each. Two implementations, each printed as one JSON object per batch:
  torch_loop:   plain eager torch with a preallocated KV cache, SDPA attention (the KV heads as
                they are where SDPA takes enable_gqa), greedy argmax on the device and the next ids
                copied to the host every step (as generate() does to check its stops);
  hf_generate:  transformers' LlamaForCausalLM(num_hidden_layers=LAYERS).generate(), greedy, its
                KV cache on (only where transformers is installed).
Both count decode steps only, as Kelvin's timing does: every token after each sequence's first
(hf_generate: t(NEW new tokens) - t(1 new token) of generate() calls).
Usage: python3 bench/gpu/torch_decode.py [layers] [prompt] [new]"""
import json
import sys
import time

import torch
import torch.nn.functional as F

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 4096, 32, 8, 128, 14336, 128256
THETA, EPS = 500000.0, 1e-5


def gqa_supported():
    """Whether SDPA takes the 8 KV heads as they are (enable_gqa, torch >= 2.5)."""
    q = torch.zeros(1, HEADS, 1, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    kv = torch.zeros(1, KV_HEADS, 1, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    try:
        F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
        return True
    except (RuntimeError, TypeError):
        return False


def rms_norm(x, weight):
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(variance + EPS)).to(x.dtype) * weight


class Model:
    """The decoder layers, final norm and LM head as bf16 tensors with a [B, max, G, d] cache."""

    def __init__(self, layers, batch, max_tokens):
        def w(*shape):
            return (torch.rand(*shape, device="cuda", dtype=torch.bfloat16) - 0.5) * 0.07

        self.embedding = w(VOCAB, HIDDEN)
        self.layers = [dict(wq=w(HEADS * HEAD_DIM, HIDDEN), wk=w(KV_HEADS * HEAD_DIM, HIDDEN),
                            wv=w(KV_HEADS * HEAD_DIM, HIDDEN), wo=w(HIDDEN, HEADS * HEAD_DIM),
                            gate=w(FFN, HIDDEN), up=w(FFN, HIDDEN), down=w(HIDDEN, FFN),
                            norm1=torch.ones(HIDDEN, device="cuda", dtype=torch.bfloat16),
                            norm2=torch.ones(HIDDEN, device="cuda", dtype=torch.bfloat16))
                       for _ in range(layers)]
        self.final_norm = torch.ones(HIDDEN, device="cuda", dtype=torch.bfloat16)
        self.lm_head = w(VOCAB, HIDDEN)
        shape = (batch, KV_HEADS, max_tokens, HEAD_DIM)
        self.k = [torch.zeros(shape, device="cuda", dtype=torch.bfloat16) for _ in range(layers)]
        self.v = [torch.zeros(shape, device="cuda", dtype=torch.bfloat16) for _ in range(layers)]
        inv_freq = 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2, device="cuda").float() / HEAD_DIM)
        angles = torch.outer(torch.arange(max_tokens, device="cuda").float(), inv_freq)
        self.cos = torch.cat([angles.cos(), angles.cos()], -1).to(torch.bfloat16)
        self.sin = torch.cat([angles.sin(), angles.sin()], -1).to(torch.bfloat16)
        self.gqa = gqa_supported()

    def rope(self, x, start):  # x [B, heads, n, d] at positions start..start+n-1
        n = x.shape[2]
        cos, sin = self.cos[start:start + n], self.sin[start:start + n]
        half = torch.cat([-x[..., HEAD_DIM // 2:], x[..., :HEAD_DIM // 2]], -1)
        return x * cos + half * sin

    @torch.no_grad()
    def forward(self, ids, start):
        """ids [B, n] at positions start..; returns the last position's logits [B, V]."""
        b, n = ids.shape
        x = self.embedding[ids]
        for l, p in enumerate(self.layers):
            h = rms_norm(x, p["norm1"])
            q = (h @ p["wq"].T).view(b, n, HEADS, HEAD_DIM).transpose(1, 2)
            k = (h @ p["wk"].T).view(b, n, KV_HEADS, HEAD_DIM).transpose(1, 2)
            v = (h @ p["wv"].T).view(b, n, KV_HEADS, HEAD_DIM).transpose(1, 2)
            self.k[l][:, :, start:start + n] = self.rope(k, start)
            self.v[l][:, :, start:start + n] = v
            keys, values = self.k[l][:, :, :start + n], self.v[l][:, :, :start + n]
            if not self.gqa:
                keys = keys.repeat_interleave(HEADS // KV_HEADS, dim=1)
                values = values.repeat_interleave(HEADS // KV_HEADS, dim=1)
            # Causal within the appended block, every cached key before it.
            mask = None
            if n > 1:
                mask = torch.ones(n, start + n, device="cuda", dtype=torch.bool).tril(start)
            kwargs = {"enable_gqa": True} if self.gqa else {}
            o = F.scaled_dot_product_attention(self.rope(q, start), keys, values, attn_mask=mask,
                                               **kwargs)
            x = x + o.transpose(1, 2).reshape(b, n, HEADS * HEAD_DIM) @ p["wo"].T
            h = rms_norm(x, p["norm2"])
            x = x + (F.silu(h @ p["gate"].T) * (h @ p["up"].T)) @ p["down"].T
        return rms_norm(x[:, -1], self.final_norm) @ self.lm_head.T


def prompts(batch, prompt):
    ids = torch.arange(batch * prompt, device="cuda").view(batch, prompt)
    return (ids * 7919) % VOCAB


def time_loop(layers, batch, prompt, new):
    model = Model(layers, batch, prompt + new)

    def generate():
        logits = model.forward(prompts(batch, prompt), 0)
        next_ids = logits.argmax(-1)
        next_ids.cpu()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for step in range(new - 1):
            logits = model.forward(next_ids.view(batch, 1), prompt + step)
            next_ids = logits.argmax(-1)
            next_ids.cpu()  # the host sees each step's tokens, as a generation loop must
        return time.perf_counter() - start

    generate()  # untimed: cuBLAS heuristics, the caching allocator
    seconds = generate()
    return {"impl": "torch_loop", "torch": torch.__version__,
            "gqa": "enable_gqa" if model.gqa else "repeat_interleave", "layers": layers, "batch": batch,
            "prompt": prompt, "new_tokens": new,
            "decode_ms_per_step": round(seconds * 1e3 / (new - 1), 3),
            "decode_tokens_per_s": round(batch * (new - 1) / seconds, 1)}


def time_hf(layers, prompt, new):
    """hf_generate's line per batch, one model (built on the GPU in bf16) for both."""
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=layers,
                         num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                         head_dim=HEAD_DIM, vocab_size=VOCAB, rope_theta=THETA,
                         rms_norm_eps=EPS, max_position_embeddings=8192,
                         tie_word_embeddings=False)
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).eval()
    torch.set_default_dtype(default_dtype)
    lines = []
    for batch in (1, 8):
        ids = prompts(batch, prompt)

        def seconds(tokens):
            torch.cuda.synchronize()
            start = time.perf_counter()
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens,
                           min_new_tokens=tokens, do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            return time.perf_counter() - start

        with torch.no_grad():
            seconds(new)  # untimed
            decode = seconds(new) - seconds(1)
        lines.append({"impl": "hf_generate", "transformers": transformers.__version__,
                      "layers": layers, "batch": batch, "prompt": prompt, "new_tokens": new,
                      "decode_ms_per_step": round(decode * 1e3 / (new - 1), 3),
                      "decode_tokens_per_s": round(batch * (new - 1) / decode, 1)})
    return lines


def main():
    layers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    prompt = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    new = int(sys.argv[3]) if len(sys.argv) > 3 else 128
    for batch in (1, 8):
        print(json.dumps(time_loop(layers, batch, prompt, new)), flush=True)
        torch.cuda.empty_cache()
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("transformers is not installed: no hf_generate baseline", file=sys.stderr)
        return
    for line in time_hf(layers, prompt, new):
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
