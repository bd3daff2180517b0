"""Records the orders of torch.utils.data's samplers for sampler_test.cc (libkd's samplers must
give the same indices): each random sampler gets generator=torch.Generator().manual_seed(seed +
epoch), the seed libkd's loader gives it. Run with the venv's python from the repository root:

  ~/.cache/libkd/venv/bin/python distill/data/testdata/make_sampler_orders.py

writes distill/data/testdata/sampler_orders.txt: one case a line, `name: i0 i1 ...`.
"""
import os

import torch
from torch.utils.data import (DistributedSampler, RandomSampler, SequentialSampler,
                              SubsetRandomSampler, WeightedRandomSampler)

N = 10
DATA = range(N)


def gen(seed, epoch):
    return torch.Generator().manual_seed(seed + epoch)


def distributed(num_replicas, rank, seed, epoch, shuffle=True, drop_last=False):
    sampler = DistributedSampler(DATA, num_replicas=num_replicas, rank=rank, shuffle=shuffle,
                                 seed=seed, drop_last=drop_last)
    sampler.set_epoch(epoch)
    return list(sampler)


CASES = {
    # RandomSampler, seed 3: epochs 0 and 1.
    "random_s3_e0": list(RandomSampler(DATA, generator=gen(3, 0))),
    "random_s3_e1": list(RandomSampler(DATA, generator=gen(3, 1))),
    # With replacement, 70 draws (two chunks of 32 and 6), seed 3 epoch 2.
    "random_replacement70_s3_e2": list(
        RandomSampler(DATA, replacement=True, num_samples=70, generator=gen(3, 2))),
    # Without replacement, 25 of 10: two permutations and the start of a third.
    "random_num25_s7_e0": list(RandomSampler(DATA, num_samples=25, generator=gen(7, 0))),
    "sequential": list(SequentialSampler(DATA)),
    "subset_9_2_5_7_s1_e1": list(SubsetRandomSampler([9, 2, 5, 7], generator=gen(1, 1))),
    "weighted_replacement12_s0_e0": list(WeightedRandomSampler(
        [0.1, 0.9, 0.4, 0.7, 3.0, 0.6], 12, replacement=True, generator=gen(0, 0))),
    "weighted_noreplacement5_s2_e3": list(WeightedRandomSampler(
        [0.9, 0.4, 0.05, 0.2, 0.3, 0.1], 5, replacement=False, generator=gen(2, 3))),
    # DistributedSampler, one process (the order libkd shards), seed 11 epoch 2.
    "distributed_1of1_s11_e2": distributed(1, 0, 11, 2),
    # Three processes, rank 1: padded (10 -> 12) and cut (drop_last: 10 -> 9).
    "distributed_rank1of3_s11_e2": distributed(3, 1, 11, 2),
    "distributed_rank1of3_s11_e2_drop_last": distributed(3, 1, 11, 2, drop_last=True),
    "distributed_rank2of3_noshuffle": distributed(3, 2, 0, 0, shuffle=False),
}

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sampler_orders.txt")
with open(out, "w") as f:
    f.write(f"# Made by make_sampler_orders.py with torch {torch.__version__}; dataset of {N}.\n")
    for name, order in CASES.items():
        f.write(f"{name}: {' '.join(str(int(i)) for i in order)}\n")
print(out)
