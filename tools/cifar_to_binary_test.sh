#!/bin/bash
# tools/cifar_to_binary.py on pickles written as torchvision's download holds them: each record
# of the binary files is the label byte(s) and the pixels, in order; a folder with neither
# version is one line, exit 2.
set -u
source "$TEST_SRCDIR/$TEST_WORKSPACE/tools/tool_test_lib.sh"
root="$TEST_SRCDIR/$TEST_WORKSPACE"
python="$root/external/libtorch/python.sh"
tool="$TEST_TMPDIR/cifar_to_binary"
printf '#!/bin/sh\nexec "%s" "%s/tools/cifar_to_binary.py" "$@"\n' "$python" "$root" >"$tool"
chmod +x "$tool"
data="$TEST_TMPDIR/data"
"$python" - "$data" <<'PY'
import os, pickle, sys
import numpy as np
root = sys.argv[1]
rng = np.random.default_rng(0)
for d, files, keys in (('cifar-10-batches-py', ['data_batch_%d' % i for i in range(1, 6)] + ['test_batch'], ['labels']),
                       ('cifar-100-python', ['train', 'test'], ['coarse_labels', 'fine_labels'])):
    os.makedirs(os.path.join(root, d))
    for f in files:
        batch = {b'data': rng.integers(0, 256, (3, 3072), dtype=np.uint8)}
        for k in keys:
            batch[k.encode()] = [int(v) for v in rng.integers(0, 10, 3)]
        with open(os.path.join(root, d, f), 'wb') as out:
            pickle.dump(batch, out, protocol=2)
PY
check "converts both" "$tool" "$data"
check "records as the pickles hold them" "$python" - "$data" <<'PY'
import os, pickle, sys
import numpy as np
root = sys.argv[1]
for src, dst, pairs, keys in (('cifar-10-batches-py', 'cifar-10-batches-bin', [('test_batch', 'test_batch.bin'), ('data_batch_3', 'data_batch_3.bin')], [b'labels']),
                              ('cifar-100-python', 'cifar-100-binary', [('train', 'train.bin')], [b'coarse_labels', b'fine_labels'])):
    for p, b in pairs:
        batch = pickle.load(open(os.path.join(root, src, p), 'rb'), encoding='bytes')
        raw = np.fromfile(os.path.join(root, dst, b), dtype=np.uint8).reshape(3, -1)
        assert raw.shape[1] == len(keys) + 3072, raw.shape
        for i, k in enumerate(keys):
            assert list(raw[:, i]) == batch[k], (b, k)
        assert (raw[:, len(keys):] == batch[b'data']).all(), b
PY
mkdir -p "$TEST_TMPDIR/empty"
expect_error "neither version" "cifar_to_binary: $TEST_TMPDIR/empty holds neither" "$TEST_TMPDIR/empty"
finish cifar_to_binary_test
