"""Times silverspoon-kd's collect_storage_inventory (CPU tensors included) over N live tensors,
as //memdiag:memdiag_benchmark --peers does libkd's: prints the median seconds of `runs` calls.

  python peer_inventory_timing.py N RUNS
"""
import statistics
import sys
import time

import torch
from silverspoon_kd.engines.memory_diagnostics import collect_storage_inventory


def main():
    torch.set_num_threads(1)
    n, runs = int(sys.argv[1]), int(sys.argv[2])
    held = [torch.empty(4) for _ in range(n)]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        inventory = collect_storage_inventory(include_cpu=True, force_gc=False)
        times.append(time.perf_counter() - start)
    assert len(inventory) >= n, len(inventory)
    print(statistics.median(times), flush=True)
    del held


if __name__ == "__main__":
    main()
