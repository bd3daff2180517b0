#!/bin/bash
# Chooses the main job's KD temperature and alpha on the validation split (training images
# 55000-59999), never on the test split: trains the default job's teacher, then distils the
# student with every (temperature, alpha) asked for and prints, for each, the best validation
# top-1 over its epochs (the checkpoint the run keeps) and the choice, with one intra-op thread
# as the default job runs (its results then repeat exactly). The test split is not
# read (the configs' test_data_loader is removed). Run from the repository root:
#
#   bazel build -c opt //tools:distill && tools/kd_sweep.sh --seed=1
#   tools/kd_sweep.sh --seed=1 --temperatures="1 2 4 8" --alphas="0.5 0.9" --out=runs/sweep
#
# Flags: --seed=N (1), --temperatures="..." (1 2 4 8), --alphas="..." (0.5 0.9),
# --out=FOLDER (runs/sweep), --teacher=FILE (a trained teacher's model.pt: skips training one),
# --distill=BINARY (bazel-bin/tools/distill).
set -euo pipefail

seed=1 temperatures="1 2 4 8" alphas="0.5 0.9" out=runs/sweep teacher=""
distill=bazel-bin/tools/distill
for arg in "$@"; do
  case "$arg" in
    --seed=*) seed=${arg#*=} ;;
    --temperatures=*) temperatures=${arg#*=} ;;
    --alphas=*) alphas=${arg#*=} ;;
    --out=*) out=${arg#*=} ;;
    --teacher=*) teacher=${arg#*=} ;;
    --distill=*) distill=${arg#*=} ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "kd_sweep: unknown flag $arg (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x "$distill" ]] || { echo "kd_sweep: build it first: bazel build -c opt //tools:distill" >&2; exit 2; }
configs=tools/configs
mkdir -p "$out"

# The best validation top-1 of a run folder's metrics.jsonl.
best_val() {
  python3 -c 'import json,sys
best = max(json.loads(l)["epoch"]["metrics"]["accuracy"] for l in open(sys.argv[1])
           if "epoch" in json.loads(l))
print(f"{100 * best:.2f}")' "$1/metrics.jsonl"
}

# A config without its test_data_loader, with `sed` expressions applied.
variant() {
  local from=$1; shift
  grep -v '^test_data_loader' "$from" | sed "$@"
}

if [[ -z "$teacher" ]]; then
  variant "$configs/fashion_mnist_teacher.pbtxt" -e "s|^run {|run { run_dir: \"$out/teacher\"|" \
    >"$out/teacher.pbtxt"
  sed -i "s|^  native {|  dst_ckpt: \"$out/teacher/model.pt\"\n  native {|" "$out/teacher.pbtxt"
  echo "kd_sweep: training the teacher (seed $seed)"
  "$distill" --config="$out/teacher.pbtxt" --seed="$seed" --threads=1 --overwrite >/dev/null \
    2>"$out/teacher.log"
  teacher="$out/teacher/model.pt"
  echo "teacher: best validation top-1 $(best_val "$out/teacher")%"
fi

echo "temperature alpha best-validation-top-1"
best="" best_acc=0
for t in $temperatures; do
  for a in $alphas; do
    dir="$out/kd_T${t}_a${a}"
    variant "$configs/fashion_mnist_student_kd.pbtxt" \
      -e "s|name: \"temperature\" number: [0-9.]*|name: \"temperature\" number: $t|" \
      -e "s|name: \"alpha\" number: [0-9.]*|name: \"alpha\" number: $a|" \
      -e "s|^teacher {|teacher {\n  src_ckpt: \"$teacher\"|" >"$out/kd_T${t}_a${a}.pbtxt"
    "$distill" --config="$out/kd_T${t}_a${a}.pbtxt" --run_dir="$dir" --seed="$seed" --threads=1 --overwrite \
      >/dev/null \
      2>"$dir.log"
    acc=$(best_val "$dir")
    echo "$t $a $acc%"
    if python3 -c "import sys; sys.exit(not $acc > $best_acc)"; then best="T $t, alpha $a"; best_acc=$acc; fi
  done
done
echo "chosen on validation: $best ($best_acc%)"
