"""Times torchdistill's own ForwardHookManager for forward_hook_manager_benchmark --peers, on
the models the benchmark runs in libkd (eager PyTorch modules of the same layers):

  chain5     5 modules that each add 1, called in a row, on a 1-element tensor: the forward costs
             next to nothing and the difference is the cost of the hooks
  small_cnn  tests/testdata/make_fixtures.py's SmallCNN, on a (32, 1, 28, 28) batch
  resnet18   torchvision's ResNet-18, on a (1, 3, 224, 224) image

The hooks record inputs and outputs of 5 modules (the paths the benchmark hooks in libkd), and
each hooked forward pops the I/O dict, as a distillation step does. Eval mode, one thread.
Serves requests, one a line on stdin:

  time MODEL HOOKED GRAD FORWARDS -> "time SECONDS": thread CPU time of FORWARDS forwards of
                                     MODEL (HOOKED 0/1: with the hooks and a pop per forward;
                                     GRAD 0: under torch.no_grad(), 1: an input that requires
                                     grad, so autograd records the graph), divided by FORWARDS

  python peer_hook_timing.py       (run by //hooks:forward_hook_manager_benchmark --peers)
"""
import os
import sys
import time

import torch
import torch.nn as nn
import torchvision
from torchdistill.core.forward_hook import ForwardHookManager

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "testdata"))
from make_fixtures import SmallCNN  # noqa: E402


class AddOne(nn.Module):
    def forward(self, x):
        return x + 1


class Chain(nn.Module):
    def __init__(self):
        super().__init__()
        for i in range(5):
            self.add_module(f"m{i}", AddOne())

    def forward(self, x):
        for i in range(5):
            x = getattr(self, f"m{i}")(x)
        return x


# model -> (factory, input shape, hooked paths); the paths are libkd's benchmark's.
MODELS = {
    "chain5": (Chain, (1,), ["m0", "m1", "m2", "m3", "m4"]),
    "small_cnn": (SmallCNN, (32, 1, 28, 28), ["stem.0", "layer1.0", "down", "layer2.0.conv1",
                                               "fc"]),
    "resnet18": (torchvision.models.resnet18, (1, 3, 224, 224),
                 ["layer1", "layer2.0", "layer3.1.conv2", "layer4", "fc"]),
}


class Setup:
    def __init__(self, name, hooked):
        factory, shape, paths = MODELS[name]
        self.model = factory().eval()
        self.input = torch.randn(*shape)
        self.manager = ForwardHookManager(torch.device("cpu"))
        if hooked:
            for path in paths:
                self.manager.add_hook(self.model, path, requires_input=True, requires_output=True)
        self.hooked = hooked

    def run(self, grad, forwards):
        x = self.input.clone().requires_grad_(True) if grad else self.input
        start = time.thread_time()
        with torch.set_grad_enabled(grad):
            for _ in range(forwards):
                self.model(x)
                if self.hooked:
                    self.manager.pop_io_dict()
        return (time.thread_time() - start) / forwards


def main():
    torch.set_num_threads(1)
    setups = {}
    for line in sys.stdin:
        words = line.split()
        if len(words) != 5 or words[0] != "time":
            print("error", flush=True)
            continue
        name, hooked, grad, forwards = words[1], words[2] == "1", words[3] == "1", int(words[4])
        key = (name, hooked)
        if key not in setups:
            setups[key] = Setup(name, hooked)
        print(f"time {setups[key].run(grad, forwards):.9g}", flush=True)


if __name__ == "__main__":
    main()
