"""Records what the peers' own loss classes compute on fixed inputs: torch.nn's losses,
torchdistill's and silverspoon-kd's (installed with tools/install_deps.sh --peers), and, for
losses neither peer has (DKD, the sequence divergences), formulas written from their papers in
this file. Writes losses.expected.pt: a tuple of cases {"key", "kwargs", "inputs", "value",
"grads", "state", "state_after"}: grads are d value / d input for every floating-point input;
state is what the loss owns (a projector, a memory bank) loaded before the call, state_after
what it holds after. libkd's loss tests compare with it.

  bazel run //tests/testdata:make_loss_fixtures
"""
import os

import torch
import torch.nn as nn
from silverspoon_kd.losses.registry import get_loss_function
import torch.nn.functional as F
from torchdistill.losses.mid_level import (ATLoss, AffinityLoss, AltActTransferLoss, CCKDLoss,
                                           ChSimLoss, CRDLoss, DISTLoss, DISTPlusLoss, FSPLoss,
                                           FTLoss, HierarchicalContextLoss, KDLoss, KTALoss,
                                           LogitStdKDLoss, PADL2Loss, PKTLoss, RegularizationLoss,
                                           RKDLoss, SKDDirectionLoss, SKDInstanceLoss, SPKDLoss,
                                           SRDLoss, SSKDLoss, AuxSSKDLoss, VIDLoss)

HERE = os.path.dirname(os.path.realpath(__file__))


def case(key, kwargs, inputs, compute, state=None, state_after=None, constant=()):
    """state: name -> tensor the loss owns, loaded before compute; state_after: a function
    returning what it owns after; constant: inputs given without gradient."""
    inputs = {k: (v.clone().requires_grad_(k not in constant) if v.is_floating_point()
                  else v.clone())
              for k, v in inputs.items()}
    state = {k: v.detach().clone() for k, v in (state or {}).items()}
    value = compute(inputs)
    value.sum().backward()
    # Inputs a loss uses without gradient (RKD's teacher) have none.
    grads = {k: v.grad.clone() for k, v in inputs.items()
             if v.is_floating_point() and v.grad is not None}
    after = {k: v.detach().clone() for k, v in state_after().items()} if state_after else {}
    return {"key": key, "kwargs": kwargs,
            "inputs": {k: v.detach() for k, v in inputs.items()},
            "value": value.detach(), "grads": grads, "state": state, "state_after": after}


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


def fsp(i):
    """torchdistill's FSPLoss on one pair of (first, second) feature maps per model."""
    pairs = {"pair": {"student_first": {"io": "input", "path": "s1"},
                      "student_second": {"io": "output", "path": "s2"},
                      "teacher_first": {"io": "input", "path": "t1"},
                      "teacher_second": {"io": "output", "path": "t2"}, "weight": 1}}
    return FSPLoss(pairs)({"s1": {"input": i["student_first"]}, "s2": {"output": i["student_second"]}},
                          {"t1": {"input": i["teacher_first"]}, "t2": {"output": i["teacher_second"]}})


def spkd(reduction):
    loss = SPKDLoss("s", "t", reduction)
    return lambda i: loss({"s": {"output": i["student"]}}, {"t": {"output": i["teacher"]}})


def cckd(kernel, reduction):
    loss = CCKDLoss("s", "t", kernel, reduction)
    return lambda i: loss({"s": {"output": i["student"]}}, {"t": {"output": i["teacher"]}})


def crd_case(dtype=torch.float32):
    """torchdistill's CRDLoss with its memory bank; the negatives are given (contrast_idx): its
    own sampler (draw) reads self.prob, which does not exist, so only given negatives run.
    float64: the module converted with .double(), as a float64 model's would be."""
    torch.manual_seed(1)
    loss = CRDLoss("s_norm", "s_empty", "t_norm", input_size=6, output_size=20,
                   num_negative_samples=5, num_samples=20, temperature=0.07,
                   momentum=0.5).to(dtype)
    state = {"memory_v1": loss.memory_v1, "memory_v2": loss.memory_v2, "params": loss.params}
    s = F.normalize(torch.randn(4, 6), dim=1).to(dtype)
    t = F.normalize(torch.randn(4, 6), dim=1).to(dtype)
    pos = torch.tensor([3, 7, 11, 19])
    contrast = torch.randint(0, 20, (4, 6))
    contrast[:, 0] = pos
    kwargs = {"input_size": 6, "output_size": 20, "num_negative_samples": 5,
              "num_samples": 20, "temperature": 0.07, "momentum": 0.5}

    def compute(i):
        return loss({"s_norm": {"output": i["student"]},
                     "s_empty": {"input": {"pos_idx": i["pos_idx"],
                                           "contrast_idx": i["contrast_idx"]}}},
                    {"t_norm": {"output": i["teacher"]}}).squeeze()  # (1,) -> a scalar
    return case("CRDLoss", kwargs, {"student": s, "teacher": t, "pos_idx": pos,
                                    "contrast_idx": contrast}, compute, state=state,
                state_after=lambda: {"memory_v1": loss.memory_v1,
                                     "memory_v2": loss.memory_v2, "params": loss.params})


def dkd(alpha, beta, temperature):
    """Decoupled KD (Zhao et al., CVPR 2022), Eq. 7 as the authors' mdistiller computes it:
    alpha TCKD + beta NCKD, each a batch-mean KL times T^2."""
    def compute(i):
        s, t, y = i["student"], i["teacher"], i["targets"]
        gt = torch.zeros_like(s).scatter_(1, y.unsqueeze(1), 1).bool()
        ps, pt = F.softmax(s / temperature, 1), F.softmax(t / temperature, 1)
        binary = lambda p: torch.cat([(p * gt).sum(1, keepdim=True),
                                      (p * ~gt).sum(1, keepdim=True)], 1)
        bs, bt = binary(ps), binary(pt)
        tckd = F.kl_div(torch.log(bs), bt, reduction="sum") * temperature ** 2 / y.shape[0]
        pt2 = F.softmax(t / temperature - 1000.0 * gt, 1)
        log_ps2 = F.log_softmax(s / temperature - 1000.0 * gt, 1)
        nckd = F.kl_div(log_ps2, pt2, reduction="sum") * temperature ** 2 / y.shape[0]
        return alpha * tckd + beta * nckd
    return compute


def sequence(divergence, temperature=1.0, ignore_index=-100, reduction="token_mean", **kw):
    """The sequence-model divergences, per token over the vocabulary (GKD, Agarwal et al. 2024;
    DistiLLM, Ko et al. 2024), masked where labels == ignore_index, then reduced."""
    def per_token(s, t):
        ls, lt = F.log_softmax(s.float() / temperature, -1), F.log_softmax(t.float() / temperature, -1)
        ps, pt = ls.exp(), lt.exp()
        kl = lambda p, lp, lq: (p * (lp - lq)).sum(-1)
        if divergence == "forward_kl":
            return kl(pt, lt, ls)
        if divergence == "reverse_kl":
            return kl(ps, ls, lt)
        if divergence == "generalized_jsd":
            b = kw["beta"]
            lm = torch.log(b * pt + (1 - b) * ps)
            return b * kl(pt, lt, lm) + (1 - b) * kl(ps, ls, lm)
        if divergence == "total_variation":
            return 0.5 * (pt - ps).abs().sum(-1)
        a = kw["alpha"]
        if divergence == "skew_forward_kl":
            return kl(pt, lt, torch.log(a * pt + (1 - a) * ps))
        return kl(ps, ls, torch.log(a * ps + (1 - a) * pt))  # skew_reverse_kl

    def compute(i):
        d = per_token(i["student"], i["teacher"])
        mask = (i["labels"] != ignore_index).float() if "labels" in i else torch.ones_like(d)
        d = d * mask
        if reduction == "none":
            return d
        if reduction == "sum":
            return d.sum()
        if reduction == "token_mean":
            return d.sum() / mask.sum()
        per_seq, count = d.sum(-1), mask.sum(-1)  # sequence_mean
        has = count > 0
        return (per_seq[has] / count[has]).mean()
    return compute


def silverspoon_head(key, **kwargs):
    """silverspoon-kd's logit_lens_kl with an output head made of the inputs head_weight and
    head_bias (so their gradients are recorded too)."""
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.i = None

        def forward(self, x):
            return F.linear(x, self.i["head_weight"], self.i["head_bias"])
    head = Head()
    fn = get_loss_function(key, output_head=head, **kwargs)

    def compute(i):
        head.i = i
        return fn(i["student"], i["teacher"])
    return compute


def silverspoon_metric(key, matrix_kwarg, **kwargs):
    """A Mahalanobis loss whose matrix is the input `matrix_kwarg` (detached, as silverspoon-kd
    does)."""
    return lambda i: get_loss_function(key, **{matrix_kwarg: i[matrix_kwarg]}, **kwargs)(
        i["student"], i["teacher"])


def contrastive_case(kwargs, s, t):
    """silverspoon-kd's contrastive loss; with a projector (dimensions differ), its initial
    weights are the state (in the inputs' dtype)."""
    fn = get_loss_function("contrastive", **kwargs)
    if fn.projector is not None:
        fn.projector.to(s.dtype)
    state = {}
    if fn.projector is not None:
        state = {"projector.weight": fn.projector.weight, "projector.bias": fn.projector.bias}
    return case("contrastive", kwargs, {"student": s, "teacher": t},
                lambda i: fn(i["student"], i["teacher"]), state=state)


def io(path, value, key="output"):
    return {path: {key: value}}


def transfer_cases():
    """torchdistill's mid-level losses on recorded values, its own classes on io dicts as its
    boxes build them; libkd's inputs are the values the module-path kwargs name."""
    torch.manual_seed(2)
    fs, ft = torch.randn(4, 3, 5, 5), torch.randn(4, 3, 5, 5)
    ls, lt = torch.randn(4, 6), torch.randn(4, 6)
    cases = []
    for kwargs in ({}, {"p": 2, "reduction": "sum"}):
        loss = FTLoss(**kwargs)
        cases.append(case("FTLoss", kwargs, {"student": fs, "teacher": ft * 2},
                          lambda i, loss=loss: loss(io("translator", i["student"]),
                                                    io("paraphraser", i["teacher"]))))
    for kwargs in ({}, {"p": 2, "q": 1, "reduction": "sum"}):
        loss = KTALoss(**kwargs)
        cases.append(case("KTALoss", kwargs, {"student": fs, "teacher": ft},
                          lambda i, loss=loss: loss(io("feature_adapter", i["student"]),
                                                    io("paraphraser", i["teacher"]))))
    for kwargs in ({"margin": 1.0, "reduction": "mean"}, {"margin": 0.5, "reduction": "sum"}):
        cases.append(case("AltActTransferLoss", kwargs, {"student": fs, "teacher": ft},
                          pair(AltActTransferLoss, at_pairs(), **kwargs)))
    for kwargs in ({}, {"p": 2}):
        loss = RegularizationLoss("student", **kwargs)
        cases.append(case("RegularizationLoss", kwargs, {"input": fs},
                          lambda i, loss=loss: loss(io("student", i["input"]), {})))
    cases.append(case("ChSimLoss", {}, {"student": fs, "teacher": ft}, pair(ChSimLoss, at_pairs())))
    for kwargs in ({}, {"reduction": "sum"}):
        cases.append(case("AffinityLoss", kwargs, {"student": fs, "teacher": ft},
                          pair(AffinityLoss, "student", "teacher", **kwargs)))
    loss_dp = DISTPlusLoss("sl", "output", "tl", "output", "sf", "output", "tf", "output",
                           beta=2.0, gamma=0.5, iota=0.7, kappa=1.5, tau=2.0)
    cases.append(case("DISTPlusLoss", {"beta": 2.0, "gamma": 0.5, "iota": 0.7, "kappa": 1.5,
                                       "tau": 2.0},
                      {"student": ls, "teacher": lt, "student_features": fs,
                       "teacher_features": ft},
                      lambda i: loss_dp({**io("sl", i["student"]), **io("sf", i["student_features"])},
                                        {**io("tl", i["teacher"]), **io("tf", i["teacher_features"])})))
    loss_srd = SRDLoss("sf", "output", "tf", "output", "sl", "output", "tl", "output",
                       exponent=2.0, temperature=2.0)
    cases.append(case("SRDLoss", {"exponent": 2.0, "temperature": 2.0},
                      {"student": ls, "teacher": lt, "student_features": fs,
                       "teacher_features": ft},
                      lambda i: loss_srd({**io("sl", i["student"]), **io("sf", i["student_features"])},
                                         {**io("tl", i["teacher"]), **io("tf", i["teacher_features"])})))
    for kwargs in ({}, {"output_sizes": [2, 1], "reduction": "sum"}):
        loss = HierarchicalContextLoss("s", "output", "t", "output", **kwargs)
        cases.append(case("HierarchicalContextLoss", kwargs, {"student": fs, "teacher": ft},
                          lambda i, loss=loss: loss(io("s", (i["student"], None)),
                                                    io("t", i["teacher"]))))
    for kwargs in ({}, {"reduction": "sum", "eps": 1e-3}):
        loss = PADL2Loss("s", "t", module_path="var", **kwargs)
        cases.append(case("PADL2Loss", kwargs,
                          {"student": ls, "teacher": lt, "log_variances": torch.randn(4, 6) * 0.3},
                          lambda i, loss=loss: loss({**io("s", i["student"]),
                                                     **io("var", i["log_variances"])},
                                                    io("t", i["teacher"]))))
    loss_vid = VIDLoss(at_pairs())
    cases.append(case("VIDLoss", {}, {"pred_mean": fs, "pred_var": torch.rand(4, 3, 5, 5) + 0.1,
                                      "teacher": ft},
                      lambda i: loss_vid(io("student", (i["pred_mean"], i["pred_var"])),
                                         io("teacher", i["teacher"]))))
    for kwargs in ({}, {"tikhonov": 0.3, "mode": "code"}):
        cases.append(case("SKDDirectionLoss", kwargs, {"student": ls, "teacher": lt},
                          pair(SKDDirectionLoss, "student", "output", "teacher", "output",
                               **kwargs)))
    for kwargs in ({}, {"temperature": 2.0, "mode": "code"}):
        cases.append(case("SKDInstanceLoss", kwargs, {"student": ls, "teacher": lt},
                          pair(SKDInstanceLoss, "student", "output", "teacher", "output",
                               **kwargs)))
    # SSKD: 4 samples in four rotations each, sample-major (rows 4i..4i+3), as
    # forward_batch4sskd runs SSKDDatasetWrapper's batches.
    torch.manual_seed(3)
    rows = {"student_linear": torch.randn(16, 6), "teacher_linear": torch.randn(16, 6),
            "student_ss": torch.randn(16, 5), "teacher_ss": torch.randn(16, 7),
            "targets": torch.tensor([0, 3, 5, 3])}
    for kwargs in ({"kl_temp": 4.0, "ss_temp": 0.5, "tf_temp": 4.0, "ss_ratio": 0.75,
                    "tf_ratio": 1.0, "loss_weights": [1.0, 0.9, 10.0, 2.7]},
                   {"kl_temp": 2.0, "ss_temp": 1.0, "tf_temp": 3.0, "ss_ratio": 0.5,
                    "tf_ratio": 0.25, "reduction": "sum"}):
        loss = SSKDLoss("s", "t", "s_ss", "t_ss", **kwargs)
        cases.append(case("SSKDLoss", kwargs, rows,
                          lambda i, loss=loss: loss(
                              {"s": {"output": i["student_linear"]},
                               "s_ss": {"output": i["student_ss"]}},
                              {"t": {"output": i["teacher_linear"]},
                               "t_ss": {"output": i["teacher_ss"]}}, i["targets"])))
    for kwargs in ({}, {"reduction": "sum", "label_smoothing": 0.1}):
        loss = AuxSSKDLoss(**kwargs)
        cases.append(case("AuxSSKDLoss", kwargs, {"ss": rows["teacher_ss"]},
                          lambda i, loss=loss: loss({}, io("ss_module", i["ss"]))))
    return cases


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
        # The rest of torch.nn's losses, which torchdistill configs may name.
        case("BCELoss", {"weight": [0.5, 1.0, 2.0, 1.5, 1.0]},
             {"input": torch.sigmoid(x), "target": torch.sigmoid(y)},
             lambda i: nn.BCELoss(weight=torch.tensor([0.5, 1.0, 2.0, 1.5, 1.0]))(
                 i["input"], i["target"])),
        case("NLLLoss", {"weight": [1.0, 2.0, 0.5, 1.0, 3.0], "ignore_index": 1},
             {"input": torch.log_softmax(x, 1), "target": labels},
             lambda i: nn.NLLLoss(weight=torch.tensor([1.0, 2.0, 0.5, 1.0, 3.0]), ignore_index=1)(
                 i["input"], i["target"])),
        case("NLLLoss2d", {}, {"input": torch.log_softmax(fs, 1), "target": fs.argmax(1)},
             lambda i: nn.NLLLoss()(i["input"], i["target"])),
        case("HuberLoss", {"delta": 0.5}, {"input": x, "target": y},
             lambda i: nn.HuberLoss(delta=0.5)(i["input"], i["target"])),
        case("SoftMarginLoss", {}, {"input": x, "target": torch.sign(y)},
             lambda i: nn.SoftMarginLoss()(i["input"], i["target"]), constant=("target",)),
        case("MultiLabelSoftMarginLoss", {"weight": [1.0, 0.5, 2.0, 1.0, 1.5]},
             {"input": x, "target": (y > 0).float()},
             lambda i: nn.MultiLabelSoftMarginLoss(weight=torch.tensor([1.0, 0.5, 2.0, 1.0, 1.5]))(
                 i["input"], i["target"])),
        case("MultiLabelMarginLoss", {}, {"input": x, "target": torch.tensor(
            [[3, 0, -1, 1, 2], [1, -1, 0, 0, 0], [4, 2, 0, -1, 0], [0, 1, 2, 3, 4]])},
             lambda i: nn.MultiLabelMarginLoss()(i["input"], i["target"])),
        case("MultiMarginLoss", {"p": 2, "margin": 0.7, "weight": [1.0, 2.0, 1.0, 0.5, 1.0]},
             {"input": x, "target": labels},
             lambda i: nn.MultiMarginLoss(p=2, margin=0.7,
                                          weight=torch.tensor([1.0, 2.0, 1.0, 0.5, 1.0]))(
                 i["input"], i["target"])),
        case("TripletMarginLoss", {"margin": 0.5, "p": 1.0, "swap": True},
             {"anchor": x, "positive": y, "negative": probs},
             lambda i: nn.TripletMarginLoss(margin=0.5, p=1.0, swap=True)(
                 i["anchor"], i["positive"], i["negative"])),
        case("TripletMarginWithDistanceLoss", {"margin": 2.0, "swap": True},
             {"anchor": x, "positive": y, "negative": probs},
             lambda i: nn.TripletMarginWithDistanceLoss(margin=2.0, swap=True)(
                 i["anchor"], i["positive"], i["negative"])),
        case("MarginRankingLoss", {"margin": 0.3},
             {"input1": x[:, 0], "input2": y[:, 0], "target": torch.tensor([1.0, -1.0, 1.0, -1.0])},
             lambda i: nn.MarginRankingLoss(margin=0.3)(i["input1"], i["input2"], i["target"]),
             constant=("target",)),
        case("HingeEmbeddingLoss", {"margin": 0.8}, {"input": x, "target": torch.sign(y)},
             lambda i: nn.HingeEmbeddingLoss(margin=0.8)(i["input"], i["target"]),
             constant=("target",)),
        case("PoissonNLLLoss", {"full": True}, {"input": x, "target": torch.poisson(probs * 4)},
             lambda i: nn.PoissonNLLLoss(full=True)(i["input"], i["target"]),
             constant=("target",)),
        case("PoissonNLLLoss", {"log_input": False, "reduction": "sum"},
             {"input": probs, "target": torch.poisson(probs * 4)},
             lambda i: nn.PoissonNLLLoss(log_input=False, reduction="sum")(i["input"], i["target"]),
             constant=("target",)),
        case("GaussianNLLLoss", {"full": True},
             {"input": x, "target": y, "var": probs},
             lambda i: nn.GaussianNLLLoss(full=True)(i["input"], i["target"], i["var"])),
        case("GaussianNLLLoss", {"reduction": "sum"},
             {"input": x, "target": y, "var": probs[:, 0]},
             lambda i: nn.GaussianNLLLoss(reduction="sum")(i["input"], i["target"], i["var"])),
        case("CTCLoss", {"blank": 0},
             {"log_probs": torch.log_softmax(torch.randn(6, 2, 4), 2),
              "targets": torch.tensor([[1, 2, 2], [3, 1, 0]]),
              "input_lengths": torch.tensor([6, 5]), "target_lengths": torch.tensor([3, 2])},
             lambda i: nn.CTCLoss(blank=0)(i["log_probs"], i["targets"], i["input_lengths"],
                                           i["target_lengths"])),
        case("CrossEntropyLoss", {"weight": [1.0, 2.0, 0.5, 1.0, 3.0], "label_smoothing": 0.2},
             {"input": x, "target": labels},
             lambda i: nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 0.5, 1.0, 3.0]),
                                           label_smoothing=0.2)(i["input"], i["target"])),
        case("BCEWithLogitsLoss", {"weight": [1.0, 0.5, 2.0, 1.0, 1.0],
                                   "pos_weight": [2.0, 1.0, 0.5, 3.0, 1.0]},
             {"input": x, "target": torch.sigmoid(y)},
             lambda i: nn.BCEWithLogitsLoss(weight=torch.tensor([1.0, 0.5, 2.0, 1.0, 1.0]),
                                            pos_weight=torch.tensor([2.0, 1.0, 0.5, 3.0, 1.0]))(
                 i["input"], i["target"])),
        # KDLoss hands its other kwargs to its CrossEntropyLoss (torchdistill's **kwargs).
        case("KDLoss", {"temperature": 4.0, "alpha": 0.5, "label_smoothing": 0.1,
                        "weight": [1.0, 2.0, 0.5, 1.0, 3.0], "ignore_index": 4},
             {"student": x, "teacher": y, "targets": labels},
             kd({"temperature": 4.0, "alpha": 0.5, "label_smoothing": 0.1,
                 "weight": torch.tensor([1.0, 2.0, 0.5, 1.0, 3.0]), "ignore_index": 4})),
        case("LogitStdKDLoss", {"temperature": 2.0, "alpha": 0.3, "label_smoothing": 0.2},
             {"student": x, "teacher": y, "targets": labels},
             kd({"temperature": 2.0, "alpha": 0.3, "label_smoothing": 0.2}, LogitStdKDLoss)),
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
        case("jsd", {"temperature": 2.0, "beta": 0.3, "chunk_size": 4},
             {"student": seq_s, "teacher": seq_t},
             silverspoon("jsd", temperature=2.0, beta=0.3, chunk_size=4)),
        # torchdistill's FSP, SPKD, CCKD and CRD, its own classes.
        case("FSPLoss", {}, {"student_first": torch.randn(4, 3, 6, 6),
                             "student_second": torch.randn(4, 5, 3, 3),
                             "teacher_first": torch.randn(4, 3, 6, 6),
                             "teacher_second": torch.randn(4, 5, 6, 6)}, fsp),
        case("SPKDLoss", {"reduction": "batchmean"}, {"student": fs, "teacher": ft},
             spkd("batchmean")),
        case("SPKDLoss", {"reduction": "sum"}, {"student": x, "teacher": y}, spkd("sum")),
        case("CCKDLoss", {"kernel": "gaussian", "gamma": 0.4, "max_p": 2,
                          "reduction": "batchmean"},
             {"student": torch.randn(4, 8) * 0.3, "teacher": torch.randn(4, 8) * 0.3},
             cckd({"type": "gaussian", "gamma": 0.4, "max_p": 2}, "batchmean")),
        case("CCKDLoss", {"kernel": "bilinear", "reduction": "sum"},
             {"student": torch.randn(4, 8), "teacher": torch.randn(4, 8)},
             cckd({"type": "bilinear"}, "sum")),
        crd_case(),
        crd_case(torch.float64),
        # DKD: the paper's formula (neither peer has it).
        case("DKDLoss", {"alpha": 1.0, "beta": 8.0, "temperature": 4.0},
             {"student": x, "teacher": y, "targets": labels}, dkd(1.0, 8.0, 4.0),
             constant=("teacher",)),  # its gradient is NaN (log 0 of the masked class)
        case("DKDLoss", {"alpha": 0.5, "beta": 2.0, "temperature": 1.0},
             {"student": x, "teacher": y, "targets": labels}, dkd(0.5, 2.0, 1.0),
             constant=("teacher",)),
        # silverspoon-kd's remaining losses, its own functions.
        case("logit_lens_kl", {"temperature": 2.0},
             {"student": torch.randn(2, 3, 6), "teacher": torch.randn(2, 3, 6),
              "head_weight": torch.randn(7, 6), "head_bias": torch.randn(7)},
             silverspoon_head("logit_lens_kl", temperature=2.0)),
        contrastive_case({"temperature": 0.1}, x, y),
        contrastive_case({"temperature": 0.07, "student_dim": 5, "teacher_dim": 6},
                         seq_s[:, :, :5], torch.randn(2, 3, 6)),
        contrastive_case({"temperature": 0.07, "student_dim": 5, "teacher_dim": 6},
                         seq_s[:, :, :5].double(), torch.randn(2, 3, 6, dtype=torch.float64)),
        case("angular_magnitude", {"alpha": 0.5, "beta": 2.0}, {"student": x, "teacher": y},
             silverspoon("angular_magnitude", alpha=0.5, beta=2.0)),
        case("mahalanobis_mse", {}, {"student": seq_s[..., :6], "teacher": seq_t[..., :6],
                                     "weight_matrix": torch.randn(9, 6)},
             silverspoon_metric("mahalanobis_mse", "weight_matrix")),
        case("mahal_mse", {}, {"student": x, "teacher": y,
                               "metric_matrix": (lambda w: w.T @ w)(torch.randn(7, 5))},
             silverspoon_metric("mahal_mse", "metric_matrix")),
        case("mahalanobis_cosine", {"eps": 1e-6},
             {"student": x, "teacher": y, "weight_matrix": torch.randn(9, 5)},
             silverspoon_metric("mahalanobis_cosine", "weight_matrix", eps=1e-6)),
        case("mahal_cosine", {}, {"student": seq_s[..., :6], "teacher": seq_t[..., :6],
                                  "metric_matrix": (lambda w: w.T @ w)(torch.randn(8, 6))},
             silverspoon_metric("mahal_cosine", "metric_matrix")),
        case("relkd_distance", {}, {"student": fs, "teacher": ft}, silverspoon("relkd_distance")),
        case("relkd_angle", {}, {"student": x, "teacher": torch.randn(4, 9)},
             silverspoon("relkd_angle")),
        case("relkd_distance_angle", {"dist_weight": 0.5, "angle_weight": 3.0},
             {"student": fs, "teacher": ft},
             silverspoon("relkd_distance_angle", dist_weight=0.5, angle_weight=3.0)),
        case("relkd_da", {}, {"student": x, "teacher": y}, silverspoon("relkd_da")),
    ]
    # Sequence-model divergences on (batch, tokens, vocabulary) logits with ignored positions.
    ls, lt = torch.randn(3, 4, 11) * 2, torch.randn(3, 4, 11) * 2
    lab = torch.tensor([[1, 2, -100, 4], [-100, -100, -100, -100], [5, -100, 6, 7]])
    seq_cases = [
        ("forward_kl", {}), ("reverse_kl", {"temperature": 2.0}),
        ("generalized_jsd", {"beta": 0.5}), ("generalized_jsd", {"beta": 0.1}),
        ("total_variation", {}), ("skew_forward_kl", {"alpha": 0.1}),
        ("skew_reverse_kl", {"alpha": 0.3}),
        ("forward_kl", {"reduction": "sequence_mean"}), ("reverse_kl", {"reduction": "sum"}),
        ("total_variation", {"reduction": "none"}),
        ("skew_forward_kl", {"alpha": 0.2, "ignore_index": 4, "reduction": "sequence_mean"}),
    ]
    for key, kwargs in seq_cases:
        inputs = {"student": ls, "teacher": lt, "labels": lab}
        if key == "forward_kl" and not kwargs:
            inputs = {"student": lt, "teacher": ls}  # no labels: every position counts
        cases.append(case(key, kwargs, inputs, sequence(key, **kwargs)))
    cases += transfer_cases()
    # torch.nn.LinearCrossEntropyLoss owns its linear layer: its weights are the case's state.
    torch.manual_seed(5)
    linear_ce = nn.LinearCrossEntropyLoss(5, 3, bias=True, label_smoothing=0.1)
    cases.append(case("LinearCrossEntropyLoss",
                      {"in_features": 5, "num_classes": 3, "bias": True, "label_smoothing": 0.1},
                      {"input": torch.randn(4, 5), "target": torch.tensor([0, 2, 1, 2])},
                      lambda i: linear_ce(i["input"], i["target"]),
                      state=dict(linear_ce.state_dict())))
    torch.save(tuple(cases), os.path.join(HERE, "losses.expected.pt"))
    print("torch %s: %d loss cases" % (torch.__version__, len(cases)))


if __name__ == "__main__":
    main()
