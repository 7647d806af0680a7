#!/usr/bin/python3
"""PyTorch DDP reference for tests/test-resnet-ddp.c: processes (one per rank) on Gloo train the
ResNet of torch_resnet_model.py with torch.nn.parallel.DistributedDataParallel and SGD, each
rank on the batches Cohort's data pipeline gave that rank, then evaluate through the DDP module
(eval mode, no_grad) as a training script would.

    torch_resnet_ddp.py WEIGHTS BATCHES OUT LR MOMENTUM WD BROADCAST_BUFFERS

WEIGHTS: Cohort's initial .safetensors (read with the standard library). BATCHES: 9 int32
(n, width, channels, image size, classes, batch per rank, steps, evaluation steps, world
size) and a float32 BatchNorm momentum, then for each training step and each rank the images
[B*C*H*W] float32 and labels [B] int32, then the same for each evaluation step.
BROADCAST_BUFFERS: 1 or 0, DDP's broadcast_buffers. OUT: rank 0 writes one number per line:
each step's loss averaged over the ranks, the validation loss and accuracy (sums over all
ranks, then divided), then rank 0's buffers after training, then its parameters (file order).
float64 throughout, one thread per process, loopback only (a file:// rendezvous in OUT's
folder).
"""
import os
import struct
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from torch_resnet_model import ResNet, param_groups, read_safetensors


def read_batches(path):
    with open(path, "rb") as f:
        data = f.read()
    n, width, ch, size, classes, B, steps, evals, world = struct.unpack_from("<9i", data, 0)
    (mom,) = struct.unpack_from("<f", data, 36)
    D = ch * size * size
    off, batches = 40, []
    for _ in range(steps + evals):
        per_rank = []
        for _ in range(world):
            x = torch.tensor(struct.unpack_from("<%df" % (B * D), data, off), dtype=torch.float64)
            off += 4 * B * D
            y = torch.tensor(struct.unpack_from("<%di" % B, data, off), dtype=torch.long)
            off += 4 * B
            per_rank.append((x.view(B, ch, size, size), y))
        batches.append(per_rank)
    return (n, width, ch, classes, mom, world), batches[:steps], batches[steps:]


def worker(rank, args):
    weights, batches_path, out, lr, momentum, wd, broadcast = args
    torch.set_num_threads(1)
    (n, width, ch, classes, mom, world), batches, evals = read_batches(batches_path)
    dist.init_process_group("gloo", init_method="file://" + out + ".rendezvous", rank=rank,
                            world_size=world)
    model = ResNet(n, width, ch, classes, momentum=mom).double()
    state, _ = read_safetensors(weights)
    model.load_state_dict(state, strict=True)
    ddp = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=broadcast)
    opt = torch.optim.SGD(param_groups(model, wd), lr=lr, momentum=momentum)
    losses = []
    for s in range(len(batches)):
        x, y = batches[s][rank]
        opt.zero_grad()
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    ddp.eval()
    sums = torch.zeros(3, dtype=torch.float64)
    with torch.no_grad():
        for per_rank in evals:
            x, y = per_rank[rank]
            logits = ddp(x)
            sums[0] += F.cross_entropy(logits, y, reduction="sum")
            sums[1] += (logits.argmax(dim=1) == y).sum()
            sums[2] += len(y)
    dist.all_reduce(sums)
    if rank == 0:
        buffers, params = dict(model.named_buffers()), dict(model.named_parameters())
        with open(out + ".tmp", "w") as f:
            for v in losses + [(sums[0] / sums[2]).item(), (sums[1] / sums[2]).item()]:
                f.write(repr(v) + "\n")
            for k in state:
                if k in buffers:
                    f.write("".join(repr(float(e)) + "\n" for e in buffers[k].flatten().tolist()))
            for k in state:
                if k in params:
                    f.write("".join(repr(float(e)) + "\n" for e in params[k].flatten().tolist()))
        os.rename(out + ".tmp", out)
    dist.destroy_process_group()


def main():
    weights, batches, out = sys.argv[1], sys.argv[2], sys.argv[3]
    lr, momentum, wd = float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
    broadcast = sys.argv[7] == "1"
    with open(batches, "rb") as f:
        world = struct.unpack("<9i", f.read(36))[8]
    mp.spawn(worker, args=((weights, batches, out, lr, momentum, wd, broadcast),), nprocs=world)


if __name__ == "__main__":
    main()
