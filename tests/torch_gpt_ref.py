#!/usr/bin/python3
"""Reference for tests/test-gpt.c: the same GPT-2-style model written in PyTorch (float64).

Reads a file written by the test: 6 int32 (n_layer, n_head, n_embd, seq_len, vocab_size,
batch), 2*B*T int32 tokens (inputs then targets), then every parameter as float32 in the
model's tensor-table order (Hugging Face GPT-2 names and layouts). Prints the mean
cross-entropy loss, then the gradient of every parameter in the same order, one per line.
"""
import math
import struct
import sys

import torch
import torch.nn.functional as F


def main(path):
    with open(path, "rb") as f:
        data = f.read()
    L, H, C, T, V, B = struct.unpack_from("<6i", data, 0)
    off = 24
    toks = torch.tensor(struct.unpack_from("<%di" % (2 * B * T), data, off), dtype=torch.long)
    off += 8 * B * T
    inputs, targets = toks[: B * T].view(B, T), toks[B * T:].view(B, T)
    flat = torch.tensor(struct.unpack_from("<%df" % ((len(data) - off) // 4), data, off),
                        dtype=torch.float64)

    shapes = [("wte", (V, C)), ("wpe", (T, C))]
    for i in range(L):
        shapes += [(f"h{i}.ln1w", (C,)), (f"h{i}.ln1b", (C,)),
                   (f"h{i}.attnw", (C, 3 * C)), (f"h{i}.attnb", (3 * C,)),
                   (f"h{i}.projw", (C, C)), (f"h{i}.projb", (C,)),
                   (f"h{i}.ln2w", (C,)), (f"h{i}.ln2b", (C,)),
                   (f"h{i}.fcw", (C, 4 * C)), (f"h{i}.fcb", (4 * C,)),
                   (f"h{i}.fcprojw", (4 * C, C)), (f"h{i}.fcprojb", (C,))]
    shapes += [("lnfw", (C,)), ("lnfb", (C,))]
    p, pos = {}, 0
    for name, shape in shapes:
        n = math.prod(shape)
        p[name] = flat[pos:pos + n].view(shape).clone().requires_grad_(True)
        pos += n
    assert pos == flat.numel(), "parameter count mismatch"

    hd = C // H
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    x = p["wte"][inputs] + p["wpe"][:T]
    for i in range(L):
        h = F.layer_norm(x, (C,), p[f"h{i}.ln1w"], p[f"h{i}.ln1b"], 1e-5)
        q, k, v = (h @ p[f"h{i}.attnw"] + p[f"h{i}.attnb"]).split(C, dim=2)
        q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p[f"h{i}.projw"] + p[f"h{i}.projb"]
        h = F.layer_norm(x, (C,), p[f"h{i}.ln2w"], p[f"h{i}.ln2b"], 1e-5)
        h = F.gelu(h @ p[f"h{i}.fcw"] + p[f"h{i}.fcb"], approximate="tanh")
        x = x + h @ p[f"h{i}.fcprojw"] + p[f"h{i}.fcprojb"]
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], 1e-5)
    logits = x @ p["wte"].t()
    loss = F.cross_entropy(logits.view(-1, V), targets.reshape(-1))
    loss.backward()
    out = [repr(loss.item())]
    for name, _ in shapes:
        out.extend(repr(g) for g in p[name].grad.reshape(-1).tolist())
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
