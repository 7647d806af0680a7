#!/usr/bin/python3
"""DiT checkpoints as others write them, for tests/test-dit-import.c: the public DiT reference's
names (learn_sigma as the reference trains it: 2 · channels out), and diffusers'
DiTTransformer2DModel names as diffusers' convert_dit_to_diffusers.py writes them (patch
embedding as pos_embed.proj, qkv split into to_q / to_k / to_v, the timestep and label
embeddings copied into every block's norm1.emb, the final layer as proj_out_1 / proj_out_2),
with the transformer's config.json.

  torch_dit_import.py make DIR L H C SIZE CH PATCH CLASSES LEARN_SIGMA SEED
      writes DIR/reference.safetensors and DIR/diffusers/{config.json,
      diffusion_pytorch_model.safetensors} of one random DiT (every weight non-zero)
  torch_dit_import.py run DIR INPUTS
      the reference file's model on INPUTS (int32 B, then x [B, CH, SIZE, SIZE] float32, t [B]
      float32 in [0, 1], labels [B] int32), in float64: prints the first CH channels of the
      output (the noise prediction), one number per line
"""
import json
import os
import struct
import sys

import torch
import torch.nn as nn

from torch_dit_ref import DiT, read_safetensors, sincos_2d
from torch_vae_ref import write_safetensors


class SigmaDiT(DiT):
    """The reference with out_channels = 2 · channels when learning sigma."""

    def __init__(self, L, H, C, size, ch, patch, classes, learn_sigma):
        super().__init__(L, H, C, size, ch, patch, classes)
        self.in_channels = ch
        if learn_sigma:
            self.final_layer.linear = nn.Linear(C, patch * patch * 2 * ch)
            self.channels = 2 * ch


def build(args):
    L, H, C, size, ch, patch, classes, sigma = (int(a) for a in args[:8])
    return SigmaDiT(L, H, C, size, ch, patch, classes, bool(sigma)).double()


def to_diffusers(sd, L):
    out = {}
    for k, v in sd.items():
        if k == "pos_embed":
            continue  # diffusers' PatchEmbed does not save its table
        if k.startswith("x_embedder.proj."):
            out["pos_embed.proj." + k.split(".")[-1]] = v
        elif k.startswith("final_layer.adaLN_modulation.1."):
            out["proj_out_1." + k.split(".")[-1]] = v
        elif k.startswith("final_layer.linear."):
            out["proj_out_2." + k.split(".")[-1]] = v
        elif k.startswith("blocks."):
            _, i, rest = k.split(".", 2)
            kind = rest.split(".")[-1]
            pre = "transformer_blocks.%s." % i
            if rest.startswith("attn.qkv."):
                for name, part in zip(("to_q", "to_k", "to_v"), v.chunk(3, dim=0)):
                    out[pre + "attn1.%s.%s" % (name, kind)] = part
            else:
                new = {"adaLN_modulation.1.": "norm1.linear.", "attn.proj.": "attn1.to_out.0.",
                       "mlp.fc1.": "ff.net.0.proj.", "mlp.fc2.": "ff.net.2."}
                for a, b in new.items():
                    if rest.startswith(a):
                        out[pre + b + kind] = v
    emb = {"t_embedder.mlp.0.": "norm1.emb.timestep_embedder.linear_1.",
           "t_embedder.mlp.2.": "norm1.emb.timestep_embedder.linear_2.",
           "y_embedder.embedding_table.": "norm1.emb.class_embedder.embedding_table."}
    for k, v in sd.items():
        for a, b in emb.items():
            if k.startswith(a):
                for i in range(L):
                    out["transformer_blocks.%d.%s%s" % (i, b, k.split(".")[-1])] = v.clone()
    return out


def make(d, args):
    L, H, C, size, ch, patch, classes, sigma, seed = (int(a) for a in args)
    torch.manual_seed(seed)
    model = build(args)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name != "pos_embed":  # adaLN and the final layer too: no zero-initialised path
                p.copy_(torch.randn_like(p) * (0.5 / max(p.shape[-1], 1) ** 0.5))
        model.pos_embed.copy_(sincos_2d(C, size // patch).view(1, -1, C))
    sd = model.state_dict()
    os.makedirs(d + "/diffusers", exist_ok=True)
    write_safetensors(d + "/reference.safetensors", sd)
    write_safetensors(d + "/diffusers/diffusion_pytorch_model.safetensors", to_diffusers(sd, L))
    cfg = {"_class_name": "DiTTransformer2DModel", "activation_fn": "gelu-approximate",
           "attention_head_dim": C // H, "in_channels": ch, "num_attention_heads": H,
           "num_embeds_ada_norm": classes, "num_layers": L, "norm_type": "ada_norm_zero",
           "out_channels": 2 * ch if sigma else ch, "patch_size": patch, "sample_size": size}
    with open(d + "/diffusers/config.json", "w") as f:
        json.dump(cfg, f)
    with open(d + "/shape.json", "w") as f:
        json.dump(args, f)


def run(d, inputs):
    with open(d + "/shape.json") as f:
        args = json.load(f)
    model = build(args)
    model.load_state_dict(read_safetensors(d + "/reference.safetensors"), strict=True)
    size, ch = int(args[3]), int(args[4])
    with open(inputs, "rb") as f:
        data = f.read()
    (B,) = struct.unpack_from("<i", data, 0)
    n = B * ch * size * size
    x = torch.tensor(struct.unpack_from("<%df" % n, data, 4), dtype=torch.float64)
    t = torch.tensor(struct.unpack_from("<%df" % B, data, 4 + 4 * n), dtype=torch.float64)
    y = torch.tensor(struct.unpack_from("<%di" % B, data, 4 + 4 * n + 4 * B), dtype=torch.long)
    with torch.no_grad():
        out = model(x.view(B, ch, size, size), 1000.0 * t, y)[:, :ch]
    for v in out.reshape(-1).tolist():
        print(repr(v))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3:])
    else:
        run(sys.argv[2], sys.argv[3])
