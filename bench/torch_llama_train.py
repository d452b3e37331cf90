"""PyTorch eager baseline for bench/llama_train_tokens.cc: the same Llama shape through
transformers' LlamaForCausalLM (f32, CPU, its default attention: SDPA), forward + loss + backward +
torch.optim.AdamW per step, on the same thread count. Prints one JSON line like the Kelvin program.
Pinned: torch==2.15.0, transformers==5.23.0 (tools/requirements.txt).
Usage: torch_llama_train.py [batch] [seq] [timed_steps]  (threads from OMP_NUM_THREADS)"""
import json
import os
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    seq = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    timed_steps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    threads = int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads()))
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    # The small-25m preset of models/llama/llama_config.cc.
    config = LlamaConfig(hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=4, vocab_size=8192,
                         max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-5,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config).float()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    tokens = (torch.arange(batch * seq) * 7919 % 8192).view(batch, seq)
    labels = (torch.arange(batch * seq) * 104729 + 1) % 8192

    def step():
        optimizer.zero_grad(set_to_none=True)
        logits = model(input_ids=tokens).logits
        loss = torch.nn.functional.cross_entropy(logits.view(-1, 8192), labels)
        loss.backward()
        optimizer.step()

    step()
    step()
    start = time.perf_counter()
    for _ in range(timed_steps):
        step()
    seconds = time.perf_counter() - start
    print(json.dumps({"impl": "torch", "batch": batch, "seq": seq, "threads": threads,
                      "parameters": sum(p.numel() for p in model.parameters()),
                      "attention": model.config._attn_implementation,
                      "tokens_per_s": round(batch * seq * timed_steps / seconds, 1)}))


if __name__ == "__main__":
    main()
