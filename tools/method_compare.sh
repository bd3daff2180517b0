#!/bin/bash
# Compares a distillation method with the student alone on the main job's Fashion-MNIST task,
# seed by seed: for each seed, trains the teacher (tools/configs/fashion_mnist_teacher.pbtxt),
# the student alone (fashion_mnist_student.pbtxt) and the student with the method's config
# (reading that seed's teacher), each with one intra-op thread, the checkpoint chosen on the
# validation split (training images 55000-59999) and evaluated once on the test split. Prints,
# per seed and as mean and sample standard deviation, test top-1 and the best validation top-1.
# Run from the repository root:
#
#   bazel build -c opt //tools:distill
#   tools/method_compare.sh --method=tools/configs/fashion_mnist_student_kr.pbtxt --seeds="1 2 3"
#
# Flags: --method=CONFIG (required), --seeds="..." (1 2 3), --out=FOLDER (runs/compare),
# --distill=BINARY (bazel-bin/tools/distill), --report (print the table of runs made before
# into --out, training nothing).
set -euo pipefail

method="" seeds="1 2 3" out=runs/compare distill=bazel-bin/tools/distill report=false
for arg in "$@"; do
  case "$arg" in
    --method=*) method=${arg#*=} ;;
    --seeds=*) seeds=${arg#*=} ;;
    --out=*) out=${arg#*=} ;;
    --distill=*) distill=${arg#*=} ;;
    --report) report=true ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "method_compare: unknown flag $arg (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$method" ]] || { echo "method_compare: --method=CONFIG is required" >&2; exit 2; }
[[ -f "$method" ]] || { echo "method_compare: no config $method" >&2; exit 2; }
$report || [[ -x "$distill" ]] || { echo "method_compare: build it first: bazel build -c opt //tools:distill" >&2; exit 2; }
configs=tools/configs
name=$(basename "$method" .pbtxt)
mkdir -p "$out"

# Runs `config` (the teacher's checkpoint of this seed added where the config has a teacher to
# read) into $out/seed$seed/$run, its log beside it.
train() {
  local seed=$1 run=$2 config=$3 dir="$out/seed$1"
  mkdir -p "$dir"
  sed -e "s|^teacher {|teacher {\n  src_ckpt: \"$dir/teacher/model.pt\"|" "$config" >"$dir/$run.pbtxt"
  if [[ $run == teacher ]]; then
    sed -e "s|^  native {|  dst_ckpt: \"$dir/teacher/model.pt\"\n  native {|" "$config" >"$dir/$run.pbtxt"
  fi
  "$distill" --config="$dir/$run.pbtxt" --run_dir="$dir/$run" --seed="$seed" --threads=1 \
    --overwrite >/dev/null 2>"$dir/$run.log" || { echo "method_compare: $run failed, see $dir/$run.log" >&2; exit 1; }
}

for seed in $seeds; do
  $report && break
  echo "seed $seed: teacher" >&2
  train "$seed" teacher "$configs/fashion_mnist_teacher.pbtxt"
  echo "seed $seed: student alone" >&2
  train "$seed" student "$configs/fashion_mnist_student.pbtxt"
  echo "seed $seed: $name" >&2
  train "$seed" "$name" "$method"
done

python3 - "$out" "$name" $seeds <<'EOF'
import json, statistics, sys
out, name, seeds = sys.argv[1], sys.argv[2], sys.argv[3:]
runs = ["teacher", "student", name]

def test(seed, run):
    summary = json.load(open(f"{out}/seed{seed}/{run}/summary.json"))
    return 100 * summary["test_metrics"]["accuracy"]

def val(seed, run):
    return 100 * max(json.loads(l)["epoch"]["metrics"]["accuracy"]
                     for l in open(f"{out}/seed{seed}/{run}/metrics.jsonl") if "epoch" in json.loads(l))

print("| seed | teacher | student alone | student, %s | difference |" % name)
print("|---|---|---|---|---|")
rows = {"test": [], "val": []}
for seed in seeds:
    t = [test(seed, r) for r in runs]
    rows["test"].append(t + [t[2] - t[1]])
    v = [val(seed, r) for r in runs]
    rows["val"].append(v + [v[2] - v[1]])
    print("| %s | %.2f%% | %.2f%% | %.2f%% | %+.2f |" % (seed, *t, t[2] - t[1]))
for what, label in (("test", "mean ± sd (test)"), ("val", "validation, best epoch")):
    cols = list(zip(*rows[what]))
    cells = ["%.2f ± %.2f" % (statistics.mean(c), statistics.stdev(c) if len(c) > 1 else 0)
             for c in cols]
    print("| %s | %s |" % (label, " | ".join(cells)))
EOF
