"""Tokenizer fixtures for the families beyond tools/make_tokenizer_fixture.py's three, from Hugging
Face tokenizers (the ids Kelvin's C++ tokenizer must give; the C++ tests read them without Python).

Pinned: tokenizers==0.23.3 (tools/requirements.txt).
Run:    python tools/make_tokenizer_family_fixtures.py   (after make_tokenizer_fixture.py: it
        reuses that script's corpus and the lines of tests/fixtures/tokenizer/cases.jsonl)

Families, each trained on the same >= 5 MB multilingual corpus and written to
tests/fixtures/tokenizer/<name>/ (tokenizer.json, tokenizer_config.json):
  smollm_style:    byte-level BPE with SmolLM2's pre-tokenizer (Digits(individual_digits) +
                   ByteLevel(use_regex)) whose vocabulary lacks 21 of the 256 byte symbols, as
                   SmolLM2's does (13 bytes that never occur in UTF-8 and 8 control bytes, 0x0B
                   and 0x0C among them, which the corpus holds): tokenizers drops those bytes;
  llama2_style:    Llama-2/TinyLlama's SentencePiece-style BPE as their tokenizer.json has it:
                   normalizer Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer, byte_fallback
                   with <0x00>..<0xFF>, unk_token <unk> (fuse_unk), the decoder Replace("▁", " ")
                   + ByteFallback + Fuse + Strip(" ", 1, 0), <s> first by TemplateProcessing; the
                   merges trained on whole lines (a piece may cross words), and a non-special
                   added token with "normalized": true (matched after the normalizer);
  metaspace_style: the same model trained within words, read through a Metaspace pre-tokenizer
                   (prepend_scheme "first", split false: transformers' non-legacy Llama files)
                   and a vocabulary that lacks <0xF0>, so 4-byte characters become <unk>; added
                   tokens with lstrip and rstrip;
  metaspace_split_style: metaspace_style's model with prepend_scheme "always" and split true,
                   and the Metaspace decoder.
tests/fixtures/tokenizer/family_cases.jsonl records, for each line of cases.jsonl and for extra
lines (control bytes, added tokens beside spaces, byte-fallback and unknown characters), every
family's ids (add_special_tokens=True) and tokenizers' decode of them (skip_special_tokens
False and True); family_decode_cases.jsonl the decode of id lists that hold ids beyond the
tokenizer (a model's padded vocabulary), which tokenizers skips.
"""
import json
import os
import random
import shutil
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tokenizer_fixture as base  # noqa: E402  (the corpus)

OUT = base.OUT
# SmolLM2's vocabulary lacks these 21 bytes' symbols.
MISSING_BYTES = [1, 2, 3, 4, 5, 6, 0x0B, 0x0C, 0xC0, 0xC1] + list(range(0xF5, 0x100))
EXTRA_LINES = [
    "a\x0bb\x0cc", "x\x01y", "\x0b", "tab\x0b\x0bvertical", "ends with\x0c",
    "<s>", "</s>", "<s>text</s>", "text <s> more", "  <s>  spaced  </s>  ", "<unk>",
    "<extra_id>", "a <extra_id> b", "a<extra_id>b", " <extra_id>", "<extra_id> <extra_id>",
    "<mask>", "a   <mask>   b", "a\u3000<mask>\u00a0b", "[SEP]  x", "x  [SEP]", "[SEP][SEP]  ",
    "🙂é🙂", "a🙂🙂b", "€ ü 𝄞 ½", "ℌ𝔢𝔩𝔩𝔬", "\u0000", "   ", " ", "▁", "▁▁a ▁", "a▁b",
]


def byte_level_chars():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def save(name, spec, config):
    directory = os.path.join(OUT, name)
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False, indent=1)
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
    return Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))


def smollm_style(lines):
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2048, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tokenizer.train_from_iterator(lines, trainer)
    spec = json.loads(tokenizer.to_str())
    missing = {byte_level_chars()[b] for b in MISSING_BYTES}
    model = spec["model"]
    kept = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])
            if not missing & set(t)]
    model["vocab"] = {t: i for i, t in enumerate(kept)}  # dense ids, as SmolLM2's
    model["merges"] = [m for m in model["merges"] if not missing & set("".join(m))]
    for token in spec["added_tokens"]:
        token["id"] = model["vocab"][token["content"]]
    return save("smollm_style", spec, {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"})


def sentencepiece_model(lines, split_words, drop_bytes=()):
    """A SentencePiece-style BPE model: <unk> <s> </s>, <0x00>..<0xFF>, then the trained pieces,
    trained with 160 characters in the alphabet so that the rarer ones need byte fallback."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme="always", split=split_words)
    trainer = trainers.BpeTrainer(vocab_size=3000, show_progress=False, limit_alphabet=160,
                                  special_tokens=["<unk>", "<s>", "</s>"])
    tokenizer.train_from_iterator(lines, trainer)
    model = json.loads(tokenizer.to_str())["model"]
    pieces = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    byte_tokens = ["<0x%02X>" % b for b in range(256) if b not in drop_bytes]
    vocab = pieces[:3] + byte_tokens + pieces[3:]
    model["vocab"] = {t: i for i, t in enumerate(vocab)}
    return model


def added(content, special, **flags):
    token = dict(id=0, content=content, single_word=False, lstrip=False, rstrip=False,
                 normalized=not special, special=special)
    token.update(flags)
    return token


BYTE_FALLBACK_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
BOS_TEMPLATE = {
    "type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
             {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
SPECIALS = [added("<unk>", True), added("<s>", True), added("</s>", True)]
SP_CONFIG = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


def sentencepiece_spec(model, normalizer, pre_tokenizer, decoder, extra_added):
    tokens = [dict(t) for t in SPECIALS + extra_added]
    next_id = len(model["vocab"])
    for token in tokens:  # the ids tokenizers gives them (in the vocabulary, else appended)
        token["id"] = model["vocab"].get(token["content"], next_id)
        next_id += token["id"] == next_id
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": tokens,
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer,
            "post_processor": BOS_TEMPLATE, "decoder": decoder, "model": model}


def families(lines):
    legacy = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    whole_lines = sentencepiece_model(lines, split_words=False)
    within_words = sentencepiece_model(lines, split_words=True, drop_bytes=(0xF0,))
    return {
        "smollm_style": smollm_style(lines),
        "llama2_style": save("llama2_style", sentencepiece_spec(
            whole_lines, legacy, None, BYTE_FALLBACK_DECODER,
            [added("<extra_id>", False)]), SP_CONFIG),
        "metaspace_style": save("metaspace_style", sentencepiece_spec(
            within_words, None,
            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
            BYTE_FALLBACK_DECODER,
            [added("<mask>", True, lstrip=True), added("[SEP]", False, rstrip=True)]), SP_CONFIG),
        "metaspace_split_style": save("metaspace_split_style", sentencepiece_spec(
            within_words, None,
            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True},
            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True},
            [added("<mask>", True, lstrip=True, rstrip=True)]), SP_CONFIG),
    }


def main():
    rng = random.Random(0)
    lines = base.make_corpus(rng)
    tokenizers = families(lines)
    with open(os.path.join(OUT, "cases.jsonl"), encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f] + EXTRA_LINES
    with open(os.path.join(OUT, "family_cases.jsonl"), "w", encoding="utf-8") as f:
        for text in texts:
            record = {"text": text}
            for name, tokenizer in tokenizers.items():
                ids = tokenizer.encode(text).ids
                record[name] = {"ids": ids, "decoded": tokenizer.decode(ids, False),
                                "decoded_skip": tokenizer.decode(ids, True)}
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    decode_rng = random.Random(1)
    with open(os.path.join(OUT, "family_decode_cases.jsonl"), "w", encoding="utf-8") as f:
        for name, tokenizer in tokenizers.items():
            size = tokenizer.get_vocab_size()
            # Ids whose text is whole characters (Kelvin's byte-level decode keeps bytes that are
            # not UTF-8, where tokenizers shows U+FFFD), and ids of a padded vocabulary.
            whole = [i for i in range(size) if "\ufffd" not in tokenizer.decode([i], False)]
            beyond = list(range(size, size + 64))
            for _ in range(20):
                ids = [decode_rng.choice(whole if decode_rng.random() < 0.7 else beyond)
                       for _ in range(decode_rng.randint(1, 12))]
                f.write(json.dumps({"tokenizer": name, "ids": ids, "vocab_size": size,
                                    "decoded": tokenizer.decode(ids, False),
                                    "decoded_skip": tokenizer.decode(ids, True)},
                                   ensure_ascii=False) + "\n")
    for name, tokenizer in tokenizers.items():
        dropped = sum(len(tokenizer.encode(t, add_special_tokens=False).ids) == 0 for t in texts if t)
        print(f"{name}: vocabulary {tokenizer.get_vocab_size()}, {dropped} non-empty lines with no id")


if __name__ == "__main__":
    main()
