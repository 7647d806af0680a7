#!/usr/bin/python3
"""PyTorch DDP (Gloo backend) on the tiny-gpt model of torch_gpt.py: N processes, each with
its own batch and thread count, timed like Cohort's ranks. Prints one line with the median
step time, the global tokens/s and the largest peak RSS of a rank (ru_maxrss), the format
run-ddp-bench reads. --zero wraps AdamW in torch's ZeroRedundancyOptimizer (ZeRO stage 1:
each rank keeps the optimizer state of its share of the parameters).
"""
import resource
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT, add_run_args  # noqa: E402


def worker(rank, a, port, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.nproc)
    torch.manual_seed(1)
    model = DDP(GPT(a.n_layer, a.n_head, a.n_embd, a.seq_len, a.vocab_size))
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    if a.zero:
        # ZeroRedundancyOptimizer takes one parameter list; the no-decay group is added after.
        opt = ZeroRedundancyOptimizer(decay, optimizer_class=torch.optim.AdamW, lr=3e-4,
                                      betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
        opt.add_param_group({"params": no_decay, "weight_decay": 0.0})
    else:
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": no_decay, "weight_decay": 0.0}],
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
    out.put((rank, statistics.median(times),
             resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nproc", type=int, default=2)
    add_run_args(ap, warmup=3)
    ap.add_argument("--port", type=int, default=29611)
    ap.add_argument("--zero", action="store_true", help="ZeroRedundancyOptimizer (ZeRO-1)")
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.spawn(worker, args=(a, a.port, out), nprocs=a.nproc, join=True)
    got = [out.get() for _ in range(a.nproc)]
    step = next(t for r, t, _ in got if r == 0)
    peak = max(m for _, _, m in got)
    print("torch-ddp: %d procs x %d threads, B%d T%d%s: %.1f ms/step, %.0f tokens/s global, "
          "peak RSS %.1f MiB"
          % (a.nproc, a.threads, a.batch, a.seq_len, " ZeRO-1" if a.zero else "", 1e3 * step,
             a.nproc * a.batch * a.seq_len / step, peak / 2**20))


if __name__ == "__main__":
    main()
