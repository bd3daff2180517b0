"""Reference values of silverspoon-kd's fuse_projectors_into_module, for
distill/boxes/projector_fusion_test.cc. Nothing is downloaded.

  ~/.cache/libkd/venv/bin/python tests/testdata/make_projector_fusion_fixtures.py

Each case builds a module (nn.Linear or nn.Conv2d) and silverspoon-kd's projectors at
torch.manual_seed(3), fuses them with silverspoon-kd's own function and writes, into
feature_kd/projector_fusion.pt, "<case>.<part>.<param>" for part in module, input_projector,
output_projector (those present) and fused, plus "<case>.x", an input of the chain
output_projector -> input_projector -> module, and "<case>.y", the chain's output on it (what
the fused module gives too, at the border of a zero-padded convolution with projector biases
excepted: silverspoon-kd's documented caveat). Float64, so that the comparison is exact to
rounding.
"""
import os

import torch
import torch.nn as nn
from silverspoon_kd import fuse_projectors_into_module
from silverspoon_kd.alignments.projectors import (GenericConv2dProjector,
                                                  GenericLinearProjector)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "feature_kd",
                   "projector_fusion.pt")


def linear_case(module_bias, input_proj, output_proj):
    """input_proj/output_proj: None or the projector's bias flag."""
    module = nn.Linear(8, 6, bias=module_bias)
    inp = GenericLinearProjector(5, 8, bias=input_proj, mode="input") \
        if input_proj is not None else None
    out_in = 5 if inp is not None else 8
    outp = GenericLinearProjector(4, out_in, bias=output_proj) \
        if output_proj is not None else None
    first = 4 if outp is not None else (5 if inp is not None else 8)
    x = torch.randn(3, first)
    return module, inp, outp, x


def conv_case(module_kwargs, input_proj, output_proj):
    module = nn.Conv2d(6, 5, 3, **module_kwargs)
    inp = GenericConv2dProjector(4, 6, bias=input_proj, mode="input") \
        if input_proj is not None else None
    out_in = 4 if inp is not None else 6
    outp = GenericConv2dProjector(3, out_in, bias=output_proj) \
        if output_proj is not None else None
    first = 3 if outp is not None else (4 if inp is not None else 6)
    x = torch.randn(2, first, 7, 9)
    return module, inp, outp, x


CASES = {
    "linear_both": lambda: linear_case(True, True, True),
    "linear_input_only_no_bias": lambda: linear_case(True, False, None),
    "linear_output_only": lambda: linear_case(False, None, True),
    "linear_no_biases": lambda: linear_case(False, False, False),
    "conv_both_valid": lambda: conv_case({}, True, True),
    "conv_both_replicate": lambda: conv_case({"padding": 1, "padding_mode": "replicate"}, True,
                                             True),
    "conv_input_zero_padding_no_bias": lambda: conv_case({"padding": 1}, False, None),
    "conv_output_strided_dilated": lambda: conv_case({"stride": 2, "dilation": 2, "bias": False},
                                                     None, True),
}


def main():
    torch.set_default_dtype(torch.float64)
    data = {}
    for name, make in CASES.items():
        torch.manual_seed(3)
        module, inp, outp, x = make()
        parts = {"module": module, "input_projector": inp, "output_projector": outp}
        for part, m in parts.items():
            if m is None:
                continue
            for param, value in m.named_parameters():
                data[f"{name}.{part}.{param}"] = value.detach().clone()
        with torch.no_grad():
            h = outp(x) if outp is not None else x
            h = inp(h)[0][0] if inp is not None else h
            y = module(h)
        fused = fuse_projectors_into_module(module, input_projector=inp, output_projector=outp)
        for param, value in fused.named_parameters():
            data[f"{name}.fused.{param}"] = value.detach().clone()
        data[f"{name}.x"] = x
        data[f"{name}.y"] = y
    torch.save(data, OUT)
    print(f"wrote {len(CASES)} cases to {OUT}")


if __name__ == "__main__":
    main()
