#!/bin/bash
# //tools:capture end to end. Values are checked against what Python forward hooks recorded on
# the same fixtures (tests/testdata/*.expected.pt, made by make_fixtures.py).
set -u
source "$TEST_SRCDIR/$TEST_WORKSPACE/tools/tool_test_lib.sh"
root="$TEST_SRCDIR/$TEST_WORKSPACE"
tool="$root/tools/capture"
data="$root/tests/testdata"

out=$("$tool" --model="$data/small_cnn.pt" --input="$data/small_cnn.input.pt" \
  --paths=layer1.1.conv2,fc --inputs)
check "prints input and output of each path" test "$(wc -l <<<"$out")" -eq 4
check "fc output shape" grep -qE '^fc output float32\[2, 10\] sum=' <<<"$out"
check "conv input shape" grep -qE '^layer1\.1\.conv2 input float32\[2, 8, 28, 28\] sum=' <<<"$out"

# The same weights as an AOTInductor package (tools/export_teacher.py): the exported paths, the
# TorchScript model's values; a path it was not exported with says how to re-export.
script=$("$tool" --model="$data/small_cnn.pt" --input="$data/small_cnn.input.pt" --paths=stem,layer2)
package=$("$tool" --model="$data/small_cnn_aoti.pt2" --input="$data/small_cnn.input.pt" \
  --paths=stem,layer2)
check "package: the TorchScript model's shapes" \
  test "$(cut -d' ' -f1-3 <<<"$package")" = "$(cut -d' ' -f1-3 <<<"$script")"
expect_error "package: unexported path" "tools/export_teacher.py --hooks=fc:output" \
  --model="$data/small_cnn_aoti.pt2" --input="$data/small_cnn.input.pt" --paths=fc

out=$("$tool" --model="$data/tricky.pt" --input="$data/tricky.input.pt" --paths=mix)
check "tuple output, outputs only by default" \
  grep -qxE 'mix output \(float32\[3, 4\], float32\[3, 4\]\) sum=.*' <<<"$out"
out=$("$tool" --model="$data/tricky.pt" --input="$data/tricky.kwargs.pt" --paths=lin)
check "dict input is keyword arguments" grep -qE '^lin output float32\[3, 4\]' <<<"$out"

io="$TEST_TMPDIR/io.pt"
"$tool" --model="$data/small_cnn.pt" --input="$data/small_cnn.input.pt" \
  --paths=stem,layer2.0,fc --inputs --out="$io" >/dev/null
check "--out writes a file" test -s "$io"
# The Python of libkd's virtual environment (@libtorch//:python.sh), whose torch libkd links.
python="$root/external/libtorch/python.sh"
if "$python" -c 'import torch' 2>/dev/null; then
  check "Python reads io.pt and it equals Python's hooks" "$python" - "$io" "$data" <<'PY'
import sys, torch
io = torch.load(sys.argv[1])
expected = torch.load(sys.argv[2] + "/small_cnn.expected.pt")["hooks"]
assert sorted(io) == ["fc", "layer2.0", "stem"], sorted(io)
for path in io:
    for kind in ("input", "output"):
        want = expected[path][kind][-1]  # the last call wins without --accumulate
        assert torch.allclose(io[path][kind], want, atol=1e-5), (path, kind)
PY
  # A module whose input is a list of tensors (DenseNet's layers): the file reads with Python's
  # default torch.load (weights_only), the list as a list ([x, x] on the overloads fixture).
  "$tool" --model="$data/overloads.pt" --input="$data/overloads.input.pt" --paths=layer \
    --call=0 --inputs --out="$TEST_TMPDIR/list_input.pt" >/dev/null
  check "a list input reads with torch.load's defaults" "$python" - "$TEST_TMPDIR" "$data" <<'PY'
import sys, torch
io = torch.load(sys.argv[1] + "/list_input.pt")  # weights_only=True, torch's default
x = torch.load(sys.argv[2] + "/overloads.input.pt")
x = x[0] if isinstance(x, (list, tuple)) else x
got = io["layer"]["input"]
assert isinstance(got, list) and len(got) == 2, type(got)
assert all(torch.equal(t, x) for t in got)
PY
  # A one-element Python list of arguments (libtorch 1.13 could not unpickle those).
  "$python" -c 'import sys, torch; torch.save([torch.load(sys.argv[1])], sys.argv[2])' \
    "$data/small_cnn.input.pt" "$TEST_TMPDIR/list.pt"
  out=$("$tool" --model="$data/small_cnn.pt" --input="$TEST_TMPDIR/list.pt" --paths=fc)
  check "a one-element list of arguments" grep -qE '^fc output float32\[2, 10\] sum=' <<<"$out"
  # --accumulate keeps every call of a module called twice (relu), --call=N one of them: equal
  # to what Python's hooks recorded call by call.
  "$tool" --model="$data/small_cnn.pt" --input="$data/small_cnn.input.pt" \
    --paths=layer1.0.relu --accumulate --out="$TEST_TMPDIR/all.pt" >/dev/null
  "$tool" --model="$data/small_cnn.pt" --input="$data/small_cnn.input.pt" \
    --paths=layer1.0.relu --call=0 --inputs --out="$TEST_TMPDIR/first.pt" >/dev/null
  check "--accumulate and --call equal Python's calls" "$python" - "$TEST_TMPDIR" "$data" <<'PY'
import sys, torch
want = torch.load(sys.argv[2] + "/small_cnn.expected.pt")["hooks"]["layer1.0.relu"]
every = torch.load(sys.argv[1] + "/all.pt")["layer1.0.relu"]["output"]
assert len(every) == len(want["output"]) == 2, len(every)
for got, expected in zip(every, want["output"]):
    assert torch.allclose(got, expected, atol=1e-5)
first = torch.load(sys.argv[1] + "/first.pt")["layer1.0.relu"]
assert torch.allclose(first["output"], want["output"][0], atol=1e-5)
assert torch.allclose(first["input"], want["input"][0], atol=1e-5)
PY
else
  echo "SKIP python comparison (no Python torch: libtorch came from LIBKD_TORCH_DIR)"
fi

# --truncate: the same values as a full run, and both forward times.
full=$("$tool" --model="$data/small_cnn.pt" --input="$data/small_cnn.input.pt" \
  --paths=stem,layer1 --inputs)
cut=$("$tool" --model="$data/small_cnn.pt" --input="$data/small_cnn.input.pt" \
  --paths=stem,layer1 --inputs --truncate)
check "truncate prints both times" \
  grep -qE '^forward \(median of 5, after 3 warm-up rounds\): full [0-9.]+ ms, truncated after layer1 [0-9.]+ ms \([0-9.]+x faster\)$' <<<"$cut"
check "truncated values equal full values" test "$(tail -n +2 <<<"$cut")" = "$full"
# The cut is after the module the forward calls last, whatever the order of --paths.
cut=$("$tool" --model="$data/small_cnn.pt" --input="$data/small_cnn.input.pt" \
  --paths=layer1,stem --truncate)
check "truncate names the module called last" grep -qE '^forward .* truncated after layer1 ' <<<"$cut"
# --train: batch norm on the batch's statistics, so another output than eval mode's.
eval_fc=$("$tool" --model="$data/small_cnn.pt" --input="$data/small_cnn.input.pt" --paths=fc)
train_fc=$("$tool" --model="$data/small_cnn.pt" --input="$data/small_cnn.input.pt" --paths=fc --train)
check "--train changes batch norm's output" test "$eval_fc" != "$train_fc"
check "--call=1 takes the second call" "$tool" --model="$data/small_cnn.pt" \
  --input="$data/small_cnn.input.pt" --paths=layer1.0.relu --call=1
expect_exact_error "--call past the calls" 'capture: --call=2: module "layer1.0.relu" ran 2 times in this forward; give --call=0..1' \
  --model="$data/small_cnn.pt" --input="$data/small_cnn.input.pt" --paths=layer1.0.relu --call=2

expect_error "unknown path" 'capture: no module "layer3" in this torchscript model; did you mean "layer1" or "layer2"?' \
  --model="$data/small_cnn.pt" --input="$data/small_cnn.input.pt" --paths=fc,layer3
expect_error "missing input" "capture: /nonexistent/in.pt: cannot open: No such file" \
  --model="$data/small_cnn.pt" --input=/nonexistent/in.pt --paths=fc
expect_error "no paths" "capture: --paths is required" \
  --model="$data/small_cnn.pt" --input="$data/small_cnn.input.pt"
expect_error "wrong input for model" "capture: forward failed: " \
  --model="$data/small_cnn.pt" --input="$data/tricky.input.pt" --paths=fc
expect_error "module forward never calls" 'module "unused" (Linear) exists but forward never calls it' \
  --model="$data/tricky.pt" --input="$data/tricky.input.pt" --paths=unused

# A cut after c skips bump's in-place write; the capture holds c's output as c returned it.
check "cut after an in-place write: runs" "$tool" --model="$data/inplace.pt" \
  --input="$data/inplace.input.pt" --paths=c --truncate
expect_error "inputs captured twice" 'module 0 ("layer1.0.relu") ran twice in one forward, and its inputs are captured once per forward' \
  --model="$data/small_cnn.pt" --input="$data/small_cnn.input.pt" --paths=layer1.0.relu --inputs --truncate


# A terminal escape in a module path is shown, not obeyed: control bytes print as \xNN.
expect_exact_error "escape in a path" \
  "capture: no module \"lay\\x1b[31mer9\" in this torchscript model; valid: \"\" (root), stem, stem.0, stem.1, stem.2, layer1, layer1.0, layer1.0.conv1, layer1.0.bn1, layer1.0.relu and 18 more" \
  --model="$data/small_cnn.pt" --input="$data/small_cnn.input.pt" --paths=$'lay\e[31mer9'

finish capture_test
