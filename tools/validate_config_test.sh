#!/bin/bash
# //tools:validate_config end to end: OK and a summary for the example configs, every problem
# as file:line:column: message with exit code 2 for a broken one, one-line usage errors.
# Expected columns were counted by hand in the texts below.
set -u
source "$TEST_SRCDIR/$TEST_WORKSPACE/tools/tool_test_lib.sh"
root="$TEST_SRCDIR/$TEST_WORKSPACE"
tool="$root/tools/validate_config"

for config in "$root"/tools/configs/*.pbtxt; do
  name=$(basename "$config")
  out=$("$tool" --config="$config"); rc=$?
  check "$name: exit 0" test "$rc" -eq 0
  check "$name: OK first" test "$(head -n 1 <<<"$out")" = "OK"
  if grep -q 'aoti_package' "$config"; then  # the default job with a package teacher
    check "$name: summary" grep -qE '^Distills the teacher \(AOTInductor package runs/aoti/teacher.pt2\) into the student' <<<"$out"
  elif grep -q 'tests/testdata/small_cnn.pt' "$config"; then
    check "$name: summary" grep -qE '^Distills the teacher \(TorchScript tests/testdata/small_cnn.pt\) into the student' <<<"$out"
  elif grep -q 'llama' "$config"; then  # the LM job's configs: native Llamas
    check "$name: summary" grep -qE '^(Distills the teacher \(native model "llama"|Trains the student \(native model "llama")' <<<"$out"
  else  # the default job's configs: native models
    check "$name: summary" grep -qE '^(Distills the teacher \(native model "fashion_cnn"|Trains the student \(native model "fashion_cnn")' <<<"$out"
  fi
done

# The tests run in the runfiles root, where the fixture the example names exists.
out=$("$tool" --config="$root/tools/configs/fashion_mnist_kd.pbtxt" --check_files); rc=$?
check "check_files: exit 0" test "$rc" -eq 0

cat >"$TEST_TMPDIR/broken.pbtxt" <<'PBTXT'
student { torchscript: "s.pt" }
datasets { id: "train" key: "fashion_mnist" }
train {
  num_epochs: 0
  train_data_loader { dataset_id: "trian" batch_size: 8 }
  optimizer { key: "SGD" }
  criterion { terms { key: "KDLoss" wieght: 2 inputs { arg: "t" source: TEACHER } } }
  pre_forward_proc { key: "default_pre_forward" }
}
PBTXT
expected='broken.pbtxt:4:3: num_epochs must be >= 1, got 0
broken.pbtxt:5:23: unknown dataset id "trian"; did you mean "train"?
broken.pbtxt:6:3: missing required kwarg "lr" for optimizer "SGD" (learning rate)
broken.pbtxt:7:15: missing required kwarg "temperature" for loss "KDLoss" (softening T)
broken.pbtxt:7:37: unknown field "wieght" in LossTermConfig; did you mean "weight"?
broken.pbtxt:7:65: reads the teacher, but the run has none (DistillConfig.teacher is unset)
broken.pbtxt:8:22: no pre_forward_proc "default_pre_forward" is registered; registered: default_pre_forward_process, on_policy_generation'
# A relative path is taken from the folder `bazel run` was called in, and named as given.
out=$(cd / && BUILD_WORKING_DIRECTORY="$TEST_TMPDIR" "$tool" --config=broken.pbtxt); rc=$?
check "broken: exit 2" test "$rc" -eq 2
check "broken: every problem" test "$out" = "$expected"
if [[ "$out" != "$expected" ]]; then diff <(echo "$expected") <(echo "$out"); fi

# Loss kwargs against each loss's contract: a NaN temperature, a beta out of its range, a
# parameter reference without the parameter's name.
cat >"$TEST_TMPDIR/losses.pbtxt" <<'PBTXT'
student { torchscript: "s.pt" }
teacher { torchscript: "t.pt" }
datasets { id: "train" key: "fashion_mnist" }
train {
  num_epochs: 1
  train_data_loader { dataset_id: "train" batch_size: 8 }
  optimizer { key: "SGD" kwargs { name: "lr" number: 0.1 } }
  criterion {
    terms { key: "KDLoss" kwargs { name: "temperature" number: nan } inputs { arg: "student" source: STUDENT } }
    terms { key: "generalized_jsd" kwargs { name: "beta" number: 1.5 } inputs { arg: "student" source: STUDENT } }
    terms { key: "mahal_mse" inputs { arg: "weight_matrix" source: STUDENT io: PARAMETER } }
  }
}
PBTXT
expected='losses.pbtxt:9:36: kwarg "temperature" for loss "KDLoss" must be finite, got nan
losses.pbtxt:10:45: kwarg "beta" for loss "generalized_jsd" must be in (0, 1), got 1.5
losses.pbtxt:11:30: missing required field "path" in IoRef (the parameter'"'"'s or buffer'"'"'s name, e.g. "fc.weight")'
out=$(cd / && BUILD_WORKING_DIRECTORY="$TEST_TMPDIR" "$tool" --config=losses.pbtxt); rc=$?
check "losses: exit 2" test "$rc" -eq 2
check "losses: every problem" test "$out" = "$expected"
if [[ "$out" != "$expected" ]]; then diff <(echo "$expected") <(echo "$out"); fi

# --check_files builds the models and checks the module paths against them (columns counted by
# hand: line 9's param_groups value starts at 75). Without it the config is valid.
cat >"$TEST_TMPDIR/paths.pbtxt" <<'PBTXT'
student { native { key: "fashion_cnn" kwargs { name: "width" integer: 4 } } }
teacher { native { key: "fashion_cnn" } }
datasets { id: "train" key: "fashion_mnist" }
train {
  num_epochs: 1
  train_data_loader { dataset_id: "train" batch_size: 8 }
  student { forward_hooks { module_path: "layer3" requires_output: true } }
  teacher { forward_hooks { module_path: "layer2" requires_output: true } }
  optimizer { key: "SGD" kwargs { name: "lr" number: 0.1 } param_groups { module_path: "haed" } }
  criterion { terms { key: "MSELoss" inputs { arg: "input" source: STUDENT path: "layer3" } inputs { arg: "target" source: TEACHER path: "layer2" } } }
}
PBTXT
expected='paths.pbtxt:7:29: no module "layer3" in this native model; did you mean "layer1" or "layer2"?
paths.pbtxt:9:75: no module "haed" in this native model; did you mean "head"?'
out=$(cd / && BUILD_WORKING_DIRECTORY="$TEST_TMPDIR" "$tool" --config=paths.pbtxt --check_files); rc=$?
check "paths: exit 2" test "$rc" -eq 2
check "paths: every problem" test "$out" = "$expected"
if [[ "$out" != "$expected" ]]; then diff <(echo "$expected") <(echo "$out"); fi
out=$(cd / && BUILD_WORKING_DIRECTORY="$TEST_TMPDIR" "$tool" --config=paths.pbtxt); rc=$?
check "paths without check_files: exit 0" test "$rc" -eq 0

printf 'train {\n  num_epochs: "ten"\n}\n' >"$TEST_TMPDIR/syntax.pbtxt"
out=$("$tool" --config="$TEST_TMPDIR/syntax.pbtxt"); rc=$?
check "syntax: exit 2" test "$rc" -eq 2
check "syntax: position" test "$out" = "$TEST_TMPDIR/syntax.pbtxt:2:15: Expected integer, got: \"ten\""

# A third stage that uses a deprecated name: a warning, and the config is still valid.
cp "$root/tools/configs/fashion_mnist_two_stage.pbtxt" "$TEST_TMPDIR/deprecated.pbtxt"
printf 'stages { num_epochs: 1 post_epoch_process { key: "default_post_epoch_process_with_teacher" }\n  criterion { terms { key: "MSELoss" inputs { arg: "a" source: STUDENT } } } }\n' \
  >>"$TEST_TMPDIR/deprecated.pbtxt"
line=$(($(wc -l <"$root/tools/configs/fashion_mnist_two_stage.pbtxt") + 1))
out=$("$tool" --config="$TEST_TMPDIR/deprecated.pbtxt"); rc=$?
check "deprecated: exit 0" test "$rc" -eq 0
check "deprecated: warning" test "$(head -n 1 <<<"$out")" = "$TEST_TMPDIR/deprecated.pbtxt:$line:24: warning: \"post_epoch_process\" is deprecated; call it \"post_epoch_proc\""
check "deprecated: then OK" test "$(sed -n 2p <<<"$out")" = "OK"

expect_exact_error "no config" "validate_config: --config is required (see --help)"
expect_exact_error "missing file" \
  "validate_config: /nonexistent.pbtxt: cannot open: No such file or directory" \
  --config=/nonexistent.pbtxt

help=$("$tool" --help 2>/dev/null); rc=$?
check "help: exit 0" test "$rc" -eq 0
check "help: config" grep -qF -- "-config (Path of the config to check" <<<"$help"
check "help: check_files" grep -qF -- "-check_files (Also check that the files the config reads exist" <<<"$help"


# Output to a full stdout is exit 1, named, never lost silently.
"$tool" --config="$root/tools/configs/fashion_mnist_kd.pbtxt" >/dev/full 2>"$TEST_TMPDIR/full_err"; rc=$?
check "full stdout: exit 1" test "$rc" -eq 1
check "full stdout: named" test "$(cat "$TEST_TMPDIR/full_err")" = \
  "validate_config: cannot write to standard output: No space left on device"

finish validate_config_test
