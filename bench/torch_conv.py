#!/usr/bin/python3
"""PyTorch's conv2d forward and backward on the ResNet-20 shapes of bench/bench-conv.c, timed
the same way (best of --reps, process CPU time on one thread), for a side-by-side figure.

Run: OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 bench/torch_conv.py
"""
import argparse
import time

import torch
import torch.nn.functional as F

CASES = [  # name, count in ResNet-20, C_in, H, C_out, K, stride, pad
    ("stem 3->16 32x32", 1, 3, 32, 16, 3, 1, 1),
    ("stage1 16->16 32x32", 6, 16, 32, 16, 3, 1, 1),
    ("stage2 16->32 s2 32->16", 1, 16, 32, 32, 3, 2, 1),
    ("stage2 32->32 16x16", 5, 32, 16, 32, 3, 1, 1),
    ("stage3 32->64 s2 16->8", 1, 32, 16, 64, 3, 2, 1),
    ("stage3 64->64 8x8", 5, 64, 8, 64, 3, 1, 1),
    ("shortcut 1x1 16->32 s2", 1, 16, 32, 32, 1, 2, 0),
    ("shortcut 1x1 32->64 s2", 1, 32, 16, 64, 1, 2, 0),
]


def best(fn, reps):
    fn()  # warm up
    t = float("inf")
    for _ in range(reps):
        t0 = time.process_time()
        fn()
        t = min(t, time.process_time() - t0)
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--reps", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    B = args.batch
    print(f"torch {torch.__version__}, mkldnn {torch.backends.mkldnn.is_available()}, "
          f"threads 1, batch {B}, best of {args.reps}, CPU time")
    print("%-26s %9s %9s %9s %9s" % ("conv", "fwd ms", "fwd GF/s", "bwd ms", "bwd GF/s"))
    tot_f = tot_b = tot_flop = 0.0
    for i, (name, count, C, H, O, K, S, P) in enumerate(CASES):
        x = torch.randn(B, C, H, H, requires_grad=i > 0)
        w = torch.randn(O, C, K, K, requires_grad=True)
        y = F.conv2d(x, w, stride=S, padding=P)
        dy = torch.randn_like(y)
        Ho = y.shape[2]
        flop = 2.0 * B * O * Ho * Ho * C * K * K
        tf = best(lambda: F.conv2d(x, w, stride=S, padding=P), args.reps)
        inputs = (x, w) if i > 0 else (w,)
        tb = best(lambda: torch.autograd.grad(F.conv2d(x, w, stride=S, padding=P), inputs, dy),
                  args.reps) - tf  # the backward alone: autograd.grad reruns the forward
        bflop = 2 * flop if i > 0 else flop
        print("%-26s %9.2f %9.1f %9.2f %9.1f" % (name, tf * 1e3, flop / tf / 1e9, tb * 1e3,
                                                 bflop / tb / 1e9))
        tot_f += count * tf
        tot_b += count * tb
        tot_flop += count * (flop + bflop)
    print("ResNet-20 (option B) convs: forward %.1f ms, backward %.1f ms, %.1f GFLOP/s overall"
          % (tot_f * 1e3, tot_b * 1e3, tot_flop / (tot_f + tot_b) / 1e9))


if __name__ == "__main__":
    main()
