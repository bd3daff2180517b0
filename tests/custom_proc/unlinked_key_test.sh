#!/bin/bash
# //tools:validate_config does not link //tests/custom_proc:scale_samples, so the config that
# uses it gets the unknown-key message (column counted by hand: `    key:` is at 19:5).
set -u
root="$TEST_SRCDIR/$TEST_WORKSPACE"
config="$root/tests/custom_proc/scale_samples.pbtxt"
out=$("$root/tools/validate_config" --config="$config"); rc=$?
expected="$config:19:5: no pre_forward_proc \"scale_samples\" is registered; registered: default_pre_forward_process, on_policy_generation"
if [[ $rc -eq 2 && "$out" == "$expected" ]]; then
  echo "PASS"; exit 0
fi
echo "FAIL: rc=$rc"; echo "got:      $out"; echo "expected: $expected"; exit 1
