#!/usr/bin/python3
"""Reference for tests/test-dit-text.c: the dit family's whole text layout (diffusers'
PixArtTransformer2DModel as docs/t2i-design.md describes it: no additional conditions, no
text gives a zero cross-attention output) and its flow-matching loss in float64 PyTorch, with
diffusers' module structure and names, so load_state_dict with strict=True checks every name and
shape of Cohort's tensors. The blocks are tests/torch_pixart_ref.py's.

    torch_pixart_model_ref.py INPUTS NAMES

INPUTS: int32 B, channels, image_size, patch, hidden, heads, text_dim, M, n_layer, then klen [B]
int32, then float32 clean images x0 [B, ch, H, H], noise [B, ch, H, H], t [B], text [B, M, D],
then the model's tensors in the order NAMES lists (one name a line). The loss is Cohort's:
x_t = (1 - t) x0 + t noise, target = noise - x0, the model sees timestep 1000 t (rounded to
float32, as Cohort uploads it), the per-example mean square error averaged over the batch.
Prints "loss v", then "NAME g g ..." for every tensor (its gradient, flattened).
"""
import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_pixart_ref import BasicTransformerBlock  # noqa: E402


def sincos_2d(grid, C):
    """diffusers' get_2d_sincos_pos_embed at interpolation scale 1 (base size = the grid):
    the first half of the channels encodes the column, the second the row, each sin then cos
    of pos / 10000^(k / (C/4))."""
    q = C // 4
    omega = 1.0 / 10000.0 ** (torch.arange(q, dtype=torch.float64) / q)
    i, j = torch.meshgrid(torch.arange(grid, dtype=torch.float64),
                          torch.arange(grid, dtype=torch.float64), indexing="ij")
    parts = []
    for pos in (j.flatten(), i.flatten()):
        a = pos[:, None] * omega[None, :]
        parts += [torch.sin(a), torch.cos(a)]
    return torch.cat(parts, dim=1)[None]  # [1, T, C]


class PatchEmbed(nn.Module):
    def __init__(self, ch, C, P, grid):
        super().__init__()
        self.proj = nn.Conv2d(ch, C, kernel_size=P, stride=P)
        self.register_buffer("pos_embed", sincos_2d(grid, C), persistent=False)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2) + self.pos_embed


class TimestepEmbedding(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.linear_1 = nn.Linear(256, C)
        self.linear_2 = nn.Linear(C, C)

    def forward(self, x):
        return self.linear_2(F.silu(self.linear_1(x)))


def timestep_features(t, dim=256, max_period=10000.0):
    """diffusers' Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0): cos then sin."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float64) / half)
    a = t[:, None] * freqs[None, :]
    return torch.cat([torch.cos(a), torch.sin(a)], dim=1)


class Emb(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.timestep_embedder = TimestepEmbedding(C)


class AdaLayerNormSingle(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.emb = Emb(C)
        self.linear = nn.Linear(C, 6 * C)

    def forward(self, t):
        emb = self.emb.timestep_embedder(timestep_features(t))
        return self.linear(F.silu(emb)), emb


class CaptionProjection(nn.Module):
    def __init__(self, D, C):
        super().__init__()
        self.linear_1 = nn.Linear(D, C)
        self.linear_2 = nn.Linear(C, C)

    def forward(self, x):
        return self.linear_2(F.gelu(self.linear_1(x), approximate="tanh"))


class PixArtTransformer2DModel(nn.Module):
    def __init__(self, ch, H, P, C, heads, D, L):
        super().__init__()
        self.ch, self.P, self.grid = ch, P, H // P
        self.pos_embed = PatchEmbed(ch, C, P, self.grid)
        self.transformer_blocks = nn.ModuleList(
            [BasicTransformerBlock(C, heads, C, 4 * C) for _ in range(L)])
        self.norm_out = nn.LayerNorm(C, eps=1e-6, elementwise_affine=False)
        self.scale_shift_table = nn.Parameter(torch.randn(2, C) / C**0.5)
        self.proj_out = nn.Linear(C, P * P * ch)
        self.adaln_single = AdaLayerNormSingle(C)
        self.caption_projection = CaptionProjection(D, C)

    def forward(self, x, t, text, klen):
        B = x.shape[0]
        h = self.pos_embed(x)
        temb, emb = self.adaln_single(t)
        ctx = self.caption_projection(text)
        for block in self.transformer_blocks:
            h = block(h, temb, ctx, klen)
        shift, scale = (self.scale_shift_table[None] + emb[:, None]).chunk(2, dim=1)
        h = self.norm_out(h) * (1 + scale) + shift
        h = self.proj_out(h)
        g, P, c = self.grid, self.P, self.ch
        h = h.reshape(B, g, g, P, P, c)
        return torch.einsum("nhwpqc->nchpwq", h).reshape(B, c, g * P, g * P)


def main():
    data = open(sys.argv[1], "rb").read()
    names = open(sys.argv[2]).read().split()
    B, ch, H, P, C, heads, D, M, L = struct.unpack_from("<9i", data, 0)
    at = 36
    klen = torch.tensor(struct.unpack_from("<%di" % B, data, at), dtype=torch.int64)
    at += 4 * B

    def take(n, dtype=torch.float64):
        nonlocal at
        t = torch.frombuffer(bytearray(data[at:at + 4 * n]), dtype=torch.float32)
        at += 4 * n
        return t.to(dtype)

    x0 = take(B * ch * H * H).view(B, ch, H, H)
    noise = take(B * ch * H * H).view(B, ch, H, H)
    t = take(B, torch.float32)
    text = take(B * M * D).view(B, M, D)
    model = PixArtTransformer2DModel(ch, H, P, C, heads, D, L).double()
    shapes = {k: v.shape for k, v in model.state_dict().items()}
    state = {}
    for name in names:
        state[name] = take(shapes[name].numel()).view(shapes[name])
    assert at == len(data), (at, len(data))
    model.load_state_dict(state, strict=True)

    tb = t.double()[:, None, None, None]
    x_t = (1 - tb) * x0 + tb * noise
    target = noise - x0
    t1000 = (1000.0 * t).double()  # float32 product, as Cohort uploads it
    pred = model(x_t, t1000, text, klen)
    loss = ((pred - target) ** 2).flatten(1).mean(dim=1).mean()
    loss.backward()
    print("loss", repr(loss.item()))
    params = dict(model.named_parameters())
    for name in names:
        print(name, " ".join(repr(v) for v in params[name].grad.flatten().tolist()))


if __name__ == "__main__":
    main()
