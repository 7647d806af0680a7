#!/usr/bin/python3
"""A VAE's encoder in PyTorch (float32, eager, CPU), for bench/run-latent-bench: the plain
AutoencoderKL of tests/torch_vae_ref.py (diffusers' architecture and names) from a config.json,
random weights, random images; the encoder and quant_conv, under torch.no_grad() as caching
runs it. Prints the line format of bench-vae."""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from torch_vae_ref import AutoencoderKL  # noqa: E402


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=os.path.join(here, "sd-vae", "config.json"))
    for name, default in [("size", 256), ("batch", 2), ("threads", 1), ("reps", 3)]:
        ap.add_argument("--" + name, type=int, default=default)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    with open(a.config) as f:
        cfg = json.load(f)
    m = AutoencoderKL(cfg).float().eval()
    x = torch.rand(a.batch, cfg["in_channels"], a.size, a.size) * 2 - 1
    wall, cpu = [], []
    with torch.no_grad():
        for k in range(-1, a.reps):
            t0, c0 = time.perf_counter(), time.process_time()
            m.moments(x)
            if k >= 0:
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
    w, c = statistics.median(wall), statistics.median(cpu)
    n = sum(p.numel() for p in m.parameters())
    print(f"vae encode: size {a.size}, batch {a.batch}, threads {a.threads}, {n} parameters, "
          f"wall {w * 1e3:.1f} ms/batch, cpu {c * 1e3:.1f} ms/batch, {a.batch / w:.2f} images/s")


if __name__ == "__main__":
    main()
