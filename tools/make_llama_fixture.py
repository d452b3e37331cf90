"""Golden fixtures for Kelvin's Llama parity tests, from Hugging Face's LlamaForCausalLM.

Pinned: torch==2.15.0, transformers==5.23.0, safetensors==0.8.0 (tools/requirements.txt).
Run:    python tools/make_llama_fixture.py            (writes tests/fixtures/llama_tiny/)

A tiny random model (hidden 64, 3 layers, 4 heads, 2 KV heads, vocab 160, llama3 rope scaling with
a short original context so that all three frequency bands occur, untied embeddings) is saved with
save_pretrained. For two cases, `plain` (ordinary causal rows) and `packed` (rows of several
documents: position ids restart, and HF gets the equivalent block-diagonal causal mask), the script
records in <case>.safetensors, all float32:
  input_ids, labels, position_ids [B, T] int64 (labels already shifted: the label of position t
  is the token at t + 1; -100 = no loss), logits [B, T, V] f32, loss [] f32 (mean over
  non-ignored labels), grad.<hf parameter name> f32 for every parameter, and adamw_losses [5] f64:
  the losses before each of 5 AdamW steps (lr 1e-3, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on
  parameters with ndim >= 2, none on norms; torch.optim.AdamW foreach=False) on the same batch.
The packed case is checked here against running each document alone (the mask is honoured).
"""
import json
import os

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "llama_tiny")
B, T = 2, 24
LR, BETAS, EPS, WEIGHT_DECAY, STEPS = 1e-3, (0.9, 0.95), 1e-8, 0.1, 5


def make_model():
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=160, max_position_embeddings=256, rms_norm_eps=1e-5,
        rope_theta=10000.0, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        torch_dtype="float32", attn_implementation="eager")
    model = LlamaForCausalLM(config)
    # Non-trivial norm weights, so a wrong norm formula cannot hide behind weights of ones.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model.float()


def shifted_labels(ids, ignore):
    labels = torch.full_like(ids, -100)
    labels[:, :-1] = ids[:, 1:]
    labels[ignore] = -100
    return labels


def block_causal_mask(position_ids):
    """[B, 1, T, T] additive mask: token t sees s <= t of its own document (positions restart)."""
    b, t = position_ids.shape
    doc = torch.cumsum((position_ids == 0).long(), dim=1)  # document number of every token
    causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
    allowed = causal[None] & (doc[:, :, None] == doc[:, None, :])
    mask = torch.zeros(b, 1, t, t)
    mask.masked_fill_(~allowed[:, None], torch.finfo(torch.float32).min)
    return mask


def loss_of(model, batch):
    out = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                attention_mask=batch.get("mask"))
    logits = out.logits.float()
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1), ignore_index=-100)
    return logits, loss


def check_packed_equals_separate(batch):
    model = make_model()
    with torch.no_grad():
        packed_logits, _ = loss_of(model, batch)
        positions = batch["position_ids"]
        for row in range(positions.shape[0]):
            starts = (positions[row] == 0).nonzero().flatten().tolist() + [positions.shape[1]]
            for begin, end in zip(starts[:-1], starts[1:]):
                alone = model(input_ids=batch["input_ids"][row:row + 1, begin:end]).logits
                err = (alone[0] - packed_logits[row, begin:end]).abs().max().item()
                assert err < 1e-5, f"packed row {row} [{begin}, {end}) differs by {err}"


def record_case(name, batch):
    model = make_model()
    logits, loss = loss_of(model, batch)
    loss.backward()
    tensors = {
        "input_ids": batch["input_ids"].contiguous(),
        "labels": batch["labels"].contiguous(),
        "position_ids": batch["position_ids"].contiguous(),
        "logits": logits.detach().contiguous(),
        "loss": loss.detach().reshape([]),
    }
    for pname, p in model.named_parameters():
        tensors["grad." + pname] = p.grad.detach().contiguous()

    model = make_model()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS, foreach=False)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        _, step_loss = loss_of(model, batch)
        losses.append(step_loss.item())
        step_loss.backward()
        opt.step()
    tensors["adamw_losses"] = torch.tensor(losses, dtype=torch.float64)
    save_file(tensors, os.path.join(OUT, name + ".safetensors"))
    print(f"{name}: loss {loss.item():.6f}, AdamW losses {[round(x, 6) for x in losses]}")


def main():
    os.makedirs(OUT, exist_ok=True)
    make_model().save_pretrained(os.path.join(OUT, "model"), safe_serialization=True)

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 160, (B, T), generator=g)
    ignore = torch.zeros(B, T, dtype=torch.bool)
    ignore[0, :5] = True   # e.g. a prompt without loss
    ignore[1, 10:13] = True
    plain = {"input_ids": ids, "labels": shifted_labels(ids, ignore),
             "position_ids": torch.arange(T).repeat(B, 1)}
    record_case("plain", plain)

    # Row 0: documents of 10, 9 and 5 tokens; row 1: 7 and 17. No loss across a boundary.
    positions = torch.tensor([list(range(10)) + list(range(9)) + list(range(5)),
                              list(range(7)) + list(range(17))])
    labels = shifted_labels(ids, ignore)
    labels[(torch.roll(positions, -1, dims=1) == 0)] = -100
    packed = {"input_ids": ids, "labels": labels, "position_ids": positions,
              "mask": block_causal_mask(positions)}
    check_packed_equals_separate(packed)
    record_case("packed", packed)
    with open(os.path.join(OUT, "versions.json"), "w") as f:
        json.dump({"torch": torch.__version__, "transformers": __import__("transformers").__version__},
                  f, indent=1)


if __name__ == "__main__":
    main()
