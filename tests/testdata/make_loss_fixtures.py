"""Records what the peers' own loss classes compute on fixed inputs: torch.nn's losses and
torchdistill's KDLoss (installed with tools/install_deps.sh --peers). Writes
losses.expected.pt: a tuple of cases {"key", "kwargs", "inputs", "value", "grads"}, grads being
d value / d input for every floating-point input. libkd's loss tests compare with it.

  bazel run //tests/testdata:make_loss_fixtures
"""
import os

import torch
import torch.nn as nn
from silverspoon_kd.losses.registry import get_loss_function
from torchdistill.losses.mid_level import (ATLoss, DISTLoss, KDLoss, LogitStdKDLoss, PKTLoss,
                                           RKDLoss)

HERE = os.path.dirname(os.path.realpath(__file__))


def case(key, kwargs, inputs, compute):
    inputs = {k: (v.clone().requires_grad_(True) if v.is_floating_point() else v.clone())
              for k, v in inputs.items()}
    value = compute(inputs)
    value.sum().backward()
    # Inputs a loss uses without gradient (RKD's teacher) have none.
    grads = {k: v.grad.clone() for k, v in inputs.items()
             if v.is_floating_point() and v.grad is not None}
    return {"key": key, "kwargs": kwargs,
            "inputs": {k: v.detach() for k, v in inputs.items()},
            "value": value.detach(), "grads": grads}


def kd(kwargs, loss_class=KDLoss):
    loss = loss_class("student", "output", "teacher", "output", **kwargs)

    def compute(i):
        targets = i.get("targets")
        return loss({"student": {"output": i["student"]}}, {"teacher": {"output": i["teacher"]}},
                    targets)
    return compute


def pair(loss_class, *args, **kwargs):
    """A torchdistill loss reading io["student"]["output"] and io["teacher"]["output"]."""
    loss = loss_class(*args, **kwargs)
    return lambda i: loss({"student": {"output": i["student"]}},
                          {"teacher": {"output": i["teacher"]}})


def at_pairs():
    return {"pair": {"student": {"io": "output", "path": "student"},
                     "teacher": {"io": "output", "path": "teacher"}, "weight": 1}}


def silverspoon(key, **kwargs):
    """silverspoon-kd's own loss function registered as `key`."""
    fn = get_loss_function(key, **kwargs)
    return lambda i: fn(i["student"], i["teacher"])


def main():
    torch.manual_seed(0)
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    labels = torch.tensor([0, 3, 4, 1])
    probs = torch.softmax(torch.randn(4, 5), 1)
    fs, ft = torch.randn(4, 3, 5, 5), torch.randn(4, 6, 5, 5)  # feature maps
    seq_s, seq_t = torch.randn(2, 3, 7), torch.randn(2, 3, 7)    # (batch, tokens, vocabulary)
    cases = [
        case("MSELoss", {}, {"input": x, "target": y}, lambda i: nn.MSELoss()(i["input"], i["target"])),
        case("MSELoss", {"reduction": "sum"}, {"input": x, "target": y},
             lambda i: nn.MSELoss(reduction="sum")(i["input"], i["target"])),
        case("L1Loss", {}, {"input": x, "target": y}, lambda i: nn.L1Loss()(i["input"], i["target"])),
        case("SmoothL1Loss", {"beta": 0.5}, {"input": x, "target": y},
             lambda i: nn.SmoothL1Loss(beta=0.5)(i["input"], i["target"])),
        case("CrossEntropyLoss", {"label_smoothing": 0.1}, {"input": x, "target": labels},
             lambda i: nn.CrossEntropyLoss(label_smoothing=0.1)(i["input"], i["target"])),
        case("CrossEntropyLoss", {"ignore_index": 3}, {"input": x, "target": labels},
             lambda i: nn.CrossEntropyLoss(ignore_index=3)(i["input"], i["target"])),
        case("KLDivLoss", {"reduction": "batchmean"},
             {"input": torch.log_softmax(x, 1), "target": probs},
             lambda i: nn.KLDivLoss(reduction="batchmean")(i["input"], i["target"])),
        case("BCEWithLogitsLoss", {}, {"input": x, "target": torch.sigmoid(y)},
             lambda i: nn.BCEWithLogitsLoss()(i["input"], i["target"])),
        case("CosineEmbeddingLoss", {"margin": 0.2},
             {"input1": x, "input2": y, "target": torch.tensor([1, -1, 1, -1])},
             lambda i: nn.CosineEmbeddingLoss(margin=0.2)(i["input1"], i["input2"], i["target"])),
        # torchdistill's KDLoss: with targets and alpha; without alpha (KL alone, no T^2: its
        # quirk); alpha 0 (the same quirk); an explicit beta.
        case("KDLoss", {"temperature": 4.0, "alpha": 0.5},
             {"student": x, "teacher": y, "targets": labels}, kd({"temperature": 4.0, "alpha": 0.5})),
        case("KDLoss", {"temperature": 2.0, "alpha": 0.0},
             {"student": x, "teacher": y, "targets": labels}, kd({"temperature": 2.0, "alpha": 0.0})),
        case("KDLoss", {"temperature": 3.0, "alpha": 0.9, "beta": 2.0},
             {"student": x, "teacher": y, "targets": labels},
             kd({"temperature": 3.0, "alpha": 0.9, "beta": 2.0})),
        case("KDLoss", {"temperature": 4.0, "alpha": 0.5},
             {"student": x, "teacher": y}, kd({"temperature": 4.0, "alpha": 0.5})),
        # Logit-standardized KD (torchdistill's LogitStdKDLoss).
        case("LogitStdKDLoss", {"temperature": 2.0, "alpha": 0.3},
             {"student": x, "teacher": y, "targets": labels},
             kd({"temperature": 2.0, "alpha": 0.3}, LogitStdKDLoss)),
        # alpha 0: KL alone, without T^2. (torchdistill raises TypeError for an unset alpha and
        # beta, computing 1 - None; libkd treats an unset alpha as 0.)
        case("LogitStdKDLoss", {"temperature": 4.0, "alpha": 0.0},
             {"student": x, "teacher": y}, kd({"temperature": 4.0, "alpha": 0.0}, LogitStdKDLoss)),
        # Feature and relation losses, torchdistill's own classes.
        case("ATLoss", {}, {"student": fs, "teacher": ft}, pair(ATLoss, at_pairs())),
        case("ATLoss", {"mode": "paper"}, {"student": fs, "teacher": ft},
             pair(ATLoss, at_pairs(), mode="paper")),
        case("PKTLoss", {}, {"student": x, "teacher": y},
             pair(PKTLoss, "student", "output", "teacher", "output")),
        case("RKDLoss", {"dist_factor": 1.0, "angle_factor": 2.0, "reduction": "mean"},
             {"student": fs, "teacher": ft},
             pair(RKDLoss, "student", "teacher", 1.0, 2.0, "mean")),
        case("DISTLoss", {"beta": 2.0, "gamma": 0.5, "tau": 4.0}, {"student": x, "teacher": y},
             pair(DISTLoss, "student", "output", "teacher", "output", beta=2.0, gamma=0.5,
                  tau=4.0)),
        # silverspoon-kd's own functions, on (batch, tokens, vocabulary) logits where it matters.
        case("mse", {}, {"student": x, "teacher": y}, silverspoon("mse")),
        case("normalized_mse", {}, {"student": x, "teacher": y}, silverspoon("normalized_mse")),
        case("cosine", {}, {"student": x, "teacher": y}, silverspoon("cosine")),
        case("smooth_l1", {"beta": 0.5}, {"student": x, "teacher": y},
             silverspoon("smooth_l1", beta=0.5)),
        case("kl_divergence", {"temperature": 2.0}, {"student": seq_s, "teacher": seq_t},
             silverspoon("kl_divergence", temperature=2.0)),
        case("kl_div", {"temperature": 3.0, "chunk_size": 2}, {"student": seq_s, "teacher": seq_t},
             silverspoon("kl_div", temperature=3.0, chunk_size=2)),
        case("jsd", {"temperature": 2.0, "beta": 0.3}, {"student": seq_s, "teacher": seq_t},
             silverspoon("jsd", temperature=2.0, beta=0.3)),
    ]
    torch.save(tuple(cases), os.path.join(HERE, "losses.expected.pt"))
    print("torch %s: %d loss cases" % (torch.__version__, len(cases)))


if __name__ == "__main__":
    main()
