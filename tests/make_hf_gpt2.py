#!/usr/bin/python3
"""Hugging Face GPT-2 .safetensors files for test-checkpoint, made without network or the
transformers package: numpy and struct only, in HF's names and layouts (Conv1D weights
input-major, attn.bias / attn.masked_bias buffers, tied lm_head).

  make_hf_gpt2.py write OUT --n-layer L --n-embd C --seq-len T --vocab V
                  [--prefix transformer.] [--buffers] [--lm-head] [--seed S]
  make_hf_gpt2.py compare REF OUT    # OUT holds exactly REF's parameters, bit for bit,
                                     # and is laid out as the safetensors library requires
  make_hf_gpt2.py folder DIR --n-layer L --n-head H --n-embd C --seq-len T --vocab V
                  # a Hugging Face GPT-2 folder: config.json (a GPT2Config) and
                  # model.safetensors (HF's names, transformer. prefix, buffers, tied head)
"""
import argparse
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "I64": np.int64}


def gpt2_tensors(n_layer, n_embd, seq_len, vocab, seed, buffers):
    rng = np.random.RandomState(seed)
    c = n_embd
    shapes = [("wte.weight", (vocab, c)), ("wpe.weight", (seq_len, c))]
    for i in range(n_layer):
        p = f"h.{i}."
        shapes += [(p + "ln_1.weight", (c,)), (p + "ln_1.bias", (c,)),
                   (p + "attn.c_attn.weight", (c, 3 * c)), (p + "attn.c_attn.bias", (3 * c,)),
                   (p + "attn.c_proj.weight", (c, c)), (p + "attn.c_proj.bias", (c,)),
                   (p + "ln_2.weight", (c,)), (p + "ln_2.bias", (c,)),
                   (p + "mlp.c_fc.weight", (c, 4 * c)), (p + "mlp.c_fc.bias", (4 * c,)),
                   (p + "mlp.c_proj.weight", (4 * c, c)), (p + "mlp.c_proj.bias", (c,))]
    shapes += [("ln_f.weight", (c,)), ("ln_f.bias", (c,))]
    out = {}
    for k, (name, shape) in enumerate(shapes):
        out[name] = (rng.standard_normal(shape) * 0.02 + 0.001 * k).astype(np.float32)
    if buffers:
        for i in range(n_layer):
            tril = np.tril(np.ones((seq_len, seq_len), dtype=np.float32))
            out[f"h.{i}.attn.bias"] = tril.reshape(1, 1, seq_len, seq_len)
            out[f"h.{i}.attn.masked_bias"] = np.array(-1e4, dtype=np.float32)
    return out


def save(path, tensors, metadata):
    """The safetensors layout: tensors sorted by name, packed from offset 0, header padded
    with spaces to 8 bytes."""
    header = {"__metadata__": metadata}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        data = a.astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def load(path):
    """Reads a file as the official library would, refusing what it refuses."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    assert all(isinstance(v, str) for v in meta.values()), "metadata values must be strings"
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    end = 0
    for b, e, k in spans:
        assert b == end, f"{k}: data does not follow the previous tensor ({b} != {end})"
        end = e
    assert end == len(data), f"data section is {len(data)} bytes, tensors cover {end}"
    out = {}
    for k, v in header.items():
        assert v["dtype"] == "F32", f"{k}: dtype {v['dtype']}"
        b, e = v["data_offsets"]
        out[k] = np.frombuffer(data[b:e], dtype="<f4").reshape(v["shape"])
    return out, meta


def strip(tensors):
    out = {}
    for k, v in tensors.items():
        if k.startswith("transformer."):
            k = k[len("transformer."):]
        if k == "lm_head.weight" or k.endswith(".attn.bias") or k.endswith(".attn.masked_bias"):
            continue
        out[k] = v
    return out


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("out")
    w.add_argument("--n-layer", type=int, required=True)
    w.add_argument("--n-embd", type=int, required=True)
    w.add_argument("--seq-len", type=int, required=True)
    w.add_argument("--vocab", type=int, required=True)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--prefix", default="")
    w.add_argument("--buffers", action="store_true")
    w.add_argument("--lm-head", action="store_true")
    d = sub.add_parser("folder")
    d.add_argument("dir")
    for flag in ("--n-layer", "--n-head", "--n-embd", "--seq-len", "--vocab"):
        d.add_argument(flag, type=int, required=True)
    d.add_argument("--seed", type=int, default=0)
    c = sub.add_parser("compare")
    c.add_argument("ref")
    c.add_argument("out")
    args = ap.parse_args()

    if args.cmd == "write":
        t = gpt2_tensors(args.n_layer, args.n_embd, args.seq_len, args.vocab, args.seed,
                         args.buffers)
        named = {args.prefix + k: v for k, v in t.items()}
        if args.lm_head:
            named["lm_head.weight"] = t["wte.weight"].copy()
        save(args.out, named, {"format": "pt"})
        return 0

    if args.cmd == "folder":
        t = gpt2_tensors(args.n_layer, args.n_embd, args.seq_len, args.vocab, args.seed, True)
        named = {"transformer." + k: v for k, v in t.items()}
        named["lm_head.weight"] = t["wte.weight"].copy()
        save(f"{args.dir}/model.safetensors", named, {"format": "pt"})
        config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
                  "n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd,
                  "n_positions": args.seq_len, "n_ctx": args.seq_len, "vocab_size": args.vocab,
                  "n_inner": None, "activation_function": "gelu_new",
                  "layer_norm_epsilon": 1e-05, "tie_word_embeddings": True,
                  "bos_token_id": args.vocab - 1, "eos_token_id": args.vocab - 1}
        with open(f"{args.dir}/config.json", "w") as f:
            json.dump(config, f, indent=2)
        return 0

    ref = strip(load(args.ref)[0])
    out, meta = load(args.out)
    if meta.get("format") != "pt":
        print(f"{args.out}: metadata format is {meta.get('format')!r}, not 'pt'")
        return 1
    if set(ref) != set(out):
        print(f"names differ: only in ref {sorted(set(ref) - set(out))[:5]}, "
              f"only in out {sorted(set(out) - set(ref))[:5]}")
        return 1
    for k in ref:
        if ref[k].shape != out[k].shape or not np.array_equal(ref[k], out[k]):
            print(f"{k}: differs (shapes {ref[k].shape} vs {out[k].shape})")
            return 1
    print(f"ok: {len(out)} tensors identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
