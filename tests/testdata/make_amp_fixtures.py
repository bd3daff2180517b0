"""Records a few training steps under Python's autocast for box_amp_test.cc: libkd's box with
run.precision BF16 (and FP16 with its GradScaler) must take the same steps.

Writes, next to this file:
  amp_student.pt            libkd's fashion_cnn of width 4 (distill/models/small_models.cc),
                            scripted: the student both sides start from
  amp_data/                 64 random 28x28 images and labels as Fashion-MNIST's gzip IDX files
                            (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz)
  amp.expected.pt           {"bf16": {...}, "fp16": {...}, "fp32": {...}}, each the losses of the
                            4 steps and the state dict after them; and "bf16_variants",
                            "fp16_variants": lists of {"cpu": ..., "losses": ..., "state": ...},
                            recorded on other kinds of CPU
fp16's and bf16's CPU kernels round differently on different CPUs (fp16: a machine with
AVX512-FP16 against an AMD EPYC without it, the step-1 loss 1.65e-4 apart, weights up to 0.017
after 4 steps; bf16: another AMD EPYC, the step-1 loss 2.5e-4 apart, weights up to 0.034; Python
against Python), so both are recorded per kind of CPU; fp32 agreed across them. On a machine
whose steps match none of the recordings, add its own:

  ~/.cache/libkd/venv/bin/python tests/testdata/make_amp_fixtures.py --add_variants
The steps: batches of 16 in order, pixels / 255, cross-entropy, SGD(lr 0.1, momentum 0.9), one
thread; bf16 and fp16 under torch.autocast("cpu"), fp16 with torch.amp.GradScaler("cpu").

  ~/.cache/libkd/venv/bin/python tests/testdata/make_amp_fixtures.py
"""
import copy
import gzip
import os
import platform
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.realpath(__file__))


def conv_bn_relu(cin, cout, stride=1):
    return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout),
            nn.ReLU()]


class FashionCnn(nn.Module):
    """libkd's fashion_cnn: stem (conv stride 2), layer1, layer2 (conv, maxpool, conv), head."""

    def __init__(self, width, num_classes=10):
        super().__init__()
        self.stem = nn.Sequential(*conv_bn_relu(1, width, stride=2))
        self.layer1 = nn.Sequential(*conv_bn_relu(width, width))
        self.layer2 = nn.Sequential(*conv_bn_relu(width, 2 * width), nn.MaxPool2d(2),
                                    *conv_bn_relu(2 * width, 2 * width))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(2 * width * 7 * 7, num_classes))

    def forward(self, x):
        return self.head(self.layer2(self.layer1(self.stem(x))))


def write_idx(path, array, magic_type):
    """An IDX file (MNIST's format), gzip: magic, dimensions, big-endian, then the bytes."""
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, magic_type, array.dim()))
        for size in array.shape:
            f.write(struct.pack(">I", size))
        f.write(array.numpy().tobytes())


def train(model, images, labels, precision):
    model = copy.deepcopy(model).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu") if precision == "fp16" else None
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    losses = []
    for step in range(4):
        x = images[16 * step:16 * (step + 1)].float().div(255).unsqueeze(1)
        y = labels[16 * step:16 * (step + 1)].long()
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(model(x), y)
        losses.append(loss.item())
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return {"losses": torch.tensor(losses, dtype=torch.float64), "state": state}


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def add_variant(model, images, labels, precision):
    """Appends this machine's steps in `precision` to amp.expected.pt unless a recording equals
    them."""
    path = os.path.join(HERE, "amp.expected.pt")
    expected = torch.load(path)
    mine = train(model, images, labels, precision)
    variants = expected.setdefault(precision + "_variants", [])
    for recorded in [expected[precision]] + variants:
        if torch.equal(recorded["losses"], mine["losses"]):
            print("this machine's", precision, "steps are recorded already")
            return
    variants.append({"cpu": cpu_name(), **mine})
    torch.save(expected, path)
    print("added", precision, "of", cpu_name(), [round(v, 6) for v in mine["losses"].tolist()])


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = FashionCnn(4)
    generator = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (64, 28, 28), dtype=torch.uint8, generator=generator)
    labels = torch.randint(0, 10, (64,), dtype=torch.uint8, generator=generator)
    if "--add_variants" in sys.argv[1:]:
        for precision in ("bf16", "fp16"):
            add_variant(model, images, labels, precision)
        return
    torch.jit.script(model).save(os.path.join(HERE, "amp_student.pt"))
    data = os.path.join(HERE, "amp_data")
    os.makedirs(data, exist_ok=True)
    write_idx(os.path.join(data, "train-images-idx3-ubyte.gz"), images, 0x08)
    write_idx(os.path.join(data, "train-labels-idx1-ubyte.gz"), labels, 0x08)
    expected = {p: train(model, images, labels, p) for p in ("fp32", "bf16", "fp16")}
    torch.save(expected, os.path.join(HERE, "amp.expected.pt"))
    for p, r in expected.items():
        print(p, [round(v, 6) for v in r["losses"].tolist()])


if __name__ == "__main__":
    main()
