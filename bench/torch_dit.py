#!/usr/bin/python3
"""The DiT training step in PyTorch (float32, eager, CPU), for bench/run-model-bench: the module
of tests/torch_dit_ref.py (the DiT reference's structure) on random images, the flow-matching
loss, AdamW. Prints the same line format as bench-model:
"dit: batch B, threads N, P parameters, wall X ms/step, cpu Y ms/step, Z samples/s"."""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from torch_dit_ref import DiT  # noqa: E402


def time_flow_steps(name, m, opt, x0, predict, a):
    """Times a.warmup + a.steps flow-matching AdamW steps of `m` on the images x0 (predict(xt,
    1000 t) is the model's velocity) and prints bench-model's line for the last a.steps."""
    B = x0.shape[0]
    wall, cpu = [], []
    for s in range(a.warmup + a.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        t = torch.rand(B)
        eps = torch.randn_like(x0)
        xt = (1 - t.view(B, 1, 1, 1)) * x0 + t.view(B, 1, 1, 1) * eps
        opt.zero_grad()
        v = predict(xt, 1000 * t)
        loss = ((v - (eps - x0)) ** 2).flatten(1).mean(1).mean()
        loss.backward()
        opt.step()
        if s >= a.warmup:
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    w, c = statistics.median(wall), statistics.median(cpu)
    n = sum(p.numel() for p in m.parameters() if p.requires_grad)
    print(f"{name}: batch {B}, threads {a.threads}, {n} parameters, wall {w * 1e3:.2f} ms/step, "
          f"cpu {c * 1e3:.2f} ms/step, {B / w:.1f} samples/s")


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("layers", 6), ("heads", 4), ("hidden", 128), ("image-size", 32),
                          ("channels", 1), ("patch", 4), ("classes", 36), ("batch", 16),
                          ("threads", 1), ("steps", 10), ("warmup", 2)]:
        ap.add_argument("--" + name, type=int, default=default)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = DiT(a.layers, a.heads, a.hidden, a.image_size, a.channels, a.patch, a.classes).float()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.0)
    B = a.batch
    x0 = torch.rand(B, a.channels, a.image_size, a.image_size) * 2 - 1
    y = torch.randint(0, a.classes, (B,))
    time_flow_steps("dit", m, opt, x0, lambda xt, t: m(xt, t, y), a)


if __name__ == "__main__":
    main()
