"""Reads the test YAMLs with torchdistill itself (the venv's torchdistill 1.1.5): its YAML loader
and tags, its datasets (torchvision's FashionMNIST from Debian's files, FakeData), its criterion
(WeightedSumLoss with the sub-terms) and one batch of its training loader, so the files are
torchdistill's format, not only what libkd's importer accepts. torchvision keeps the data under
<root>/FashionMNIST/raw: the Debian files are decompressed there into a temporary folder, and
download is turned off (no network).

  /root/.cache/libkd/venv/bin/python distill/torchdistill/testdata/check_with_torchdistill.py
"""
import glob
import gzip
import os
import shutil
import sys
import tempfile

import torch  # noqa: F401  (torchvision.datasets before torchdistill, which lists its classes)
import torchvision.datasets  # noqa: F401
from torchdistill.common import yaml_util
from torchdistill.datasets.util import build_data_loader
from torchdistill.losses.registry import get_high_level_loss

here = os.path.dirname(os.path.abspath(__file__))
root = tempfile.mkdtemp()
raw = os.path.join(root, 'FashionMNIST', 'raw')
os.makedirs(raw)
for path in glob.glob('/usr/share/datasets/fashion-mnist/*.gz'):
    with gzip.open(path) as src, open(os.path.join(raw, os.path.basename(path)[:-3]), 'wb') as dst:
        shutil.copyfileobj(src, dst)
failed = 0
# crd.yaml is not read here: torchdistill's CRDDatasetWrapper needs a dataset with `classes`,
# which FakeData lacks. Multi-stage files (ft.yaml, sskd.yaml): each stage's criterion and, where
# the stage has one, its training loader.
for name in ('teacher.yaml', 'student.yaml', 'student_kd.yaml', 'at.yaml', 'vid.yaml', 'pad.yaml',
             'srd.yaml', 'ickd.yaml', 'dab.yaml', 'fitnet.yaml', 'ft.yaml', 'sskd.yaml', 'kr.yaml'):
    text = open(os.path.join(here, name)).read()
    text = text.replace("!join ['~/datasets/', 'fashion_mnist']", repr(root))
    text = text.replace('download: True', 'download: False')
    path = os.path.join(root, name)
    with open(path, 'w') as f:
        f.write(text)
    try:
        config = yaml_util.load_yaml_file(path)
        datasets, train = config['datasets'], config['train']
        stages = ([train[k] for k in train if k.startswith('stage')]
                  if any(k.startswith('stage') for k in train) else [train])
        read = []
        for stage in stages:
            criterion = get_high_level_loss(stage['criterion'])
            shape = None
            if 'train_data_loader' in stage:
                loader = build_data_loader(datasets[stage['train_data_loader']['dataset_id']],
                                           stage['train_data_loader'], distributed=False)
                shape = tuple(next(iter(loader))[0].shape)
            read.append(f'criterion {type(criterion).__name__}' +
                        (f', a batch {shape}' if shape else ''))
        print(f'{name}: OK, datasets {({k: len(v) for k, v in datasets.items()})}, '
              + '; '.join(read))
    except Exception as e:  # report every file
        failed += 1
        print(f'{name}: FAILED: {type(e).__name__}: {e}')
shutil.rmtree(root)
sys.exit(1 if failed else 0)
