"""Checks that a Kelvin export loads in Hugging Face transformers and computes what the original
model computes. Pinned: torch==2.15.0, transformers==5.23.0 (tools/requirements.txt).

Run: python tools/check_export.py BUILD/launcher/kelvin
It trains the golden tiny Llama (tests/fixtures/llama_tiny/model) for one step at a learning rate
of 1e-30 (so no f32 parameter can change) on a small token file, exports it with
training.export_hf_dir, loads the export with LlamaForCausalLM.from_pretrained and compares every
parameter and the logits of a random batch with the original model.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import LlamaForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODEL = os.path.join(ROOT, "tests", "fixtures", "llama_tiny", "model")


def main(kelvin):
    work = tempfile.mkdtemp(prefix="kelvin_export_check_")
    tokens = np.random.default_rng(0).integers(0, 160, size=4096, dtype=np.int32)
    tokens.tofile(os.path.join(work, "tokens.int32"))
    job = os.path.join(work, "job.textproto")
    with open(job, "w") as f:
        f.write(f"""
model {{ hf_dir: "{MODEL}" }}
data {{ token_file {{ path: "{work}/tokens.int32" }} }}
optimizer {{ lr: 1e-30 }}
training {{ steps: 1 micro_batch_size: 2 global_batch_size: 2 seq_length: 32 seed: 1
           export_hf_dir: "{work}/export" }}
""")
    subprocess.run([kelvin, "train", job], check=True)
    original = LlamaForCausalLM.from_pretrained(MODEL, torch_dtype=torch.float32)
    exported = LlamaForCausalLM.from_pretrained(os.path.join(work, "export"),
                                                torch_dtype=torch.float32)
    worst = 0.0
    for (name, a), (_, b) in zip(original.state_dict().items(), exported.state_dict().items()):
        worst = max(worst, (a - b).abs().max().item())
    ids = torch.randint(0, 160, (2, 24), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        diff = (original(ids).logits - exported(ids).logits).abs().max().item()
    print(f"export loads in transformers: max parameter difference {worst}, "
          f"max logits difference {diff}")
    assert worst == 0.0 and diff == 0.0, "the export differs from the original model"


if __name__ == "__main__":
    main(sys.argv[1])
