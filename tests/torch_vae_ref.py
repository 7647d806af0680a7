#!/usr/bin/python3
"""A plain PyTorch AutoencoderKL, written from diffusers' architecture with diffusers' module
names (diffusers itself is not installed here), for tests/test-vae.c.

  torch_vae_ref.py make DIR SEED [old]   a diffusers folder (config.json already in DIR) with
                                         random weights; "old" writes the mid-block attention
                                         under diffusers' pre-0.14 names (query, key, value,
                                         proj_attn), as SD's VAE file carries them
  torch_vae_ref.py run DIR IN.bin OUT.bin
                                         loads DIR with load_state_dict(strict=True) and runs
                                         it in float64 on IN.bin: int64 B, then B images
                                         [B, in, S, S] and B latents z [B, L, s, s] (float32);
                                         writes the posterior's moments (quant_conv's output,
                                         mean then log-variance) and decode(z) as float64

The safetensors files are read and written here byte by byte (the format is an 8-byte header
length, a JSON header, raw little-endian data), as Python's safetensors is not installed.
"""
import json
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class ResnetBlock2D(nn.Module):
    def __init__(self, cin, cout, groups):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=1e-6, affine=True)
        self.conv1 = nn.Conv2d(cin, cout, 3, 1, 1)
        self.norm2 = nn.GroupNorm(groups, cout, eps=1e-6, affine=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1)
        self.conv_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        if self.conv_shortcut is not None:
            x = self.conv_shortcut(x)
        return x + h


class Attention(nn.Module):
    """diffusers' Attention as UNetMidBlock2D builds it: one head of all channels."""

    def __init__(self, c, groups):
        super().__init__()
        self.group_norm = nn.GroupNorm(groups, c, eps=1e-6, affine=True)
        self.to_q = nn.Linear(c, c)
        self.to_k = nn.Linear(c, c)
        self.to_v = nn.Linear(c, c)
        self.to_out = nn.ModuleList([nn.Linear(c, c), nn.Dropout(0.0)])

    def forward(self, x):
        b, c, h, w = x.shape
        t = self.group_norm(x).view(b, c, h * w).transpose(1, 2)
        q, k, v = self.to_q(t), self.to_k(t), self.to_v(t)
        p = torch.softmax(q @ k.transpose(1, 2) / c ** 0.5, dim=-1)
        o = self.to_out[0](p @ v)
        return o.transpose(1, 2).reshape(b, c, h, w) + x


class Downsample2D(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, 2, 0)

    def forward(self, x):
        return self.conv(F.pad(x, (0, 1, 0, 1), mode="constant", value=0))


class Upsample2D(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, 1, 1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class DownEncoderBlock2D(nn.Module):
    def __init__(self, cin, cout, layers, groups, down):
        super().__init__()
        self.resnets = nn.ModuleList(
            [ResnetBlock2D(cin if i == 0 else cout, cout, groups) for i in range(layers)])
        self.downsamplers = nn.ModuleList([Downsample2D(cout)]) if down else None

    def forward(self, x):
        for r in self.resnets:
            x = r(x)
        if self.downsamplers is not None:
            x = self.downsamplers[0](x)
        return x


class UpDecoderBlock2D(nn.Module):
    def __init__(self, cin, cout, layers, groups, up):
        super().__init__()
        self.resnets = nn.ModuleList(
            [ResnetBlock2D(cin if i == 0 else cout, cout, groups) for i in range(layers)])
        self.upsamplers = nn.ModuleList([Upsample2D(cout)]) if up else None

    def forward(self, x):
        for r in self.resnets:
            x = r(x)
        if self.upsamplers is not None:
            x = self.upsamplers[0](x)
        return x


class UNetMidBlock2D(nn.Module):
    def __init__(self, c, groups, attention):
        super().__init__()
        self.attentions = nn.ModuleList([Attention(c, groups)]) if attention else None
        self.resnets = nn.ModuleList([ResnetBlock2D(c, c, groups), ResnetBlock2D(c, c, groups)])

    def forward(self, x):
        x = self.resnets[0](x)
        if self.attentions is not None:
            x = self.attentions[0](x)
        return self.resnets[1](x)


class Encoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        ch, g, n = cfg["block_out_channels"], cfg["norm_num_groups"], cfg["layers_per_block"]
        self.conv_in = nn.Conv2d(cfg["in_channels"], ch[0], 3, 1, 1)
        self.down_blocks = nn.ModuleList(
            [DownEncoderBlock2D(ch[max(i - 1, 0)], ch[i], n, g, i < len(ch) - 1)
             for i in range(len(ch))])
        self.mid_block = UNetMidBlock2D(ch[-1], g, cfg.get("mid_block_add_attention", True))
        self.conv_norm_out = nn.GroupNorm(g, ch[-1], eps=1e-6)
        self.conv_act = nn.SiLU()
        self.conv_out = nn.Conv2d(ch[-1], 2 * cfg["latent_channels"], 3, 1, 1)

    def forward(self, x):
        x = self.conv_in(x)
        for b in self.down_blocks:
            x = b(x)
        x = self.mid_block(x)
        return self.conv_out(self.conv_act(self.conv_norm_out(x)))


class Decoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        ch, g, n = cfg["block_out_channels"], cfg["norm_num_groups"], cfg["layers_per_block"]
        rev = list(reversed(ch))
        self.conv_in = nn.Conv2d(cfg["latent_channels"], rev[0], 3, 1, 1)
        self.mid_block = UNetMidBlock2D(rev[0], g, cfg.get("mid_block_add_attention", True))
        self.up_blocks = nn.ModuleList(
            [UpDecoderBlock2D(rev[max(i - 1, 0)], rev[i], n + 1, g, i < len(ch) - 1)
             for i in range(len(ch))])
        self.conv_norm_out = nn.GroupNorm(g, ch[0], eps=1e-6)
        self.conv_act = nn.SiLU()
        self.conv_out = nn.Conv2d(ch[0], cfg["out_channels"], 3, 1, 1)

    def forward(self, z):
        x = self.mid_block(self.conv_in(z))
        for b in self.up_blocks:
            x = b(x)
        return self.conv_out(self.conv_act(self.conv_norm_out(x)))


class AutoencoderKL(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        L = cfg["latent_channels"]
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.quant_conv = nn.Conv2d(2 * L, 2 * L, 1) if cfg.get("use_quant_conv", True) else None
        self.post_quant_conv = (nn.Conv2d(L, L, 1) if cfg.get("use_post_quant_conv", True)
                                else None)

    def moments(self, x):
        h = self.encoder(x)
        return self.quant_conv(h) if self.quant_conv is not None else h

    def decode(self, z):
        if self.post_quant_conv is not None:
            z = self.post_quant_conv(z)
        return self.decoder(z)


OLD = [(".to_q.", ".query."), (".to_k.", ".key."), (".to_v.", ".value."),
       (".to_out.0.", ".proj_attn.")]


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        assert h["dtype"] == "F32", h["dtype"]
        b, e = h["data_offsets"]
        t = torch.frombuffer(bytearray(data[8 + n + b:8 + n + e]), dtype=torch.float32)
        out[name] = t.reshape(h["shape"]) if h["shape"] else t.reshape(())
    return out


def load(d):
    with open(d + "/config.json") as f:
        cfg = json.load(f)
    model = AutoencoderKL(cfg).double()
    sd = read_safetensors(d + "/diffusion_pytorch_model.safetensors")
    for new, old in OLD:  # what diffusers' loader does for the older names
        sd = {k.replace(old, new): v for k, v in sd.items()}
    model.load_state_dict({k: v.double() for k, v in sd.items()}, strict=True)
    return cfg, model


def make(d, seed, old):
    with open(d + "/config.json") as f:
        cfg = json.load(f)
    torch.manual_seed(seed)
    model = AutoencoderKL(cfg)
    with torch.no_grad():  # GroupNorm away from its ones and zeros, so the affine part counts
        for m in model.modules():
            if isinstance(m, nn.GroupNorm):
                m.weight.add_(0.1 * torch.randn_like(m.weight))
                m.bias.add_(0.1 * torch.randn_like(m.bias))
    sd = model.state_dict()
    if old:
        for new, o in OLD:
            sd = {k.replace(new, o): v for k, v in sd.items()}
    write_safetensors(d + "/diffusion_pytorch_model.safetensors", sd)


def run(d, inp, outp):
    cfg, model = load(d)
    with open(inp, "rb") as f:
        data = f.read()
    (B,) = struct.unpack_from("<q", data, 0)
    vals = torch.frombuffer(bytearray(data[8:]), dtype=torch.float32).double()
    f = 2 ** (len(cfg["block_out_channels"]) - 1)
    C, L = cfg["in_channels"], cfg["latent_channels"]
    n_img = vals.numel() // B - 0  # images then latents, sizes from S
    # S from the counts: B*C*S*S + B*L*(S/f)^2 values
    per = vals.numel() // B
    S = int(round((per / (C + L / (f * f))) ** 0.5))
    x = vals[:B * C * S * S].view(B, C, S, S)
    z = vals[B * C * S * S:].view(B, L, S // f, S // f)
    assert n_img and x.numel() + z.numel() == vals.numel()
    with torch.no_grad():
        m = model.moments(x)
        y = model.decode(z)
    with open(outp, "wb") as f:
        for t in (m, y):
            f.write(struct.pack("<q", t.numel()))
            f.write(t.contiguous().numpy().tobytes())


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]), len(sys.argv) > 4 and sys.argv[4] == "old")
    else:
        run(sys.argv[2], sys.argv[3], sys.argv[4])
