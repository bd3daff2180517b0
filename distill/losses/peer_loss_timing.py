"""Times the peers' own losses (forward + backward, one thread) on the inputs loss_benchmark
saved. Serves requests: for each line "case runs" on stdin, answers "case seconds" (the median
of `runs` steps after a warm-up one) or "case -" where no peer has the loss.

  python peer_loss_timing.py INPUTS.pt      (run by //distill/losses:loss_benchmark --peers)
"""
import statistics
import sys
import time

import torch
import torch.nn as nn
from silverspoon_kd.losses.registry import get_loss_function
from torchdistill.losses.mid_level import (ATLoss, AffinityLoss, AltActTransferLoss, ChSimLoss,
                                           DISTLoss, DISTPlusLoss, FTLoss,
                                           HierarchicalContextLoss, KDLoss, KTALoss, PADL2Loss,
                                           RKDLoss, SKDDirectionLoss, SKDInstanceLoss, SPKDLoss,
                                           SRDLoss, SSKDLoss, AuxSSKDLoss, VIDLoss)


def io(i, name):
    return {name: {"output": i[name]}}


def torchdistill(loss, *names):
    return lambda i: loss({"student": {"output": i["student"]}},
                          {"teacher": {"output": i["teacher"]}}, *[i[n] for n in names])


def silverspoon(key, *extra, **kwargs):
    fn = {}

    def compute(i):
        if "fn" not in fn:  # built once, with its matrix, as a run builds it
            fn["fn"] = get_loss_function(key, **{e: i[e] for e in extra}, **kwargs)
        return fn["fn"](i["student"], i["teacher"])
    return compute


AT_PAIRS = {"pair": {"student": {"io": "output", "path": "student"},
                     "teacher": {"io": "output", "path": "teacher"}, "weight": 1}}

PEERS = {
    "KDLoss": torchdistill(KDLoss("student", "output", "teacher", "output", temperature=4.0,
                                  alpha=0.5), "targets"),
    "ATLoss": torchdistill(ATLoss(AT_PAIRS)),
    "RKDLoss": torchdistill(RKDLoss("student", "teacher", 1.0, 2.0, "mean")),
    "DISTLoss": torchdistill(DISTLoss("student", "output", "teacher", "output")),
    "SPKDLoss": lambda i: SPKDLoss("student", "teacher", "batchmean")(
        {"student": {"output": i["student"]}}, {"teacher": {"output": i["teacher"]}}),
    "MSELoss": lambda i: nn.MSELoss()(i["student"], i["teacher"]),
    "kl_divergence": silverspoon("kl_divergence", temperature=2.0),
    "jsd": silverspoon("jsd"),
    "mahalanobis_mse": silverspoon("mahalanobis_mse", "weight_matrix"),
    "relkd_da": silverspoon("relkd_da"),
    # torchdistill's other methods, on the io dicts its boxes build.
    "FTLoss": lambda i: FTLoss()({"translator": {"output": i["student"]}},
                                 {"paraphraser": {"output": i["teacher"]}}),
    "KTALoss": lambda i: KTALoss(p=2, q=1)({"feature_adapter": {"output": i["student"]}},
                                           {"paraphraser": {"output": i["teacher"]}}),
    "AltActTransferLoss": torchdistill(AltActTransferLoss(AT_PAIRS, 1.0, "mean")),
    "ChSimLoss": torchdistill(ChSimLoss(AT_PAIRS)),
    "AffinityLoss": torchdistill(AffinityLoss("student", "teacher")),
    "DISTPlusLoss": lambda i: DISTPlusLoss("sl", "output", "tl", "output", "sf", "output", "tf",
                                           "output")(
        {"sl": {"output": i["student"]}, "sf": {"output": i["student_features"]}},
        {"tl": {"output": i["teacher"]}, "tf": {"output": i["teacher_features"]}}),
    "SRDLoss": lambda i: SRDLoss("sf", "output", "tf", "output", "sl", "output", "tl", "output")(
        {"sl": {"output": i["student"]}, "sf": {"output": i["student_features"]}},
        {"tl": {"output": i["teacher"]}, "tf": {"output": i["teacher_features"]}}),
    "HierarchicalContextLoss": lambda i: HierarchicalContextLoss(
        "student", "output", "teacher", "output")(
        {"student": {"output": (i["student"], None)}}, {"teacher": {"output": i["teacher"]}}),
    "PADL2Loss": lambda i: PADL2Loss("student", "teacher", module_path="var")(
        {"student": {"output": i["student"]}, "var": {"output": i["log_variances"]}},
        {"teacher": {"output": i["teacher"]}}),
    "VIDLoss": lambda i: VIDLoss(AT_PAIRS)(
        {"student": {"output": (i["pred_mean"], i["pred_var"])}},
        {"teacher": {"output": i["teacher"]}}),
    "SKDDirectionLoss": torchdistill(SKDDirectionLoss("student", "output", "teacher", "output")),
    "SKDInstanceLoss": torchdistill(SKDInstanceLoss("student", "output", "teacher", "output")),
    "AuxSSKDLoss": lambda i: AuxSSKDLoss()({}, {"ss_module": {"output": i["ss"]}}),
    "SSKDLoss": lambda i: SSKDLoss("s", "t", "s_ss", "t_ss", kl_temp=4.0, ss_temp=0.5,
                                   tf_temp=4.0, ss_ratio=0.75, tf_ratio=1.0,
                                   loss_weights=[1.0, 0.9, 10.0, 2.7])(
        {"s": {"output": i["student_linear"]}, "s_ss": {"output": i["student_ss"]}},
        {"t": {"output": i["teacher_linear"]}, "t_ss": {"output": i["teacher_ss"]}},
        i["targets"]),
    "HuberLoss": lambda i: nn.HuberLoss()(i["input"], i["target"]),
    "NLLLoss": lambda i: nn.NLLLoss()(i["input"], i["target"]),
}


def step_seconds(fn, inputs):
    i = {k: (v.detach().requires_grad_(True)
             if v.is_floating_point() and k != "weight_matrix" else v)
         for k, v in inputs.items()}
    start = time.perf_counter()
    fn(i).backward()
    return time.perf_counter() - start


def main():
    torch.set_num_threads(1)
    cases = torch.load(sys.argv[1])
    for line in sys.stdin:
        name, runs = line.split()
        fn = PEERS.get(name)
        if fn is None:
            print(name, "-", flush=True)
            continue
        step_seconds(fn, cases[name])
        times = [step_seconds(fn, cases[name]) for _ in range(int(runs))]
        print(name, statistics.median(times), flush=True)


if __name__ == "__main__":
    main()
