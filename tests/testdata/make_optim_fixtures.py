"""torch.optim's optimizers and learning-rate schedulers, 20 steps each, for
distill/boxes/optim/optim_parity_test.cc. Writes tests/testdata/optim_reference.json:
  "optimizers": [{"key", "kwargs", "params": [[p after step 1], ..., [after step 20]]}]
      on p0 = [1.0, -2.0, 0.5, 3.0], loss = sum(a * p**2 + b * sin(3 p)) with
      a = [1, 2, 0.5, 0.1], b = [0.5, -1, 2, 1] (float64)
  "schedulers": [{"key", "kwargs", "optimizer", "lrs": [[lr of each group], ...] (the initial
      ones, then after each of 20 steps), "momenta": likewise (OneCycleLR's cycled momentum
      or beta1), "children": [...] (SequentialLR, ChainedScheduler)}]
      (LambdaLR's lr_lambda names a function of LAMBDAS, which the test registers too)
      over two parameter groups at lr 0.1 and 0.02.
Nothing is downloaded.

  ~/.cache/libkd/venv/bin/python tests/testdata/make_optim_fixtures.py
"""
import json
import math
import os

import torch
import torchdistill.optim.scheduler  # noqa: F401  (registers poly_lr_scheduler)
from torchdistill.optim.registry import get_scheduler

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 20
A = torch.tensor([1.0, 2.0, 0.5, 0.1], dtype=torch.float64)
B = torch.tensor([0.5, -1.0, 2.0, 1.0], dtype=torch.float64)

OPTIMIZERS = [
    ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.05, "momentum": 0.5, "dampening": 0.1}),
    ("Adam", {"lr": 0.01, "amsgrad": True, "weight_decay": 0.1}),
    ("AdamW", {"lr": 0.01, "betas": [0.8, 0.99], "weight_decay": 0.1}),
    ("RMSprop", {"lr": 0.01}),
    ("RMSprop", {"lr": 0.01, "alpha": 0.9, "eps": 1e-6, "weight_decay": 0.01, "momentum": 0.5,
                 "centered": True}),
    ("Adagrad", {"lr": 0.1}),
    ("Adagrad", {"lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.01,
                 "initial_accumulator_value": 0.1, "eps": 1e-8}),
]

SCHEDULERS = [
    ("StepLR", {"step_size": 3, "gamma": 0.5}),
    ("MultiStepLR", {"milestones": [2, 5, 11], "gamma": 0.3}),
    ("ExponentialLR", {"gamma": 0.9}),
    ("CosineAnnealingLR", {"T_max": 7, "eta_min": 0.001}),
    ("LinearLR", {"start_factor": 0.25, "end_factor": 0.75, "total_iters": 6}),
    ("ConstantLR", {"factor": 0.5, "total_iters": 4}),
    ("PolynomialLR", {"total_iters": 10, "power": 2.0}),
    ("CosineAnnealingWarmRestarts", {"T_0": 3, "T_mult": 2, "eta_min": 0.001}),
    ("CosineAnnealingWarmRestarts", {"T_0": 4}),
    ("OneCycleLR", {"max_lr": 0.5, "total_steps": 20}),
    ("OneCycleLR", {"max_lr": [0.5, 0.1], "total_steps": 21, "anneal_strategy": "linear",
                    "three_phase": True, "div_factor": 10.0, "final_div_factor": 100.0},
     "Adam"),
    ("OneCycleLR", {"max_lr": 0.3, "epochs": 4, "steps_per_epoch": 5, "pct_start": 0.5,
                    "cycle_momentum": False}),
    ("poly_lr_scheduler", {"num_iterations": 5, "num_epochs": 4, "power": 0.9}),
    ("LambdaLR", {"lr_lambda": "inverse_time"}),
    ("SequentialLR", {"milestones": [4]},
     "SGD", [("LinearLR", {"start_factor": 0.25, "total_iters": 4}),
             ("ExponentialLR", {"gamma": 0.9})]),
    ("SequentialLR", {"milestones": [3, 8]},
     "SGD", [("ConstantLR", {"factor": 0.1, "total_iters": 3}),
             ("CosineAnnealingLR", {"T_max": 5}),
             ("StepLR", {"step_size": 2, "gamma": 0.5})]),
    ("ChainedScheduler", {},
     "SGD", [("ConstantLR", {"factor": 0.5, "total_iters": 3}),
             ("ExponentialLR", {"gamma": 0.9})]),
]


# LambdaLR's functions by the names the test registers them under.
LAMBDAS = {"inverse_time": lambda e: 1.0 / (1 + e)}


def loss_of(p):
    return (A * p ** 2 + B * torch.sin(3 * p)).sum()


def optimizers():
    out = []
    for key, kwargs in OPTIMIZERS:
        p = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64, requires_grad=True)
        opt = getattr(torch.optim, key)([p], **kwargs)
        trail = []
        for _ in range(STEPS):
            opt.zero_grad()
            loss_of(p).backward()
            opt.step()
            trail.append(p.detach().tolist())
        out.append({"key": key, "kwargs": kwargs, "params": trail})
    return out


def make_optimizer(kind):
    a = torch.zeros(1, requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    if kind == "Adam":
        return torch.optim.Adam([{"params": [a]}, {"params": [b], "lr": 0.02}], lr=0.1)
    return torch.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.02}], lr=0.1, momentum=0.9)


def momenta(opt):
    return [g["betas"][0] if "betas" in g else g["momentum"] for g in opt.param_groups]


def schedulers():
    out = []
    for case in SCHEDULERS:
        key, kwargs = case[0], case[1]
        kind = case[2] if len(case) > 2 else "SGD"
        children = case[3] if len(case) > 3 else []
        opt = make_optimizer(kind)
        if children:
            made = [get_scheduler(opt, k, **kw) for k, kw in children]
            if key == "SequentialLR":
                scheduler = torch.optim.lr_scheduler.SequentialLR(opt, made, **kwargs)
            else:
                scheduler = torch.optim.lr_scheduler.ChainedScheduler(made)
        elif key == "LambdaLR":
            scheduler = torch.optim.lr_scheduler.LambdaLR(opt, LAMBDAS[kwargs["lr_lambda"]])
        else:
            scheduler = get_scheduler(opt, key, **kwargs)
        lrs = [[g["lr"] for g in opt.param_groups]]
        moms = [momenta(opt)]
        for _ in range(STEPS if key != "OneCycleLR" else kwargs.get("total_steps", 20) - 1):
            opt.step()
            scheduler.step()
            lrs.append([g["lr"] for g in opt.param_groups])
            moms.append(momenta(opt))
        case_out = {"key": key, "kwargs": kwargs, "optimizer": kind, "lrs": lrs, "momenta": moms}
        if children:
            case_out["children"] = [{"key": k, "kwargs": kw} for k, kw in children]
        out.append(case_out)
    return out


def main():
    torch.set_default_dtype(torch.float64)
    data = {"optimizers": optimizers(), "schedulers": schedulers()}
    with open(os.path.join(HERE, "optim_reference.json"), "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
