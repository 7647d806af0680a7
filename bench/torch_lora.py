#!/usr/bin/python3
"""Full fine-tuning against LoRA in plain PyTorch, under DDP with the Gloo backend, timed like
Cohort's ranks (run-lora-bench runs it beside cohort-train).

The GPT of torch_gpt.py; with --lora every nn.Linear of the four projections (c_attn, the
attention's c_proj, c_fc and the MLP's projection: Cohort's default targets) is wrapped as PEFT
does it: lora_A (r, in) Kaiming-uniform (a = sqrt(5)), lora_B (out, r) zeros, output
base(x) + lora_B(lora_A(x)) * alpha / r, and every base parameter has requires_grad False, so
it has no gradient, no optimizer state and DDP does not all-reduce it. AdamW over what learns
(decay on matrices). N processes × T threads, each with its own random batch.

Prints one line: median step time of rank 0 after warm-up, parameters and trainable parameters,
the bytes each rank all-reduces per step (the gradients of what learns, fp32: what DDP's
buckets hold), the optimizer state bytes of rank 0 after the first step, and the largest peak
RSS of a rank (ru_maxrss).
"""
import argparse
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT, add_run_args  # noqa: E402

TARGETS = ("c_attn", "c_proj", "c_fc", "mlp_proj")  # torch_gpt's names for Cohort's defaults


class LoraLinear(nn.Module):
    """PEFT's LoRA over a frozen nn.Linear."""

    def __init__(self, base, r, alpha, dropout):
        super().__init__()
        self.base = base
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.scale = alpha / r
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def forward(self, x):
        return self.base(x) + (self.drop(x) @ self.lora_A.t() @ self.lora_B.t()) * self.scale


def add_lora(model, r, alpha, dropout):
    for p in model.parameters():
        p.requires_grad_(False)
    for block in model.h:
        for name in TARGETS:
            setattr(block, name, LoraLinear(getattr(block, name), r, alpha, dropout))


def worker(rank, a, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(a.port)
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.nproc)
    torch.manual_seed(1)
    model = GPT(a.n_layer, a.n_head, a.n_embd, a.seq_len, a.vocab_size)
    if a.lora:
        add_lora(model, a.rank, a.alpha, a.dropout)
    model = DDP(model)
    learn = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW([{"params": [p for p in learn if p.dim() == 2], "weight_decay": 0.1},
                             {"params": [p for p in learn if p.dim() < 2], "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(100 + rank)
    tokens = torch.randint(0, a.vocab_size, (a.batch * a.seq_len + 1,), generator=g)
    inputs = tokens[:-1].view(a.batch, a.seq_len)
    targets = tokens[1:].view(a.batch, a.seq_len)
    times = []
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(inputs, targets)
        loss.backward()
        opt.step()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
    optim = sum(t.numel() * t.element_size() for st in opt.state.values() for t in st.values()
                if torch.is_tensor(t) and t.dim() > 0)
    n = sum(p.numel() for p in model.parameters())
    n_learn = sum(p.numel() for p in learn)
    out.put((rank, statistics.median(times), n, n_learn, optim,
             resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, loss.item()))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nproc", type=int, default=2)
    add_run_args(ap, warmup=2)
    ap.add_argument("--port", type=int, default=29631)
    ap.add_argument("--lora", action="store_true", help="LoRA on the four projections")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--dropout", type=float, default=0.0)
    a = ap.parse_args()
    if a.nproc < 1 or a.threads < 1 or a.steps < 1 or a.rank < 1:
        ap.error("--nproc, --threads, --steps and --rank must be >= 1")
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.spawn(worker, args=(a, out), nprocs=a.nproc, join=True)
    got = sorted(out.get() for _ in range(a.nproc))
    _, step, n, n_learn, optim, _, loss = got[0]
    peak = max(x[5] for x in got)
    print("torch-lora: %s, %d procs x %d threads, L%d C%d T%d V%d B%d: %.1f ms/step, "
          "params %d, trainable %d, allreduce %d bytes/step, optim %d bytes, peak RSS %d bytes, "
          "last loss %.4f"
          % ("lora r%d" % a.rank if a.lora else "full", a.nproc, a.threads, a.n_layer, a.n_embd,
             a.seq_len, a.vocab_size, a.batch, 1e3 * step, n, n_learn, 4 * n_learn, optim, peak,
             loss))


if __name__ == "__main__":
    main()
