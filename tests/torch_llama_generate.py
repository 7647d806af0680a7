#!/usr/bin/python3
"""Reference for tests/test-llama-generate.c: a Hugging Face folder (config.json and
model.safetensors, or shards listed by model.safetensors.index.json; F32, BF16 or F16) loaded
strictly with Hugging Face's names into tests/torch_llama_ref.py's float64 modules, then

  - the loss of TEXT_IDS as cohort-train --perplexity defines it: windows of SEQ_LEN inputs that
    follow one another, each predicting the token after each input, the mean over all predictions;
  - the greedy continuation of PROMPT_IDS by N_NEW tokens, each step a full forward over the
    whole sequence (no cache), the first largest logit (torch.argmax).

    torch_llama_generate.py FOLDER SEQ_LEN N_NEW TEXT_IDS PROMPT_IDS

IDS are comma-separated. Prints "loss X", "greedy id id …" and "margin M" (the smallest gap
between the largest and the second largest logit over the greedy steps).
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_llama_ref import ForCausalLM, read_safetensors  # noqa: E402


def load(folder):
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    (arch,) = cfg["architectures"]
    index = os.path.join(folder, "model.safetensors.index.json")
    state = {}
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        for shard in shards:
            state.update(read_safetensors(os.path.join(folder, shard)))
    else:
        state = read_safetensors(os.path.join(folder, "model.safetensors"))
    model = ForCausalLM(cfg, arch).double()
    model.load_state_dict(state, strict=True)
    return model


def main():
    folder, seq_len, n_new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    text = [int(v) for v in sys.argv[4].split(",")]
    prompt = [int(v) for v in sys.argv[5].split(",")]
    model = load(folder)
    with torch.no_grad():
        total, count, start = 0.0, 0, 0
        while start + 1 < len(text):
            t = min(seq_len, len(text) - 1 - start)
            inputs = torch.tensor([text[start:start + t]])
            targets = torch.tensor(text[start + 1:start + t + 1])
            logits = model(inputs)[0]
            total += F.cross_entropy(logits, targets, reduction="sum").item()
            count += t
            start += t
        print("loss", repr(total / count))
        seq, margin = list(prompt), float("inf")
        for _ in range(n_new):
            row = model(torch.tensor([seq]))[0, -1]
            top = torch.topk(row, 2).values
            margin = min(margin, (top[0] - top[1]).item())
            seq.append(int(torch.argmax(row).item()))
        print("greedy", " ".join(str(v) for v in seq[len(prompt):]))
        print("margin", repr(margin))


if __name__ == "__main__":
    main()
