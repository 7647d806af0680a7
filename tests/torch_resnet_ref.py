#!/usr/bin/python3
"""Float64 PyTorch reference for tests/test-resnet.c: the ResNet of torch_resnet_model.py loads
Cohort's .safetensors with load_state_dict(strict=True), which checks every name and shape.

    torch_resnet_ref.py WEIGHTS INPUTS train     one training-mode forward and backward: the
                                                 loss, every parameter's gradient (file order),
                                                 then every buffer after the forward
    torch_resnet_ref.py WEIGHTS INPUTS train-bn-eval
                                                 the same with every BatchNorm in eval mode
                                                 (model.train(), then bn.eval() on each: the
                                                 running statistics normalise and stay)
    torch_resnet_ref.py WEIGHTS INPUTS eval      evaluation mode: the loss, then the logits
    torch_resnet_ref.py WEIGHTS INPUTS sgd N LR MOMENTUM NESTEROV WD STEP_SIZE GAMMA
                                                 N SGD steps with StepLR on the batch: N
                                                 losses, then every buffer, then every
                                                 parameter

INPUTS: 6 int32 (n, width, channels, image size, classes, batch), a float32 BatchNorm
momentum, then images [B*C*H*W] float32 and labels [B] int32. Numbers are printed one per
line. The first line of every mode is the dtype check: the number of buffers named
num_batches_tracked that the file holds as I64.
"""
import struct
import sys

import torch
import torch.nn.functional as F

from torch_resnet_model import ResNet, param_groups, read_safetensors


def main():
    weights, inputs, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(inputs, "rb") as f:
        data = f.read()
    n, width, ch, size, classes, B = struct.unpack_from("<6i", data, 0)
    (mom,) = struct.unpack_from("<f", data, 24)
    D = ch * size * size
    x = torch.tensor(struct.unpack_from("<%df" % (B * D), data, 28), dtype=torch.float64)
    y = torch.tensor(struct.unpack_from("<%di" % B, data, 28 + 4 * B * D), dtype=torch.long)
    x = x.view(B, ch, size, size)

    model = ResNet(n, width, ch, classes, momentum=mom).double()
    state, dtypes = read_safetensors(weights)
    model.load_state_dict(state, strict=True)
    print(sum(1 for k, v in dtypes.items() if k.endswith("num_batches_tracked") and v == "I64"))
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    pnames = [k for k in state if k in params]
    bnames = [k for k in state if k in buffers]

    def dump(values):
        for v in values:
            for e in v.flatten().tolist():
                print(repr(float(e)))

    if mode in ("train", "train-bn-eval"):
        model.train()
        if mode == "train-bn-eval":
            for mod in model.modules():
                if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
                    mod.eval()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        print(repr(loss.item()))
        dump(params[k].grad for k in pnames)
        dump(buffers[k] for k in bnames)
    elif mode == "eval":
        model.eval()
        with torch.no_grad():
            logits = model(x)
        print(repr(F.cross_entropy(logits, y).item()))
        dump([logits])
    else:
        steps, lr, momentum = int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
        nesterov, wd = sys.argv[7] == "1", float(sys.argv[8])
        step_size, gamma = int(sys.argv[9]), float(sys.argv[10])
        opt = torch.optim.SGD(param_groups(model, wd), lr=lr, momentum=momentum,
                              nesterov=nesterov)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=step_size, gamma=gamma)
        model.train()
        for _ in range(steps):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            sched.step()
            print(repr(loss.item()))
        dump(buffers[k] for k in bnames)
        dump(params[k] for k in pnames)


if __name__ == "__main__":
    main()
