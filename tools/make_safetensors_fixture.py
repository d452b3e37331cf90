"""Safetensors fixtures for Kelvin's checkpoint I/O tests, written by the Python ecosystem itself.

Pinned: torch==2.15.0, safetensors==0.8.0, huggingface_hub==2.4.0 (tools/requirements.txt).
Run:    python tools/make_safetensors_fixture.py           (writes tests/fixtures/safetensors/)
        python tools/make_safetensors_fixture.py --check DIR
            checks files Kelvin wrote (the reverse direction): run
            KELVIN_IO_EXPORT_DIR=DIR io_test --gtest_filter='PythonFixture*' first; it re-exports
            python.safetensors as DIR/kelvin.safetensors and DIR/kelvin_hf/ (a sharded checkpoint).

Writes:
  python.safetensors  safetensors.torch.save_file of F32, BF16, F16 (subnormals, infinities, -0,
                      NaN), F64, I64, I32 tensors, a scalar and an empty tensor, with metadata.
  hf_sharded/         huggingface_hub.save_torch_state_dict with a small max_shard_size: three
                      model-0000k-of-00003.safetensors shards and model.safetensors.index.json.
  expected.json       for every tensor of both: dtype, shape, and its values as torch reads them:
                      floats as the bit patterns of their float32 value (exact, and JSON has no
                      inf/NaN), integers as integers; for "f32_rounding" also the bits torch's
                      float32 -> bfloat16 conversion (round to nearest even) gives.
safetensors writes __metadata__ keys in hash order, so a rerun may reorder them in the header of
python.safetensors; everything else is reproduced byte for byte.
"""
import argparse
import json
import os

import torch
from huggingface_hub import save_torch_state_dict
from safetensors import safe_open
from safetensors.torch import load_file, save_file

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "safetensors")
METADATA = {"format": "pt", "producer": "tools/make_safetensors_fixture.py"}


SAFETENSORS_DTYPE = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
                     torch.float64: "F64", torch.int64: "I64", torch.int32: "I32"}


def as_bytes(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def describe(t):
    entry = {"dtype": SAFETENSORS_DTYPE[t.dtype], "shape": list(t.shape)}
    if t.dtype.is_floating_point:
        entry["f32_bits"] = [b & 0xFFFFFFFF for b in as_bytes(t.float()).view(torch.int32).tolist()]
    if t.dtype == torch.float64 or not t.dtype.is_floating_point:
        entry["values"] = t.flatten().tolist()
    return entry


def single_file_tensors():
    g = torch.Generator().manual_seed(0)
    one = 1.0
    # Ties and near-ties of f32 -> bf16 (bf16 keeps 7 mantissa bits), plus random values.
    rounding = torch.tensor(
        [one + 2**-8, one + 3 * 2**-8, one + 2**-8 + 2**-20, -(one + 2**-8), 3.0e38, -3.4e38,
         1e-40, float("inf"), 0.0, -0.0], dtype=torch.float32)
    rounding = torch.cat([rounding, torch.randn(22, generator=g)])
    half = torch.tensor(
        [2.0**-24, 3 * 2.0**-24, 2.0**-14 - 2.0**-24, 2.0**-14, 65504.0, float("inf"),
         float("-inf"), -0.0, 1 / 3, -2.5, float("nan"), 0.0], dtype=torch.float16)
    return {
        "f32": torch.randn(3, 4, generator=g),
        "f32_rounding": rounding,
        "bf16": torch.randn(2, 5, generator=g).to(torch.bfloat16),
        "f16": half,
        "f64": torch.randn(2, 3, generator=g, dtype=torch.float64),
        "i64": torch.tensor([0, -1, 2**62, -(2**62), 7], dtype=torch.int64),
        "i32": torch.tensor([[1, -2], [2**31 - 1, -(2**31)]], dtype=torch.int32),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "model.layers.0.mlp.up_proj.weight": torch.randn(4, 6, generator=g),
    }


def sharded_tensors():
    g = torch.Generator().manual_seed(1)
    return {
        "model.embed_tokens.weight": torch.randn(8, 6, generator=g),            # 192 bytes
        "model.layers.0.self_attn.q_proj.weight": torch.randn(6, 6, generator=g),  # 144 bytes
        "model.layers.0.input_layernorm.weight": torch.randn(6, generator=g).to(torch.bfloat16),
        "model.norm.weight": torch.randn(6, generator=g),
        "lm_head.weight": torch.randn(8, 6, generator=g),
    }


def generate():
    os.makedirs(OUT, exist_ok=True)
    single = single_file_tensors()
    save_file(single, os.path.join(OUT, "python.safetensors"), metadata=METADATA)
    sharded = sharded_tensors()
    os.makedirs(os.path.join(OUT, "hf_sharded"), exist_ok=True)
    save_torch_state_dict(sharded, os.path.join(OUT, "hf_sharded"), max_shard_size=200)
    expected = {
        "metadata": METADATA,
        "python.safetensors": {name: describe(t) for name, t in single.items()},
        "hf_sharded": {name: describe(t) for name, t in sharded.items()},
    }
    expected["python.safetensors"]["f32_rounding"]["bf16_bits"] = (
        single["f32_rounding"].to(torch.bfloat16).view(torch.int16).int() & 0xFFFF).tolist()
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    with open(os.path.join(OUT, "hf_sharded", "model.safetensors.index.json")) as f:
        print("index:", f.read())
    for root, _, files in os.walk(OUT):
        for name in sorted(files):
            path = os.path.join(root, name)
            print(f"{os.path.relpath(path, OUT)}: {os.path.getsize(path)} bytes")


def check_kelvin_files(directory):
    """Loads what Kelvin wrote with safetensors and compares it with the fixture's values."""
    with open(os.path.join(OUT, "expected.json")) as f:
        expected = json.load(f)
    single = single_file_tensors()
    path = os.path.join(directory, "kelvin.safetensors")
    loaded = load_file(path)
    with safe_open(path, "pt") as f:
        metadata = f.metadata()
    assert metadata == expected["metadata"], metadata
    assert sorted(loaded) == sorted(single), sorted(loaded)
    for name, original in single.items():
        # Kelvin has no F16 tensors: it re-exports F16 as F32, exactly.
        want = original.float() if original.dtype == torch.float16 else original
        got = loaded[name]
        assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape)
        # Bit-identical, except that NaN payloads may differ (torch's f16 -> f32 gives 0x7fffffff).
        nan = want.isnan()
        assert torch.equal(got.isnan(), nan), name
        assert torch.equal(as_bytes(got[~nan]), as_bytes(want[~nan])), name
    print(f"{path}: {len(loaded)} tensors, bit-identical to the fixture (F16 as F32, NaN as NaN)")

    hf = os.path.join(directory, "kelvin_hf")
    with open(os.path.join(hf, "model.safetensors.index.json")) as f:
        index = json.load(f)
    sharded = sharded_tensors()
    assert sorted(index["weight_map"]) == sorted(sharded), index
    total = sum(t.numel() * t.element_size() for t in sharded.values())
    assert index["metadata"]["total_size"] == total, (index["metadata"], total)
    for name, want in sharded.items():
        shard = os.path.join(hf, index["weight_map"][name])
        with safe_open(shard, "pt") as f:
            assert f.metadata() == {"format": "pt"}, f.metadata()
            assert torch.equal(f.get_tensor(name), want), name
    shards = sorted(set(index["weight_map"].values()))
    print(f"{hf}: {len(shards)} shards {shards}, every tensor equal, total_size {total}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", metavar="DIR", help="check Kelvin-written files in DIR")
    args = parser.parse_args()
    if args.check:
        check_kelvin_files(args.check)
    else:
        generate()
