#!/usr/bin/python3
"""PyTorch's training step on the ResNet of bench/bench-resnet.c (the module of
tests/torch_resnet_model.py in float32, or torchvision's resnet18 … resnet101 with --variant),
timed the same way: training-mode forward, cross-entropy,
backward, SGD with Nesterov momentum and weight decay on kernels and matrices; the best of
--reps steps after 2 warm-up steps, on the process's CPU clock with one thread, else the wall
clock. The last line, "step_ms=...", is for scripts.

Run: OPENBLAS_NUM_THREADS=T OMP_NUM_THREADS=T /usr/bin/python3 bench/torch_resnet.py --threads T
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from torch_resnet_model import ResNet, param_groups  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("batch", 128), ("depth", 20), ("width", 16), ("size", 0),
                          ("channels", 3), ("classes", 0), ("threads", 1), ("reps", 10)]:
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--variant", default="cifar")
    ap.add_argument("--conv", default=None)  # Cohort's option; PyTorch has one path
    a = ap.parse_args()
    imagenet = a.variant != "cifar"
    a.size = a.size or (224 if imagenet else 32)
    a.classes = a.classes or (1000 if imagenet else 10)
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    if imagenet:
        model = getattr(torchvision.models, a.variant)(num_classes=a.classes)
        name = a.variant
    else:
        model = ResNet((a.depth - 2) // 6, a.width, a.channels, a.classes)
        name = "resnet-%d width %d" % (a.depth, a.width)
    opt = torch.optim.SGD(param_groups(model, 5e-4), lr=0.01, momentum=0.9, nesterov=True)
    x = torch.rand(a.batch, a.channels, a.size, a.size) * 2 - 1
    y = torch.randint(0, a.classes, (a.batch,))
    clock = time.process_time if a.threads == 1 else time.perf_counter
    model.train()
    best = float("inf")
    for r in range(a.reps + 2):
        t0 = clock()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        t = clock() - t0
        if r >= 2:
            best = min(best, t)
    print("PyTorch %s, %s, %dx%d images, batch %d, %d thread(s): best of %d steps %.1f ms, "
          "%.1f images/s; last loss %.4f" % (torch.__version__, name, a.size, a.size, a.batch,
                                              a.threads, a.reps, best * 1e3, a.batch / best,
                                              loss.item()))
    print("step_ms=%.3f" % (best * 1e3))


if __name__ == "__main__":
    main()
