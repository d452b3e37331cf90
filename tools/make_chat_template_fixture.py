#!/usr/bin/env python3
"""Records how Python renders Kelvin's test chat templates, for the C++ tests (CI has no Python).

Each template in tests/fixtures/chat_templates/ (written for the tests, each doing what a model
family's template does) is rendered on a few dozen generated conversations (with and without a
system message, with tools and tool calls where the template has them, with and without
add_generation_prompt) by jinja2 in transformers' own environment (its _compile_jinja_template:
trim_blocks, lstrip_blocks, loop controls, its tojson, raise_exception and strftime_now, with the
date fixed to 2026-12-07) and by apply_chat_template(tokenize=True) with a fixture tokenizer.
Writes tests/fixtures/chat_templates/renderings.jsonl, one record per rendering:
  template, tokenizer (a directory under tests/fixtures/tokenizer), messages, tools,
  add_generation_prompt, text (jinja2's rendering, or the error a template raised),
  ids (apply_chat_template's), loss_mask (null where the rule does not apply: a render it needs
  fails, or the prompt is no prefix of the turn; Kelvin's rule, computed here from Python renderings:
  for each assistant message i, the ids that start in render(messages[:i+1]) after
  render(messages[:i], add_generation_prompt=True), less whitespace after the span's last special
  token), and for a template with {% generation %} blocks assistant_masks
  (return_assistant_tokens_mask's).

Usage: python3 tools/make_chat_template_fixture.py   (pinned versions: tools/requirements.txt)
"""

import datetime as real_datetime
import json
import os
import random

import jinja2
import transformers
from transformers import PreTrainedTokenizerFast
from transformers.utils import chat_template_utils

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TEMPLATES = os.path.join(ROOT, "tests", "fixtures", "chat_templates")
TOKENIZERS = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
FIXED_DATE = real_datetime.datetime(2026, 12, 7, 9, 30, 0)

# template -> (tokenizer fixture, whether it renders tools and tool calls)
STYLES = {
    "llama31_style": ("llama3_style", True),
    "qwen25_style": ("qwen2_style", True),
    "smollm2_style": ("qwen2_style", False),
    "mistral_style": ("llama3_style", False),
    "llama2_style": ("llama3_style", False),
    "gemma_style": ("llama3_style", False),
    "chatml_generation": ("qwen2_style", False),
}


class FixedDatetime(real_datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_DATE


chat_template_utils.datetime = FixedDatetime  # what the template's strftime_now() reads

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city, today.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city, e.g. Zürich"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds two numbers.",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}},
]

USER_LINES = ["What is 2 + 2?", "  Tell me a joke about cats.  ", "Translate 'bonjour' to English.",
              "Wie spät ist es?", "列出三种水果。", "Why is the sky blue?\nAnswer briefly.",
              "Summarise: the quick brown fox jumps over the lazy dog."]
ASSISTANT_LINES = ["4.", "Why did the cat sit on the computer? To keep an eye on the mouse! ",
                   "'Bonjour' means 'hello'.", "Es ist 9 Uhr.", "苹果、香蕉、橙子。",
                   "Rayleigh scattering: blue light scatters more.\n", "A fox jumps over a dog."]
SYSTEM_LINES = ["You are terse.", "Answer as a pirate would.\n", "  Be kind and exact.  "]


def conversations(rng, with_tools):
    """(messages, tools) pairs: plain chats of 1-3 exchanges with and without a system message,
    and for tool templates a tool call with its result."""
    out = []
    for n in range(12):
        messages = []
        if n % 3 != 0:
            messages.append({"role": "system", "content": rng.choice(SYSTEM_LINES)})
        for _ in range(1 + n % 3):
            messages.append({"role": "user", "content": rng.choice(USER_LINES)})
            messages.append({"role": "assistant", "content": rng.choice(ASSISTANT_LINES)})
        out.append((messages, None))
    if with_tools:
        for n in range(6):
            messages = [{"role": "system", "content": "You can use tools."}] if n % 2 else []
            messages += [
                {"role": "user", "content": "What is the weather in Zürich, and what is 3 + 4?"},
                {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
                    "name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}}]},
                {"role": "tool", "content": "{\"temperature\": 3}"},
                {"role": "assistant", "content": "It is 3 °C in Zürich."},
            ]
            out.append((messages, TOOLS if n < 4 else None))
    return out


def special_ids(tokenizer):
    return {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}


def kelvin_loss_mask(compiled, tokenizer, messages, tools, special_tokens, text, encoding):
    """Kelvin's rule (data/chat_template/chat.h) on Python's renderings; offsets are characters."""
    specials = special_ids(tokenizer)
    mask = [0] * len(encoding.ids)
    starts = [begin for begin, _ in encoding.offsets]
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = compiled.render(messages=messages[:i], tools=tools, documents=None,
                                 add_generation_prompt=True, **special_tokens)
        turn = compiled.render(messages=messages[:i + 1], tools=tools, documents=None,
                               add_generation_prompt=False, **special_tokens)
        assert turn.startswith(prompt) and text.startswith(turn), "the rule does not apply"
        inside = [t for t, s in enumerate(starts) if len(prompt) <= s < len(turn)]
        if not inside:
            continue
        end = inside[-1] + 1
        for t in reversed(inside):
            if encoding.ids[t] in specials:
                after = text[encoding.offsets[t][1]:(encoding.offsets[inside[-1]][1])]
                if after.strip() == "":
                    end = t + 1
                break
        for t in inside:
            if t < end:
                mask[t] = 1
    return mask


# Constructs of the engine one at a time: (template, variables). Python's output (or its error
# class) goes to engine_cases.jsonl for tests/data/chat_template/template_test.cc.
ENGINE_CASES = [
    ("a\n{% if x %}\n  yes\n{% endif %}\nb\n", {"x": True}),
    ("  {% if x %}in{% endif %}  \n{#- c -#}  end", {"x": False}),
    ("{%+ if true %}x{% endif +%}\ny", {}),
    ("{{- '  a  ' -}}   {{ 'b' }}\n\n{{- 'c' }}", {}),
    ("line\r\nnext\r\n", {}),
    ("{# a {{ comment }} #}\n{{ 1 }}", {}),
    ("{{ 1 + 2 * 3 - 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }}", {}),
    ("{{ 1.5 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 1e16 }} {{ 3.0 }} {{ 10 / 4 }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ true }} {{ 'x' + 'y' }} {{ [1] + [2, 'b'] }}", {}),
    ("{{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 2 < 3 }} {{ 'b' >= 'a' }} {{ true == 1 }}", {}),
    ("{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}", {}),
    ("{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ not [] }} {{ none or [] }}", {}),
    ("{{ 'y' if x else 'n' }} {{ 'y' if not x }}|", {"x": False}),
    ("{{ m[1:] }} {{ m[:-1] }} {{ m[::-1] }} {{ m[-1] }} {{ s[1:3] }} {{ s[-2:] }} {{ s[0] }}",
     {"m": [1, 2, 3], "s": "héllo"}),
    ("{{ d.role }} {{ d['role'] }} {{ d.missing is defined }} {{ d.items() | list }}",
     {"d": {"role": "user", "content": "c"}}),
    ("{{ d.get('role') }} {{ d.get('x', 5) }} {{ d.get('x') }} {{ d.keys() | list }} "
     "{{ d.values() | list }}", {"d": {"role": "user", "n": 1}}),
    ("{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' x') }}|{{ s.split() }}"
     "|{{ 'a,b,,c'.split(',') }}|{{ 'a b c'.split(' ', 1) }}", {"s": " x hi there \n"}),
    ("{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'ab'.upper() }} "
     "{{ 'AB'.lower() }} {{ 'hello world'.title() }} {{ 'aXb'.replace('X', '-') }} "
     "{{ 'abc'.find('c') }}", {}),
    ("{{ s | trim }}|{{ s | length }}|{{ [1, 2] | length }}|{{ s | upper }}|{{ 'ab' | capitalize }}"
     "|{{ 'a b' | title }}|{{ 'AB' | lower }}", {"s": "  ok  "}),
    ("{{ x | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} "
     "{{ [1, 2, 3] | join('-') }} {{ [1, 2] | first }} {{ [1, 2] | last }} {{ 'ab' | list }}",
     {}),
    ("{{ ms | map(attribute='role') | join(',') }} {{ ms | selectattr('role', 'equalto', 'user') "
     "| list | length }} {{ ms | rejectattr('role', 'eq', 'user') | map(attribute='c') | list }} "
     "{{ ms | selectattr('c') | list | length }}",
     {"ms": [{"role": "user", "c": "a"}, {"role": "assistant", "c": ""}, {"role": "user", "c": "b"}]}),
    ("{{ {'b': 1, 'a': [1, 'é', none, true, 1.5]} | tojson }} {{ {'b': 1, 'a': 2} | tojson(indent=2) }}"
     " {{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }} {{ 'x\n\"' | tojson }} {{ [] | tojson(indent=4) }}",
     {}),
    ("{{ '42' | int }} {{ '4.5' | float }} {{ 'x' | int }} {{ 4.7 | int }} {{ 2.5 | round }} "
     "{{ 3.14159 | round(2) }} {{ -3 | abs }} {{ 'a-b' | replace('-', '+') }} {{ 'x' | safe }} "
     "{{ 5 | string }} {{ {'a': 1} | items | list }}", {}),
    ("{{ x is defined }} {{ y is undefined }} {{ none is none }} {{ 's' is string }} "
     "{{ {} is mapping }} {{ [] is iterable }} {{ 's' is sequence }} {{ 1.5 is number }} "
     "{{ true is boolean }} {{ true is true }} {{ false is false }} {{ 3 is equalto 3 }} "
     "{{ 3 is eq(4) }} {{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ x is not none }}",
     {"x": 1}),
    ("{% for m in ms %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
     "{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}", {"ms": ["a", "b"]}),
    ("{% for m in ms if m != 'b' %}{{ m }}{{ loop.index }}{% else %}none{% endfor %}"
     "{% for m in [] %}x{% else %}empty{% endfor %}", {"ms": ["a", "b", "c"]}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
     {"d": {"z": 1, "a": 2}}),
    ("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}"
     "{% endif %}{{ i }}{% endfor %} {{ range(2, 8, 3) | list }}", {}),
    ("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}"
     "{% set ns = namespace(x=1, found=false) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}"
     "{% endfor %}{{ ns.x }}{{ ns.found }}", {}),
    ("{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set block %}in {{ a }}{% endset %}[{{ block }}]", {}),
    ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
     "{{ greet('A') }} {{ greet('B', punct='?') }} {{ greet(name='C') }}", {}),
    ("{% if a %}1{% elif b %}2{% elif c %}3{% else %}4{% endif %}", {"a": 0, "b": "", "c": [0]}),
    ("{{ messages[0]['content'] | trim + '|' }}{{ 'a' + 'b' | upper }}{{ -2 ** 2 }}", {
        "messages": [{"content": "  x  "}]}),
    ("{{ x }}|{{ x.y is defined }}|{{ x | length }}|{% for i in x %}no{% endfor %}|"
     "{{ x | default('u') }}|{{ x ~ 'a' }}", {}),
    ("{{ 'a' * 3 }} {{ [0] * 2 }} {{ none }} {{ [none, true, 'q', \"it's\"] }} {{ {'k': 'v'} }}", {}),
    ("{{ raise_exception('bad role: ' ~ r) }}", {"r": "bot"}),
    ("{{ strftime_now('%Y-%m-%d %A %d %b %B') }}", {}),
    ("{{ x.y }}", {}),
    ("{{ [].append(1) }}", {}),
    ("{{ 1 + 'a' }}", {}),
    ("{{ none.x }}", {}),
]


def engine_cases():
    records = []
    for template, variables in ENGINE_CASES:
        record = {"template": template, "variables": variables}
        try:
            record["output"] = chat_template_utils._compile_jinja_template(template).render(
                **variables)
        except Exception as error:  # the C++ side must fail too; its message is its own
            record["error"] = type(error).__name__ + ": " + str(error)
        records.append(record)
    path = os.path.join(TEMPLATES, "engine_cases.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(f"{len(records)} engine cases ({sum('error' in r for r in records)} errors) into {path}")


def main():
    engine_cases()
    rng = random.Random(7)
    records = []
    for name, (tokenizer_dir, with_tools) in STYLES.items():
        with open(os.path.join(TEMPLATES, name + ".jinja"), encoding="utf-8") as f:
            source = f.read()
        tokenizer = PreTrainedTokenizerFast.from_pretrained(os.path.join(TOKENIZERS, tokenizer_dir))
        tokenizer.chat_template = source
        compiled = chat_template_utils._compile_jinja_template(source)
        special_tokens = tokenizer.special_tokens_map
        generation = "{% generation %}" in source or "{%- generation -%}" in source
        cases = conversations(rng, with_tools)
        # A few with a bad role or order: the templates that raise must raise.
        cases.append(([{"role": "assistant", "content": "Hello first."},
                       {"role": "user", "content": "Hi."}], None))
        for messages, tools in cases:
            for add_generation_prompt in (False, True):
                prompt_messages = messages[:-1] if add_generation_prompt else messages
                record = {"template": name, "tokenizer": tokenizer_dir, "messages": prompt_messages,
                          "tools": tools, "add_generation_prompt": add_generation_prompt}
                try:
                    text = compiled.render(messages=prompt_messages, tools=tools, documents=None,
                                           add_generation_prompt=add_generation_prompt,
                                           **special_tokens)
                except jinja2.exceptions.TemplateError as error:
                    record["error"] = str(error)
                    records.append(record)
                    continue
                record["text"] = text
                out = tokenizer.apply_chat_template(
                    prompt_messages, tools=tools, add_generation_prompt=add_generation_prompt,
                    tokenize=True, return_dict=True, return_assistant_tokens_mask=generation)
                assert tokenizer.apply_chat_template(
                    prompt_messages, tools=tools, add_generation_prompt=add_generation_prompt,
                    tokenize=False) == text
                record["ids"] = list(out["input_ids"])
                if not add_generation_prompt:
                    encoding = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)
                    assert encoding.ids == record["ids"]
                    try:  # None: a render the rule needs fails (an assistant turn comes first)
                        record["loss_mask"] = kelvin_loss_mask(
                            compiled, tokenizer, prompt_messages, tools, special_tokens, text,
                            encoding)
                    except (jinja2.exceptions.TemplateError, AssertionError):
                        record["loss_mask"] = None
                    if generation:
                        record["assistant_masks"] = list(out["assistant_masks"])
                records.append(record)
    path = os.path.join(TEMPLATES, "renderings.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    with open(os.path.join(TEMPLATES, "versions.json"), "w") as f:
        json.dump({"jinja2": jinja2.__version__, "transformers": transformers.__version__,
                   "date": FIXED_DATE.isoformat()}, f, indent=1)
    print(f"{len(records)} renderings of {len(STYLES)} templates "
          f"({sum('error' in r for r in records)} raise) into {path}")


if __name__ == "__main__":
    main()
