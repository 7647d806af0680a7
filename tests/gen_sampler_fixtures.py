#!/usr/bin/python3
"""Writes tests/fixtures/sampler.json: the indices torch.utils.data.DistributedSampler gives
for a table of cases, so test-sampler can check Cohort's sampler against real PyTorch.

Run with Debian's PyTorch: /usr/bin/python3 tests/gen_sampler_fixtures.py
"""
import json
import os
import sys

import torch
from torch.utils.data import DistributedSampler

# Lists longer than this are stored as their first and last 50 entries and their sum.
FULL_LIMIT = 2000


class Length:
    """A stand-in dataset: DistributedSampler only asks for len()."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def case(n, world, rank, seed, epoch, shuffle, drop_last):
    sampler = DistributedSampler(Length(n), num_replicas=world, rank=rank, shuffle=shuffle,
                                 seed=seed, drop_last=drop_last)
    sampler.set_epoch(epoch)
    indices = list(iter(sampler))
    assert len(indices) == len(sampler)
    row = {"n": n, "world": world, "rank": rank, "seed": str(seed), "epoch": epoch,
           "shuffle": shuffle, "drop_last": drop_last, "num_samples": len(sampler)}
    if len(indices) <= FULL_LIMIT:
        row["indices"] = indices
    else:
        row["first"] = indices[:50]
        row["last"] = indices[-50:]
        row["sum"] = str(sum(indices))
    return row


def main():
    cases = []
    # Every rank of small worlds, both drop_last settings, shuffled and not.
    for n in (1, 2, 3, 5, 7, 10, 16, 17, 33, 100):
        for world in (1, 2, 3, 4):
            for rank in range(world):
                for drop_last in (False, True):
                    cases.append(case(n, world, rank, 0, 0, True, drop_last))
                cases.append(case(n, world, rank, 0, 0, False, False))
    # Seeds and epochs, including seeds above 2^32 (only the low 32 bits seed mt19937).
    for seed in (1, 42, 1234, 2**32 - 1, 2**32, 2**32 + 7, 2**40 + 3, 2**63 - 5):
        for epoch in (0, 1, 5):
            cases.append(case(37, 2, 1, seed, epoch, True, False))
            cases.append(case(100, 3, 2, seed, epoch, True, True))
    # n smaller than the world: padding repeats the list several times.
    for world in (5, 8):
        for rank in range(world):
            cases.append(case(3, world, rank, 7, 2, True, False))
            cases.append(case(3, world, rank, 7, 2, True, True))
    # Large n: stored as a summary.
    for rank in range(2):
        cases.append(case(100000, 2, rank, 1337, 3, True, False))
    cases.append(case(100001, 3, 1, 99, 0, True, True))
    cases.append(case(100000, 1, 0, 2**35 + 11, 1, True, False))

    out = {"generator": "torch " + torch.__version__ + " DistributedSampler", "cases": cases}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "sampler.json")
    with open(path + ".tmp", "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    os.replace(path + ".tmp", path)
    print(f"wrote {len(cases)} cases to {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
