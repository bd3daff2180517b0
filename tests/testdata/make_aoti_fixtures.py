"""Makes AOTInductor packages with tools/export_teacher.py and records what eager Python
computes on a fixed input with forward hooks on the same module paths: for each model NAME,
OUT_DIR/NAME_aoti.pt2 and OUT_DIR/NAME_aoti.expected.pt ({"input", "output", "hooks": {path:
{"input": [per call, the args tuple], "output": [per call]}}}). Exported with batch 2, checked
with batch 3 (the batch dimension is dynamic). Models: small_cnn (small_cnn.state.pt's
weights), torchvision's ResNet-18 and MobileNetV3-Small and a torch Transformer encoder (seeded
random weights); no_manifest_aoti.pt2, a package made without libkd's manifest, and
cuda_claim_aoti.pt2, small_cnn's package whose metadata says CUDA. Run by Bazel (//tests/testdata:aoti_fixtures: built, about a minute each, not
committed):

  python make_aoti_fixtures.py WORKSPACE_ROOT OUT_DIR
"""
import json
import os
import subprocess
import sys
import tempfile
import zipfile

import torch
import torch.nn as nn


def transformer_encoder():
    """A 2-layer Transformer encoder over (N, 10, 32) sequences."""
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


# name: (--model, the checked input's shape, {path: io}).
MODELS = {
    "small_cnn": ("tests.testdata.make_fixtures:SmallCNN", (3, 1, 28, 28),
                  {"stem": "output", "layer1.0.relu": "output", "layer2.0": "input",
                   "layer2": "both"}),
    "resnet18": ("torchvision:resnet18", (3, 3, 64, 64),
                 {"layer1": "output", "layer3.1.relu": "output", "layer4": "both",
                  "fc": "input"}),
    "mobilenet_v3_small": ("torchvision:mobilenet_v3_small", (3, 3, 64, 64),
                           {"features.3": "output", "classifier.0": "input"}),
    "transformer_encoder": ("tests.testdata.make_aoti_fixtures:transformer_encoder", (3, 10, 32),
                            {"layers.0": "output", "layers.1.linear1": "output"}),
    # The box benchmark's teacher (libkd's fashion_cnn, width 16), also as TorchScript and as a
    # state dict for the native model: //distill/boxes:teacher_benchmark's four teachers.
    "fashion_cnn16": ("tests.testdata.make_aoti_fixtures:fashion_cnn16", (3, 1, 28, 28),
                      {"layer1": "output"}),
}


def fashion_cnn16():
    from distill.models.fashion_cnn import FashionCnn
    return FashionCnn(16)


def build(spec):
    module_name, factory = spec.split(":")
    if module_name == "torchvision":
        import torchvision.models as tv
        return getattr(tv, factory)(weights=None)
    module = __import__(module_name, fromlist=[factory])
    return getattr(module, factory)()


def record(model, x, hooks):
    recorded = {p: {"input": [], "output": []} for p in hooks}
    modules = dict(model.named_modules())
    handles = []
    for path, io in hooks.items():
        def hook(m, args, output, path=path, io=io):
            if io in ("input", "both"):
                recorded[path]["input"].append(tuple(a.detach().clone() for a in args))
            if io in ("output", "both"):
                recorded[path]["output"].append(output.detach().clone())
        handles.append(modules[path].register_forward_hook(hook))
    with torch.no_grad():
        y = model(x)
    for h in handles:
        h.remove()
    return y, recorded


def main():
    root, out_dir = sys.argv[1], sys.argv[2]
    sys.path.insert(0, root)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as scratch:
        for name, (spec, shape, hooks) in MODELS.items():
            torch.manual_seed(0)
            model = build(spec)
            if name == "small_cnn":
                state = os.path.join(root, "tests/testdata/small_cnn.state.pt")
                model.load_state_dict(torch.load(state))
            else:
                state = os.path.join(scratch, name + ".state.pt")
                torch.save(model.state_dict(), state)
            model.eval()
            torch.manual_seed(4)
            x = torch.randn(*shape)
            y, recorded = record(model, x, hooks)
            out = os.path.join(out_dir, name + "_aoti")
            torch.save({"input": x, "output": y, "hooks": recorded}, out + ".expected.pt")
            if name == "fashion_cnn16":
                torch.jit.script(model).save(os.path.join(out_dir, name + ".pt"))
                torch.save(dict(model.state_dict()), os.path.join(out_dir, name + ".state.pt"))
            export = [sys.executable, os.path.join(root, "tools/export_teacher.py"),
                      "--model=" + spec, "--state=" + state,
                      "--input_shape=" + ",".join(["2"] + [str(d) for d in shape[1:]])]
            subprocess.run(export + ["--hooks=" + ",".join(f"{p}:{io}" for p, io in hooks.items()),
                                     "--out=" + out + ".pt2"],
                           check=True, cwd=root, stdout=subprocess.DEVNULL)
            if name == "fashion_cnn16":  # the benchmark's like-for-like teacher: logits only
                subprocess.run(export + ["--out=" + os.path.join(out_dir, name + "_plain_aoti.pt2")],
                               check=True, cwd=root, stdout=subprocess.DEVNULL)
    # small_cnn's package claiming to be compiled for CUDA (its metadata rewritten): what a
    # machine without a GPU must refuse before loading it.
    with zipfile.ZipFile(os.path.join(out_dir, "small_cnn_aoti.pt2")) as source, \
            zipfile.ZipFile(os.path.join(out_dir, "cuda_claim_aoti.pt2"), "w") as claim:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename.endswith("wrapper_metadata.json"):
                metadata = json.loads(data)
                metadata["AOTI_DEVICE_KEY"] = "cuda"
                data = json.dumps(metadata).encode()
            claim.writestr(item, data)
    # A package that torch made without libkd's manifest (not by tools/export_teacher.py).
    torch.manual_seed(0)
    linear = nn.Linear(4, 2).eval()
    program = torch.export.export(linear, (torch.randn(2, 4),))
    torch._inductor.aoti_compile_and_package(
        program, package_path=os.path.join(out_dir, "no_manifest_aoti.pt2"))


if __name__ == "__main__":
    main()
