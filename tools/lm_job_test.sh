#!/bin/bash
# //tools:distill --job=lm end to end, on tiny configs of the job's names (--job_configs) and
# the real fortunes corpus: the corpus tokenized into <run_dir>/data, six runs (teacher,
# student, student_kd, student_gkd, student_hkd, student_bkd), the table with test perplexities, sampled continuations,
# each model saved as a Hugging Face folder that //tools:generate reads; a second run reuses the
# data; bad flags are one line and exit 2.
set -u
source "$TEST_SRCDIR/$TEST_WORKSPACE/tools/tool_test_lib.sh"
root="$TEST_SRCDIR/$TEST_WORKSPACE"
tool="$root/tools/distill"
corpus=/usr/share/games/fortunes
if [[ ! -d "$corpus" ]]; then
  echo "FAIL: $corpus missing (Debian's fortunes package: tools/install_deps.sh installs it)"
  exit 1
fi

jobs="$TEST_TMPDIR/jobs"; mkdir -p "$jobs"
# The shipped configs with tiny models, a few windows and one epoch.
for f in "$root"/tools/configs/fortunes_*.pbtxt; do
  sed -e 's/name: "hidden_size" integer: [0-9]*/name: "hidden_size" integer: 16/' \
      -e 's/name: "intermediate_size" integer: [0-9]*/name: "intermediate_size" integer: 32/' \
      -e 's/name: "num_hidden_layers" integer: [0-9]*/name: "num_hidden_layers" integer: 1/' \
      -e 's/name: "num_attention_heads" integer: [0-9]*/name: "num_attention_heads" integer: 2/' \
      -e 's/num_epochs: [0-9]*/num_epochs: 1/' \
      -e '/^  subset { stop: [0-9]* }$/d' \
      -e 's/name: "max_new_tokens" integer: [0-9]*/name: "max_new_tokens" integer: 8/' \
      -e 's/^  kwargs { name: "vocab_size" integer: 2048 }$/&\n  subset { stop: 32 }/' \
      -e '/alignments {.*model.layers.[1-9]/d' \
      "$f" >"$jobs/$(basename "$f")"
done
check "tiny configs: six" test "$(ls "$jobs" | wc -l)" -eq 6

run="$TEST_TMPDIR/lm"
out=$("$tool" --job=lm --job_configs="$jobs" --run_dir="$run" --tensorboard=false \
  2>"$TEST_TMPDIR/err"); rc=$?
check "lm job: exit 0" test "$rc" -eq 0 || cat "$TEST_TMPDIR/err"
check "lm job: tokenized" grep -q "distill: tokenized" "$TEST_TMPDIR/err"
check "lm job: token files" test -s "$run/data/train.bin" -a -s "$run/data/tokenizer.model"
check "lm job: 2048 pieces" grep -q '"vocab_size": 2048' "$run/data/meta.json"
for part in teacher student student_kd student_gkd student_hkd student_bkd; do
  check "lm job: $part row" grep -qE "^$part +(Training|Distillation)Box +[0-9.]+M +[0-9.]+ " <<<"$out"
  check "lm job: $part summary" test -s "$run/$part/summary.json"
  check "lm job: $part hf folder" test -s "$run/$part/hf/model.safetensors"
done
check "lm job: distillation box" grep -qE '^student_kd +DistillationBox' <<<"$out"
check "lm job: samples" test "$(grep -c '^  student_gkd ' <<<"$out")" -eq 3
# The teacher's folder opens in //tools:generate with the job's tokenizer.
text=$("$root/tools/generate" --model="$run/teacher/hf" --tokenizer="$run/data/tokenizer.model" \
  --prompt="A computer" --max_new_tokens=4 2>&1); rc=$?
check "generate reads the teacher: exit 0" test "$rc" -eq 0
check "generate reads the teacher: the prompt" grep -q "^A computer" <<<"$text"

# A finished job resumed trains nothing more and reuses the tokenized corpus; without --resume
# or --overwrite its run folders are kept.
"$tool" --job=lm --job_configs="$jobs" --run_dir="$run" --tensorboard=false --resume \
  >/dev/null 2>"$TEST_TMPDIR/err2"; rc=$?
check "lm job resumed: exit 0" test "$rc" -eq 0
check "lm job resumed: data reused" test "$(grep -c tokenized "$TEST_TMPDIR/err2")" -eq 0
expect_error "lm job: taken run folder" "holds an earlier run" --job=lm --job_configs="$jobs" \
  --run_dir="$run" --tensorboard=false
expect_error "lm job: unknown job" '--job must be image or lm, got "llm"' --job=llm
expect_error "lm job: with --config" "--job picks a default job; with --config the config is" \
  --job=lm --config="$jobs/fortunes_student.pbtxt"
expect_error "lm job: aoti teacher" "--teacher_format is the image job's" --job=lm \
  --teacher_format=aoti
expect_error "lm job: missing corpus" "/nonexistent" --job=lm --job_configs="$jobs" \
  --run_dir="$TEST_TMPDIR/lm2" --corpus=/nonexistent
check "lm job: nothing left without a corpus" test ! -e "$TEST_TMPDIR/lm2"

finish lm_job_test
