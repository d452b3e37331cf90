"""Checks Kelvin's Hugging Face exports in transformers, SSA included, and writes the CI fixture.

Pinned: torch==2.15.0, transformers==5.23.0, tokenizers==0.23.3, safetensors==0.8.0
(tools/requirements.txt).
Run:    python tools/check_hf_export.py BUILD/launcher/kelvin [--write-fixture]

Trains nothing in Python. It gives the golden tiny Llama (tests/fixtures/llama_tiny/model, cut
to 2 layers by model.architecture) a tokenizer, a generation config and special token ids, and
lets `kelvin train` fine-tune it for 40 steps with SSA under every flag set of docs/ssa.md
("Variants"; alpha_init -1 and a temperature learning-rate scale of 30, so the read-outs and
alphas end far from their initial values), each run exporting with training.export_hf_dir. Each
export is then loaded with AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=True) and
checked:
  - no missing or unexpected tensors, and the class is SsaLlamaForCausalLM;
  - the loss on the held-out rows equals `kelvin eval`'s (its --json result, which is the final
    evaluation loss in the metrics file bit for bit) within 1e-6, under the eager and the SDPA
    attention;
  - packed documents (position ids restart, a block-diagonal mask) equal each document alone;
  - a left-padded batch of prompts of different lengths equals each prompt alone;
  - greedy generate() of 32 tokens with the KV cache equals generation without it;
  - `kelvin eval EXPORT --data` (the export directory alone, scored by Kelvin's forward-only model
    and the held-out evaluation's loss) gives transformers' held-out loss within 1e-6.
Each SSA export's tokenizer loads with AutoTokenizer without remote code, and its model card names
no local directory. A bf16 `kelvin convert` of the full-SSA run loads as bfloat16, and a vanilla run
loads as a plain LlamaForCausalLM (no remote code) with its tokenizer (AutoTokenizer) and
generation config.
With --write-fixture, the full-SSA export and the weight-sharing-off + clamp export go to
tests/fixtures/hf_ssa/<case>/model with the logits transformers computed on a packed batch and its
greedy generation (<case>/packed.safetensors: input_ids, position_ids [B, T] int64, logits
[B, T, V] f32; prompt [2, 9] and greedy [2, 41] int64, the prompts followed by 32 greedy tokens),
which tests/models/hf_ssa_parity_test.cc matches in CI without torch.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaForCausalLM,
                          PreTrainedTokenizerFast)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BASE = os.path.join(ROOT, "tests", "fixtures", "llama_tiny", "model")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "hf_ssa")
VOCAB, SEQ, BOS, EOS, PAD = 160, 32, 1, [2, 3], 0
VARIANTS = {  # name: model.ssa fields besides enabled, alpha_init and temperature_lr_scale
    "full": "",
    "query_only": "value_temperature: false",
    "value_only": "query_temperature: false",
    "token_aware_off": "token_aware: false",
    "position_aware_off": "position_aware: false",
    "weight_sharing_off_clamp": "weight_sharing: false temperature_clamp { lo: 0.8 hi: 1.6 }",
}
FIXTURE_CASES = ["full", "weight_sharing_off_clamp"]


def make_base(work):
    """The tiny Llama with a word-level tokenizer over its 160 ids, special ids and a
    generation config, as a user's model.hf_dir would have them."""
    base = os.path.join(work, "base")
    shutil.copytree(BASE, base)
    with open(os.path.join(base, "config.json")) as f:
        config = json.load(f)
    config.update(bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)
    with open(os.path.join(base, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    vocab = {f"w{i}": i for i in range(VOCAB)}
    vocab.update({"<pad>": 0, "<s>": 1, "</s>": 2, "<eot>": 3})
    del vocab["w0"], vocab["w1"], vocab["w2"], vocab["w3"]
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                            pad_token="<pad>").save_pretrained(base)
    GenerationConfig(bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD).save_pretrained(base)
    return base


def run_kelvin(kelvin, work, name, base, ssa):
    run = os.path.join(work, name)
    os.makedirs(run)
    ssa_section = (f"ssa {{ enabled: true alpha_init: -1 temperature_lr_scale: 30 {ssa} }}"
                   if ssa is not None else "")
    job = os.path.join(run, "job.textproto")
    with open(job, "w") as f:
        f.write(f"""
name: "{name}"
model {{ hf_dir: "{base}" architecture {{ num_layers: 2 }} {ssa_section} }}
data {{ token_file {{ path: "{work}/train.int32" }} eval {{ token_file {{ path: "{work}/eval.int32" }} }} }}
optimizer {{ lr: 3e-3 }}
training {{ steps: 40 micro_batch_size: 2 global_batch_size: 4 seq_length: {SEQ} seed: 1 eval_whole_set: true
           export_hf_dir: "{run}/export" }}
checkpoint {{ dir: "{run}/checkpoints" interval_steps: 40 }}
logging {{ metrics_file: "{run}/metrics.jsonl" }}
""")
    subprocess.run([kelvin, "train", job], check=True, capture_output=True)
    with open(os.path.join(run, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    eval_loss = [r["eval/loss"] for r in records if "eval/loss" in r][-1]
    # `kelvin eval` restores the saved checkpoint and scores the same rows: the same loss.
    result = os.path.join(run, "eval.json")
    subprocess.run([kelvin, "eval", job, "--json", result], check=True, capture_output=True)
    with open(result) as f:
        kelvin_eval = json.load(f)["evaluations"][0]["sets"][0]["loss"]
    assert kelvin_eval == eval_loss, (kelvin_eval, eval_loss)
    return run, job, eval_loss


def load(directory, attention, remote):
    loader = AutoModelForCausalLM if remote else LlamaForCausalLM
    model, info = loader.from_pretrained(directory, trust_remote_code=remote, dtype=torch.float32,
                                         attn_implementation=attention, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    assert not problems, f"{directory}: loading reported {problems}"
    return model.eval()


def held_out_loss(model, tokens):
    rows = (len(tokens) - 1) // SEQ
    losses = []
    with torch.no_grad():
        for r in range(rows):
            row = torch.tensor(tokens[r * SEQ:r * SEQ + SEQ + 1], dtype=torch.long)[None]
            logits = model(row[:, :-1]).logits.double()
            losses.append(torch.nn.functional.cross_entropy(logits[0], row[0, 1:],
                                                            reduction="sum").item())
    return sum(losses) / (rows * SEQ)


def block_causal_mask(position_ids):
    """[B, 1, T, T] additive mask: token t sees s <= t of its own document."""
    t = position_ids.shape[1]
    doc = torch.cumsum((position_ids == 0).long(), dim=1)
    allowed = torch.tril(torch.ones(t, t, dtype=torch.bool))[None] & (doc[:, :, None] ==
                                                                        doc[:, None, :])
    mask = torch.zeros(position_ids.shape[0], 1, t, t)
    return mask.masked_fill_(~allowed[:, None], torch.finfo(torch.float32).min)


def packed_batch():
    ids = torch.randint(4, VOCAB, (2, 24), generator=torch.Generator().manual_seed(7))
    positions = torch.tensor([list(range(10)) + list(range(9)) + list(range(5)),
                              list(range(7)) + list(range(17))])
    return ids, positions


def check_packed(model):
    ids, positions = packed_batch()
    with torch.no_grad():
        packed = model(input_ids=ids, position_ids=positions,
                       attention_mask=block_causal_mask(positions)).logits
        worst = 0.0
        for row in range(2):
            starts = (positions[row] == 0).nonzero().flatten().tolist() + [24]
            for begin, end in zip(starts[:-1], starts[1:]):
                alone = model(input_ids=ids[row:row + 1, begin:end]).logits[0]
                worst = max(worst, (alone - packed[row, begin:end]).abs().max().item())
    assert worst < 1e-5, f"packed documents differ from each alone by {worst}"
    return packed, worst


def check_padding(model):
    long = torch.randint(4, VOCAB, (1, 12), generator=torch.Generator().manual_seed(8))
    short = long[:, :7].clone()
    batch = torch.full((2, 12), PAD)
    batch[0] = long[0]
    batch[1, 5:] = short[0]  # left padding, as generate() expects
    mask = (torch.arange(12)[None] >= torch.tensor([[0], [5]])).long()
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        padded = model(input_ids=batch, attention_mask=mask, position_ids=positions).logits
        worst = max((model(long).logits[0] - padded[0]).abs().max().item(),
                    (model(short).logits[0] - padded[1, 5:]).abs().max().item())
    assert worst < 1e-5, f"a padded batch differs from its prompts alone by {worst}"
    return worst


def check_generation(model):
    """Greedy generate() of 32 tokens with the cache equals it without; returns the prompts and
    the generated sequences [2, 9 + 32]."""
    prompt = torch.randint(4, VOCAB, (2, 9), generator=torch.Generator().manual_seed(9))
    settings = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=PAD,
                    attention_mask=torch.ones_like(prompt))
    with torch.no_grad():
        cached = model.generate(prompt, use_cache=True, **settings)
        uncached = model.generate(prompt, use_cache=False, **settings)
    assert torch.equal(cached, uncached), "generation with the KV cache differs from without"
    return prompt, cached


def temperature_spread(model):
    state = model.state_dict()
    readouts = [v.abs().max().item() for k, v in state.items() if "readout" in k]
    alphas = torch.cat([v for k, v in state.items() if k.endswith("ssa.alpha")]) \
        if any(k.endswith("ssa.alpha") for k in state) else None
    return (max(readouts) if readouts else 0.0,
            (alphas.min().item(), alphas.max().item()) if alphas is not None else None)


def kelvin_score(kelvin, export, work):
    """`kelvin eval EXPORT --data eval.int32` (the directory alone, no job): the held-out rows as
    non-overlapping windows of SEQ tokens, the loss in full precision."""
    result = os.path.join(export, "..", "score.json")
    subprocess.run([kelvin, "eval", export, "--data", os.path.join(work, "eval.int32"),
                    "--seq-length", str(SEQ), "--json", result], check=True, capture_output=True)
    with open(result) as f:
        return json.load(f)["loss"]


def check_ssa_variant(name, export, eval_loss, eval_tokens):
    eager = load(export, "eager", remote=True)
    assert type(eager).__name__ == "SsaLlamaForCausalLM", type(eager).__name__
    sdpa = load(export, "sdpa", remote=True)
    loss_eager, loss_sdpa = held_out_loss(eager, eval_tokens), held_out_loss(sdpa, eval_tokens)
    packed, packed_err = check_packed(eager)
    pad_err = check_padding(sdpa)
    prompt, greedy = check_generation(eager)
    generated = greedy.shape[1] - prompt.shape[1]
    readout, alpha = temperature_spread(eager)
    print(f"{name}: max |readout| {readout:.3f}, alpha {alpha}; held-out loss Kelvin "
          f"{eval_loss:.8f}, transformers eager {loss_eager:.8f} (diff "
          f"{abs(loss_eager - eval_loss):.2e}), sdpa diff {abs(loss_sdpa - eval_loss):.2e}; "
          f"packed vs alone {packed_err:.1e}; padded vs alone {pad_err:.1e}; "
          f"{generated} generated tokens equal with and without the cache")
    assert abs(loss_eager - eval_loss) <= 1e-6 and abs(loss_sdpa - eval_loss) <= 1e-6
    return {"logits": packed, "prompt": prompt, "greedy": greedy, "loss": loss_eager}


def write_fixture(name, export, computed):
    out = os.path.join(FIXTURES, name)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(export, os.path.join(out, "model"))
    ids, positions = packed_batch()
    save_file({"input_ids": ids.contiguous(), "position_ids": positions.contiguous(),
               "logits": computed["logits"].float().contiguous(),
               "prompt": computed["prompt"].contiguous(),
               "greedy": computed["greedy"].contiguous()},
              os.path.join(out, "packed.safetensors"))


def main(kelvin, write):
    work = tempfile.mkdtemp(prefix="kelvin_hf_export_check_")
    rng = np.random.default_rng(0)
    rng.integers(4, VOCAB, size=20000, dtype=np.int32).tofile(os.path.join(work, "train.int32"))
    eval_tokens = rng.integers(4, VOCAB, size=4 * SEQ + 1, dtype=np.int32)
    eval_tokens.tofile(os.path.join(work, "eval.int32"))
    eval_tokens = eval_tokens.tolist()
    base = make_base(work)

    for name, flags in VARIANTS.items():
        run, job, eval_loss = run_kelvin(kelvin, work, name, base, flags)
        computed = check_ssa_variant(name, os.path.join(run, "export"), eval_loss, eval_tokens)
        # The tokenizer loads without the remote code (only the model needs it), and the model
        # card names no directory of this machine.
        tokenizer = AutoTokenizer.from_pretrained(os.path.join(run, "export"),
                                                  trust_remote_code=False)
        encoded = tokenizer("w10 w11 w12")["input_ids"]
        with open(os.path.join(run, "export", "README.md")) as f:
            card = f.read()
        print(f"{name}: AutoTokenizer without remote code encodes 'w10 w11 w12' as {encoded}; "
              f"the model card names {'the' if work in card else 'no'} local work directory")
        assert encoded[-3:] == [10, 11, 12] and work not in card
        score = kelvin_score(kelvin, os.path.join(run, "export"), work)
        print(f"{name}: kelvin eval EXPORT --data (the forward-only model, no job) {score:.8f}, "
              f"diff to transformers {abs(score - computed['loss']):.2e}")
        assert abs(score - computed["loss"]) <= 1e-6
        if write and name in FIXTURE_CASES:
            write_fixture(name, os.path.join(run, "export"), computed)
        if name == "full":
            bf16 = os.path.join(run, "export_bf16")
            subprocess.run([kelvin, "convert", job, "--out", bf16, "--dtype", "bf16"], check=True,
                           capture_output=True)
            model = AutoModelForCausalLM.from_pretrained(bf16, trust_remote_code=True)
            dtypes = {p.dtype for p in model.parameters()}
            assert dtypes == {torch.bfloat16}, dtypes
            print(f"bf16 convert: loads as {dtypes}, config dtype {model.config.dtype}")

    run, _, eval_loss = run_kelvin(kelvin, work, "vanilla", base, None)
    export = os.path.join(run, "export")
    with open(os.path.join(export, "config.json")) as f:
        config = json.load(f)
    assert "auto_map" not in config and config["architectures"] == ["LlamaForCausalLM"]
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == \
        (BOS, EOS, PAD), config
    model = load(export, "sdpa", remote=False)
    loss = held_out_loss(model, eval_tokens)
    tokenizer = AutoTokenizer.from_pretrained(export)
    encoded = tokenizer("w10 w11 w12")["input_ids"]
    generation = GenerationConfig.from_pretrained(export)
    print(f"vanilla: plain LlamaForCausalLM, held-out loss diff {abs(loss - eval_loss):.2e}; "
          f"AutoTokenizer encodes 'w10 w11 w12' as {encoded}; generation eos "
          f"{generation.eos_token_id}")
    assert abs(loss - eval_loss) <= 1e-6 and encoded[-3:] == [10, 11, 12]
    assert generation.eos_token_id == EOS
    print(f"versions: torch {torch.__version__}, transformers "
          f"{__import__('transformers').__version__}; work directory {work}")
    if write:
        with open(os.path.join(FIXTURES, "versions.json"), "w") as f:
            json.dump({"torch": torch.__version__,
                       "transformers": __import__("transformers").__version__}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], "--write-fixture" in sys.argv[2:])
