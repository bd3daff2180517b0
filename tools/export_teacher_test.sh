#!/bin/bash
# tools/export_teacher.py's bad input: one line, exit 2, before any export starts; and that its
# defaults do freeze (a package it made calls oneDNN's prepacked convolutions, not ATen's). (Its
# exports' values are tested through //tests/testdata:aoti_fixtures and //hooks:aoti_model_test.)
set -u
source "$TEST_SRCDIR/$TEST_WORKSPACE/tools/tool_test_lib.sh"
root="$TEST_SRCDIR/$TEST_WORKSPACE"
python="$root/external/libtorch/python.sh"
tool=$(python_tool export_teacher.py)
small="--model=tests.testdata.make_fixtures:SmallCNN --input_shape=2,1,28,28 --out=$TEST_TMPDIR/t.pt2"

expect_error "unknown module path" \
  "export_teacher: --hooks: the model has no module 'layer9'; did you mean 'layer2' or 'layer1'?" \
  $small --hooks=layer9:output
expect_error "bad io" "is not PATH:IO with IO input, output or both" $small --hooks=stem:sideways
expect_error "bad shape" "--input_shape=2,x: give integers" \
  --model=tests.testdata.make_fixtures:SmallCNN --input_shape=2,x --out="$TEST_TMPDIR/t.pt2"
expect_error "unknown module" "--model=nosuch:Thing: cannot import nosuch" \
  --model=nosuch:Thing --input_shape=2,1,28,28 --out="$TEST_TMPDIR/t.pt2"
expect_error "bad kwargs" "--kwargs: '16' is not NAME=VALUE" $small --kwargs=16
expect_error "unknown inductor config" \
  "export_teacher: --inductor_configs: torch._inductor.config has no 'freezin'" \
  $small --inductor_configs=freezin=True
expect_error "bad inductor config" "--inductor_configs: 'cpp..threads=1' is not NAME=VALUE" \
  $small --inductor_configs=cpp..threads=1

# Inductor freezes only a graph compiled without autograd: the fixture exported with the defaults
# must call oneDNN's prepacked convolution (freezing's weight packing) and never ATen's.
calls=$("$python" - "$root/tests/testdata/fashion_cnn16_plain_aoti.pt2" <<'PY'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as package:
    code = "".join(package.read(n).decode() for n in package.namelist() if n.endswith("wrapper.cpp"))
print(" ".join(sorted(set(re.findall(r"aoti_torch_cpu_[a-z_]*convolution[a-z_]*", code)))))
PY
)
check "frozen: prepacked convolutions ($calls)" \
  test "$calls" = "aoti_torch_cpu_mkldnn__convolution_pointwise"
finish export_teacher_test
