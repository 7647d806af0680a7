#!/usr/bin/python3
"""Reference for tests/test-dit.c: a class-conditional DiT written in PyTorch (float64) with
the module structure and parameter names of the public DiT reference (learn_sigma=False), so
that loading Cohort's .safetensors with load_state_dict(strict=True) checks every name and
shape.

    torch_dit_ref.py WEIGHTS INPUTS grads        the largest difference of pos_embed from the
                                                 reference's formula, the loss, then every
                                                 parameter's gradient
    torch_dit_ref.py WEIGHTS INPUTS adamw N LR   N AdamW steps on the same batch: N losses

WEIGHTS: a .safetensors file (read here with the standard library: 8-byte header length, JSON
header, little-endian F32 data). INPUTS: 8 int32 (n_layer, n_head, hidden, image_size,
channels, patch, num_classes, batch), then x_t [B*D] float32, t [B] float32 (in [0, 1]),
labels [B] int32, target [B*D] float32. Numbers are printed one per line; gradients in the
order of the file's tensors (pos_embed, a fixed buffer, has none).
"""
import json
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", name
        b, e = info["data_offsets"]
        count = (e - b) // 4
        vals = struct.unpack_from("<%df" % count, data, 8 + n + b)
        out[name] = torch.tensor(vals, dtype=torch.float64).view(info["shape"])
    return out


def sincos_1d(dim, pos):
    omega = 1.0 / 10000 ** (torch.arange(dim // 2, dtype=torch.float64) / (dim / 2.0))
    out = pos.reshape(-1)[:, None] * omega[None]
    return torch.cat([torch.sin(out), torch.cos(out)], dim=1)


def sincos_2d(dim, grid):
    """The reference's fixed position table: numpy-style meshgrid(w, h), the first half of
    the channels from the first grid (the column index), the second from the row index."""
    g = torch.arange(grid, dtype=torch.float64)
    gw, gh = torch.meshgrid(g, g, indexing="xy")
    return torch.cat([sincos_1d(dim // 2, gw), sincos_1d(dim // 2, gh)], dim=1)


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class PatchEmbed(nn.Module):
    def __init__(self, channels, hidden, patch):
        super().__init__()
        self.proj = nn.Conv2d(channels, hidden, kernel_size=patch, stride=patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden, freq=256):
        super().__init__()
        self.freq = freq
        self.mlp = nn.Sequential(nn.Linear(freq, hidden), nn.SiLU(), nn.Linear(hidden, hidden))

    def forward(self, t):
        half = self.freq // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float64) / half)
        args = t[:, None] * freqs[None]
        # The features in float64, then the model's type (a no-op for the float64 tests; the
        # float32 benchmark needs it).
        feats = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        return self.mlp(feats.to(self.mlp[0].weight.dtype))


class LabelEmbedder(nn.Module):
    def __init__(self, classes, hidden):
        super().__init__()
        self.embedding_table = nn.Embedding(classes + 1, hidden)

    def forward(self, y):
        return self.embedding_table(y)


class Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        return self.proj((att.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, N, C))


class Mlp(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(hidden, heads)
        self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.mlp = Mlp(hidden)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 6 * hidden))

    def forward(self, x, c):
        s1, sc1, g1, s2, sc2, g2 = self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + g1.unsqueeze(1) * self.attn(modulate(self.norm1(x), s1, sc1))
        return x + g2.unsqueeze(1) * self.mlp(modulate(self.norm2(x), s2, sc2))


class FinalLayer(nn.Module):
    def __init__(self, hidden, patch, channels):
        super().__init__()
        self.norm_final = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(hidden, patch * patch * channels)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 2 * hidden))

    def forward(self, x, c):
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
        return self.linear(modulate(self.norm_final(x), shift, scale))


class DiT(nn.Module):
    def __init__(self, L, H, C, size, channels, patch, classes):
        super().__init__()
        self.channels, self.patch, self.grid = channels, patch, size // patch
        self.x_embedder = PatchEmbed(channels, C, patch)
        self.t_embedder = TimestepEmbedder(C)
        self.y_embedder = LabelEmbedder(classes, C)
        self.pos_embed = nn.Parameter(torch.zeros(1, self.grid * self.grid, C),
                                      requires_grad=False)
        self.blocks = nn.ModuleList([Block(C, H) for _ in range(L)])
        self.final_layer = FinalLayer(C, patch, channels)

    def unpatchify(self, x):
        n, g, p, c = x.shape[0], self.grid, self.patch, self.channels
        x = x.reshape(n, g, g, p, p, c)
        return torch.einsum("nhwpqc->nchpwq", x).reshape(n, c, g * p, g * p)

    def forward(self, x, t, y):
        x = self.x_embedder(x) + self.pos_embed
        c = self.t_embedder(t) + self.y_embedder(y)
        for block in self.blocks:
            x = block(x, c)
        return self.unpatchify(self.final_layer(x, c))


def main():
    weights, inputs, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(inputs, "rb") as f:
        data = f.read()
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
    state = read_safetensors(weights)
    model.load_state_dict(state, strict=True)
    params = dict(model.named_parameters())

    def loss_fn():
        pred = model(x_t, 1000.0 * t, y)
        return ((pred - target) ** 2).flatten(1).mean(dim=1).mean()

    if mode == "grads":
        ref_pos = sincos_2d(C, size // patch).view(1, -1, C)
        print(repr((model.pos_embed - ref_pos).abs().max().item()))
        loss = loss_fn()
        loss.backward()
        print(repr(loss.item()))
        for name in state:
            if name == "pos_embed":
                continue
            for v in params[name].grad.flatten().tolist():
                print(repr(v))
    else:
        steps, lr = int(sys.argv[4]), float(sys.argv[5])
        decay = [p for n, p in params.items() if p.requires_grad and p.dim() >= 2]
        rest = [p for n, p in params.items() if p.requires_grad and p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": rest, "weight_decay": 0.0}],
                                lr=lr, betas=(0.9, 0.95), eps=1e-8)
        for _ in range(steps):
            opt.zero_grad()
            loss = loss_fn()
            loss.backward()
            opt.step()
            print(repr(loss.item()))


if __name__ == "__main__":
    main()
