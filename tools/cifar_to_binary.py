"""Converts torchvision's CIFAR-10/100 download (the Python-pickle version:
ROOT/cifar-10-batches-py, ROOT/cifar-100-python) into the binary version libkd's "cifar10" and
"cifar100" datasets read (ROOT/cifar-10-batches-bin, ROOT/cifar-100-binary): per record the
label byte (CIFAR-100: coarse, then fine) and the 3072 pixel bytes, as the binary tarballs hold
them. Needs only Python and numpy (what torchvision's download needs to be read at all).

  python tools/cifar_to_binary.py ROOT [ROOT ...]

Exit 2 with one line when ROOT holds neither version.
"""
import os
import pickle
import sys

import numpy as np

LAYOUTS = {
    'cifar-10-batches-py': ('cifar-10-batches-bin',
                            [('data_batch_%d' % i, 'data_batch_%d.bin' % i) for i in range(1, 6)]
                            + [('test_batch', 'test_batch.bin')],
                            (b'labels',)),
    'cifar-100-python': ('cifar-100-binary', [('train', 'train.bin'), ('test', 'test.bin')],
                         (b'coarse_labels', b'fine_labels')),
}


def convert(src_dir, dst_dir, files, label_keys):
    os.makedirs(dst_dir, exist_ok=True)
    for src, dst in files:
        with open(os.path.join(src_dir, src), 'rb') as f:
            batch = pickle.load(f, encoding='bytes')
        data = np.asarray(batch[b'data'], dtype=np.uint8).reshape(-1, 3072)
        labels = [np.asarray(batch[k], dtype=np.uint8).reshape(-1, 1) for k in label_keys]
        records = np.concatenate(labels + [data], axis=1)
        tmp = os.path.join(dst_dir, dst + '.tmp')
        with open(tmp, 'wb') as f:
            f.write(records.tobytes())
        os.replace(tmp, os.path.join(dst_dir, dst))
        print('cifar_to_binary: wrote %s (%d records)' % (os.path.join(dst_dir, dst), len(records)))


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[-3].strip(), file=sys.stderr)
        sys.exit(2)
    for root in sys.argv[1:]:
        found = [name for name in LAYOUTS if os.path.isdir(os.path.join(root, name))]
        if not found:
            print('cifar_to_binary: %s holds neither %s' % (root, ' nor '.join(LAYOUTS)),
                  file=sys.stderr)
            sys.exit(2)
        for name in found:
            dst, files, label_keys = LAYOUTS[name]
            convert(os.path.join(root, name), os.path.join(root, dst), files, label_keys)


if __name__ == '__main__':
    main()
