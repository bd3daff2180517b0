"""Scripts well-known architectures (torchvision's, and PyTorch's own Transformer encoder and
LSTM) with random weights and small inputs, runs them with a forward hook on every module that
clones what it sees (the values at call time), and saves, per architecture NAME:

  NAME.pt            the scripted model (torch.jit.save)
  NAME.expected.pt   {"inputs": (...), "hooks": {path: {"input": (...), "output": (...)}}}

Run by Bazel (//tests/architectures:fixtures) with the Python of libkd's environment.
"""
import os
import sys

import torch
import torch.nn as nn
import torchvision


def clone_values(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (tuple, list)):
        return tuple(clone_values(v) for v in value)
    return value


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        # Dropout 0 and training mode: an eval-mode encoder takes PyTorch's fused fast path in
        # TorchScript but not eagerly, and then its submodules are not called at all.
        layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.encoder(x))


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 8, num_layers=2, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def architectures():
    image = torch.randn(1, 3, 64, 64)
    return {
        "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), image),
        "mobilenet_v3_small": (lambda: torchvision.models.mobilenet_v3_small(num_classes=10),
                               image),
        "squeezenet1_1": (lambda: torchvision.models.squeezenet1_1(num_classes=10), image),
        "shufflenet_v2_x0_5": (lambda: torchvision.models.shufflenet_v2_x0_5(num_classes=10),
                               image),
        "densenet121": (lambda: torchvision.models.densenet121(num_classes=10), image),
        "efficientnet_b0": (lambda: torchvision.models.efficientnet_b0(num_classes=10), image),
        "transformer_encoder": (Encoder, torch.randn(2, 5, 16), True),
        "lstm": (Recurrent, torch.randn(2, 6, 8)),
    }


def record(name, make, x, out_dir, training=False):
    torch.manual_seed(0)
    model = make().train(training)
    scripted = torch.jit.script(model)
    scripted.save(os.path.join(out_dir, name + ".pt"))
    hooks = {}
    handles = []
    for path, module in model.named_modules():
        if not path:
            continue
        hooks[path] = {"input": [], "output": []}

        def hook(module, args, output, path=path):
            args = clone_values(args)
            hooks[path]["input"].append(args[0] if len(args) == 1 else tuple(args))
            hooks[path]["output"].append(clone_values(output))

        handles.append(module.register_forward_hook(hook))
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    called = {p: {k: tuple(v) for k, v in h.items()} for p, h in hooks.items() if h["output"]}
    torch.save({"inputs": (x,), "training": training, "hooks": called},
               os.path.join(out_dir, name + ".expected.pt"))


def main():
    out_dir = sys.argv[1]
    for name, (make, x, *training) in architectures().items():
        record(name, make, x, out_dir, training=bool(training))


if __name__ == "__main__":
    main()
