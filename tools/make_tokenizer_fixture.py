"""Tokenizer fixtures for Kelvin's C++ tokenizer (data/tokenizer/), from Hugging Face tokenizers.

Pinned: tokenizers==0.23.3, transformers==5.23.0 (tools/requirements.txt).
Run:    python tools/make_tokenizer_fixture.py [BUILD/launcher/kelvin]

Writes a corpus of >= 5 MB of lines that mix prose in several scripts (Latin with accents,
Cyrillic, Greek, CJK, Arabic, Hebrew, Devanagari, Thai), code, emoji with skin tones, flags and
ZWJ sequences, combining marks, long runs of spaces, tabs and newlines, Unicode spaces and
zero-width characters, digits, contractions in any case, and special-token strings (whole,
partial, doubled). On it the script trains two byte-level BPE tokenizers with the real
pre-tokenizer configurations:
  llama3_style: Llama-3's Split regex (Isolated) + ByteLevel(use_regex=false), ignore_merges,
                the TemplateProcessing post-processor that puts <|begin_of_text|> first, and
                Llama-3's special tokens added after the vocabulary (4096 ids before them);
  gpt2_style:   ByteLevel(use_regex=true) (GPT-2's pattern), <|endoftext|> (2048 ids before it);
  qwen2_style:  Qwen2's NFC normalizer, its Split regex (single digits) + ByteLevel(use_regex=
                false), <|endoftext|> (3072 ids before it).
Each goes to tests/fixtures/tokenizer/<name>/ (tokenizer.json, tokenizer_config.json with its bos
and eos tokens and a chat template: Llama-3-8B-Instruct's for llama3_style, plain ChatML with
<|im_start|>/<|im_end|> for the others). tests/fixtures/tokenizer/cases.jsonl records 600 lines of
the corpus (every kind of fragment, and the hardest cases whole) and 10 lines that NFC composes,
reorders or leaves alone (combining marks, Hangul jamo, singletons, exclusions), with every
tokenizer's ids
(add_special_tokens=True); chat_cases.jsonl 100 of 300 generated conversations (optional system
prompt, 1-3 user/assistant rounds, contents with leading whitespace, special-token strings) with
transformers' apply_chat_template ids and the loss mask (assistant content and end-of-turn token)
for both. The C++ tests match them without Python.

With a Kelvin binary, it also runs `kelvin prepare-data --tokenizer DIR` on the whole corpus as
{"text": ...} lines for both tokenizers and checks that every document's ids equal tokenizers'
(plus the end-of-document token prepare-data appends) on 100% of the lines, and on the 300
conversations as {"messages": ...} lines that the ids and loss masks equal the ones above.
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unicodedata

import numpy as np
from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors,
                        trainers)
from transformers import PreTrainedTokenizerFast

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Meta-Llama-3-8B-Instruct's chat template, and plain ChatML (Qwen2's without its default system
# prompt); Kelvin renders them with its chat template engine (data/chat_template/).
LLAMA3_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim "
    "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|reserved_special_token_1|>", "<|start_header_id|>", "<|end_header_id|>",
                   "<|reserved_special_token_2|>", "<|eot_id|>"]

PROSE = [
    "The quick brown fox jumps over the lazy dog, again and again.",
    "Il était une fois, dans un château près de Genève, une reine très âgée.",
    "Größere Übungen verlangen Geduld: „Ärger“ hilft nie weiter.",
    "¿Dónde está la biblioteca? ¡Está allí, señor!",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "我能吞下玻璃而不伤身体。今天天气很好，我们去公园吧！",
    "いろはにほへと ちりぬるを、カタカナとひらがなと漢字。",
    "다람쥐 헌 쳇바퀴에 타고파. 한국어 문장입니다.",
    "نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر.",
    "שפן אכל קצת גזר בטעם חסה, ודי.",
    "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले।",
    "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน",
    "Tiếng Việt có dấu: Đường đi khó không vì ngăn sông cách núi.",
    "Combining: e\u0301 a\u0308 n\u0303, Devanagari क\u093f, Arabic بِسْمِ",
]
CODE = [
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "if __name__ == '__main__':\n    main(sys.argv[1:])\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "const x = {a: 1, 'b': [2, 3], \"c\": null};   // trailing",
    "<div class=\"row\"><span>&nbsp;</span></div>",
    "#include <vector>\nstd::vector<int> v{1, 2, 3};\n\n\n",
]
EMOJI = ["👨\u200d👩\u200d👧\u200d👦", "🏳\ufe0f\u200d🌈", "👍🏽", "🇫🇷🇯🇵", "😀😃😄", "🧑\u200d💻",
         "❤\ufe0f", "👩🏿\u200d🔬", "🐈\u200d⬛"]
SPACES = ["   ", "\t\t", "\n", "\n\n\n", "\r\n", "    \n    ", " \u00a0 ", "\u2003\u3000",
          "\u200b", "\u200d", "\ufeff", "\u0085", "\u2028", "\u000b\u000c", "\t \t \n \n",
          " " * 40, "\n" * 12, " \n" * 5]
DIGITS = ["1234567890", "3.14159", "1,000,000", "2026-12-02", "0x1F", "42", "007", "1e-5",
          "٣٤٥", "१२३", "１２３"]
CONTRACTIONS = ["I'm", "you're", "they'll", "DON'T", "It'S", "we'VE", "she'd", "o'clock",
                "rock'n'roll", "'s", "''"]
SPECIAL_STRINGS = ["<|begin_of_text|>", "<|eot_id|>", "<|endoftext|>", "<|eot_id", "<<|eot_id|>>",
                   "<|start_header_id|>user<|end_header_id|>", "<|end_of_text|><|end_of_text|>",
                   "< |eot_id| >"]
KINDS = [PROSE, CODE, EMOJI, SPACES, DIGITS, CONTRACTIONS, SPECIAL_STRINGS]
STYLES = ("llama3_style", "gpt2_style", "qwen2_style")
SEPARATORS = [" ", "", "\n", "  ", "\t", ". ", ", ", " \n"]
# Recorded with the others (not in the training corpus): what NFC composes or leaves alone.
NFC_CASES = ["e\u0301t\u00e9", "A\u030a \u212b \u00c5", "\u1100\u1161\u11a8 \uac01",
             "o\u0323\u0302 vs o\u0302\u0323", "\u0915\u093c \u0958", "\u0301start",
             "\u00e9\u0301", "\u1e9b\u0323", "\u0f73", "\ufb2c"]
HARD_CASES = [  # whole lines recorded in the fixture as they are
    "", " ", "\n", "a", "  leading and trailing  ", "\n\n\nnewlines first",
    " " * 200 + "x", "\t" * 50, "x" * 300, "9" * 50, "ab" * 100, "🙂" * 30,
    "<|begin_of_text|><|begin_of_text|>", "<|eot_id|>text<|eot_id|>", "text<|endoftext|>",
    "I'M HERE'S IT'S", "A\u0301\u0302\u0303", "\u00e9 vs e\u0301", "مرحبا 123 world",
]


def fragment(rng):
    kind = rng.choice(KINDS)
    text = rng.choice(kind)
    if kind is PROSE and rng.random() < 0.5:  # a piece of a sentence, cut anywhere
        a, b = sorted(rng.randrange(len(text) + 1) for _ in range(2))
        text = text[a:b] or text
    return text


def make_corpus(rng, min_bytes=5 << 20):
    lines, size = list(HARD_CASES), 0
    while size < min_bytes:
        parts = [fragment(rng) for _ in range(rng.randint(1, 9))]
        line = "".join(p + rng.choice(SEPARATORS) for p in parts)
        lines.append(line)
        size += len(line.encode())
    return lines


def train(lines, style):
    if style == "llama3_style":
        tokenizer = Tokenizer(models.BPE(ignore_merges=True))
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
        vocab, specials = 4096, LLAMA3_SPECIALS
    elif style == "qwen2_style":
        tokenizer = Tokenizer(models.BPE())
        tokenizer.normalizer = normalizers.NFC()
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
        vocab, specials = 3072, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    else:
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        vocab, specials = 2048, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(lines, trainer)
    tokenizer.add_special_tokens(specials)
    if style == "llama3_style":
        bos = tokenizer.token_to_id("<|begin_of_text|>")
        tokenizer.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
        names = dict(bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>",
                     chat_template=LLAMA3_CHAT_TEMPLATE)
    else:
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
        names = dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                     chat_template=CHATML_TEMPLATE)
    directory = os.path.join(OUT, style)
    shutil.rmtree(directory, ignore_errors=True)
    chat_template = names.pop("chat_template")
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, **names)
    fast.chat_template = chat_template
    fast.save_pretrained(directory)  # the template in chat_template.jinja (transformers 5)
    return Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))


def make_conversations(rng, count):
    """Conversations of 1-6 turns (an optional system prompt, user and assistant alternating),
    their contents made of the corpus's fragments, some with leading or trailing whitespace."""
    conversations = []
    for _ in range(count):
        turns = [{"role": "system", "content": fragment(rng)}] if rng.random() < 0.5 else []
        for t in range(rng.randint(1, 3)):
            for role in ("user", "assistant"):
                content = "".join(fragment(rng) + rng.choice(SEPARATORS)
                                  for _ in range(rng.randint(1, 4)))
                if rng.random() < 0.2:
                    content = rng.choice(SPACES) + content
                turns.append({"role": role, "content": content})
        conversations.append(turns)
    return conversations


def chat_ids_and_mask(style, conversation):
    """transformers' apply_chat_template ids, and the loss mask Kelvin's rule gives on these
    templates: 1 on the ids that start inside an assistant message's (trimmed, for llama3) content
    and on its end-of-turn token."""
    tokenizer = PreTrainedTokenizerFast.from_pretrained(os.path.join(OUT, style))
    rendered = tokenizer.apply_chat_template(conversation, tokenize=False)
    ids = tokenizer.apply_chat_template(conversation, tokenize=True)
    ids = ids["input_ids"] if not isinstance(ids, list) else ids
    encoding = tokenizer.backend_tokenizer.encode(rendered, add_special_tokens=False)
    assert encoding.ids == ids, "the rendered text does not tokenize to the template's ids"
    end_token = "<|eot_id|>" if style == "llama3_style" else "<|im_end|>"
    spans, search_from = [], 0
    for message in conversation:
        content = message["content"].strip() if style == "llama3_style" else message["content"]
        start = rendered.index(content + end_token, search_from)
        end = start + len(content) + len(end_token)
        if message["role"] == "assistant":
            spans.append((start, end))
        search_from = end
    mask = [int(any(a <= begin < b for a, b in spans)) for begin, _ in encoding.offsets]
    return ids, mask


def read_indexed_dataset(prefix):
    """The documents of a Megatron .bin/.idx pair (MMIDIDX version 1) as lists of ids."""
    with open(prefix + ".idx", "rb") as f:
        assert f.read(9) == b"MMIDIDX\x00\x00"
        version, dtype_code = np.frombuffer(f.read(9), dtype=np.uint8)[[0, 8]]
        count, doc_count = np.frombuffer(f.read(16), dtype=np.int64)
        sizes = np.frombuffer(f.read(4 * count), dtype=np.int32)
    dtype = {1: np.uint8, 4: np.int32, 8: np.uint16}[int(dtype_code)]
    tokens = np.fromfile(prefix + ".bin", dtype=dtype)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return [tokens[offsets[i]:offsets[i + 1]].tolist() for i in range(count)]


def prepare(kelvin, records, style):
    """`kelvin prepare-data --tokenizer` of `records` (JSON Lines) with the style's tokenizer:
    the documents and their loss masks, and the size of the samples file."""
    work = tempfile.mkdtemp(prefix="kelvin_tokenizer_check_")
    samples, prefix = os.path.join(work, "samples.jsonl"), os.path.join(work, style)
    with open(samples, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    subprocess.run([kelvin, "prepare-data", samples, "--out", prefix, "--tokenizer",
                    os.path.join(OUT, style)], check=True, capture_output=True)
    documents = read_indexed_dataset(prefix)
    masks = (read_indexed_dataset(prefix + "_loss_mask")
             if os.path.exists(prefix + "_loss_mask.idx") else None)
    size = os.path.getsize(samples)
    shutil.rmtree(work)
    return documents, masks, size


def check_prepare_data(kelvin, lines, tokenizers):
    kept = [line for line in lines if line]  # an empty text is an error there, as it should be
    for style, tokenizer in tokenizers.items():
        documents, _, size = prepare(kelvin, [{"text": line} for line in kept], style)
        eod = tokenizer.token_to_id("<|end_of_text|>" if style == "llama3_style"
                                    else "<|endoftext|>")  # the tokenizer_config's eos
        expected = [e.ids + [eod] for e in tokenizer.encode_batch(kept)]
        equal = sum(d == e for d, e in zip(documents, expected))
        print(f"{style}: kelvin prepare-data equals tokenizers on {equal} of {len(kept)} lines "
              f"({size / 1e6:.1f} MB of JSON Lines)")
        assert len(documents) == len(expected) and equal == len(kept)


def check_chat_prepare_data(kelvin, conversations, expected):
    for style, cases in expected.items():
        ids, masks, _ = prepare(kelvin, [{"messages": c} for c in conversations], style)
        equal = sum((i, m) == case for i, m, case in zip(ids, masks, cases))
        print(f"{style}: kelvin prepare-data chat ids and loss mask equal apply_chat_template's "
              f"on {equal} of {len(cases)} conversations")
        assert equal == len(cases)


def main(kelvin):
    rng = random.Random(0)
    os.makedirs(OUT, exist_ok=True)
    lines = make_corpus(rng)
    print(f"corpus: {len(lines)} lines, {sum(len(l.encode()) for l in lines) / 1e6:.1f} MB")
    tokenizers = {style: train(lines, style) for style in STYLES}
    for style, tokenizer in tokenizers.items():
        def normal(line):  # what decode(encode(x)) gives back: x, in NFC for qwen2_style
            return unicodedata.normalize("NFC", line) if style == "qwen2_style" else line
        round_trips = sum(tokenizer.decode(tokenizer.encode(l, add_special_tokens=False).ids,
                                           skip_special_tokens=False) == normal(l) for l in lines)
        print(f"{style}: vocabulary {tokenizer.get_vocab_size()}, tokenizers' own decode(encode) "
              f"round trip on {round_trips} of {len(lines)} lines")
    picked = HARD_CASES + rng.sample(lines[len(HARD_CASES):], 600 - len(HARD_CASES)) + NFC_CASES
    with open(os.path.join(OUT, "cases.jsonl"), "w", encoding="utf-8") as f:
        for line in picked:
            record = {"text": line}
            for style, tokenizer in tokenizers.items():
                record[style] = tokenizer.encode(line).ids
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    conversations = make_conversations(rng, 300)
    chats = {style: [chat_ids_and_mask(style, c) for c in conversations]
             for style in STYLES}
    with open(os.path.join(OUT, "chat_cases.jsonl"), "w", encoding="utf-8") as f:
        for n, conversation in enumerate(conversations[:100]):
            record = {"messages": conversation}
            for style, cases in chats.items():
                record[style] = {"ids": cases[n][0], "loss_mask": cases[n][1]}
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    with open(os.path.join(OUT, "versions.json"), "w") as f:
        json.dump({"tokenizers": __import__("tokenizers").__version__,
                   "transformers": __import__("transformers").__version__}, f, indent=1)
    if kelvin:
        check_prepare_data(kelvin, lines, tokenizers)
        check_chat_prepare_data(kelvin, conversations, chats)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
