#!/usr/bin/python3
"""Float64 PyTorch reference for tests/test-layers-vae.c: the ops diffusers' AutoencoderKL
calls beyond convolutions (F.group_norm, F.interpolate(mode="nearest"), F.pad, softmax).

Reads a file of cases written by the test, in the format of tests/torch_conv_ref.py: int32
name length, the name, int32 count and that many int32 parameters, int32 count of arrays,
then each array as int64 length and that many float32 values. Prints one line per output
array, in the order documented at each op.
"""
import struct
import sys

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def t(a, *shape):
    return torch.tensor(a, dtype=torch.float64).view(*shape)


def group_norm(ints, arr):
    """ints B C H W G; arrays x, weight, bias, dy -> y, dx, dweight, dbias (eps 1e-6)."""
    B, C, H, W, G = ints
    x = t(arr[0], B, C, H, W).requires_grad_(True)
    w = t(arr[1], C).requires_grad_(True)
    b = t(arr[2], C).requires_grad_(True)
    y = F.group_norm(x, G, w, b, eps=1e-6)
    (y * t(arr[3], *y.shape)).sum().backward()
    return [y, x.grad, w.grad, b.grad]


def resample(ints, arr):
    """ints B C H W f; arrays x, d(upsampled), d(padded) -> upsampled, its dx, x padded by
    (0, 1, 0, 1) as diffusers' Downsample2D pads, its dx."""
    B, C, H, W, f = ints
    x = t(arr[0], B, C, H, W).requires_grad_(True)
    u = F.interpolate(x, scale_factor=f, mode="nearest")
    (u * t(arr[1], *u.shape)).sum().backward()
    dxu = x.grad.clone()
    x.grad = None
    p = F.pad(x, (0, 1, 0, 1), mode="constant", value=0)
    (p * t(arr[2], *p.shape)).sum().backward()
    return [u, dxu, p, x.grad]


def softmax(ints, arr):
    """ints N V; arrays x, dy, [scale] -> softmax(scale x) per row, dx."""
    N, V = ints
    x = t(arr[0], N, V).requires_grad_(True)
    y = torch.softmax(x * arr[2][0], dim=-1)
    (y * t(arr[1], N, V)).sum().backward()
    return [y, x.grad]


OPS = {"group_norm": group_norm, "resample": resample, "softmax": softmax}


def main(path):
    with open(path, "rb") as f:
        data = f.read()
    off = 0
    while off < len(data):
        (n,) = struct.unpack_from("<i", data, off)
        name = data[off + 4:off + 4 + n].decode("ascii")
        off += 4 + n
        (ni,) = struct.unpack_from("<i", data, off)
        ints = struct.unpack_from("<%di" % ni, data, off + 4)
        off += 4 + 4 * ni
        (na,) = struct.unpack_from("<i", data, off)
        off += 4
        arrays = []
        for _ in range(na):
            (m,) = struct.unpack_from("<q", data, off)
            arrays.append(list(struct.unpack_from("<%df" % m, data, off + 8)))
            off += 8 + 4 * m
        for out in OPS[name](ints, arrays):
            print(" ".join(repr(v) for v in out.detach().reshape(-1).tolist()))


if __name__ == "__main__":
    main(sys.argv[1])
