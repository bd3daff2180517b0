#!/bin/bash
# The bad-input tables of the tools (tools/testdata/bad_inputs/<tool>.txt): each row a command
# line, the exit code it must give and the exact line it must print: stderr's, which must hold
# that one line and nothing else, or stdout's first when stderr is empty (validate_config lists
# problems on stdout, one a line). The bad files the
# rows name are made here, in $T; $D is the fixtures folder. Rows are added with each fix.
#
# Row syntax:  EXIT | FIRST LINE | ARGS (split on spaces; $T, $D, $R (the runfiles root) and
# $B (the tables' folder, with the files made once by hand) substituted; in FIRST LINE also $C,
# this machine's cores, and $M, 4 per core)
set -u
source "$TEST_SRCDIR/$TEST_WORKSPACE/tools/tool_test_lib.sh"
root="$TEST_SRCDIR/$TEST_WORKSPACE"
D="$root/tests/testdata"
T="$TEST_TMPDIR"
configs="$root/tools/configs"
B="$root/tools/testdata/bad_inputs"

# --- the bad files ---------------------------------------------------------------------------
mkfifo "$T/fifo"
printf 'not a model' >"$T/garbage.pt"
size=$(stat -L -c %s "$D/small_cnn.pt")  # -L: the runfile is a symlink
head -c $((size / 2)) "$D/small_cnn.pt" >"$T/truncated.pt"
# One byte of the tensor record small_cnn/data/7 changed (100 bytes after its name in the local
# header: past the alignment padding, inside its 2304 bytes).
cp "$D/small_cnn.pt" "$T/corrupted.pt"
at=$(grep -boa 'small_cnn/data/7' "$D/small_cnn.pt" | head -1 | cut -d: -f1)
printf '\x5a' | dd of="$T/corrupted.pt" bs=1 seek=$((at + 116)) conv=notrunc status=none
# An image folder with a JPEG that does not decode (sample 1, b/y.jpg).
mkdir -p "$T/badimg/a" "$T/badimg/b"
cp "$D/image_folder/ant/x.jpg" "$T/badimg/a/x.jpg"
cp "$D/image_folder/cat/z.png" "$T/badimg/b/z.png"
printf '\xff\xd8\xff\xe0 not a JPEG' >"$T/badimg/b/y.jpg"
sed "s|BADIMG|$T/badimg|" "$B/image_folder.pbtxt" >"$T/image_folder.pbtxt"
# A weight file of another architecture: fashion_cnn of width 4's state for one of width 8.
sed -e '/^student {/,/^}/s/integer: 4 }/integer: 8 }/' \
  -e '/^student {/,/^}/s|^}$|  src_ckpt: "tests/testdata/fashion_cnn4.torchdistill_ckpt.pt"\n}|' \
  "$configs/fashion_mnist_student.pbtxt" >"$T/other_arch.pbtxt"
kd="$configs/fashion_mnist_kd.pbtxt"
{ printf '\xef\xbb\xbf'; cat "$kd"; } >"$T/bom.pbtxt"
sed 's/name: "fashion_mnist_kd"/name: "fashion\xff"/' "$kd" >"$T/non_utf8.pbtxt"
sed '0,/source: TEACHER/s//source: 99/' "$kd" >"$T/enum99.pbtxt"
sed '0,/module_path: "layer2"/s//module_path: "layer2."/' "$kd" >"$T/empty_component.pbtxt"
sed 's/^  name: "kd"$/  name: "hint"/' "$configs/fashion_mnist_two_stage.pbtxt" >"$T/same_stage_names.pbtxt"
sed 's/number: 4.0 }/number: nan }/' "$kd" >"$T/nan_kwarg.pbtxt"
sed 's|torchscript: "tests/testdata/small_cnn.pt"|torchscript: "tests/testdata/small_cnn.state.pt"|' \
  "$kd" >"$T/state_as_model.pbtxt"
sed -n '1,/^checkpoint {/p' "$kd" >"$T/unclosed.pbtxt"  # ends with "checkpoint {", unclosed
{
  printf 'student { native { key: "fashion_cnn" '
  for _ in $(seq 3000); do printf 'kwargs { name: "a" dict { '; done
  for _ in $(seq 3000); do printf '} } '; done
  printf '} }\n'
} >"$T/deep.pbtxt"
printf 'train { num_epochs: 1 }\n' >"$T/minimal.pbtxt"
printf 'not a folder' >"$T/a_file"
# Issue 31's: flag files, run folders, outputs that are inputs.
printf '# a comment\n--confi=x\n' >"$T/unknown.flags"
ln -s "$T/loop_b" "$T/loop_a" && ln -s "$T/loop_a" "$T/loop_b"  # symbolic links in a loop
mkdir -p "$T/done" && printf '{}\n' >"$T/done/summary.json"
sed 's|  name: "fashion_mnist_kd"|  name: "../../x"|' "$kd" >"$T/name_path.pbtxt"
sed 's|  dst_ckpt: "runs/fashion_mnist_kd/student.pt"|  dst_ckpt: "tests/../tests/testdata/small_cnn.pt"|' \
  "$kd" >"$T/dst_is_teacher.pbtxt"
sed "s|  dst_ckpt: \"runs/fashion_mnist_kd/student.pt\"|  dst_ckpt: \"$T/dst_is_config.pbtxt\"|" \
  "$kd" >"$T/dst_is_config.pbtxt"
# Issue 49's: stage names that are paths or too long for a file name.
two="$configs/fashion_mnist_two_stage.pbtxt"
sed 's/^  name: "hint"$/  name: "..\/..\/..\/x"/' "$two" >"$T/stage_path.pbtxt"
sed 's/^  name: "hint"$/  name: "a\/b"/' "$two" >"$T/stage_slash.pbtxt"
sed "s/^  name: \"hint\"$/  name: \"$(printf 'x%.0s' $(seq 300))\"/" "$two" >"$T/stage_long.pbtxt"
# Outputs onto inputs the check did not know: the memory snapshot on the config, a checkpoint
# into the dataset's folder.
sed "s|^evaluation {|evaluation {\n  memory_leak_detection { snapshot_path: \"$T/snap_is_config.pbtxt\" }|" \
  "$kd" >"$T/snap_is_config.pbtxt"
sed 's|  dst_ckpt: "runs/fashion_mnist_kd/student.pt"|  dst_ckpt: "/usr/share/datasets/fashion-mnist/student.pt"|' \
  "$kd" >"$T/dst_in_data.pbtxt"
sed 's|^  every_n_epochs: 4$|  every_n_epochs: 4\n  dir: "../../elsewhere"|' "$kd" >"$T/ckpt_climbs.pbtxt"
sed 's|  dst_ckpt: "runs/fashion_mnist_kd/student.pt"|  dst_ckpt: "/proc/self/student.pt"|' "$kd" >"$T/dst_in_proc.pbtxt"
sed 's|  dst_ckpt: "runs/fashion_mnist_kd/student.pt"|  dst_ckpt: "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"|' \
  "$kd" >"$T/dst_is_data.pbtxt"
sed 's|^  name: "kd"$|  name: "last"|' "$kd" >"$T/stage_last.pbtxt"
sed 's|^  name: "kd"$|  name: "kd_epoch3"|' "$kd" >"$T/stage_epoch.pbtxt"
sed 's|    num_workers: 2|    num_workers: 100000|' "$kd" >"$T/workers.pbtxt"
sed 's|  dst_ckpt: "runs/fashion_mnist_kd/student.pt"|  dst_ckpt: "student.txt\\000.pt"|' "$kd" >"$T/nul_path.pbtxt"
sed 's|^  num_epochs: 12$|  num_epochs: 12\n  teacher_cache { memory_mib: 8796093022208 }|' "$kd" >"$T/cache_mib.pbtxt"
sed 's|^  name: "kd"$|  name: "../../x"|' "$kd" >"$T/train_name_path.pbtxt"
# Exit 2 for bad input: something in the place of tb/, a last.pt that is a link loop, a CUDA
# device on a machine without one (skipped where a GPU is).
mkdir -p "$T/tb_file_run" && printf 'x' >"$T/tb_file_run/tb"
mkdir -p "$T/tb_fifo_run" && mkfifo "$T/tb_fifo_run/tb"
mkdir -p "$T/loop_resume/ckpt" && ln -s last.pt "$T/loop_resume/ckpt/last.pt"
sed 's|^run {|run {\n  device: "cuda:0"|' "$configs/fashion_mnist_student.pbtxt" >"$T/cuda_device.pbtxt"
# Bounds that scale with the machine: C cores, M = 4 per core.
C=$(getconf _NPROCESSORS_ONLN)
M=$((4 * C))

# --- the tables ------------------------------------------------------------------------------
for table in "$root"/tools/testdata/bad_inputs/*.txt; do
  name=$(basename "$table" .txt)
  tool="$root/tools/$name"
  n=0
  while IFS= read -r row; do
    [[ -z "$row" || "$row" == \#* ]] && continue
    n=$((n + 1))
    want_rc=${row%% | *}
    rest=${row#* | }
    want_line=${rest%% | *}
    args=${rest#* | }
    want_line=${want_line//\$T/$T}
    want_line=${want_line//\$D/$D}
    want_line=${want_line//\$C/$C}
    want_line=${want_line//\$M/$M}
    args=${args//\$T/$T}
    args=${args//\$D/$D}
    args=${args//\$B/$B}
    args=${args//\$R/$root}
    # shellcheck disable=SC2086  # the args split on spaces by design
    out=$(cd "$root" && timeout 60 "$tool" $args 2>"$T/stderr" </dev/null); rc=$?
    if [[ -s "$T/stderr" ]]; then
      line=$(head -n 1 "$T/stderr")
      # The contract is one line: nothing may follow it (a trace, a second message).
      check "$name row $n: stderr is one line" test "$(grep -c '' "$T/stderr")" -eq 1
    else
      line=$(head -n 1 <<<"$out")
    fi
    check "$name row $n: exit $want_rc" test "$rc" -eq "$want_rc"
    check "$name row $n: first line" test "$line" = "$want_line"
    if [[ "$rc" -ne "$want_rc" || "$line" != "$want_line" ]]; then
      echo "  args:     $args"
      echo "  expected: $want_rc $want_line"
      echo "  got:      $rc $line"
    fi
  done <"$table"
  check "$name: has rows" test "$n" -gt 0
done
# The profiler's folder in /dev is refused before anything is made there.
line=$(cd "$root" && timeout 60 "$root/tools/distill" --config="$configs/fashion_mnist_student.pbtxt" \
  --run_dir="$T/prof_dev_run" --profile_dir=/dev/shm/libkd_bad_inputs_prof 2>&1 >/dev/null </dev/null); rc=$?
check "--profile_dir in /dev: exit 2" test "$rc" -eq 2
check "--profile_dir in /dev: the line" test "$line" = "distill: profiler: /dev/shm/libkd_bad_inputs_prof/student: is in /dev, which holds the system's devices and state, not files; give the path of a file elsewhere"
check "--profile_dir in /dev: nothing made" test ! -e /dev/shm/libkd_bad_inputs_prof

# A CUDA device where there is none: bad input (exit 2), from the config and from the flag.
if ! nvidia-smi -L >/dev/null 2>&1; then
  for how in config flag; do
    if [[ $how == config ]]; then args=(--config="$T/cuda_device.pbtxt" --run_dir="$T/cuda_$how")
    else args=(--config="$configs/fashion_mnist_student.pbtxt" --run_dir="$T/cuda_$how" --device=cuda:0); fi
    line=$(cd "$root" && timeout 60 "$root/tools/distill" "${args[@]}" 2>&1 >/dev/null </dev/null); rc=$?
    check "cuda:0 without a GPU ($how): exit 2" test "$rc" -eq 2
    want="distill: $([[ $how == config ]] && echo run.device || echo --device): device cuda:0: no CUDA device is available here (no GPU, or no driver); use cpu"
    check "cuda:0 without a GPU ($how): the line" test "$line" = "$want"
  done
fi

finish bad_inputs_test
