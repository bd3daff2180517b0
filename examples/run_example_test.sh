#!/bin/bash
# Runs an example program: it must exit 0 and print its epochs.
set -euo pipefail
out="$("$1")"
echo "$out"
# The run's epochs count over its stages, as torchdistill's: the kd stage runs epochs 3 and 4.
grep -q "^student stage 1 epoch 4: " <<<"$out" || { echo "FAIL: no epoch line of the kd stage"; exit 1; }
echo PASS
