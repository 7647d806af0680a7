#!/usr/bin/python3
"""The tiny-gpt model in plain eager PyTorch, timed like bench/bench-cpu-gpt.c.

Same shape, batch, thread count, random tokens and AdamW step; nn.Linear / nn.LayerNorm /
nn.GELU(approximate="tanh") modules, the head tied to the token embedding. Prints one line
with ms/step, CPU ms/step (process time, all threads) and tokens/s, each from the median
step, in the format run-cpu-bench reads. Run it with OPENBLAS_NUM_THREADS equal to
--threads: torch.set_num_threads does not limit the OpenBLAS that Debian's torch calls.
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.gelu = nn.GELU(approximate="tanh")
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        hd = C // self.H
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, hd).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(mask[:T, :T] == 0, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, L, H, C, T, V):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)))
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def add_run_args(ap, warmup):
    """The options both PyTorch benchmarks take: threads, steps and the tiny-gpt shape."""
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=warmup)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab-size", type=int, default=256)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    add_run_args(ap, warmup=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = GPT(a.n_layer, a.n_head, a.n_embd, a.seq_len, a.vocab_size)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    tokens = torch.randint(0, a.vocab_size, (a.batch * a.seq_len + 1,))
    inputs = tokens[:-1].view(a.batch, a.seq_len)
    targets = tokens[1:].view(a.batch, a.seq_len)
    times, cpu = [], []
    for s in range(a.warmup + a.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = model(inputs, targets)
        loss.backward()
        opt.step()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    step, cpu_step = statistics.median(times), statistics.median(cpu)
    n = sum(p.numel() for p in model.parameters())
    print("torch: L%d H%d C%d T%d V%d B%d, %d params, %d threads: %.1f ms/step, "
          "cpu %.1f ms/step, %.0f tokens/s, last loss %.4f"
          % (a.n_layer, a.n_head, a.n_embd, a.seq_len, a.vocab_size, a.batch, n, a.threads,
             1e3 * step, 1e3 * cpu_step, a.batch * a.seq_len / step, loss.item()))


if __name__ == "__main__":
    main()
