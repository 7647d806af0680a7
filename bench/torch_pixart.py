#!/usr/bin/python3
"""One training step of the dit family's text layout in PyTorch (eager, float32), beside
bench-model's (bench/run-model-bench): diffusers' PixArtTransformer2DModel as
tests/torch_pixart_model_ref.py writes it (the float64 reference test-dit-text checks Cohort
against, here in float32), the same shape, batch and caption lengths (5 to 9 tokens of
--max-text padded rows), the flow-matching loss and AdamW. Prints the line run-model-bench
reads."""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import torch_pixart_model_ref as ref  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_dit import time_flow_steps  # noqa: E402

_features64 = ref.timestep_features


def _features32(t, dim=256, max_period=10000.0):
    # the reference computes in float64; the timed model is float32 throughout
    return _features64(t, dim, max_period).float()


ref.timestep_features = _features32


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("layers", 6), ("heads", 4), ("hidden", 128), ("image-size", 16),
                          ("channels", 3), ("patch", 2), ("text-dim", 64), ("max-text", 9),
                          ("batch", 16), ("threads", 1), ("steps", 10), ("warmup", 2)]:
        ap.add_argument("--" + name, type=int, default=default)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = ref.PixArtTransformer2DModel(a.channels, a.image_size, a.patch, a.hidden, a.heads,
                                     a.text_dim, a.layers).float()
    opt = torch.optim.AdamW(m.parameters(), lr=2e-3, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.0)
    B, M = a.batch, a.max_text
    x0 = torch.rand(B, a.channels, a.image_size, a.image_size) * 2 - 1
    klen = torch.tensor([min(M, 5 + i % 5) for i in range(B)])
    text = torch.randn(B, M, a.text_dim) * (torch.arange(M)[None, :, None] < klen[:, None, None])
    time_flow_steps("dit-text", m, opt, x0, lambda xt, t: m(xt, t, text, klen), a)


if __name__ == "__main__":
    main()
