#!/bin/bash
# Traces written by kd::Profiler parse with Python's json and hold the box-style user scopes
# with their ops inside (check_traces.py).
set -u
root="$TEST_SRCDIR/$TEST_WORKSPACE"
python="$root/external/libtorch/python.sh"
out="$TEST_TMPDIR/traces"
traces=$("$root/profiler/write_profile" "$out" 2>/dev/null) || { echo "FAIL: write_profile"; exit 1; }
"$python" -c "" 2>/dev/null || python="python3"  # json alone: any Python 3
"$python" "$root/profiler/check_traces.py" $traces
