#!/bin/bash
# //tools:inspect end to end: the table, JSON, and one-line errors with exit code 2.
# Expected numbers come from make_fixtures.py's models: SmallCNN has 8474 parameters
# (Python: sum(p.numel() for p in m.parameters())), fc = Linear(16, 10) has 170.
set -u
source "$TEST_SRCDIR/$TEST_WORKSPACE/tools/tool_test_lib.sh"
root="$TEST_SRCDIR/$TEST_WORKSPACE"
tool="$root/tools/inspect"
data="$root/tests/testdata"

out=$("$tool" --model="$data/small_cnn.pt")
check "root row" grep -qE '^\(root\) +SmallCNN +8474$' <<<"$out"
check "nested row" grep -qE '^layer1\.0\.conv1 +Conv2d +576$' <<<"$out"
check "28 modules + header" test "$(wc -l <<<"$out")" -eq 29

out=$("$tool" --model="$data/small_cnn.pt" --input_shape=2,1,28,28)
check "fc output shape" grep -qE '^fc +Linear +170 +float32\[2, 10\]$' <<<"$out"
check "stride-2 conv halves" grep -qE '^down +Conv2d +1168 +float32\[2, 16, 14, 14\]$' <<<"$out"
check "relu called twice" grep -qE '^layer1\.0\.relu .*\(2 calls\)$' <<<"$out"

# An AOTInductor package (tools/export_teacher.py): every module path, no parameters (compiled
# in), shapes of the values it was exported with.
out=$("$tool" --model="$data/small_cnn_aoti.pt2" --input_shape=2,1,28,28)
check "package: root row" grep -qE '^\(root\) +SmallCNN +0 +float32\[2, 10\]$' <<<"$out"
check "package: exported stem" grep -qE '^stem +Sequential +0 +float32\[2, 8, 28, 28\]$' <<<"$out"
check "package: unexported fc" grep -qE '^fc +Linear +0 +\(not exported\)$' <<<"$out"

out=$("$tool" --model="$data/tricky.pt" --input_shape=3,4 --format=json)
check "json tuple output" grep -qF '{"path": "mix", "type": "Mix", "params": 0, "output": "(float32[3, 4], float32[3, 4])", "calls": 1}' <<<"$out"
check "json loop calls" grep -qF '"path": "act", "type": "Tanh", "params": 0, "output": "float32[3, 4]", "calls": 3' <<<"$out"
check "json uncalled module" grep -qF '"path": "unused", "type": "Linear", "params": 6, "output": "(not called by forward)"' <<<"$out"
if command -v python3 >/dev/null; then
  check "json parses" python3 -c 'import json,sys; assert len(json.load(sys.stdin)) == 5' <<<"$out"
fi

# CUDA: the tool links libtorch's CUDA backend; without a GPU it says so, with one it gives the
# CPU's table (the same modules, parameters and output shapes).
cpu_out=$("$tool" --model="$data/small_cnn.pt" --input_shape=2,1,28,28)
if cuda_out=$("$tool" --model="$data/small_cnn.pt" --input_shape=2,1,28,28 --device=cuda:0 \
              2>"$TEST_TMPDIR/cuda_err"); then
  check "on cuda:0: the CPU's table" test "$cuda_out" = "$cpu_out"
  check "on cuda:0: fc output shape" grep -qE '^fc +Linear +170 +float32\[2, 10\]$' <<<"$cuda_out"
else
  err=$(cat "$TEST_TMPDIR/cuda_err")
  # No GPU, or (a lean install without torch's CUDA libraries) no CUDA backend: one clear line.
  check "cuda:0 unavailable: one clear line" grep -qxE \
    "inspect: --device: device cuda:0: (no CUDA device is available here \(no GPU, or no driver\); use cpu|this binary has no CUDA backend .*)" <<<"$err"
fi
expect_exact_error "bad device" 'inspect: --device: bad device "gpu": use cpu, cuda or cuda:N' \
  --model="$data/small_cnn.pt" --device=gpu

expect_error "missing file" "inspect: /nonexistent.pt: cannot open: No such file or directory" \
  --model=/nonexistent.pt
printf 'not a model' >"$TEST_TMPDIR/garbage.pt"
expect_error "garbage file" "$TEST_TMPDIR/garbage.pt: not a zip archive (11 bytes beginning 0x6e)" \
  --model="$TEST_TMPDIR/garbage.pt"
expect_error "state dict, not a module" "small_cnn.state.pt: is a torch.save archive, not a TorchScript module" \
  --model="$data/small_cnn.state.pt"
expect_error "no model flag" "inspect: --model is required" --format=text
expect_error "bad shape" '--input_shape=1,x: "x" is not a positive integer' \
  --model="$data/small_cnn.pt" --input_shape=1,x
expect_error "wrong channels" "expected input[1, 3, 28, 28] to have 1 channels" \
  --model="$data/small_cnn.pt" --input_shape=1,3,28,28
expect_error "bad format" "--format=xml: use text or json" --model="$data/small_cnn.pt" --format=xml

finish inspect_test
