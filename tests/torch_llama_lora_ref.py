#!/usr/bin/python3
"""Reference for tests/test-lora.c's llama case: PEFT's LoRA (as tests/torch_lora_ref.py, here over
nn.Linear) on the float64 LlamaForCausalLM / Qwen3ForCausalLM of tests/torch_llama_ref.py, with
transformers' module names, loading Cohort's files strictly.

  torch_llama_lora_ref.py DIR TOKENS

DIR holds config.json, model.safetensors (the base, Hugging Face names) and adapter/ (a PEFT
folder: adapter_config.json, adapter_model.safetensors). TOKENS: int32 B, T, then inputs [B*T]
and targets [B*T] (int32). Prints the mean cross-entropy with the adapter, then one line per
adapter tensor: its name without PEFT's "base_model.model." and its gradient's values.
"""
import json
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_llama_ref
from torch_lora_image_ref import LoraLinear
from torch_lora_ref import read_safetensors

ROOT = "base_model.model."


def attach(model, cfg):
    """Wraps every nn.Linear that target_modules names (PEFT: the name, or its end after a dot)."""
    assert cfg["peft_type"] == "LORA" and cfg.get("fan_in_fan_out", False) is False
    assert not cfg.get("use_rslora", False)  # LoraLinear scales by alpha / r
    assert cfg["task_type"] == "CAUSAL_LM", cfg["task_type"]
    wrapped = []
    for name, mod in list(model.named_modules()):
        if not isinstance(mod, nn.Linear):
            continue
        if not any(name == t or name.endswith("." + t) for t in cfg["target_modules"]):
            continue
        parent_name, leaf = name.rsplit(".", 1)
        setattr(model.get_submodule(parent_name), leaf, LoraLinear(mod, cfg["r"], cfg["lora_alpha"]))
        wrapped.append(name)
    return wrapped


def main(d, tokens):
    with open(os.path.join(d, "config.json")) as f:
        config = json.load(f)
    (arch,) = config["architectures"]
    with open(tokens, "rb") as f:
        raw = f.read()
    B, T = struct.unpack_from("<2i", raw, 0)
    toks = torch.tensor(struct.unpack_from("<%di" % (2 * B * T), raw, 8), dtype=torch.long)
    inputs, targets = toks[: B * T].view(B, T), toks[B * T:].view(B, T)

    model = torch_llama_ref.ForCausalLM(config, arch).double()
    model.load_state_dict(read_safetensors(os.path.join(d, "model.safetensors")), strict=True)
    with open(os.path.join(d, "adapter", "adapter_config.json")) as f:
        cfg = json.load(f)
    adapter = read_safetensors(os.path.join(d, "adapter", "adapter_model.safetensors"))
    wrapped = attach(model, cfg)
    want = {}
    for name in wrapped:
        for part in ("lora_A", "lora_B"):
            want[f"{ROOT}{name}.{part}.weight"] = model.get_submodule(name + "." + part).weight
    assert set(want) == set(adapter), sorted(set(want) ^ set(adapter))
    with torch.no_grad():
        for k, p in want.items():
            assert p.shape == adapter[k].shape, (k, p.shape, adapter[k].shape)
            p.copy_(adapter[k])
    for p in model.parameters():
        p.requires_grad_(False)
    for p in want.values():
        p.requires_grad_(True)
    logits = model(inputs)
    loss = F.cross_entropy(logits.view(-1, config["vocab_size"]), targets.reshape(-1))
    loss.backward()
    out = [repr(loss.item())]
    for k in sorted(want):
        out.append(k[len(ROOT):] + " " + " ".join(repr(v) for v in want[k].grad.reshape(-1).tolist()))
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
