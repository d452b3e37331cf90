"""Checks Kelvin's LoRA exports in peft and transformers, and writes the CI fixture.

Pinned: torch==2.15.0, transformers==5.23.0, peft==0.22.0, safetensors==0.8.0
(tools/requirements.txt).
Run:    python tools/check_peft_export.py BUILD/launcher/kelvin [--write-fixture]

Trains nothing in Python. `kelvin train` fine-tunes the golden tiny Llama
(tests/fixtures/llama_tiny/model, untouched: the base peft loads) with LoRA on a frozen base for
30 steps in two cases, each exporting a peft adapter with training.export_hf_dir:
  - lora: rank 4 on all seven projections, the norms and embeddings trained too (peft's
    modules_to_save);
  - lora_ssa: SSA on (weight sharing off, so W_tmp is a tensor of its own) and trained, rank 4
    with rslora on q_proj, v_proj and down_proj.
`kelvin convert` then writes the same checkpoint as a peft adapter (the same bytes as the
training's export) and merged. Checked in transformers and peft:
  - PeftModel.from_pretrained over the base (through the adapter's SSA modeling code for SSA)
    loads every adapter tensor, and its held-out loss equals `kelvin eval`'s within 1e-6;
  - the merged export (a plain LlamaForCausalLM; with SSA through its modeling code) gives the adapter-loaded model's
    logits within 1e-5 relative (norm-wise), and so does peft's own merge_and_unload();
  - `kelvin eval MERGED --data` (Kelvin's decoder on the merged directory) gives the same loss.
With --write-fixture each case goes to tests/fixtures/peft/<case>/: job.textproto (model.hf_dir
to be set by the reader), adapter/ (the training's export) and logits.safetensors (input_ids,
position_ids [2, 24] int64 and the adapter-loaded model's logits [2, 24, V] f32), which
tests/launcher/commands/peft_export_test.cc matches in CI without torch.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import peft
import torch
import transformers
from peft import PeftModel
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM, LlamaForCausalLM
from transformers.dynamic_module_utils import get_class_from_dynamic_module

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BASE = "tests/fixtures/llama_tiny/model"  # relative to ROOT, where kelvin runs
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "peft")
VOCAB, SEQ = 160, 32
CASES = {  # name: model section besides hf_dir
    "lora": """lora { rank: 4 alpha: 8 targets: [ "q_proj", "k_proj", "v_proj", "o_proj",
                                        "gate_proj", "up_proj", "down_proj" ] }
               peft { adapters: true norms: true embeddings: true }""",
    "lora_ssa": """ssa { enabled: true alpha_init: -1 temperature_lr_scale: 30
                       weight_sharing: false }
                   lora { rank: 4 alpha: 8 rslora: true targets: [ "q_proj", "v_proj",
                                                                   "down_proj" ] }
                   peft { adapters: true ssa: true }""",
}


def job_text(name, model, hf_dir, work):
    return f"""name: "{name}"
model {{ hf_dir: "{hf_dir}" {model} }}
data {{ token_file {{ path: "{work}/train.int32" }} eval {{ token_file {{ path: "{work}/eval.int32" }} }} }}
optimizer {{ lr: 1e-2 }}
training {{ steps: 30 micro_batch_size: 2 global_batch_size: 4 seq_length: {SEQ} seed: 1
           eval_whole_set: true export_format: PEFT_ADAPTER }}
"""


def run_kelvin(kelvin, work, name, model):
    run = os.path.join(work, name)
    os.makedirs(run)
    job = os.path.join(run, "job.textproto")
    with open(job, "w") as f:
        f.write(job_text(name, model, BASE, work))
        f.write(f'checkpoint {{ dir: "{run}/checkpoints" interval_steps: 30 }}\n')
        f.write(f'logging {{ metrics_file: "{run}/metrics.jsonl" }}\n')
    kelvin_run = lambda *args: subprocess.run([kelvin, *args], check=True, capture_output=True,
                                              cwd=ROOT)
    kelvin_run("train", job, "--set", f'training.export_hf_dir="{run}/adapter"')
    with open(os.path.join(run, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    eval_loss = [r["eval/loss"] for r in records if "eval/loss" in r][-1]
    kelvin_run("convert", job, "--out", f"{run}/adapter_convert", "--format", "peft_adapter")
    kelvin_run("convert", job, "--out", f"{run}/merged", "--format", "merged")
    score = os.path.join(run, "score.json")
    kelvin_run("eval", f"{run}/merged", "--data", f"{work}/eval.int32", "--seq-length", str(SEQ),
               "--json", score)
    with open(score) as f:
        merged_score = json.load(f)["loss"]
    return run, eval_loss, merged_score


def load_adapter(adapter, ssa):
    base_dir = os.path.join(ROOT, BASE)
    if ssa:  # the base through the SSA modeling code the adapter ships (docs/formats.md)
        config = AutoConfig.from_pretrained(adapter, trust_remote_code=True)
        ssa_llama = get_class_from_dynamic_module("modeling_ssa_llama.SsaLlamaForCausalLM",
                                                  adapter)
        base = ssa_llama.from_pretrained(base_dir, config=config, dtype=torch.float32)
    else:
        base = LlamaForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter).eval()
    # Every tensor of the file is in the model with its value: peft warns, not fails, on a key
    # it cannot place.
    state = model.state_dict()
    saved = load_file(os.path.join(adapter, "adapter_model.safetensors"))
    placed = 0
    for key, value in saved.items():
        module, _, leaf = key.rpartition(".")
        candidates = [key, f"{module}.default.{leaf}", key.replace(".ssa.", ".ssa.modules_to_save.default."),
                      f"{module}.modules_to_save.default.{leaf}"]
        found = [c for c in candidates if c in state]
        assert found, f"{adapter}: {key} is in no module of the loaded model"
        assert torch.equal(state[found[0]], value), f"{key} loaded as another value"
        placed += 1
    lora_b = [v for k, v in saved.items() if "lora_B" in k]
    assert max(v.abs().max().item() for v in lora_b) > 1e-3, "B never left zero"
    return model, placed


def held_out_loss(model, tokens):
    rows = (len(tokens) - 1) // SEQ
    total = 0.0
    with torch.no_grad():
        for r in range(rows):
            row = torch.tensor(tokens[r * SEQ:r * SEQ + SEQ + 1], dtype=torch.long)[None]
            logits = model(input_ids=row[:, :-1]).logits.double()
            total += torch.nn.functional.cross_entropy(logits[0], row[0, 1:],
                                                       reduction="sum").item()
    return total / (rows * SEQ)


def batch():
    ids = torch.randint(4, VOCAB, (2, 24), generator=torch.Generator().manual_seed(11))
    positions = torch.arange(24)[None].repeat(2, 1)
    return ids, positions


def logits_of(model):
    ids, positions = batch()
    with torch.no_grad():
        return model(input_ids=ids, position_ids=positions).logits.float()


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def check_case(kelvin, work, name, model_section, eval_tokens, write):
    run, eval_loss, merged_score = run_kelvin(kelvin, work, name, model_section)
    adapter = os.path.join(run, "adapter")
    for file in ("adapter_model.safetensors", "adapter_config.json"):
        with open(os.path.join(adapter, file), "rb") as a, \
                open(os.path.join(run, "adapter_convert", file), "rb") as b:
            assert a.read() == b.read(), f"kelvin convert's {file} differs from the training's"
    ssa = "ssa {" in model_section
    peft_model, placed = load_adapter(adapter, ssa)
    loss = held_out_loss(peft_model, eval_tokens)
    adapter_logits = logits_of(peft_model)
    loader = AutoModelForCausalLM if ssa else LlamaForCausalLM
    merged = loader.from_pretrained(os.path.join(run, "merged"), dtype=torch.float32,
                                    trust_remote_code=ssa)
    merged_err = rel(logits_of(merged.eval()), adapter_logits)
    peft_merged_err = rel(logits_of(peft_model.merge_and_unload().eval()), adapter_logits)
    with open(os.path.join(adapter, "adapter_config.json")) as f:
        config = json.load(f)
    print(f"{name}: {placed} adapter tensors placed, modules_to_save {config['modules_to_save']}; "
          f"held-out loss Kelvin {eval_loss:.8f}, peft {loss:.8f} (diff "
          f"{abs(loss - eval_loss):.2e}); merged export vs adapter logits {merged_err:.2e} "
          f"relative, peft's merge_and_unload vs adapter {peft_merged_err:.2e}; kelvin eval "
          f"MERGED --data {merged_score:.8f} (diff {abs(merged_score - loss):.2e}); "
          f"kelvin convert's adapter equals the training's byte for byte")
    assert abs(loss - eval_loss) <= 1e-6, (loss, eval_loss)
    assert merged_err <= 1e-5 and peft_merged_err <= 1e-5
    assert abs(merged_score - loss) <= 1e-6
    if write:
        out = os.path.join(FIXTURES, name)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        shutil.copytree(adapter, os.path.join(out, "adapter"))
        with open(os.path.join(out, "job.textproto"), "w") as f:
            f.write("# Written by tools/check_peft_export.py; data paths are that run's.\n")
            f.write(job_text(name, model_section, "SET BY THE READER", "/nonexistent"))
        ids, positions = batch()
        save_file({"input_ids": ids.contiguous(), "position_ids": positions.contiguous(),
                   "logits": adapter_logits.contiguous()},
                  os.path.join(out, "logits.safetensors"))


def main(kelvin, write):
    kelvin = os.path.abspath(kelvin)
    work = tempfile.mkdtemp(prefix="kelvin_peft_export_check_")
    rng = np.random.default_rng(0)
    rng.integers(4, VOCAB, size=20000, dtype=np.int32).tofile(os.path.join(work, "train.int32"))
    eval_tokens = rng.integers(4, VOCAB, size=4 * SEQ + 1, dtype=np.int32)
    eval_tokens.tofile(os.path.join(work, "eval.int32"))
    for name, model_section in CASES.items():
        check_case(kelvin, work, name, model_section, eval_tokens.tolist(), write)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "peft": peft.__version__}
    print(f"versions: {versions}; work directory {work}")
    if write:
        with open(os.path.join(FIXTURES, "versions.json"), "w") as f:
            json.dump(versions, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], "--write-fixture" in sys.argv[2:])
