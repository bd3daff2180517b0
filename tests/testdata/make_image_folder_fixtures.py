"""torchvision's ImageFolder listing and its transforms' tensor path, for
distill/data/image_folder_test.cc. Writes tests/testdata/image_folder/ (a small class-folder tree:
JPEG and PNG files, upper-case extensions, a nested folder, a file without an image extension)
and tests/testdata/image_folder_expected.json:
  "samples": ImageFolder(root).samples (paths relative to root) and "classes"
  "crops": RandomResizedCrop.get_params after torch.manual_seed(seed), per image size and seed
  "pipelines": a uint8 (3, H, W) image ("image", flattened) and what each pipeline makes of it
     ("values", flattened float) after torch.manual_seed(seed):
     train: RandomResizedCrop(16, antialias=True), RandomHorizontalFlip(), ConvertImageDtype,
            Normalize; eval: Resize(20, antialias=True), CenterCrop(16), ConvertImageDtype,
            Normalize
Nothing is downloaded.

  ~/.cache/libkd/venv/bin/python tests/testdata/make_image_folder_fixtures.py
"""
import json
import os
import shutil

import numpy as np
import torch
import torchvision
import torchvision.transforms as T
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "image_folder")
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def image(h, w, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 7 + y * 5 + 60 * c) % 256 for c in range(3)], -1)
    return np.clip(base + rng.integers(0, 40, size=(h, w, 3)), 0, 255).astype(np.uint8)


def tree():
    shutil.rmtree(ROOT, ignore_errors=True)
    files = {
        "dog/b.png": (30, 40, 1), "dog/a.JPG": (25, 20, 2), "dog/nested/c.jpeg": (40, 30, 3),
        "dog/notes.txt": None, "cat/z.png": (20, 20, 4), "cat/y.PNG": (18, 24, 5),
        "ant/x.jpg": (32, 32, 6),
    }
    for name, spec in files.items():
        path = os.path.join(ROOT, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if spec is None:
            with open(path, "w") as f:
                f.write("not an image\n")
            continue
        pixels = Image.fromarray(image(*spec))
        if name.lower().endswith(".png"):
            pixels.save(path, format="PNG")
        else:
            pixels.save(path, format="JPEG", quality=90)
    folder = torchvision.datasets.ImageFolder(ROOT)
    return {"classes": folder.classes,
            "samples": [[os.path.relpath(p, ROOT), c] for p, c in folder.samples]}


def main():
    out = tree()
    crops = []
    for h, w in ((30, 40), (45, 25), (10, 200)):
        for seed in (0, 1, 7):
            torch.manual_seed(seed)
            params = T.RandomResizedCrop.get_params(torch.zeros(3, h, w), (0.08, 1.0),
                                                    (3 / 4, 4 / 3))
            crops.append({"height": h, "width": w, "seed": seed, "params": list(params)})
    out["crops"] = crops
    pipelines = []
    train = T.Compose([T.RandomResizedCrop(16, antialias=True), T.RandomHorizontalFlip(),
                       T.ConvertImageDtype(torch.float32), T.Normalize(MEAN, STD)])
    evaluate = T.Compose([T.Resize(20, antialias=True), T.CenterCrop(16),
                          T.ConvertImageDtype(torch.float32), T.Normalize(MEAN, STD)])
    for h, w, image_seed in ((30, 40, 11), (45, 25, 12)):
        pixels = torch.from_numpy(image(h, w, image_seed)).permute(2, 0, 1).contiguous()
        for name, pipeline in (("train", train), ("eval", evaluate)):
            for seed in (3, 4):
                torch.manual_seed(seed)
                y = pipeline(pixels)
                pipelines.append({"pipeline": name, "height": h, "width": w,
                                  "image": pixels.flatten().tolist(), "seed": seed,
                                  "shape": list(y.shape), "values": y.flatten().tolist()})
    out["pipelines"] = pipelines
    with open(os.path.join(HERE, "image_folder_expected.json"), "w") as f:
        json.dump(out, f)
        f.write("\n")


if __name__ == "__main__":
    main()
