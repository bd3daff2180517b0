"""A checkpoint as torchdistill's own scripts write it, for libkd's reader of Python's pickles.

torchdistill.common.main_util.save_ckpt(model, optimizer, lr_scheduler, best_value, args, path)
saves {'model': model.state_dict() (an OrderedDict), 'optimizer': ..., 'best_value': ...,
'lr_scheduler': ..., 'args': argparse.Namespace}. The model is the tricky fixture (tricky.pt)
with its weights doubled, so that loading the checkpoint changes them; the doubled state is also
saved as a plain dict, the values libkd must read (tricky.torchdistill_expected.pt); the same
for libkd's native fashion_cnn (width 4) through its Python twin, a box's src_ckpt
(fashion_cnn4.torchdistill_ckpt.pt, fashion_cnn4.torchdistill_expected.pt).

  bazel run //tests/testdata:make_torchdistill_ckpt     (needs tools/install_deps.sh --peers)
"""
import argparse
import os
import sys

import torch
from torchdistill.common.main_util import save_ckpt

HERE = os.path.dirname(os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else __file__))


def main():
    torch.manual_seed(5)
    model = torch.jit.load(os.path.join(HERE, "tricky.pt"))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    out = model(torch.randn(3, 4), 2.0)
    sum(o.sum() for o in (out if isinstance(out, tuple) else (out,))
        if isinstance(o, torch.Tensor)).backward()
    optimizer.step()  # the optimizer's state holds momentum buffers; the weights moved
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    args = argparse.Namespace(config="tricky.yaml", device="cpu", start_epoch=0, seed=None)
    save_ckpt(model, optimizer, scheduler, 0.75, args,
              os.path.join(HERE, "tricky.torchdistill_ckpt.pt"))
    torch.save({k: v.clone() for k, v in model.state_dict().items()},
               os.path.join(HERE, "tricky.torchdistill_expected.pt"))

    # libkd's native fashion_cnn (width 4, 4 classes) as its Python twin, for a box's src_ckpt.
    sys.path.insert(0, os.path.join(HERE, "..", "..", "distill", "models"))
    from fashion_cnn import FashionCnn
    torch.manual_seed(6)
    cnn = FashionCnn(4, num_classes=4)
    save_ckpt(cnn, torch.optim.SGD(cnn.parameters(), lr=0.1), None, 0.5, args,
              os.path.join(HERE, "fashion_cnn4.torchdistill_ckpt.pt"))
    torch.save({k: v.clone() for k, v in cnn.state_dict().items()},
               os.path.join(HERE, "fashion_cnn4.torchdistill_expected.pt"))


if __name__ == "__main__":
    main()
