"""A tiny ILSVRC 2012 tree for distill/torchdistill/imagenet_samples_test.cc: train/ and val/, two
WordNet-id class folders each, JPEG and PNG files at ImageNet's sizes (500x375, 375x500, 500x333,
...), smooth colour gradients so that the files stay small. The test points torchdistill's
`~/datasets/ilsvrc2012` at it. Nothing is downloaded.

  ~/.cache/libkd/venv/bin/python tests/testdata/make_imagenet_folder_fixtures.py
"""
import os
import shutil

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "imagenet_folder")

# split/class/file: (width, height)
FILES = {
    "train/n01440764/n01440764_10026.JPEG": (500, 375),
    "train/n01440764/n01440764_10027.png": (375, 500),
    "train/n01443537/n01443537_10007.JPEG": (500, 333),
    "train/n01443537/n01443537_10014.png": (400, 300),
    "val/n01440764/ILSVRC2012_val_00000293.JPEG": (500, 375),
    "val/n01443537/ILSVRC2012_val_00000236.png": (500, 334),
}


def image(w, h, seed):
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    phase = seed * 0.7
    channels = [127 + 120 * np.sin(x / (40 + 9 * c) + y / (55 + 7 * c) + phase + c) for c in range(3)]
    return np.stack(channels, -1).round().astype(np.uint8)


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    for i, (path, (w, h)) in enumerate(sorted(FILES.items())):
        full = os.path.join(ROOT, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        pixels = image(w, h, i)
        if full.endswith(".png"):  # posterized: flat bands compress well
            Image.fromarray(pixels // 32 * 32).save(full, optimize=True)
            continue
        img = Image.fromarray(pixels)
        img.save(full, format="JPEG", quality=80)


if __name__ == "__main__":
    main()
