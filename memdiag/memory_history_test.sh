#!/bin/bash
# A CPU allocation-history snapshot loads with Python's pickle and PyTorch's memory viewer helpers
# (torch.cuda._memory_viz) read it: events, scopes, frames, live segments.
set -u
root="$TEST_SRCDIR/$TEST_WORKSPACE"
python="$root/external/libtorch/python.sh"
snapshot="$TEST_TMPDIR/history/eval.pickle"
"$root/memdiag/write_memory_snapshot" "$snapshot" || { echo "FAIL: writing the snapshot"; exit 1; }
test -s "$snapshot" || { echo "FAIL: no snapshot at $snapshot"; exit 1; }
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "SKIP the viewer check (no Python torch: libtorch came from LIBKD_TORCH_DIR)"
  exit 0
fi
"$python" "$root/memdiag/check_memory_snapshot.py" "$snapshot"
