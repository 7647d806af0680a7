#!/usr/bin/python3
"""torchvision's own ImageNet ResNets as the reference of tests/test-resnet-tv.c.

    torch_resnet_tv.py train WEIGHTS INPUTS GRADS SIDES
        torchvision.models.resnetNN loads WEIGHTS (Cohort's export) with strict=True, in float64,
        and runs one training-mode forward and backward on INPUTS, every ReLU taking the side
        Cohort's took (SIDES: one byte per ReLU output, in call order, NCHW; where float64 would
        take the other side, its input is within rounding of 0). Prints "flipped K" (how many
        ReLU outputs float64 alone would have put on the other side), "loss L", then per
        tensor of GRADS (Cohort's gradients, under the parameters' names) "grad NAME MAXREF
        MAXDIFF MAXDIFF32", the largest |reference|, |Cohort - reference| and |torchvision's
        own float32 - reference|, and per buffer of GRADS (Cohort's buffers after its forward)
        "buffer NAME MAXREF MAXDIFF".
    torch_resnet_tv.py eval WEIGHTS INPUTS [GRADS SIDES]
        evaluation mode: "loss L", then "logits V V …" per image; with GRADS and SIDES, then
        what train prints.
    torch_resnet_tv.py save WEIGHTS_PTH WEIGHTS_ST INPUTS SEED CLASSES
        a torchvision model with CLASSES outputs and random weights and BatchNorm statistics
        (SEED), saved with torch.save(state_dict) and as .safetensors (float32; counters I64);
        prints its evaluation-mode logits on INPUTS as "logits V V …" per image.

INPUTS: int32 variant (18, 34, 50 or 101), image size, classes, batch; float32 BatchNorm
momentum; images [B, 3, S, S] float32; labels [B] int32.
"""
import copy
import json
import struct
import sys

import torch
import torch.nn.functional as F
import torchvision


def read_inputs(path):
    with open(path, "rb") as f:
        data = f.read()
    variant, size, classes, batch = struct.unpack_from("<4i", data, 0)
    (momentum,) = struct.unpack_from("<f", data, 16)
    n = batch * 3 * size * size
    x = torch.frombuffer(bytearray(data[20:20 + 4 * n]), dtype=torch.float32)
    y = torch.frombuffer(bytearray(data[20 + 4 * n:20 + 4 * n + 4 * batch]), dtype=torch.int32)
    return variant, classes, momentum, x.view(batch, 3, size, size), y.long()


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        dtype = {"F32": torch.float32, "I64": torch.int64}[info["dtype"]]
        t = torch.frombuffer(bytearray(data[8 + n + b:8 + n + e]), dtype=dtype)
        out[name] = t.view(info["shape"])
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        dtype = "I64" if t.dtype == torch.int64 else "F32"
        raw = (t if dtype == "I64" else t.to(torch.float32)).numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def make_model(variant, classes, momentum):
    model = getattr(torchvision.models, "resnet%d" % variant)(num_classes=classes)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = momentum
    return model


def worst(ref, ours):
    ref = ref.double()
    return ref.abs().max().item() if ref.numel() else 0.0, \
        (ours.double() - ref).abs().max().item() if ref.numel() else 0.0


def main():
    mode = sys.argv[1]
    if mode == "save":
        pth, st, inputs, seed, classes = sys.argv[2:7]
        variant, _, momentum, x, _ = read_inputs(inputs)
        torch.manual_seed(int(seed))
        model = make_model(variant, int(classes), momentum)
        g = torch.Generator().manual_seed(int(seed))
        for m in model.modules():  # statistics and affine parameters away from 0 and 1
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2, generator=g)
                m.running_var.uniform_(0.5, 1.5, generator=g)
                m.weight.data.uniform_(0.5, 1.5, generator=g)
                m.bias.data.uniform_(-0.2, 0.2, generator=g)
                m.num_batches_tracked.fill_(int(seed))
        torch.save(model.state_dict(), pth)
        write_safetensors(st, model.state_dict())
        model = model.double().eval()
        with torch.no_grad():
            logits = model(x.double())
        for row in logits:
            print("logits " + " ".join(repr(v) for v in row.tolist()))
        return
    weights, inputs = sys.argv[2], sys.argv[3]
    variant, classes, momentum, x, y = read_inputs(inputs)
    model = make_model(variant, classes, momentum).double()
    state = read_safetensors(weights)
    model.load_state_dict({k: v.double() if v.is_floating_point() else v
                           for k, v in state.items()}, strict=True)
    if mode == "eval":
        model.eval()
        with torch.no_grad():
            logits = model(x.double())
        print("loss %r" % F.cross_entropy(logits, y).item())
        for row in logits:
            print("logits " + " ".join(repr(v) for v in row.tolist()))
        if len(sys.argv) < 5:
            return
    single = copy.deepcopy(model).float()  # PyTorch's own float32, for scale
    model.train()
    single.train()
    with open(sys.argv[5], "rb") as f:
        sides = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
    state = {"at": 0, "flipped": 0}

    def take_sides(module, inputs, output):
        pre = inputs[0]
        n = pre.numel()
        mask = sides[state["at"]:state["at"] + n].view(pre.shape).to(pre.dtype)
        state["at"] += n
        state["flipped"] += int(((pre > 0).to(pre.dtype) != mask).sum())
        return pre * mask

    for m in model.modules():
        if isinstance(m, torch.nn.ReLU):
            m.inplace = False
            m.register_forward_hook(take_sides)
    loss = F.cross_entropy(model(x.double()), y)
    assert state["at"] == sides.numel(), "SIDES has %d bytes, the ReLUs %d" % (sides.numel(),
                                                                             state["at"])
    print("flipped %d" % state["flipped"])
    loss.backward()
    F.cross_entropy(single(x), y).backward()
    print("loss %r" % loss.item())
    params, buffers = dict(model.named_parameters()), dict(model.named_buffers())
    params32 = dict(single.named_parameters())
    for name, g in read_safetensors(sys.argv[4]).items():
        if name in params:
            print("grad %s %r %r %r" % ((name,) + worst(params[name].grad, g)
                                        + (worst(params[name].grad, params32[name].grad)[1],)))
    for name, b in read_safetensors(sys.argv[4]).items():
        if name in buffers:
            print("buffer %s %r %r" % ((name,) + worst(buffers[name], b)))


if __name__ == "__main__":
    main()
