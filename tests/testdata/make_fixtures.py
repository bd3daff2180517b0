#!/usr/bin/env python3
"""Makes libkd's TorchScript fixtures and records what Python torch computes on them.

Run with the Python of libkd's virtual environment (tools/install_deps.sh), whose torch is the
one libkd links against:

    bazel run //tests/testdata:make_fixtures                 # the small committed fixtures
    bazel run //tests/testdata:make_fixtures -- --resnet18 /tmp/resnet18.pt  # benchmarks
    ~/.cache/libkd/venv/bin/python tests/testdata/make_fixtures.py   # the same, by hand

small_cnn_torch113.pt and small_cnn_torch113.expected.pt were made by this script with torch
1.13.1 and are kept as they are: they prove that TorchScript files saved by older torch still
load and compute what that torch computed.

For each fixture NAME it writes, next to this script:
  NAME.pt           the module, torch.jit.save'd
  NAME.expected.pt  torch.save'd dict of what Python recorded: "inputs" (forward's args),
                    "output", "modules" (("path|type", ...) from named_modules, type as
                    original_name), "num_params", "hooks" (path -> {"input": (...), "output":
                    (...)} from Python forward hooks, one entry per call, torchdistill's
                    convention: a single positional argument is unwrapped). Sequences are
                    tuples (libtorch 1.13 could not unpickle a one-element Python list).
  small_cnn_traced.pt       small_cnn made with torch.jit.trace (same weights).
  NAME.input.pt     the forward's input as //tools:capture reads it (a tensor or a tuple).
  tricky.kwargs.pt          a dict of keyword arguments for tricky's forward.
  small_cnn.state.pt        torch.save(dict(model.state_dict())), to test loading state.
  tricky.ordered_state.pt   torch.save(model.state_dict()) (an OrderedDict), to test the error.
  small_cnn.legacy_state.pt small_cnn.state.pt in torch.save's pre-1.6 (non-zip) format, to
                            test that error (--legacy writes only this file and the next).
  small_cnn.future_version.pt small_cnn.pt with its `version` record set to 99, as a newer
                            PyTorch's file would say (--legacy writes it too).
"""
import argparse
import os

from typing import List

import torch
from torch import nn

# `bazel run` starts the script in its runfiles; the fixtures belong in the source tree.
HERE = (os.path.join(os.environ["BUILD_WORKSPACE_DIRECTORY"], "tests", "testdata")
        if os.environ.get("BUILD_WORKSPACE_DIRECTORY") else
        os.path.dirname(os.path.abspath(__file__)))


class Block(nn.Module):
    """A residual block; `relu` runs twice per forward."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + x)


class SmallCNN(nn.Module):
    """A Fashion-MNIST-sized CNN (1x28x28 -> 10) with nested paths and shared block types."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.layer1 = nn.Sequential(Block(8), Block(8))
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.layer2 = nn.Sequential(Block(16))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.stem(x)
        x = self.layer1(x)
        x = self.layer2(self.down(x))
        return self.fc(torch.flatten(self.pool(x), 1))


class Mix(nn.Module):
    """Two arguments in, a tuple out."""

    def forward(self, a, b):
        return a + b, a * b


class Tricky(nn.Module):
    """Calls in a loop and in a branch, a tuple-returning module, a default argument, and a
    module that forward never calls."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.act = nn.Tanh()
        self.mix = Mix()
        self.unused = nn.Linear(2, 2)

    def forward(self, x, scale: float = 1.0):
        h = self.lin(x)
        for _ in range(3):
            h = self.act(h)
        s, p = self.mix(h, x)
        if scale > 0.5:
            out = self.lin(s)
        else:
            out = p
        return out * scale, p


class Bump(nn.Module):
    """Modifies its input in place."""

    def forward(self, x):
        x.add_(1.0)
        return x


class InPlace(nn.Module):
    """In-place changes after module calls: forward doubles b's output in place, and the module
    bump changes c's output; nothing touches a's input or output. A hook must still see what
    each module returned, cut or not."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.c = nn.Linear(4, 4)
        self.bump = Bump()

    def forward(self, x):
        h = self.a(x)
        g = self.b(h)
        g.mul_(2.0)
        k = self.c(g)
        self.bump(k)
        return k


class ResBlock(nn.Module):
    """torchvision's BasicBlock: an in-place ReLU module after bn1, `out += identity`, then the
    same ReLU module again (the shapes that made recorded values alias later writes)."""

    def __init__(self, c=4):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        out += identity
        out = self.relu(out)
        return out


class ResNetTiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, padding=1)
        self.act = nn.Hardswish(inplace=True)
        self.block = ResBlock()
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        x = self.act(self.stem(x))
        x = self.block(x)
        return self.head(x.mean(dim=(2, 3)))


class DenseLayerLike(nn.Module):
    """An overloaded forward, as DenseNet's _DenseLayer has: TorchScript compiles forward__0
    and forward__1, and the parent calls those names."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    @torch.jit._overload_method
    def forward(self, x: List[torch.Tensor]) -> torch.Tensor:
        pass

    @torch.jit._overload_method
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: F811
        pass

    def forward(self, x):  # noqa: F811
        if isinstance(x, torch.Tensor):
            prev = [x]
        else:
            prev = x
        return self.lin(torch.cat(prev, 0))


class Overloads(nn.Module):
    """Overloaded forwards: a DenseNet-like layer called with a list and with a tensor, and a
    scripted nn.LSTM (whose forward is overloaded too)."""

    def __init__(self):
        super().__init__()
        self.layer = DenseLayerLike()
        self.lstm = nn.LSTM(4, 4, batch_first=True)

    def forward(self, x):
        y = self.layer([x, x])
        z = self.layer(x)
        out, _ = self.lstm(y.unsqueeze(0))
        return z, out


def clone_values(value):
    """A hook's values as they are at call time (the forward may write them in place later)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (tuple, list)):
        return tuple(clone_values(v) for v in value)
    return value


def record(name, model, inputs, hook_paths):
    model.eval()
    print("torch %s: %s" % (torch.__version__, name))
    scripted = torch.jit.script(model)
    scripted.save(os.path.join(HERE, name + ".pt"))

    hooks = {}
    handles = []
    modules = dict(model.named_modules())
    for path in hook_paths:
        hooks[path] = {"input": [], "output": []}

        def hook(module, args, output, path=path):
            args = clone_values(args)
            hooks[path]["input"].append(args[0] if len(args) == 1 else tuple(args))
            hooks[path]["output"].append(clone_values(output))

        handles.append(modules[path].register_forward_hook(hook))
    with torch.no_grad():
        output = model(*inputs)
        scripted_output = scripted(*inputs)
    for h in handles:
        h.remove()
    # The scripted module must compute what the eager one does, or the fixture is wrong.
    flat = output if isinstance(output, tuple) else (output,)
    flat_s = scripted_output if isinstance(scripted_output, tuple) else (scripted_output,)
    for a, b in zip(flat, flat_s):
        assert torch.allclose(a, b, atol=1e-6), name

    # Sequences are saved as tuples (libtorch 1.13's unpickler could not read the APPEND opcode
    # that Python's pickler writes for a one-element list).
    expected = {
        "inputs": tuple(inputs),
        "output": output,
        "modules": tuple("%s|%s" % (p, scripted_type(scripted, p))
                         for p, _ in scripted.named_modules()),
        "num_params": sum(p.numel() for p in model.parameters()),
        "hooks": {path: {k: tuple(v) for k, v in h.items()} for path, h in hooks.items()},
    }
    torch.save(expected, os.path.join(HERE, name + ".expected.pt"))
    # The forward's input as //tools:capture reads it: one tensor, or a tuple of arguments.
    torch.save(inputs[0] if len(inputs) == 1 else tuple(inputs),
               os.path.join(HERE, name + ".input.pt"))
    return scripted


def scripted_type(scripted, path):
    module = dict(scripted.named_modules())[path]
    return module.original_name


def make_small():
    torch.manual_seed(0)
    cnn = SmallCNN()
    # Non-trivial BatchNorm statistics, so eval mode differs from train mode.
    with torch.no_grad():
        for m in cnn.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    x = torch.randn(2, 1, 28, 28)
    record("small_cnn", cnn, (x,),
           ["stem", "stem.0", "layer1.0.relu", "layer1.1.conv2", "layer2.0", "fc"])
    # The same module traced instead of scripted: teachers exported with torch.jit.trace.
    torch.jit.trace(cnn, x).save(os.path.join(HERE, "small_cnn_traced.pt"))
    # A plain dict: libtorch reads a pickled OrderedDict as None.
    torch.save(dict(cnn.state_dict()), os.path.join(HERE, "small_cnn.state.pt"))

    torch.manual_seed(1)
    tricky = Tricky()
    record("tricky", tricky, (torch.randn(3, 4), 2.0), ["lin", "act", "mix"])
    torch.manual_seed(2)
    record("inplace", InPlace(), (torch.randn(2, 4),), ["a", "b", "c"])
    torch.manual_seed(3)
    resnet_tiny = ResNetTiny()
    with torch.no_grad():
        for m in resnet_tiny.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    torch.manual_seed(4)
    record("overloads", Overloads(), (torch.randn(2, 4),), ["layer", "layer.lin", "lstm"])
    record("resnet_tiny", resnet_tiny, (torch.randn(2, 1, 6, 6),),
           ["stem", "act", "block", "block.conv1", "block.bn1", "block.relu", "block.conv2",
            "block.bn2", "head"])
    torch.save({"x": torch.randn(3, 4), "scale": 0.25}, os.path.join(HERE, "tricky.kwargs.pt"))
    # What users save most often, which libtorch cannot read: the error must say what to do.
    torch.save(tricky.state_dict(), os.path.join(HERE, "tricky.ordered_state.pt"))


def make_resnet18(path):
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    torch.jit.script(model).save(path)


def make_legacy():
    state = torch.load(os.path.join(HERE, "small_cnn.state.pt"))
    torch.save(state, os.path.join(HERE, "small_cnn.legacy_state.pt"),
               _use_new_zipfile_serialization=False)
    import zipfile
    with zipfile.ZipFile(os.path.join(HERE, "small_cnn.pt")) as src, \
            zipfile.ZipFile(os.path.join(HERE, "small_cnn.future_version.pt"), "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("/version"):
                data = b"99\n"
            dst.writestr(info, data)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resnet18", metavar="PATH",
                        help="write a scripted torchvision ResNet-18 (random weights) to PATH "
                             "instead of the small fixtures")
    parser.add_argument("--legacy", action="store_true",
                        help="write only small_cnn.legacy_state.pt (from small_cnn.state.pt)")
    args = parser.parse_args()
    if args.legacy:
        make_legacy()
    elif args.resnet18:
        make_resnet18(args.resnet18)
    else:
        make_small()


if __name__ == "__main__":
    main()
