#!/bin/bash
# The checks that need a GPU, as one script for a machine that has one and only the torch
# wheel (the device tool's: no Bazel, no registry). Build here, carry the pack, run there.
#
#   tools/gpu_checks.sh --pack [--torch_dir=DIR]  # here: builds the binaries into gpu_pack/
#                                                 # against DIR's libtorch (the GPU machine's
#                                                 # torch version, installed here --no-deps)
#   tools/gpu_checks.sh --run [--out=DIR]         # there: runs the checks (under 10 minutes)
#
# One line a check, "<check>: PASSED|FAILED|SKIPPED (<what was seen>)", then "N passed, N
# failed"; the evidence (each run's folder and log, the trace, the package, the snapshot) goes
# to --out (default gpu_evidence/, or $OUT/gpu_evidence when $OUT is set, as the device tool
# sets it). The checks:
#   box_fp32 / box_bf16 / box_fp16   a KD box on cuda:0 (synthetic data, native MLPs), each
#                                    precision; its final validation figures beside the same
#                                    run's on the CPU (fp16 with the GradScaler)
#   teacher_cache_cuda               teacher_cache and overlap_teacher in AUTO on cuda:0: the
#                                    epoch line says what each did (the cache is CPU-only by
#                                    design: on CUDA it must say why it is off, not fail)
#   profiler_cuda                    a profiler trace of the box with CUDA kernels in it
#   memory_history                   //memdiag:cuda_memory_test (CUDA memory history, snapshot,
#                                    storage inventory on cuda)
#   nccl_one_rank                    //distill/boxes/distributed:nccl_test (a one-rank NCCL group)
#   ddp_two_ranks                    //distill/boxes:box_ddp_test (2 ranks: skips on one GPU)
#   aoti_cuda                        tools/export_teacher.py --device=cuda with the machine's
#                                    torch, then inspect --model=<package> --device=cuda:0
# Status: written for issue 49; no CUDA path of libkd has run on a GPU yet (no GPU was lent to
# the sessions since): the first run there is this script's test.
set -uo pipefail
cd "$(dirname "$0")/.."
pack=gpu_pack
tests=(//distill/boxes:box_ddp_test //distill/boxes/distributed:nccl_test //memdiag:cuda_memory_test)
tools=(//tools:distill //tools:inspect)

config() {  # config DEVICE PRECISION PROFILE: a small KD run on synthetic data
  cat <<EOF
run { name: "gpu_check" seed: 1 device: "$1" precision: $2 log_every_n_steps: 8 }
datasets { id: "train" key: "synthetic" kwargs { name: "num_samples" integer: 512 }
           kwargs { name: "num_classes" integer: 10 } kwargs { name: "height" integer: 8 }
           kwargs { name: "width" integer: 8 } }
datasets { id: "val" key: "synthetic" kwargs { name: "num_samples" integer: 256 }
           kwargs { name: "num_classes" integer: 10 } kwargs { name: "height" integer: 8 }
           kwargs { name: "width" integer: 8 } kwargs { name: "seed" integer: 2 } }
teacher { native { key: "mlp" kwargs { name: "in_features" integer: 64 }
                   kwargs { name: "num_classes" integer: 10 } } }
student { native { key: "mlp" kwargs { name: "in_features" integer: 64 }
                   kwargs { name: "num_classes" integer: 10 } } }
train {
  num_epochs: 3
  train_data_loader { dataset_id: "train" batch_size: 32 shuffle: true }
  val_data_loader { dataset_id: "val" batch_size: 256 }
  optimizer { key: "SGD" kwargs { name: "lr" number: 0.1 } }
  criterion {
    terms { key: "KDLoss" inputs { arg: "student" source: STUDENT }
            inputs { arg: "teacher" source: TEACHER } inputs { arg: "targets" source: TARGETS }
            kwargs { name: "temperature" number: 4.0 } kwargs { name: "alpha" number: 0.5 } }
  }
  $3
}
evaluation { metrics { key: "accuracy" } }
EOF
}

case "${1:-}" in
  --pack)
    torch_dir=""
    for arg in "${@:2}"; do
      case "$arg" in
        --torch_dir=*) torch_dir=${arg#*=} ;;
        *) echo "gpu_checks: unknown flag $arg" >&2; exit 2 ;;
      esac
    done
    repo_env=()
    [[ -n "$torch_dir" ]] && repo_env=(--repo_env=LIBKD_TORCH_DIR="$torch_dir")
    # --dynamic_mode=off: the project's own code inside each binary, no _solib to carry.
    bazel build -c opt --dynamic_mode=off "${repo_env[@]}" "${tests[@]}" "${tools[@]}" || exit 1
    rm -rf "$pack" && mkdir -p "$pack"
    for t in "${tests[@]}" "${tools[@]}"; do
      path=${t#//}; path=${path/://}
      cp -L "bazel-bin/$path" "$pack/"
    done
    cp tools/export_teacher.py "$pack/"
    # The Debian libraries the binaries need beside libtorch (absl, protobuf, gtest, gloo).
    ldd "$pack"/* 2>/dev/null | awk '/=> \/(usr\/)?lib/ {print $3}' | sort -u |
      grep -E 'absl|protobuf|gtest|gmock|gloo|tcmalloc|unwind|yaml' | xargs -r cp -L -t "$pack/"
    du -sh "$pack"
    ;;
  --run)
    out="${OUT:+$OUT/}gpu_evidence"
    for arg in "${@:2}"; do
      case "$arg" in
        --out=*) out=${arg#*=} ;;
        *) echo "gpu_checks: unknown flag $arg" >&2; exit 2 ;;
      esac
    done
    mkdir -p "$out"
    torch_lib=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
    export LD_LIBRARY_PATH="$PWD/$pack:$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    nvidia-smi -L >"$out/nvidia-smi.txt" 2>&1
    passed=0 failed=0
    say() {  # say CHECK OK DETAIL
      if [[ "$2" == 0 ]]; then passed=$((passed + 1)); echo "$1: PASSED ($3)"
      else failed=$((failed + 1)); echo "$1: FAILED ($3)"; fi
    }
    last_epoch() { grep -h '"epoch"' "$1/metrics.jsonl" 2>/dev/null | tail -1; }
    distill() {  # distill NAME DEVICE PRECISION [EXTRA] -> exit code; run folder $out/NAME
      config "$2" "$3" "${4:-}" >"$out/$1.pbtxt"
      timeout 120 "$pack/distill" --config="$out/$1.pbtxt" --run_dir="$out/$1" --overwrite \
        --tensorboard=false ${5:-} >"$out/$1.log" 2>&1
    }
    for p in FP32 BF16 FP16; do
      name=box_$(tr 'A-Z' 'a-z' <<<"$p")
      distill "${name}_cpu" cpu "$p"; cpu_rc=$?
      distill "$name" cuda:0 "$p"; rc=$?
      say "$name" "$rc" "cuda: $(last_epoch "$out/$name" | grep -o '"metrics":{[^}]*}') cpu (rc $cpu_rc): $(last_epoch "$out/${name}_cpu" | grep -o '"metrics":{[^}]*}')"
    done
    distill teacher_cache_cuda cuda:0 FP32 'teacher_cache { mode: AUTO } overlap_teacher: AUTO'; rc=$?
    say teacher_cache_cuda "$rc" "$(grep -o 'teacher cache[^;]*\|teacher overlapped\|look-ahead off[^;]*' "$out/teacher_cache_cuda.log" | sort -u | tr '\n' ' ')"
    distill profiler_cuda cuda:0 FP32 "" "--profile_dir=$out/profiler_cuda_traces"; rc=$?
    trace=$(ls "$out"/profiler_cuda_traces/*.json 2>/dev/null | head -1)
    kernels=$( [[ -n "$trace" ]] && grep -c '"cat": *"kernel"' "$trace" || echo 0)
    [[ $rc -eq 0 && $kernels -gt 0 ]]; say profiler_cuda $? "${kernels} CUDA kernel events in ${trace:-no trace}"
    (cd "$pack" && timeout 120 ./cuda_memory_test) >"$out/memory_history.log" 2>&1
    say memory_history $? "$(tail -1 "$out/memory_history.log")"
    (cd "$pack" && timeout 120 ./nccl_test) >"$out/nccl.log" 2>&1
    say nccl_one_rank $? "$(grep -c '^\[       OK' "$out/nccl.log") tests OK"
    (cd "$pack" && timeout 300 ./box_ddp_test) >"$out/ddp.log" 2>&1
    say ddp_two_ranks $? "$(grep -c 'SKIPPED' "$out/ddp.log") skipped (one GPU), $(grep -c '^\[       OK' "$out/ddp.log") OK"
    (cd "$pack" && timeout 240 python3 export_teacher.py --model=torchvision:resnet18 \
      --input_shape=2,3,32,32 --hooks=layer1:output --device=cuda --out="$out/resnet18_cuda.pt2") \
      >"$out/aoti.log" 2>&1 &&
      timeout 60 "$pack/inspect" --model="$out/resnet18_cuda.pt2" --device=cuda:0 \
        --input_shape=2,3,32,32 >>"$out/aoti.log" 2>&1
    say aoti_cuda $? "$(tail -1 "$out/aoti.log")"
    echo "${passed} passed, ${failed} failed"
    [[ $failed -eq 0 ]]
    ;;
  *) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; [[ "${1:-}" == -h || "${1:-}" == --help ]] ;;
esac
