#!/bin/bash
# //tools:import_torchdistill end to end: a translated config on stdout (exit 0), what has no
# translation on stderr at its line and column (exit 1, the config still written), bad YAML as
# one line (exit 2).
set -u
source "$TEST_SRCDIR/$TEST_WORKSPACE/tools/tool_test_lib.sh"
root="$TEST_SRCDIR/$TEST_WORKSPACE"
tool="$root/tools/import_torchdistill"
data="$root/distill/config/torchdistill/testdata"

out=$("$tool" --yaml="$data/student_kd.yaml" --seed=1 2>"$TEST_TMPDIR/err"); rc=$?
check "student_kd: exit 0" test "$rc" -eq 0
check "student_kd: the config" grep -q 'key: "KDLoss"' <<<"$out"
check "student_kd: the seed" grep -q 'seed: 1' <<<"$out"
check "student_kd: notes only" test "$(grep -vc '^note: ' "$TEST_TMPDIR/err")" -eq 0
check "student_kd: a note at its position" grep -q "student_kd.yaml:14:25: .*download: left out" "$TEST_TMPDIR/err"

"$tool" --yaml="$data/at.yaml" --out="$TEST_TMPDIR/at.pbtxt" 2>/dev/null; rc=$?
check "--out: exit 0" test "$rc" -eq 0
check "--out: written" grep -q 'name: "at_loss_pair2"' "$TEST_TMPDIR/at.pbtxt"

cat >"$TEST_TMPDIR/resnet.yaml" <<'YAML'
models:
  teacher_model:
    key: 'resnet34'
  student_model:
    key: 'fashion_cnn'
train:
  num_epochs: 1
  warmup: 3
YAML
out=$("$tool" --yaml="$TEST_TMPDIR/resnet.yaml" 2>"$TEST_TMPDIR/err"); rc=$?
check "unsupported: exit 1" test "$rc" -eq 1
check "unsupported: still written" grep -q 'key: "resnet34"' <<<"$out"
check "unsupported: the model" grep -q "resnet.yaml:3:10: models.teacher_model resnet34 is not supported: not a libkd model: export" "$TEST_TMPDIR/err"
check "unsupported: the key" grep -q "resnet.yaml:8:11: train.warmup is not supported" "$TEST_TMPDIR/err"
check "unsupported: validation names what to supply" grep -q 'model key "resnet34"\|no model "resnet34"' "$TEST_TMPDIR/err"

printf 'train:\n  num_epochs: !repeat 3\n' >"$TEST_TMPDIR/bad.yaml"
expect_exact_error "unknown tag" "$TEST_TMPDIR/bad.yaml:2:15: unknown tag !repeat; torchdistill's tags are !join, !pathjoin, !expanduser, !abspath, !import_get, !import_call, !import_call_method, !call_method, !getattr, !setattr, !access_by_index_or_key" --yaml="$TEST_TMPDIR/bad.yaml"
printf 'train:\n  num_epochs: [1\n' >"$TEST_TMPDIR/syntax.yaml"
expect_error "syntax error" "syntax.yaml:3:1: " --yaml="$TEST_TMPDIR/syntax.yaml"
printf 'train:\n  num_epochs: ten\n' >"$TEST_TMPDIR/type.yaml"
expect_exact_error "wrong type" "$TEST_TMPDIR/type.yaml:2:15: train.num_epochs must be an integer, not a string 'ten'" --yaml="$TEST_TMPDIR/type.yaml"
expect_error "missing file" "none.yaml: cannot open: No such file or directory" --yaml="$TEST_TMPDIR/none.yaml"
mkfifo "$TEST_TMPDIR/fifo"
expect_error "a FIFO" "fifo: is a FIFO (named pipe); libkd reads only regular files" --yaml="$TEST_TMPDIR/fifo"
expect_error "no --yaml" "--yaml is required"

finish import_torchdistill_test
