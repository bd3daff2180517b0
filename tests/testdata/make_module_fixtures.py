"""Records what torchdistill's own method modules (torchdistill/models/wrapper.py, 1.1.5)
compute on fixed inputs and parameters: each built by torchdistill's class (through its wrapper
where the module lives in one, run by the wrapper's own secondary_forward and captured by a
forward hook, as torchdistill's forward hooks capture it), in train mode. Writes
modules.expected.pt (and torchdistill's ConvReg adaptation, models/adaptation.py): a tuple of cases {"key", "kwargs", "state", "inputs", "outputs",
"weights", "input_grads", "param_grads", "buffers_after"}: state is the module's parameters
and buffers under libkd's names (the names torchdistill's module checkpoint files hold);
outputs are what it returned (a pair for the two-valued ones); the backward is of
sum(output * weight); buffers_after are its batch-norm statistics after the call. libkd's
method-module test (distill/boxes:aux_modules_test) compares with it.

  bazel run //tests/testdata:make_module_fixtures
"""
import os

import torch
import torch.nn as nn
from torchdistill.models.wrapper import (AttentionBasedFusion, ChannelSimilarityEmbed,
                                         Connector4DAB, Linear4CCKD, Linear4CRD,
                                         Paraphraser4FactorTransfer, SRDModelWrapper,
                                         SSWrapper4SSKD, Student4KnowledgeReview, Student4KTAAD,
                                         Translator4FactorTransfer, VarianceBranch4PAD,
                                         VariationalDistributor4VID)

from torchdistill.models.adaptation import ConvReg

HERE = os.path.dirname(os.path.realpath(__file__))
CPU = torch.device("cpu")
WRAP = {"device": CPU, "device_ids": None, "distributed": False}


def perturb(module):
    """Batch norms start at weight 1, bias 0: move them so a swapped name would show."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "bn" in name or p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))


def case(key, kwargs, module, inputs, call, prefix=""):
    """module: the torchdistill module whose state is libkd's (its names under `prefix`);
    call(inputs) runs it as torchdistill does and returns its output(s)."""
    perturb(module)
    module.train()
    state = {prefix + k: v.detach().clone() for k, v in module.state_dict().items()}
    inputs = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    outputs = call(inputs)
    outputs = list(outputs) if isinstance(outputs, tuple) else [outputs]
    weights = [torch.randn_like(o) for o in outputs]
    sum((o * w).sum() for o, w in zip(outputs, weights)).backward()
    return {"key": key, "kwargs": kwargs, "state": state,
            "inputs": [x.detach() for x in inputs],
            "outputs": [o.detach() for o in outputs], "weights": weights,
            "input_grads": [x.grad.clone() for x in inputs],
            "param_grads": {prefix + n: p.grad.clone() for n, p in module.named_parameters()
                            if p.grad is not None},
            "buffers_after": {prefix + n: b.detach().clone() for n, b in module.named_buffers()}}


def secondary(wrapper, module):
    """Runs wrapper.secondary_forward on io["x"]["output"] = the input, returning `module`'s
    output as a forward hook records it."""
    def call(inputs):
        seen = []
        handle = module.register_forward_hook(lambda m, i, o: seen.append(o))
        wrapper.secondary_forward({"x": {"output": inputs[0]}})
        handle.remove()
        return seen[0]
    return call


def main():
    torch.manual_seed(0)
    cases = []
    source = {"io": "output", "path": "x"}
    student = nn.Identity()

    vid_kwargs = {"in_channels": 4, "middle_channels": 6, "out_channels": 5, "eps": 1e-5,
                  "init_pred_var": 5.0}
    vid = VariationalDistributor4VID(student, {"r": dict(kwargs=vid_kwargs, **source)}, **WRAP)
    cases.append(case("Regressor4VID", vid_kwargs, vid.regressor_dict["r"],
                      [torch.randn(3, 4, 5, 5)], secondary(vid, vid.regressor_dict["r"])))

    pad = VarianceBranch4PAD(student, source, 12, "/nonexistent/var_estimator.pt", **WRAP)
    cases.append(case("VarianceBranch4PAD", {"feat_dim": 12}, pad.var_estimator,
                      [torch.randn(4, 3, 2, 2)], secondary(pad, pad.var_estimator)))

    crd = Linear4CRD("x", {"in_features": 12, "out_features": 5}, power=2, student_model=student,
                     **WRAP)
    cases.append(case("Linear4CRD", {"in_features": 12, "out_features": 5, "power": 2.0},
                      crd.normalizer, [torch.randn(4, 3, 2, 2)], secondary(crd, crd.normalizer)))

    cckd = Linear4CCKD(source, {"in_features": 12, "out_features": 4}, student_model=student,
                       **WRAP)
    cases.append(case("Linear4CCKD", {"in_features": 12, "out_features": 4}, cckd.linear,
                      [torch.randn(4, 3, 2, 2)], secondary(cckd, cckd.linear), prefix="linear."))

    embed = ChannelSimilarityEmbed(in_channels=6, out_channels=4)
    cases.append(case("ChannelSimilarityEmbed", {"in_channels": 6, "out_channels": 4}, embed,
                      [torch.randn(3, 6, 5, 5)], lambda i: embed(i[0])))

    for uses_decoder in (True, False):
        kwargs = {"k": 0.5, "num_input_channels": 8, "kernel_size": 3, "stride": 1,
                  "padding": 1, "uses_bn": True, "uses_decoder": uses_decoder}
        paraphraser = Paraphraser4FactorTransfer(**kwargs)
        cases.append(case("Paraphraser4FactorTransfer", kwargs, paraphraser,
                          [torch.randn(2, 8, 5, 5)], lambda i, m=paraphraser: m(i[0])))
    kwargs = {"num_input_channels": 4, "num_output_channels": 6, "kernel_size": 3, "stride": 1,
              "padding": 1, "uses_bn": False}
    translator = Translator4FactorTransfer(**kwargs)
    cases.append(case("Translator4FactorTransfer", kwargs, translator, [torch.randn(2, 4, 5, 5)],
                      lambda i: translator(i[0])))

    sskd = SSWrapper4SSKD(source, 12, "/nonexistent/ss_module.pt", student_model=student, **WRAP)
    cases.append(case("SSWrapper4SSKD", {"feat_dim": 12}, sskd.ss_module,
                      [torch.randn(8, 3, 2, 2)], secondary(sskd, sskd.ss_module)))

    connector = {"conv2d_kwargs": {"in_channels": 4, "out_channels": 6, "kernel_size": 1,
                                   "stride": 1, "bias": False},
                 "bn2d_kwargs": {"num_features": 6}}
    dab = Connector4DAB(student, {"c": dict(connector, **source)}, **WRAP)
    cases.append(case("Connector4DAB", {"in_channels": 4, "out_channels": 6, "bias": False,
                                        "uses_bn": True},
                      dab.connector_dict["c"], [torch.randn(3, 4, 5, 5)],
                      secondary(dab, dab.connector_dict["c"])))

    ktaad = Student4KTAAD(
        student, "x",
        {"conv_kwargs": {"in_channels": 4, "out_channels": 6, "kernel_size": 3, "padding": 1},
         "bn_kwargs": {"num_features": 6}, "relu_kwargs": {}},
        {"conv_kwargs": {"in_channels": 4, "out_channels": 6, "kernel_size": 1, "bias": False}},
        **WRAP)
    cases.append(case("FeatureAdapter4KTAAD", {"in_channels": 4, "out_channels": 6,
                                               "kernel_size": 3, "padding": 1},
                      ktaad.feature_adapter, [torch.randn(3, 4, 5, 5)],
                      secondary(ktaad, ktaad.feature_adapter)))
    cases.append(case("AffinityAdapter4KTAAD", {"in_channels": 4, "out_channels": 6,
                                                "bias": False},
                      ktaad.affinity_adapter, [torch.randn(3, 4, 5, 5)],
                      secondary(ktaad, ktaad.affinity_adapter)))

    for linear_kwargs in ({"in_features": 6, "out_features": 5}, None):
        srd = SRDModelWrapper(source, {"num_features": 5 if linear_kwargs else 6},
                              linear_kwargs=linear_kwargs, student_model=student, **WRAP)
        params = nn.ModuleDict({"norm_layer": srd.norm_layer})
        if linear_kwargs:
            params["linear"] = srd.linear
        cases.append(case("SRDModelWrapper",
                          {"in_features": 6, "out_features": 5 if linear_kwargs else 0},
                          params, [torch.randn(4, 6, 3, 3)], secondary(srd, srd.norm_layer)))

    # Knowledge review's fusions: the deepest (no attention) on one map; the others fuse the
    # previous fusion's residual, resized to their map (torchdistill's size given per fusion).
    deepest = AttentionBasedFusion(8, 6, 10, uses_attention=False)
    cases.append(case("AttentionBasedFusion",
                      {"in_channels": 8, "mid_channels": 6, "out_channels": 10},
                      deepest, [torch.randn(3, 8, 2, 2)], lambda i: deepest(i[0])))
    fusion = AttentionBasedFusion(4, 6, 5, uses_attention=True)
    cases.append(case("AttentionBasedFusion",
                      {"in_channels": 4, "mid_channels": 6, "out_channels": 5,
                       "uses_attention": True, "size": 4},
                      fusion, [torch.randn(3, 4, 4, 4), torch.randn(3, 6, 2, 2)],
                      lambda i: fusion(i[0], i[1], 4)))
    # The chain as Student4KnowledgeReview runs it: shallow to deep in its config, run deepest
    # first, each fusion's output recorded by a hook; libkd's case lists them deepest first.
    abfs = [{"kwargs": {"in_channels": 4, "mid_channels": 6, "out_channels": 5},
             "io": "output", "path": "s1"},
            {"kwargs": {"in_channels": 8, "mid_channels": 6, "out_channels": 10},
             "io": "output", "path": "s2"}]
    review = Student4KnowledgeReview(student, abfs, sizes=[1, 4], **WRAP)
    maps = [torch.randn(3, 8, 2, 2), torch.randn(3, 4, 4, 4)]  # s2 (deepest), s1

    def chain(inputs):
        seen = []
        handles = [m.register_forward_hook(lambda m, i, o: seen.extend(o))
                   for m in review.abf_modules]
        review.secondary_forward({"s2": {"output": inputs[0]}, "s1": {"output": inputs[1]}})
        for h in handles:
            h.remove()
        return tuple(seen)  # (deep output, deep residual, shallow output, shallow residual)
    chained = case("Student4KnowledgeReview", {}, review.abf_modules, maps, chain)
    chained["chain"] = [dict(abfs[1]["kwargs"]), dict(abfs[0]["kwargs"], uses_attention=True)]
    cases.append(chained)

    # torchdistill's adaptation module of FitNet's sample (models/adaptation.py), with and
    # without its ReLU.
    for kwargs in ({"num_input_channels": 4, "num_output_channels": 6, "kernel_size": 3,
                    "stride": 2, "padding": 1},
                   {"num_input_channels": 4, "num_output_channels": 6, "kernel_size": 1,
                    "stride": 1, "padding": 0, "uses_relu": False}):
        reg = ConvReg(**kwargs)
        cases.append(case("ConvReg", kwargs, reg, [torch.randn(3, 4, 5, 5)],
                          lambda i, reg=reg: reg(i[0])))

    torch.save(tuple(cases), os.path.join(HERE, "modules.expected.pt"))
    print("torch %s: %d module cases" % (torch.__version__, len(cases)))


if __name__ == "__main__":
    main()
