#!/usr/bin/python3
"""Float64 PyTorch reference for tests/test-layers-conv.c: the ops of a convolutional network.

Reads a file of cases written by the test. Each case is: int32 name length, the name (ASCII),
int32 count and that many int32 parameters, int32 count of arrays, then each array as int64
length and that many float32 values. For each case, prints one line per output array: the
values separated by spaces (repr of float64), in the order documented at each op below.
"""
import struct
import sys

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def t(a, *shape):
    return torch.tensor(a, dtype=torch.float64).view(*shape)


def conv2d(ints, arr):
    """ints B C_in H W C_out K stride pad; arrays inp, weight, dout -> out, dinp, dweight."""
    B, C, H, W, O, K, s, p = ints
    x = t(arr[0], B, C, H, W).requires_grad_(True)
    w = t(arr[1], O, C, K, K).requires_grad_(True)
    y = F.conv2d(x, w, stride=s, padding=p)
    (y * t(arr[2], *y.shape)).sum().backward()
    return [y, x.grad, w.grad]


def bn_train(ints, arr):
    """ints B C H W; arrays x, weight, bias, running_mean, running_var, dy, [momentum, eps]
    -> y, running_mean, running_var (after the update), dx, dweight, dbias."""
    B, C, H, W = ints
    mom, eps = arr[6]
    x = t(arr[0], B, C, H, W).requires_grad_(True)
    w = t(arr[1], C).requires_grad_(True)
    b = t(arr[2], C).requires_grad_(True)
    rm, rv = t(arr[3], C), t(arr[4], C)
    y = F.batch_norm(x, rm, rv, w, b, training=True, momentum=mom, eps=eps)
    (y * t(arr[5], *y.shape)).sum().backward()
    return [y, rm, rv, x.grad, w.grad, b.grad]


def bn_eval(ints, arr):
    """ints B C H W; arrays x, weight, bias, running_mean, running_var, [eps] -> y."""
    B, C, H, W = ints
    x = t(arr[0], B, C, H, W)
    y = F.batch_norm(x, t(arr[3], C), t(arr[4], C), t(arr[1], C), t(arr[2], C),
                     training=False, eps=arr[5][0])
    return [y]


def avgpool(ints, arr):
    """ints B C H W; arrays x, dy [B, C] -> y [B, C], dx."""
    B, C, H, W = ints
    x = t(arr[0], B, C, H, W).requires_grad_(True)
    y = F.adaptive_avg_pool2d(x, 1).view(B, C)
    (y * t(arr[1], B, C)).sum().backward()
    return [y, x.grad]


def xent(ints, arr):
    """ints N V; arrays logits, labels (as floats) -> [mean loss], dlogits of the mean loss,
    [number of rows whose argmax is the label]."""
    N, V = ints
    logits = t(arr[0], N, V).requires_grad_(True)
    labels = torch.tensor([int(v) for v in arr[1]], dtype=torch.long)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    hits = (logits.detach().argmax(dim=1) == labels).sum()
    return [loss.view(1), logits.grad, hits.view(1).double()]


def sgd(ints, arr):
    """ints n steps nesterov; arrays params, grads [steps, n], [lr, momentum, dampening,
    weight_decay] -> params after the steps, the momentum buffer."""
    n, steps, nesterov = ints
    lr, mom, damp, wd = arr[2]
    p = torch.nn.Parameter(t(arr[0], n))
    g = t(arr[1], steps, n)
    opt = torch.optim.SGD([p], lr=lr, momentum=mom, dampening=damp, weight_decay=wd,
                          nesterov=bool(nesterov))
    for k in range(steps):
        p.grad = g[k].clone()
        opt.step()
    buf = opt.state[p].get("momentum_buffer")
    return [p.detach(), buf if buf is not None else torch.zeros(n)]


OPS = {"conv2d": conv2d, "bn_train": bn_train, "bn_eval": bn_eval, "avgpool": avgpool,
       "xent": xent, "sgd": sgd}


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
