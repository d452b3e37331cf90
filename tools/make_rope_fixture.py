"""Golden fixtures for Kelvin's RoPE scalings, from Hugging Face's own rotary embedding.

Pinned: torch==2.15.0, transformers==5.23.0, safetensors==0.8.0 (tools/requirements.txt).
Run:    python tools/make_rope_fixture.py            (writes tests/fixtures/rope/<case>/)

For every scaling transformers computes for Llama (a raised rope_theta, linear, yarn twice, longrope,
llama3, dynamic) and for an SSA Llama with yarn (models/llama/hf/, the modeling code Kelvin ships), a tiny
random model (hidden 32, 2 layers, 2 heads of 16, 1 KV head, vocab 64, an original context of 32
positions and max_position_embeddings 128; dynamic's original context is max_position_embeddings,
32) is saved with save_pretrained into <case>/model, its
config.json rewritten into transformers 4's form (top-level rope_theta + rope_scaling) for the
cases marked so, and read back with from_pretrained, so the logits are those of the config.json
Kelvin reads. <case>/logits.safetensors holds, all float32 but the ids:
  input_ids, position_ids [1, 128] int64 and logits [1, 128, 64]: one call over 128 positions,
  four times the original length;
  short_input_ids, short_position_ids [1, 32] and short_logits [1, 32, 64]: a call within the
  original length (LongRoPE's short factors; the same frequencies for the other types);
  dynamic only: decode_logits [1, 128, 64], the 128 tokens decoded with a cache, 24 in the first
  call and then one per call (each call beyond the original length with its own frequencies).
tests/models/rope_scaling_parity_test.cc matches them in CI without torch. The script prints each
case's attention factor, the largest logit and how far the logits are from default RoPE's.

Kelvin's exports the other way round:
  TEST_TMPDIR=/tmp/rope_exports BUILD/tests/models_test --gtest_filter='*RopeScalingParity.Export*'
  python tools/make_rope_fixture.py --check-exports /tmp/rope_exports
loads each export Kelvin wrote (kelvin_rope_<case>/first) with from_pretrained and prints how far
its logits are from the fixture's.
"""
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, DynamicCache, LlamaConfig, LlamaForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "rope")
sys.path.insert(0, os.path.join(ROOT, "models", "llama", "hf"))
from configuration_ssa_llama import SsaLlamaConfig  # noqa: E402
from modeling_ssa_llama import SsaLlamaForCausalLM  # noqa: E402

ORIGINAL, LENGTH, SHORT, VOCAB, HEAD_DIM = 32, 128, 32, 64, 16

# name -> (rope_parameters in transformers 5's form, config.json form, SSA)
CASES = {
    "theta": ({"rope_type": "default", "rope_theta": 40000.0}, "v5", False),
    "linear": ({"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, "v4", False),
    "yarn": ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
              "original_max_position_embeddings": ORIGINAL}, "v5", False),
    "yarn_mscale": ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                     "original_max_position_embeddings": ORIGINAL, "beta_fast": 16.0,
                     "beta_slow": 2.0, "mscale": 1.0, "mscale_all_dim": 0.5, "truncate": False},
                    "v4", False),
    # No factor, as Phi-3: transformers takes max_position_embeddings / original (4).
    "longrope": ({"rope_type": "longrope", "rope_theta": 10000.0,
                  "original_max_position_embeddings": ORIGINAL,
                  "short_factor": [1.0 + 0.05 * i for i in range(HEAD_DIM // 2)],
                  "long_factor": [1.0 + 0.9 * i for i in range(HEAD_DIM // 2)]}, "v4", False),
    "llama3": ({"rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": ORIGINAL}, "v5", False),
    "ssa_yarn": ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                  "original_max_position_embeddings": ORIGINAL}, "v5", True),
    # Dynamic NTK's original length is max_position_embeddings itself (32 here, not 128).
    "dynamic": ({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}, "v4", False),
}
# Decoding (dynamic only): a prompt of PROMPT tokens in one call, then one token per call up to
# LENGTH, each call's logits; dynamic NTK recomputes the frequencies per call beyond the original
# length, and the cache keeps each key as the call that appended it rotated it.
PROMPT = 24


def make_model(rope_parameters, ssa):
    torch.manual_seed(0)
    dynamic = rope_parameters["rope_type"] == "dynamic"
    common = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=HEAD_DIM, vocab_size=VOCAB,
                  max_position_embeddings=ORIGINAL if dynamic else LENGTH, rms_norm_eps=1e-5, tie_word_embeddings=False,
                  attention_bias=False, mlp_bias=False, rope_parameters=dict(rope_parameters),
                  dtype="float32", attn_implementation="eager")
    if ssa:
        model = SsaLlamaForCausalLM(SsaLlamaConfig(ssa={}, **common))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common))
    # Weights large enough that attention is sharp and the logits depend on the positions (with
    # transformers' 0.02 initialisation every scaling would give nearly the same logits).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            elif "q_proj" in name or "k_proj" in name:
                p.normal_(0.0, 0.6)
            elif "embed_tokens" in name:
                p.normal_(0.0, 1.0)
            elif p.ndim == 2:
                p.normal_(0.0, 0.25)
            elif "readout" in name:  # SSA temperatures away from 1
                p.normal_(0.0, 0.5)
            elif name.endswith("alpha"):
                p.uniform_(-1.0, 1.0)
    return model.float()


def to_v4(directory):
    """Rewrites config.json as transformers 4 wrote it: rope_theta + rope_scaling."""
    path = os.path.join(directory, "config.json")
    with open(path) as f:
        config = json.load(f)
    rope = config.pop("rope_parameters")
    config["rope_theta"] = rope.pop("rope_theta")
    if rope["rope_type"] != "default":
        config["rope_scaling"] = rope
    with open(path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


def logits_of(model, length):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (1, LENGTH), generator=g)[:, :length]
    positions = torch.arange(length)[None]
    with torch.no_grad():
        logits = model(input_ids=ids, position_ids=positions).logits.float()
    return ids, positions, logits


def decode_logits(model, ids):
    """The logits of ids [1, LENGTH] decoded with a cache: PROMPT tokens in one call, then one at a
    time, every call's logits in order."""
    cache = DynamicCache(config=model.config)
    rows = []
    with torch.no_grad():
        for begin, end in [(0, PROMPT)] + [(t, t + 1) for t in range(PROMPT, LENGTH)]:
            out = model(input_ids=ids[:, begin:end], position_ids=torch.arange(begin, end)[None],
                        past_key_values=cache, use_cache=True)
            rows.append(out.logits.float())
    return torch.cat(rows, dim=1)


def load(model_dir, ssa):
    return (SsaLlamaForCausalLM if ssa else AutoModelForCausalLM).from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager").eval()


def make_case(name, rope_parameters, form, ssa):
    directory = os.path.join(OUT, name)
    shutil.rmtree(directory, ignore_errors=True)
    model_dir = os.path.join(directory, "model")
    make_model(rope_parameters, ssa).save_pretrained(model_dir, safe_serialization=True)
    if form == "v4":
        to_v4(model_dir)
    os.remove(os.path.join(model_dir, "generation_config.json"))
    loaded = load(model_dir, ssa)
    dynamic = rope_parameters["rope_type"] == "dynamic"
    # The long call first: LongRoPE swaps its factors per call, in both directions. Dynamic NTK's
    # rotary module keeps the frequencies of the longest call it has seen (until a call shorter
    # than the original length), so each of its calls runs on a freshly loaded model: the
    # frequencies of that call alone, which Kelvin computes per call.
    ids, positions, logits = logits_of(loaded, LENGTH)
    short_ids, short_positions, short_logits = logits_of(
        load(model_dir, ssa) if dynamic else loaded, SHORT)
    tensors = {"input_ids": ids.contiguous(), "position_ids": positions.contiguous(),
               "logits": logits.contiguous(), "short_input_ids": short_ids.contiguous(),
               "short_position_ids": short_positions.contiguous(),
               "short_logits": short_logits.contiguous()}
    if dynamic:
        tensors["decode_logits"] = decode_logits(load(model_dir, ssa), ids).contiguous()
    save_file(tensors, os.path.join(directory, "logits.safetensors"))
    # How far the scaling moves the logits from default RoPE's on the same weights: what a wrong
    # scaling would have to hide within the test's 1e-5.
    unscaled = make_model({"rope_type": "default", "rope_theta": 10000.0}, ssa).eval()
    _, _, plain = logits_of(unscaled, LENGTH)
    rotary = loaded.model.rotary_emb
    print(f"{name}: form {form}, attention factor {rotary.attention_scaling}, "
          f"max |logit| {logits.abs().max().item():.4f}, "
          f"max |logit - default RoPE's| {(logits - plain).abs().max().item():.4f}")


def check_exports(directory):
    """transformers' logits of Kelvin's exports against the fixtures' (max relative difference)."""
    from safetensors.torch import load_file
    for name, (_, _, ssa) in CASES.items():
        export = os.path.join(directory, f"kelvin_rope_{name}", "first")
        loaded = (SsaLlamaForCausalLM if ssa else AutoModelForCausalLM).from_pretrained(
            export, dtype=torch.float32, attn_implementation="eager").eval()
        golden = load_file(os.path.join(OUT, name, "logits.safetensors"))
        for prefix, length in (("", LENGTH), ("short_", SHORT)):
            _, _, logits = logits_of(loaded, length)
            expected = golden[prefix + "logits"]
            rel = ((logits - expected).abs() / expected.abs().clamp_min(1e-6)).max().item()
            absolute = (logits - expected).abs().max().item()
            print(f"{name} {prefix or 'long_'}logits of Kelvin's export: max |diff| {absolute:.3g}, "
                  f"max relative {rel:.3g}")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check-exports":
        check_exports(sys.argv[2])
        return
    os.makedirs(OUT, exist_ok=True)
    for name, (rope_parameters, form, ssa) in CASES.items():
        make_case(name, rope_parameters, form, ssa)
    with open(os.path.join(OUT, "versions.json"), "w") as f:
        json.dump({"torch": torch.__version__,
                   "transformers": __import__("transformers").__version__}, f, indent=1)


if __name__ == "__main__":
    main()
