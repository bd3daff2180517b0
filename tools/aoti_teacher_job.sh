#!/bin/bash
# The main job with its teacher as an AOTInductor package: trains the job's teacher
# (tools/configs/fashion_mnist_teacher.pbtxt, checkpoint chosen on validation), exports it with
# tools/export_teacher.py through its Python twin (distill/models/fashion_cnn.py,
# the same layers and parameter names), then distils the job's student from the
# package (fashion_mnist_student_kd_aoti.pbtxt) and, for comparison,
# from the native teacher's checkpoint, each tested once on the test split. One intra-op
# thread. Run from the repository root:
#
#   bazel build -c opt //tools:distill && tools/aoti_teacher_job.sh --seed=1
#
# Flags: --seed=N (1), --out=FOLDER (runs/aoti), --distill=BINARY (bazel-bin/tools/distill),
# --python=PYTHON (libkd's virtual environment's).
set -euo pipefail

seed=1 out=runs/aoti distill=bazel-bin/tools/distill
python="${LIBKD_VENV:-$HOME/.cache/libkd/venv}/bin/python"
for arg in "$@"; do
  case "$arg" in
    --seed=*) seed=${arg#*=} ;;
    --out=*) out=${arg#*=} ;;
    --distill=*) distill=${arg#*=} ;;
    --python=*) python=${arg#*=} ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "aoti_teacher_job: unknown flag $arg (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x "$distill" ]] || { echo "aoti_teacher_job: build it first: bazel build -c opt //tools:distill" >&2; exit 2; }
"$python" -c 'import torch' 2>/dev/null || { echo "aoti_teacher_job: $python has no torch (set --python)" >&2; exit 2; }
configs=tools/configs
mkdir -p "$out"

run() {  # run NAME CONFIG: trains CONFIG into $out/NAME, its log beside it
  "$distill" --config="$2" --run_dir="$out/$1" --seed="$seed" --threads=1 --overwrite \
    >/dev/null 2>"$out/$1.log" || { echo "aoti_teacher_job: $1 failed, see $out/$1.log" >&2; exit 1; }
}
test_top1() {
  python3 -c 'import json,sys; print("%.2f" % (100 * json.load(open(sys.argv[1]))["test_metrics"]["accuracy"]))' "$1/summary.json"
}

sed -e "s|^  native {|  dst_ckpt: \"$out/teacher/model.pt\"\n  native {|" \
  "$configs/fashion_mnist_teacher.pbtxt" >"$out/teacher.pbtxt"
echo "aoti_teacher_job: training the teacher (seed $seed)" >&2
run teacher "$out/teacher.pbtxt"

echo "aoti_teacher_job: exporting it as an AOTInductor package" >&2
"$python" tools/export_teacher.py --model=distill.models.fashion_cnn:FashionCnn \
  --kwargs=width=16 --state="$out/teacher/model.pt" --input_shape=2,1,28,28 \
  --out="$out/teacher.pt2" >/dev/null 2>"$out/export.log" ||
  { echo "aoti_teacher_job: export failed, see $out/export.log" >&2; exit 1; }

# The KD config's teacher: the package (fashion_mnist_student_kd_aoti.pbtxt, at this --out), or
# the native model with the trained checkpoint.
sed -e "s|aoti_package: \"runs/aoti/teacher.pt2\"|aoti_package: \"$out/teacher.pt2\"|" \
  "$configs/fashion_mnist_student_kd_aoti.pbtxt" >"$out/student_kd_aoti.pbtxt"
sed -e "s|^teacher {|teacher {\n  src_ckpt: \"$out/teacher/model.pt\"|" \
  "$configs/fashion_mnist_student_kd.pbtxt" >"$out/student_kd_native.pbtxt"
echo "aoti_teacher_job: distilling the student from the package, then from the native teacher" >&2
start=$(date +%s); run student_kd_aoti "$out/student_kd_aoti.pbtxt"; aoti_s=$(($(date +%s) - start))
start=$(date +%s); run student_kd_native "$out/student_kd_native.pbtxt"; native_s=$(($(date +%s) - start))

echo "teacher (native): test top-1 $(test_top1 "$out/teacher")%"
echo "student distilled from the package: test top-1 $(test_top1 "$out/student_kd_aoti")% (${aoti_s} s)"
echo "student distilled from the native teacher: test top-1 $(test_top1 "$out/student_kd_native")% (${native_s} s)"
