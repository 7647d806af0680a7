#!/usr/bin/python3
"""Reference for tests/test-layers-dit-torch.c: the DiT operations in float64 PyTorch, written
as the public DiT model writes them (modulate, LayerNorm without affine parameters, SiLU, the
sinusoidal timestep features, patch embedding by Conv2d(kernel p, stride p), the unpatchify
einsum) and non-causal attention as softmax(Q K^T / sqrt(d)) V (torch 1.13 has no
scaled_dot_product_attention).

Input file (argv[1]): records of int32 op, int32 n, n int32 parameters, int64 m, m float32
inputs. Output file (argv[2]): for each record, its results as float64, concatenated in the
order each op below returns them (gradients are of J = sum(out * R), R given).
"""
import math
import struct
import sys

import torch
import torch.nn.functional as F


def split(values, *sizes):
    assert sum(sizes) == values.numel(), "input size mismatch"
    return [t.clone() for t in values.split(list(sizes))]


def attention(ints, f):
    B, T, C, NH = ints
    hd = C // NH
    qkv, r = split(f, B * T * 3 * C, B * T * C)
    qkv = qkv.view(B, T, 3 * C).requires_grad_(True)
    q, k, v = (t.reshape(B, T, NH, hd).transpose(1, 2) for t in qkv.split(C, dim=2))
    s = q @ k.transpose(-2, -1) / math.sqrt(hd)
    y = (s.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
    (y * r.view(B, T, C)).sum().backward()
    return [y, torch.logsumexp(s, dim=-1), qkv.grad]


def modulate(ints, f):
    B, T, C, ld, shift_col, scale_col = ints
    x, mod, r = split(f, B * T * C, B * ld, B * T * C)
    x = x.view(B, T, C).requires_grad_(True)
    mod = mod.view(B, ld).requires_grad_(True)
    shift, scale = mod[:, shift_col:shift_col + C], mod[:, scale_col:scale_col + C]
    out = x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)
    (out * r.view(B, T, C)).sum().backward()
    return [out, x.grad, mod.grad]


def gated_residual(ints, f):
    B, T, C, ld, gate_col = ints
    x, mod, y, r = split(f, B * T * C, B * ld, B * T * C, B * T * C)
    x, y = x.view(B, T, C).requires_grad_(True), y.view(B, T, C).requires_grad_(True)
    mod = mod.view(B, ld).requires_grad_(True)
    out = x + mod[:, gate_col:gate_col + C].unsqueeze(1) * y
    (out * r.view(B, T, C)).sum().backward()
    return [out, x.grad, y.grad, mod.grad]


def layernorm(ints, f):
    N, C = ints
    eps, x, r = split(f, 1, N * C, N * C)
    x = x.view(N, C).requires_grad_(True)
    norm = torch.nn.LayerNorm(C, elementwise_affine=False, eps=float(eps)).double()
    out = norm(x)
    (out * r.view(N, C)).sum().backward()
    return [out, x.grad]


def silu(ints, f):
    (n,) = ints
    x, r = split(f, n, n)
    x.requires_grad_(True)
    out = F.silu(x)
    (out * r).sum().backward()
    return [out, x.grad]


def timestep_embedding(ints, f):
    B, dim = ints
    max_period, t = split(f, 1, B)
    half = dim // 2
    freqs = torch.exp(-math.log(float(max_period)) * torch.arange(half, dtype=torch.float64) / half)
    args = t[:, None] * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return [emb]


def patch_embed(ints, f):
    B, C, H, W, p, hidden = ints
    img, weight = split(f, B * C * H * W, hidden * C * p * p)
    out = F.conv2d(img.view(B, C, H, W), weight.view(hidden, C, p, p), stride=p)
    return [out.flatten(2).transpose(1, 2)]  # [B, T, hidden], patches in row-major order


def unpatchify(ints, f):
    B, C, H, W, p = ints
    x = f.reshape(B, H // p, W // p, p, p, C)
    x = torch.einsum("nhwpqc->nchpwq", x)
    return [x.reshape(B, C, H, W)]


def mse(ints, f):
    B, D = ints
    pred, target = split(f, B * D, B * D)
    pred = pred.view(B, D).requires_grad_(True)
    losses = ((pred - target.view(B, D)) ** 2).mean(dim=1)
    losses.mean().backward()
    return [losses, pred.grad]


OPS = {1: attention, 2: modulate, 3: gated_residual, 4: layernorm, 5: silu,
       6: timestep_embedding, 7: patch_embed, 8: unpatchify, 9: mse}


def main(inp, outp):
    with open(inp, "rb") as fh:
        data = fh.read()
    off, results = 0, []
    while off < len(data):
        op, n = struct.unpack_from("<2i", data, off)
        ints = struct.unpack_from("<%di" % n, data, off + 8)
        off += 8 + 4 * n
        (m,) = struct.unpack_from("<q", data, off)
        values = torch.tensor(struct.unpack_from("<%df" % m, data, off + 8), dtype=torch.float64)
        off += 8 + 4 * m
        results += OPS[op](ints, values)
    with open(outp, "wb") as fh:
        for t in results:
            flat = t.detach().reshape(-1).tolist()
            fh.write(struct.pack("<%dd" % len(flat), *flat))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
