#!/usr/bin/python3
"""Reference for tests/test-lora.c: plain PyTorch LoRA, as PEFT defines it, over a GPT-2 with
GPT2LMHeadModel's module names, loading Cohort's files strictly (float64).

  torch_lora_ref.py DIR TOKENS

DIR holds model.safetensors (the base, GPT2Model names), adapter/ (a PEFT folder:
adapter_config.json, adapter_model.safetensors) and optionally merged/model.safetensors.
TOKENS: 3 int32 (n_head, B, T), then B*T inputs and B*T targets (int32).
Prints the mean cross-entropy with the adapter, then one line per adapter tensor:
its name and its gradient's values; then, with merged/, "merged" and the largest
|merged - (W + alpha/r * delta)| relative to max|W|, and the merged model's loss.
"""
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = "base_model.model."


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    header.pop("__metadata__", None)
    out = {}
    for name, v in header.items():
        assert v["dtype"] == "F32", name
        b, e = v["data_offsets"]
        t = torch.frombuffer(bytearray(data[b:e]), dtype=torch.float32)
        out[name] = t.reshape(v["shape"]).double()
    return out


class Conv1D(nn.Module):
    """Hugging Face's Conv1D: weight [in, out]."""

    def __init__(self, nx, nf):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(nx, nf, dtype=torch.float64))
        self.bias = nn.Parameter(torch.zeros(nf, dtype=torch.float64))

    def forward(self, x):
        return x @ self.weight + self.bias


def scaling(cfg):
    """PEFT's LoraLayer.update_layer: alpha / r, or alpha / sqrt(r) with use_rslora."""
    r = cfg["r"]
    return cfg["lora_alpha"] / (math.sqrt(r) if cfg.get("use_rslora", False) else r)


class LoraConv1D(nn.Module):
    """PEFT's LoRA layer over a Conv1D (fan_in_fan_out): base(x) + B(A(x)) * scaling."""

    def __init__(self, base, r, scale):
        super().__init__()
        self.base = base
        nx, nf = base.weight.shape
        self.lora_A = nn.Linear(nx, r, bias=False, dtype=torch.float64)
        self.lora_B = nn.Linear(r, nf, bias=False, dtype=torch.float64)
        self.scaling = scale

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(x)) * self.scaling


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c, dtype=torch.float64)
        self.attn = nn.Module()
        self.attn.c_attn = Conv1D(c, 3 * c)
        self.attn.c_proj = Conv1D(c, c)
        self.ln_2 = nn.LayerNorm(c, dtype=torch.float64)
        self.mlp = nn.Module()
        self.mlp.c_fc = Conv1D(c, 4 * c)
        self.mlp.c_proj = Conv1D(4 * c, c)


class Gpt(nn.Module):
    def __init__(self, n_layer, vocab, seq, c, n_head):
        super().__init__()
        self.n_head = n_head
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(vocab, c, dtype=torch.float64)
        self.transformer.wpe = nn.Embedding(seq, c, dtype=torch.float64)
        self.transformer.h = nn.ModuleList(Block(c) for _ in range(n_layer))
        self.transformer.ln_f = nn.LayerNorm(c, dtype=torch.float64)

    def forward(self, idx, targets):
        B, T = idx.shape
        tr = self.transformer
        C = tr.wte.weight.shape[1]
        H, hd = self.n_head, C // self.n_head
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        x = tr.wte(idx) + tr.wpe.weight[:T]
        for blk in tr.h:
            q, k, v = blk.attn.c_attn(blk.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            x = x + blk.attn.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))
            h = F.gelu(blk.mlp.c_fc(blk.ln_2(x)), approximate="tanh")
            x = x + blk.mlp.c_proj(h)
        logits = tr.ln_f(x) @ tr.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def build(base, n_head):
    n_layer = 1 + max(int(k.split(".")[1]) for k in base if k.startswith("h."))
    vocab, c = base["wte.weight"].shape
    seq = base["wpe.weight"].shape[0]
    model = Gpt(n_layer, vocab, seq, c, n_head)
    # GPT2LMHeadModel.from_pretrained takes GPT2Model names under "transformer.", strictly
    model.load_state_dict({"transformer." + k: v for k, v in base.items()}, strict=True)
    return model


def attach(model, cfg):
    """Wraps every Conv1D that target_modules names (PEFT: the name, or its end after a dot)."""
    assert cfg["peft_type"] == "LORA" and cfg["fan_in_fan_out"] is True
    wrapped = []
    for name, mod in list(model.named_modules()):
        if not isinstance(mod, Conv1D):
            continue
        if not any(name == t or name.endswith("." + t) for t in cfg["target_modules"]):
            continue
        parent_name, leaf = name.rsplit(".", 1)
        setattr(model.get_submodule(parent_name), leaf,
                LoraConv1D(mod, cfg["r"], scaling(cfg)))
        wrapped.append(name)
    return wrapped


def main(d, tokens):
    with open(tokens, "rb") as f:
        raw = f.read()
    H, B, T = struct.unpack_from("<3i", raw, 0)
    toks = torch.tensor(struct.unpack_from("<%di" % (2 * B * T), raw, 12), dtype=torch.long)
    inputs, targets = toks[:B * T].view(B, T), toks[B * T:].view(B, T)

    base = read_safetensors(os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "adapter", "adapter_config.json")) as f:
        cfg = json.load(f)
    adapter = read_safetensors(os.path.join(d, "adapter", "adapter_model.safetensors"))
    model = build(base, H)
    wrapped = attach(model, cfg)
    # PEFT's file names drop the adapter name ("default") and the wrapper's "base." level
    want = {}
    for name in wrapped:
        for part in ("lora_A", "lora_B"):
            want[f"{ROOT}{name}.{part}.weight"] = model.get_submodule(name + "." + part).weight
    assert set(want) == set(adapter), (sorted(set(want) ^ set(adapter)))
    with torch.no_grad():
        for k, p in want.items():
            assert p.shape == adapter[k].shape, (k, p.shape, adapter[k].shape)
            p.copy_(adapter[k])
    for p in model.parameters():
        p.requires_grad_(False)
    for p in want.values():
        p.requires_grad_(True)
    loss = model(inputs, targets)
    loss.backward()
    out = [repr(loss.item())]
    for k in sorted(want):
        name = k[len(ROOT + "transformer."):]  # Cohort's name
        out.append(name + " " + " ".join(repr(v) for v in want[k].grad.reshape(-1).tolist()))

    merged_path = os.path.join(d, "merged", "model.safetensors")
    if os.path.exists(merged_path):
        merged = read_safetensors(merged_path)
        assert set(merged) == set(base)
        scale = scaling(cfg)
        worst = 0.0
        for k, w in base.items():
            module = "transformer." + k[: -len(".weight")] if k.endswith(".weight") else None
            expect = w.clone()
            if module in wrapped:
                a = adapter[f"{ROOT}{module}.lora_A.weight"]
                b = adapter[f"{ROOT}{module}.lora_B.weight"]
                expect = expect + (b @ a).t() * scale  # fan_in_fan_out: W is [in, out]
            worst = max(worst, ((merged[k] - expect).abs().max() / expect.abs().max()).item())
        plain = build(merged, H)
        with torch.no_grad():
            out.append("merged %r %r" % (worst, plain(inputs, targets).item()))
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
