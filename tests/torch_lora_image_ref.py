#!/usr/bin/python3
"""Reference for tests/test-lora.c: PEFT's LoRA, written in plain PyTorch, on the DiT of
tests/torch_dit_ref.py or the ResNet of tests/torch_resnet_model.py (float64), loading
Cohort's base and adapter folder strictly. Linear layers and (ResNet) convolutions named by
target_modules get PEFT's LoRA layers.

  torch_lora_image_ref.py dit|resnet BASE.safetensors ADAPTER_DIR INPUTS

INPUTS as tests/torch_dit_ref.py or tests/torch_resnet_ref.py read them (the ResNet runs in
training mode: batch statistics). Prints the loss, then one line per adapter tensor: its name
(without "base_model.model.") and its gradient's values.
"""
import json
import os
import re
import struct
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch.nn.functional as F  # noqa: E402
from torch_dit_ref import DiT, read_safetensors  # noqa: E402
from torch_resnet_model import ResNet  # noqa: E402
from torch_resnet_model import read_safetensors as read_resnet  # noqa: E402

ROOT = "base_model.model."


class LoraLinear(nn.Module):
    """PEFT's LoRA layer over an nn.Linear: base(x) + lora_B(lora_A(x)) * alpha / r."""

    def __init__(self, base, r, alpha):
        super().__init__()
        self.base = base
        self.lora_A = nn.Linear(base.in_features, r, bias=False, dtype=torch.float64)
        self.lora_B = nn.Linear(r, base.out_features, bias=False, dtype=torch.float64)
        self.scaling = alpha / r

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(x)) * self.scaling


class LoraConv2d(nn.Module):
    """PEFT's LoRA layer over an nn.Conv2d: lora_A a convolution with the base's kernel size,
    stride and padding into r channels, lora_B a 1x1 convolution out of them."""

    def __init__(self, base, r, alpha):
        super().__init__()
        self.base = base
        self.lora_A = nn.Conv2d(base.in_channels, r, base.kernel_size, base.stride, base.padding,
                                bias=False, dtype=torch.float64)
        self.lora_B = nn.Conv2d(r, base.out_channels, 1, 1, bias=False, dtype=torch.float64)
        self.scaling = alpha / r

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(x)) * self.scaling


def dit_model(base_path, data):
    L, H, C, size, ch, patch, classes, B = struct.unpack_from("<8i", data, 0)
    D = ch * size * size
    off = 32
    x_t = torch.tensor(struct.unpack_from("<%df" % (B * D), data, off), dtype=torch.float64)
    off += 4 * B * D
    t = torch.tensor(struct.unpack_from("<%df" % B, data, off), dtype=torch.float64)
    off += 4 * B
    y = torch.tensor(struct.unpack_from("<%di" % B, data, off), dtype=torch.long)
    off += 4 * B
    target = torch.tensor(struct.unpack_from("<%df" % (B * D), data, off), dtype=torch.float64)
    x_t, target = x_t.view(B, ch, size, size), target.view(B, ch, size, size)
    model = DiT(L, H, C, size, ch, patch, classes).double()
    model.load_state_dict(read_safetensors(base_path), strict=True)

    def loss_fn():
        pred = model(x_t, 1000.0 * t, y)
        return ((pred - target) ** 2).flatten(1).mean(dim=1).mean()
    return model, loss_fn


def resnet_model(base_path, data):
    n, width, ch, size, classes, B = struct.unpack_from("<6i", data, 0)
    (mom,) = struct.unpack_from("<f", data, 24)
    D = ch * size * size
    x = torch.tensor(struct.unpack_from("<%df" % (B * D), data, 28), dtype=torch.float64)
    y = torch.tensor(struct.unpack_from("<%di" % B, data, 28 + 4 * B * D), dtype=torch.long)
    x = x.view(B, ch, size, size)
    model = ResNet(n, width, ch, classes, momentum=mom).double()
    state, _ = read_resnet(base_path)
    model.load_state_dict(state, strict=True)
    model.train()
    return model, lambda: F.cross_entropy(model(x), y)


def main(family, base_path, adapter_dir, inputs):
    with open(inputs, "rb") as f:
        data = f.read()
    model, loss_fn = (dit_model if family == "dit" else resnet_model)(base_path, data)
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        cfg = json.load(f)
    assert cfg["peft_type"] == "LORA" and cfg["fan_in_fan_out"] is False
    wrapped = []
    for name, mod in list(model.named_modules()):
        if not isinstance(mod, (nn.Linear, nn.Conv2d)):
            continue
        targets = cfg["target_modules"]
        if isinstance(targets, str):  # PEFT: one regular expression over the whole name
            if not re.fullmatch(targets, name):
                continue
        elif not any(name == t or name.endswith("." + t) for t in targets):
            continue
        parent, _, leaf = name.rpartition(".")
        layer = LoraLinear if isinstance(mod, nn.Linear) else LoraConv2d
        setattr(model.get_submodule(parent), leaf, layer(mod, cfg["r"], cfg["lora_alpha"]))
        wrapped.append(name)
    adapter = read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    want = {}
    for name in wrapped:
        for part in ("lora_A", "lora_B"):
            want[f"{ROOT}{name}.{part}.weight"] = model.get_submodule(name + "." + part).weight
    assert set(want) == set(adapter), sorted(set(want) ^ set(adapter))
    with torch.no_grad():
        for k, p in want.items():
            assert p.shape == adapter[k].shape, (k, p.shape, adapter[k].shape)
            p.copy_(adapter[k].double())
    for p in model.parameters():
        p.requires_grad_(False)
    for p in want.values():
        p.requires_grad_(True)
    loss = loss_fn()
    loss.backward()
    out = [repr(loss.item())]
    for k in sorted(want):
        out.append(k[len(ROOT):] + " " + " ".join(repr(v) for v in want[k].grad.reshape(-1).tolist()))
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4])
