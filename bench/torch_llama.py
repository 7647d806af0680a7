#!/usr/bin/python3
"""The llama family's decoder in plain eager PyTorch (1.13), timed like bench/bench-model.c.

The structure of Hugging Face's LlamaForCausalLM (transformers is not installed here, so it is
written out, with HF's parameter names): token embedding, blocks of RMSNorm, q/k/v projections,
rotate-half rotary embeddings, grouped-query causal attention (repeat_kv, then the explicit
masked softmax: PyTorch 1.13 has no scaled_dot_product_attention), o_proj, RMSNorm and a SwiGLU
MLP, a final RMSNorm and the head tied to the embedding. torch.optim.AdamW (lr 1e-4, betas 0.9
and 0.95, eps 1e-8, no weight decay: bench-model's step) with its default implementation.

    torch_llama.py [--threads N] [--steps N] [--warmup N] [--batch B] [--seq-len T]
                   [--n-layer L] [--n-embd C] [--n-head H] [--n-kv-head KV] [--head-dim D]
                   [--intermediate I] [--vocab-size V] [--rms-eps E] [--rope-theta R]
                   [--weights FILE --tokens FILE]

--weights (a .safetensors with Hugging Face's names, as `bench-model --dump` writes Cohort's
initial weights) and --tokens (int32 B, T, inputs [B*T], targets [B*T]) start from Cohort's
weights and batch, so the first loss can be compared with Cohort's; without them the weights are
HF's initialisation (N(0, 0.02), norms 1) and the tokens random. The rotary tables and the causal
mask are computed once, outside the timed step. Run it with OPENBLAS_NUM_THREADS equal to
--threads (Debian's torch calls an OpenBLAS that torch.set_num_threads does not limit).

Prints one line: "torch: llama ...: wall X ms/step, cpu Y ms/step, Z samples/s, W tokens/s,
first loss L, last loss M" (medians over the timed steps; CPU time is the process's, all
threads; L the first step's loss, M the last's), the format bench/run-model-bench reads.
"""
import argparse
import json
import math
import statistics
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def read_safetensors(path):
    """F32 tensors of a .safetensors file, read with the standard library."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            sys.exit("torch_llama.py: %s: tensor %s is %s; allowed: F32"
                     % (path, name, info["dtype"]))
        b, e = info["data_offsets"]
        vals = torch.frombuffer(data, dtype=torch.float32, count=(e - b) // 4, offset=8 + n + b)
        out[name] = vals.clone().view(info["shape"])
    return out


class RMSNorm(nn.Module):
    """LlamaRMSNorm: weight * (x * rsqrt(mean(x^2) + eps))."""

    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, C, H, KV, hd):
        super().__init__()
        self.H, self.KV, self.hd = H, KV, hd
        self.q_proj = nn.Linear(C, H * hd, bias=False)
        self.k_proj = nn.Linear(C, KV * hd, bias=False)
        self.v_proj = nn.Linear(C, KV * hd, bias=False)
        self.o_proj = nn.Linear(H * hd, C, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.KV, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.KV, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.H // self.KV  # HF's repeat_kv
        k = k[:, :, None].expand(B, self.KV, rep, T, self.hd).reshape(B, self.H, T, self.hd)
        v = v[:, :, None].expand(B, self.KV, rep, T, self.hd).reshape(B, self.H, T, self.hd)
        att = (q @ k.transpose(2, 3)) * self.hd ** -0.5
        att = att.masked_fill(~mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, self.H * self.hd)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, C, I):
        super().__init__()
        self.gate_proj = nn.Linear(C, I, bias=False)
        self.up_proj = nn.Linear(C, I, bias=False)
        self.down_proj = nn.Linear(I, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.self_attn = Attention(a.n_embd, a.n_head, a.n_kv_head, a.head_dim)
        self.mlp = MLP(a.n_embd, a.intermediate)
        self.input_layernorm = RMSNorm(a.n_embd, a.rms_eps)
        self.post_attention_layernorm = RMSNorm(a.n_embd, a.rms_eps)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab_size, a.n_embd)
        self.layers = nn.ModuleList(DecoderLayer(a) for _ in range(a.n_layer))
        self.norm = RMSNorm(a.n_embd, a.rms_eps)


class ForCausalLM(nn.Module):
    """The head is the embedding itself (tie_word_embeddings), with no name of its own."""

    def __init__(self, a):
        super().__init__()
        self.model = Model(a)
        hd, T = a.head_dim, a.seq_len
        inv = 1.0 / (a.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        freqs = torch.arange(T, dtype=torch.float64)[:, None] * inv[None]
        emb = torch.cat((freqs, freqs), dim=-1)
        # buffers, not parameters: computed once (in double, rounded once, as Cohort's tables)
        self.register_buffer("cos", emb.cos().float(), persistent=False)
        self.register_buffer("sin", emb.sin().float(), persistent=False)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)),
                             persistent=False)
        for name, p in self.named_parameters():  # HF's _init_weights, initializer_range 0.02
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        cos, sin = self.cos[:T], self.sin[:T]
        x = self.model.embed_tokens(idx)
        for layer in self.model.layers:
            x = layer(x, cos, sin, self.mask)
        logits = self.model.norm(x) @ self.model.embed_tokens.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=256)
    # SmolLM2-135M's shape
    ap.add_argument("--n-layer", type=int, default=30)
    ap.add_argument("--n-embd", type=int, default=576)
    ap.add_argument("--n-head", type=int, default=9)
    ap.add_argument("--n-kv-head", type=int, default=3)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--intermediate", type=int, default=1536)
    ap.add_argument("--vocab-size", type=int, default=49152)
    ap.add_argument("--rms-eps", type=float, default=1e-5)
    ap.add_argument("--rope-theta", type=float, default=100000.0)
    ap.add_argument("--weights", default=None, help="initial weights (.safetensors, HF names)")
    ap.add_argument("--tokens", default=None, help="the batch: int32 B, T, inputs, targets")
    a = ap.parse_args()
    if a.threads < 1 or a.steps < 1 or a.warmup < 0 or a.batch < 1 or a.seq_len < 1:
        ap.error("--threads, --steps, --batch and --seq-len must be >= 1, --warmup >= 0")
    if a.n_head % a.n_kv_head or a.head_dim % 2:
        ap.error("--n-head %d must be a multiple of --n-kv-head %d and --head-dim %d even"
                 % (a.n_head, a.n_kv_head, a.head_dim))
    if (a.weights is None) != (a.tokens is None):
        ap.error("--weights and --tokens go together (bench-model --dump writes both)")
    return a


def read_tokens(path, a):
    with open(path, "rb") as f:
        data = f.read()
    B, T = struct.unpack_from("<2i", data, 0)
    if (B, T) != (a.batch, a.seq_len) or len(data) != 8 + 8 * B * T:
        sys.exit("torch_llama.py: %s holds B %d, T %d in %d bytes; allowed: --batch %d, "
                 "--seq-len %d, %d bytes" % (path, B, T, len(data), a.batch, a.seq_len,
                                             8 + 8 * a.batch * a.seq_len))
    toks = torch.tensor(struct.unpack_from("<%di" % (2 * B * T), data, 8), dtype=torch.long)
    return toks[: B * T].view(B, T), toks[B * T:].view(B, T)


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = ForCausalLM(a)
    if a.weights:
        model.load_state_dict(read_safetensors(a.weights), strict=True)
        inputs, targets = read_tokens(a.tokens, a)
    else:
        inputs = torch.randint(0, a.vocab_size, (a.batch, a.seq_len))
        targets = torch.randint(0, a.vocab_size, (a.batch, a.seq_len))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.0)
    times, cpu, first = [], [], None
    for s in range(a.warmup + a.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = model(inputs, targets)
        loss.backward()
        opt.step()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        if first is None:
            first = loss.item()
    if not math.isfinite(loss.item()):
        sys.exit("torch_llama.py: the loss is %g after %d steps" % (loss.item(), s + 1))
    step, cpu_step = statistics.median(times), statistics.median(cpu)
    n = sum(p.numel() for p in model.parameters())
    print("torch: llama L%d C%d H%d KV%d hd%d I%d V%d T%d B%d, %d parameters, %d threads: "
          "wall %.1f ms/step, cpu %.1f ms/step, %.3f samples/s, %.1f tokens/s, first loss %.6f, "
          "last loss %.6f"
          % (a.n_layer, a.n_embd, a.n_head, a.n_kv_head, a.head_dim, a.intermediate,
             a.vocab_size, a.seq_len, a.batch, n, a.threads, 1e3 * step, 1e3 * cpu_step,
             a.batch / step, a.batch * a.seq_len / step, first, loss.item()))


if __name__ == "__main__":
    main()
