"""torchvision's side of //distill/data:image_folder_benchmark, answering on stdin/stdout:
  make ROOT N      -> "make N": N JPEGs (ImageNet-like sizes, 10 classes) under ROOT, made once
  time ROOT W B    -> "time SECONDS IMAGES": one epoch of torchvision's ImageFolder with
                      RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize through
                      torch's DataLoader (batch B, W workers, shuffled), one thread per process
"""
import os
import sys
import time

import numpy as np
import torch
import torchvision
import torchvision.transforms as T
from PIL import Image


def make(root, n):
    rng = np.random.default_rng(0)
    if os.path.isdir(root) and sum(len(f) for _, _, f in os.walk(root)) == n:
        return
    for i in range(n):
        folder = os.path.join(root, "class%02d" % (i % 10))
        os.makedirs(folder, exist_ok=True)
        h, w = int(rng.integers(300, 500)), int(rng.integers(350, 600))
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([(x * (c + 1) + y * (3 - c)) % 256 for c in range(3)], -1)
        pixels = np.clip(base + rng.integers(0, 48, size=(h, w, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(os.path.join(folder, "img%04d.jpg" % i), quality=90)


def epoch(root, workers, batch):
    torch.set_num_threads(1)
    transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                           T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    data = torchvision.datasets.ImageFolder(root, transform)
    loader = torch.utils.data.DataLoader(data, batch_size=batch, shuffle=True,
                                         num_workers=workers,
                                         worker_init_fn=lambda _: torch.set_num_threads(1))
    start = time.perf_counter()
    images = 0
    for x, _ in loader:
        images += x.shape[0]
    return time.perf_counter() - start, images


def main():
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "make":
            make(words[1], int(words[2]))
            print("make", words[2], flush=True)
        elif words[0] == "time":
            seconds, images = epoch(words[1], int(words[2]), int(words[3]))
            print("time", seconds, images, flush=True)
        else:
            print("-", flush=True)


if __name__ == "__main__":
    main()
