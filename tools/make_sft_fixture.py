"""Writes tests/fixtures/sft/copy_digits.jsonl: fine-tuning samples in the JSON Lines form that
`kelvin prepare-data` reads, for the SFT example job (configs/sft_copy_tiny_cpu.textproto) and
the command-line tests; and copy_digits_chat.jsonl, the same task as chat samples for
`prepare-data --tokenizer` (configs/sft_chat_tiny_cpu.textproto). Standard library only;
deterministic.

Each sample asks to repeat 3 to 8 digits: input_ids = [1, d_1 .. d_n, 2, d_1 .. d_n, 3] with digits
as token ids 10..19 (1 starts the prompt, 2 ends it, 3 ends the answer); 1500 samples are enough
for the tiny model to learn the copy rather than memorise the answers (the held-out loss falls
with the training loss). Hugging Face-style labels:
-100 over the prompt, the token itself over the answer. Every fifth sample gives a loss_mask
instead of labels, and every seventh carries a "text" field, as tokenizer pipelines often leave.

The chat file holds 1500 conversations: a user asks "Repeat: 4 0 5 5" (3 to 8 digits), the
assistant answers "4 0 5 5"; every third starts with a system prompt.

Run: python3 tools/make_sft_fixture.py
"""
import json
import os
import random

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "sft")
OUT = os.path.join(FIXTURES, "copy_digits.jsonl")
SAMPLES = 1500


def main():
    rng = random.Random(20261130)
    with open(OUT, "w") as out:
        for i in range(SAMPLES):
            digits = [rng.randint(10, 19) for _ in range(rng.randint(3, 8))]
            prompt = [1] + digits + [2]
            answer = digits + [3]
            sample = {"input_ids": prompt + answer}
            if i % 5 == 4:
                sample["loss_mask"] = [0] * len(prompt) + [1] * len(answer)
            else:
                sample["labels"] = [-100] * len(prompt) + answer
            if i % 7 == 6:
                sample["text"] = "repeat " + " ".join(str(d - 10) for d in digits)
            out.write(json.dumps(sample, separators=(",", ":")) + "\n")
    rng = random.Random(20261202)
    with open(os.path.join(FIXTURES, "copy_digits_chat.jsonl"), "w") as out:
        for i in range(SAMPLES):
            digits = " ".join(str(rng.randint(0, 9)) for _ in range(rng.randint(3, 8)))
            messages = [{"role": "system", "content": "You repeat digits."}] if i % 3 == 0 else []
            messages += [{"role": "user", "content": "Repeat: " + digits},
                         {"role": "assistant", "content": digits}]
            out.write(json.dumps({"messages": messages}) + "\n")


if __name__ == "__main__":
    main()
