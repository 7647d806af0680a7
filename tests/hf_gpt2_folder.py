#!/usr/bin/python3
"""Checks an exported GPT folder as Hugging Face's GPT2LMHeadModel.from_pretrained(dir) reads
it, without the transformers package (not in Debian): config.json must be a GPT2Config with
the expected shape, and a plain-PyTorch GPT-2 built from config.json's fields alone, with
GPT2Model's module names (wte, wpe, h.N.ln_1, h.N.attn.c_attn as Conv1D, ..., ln_f) and a tied
lm_head, must load model.safetensors by those names with strict=True. Then it prints the mean
cross-entropy of that model on the first WINDOWS windows of a byte-level text file (--text) or
of an llm.c token shard (--tokens), for the test to compare with the loss Cohort reported.
With --tokenizer-from SRC, the folder must also hold SRC's tokenizer files (tokenizer.json, or
vocab.json and merges.txt), byte for byte, as AutoTokenizer.from_pretrained(DIR) reads them.

With --n-positions P (a run fine-tuned at seq_len T below its base's n_positions P),
config.json must say P, the model is built with P positions and evaluated on windows of T
tokens (the first T positions, as Hugging Face uses them), and with --wpe-tail-from BASE the
export's wpe rows from T on must be BASE's (a safetensors file), bit for bit.

  hf_gpt2_folder.py DIR --n-layer L --n-head H --n-embd C --seq-len T --vocab V
                    (--text FILE | --tokens FILE.bin) --windows N [--tokenizer-from SRC]
                    [--n-positions P [--wpe-tail-from BASE]]
"""
import argparse
import json
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def read_safetensors(path):
    """The file as the safetensors library reads it: tensors by name, and the metadata."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    out = {}
    for name, v in header.items():
        if v["dtype"] != "F32":
            raise SystemExit(f"{name}: dtype {v['dtype']}, expected F32")
        b, e = v["data_offsets"]
        t = torch.frombuffer(bytearray(data[b:e]), dtype=torch.float32)
        out[name] = t.reshape(v["shape"])
    return out, meta


class Conv1D(nn.Module):
    """Hugging Face's Conv1D: y = x @ weight + bias, weight [in, out]."""

    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.empty(nf))

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(nn.Module):
    def __init__(self, c, n_head, scale):
        super().__init__()
        self.c_attn = Conv1D(3 * c, c)
        self.c_proj = Conv1D(c, c)
        self.n_head, self.scale = n_head, scale

    def forward(self, x):
        b, t, c = x.shape
        hd = c // self.n_head
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, hd).transpose(1, 2) for z in (q, k, v))
        att = q @ k.transpose(-2, -1)
        if self.scale:
            att = att / math.sqrt(hd)
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(b, t, c))


ACTIVATIONS = {"gelu_new": lambda x: F.gelu(x, approximate="tanh"), "gelu": F.gelu,
               "relu": F.relu}


class MLP(nn.Module):
    def __init__(self, inner, c, act):
        super().__init__()
        self.c_fc = Conv1D(inner, c)
        self.c_proj = Conv1D(c, inner)
        self.act = ACTIVATIONS[act]

    def forward(self, x):
        return self.c_proj(self.act(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c, eps = cfg["n_embd"], cfg["layer_norm_epsilon"]
        inner = cfg["n_inner"] if cfg["n_inner"] is not None else 4 * c
        self.ln_1 = nn.LayerNorm(c, eps=eps)
        self.attn = Attention(c, cfg["n_head"], cfg["scale_attn_weights"])
        self.ln_2 = nn.LayerNorm(c, eps=eps)
        self.mlp = MLP(inner, c, cfg["activation_function"])

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.wte = nn.Embedding(cfg["vocab_size"], cfg["n_embd"])
        self.wpe = nn.Embedding(cfg["n_positions"], cfg["n_embd"])
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg["n_layer"]))
        self.ln_f = nn.LayerNorm(cfg["n_embd"], eps=cfg["layer_norm_epsilon"])

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.transformer = GPT2Model(cfg)
        self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab_size"], bias=False)
        if cfg["tie_word_embeddings"]:
            self.lm_head.weight = self.transformer.wte.weight

    def forward(self, idx):
        return self.lm_head(self.transformer(idx))


def check_config(cfg, args):
    want = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": args.n_layer,
            "n_head": args.n_head, "n_embd": args.n_embd,
            "n_positions": args.n_positions or args.seq_len,
            "vocab_size": args.vocab, "n_inner": None, "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
            "attn_pdrop": 0.0, "scale_attn_weights": True, "tie_word_embeddings": True,
            "torch_dtype": "float32"}
    for k, v in want.items():
        if k not in cfg:
            raise SystemExit(f"config.json lacks {k!r}")
        if cfg[k] != v:
            raise SystemExit(f"config.json: {k} is {cfg[k]!r}, expected {v!r}")


def read_tokens(args):
    """The byte-level text's bytes, or the shard's uint16 tokens after its llm.c header."""
    with open(args.text or args.tokens, "rb") as f:
        raw = f.read()
    if args.text:
        return torch.tensor(list(raw), dtype=torch.long)
    magic, version, count = struct.unpack("<3i", raw[:12])
    if magic != 20240520 or version != 1 or len(raw) != 1024 + 2 * count:
        raise SystemExit(f"{args.tokens}: not an llm.c token shard")
    return torch.tensor(struct.unpack(f"<{count}H", raw[1024:]), dtype=torch.long)


def check_tokenizer(folder, source):
    """AutoTokenizer reads tokenizer.json, else vocab.json + merges.txt: the source's files."""
    import os
    names = (["tokenizer.json"] if os.path.exists(f"{source}/tokenizer.json")
             else ["vocab.json", "merges.txt"])
    for name in names:
        with open(f"{source}/{name}", "rb") as a, open(f"{folder}/{name}", "rb") as b:
            if a.read() != b.read():
                raise SystemExit(f"{folder}/{name} differs from {source}/{name}")
    with open(f"{folder}/config.json") as f:
        if json.load(f).get("model_type") != "gpt2":
            raise SystemExit("config.json: AutoTokenizer picks GPT-2's tokenizer by model_type")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    for flag in ("--n-layer", "--n-head", "--n-embd", "--seq-len", "--vocab", "--windows"):
        ap.add_argument(flag, type=int, required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--text")
    src.add_argument("--tokens")
    ap.add_argument("--tokenizer-from")
    ap.add_argument("--n-positions", type=int)
    ap.add_argument("--wpe-tail-from")
    args = ap.parse_args()

    with open(f"{args.dir}/config.json") as f:
        cfg = json.load(f)
    check_config(cfg, args)
    tensors, meta = read_safetensors(f"{args.dir}/model.safetensors")
    # from_pretrained reads safetensors files whose metadata says they hold PyTorch tensors.
    if meta.get("format") != "pt":
        raise SystemExit(f"model.safetensors: metadata format is {meta.get('format')!r}")
    if "cohort.step" not in meta:
        raise SystemExit("model.safetensors: no cohort.step in the metadata")

    model = GPT2LMHeadModel(cfg)
    # HF's GPT2LMHeadModel takes a base model's names (no "transformer." prefix) as they are.
    missing, unexpected = model.transformer.load_state_dict(tensors, strict=True)
    assert not missing and not unexpected

    if args.tokenizer_from:
        check_tokenizer(args.dir, args.tokenizer_from)
    if args.wpe_tail_from:
        base, _ = read_safetensors(args.wpe_tail_from)
        base_wpe = base.get("wpe.weight", base.get("transformer.wpe.weight"))
        t = args.seq_len
        if not torch.equal(tensors["wpe.weight"][t:], base_wpe[t:]):
            raise SystemExit(f"wpe rows {t}: differ from {args.wpe_tail_from}'s")
    tokens = read_tokens(args)
    t = args.seq_len
    n_windows = (len(tokens) - 1) // t
    losses = []
    with torch.no_grad():
        for w in range(args.windows):
            i = w % n_windows
            x = tokens[i * t:i * t + t].view(1, t)
            y = tokens[i * t + 1:i * t + t + 1].view(1, t)
            logits = model(x)
            losses.append(F.cross_entropy(logits.view(-1, cfg["vocab_size"]), y.view(-1)))
    print(f"loss {torch.stack(losses).mean().item():.8f} step {meta['cohort.step']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
