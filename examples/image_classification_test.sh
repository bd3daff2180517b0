#!/bin/bash
# The image-classification port (examples/image_classification.cc) on torchdistill's CIFAR-10 KD
# sample YAML, unchanged: its datasets read ~/datasets/cifar10 (torchvision's root), here small
# CIFAR-10 binary files the test writes under a HOME of its own (40 training and 16 test
# records). Then on the libkd config the importer makes of the same YAML. Checked: each epoch's
# validation top-1 and top-5, the best checkpoint, the teacher and the student tested at the
# end, --run_log, a stopped run resumed with --start_epoch (and a wrong --start_epoch refused),
# --test_only and --student_only, a --world_size the environment does not have refused.
set -uo pipefail
example=$1 importer=$2 yaml=$3
fail() { echo "FAIL: $*"; exit 1; }
export HOME="${TEST_TMPDIR:-$(mktemp -d)}/home"
data="$HOME/datasets/cifar10/cifar-10-batches-bin"
mkdir -p "$data"
python3 - "$data" <<'PY'
import random, sys
random.seed(0)
def write(name, n):
    with open(f"{sys.argv[1]}/{name}", "wb") as f:
        for _ in range(n):
            f.write(bytes([random.randrange(10)]) + bytes(random.randrange(256) for _ in range(3072)))
for i in range(1, 6):
    write(f"data_batch_{i}.bin", 8)
write("test_batch.bin", 16)
PY
work="$HOME/work"; mkdir -p "$work"

# 1. The YAML as it is (one epoch; validation on the test split, as the sample does).
out=$("$example" --config="$yaml" --run_dir="$work/yaml_run" --run_log="$work/run.log" \
  --log_freq=5 --seed=1 2>&1) || fail "the YAML run failed: $out"
echo "$out"
grep -q '^DistillationBox: 1 epochs, 1 stage$' <<<"$out" || fail "no box line"
grep -qE '^Epoch: \[0\]  \[0/10\]  lr: 0.1  img/s: [0-9.]+  loss: [0-9.]+$' <<<"$out" ||
  fail "no step line"
grep -qE '^Validation: epoch 0: .*accuracy [0-9.]+.*top5 [0-9.]+' <<<"$out" || fail "no validation"
grep -qE '^\[Teacher\] Test: Acc@1 [0-9.]+  Acc@5 [0-9.]+$' <<<"$out" || fail "teacher not tested"
grep -qE '^\[Student\] Test: Acc@1 [0-9.]+  Acc@5 [0-9.]+$' <<<"$out" || fail "student not tested"
[[ -f "$work/yaml_run/ckpt/best.pt" ]] || fail "no best checkpoint"
grep -q "the student of $work/yaml_run/ckpt/best.pt (best validation)" <<<"$out" ||
  fail "the best student was not tested"
cmp -s <(grep -v '^note: ' "$work/run.log") <(grep -v '^note: ' <<<"$out") ||
  fail "--run_log does not hold the lines"

# 2. The libkd config the importer makes of it, two epochs, stopped after one and resumed.
"$importer" --yaml="$yaml" --seed=1 --out="$work/kd.pbtxt" >/dev/null 2>&1 || fail "import"
sed -i 's/num_epochs: 1$/num_epochs: 2/' "$work/kd.pbtxt"
grep -q 'num_epochs: 2' "$work/kd.pbtxt" || fail "the imported config has no num_epochs line"
whole=$("$example" --config="$work/kd.pbtxt" --run_dir="$work/whole" 2>&1) || fail "whole: $whole"
sed 's/num_epochs: 2$/num_epochs: 1/' "$work/kd.pbtxt" >"$work/kd_stopped.pbtxt"
"$example" --config="$work/kd_stopped.pbtxt" --run_dir="$work/parts" >/dev/null 2>&1 ||
  fail "the stopped run failed"
wrong=$("$example" --config="$work/kd.pbtxt" --run_dir="$work/parts" --start_epoch=2 2>&1) &&
  fail "a wrong --start_epoch ran"
grep -q -- "--start_epoch=2 but the run folder's checkpoint ends after epoch 1: give --start_epoch=1" \
  <<<"$wrong" || fail "the wrong --start_epoch was not named: $wrong"
resumed=$("$example" --config="$work/kd.pbtxt" --run_dir="$work/parts" --start_epoch=1 2>&1) ||
  fail "resumed: $resumed"
grep -q '^Epoch: \[0\]' <<<"$resumed" && fail "the resumed run trained epoch 0 again"
grep -q '^Epoch: \[1\]' <<<"$resumed" || fail "the resumed run did not train epoch 1"
# The resumed run ends as the uninterrupted one: the same validation and test lines.
cmp -s <(grep -E '^(Validation: epoch 1|\[)' <<<"$whole") \
  <(grep -E '^(Validation: epoch 1|\[)' <<<"$resumed") ||
  fail "the resumed run differs: $(grep -E '^(Validation|\[)' <<<"$whole$resumed")"

# 3. --test_only on the finished run, --student_only.
tested=$("$example" --config="$work/kd.pbtxt" --run_dir="$work/whole" --test_only --student_only \
  2>&1) || fail "test_only: $tested"
grep -q '^Epoch' <<<"$tested" && fail "--test_only trained"
grep -q '^\[Teacher\]' <<<"$tested" && fail "--student_only tested the teacher"
[[ "$(grep '^\[Student\]' <<<"$tested")" == "$(grep '^\[Student\]' <<<"$whole")" ]] ||
  fail "--test_only tested another student"

# 4. Bad flags.
bad=$("$example" --config="$work/kd.pbtxt" --run_dir="$work/ws" --world_size=2 2>&1) &&
  fail "--world_size=2 ran in one process"
grep -q -- "--world_size=2 but 1 process(es) run (WORLD_SIZE)" <<<"$bad" || fail "$bad"
echo PASS
