#!/usr/bin/python3
"""Reference for tests/test-pixart-block.c: one PixArt-alpha transformer block (diffusers'
BasicTransformerBlock with norm_type "ada_norm_single", attention_bias, GELU-tanh feed-forward,
LayerNorms without affine parameters, eps 1e-6) written in float64 PyTorch with diffusers' module
structure and parameter names (diffusers is not installed here), so that load_state_dict with
strict=True checks every name and shape of Cohort's tensors.

    torch_pixart_ref.py INPUTS NAMES

INPUTS: int32 B, N, M, C, heads, D, F, then klen [B] int32, then float32 x [B, N, C],
temb [B, 6C], ctx [B, M, D], R [B, N, C], then the block's tensors in the order NAMES lists
(one name a line). Key padding: example b sees its first klen[b] text tokens; an example with
none takes nothing from attn2 (its attention output is 0; diffusers' additive -10000 mask would
average the padding instead, a boolean mask would give NaN). The loss is sum(out * R). Prints,
one per line: "out v v ...", "dx ...", "dtemb ...", "dctx ...", then "NAME g g ..." for every
tensor (its gradient, flattened).
"""
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads, kv_dim):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim)
        self.to_k = nn.Linear(kv_dim, dim)
        self.to_v = nn.Linear(kv_dim, dim)
        self.to_out = nn.ModuleList([nn.Linear(dim, dim), nn.Dropout(0.0)])

    def forward(self, x, ctx=None, klen=None):
        ctx = x if ctx is None else ctx
        B, N, C = x.shape
        M, h = ctx.shape[1], self.heads
        hd = C // h
        q = self.to_q(x).view(B, N, h, hd).transpose(1, 2)
        k = self.to_k(ctx).view(B, M, h, hd).transpose(1, 2)
        v = self.to_v(ctx).view(B, M, h, hd).transpose(1, 2)
        s = q @ k.transpose(-1, -2) / math.sqrt(hd)
        if klen is not None:
            keep = torch.arange(M)[None, :] < klen[:, None]  # [B, M]
            has = klen > 0
            # an example without keys: no -inf at all (a finite softmax), then zeroed
            masked = ~keep & has[:, None]
            s = s.masked_fill(masked[:, None, None, :], float("-inf"))
            p = torch.softmax(s, dim=-1) * has[:, None, None, None].to(s.dtype)
        else:
            p = torch.softmax(s, dim=-1)
        o = (p @ v).transpose(1, 2).reshape(B, N, C)
        return self.to_out[0](o)


class GELU(nn.Module):
    def __init__(self, dim_in, dim_out):
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out)

    def forward(self, x):
        return F.gelu(self.proj(x), approximate="tanh")


class FeedForward(nn.Module):
    def __init__(self, dim, inner):
        super().__init__()
        self.net = nn.ModuleList([GELU(dim, inner), nn.Dropout(0.0), nn.Linear(inner, dim)])

    def forward(self, x):
        for m in self.net:
            x = m(x)
        return x


class BasicTransformerBlock(nn.Module):
    def __init__(self, dim, heads, cross_dim, inner):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6, elementwise_affine=False)
        self.attn1 = Attention(dim, heads, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6, elementwise_affine=False)
        self.attn2 = Attention(dim, heads, cross_dim)
        self.ff = FeedForward(dim, inner)
        self.scale_shift_table = nn.Parameter(torch.randn(6, dim) / dim**0.5)

    def forward(self, x, temb, ctx, klen):
        B = x.shape[0]
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = (
            self.scale_shift_table[None] + temb.reshape(B, 6, -1)
        ).chunk(6, dim=1)
        n = self.norm1(x) * (1 + scale_msa) + shift_msa
        x = gate_msa * self.attn1(n) + x
        # PixArt: no norm before the cross-attention
        x = self.attn2(x, ctx, klen) + x
        n = self.norm2(x) * (1 + scale_mlp) + shift_mlp
        return gate_mlp * self.ff(n) + x


def main():
    data = open(sys.argv[1], "rb").read()
    names = open(sys.argv[2]).read().split()
    B, N, M, C, H, D, Fw = struct.unpack_from("<7i", data, 0)
    at = 28
    klen = torch.tensor(struct.unpack_from("<%di" % B, data, at), dtype=torch.int64)
    at += 4 * B

    def take(n):
        nonlocal at
        t = torch.frombuffer(bytearray(data[at:at + 4 * n]), dtype=torch.float32)
        at += 4 * n
        return t.to(torch.float64)

    x = take(B * N * C).view(B, N, C).requires_grad_()
    temb = take(B * 6 * C).view(B, 6 * C).requires_grad_()
    ctx = take(B * M * D).view(B, M, D).requires_grad_()
    R = take(B * N * C).view(B, N, C)
    block = BasicTransformerBlock(C, H, D, Fw).double()
    shapes = {k: v.shape for k, v in block.state_dict().items()}
    state = {}
    for name in names:
        n = 1
        for d in shapes[name]:
            n *= d
        state[name] = take(n).view(shapes[name])
    assert at == len(data), (at, len(data))
    block.load_state_dict(state, strict=True)
    out = block(x, temb, ctx, klen)
    (out * R).sum().backward()
    print("out", " ".join(repr(v) for v in out.detach().flatten().tolist()))
    for label, t in (("dx", x), ("dtemb", temb), ("dctx", ctx)):
        print(label, " ".join(repr(v) for v in t.grad.flatten().tolist()))
    params = dict(block.named_parameters())
    for name in names:
        print(name, " ".join(repr(v) for v in params[name].grad.flatten().tolist()))


if __name__ == "__main__":
    main()
