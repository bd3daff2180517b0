"""Writes torchdistill_loss_signatures.txt: each torchdistill mid-level loss with the parameters
of its __init__, read from the installed peer (torchdistill 1.1.5, the venv's), so importer_test
checks every TorchdistillLossRule against the peer's own code.

  /root/.cache/libkd/venv/bin/python distill/torchdistill/testdata/make_loss_signatures.py
"""
import inspect
import os

from torchdistill.losses import mid_level

here = os.path.dirname(os.path.abspath(__file__))
lines = []
for name, cls in sorted(vars(mid_level).items()):
    if inspect.isclass(cls) and cls.__module__ == mid_level.__name__ and name.endswith('Loss'):
        params = [p for p in inspect.signature(cls.__init__).parameters if p not in ('self', 'kwargs')]
        lines.append(' '.join([name] + params))
with open(os.path.join(here, 'torchdistill_loss_signatures.txt'), 'w') as f:
    f.write('# torchdistill 1.1.5 mid-level losses and their __init__ parameters '
            '(make_loss_signatures.py)\n')
    f.write('\n'.join(lines) + '\n')
