"""The CIFAR-style ResNet in PyTorch with torchvision's module names, shared by the references
of tests/test-resnet.c (torch_resnet_ref.py) and tests/test-resnet-ddp.c
(torch_resnet_ddp.py), and a reader for Cohort's .safetensors files (the Python safetensors
package is not installed: 8-byte little-endian header length, JSON header, raw data)."""
import json
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride, momentum):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes, momentum=momentum)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes, momentum=momentum)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                nn.BatchNorm2d(planes, momentum=momentum))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        shortcut = x if self.downsample is None else self.downsample(x)
        return F.relu(out + shortcut)


class ResNet(nn.Module):
    """He et al.'s CIFAR ResNet of depth 6n+2: stem, three stages of n BasicBlocks with width,
    2 width and 4 width channels (stride 2 at the start of stages 2 and 3), global average
    pooling, a linear classifier."""

    def __init__(self, n, width, channels, classes, momentum=0.1):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width, momentum=momentum)
        inplanes = width
        for stage in range(3):
            planes = width << stage
            blocks = []
            for i in range(n):
                stride = 2 if stage > 0 and i == 0 else 1
                blocks.append(BasicBlock(inplanes, planes, stride, momentum))
                inplanes = planes
            setattr(self, "layer%d" % (stage + 1), nn.Sequential(*blocks))
        self.fc = nn.Linear(inplanes, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def read_safetensors(path, dtype=torch.float64):
    """The tensors of a file as a dict in file order (F32 as `dtype`, I64 as int64), and the
    dtype names of the header."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    entries = sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                     key=lambda kv: kv[1]["data_offsets"][0])
    out, dtypes = {}, {}
    for name, info in entries:
        b, e = info["data_offsets"]
        dtypes[name] = info["dtype"]
        if info["dtype"] == "I64":
            vals = struct.unpack_from("<%dq" % ((e - b) // 8), data, 8 + n + b)
            out[name] = torch.tensor(vals, dtype=torch.int64).view(info["shape"])
        else:
            assert info["dtype"] == "F32", name
            vals = struct.unpack_from("<%df" % ((e - b) // 4), data, 8 + n + b)
            out[name] = torch.tensor(vals, dtype=dtype).view(info["shape"])
    return out, dtypes


def param_groups(model, weight_decay):
    """Weight decay on convolution kernels and the classifier's matrix, not on BatchNorm or
    biases (Cohort's rule)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": rest, "weight_decay": 0.0}]
