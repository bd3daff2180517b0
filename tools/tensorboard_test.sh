#!/bin/bash
# //tools:distill's TensorBoard event files read by TensorBoard's own reader (the venv's
# tensorboard, tools/requirements/tools.lock): every scalar equals metrics.jsonl's, the config is
# there as text, histograms every epoch with --tensorboard_histograms_every=1, a corrupted record
# read as TensorBoard reads PyTorch's files (tools/check_tensorboard.py); --tensorboard=false
# writes none.
set -u
source "$TEST_SRCDIR/$TEST_WORKSPACE/tools/tool_test_lib.sh"
tool="$TEST_SRCDIR/$TEST_WORKSPACE/tools/distill"
python="$TEST_SRCDIR/$TEST_WORKSPACE/external/libtorch/python.sh"
[[ -x "$python" ]] || python="$TEST_SRCDIR/libtorch/python.sh"

cp "$TEST_SRCDIR/$TEST_WORKSPACE/tools/testdata/synthetic_run.pbtxt" "$TEST_TMPDIR/syn.pbtxt"
run="$TEST_TMPDIR/run"
"$tool" --config="$TEST_TMPDIR/syn.pbtxt" --run_dir="$run" --tensorboard_histograms_every=1 \
  >/dev/null 2>&1; rc=$?
check "run: exit 0" test "$rc" -eq 0
check "TensorBoard reads the events as metrics.jsonl has them" \
  "$python" "$TEST_SRCDIR/$TEST_WORKSPACE/tools/check_tensorboard.py" "$run" 1

# A profiled run: each trace also where TensorBoard's profiler plugin looks, named as
# torch.profiler.tensorboard_trace_handler names them.
{ cat "$TEST_TMPDIR/syn.pbtxt"; echo 'profiler { wait: 1 warmup: 1 active: 2 }'; } \
  >"$TEST_TMPDIR/prof.pbtxt"
"$tool" --config="$TEST_TMPDIR/prof.pbtxt" --run_dir="$TEST_TMPDIR/prof" >/dev/null 2>&1; rc=$?
check "profiled: exit 0" test "$rc" -eq 0
traces=("$TEST_TMPDIR"/prof/tb/plugins/profile/syn/*_*.*.pt.trace.json)
check "profiled: the trace for TensorBoard" test -s "${traces[0]}"
check "profiled: the same trace" cmp -s "${traces[0]}" "$TEST_TMPDIR/prof/profile/trace_step_4.json"

"$tool" --config="$TEST_TMPDIR/syn.pbtxt" --run_dir="$TEST_TMPDIR/off" --tensorboard=false \
  >/dev/null 2>&1; rc=$?
check "--tensorboard=false: exit 0" test "$rc" -eq 0
check "--tensorboard=false: no events" test ! -e "$TEST_TMPDIR/off/tb"
expect_error "histograms bounded" "--tensorboard_histograms_every must be 0-1000" \
  --config="$TEST_TMPDIR/syn.pbtxt" --tensorboard_histograms_every=-1
finish tensorboard_test
