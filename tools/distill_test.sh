#!/bin/bash
# //tools:distill end to end on the synthetic dataset: a run writes summary.json and
# metrics.jsonl; --resume of a finished run trains nothing more; a bad config is reported as
# file:line:column with exit 2; a run that fails exits 1 naming why.
set -u
source "$TEST_SRCDIR/$TEST_WORKSPACE/tools/tool_test_lib.sh"
tool="$TEST_SRCDIR/$TEST_WORKSPACE/tools/distill"

cp "$TEST_SRCDIR/$TEST_WORKSPACE/tools/testdata/synthetic_run.pbtxt" "$TEST_TMPDIR/syn.pbtxt"
run="$TEST_TMPDIR/run"
out=$("$tool" --config="$TEST_TMPDIR/syn.pbtxt" --run_dir="$run" 2>"$TEST_TMPDIR/err"); rc=$?
check "run: exit 0" test "$rc" -eq 0
check "run: summary printed" grep -q '"box":"TrainingBox"' <<<"$out"
check "run: summary.json" grep -q '"torch_version":"' "$run/summary.json"
check "run: two epoch lines" test "$(grep -c '"epoch":{' "$run/metrics.jsonl")" -eq 2
check "run: step lines" test "$(grep -c '"step":{' "$run/metrics.jsonl")" -eq 4
check "run: accuracy logged" grep -q '"accuracy":' "$run/metrics.jsonl"
check "run: progress lines" grep -q 'syn stage0 epoch 2/2: train loss' "$TEST_TMPDIR/err"
check "run: checkpoint" test -s "$run/ckpt/last.pt"
# The final metrics of a summary, as printed.
final_metrics() { grep -o '"final_metrics":{[^}]*}' <<<"$1"; }
# summary.json's maps are printed by key (protobuf's own JSON printer prints them in hash order,
# which changes between processes).
keys=$(final_metrics "$(<"$run/summary.json")" | sed 's/^"final_metrics"://' |
  grep -o '"[a-z_0-9/]*":' | tr -d '":')
check "run: several final metrics" test "$(wc -l <<<"$keys")" -ge 2
check "run: final metrics by key" test "$keys" = "$(LC_ALL=C sort <<<"$keys")"

# Resuming a finished run trains nothing more.
out=$("$tool" --config="$TEST_TMPDIR/syn.pbtxt" --run_dir="$run" --resume 2>/dev/null); rc=$?
check "resume: exit 0" test "$rc" -eq 0
check "resume: no epoch run" bash -c '! grep -q "\"epochs_run\"" <<<"$0"' "$out"
check "resume: no new epoch lines" test "$(grep -c '"epoch":{' "$run/metrics.jsonl")" -eq 2

# --profile_dir: the config's schedule (wait 1, warmup 1, active 2) traces steps 3-4 into
# DIR/<job>/trace_step_4.json, whose phases hold the ops run in them.
{ cat "$TEST_TMPDIR/syn.pbtxt"; echo 'profiler { wait: 1 warmup: 1 active: 2 }'; } \
  >"$TEST_TMPDIR/prof.pbtxt"
"$tool" --config="$TEST_TMPDIR/prof.pbtxt" --run_dir="$TEST_TMPDIR/p" \
  --profile_dir="$TEST_TMPDIR/traces" >/dev/null 2>&1; rc=$?
check "profile: exit 0" test "$rc" -eq 0
check "profile: one trace" test "$(ls "$TEST_TMPDIR/traces/syn")" = "trace_step_4.json"
check "profile: phases hold their ops" python3 \
  "$TEST_SRCDIR/$TEST_WORKSPACE/tools/check_box_trace.py" "$TEST_TMPDIR/traces/syn/trace_step_4.json" \
  data student_forward loss backward optimizer_step

# --nproc_per_node=2: two ranks on loopback, the student wrapped for data parallelism; rank 0
# alone prints the summary and writes metrics.jsonl and the checkpoints.
sed 's/^train {$/train {\n  student { wrapper: DISTRIBUTED_DATA_PARALLEL }/' "$TEST_TMPDIR/syn.pbtxt" \
  >"$TEST_TMPDIR/ddp.pbtxt"
out=$("$tool" --config="$TEST_TMPDIR/ddp.pbtxt" --run_dir="$TEST_TMPDIR/d" --nproc_per_node=2 \
  2>"$TEST_TMPDIR/ddp_err"); rc=$?
check "nproc: exit 0" test "$rc" -eq 0
check "nproc: one summary" test "$(grep -c '"box":"TrainingBox"' <<<"$out")" -eq 1
check "nproc: rank 0's epoch lines" test "$(grep -c '"epoch":{' "$TEST_TMPDIR/d/metrics.jsonl")" -eq 2
check "nproc: half the steps each" test "$(grep -c '"step":{' "$TEST_TMPDIR/d/metrics.jsonl")" -eq 2
check "nproc: checkpoint" test -s "$TEST_TMPDIR/d/ckpt/last.pt"
expect_error "nproc: negative" "--nproc_per_node must be 0-" --nproc_per_node=-1

# torchrun (the venv's torch.distributed.run) launches the tool itself: the same run, the same
# final metrics as --nproc_per_node=2.
python="$TEST_SRCDIR/$TEST_WORKSPACE/external/libtorch/python.sh"
[[ -x "$python" ]] || python="$TEST_SRCDIR/libtorch/python.sh"
if "$python" -c 'import torch.distributed.run' 2>/dev/null; then
  tout=$("$python" -m torch.distributed.run --nproc_per_node=2 \
    --master_port="$((20000 + RANDOM % 20000))" --no-python "$tool" \
    --config="$TEST_TMPDIR/ddp.pbtxt" --run_dir="$TEST_TMPDIR/t" 2>"$TEST_TMPDIR/torchrun_err"); rc=$?
  check "torchrun: exit 0" test "$rc" -eq 0
  check "torchrun: one summary" test "$(grep -c '"box":"TrainingBox"' <<<"$tout")" -eq 1
  # As printed, in another process: the map's order is fixed (by key) too.
  check "torchrun: final metrics printed" test -n "$(final_metrics "$tout")"
  check "torchrun: the metrics of --nproc_per_node" \
    test "$(final_metrics "$tout")" = "$(final_metrics "$out")"
  check "torchrun: checkpoint" test -s "$TEST_TMPDIR/t/ckpt/last.pt"
else
  echo "SKIP torchrun (no Python torch: libtorch came from LIBKD_TORCH_DIR)"
fi

# The default job (teacher, student alone, student distilled) on configs of its own names in
# --job_configs, tiny ones here; with --teacher_format=aoti the trained teacher is exported by
# tools/export_teacher.py through --python, with the layer1 output the KD config hooks, and the
# student is distilled from the package.
if "$python" -c 'import torch._inductor' 2>/dev/null; then
  jobs="$TEST_TMPDIR/jobs"; mkdir -p "$jobs"
  data='datasets { id: "train" key: "synthetic" kwargs { name: "num_samples" integer: 64 }
    kwargs { name: "num_classes" integer: 10 } kwargs { name: "height" integer: 28 }
    kwargs { name: "width" integer: 28 } }'
  loop='num_epochs: 1 train_data_loader { dataset_id: "train" batch_size: 32 }
    val_data_loader { dataset_id: "train" batch_size: 64 }
    optimizer { key: "SGD" kwargs { name: "lr" number: 0.1 } }'
  cnn='native { key: "fashion_cnn" kwargs { name: "width" integer: 4 } }'
  ce='terms { key: "CrossEntropyLoss" inputs { arg: "input" source: STUDENT }
    inputs { arg: "target" source: TARGETS } }'
  for job in teacher student; do
    printf '%s\nstudent { %s }\ntrain { %s criterion { %s } }\nevaluation { metrics { key: "accuracy" } }\n' \
      "$data" "$cnn" "$loop" "$ce" >"$jobs/fashion_mnist_$job.pbtxt"
  done
  printf '%s\nteacher { %s }\nstudent { %s }\ntrain { %s
    teacher { forward_hooks { module_path: "layer1" requires_output: true } }
    student { forward_hooks { module_path: "layer1" requires_output: true } }
    criterion { %s terms { key: "MSELoss" inputs { arg: "input" source: STUDENT path: "layer1" }
      inputs { arg: "target" source: TEACHER path: "layer1" } } } }
evaluation { metrics { key: "accuracy" } }\n' "$data" "$cnn" "$cnn" "$loop" "$ce" \
    >"$jobs/fashion_mnist_student_kd.pbtxt"
  out=$("$tool" --job_configs="$jobs" --run_dir="$TEST_TMPDIR/job" --teacher_format=aoti \
    --python="$python" 2>"$TEST_TMPDIR/job_err"); rc=$?
  check "aoti job: exit 0" test "$rc" -eq 0
  check "aoti job: the package" test -s "$TEST_TMPDIR/job/teacher.pt2"
  check "aoti job: exported layer1" grep -q "1 output(s) and 1 hooked value(s)" \
    "$TEST_TMPDIR/job/export.log"
  check "aoti job: three rows" grep -q "^student_kd_aoti  *DistillationBox" <<<"$out"
  check "aoti job: distilled" test -s "$TEST_TMPDIR/job/student_kd_aoti/summary.json"
  expect_error "aoti job: no python" "--teacher_format=aoti: no Python at $TEST_TMPDIR/none" \
    --job_configs="$jobs" --run_dir="$TEST_TMPDIR/job2" --teacher_format=aoti \
    --python="$TEST_TMPDIR/none"
  check "aoti job: nothing trained without a python" test ! -e "$TEST_TMPDIR/job2"
else
  echo "SKIP --teacher_format=aoti (no Python torch: libtorch came from LIBKD_TORCH_DIR)"
fi

printf 'train {\n  num_epochs: 0\n}\n' >"$TEST_TMPDIR/bad.pbtxt"
err=$("$tool" --config="$TEST_TMPDIR/bad.pbtxt" 2>&1 >/dev/null); rc=$?
check "bad config: exit 2" test "$rc" -eq 2
check "bad config: position" grep -q "bad.pbtxt:2:3: num_epochs must be >= 1, got 0" <<<"$err"

sed 's/"mlp"/"mlpp"/' "$TEST_TMPDIR/syn.pbtxt" >"$TEST_TMPDIR/unknown.pbtxt"
err=$("$tool" --config="$TEST_TMPDIR/unknown.pbtxt" --run_dir="$TEST_TMPDIR/u" 2>&1 >/dev/null); rc=$?
check "unknown model: nonzero exit" test "$rc" -ne 0
check "unknown model: named" grep -q 'did you mean "mlp"' <<<"$err"


# A run folder belongs to one run. Two runs at once: the second is refused naming the first's
# pid, and the first finishes with its own metrics only.
sed 's/num_epochs: 2/num_epochs: 150/' "$TEST_TMPDIR/syn.pbtxt" >"$TEST_TMPDIR/long.pbtxt"
both="$TEST_TMPDIR/both"
"$tool" --config="$TEST_TMPDIR/long.pbtxt" --run_dir="$both" >/dev/null 2>&1 &
first=$!
for _ in $(seq 300); do
  [[ "$(cat "$both/.libkd.lock" 2>/dev/null)" == "$first" ]] && break
  sleep 0.1
done
expect_exact_error "second run" \
  "distill: run folder $both is in use by another run (pid $first); wait for it to end, or give another --run_dir" \
  --config="$TEST_TMPDIR/syn.pbtxt" --run_dir="$both" --overwrite
wait "$first"; rc=$?
check "first run: exit 0" test "$rc" -eq 0
check "first run: its epochs only" test "$(grep -c '"epoch":{' "$both/metrics.jsonl")" -eq 150
# A finished run is kept unless replaced: --overwrite starts afresh (metrics of this run only).
expect_error "finished run" "holds an earlier run (metrics.jsonl, summary.json, ckpt/best.pt, ckpt/last.pt, ckpt/stage0.pt)" \
  --config="$TEST_TMPDIR/syn.pbtxt" --run_dir="$both"
"$tool" --config="$TEST_TMPDIR/syn.pbtxt" --run_dir="$both" --overwrite >/dev/null 2>&1; rc=$?
check "overwrite: exit 0" test "$rc" -eq 0
check "overwrite: this run's epochs only" test "$(grep -c '"epoch":{' "$both/metrics.jsonl")" -eq 2

# What a tool prints is never lost silently: a full stdout is exit 1 and one line.
"$tool" --config="$TEST_TMPDIR/syn.pbtxt" --run_dir="$TEST_TMPDIR/full" >/dev/full \
  2>"$TEST_TMPDIR/full_err"; rc=$?
check "full stdout: exit 1" test "$rc" -eq 1
check "full stdout: named" test "$(tail -n 1 "$TEST_TMPDIR/full_err")" = \
  "distill: cannot write to standard output: No space left on device"

# --help is the usage and the tool's flags, exit 0.
help=$("$tool" --help 2>/dev/null); rc=$?
check "help: exit 0" test "$rc" -eq 0
check "help: lists --overwrite" grep -qF -- "--overwrite (Replace the run" <<<"$help"

# A CUDA device on a machine without one: the flag is refused before any work, in one line.
if ! nvidia-smi -L >/dev/null 2>&1; then
  expect_error "cuda without a GPU" "distill: --device: " --config="$TEST_TMPDIR/syn.pbtxt" \
    --run_dir="$TEST_TMPDIR/cuda" --device=cuda:0
fi

finish distill_test
