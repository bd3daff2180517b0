"""Makes an AOTInductor package of small_cnn (its weights from small_cnn.state.pt) with
tools/export_teacher.py, and records what eager Python computes on a fixed input with forward
hooks on the same module paths: OUT.pt2 and OUT.expected.pt ({"input", "output", "hooks":
{path: {"input": [per call, the args tuple], "output": [per call]}}}). Run by Bazel (a genrule
of //tests/testdata: the package is built, about a minute, not committed):

  python make_aoti_fixtures.py WORKSPACE_ROOT OUT_PREFIX
"""
import os
import subprocess
import sys

import torch

HOOKS = {"stem": "output", "layer1.0.relu": "output", "layer2.0": "input", "layer2": "both"}


def main():
    root, out = sys.argv[1], sys.argv[2]
    sys.path.insert(0, root)
    from tests.testdata.make_fixtures import SmallCNN
    torch.set_num_threads(1)
    model = SmallCNN()
    model.load_state_dict(torch.load(os.path.join(root, "tests/testdata/small_cnn.state.pt")))
    model.eval()
    recorded = {p: {"input": [], "output": []} for p in HOOKS}
    modules = dict(model.named_modules())
    for path, io in HOOKS.items():
        def hook(m, args, output, path=path, io=io):
            if io in ("input", "both"):
                recorded[path]["input"].append(tuple(a.detach().clone() for a in args))
            if io in ("output", "both"):
                recorded[path]["output"].append(output.detach().clone())
        modules[path].register_forward_hook(hook)
    torch.manual_seed(4)
    x = torch.randn(3, 1, 28, 28)  # another batch size than the export's example
    with torch.no_grad():
        y = model(x)
    torch.save({"input": x, "output": y, "hooks": recorded}, out + ".expected.pt")
    subprocess.run(
        [sys.executable, os.path.join(root, "tools/export_teacher.py"),
         "--model=tests.testdata.make_fixtures:SmallCNN",
         "--state=" + os.path.join(root, "tests/testdata/small_cnn.state.pt"),
         "--input_shape=2,1,28,28",
         "--hooks=" + ",".join(f"{p}:{io}" for p, io in HOOKS.items()),
         "--out=" + out + ".pt2"],
        check=True, cwd=root, stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
