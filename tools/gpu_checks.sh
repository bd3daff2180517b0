#!/bin/bash
# The checks that need a GPU, for a machine that has one (the device tool's, which has no Bazel
# and no registry): build the test binaries here, carry them there, run them there.
#
#   tools/gpu_checks.sh --pack [--torch_dir=DIR]   # here: builds the CUDA tests into gpu_pack/
#                                                  # against DIR's libtorch (the GPU machine's
#                                                  # torch version, installed here --no-deps)
#   tools/gpu_checks.sh --run                      # there: runs gpu_pack/ against its torch
#
# What runs: the 2-rank DDP box on CUDA through NCCL (needs 2 GPUs: NCCL gives each rank its
# own; it skips on one), a one-rank NCCL group, CUDA memory history, inspect on cuda:0. Each
# prints its gtest lines; the last line is "N passed, N failed". Status: written for the
# multi-process CUDA issue; not yet run on a GPU machine (none was lent to the sessions since).
set -uo pipefail
cd "$(dirname "$0")/.."
pack=gpu_pack
tests=(//distill/boxes:box_ddp_test //distill/boxes:nccl_test //memdiag:cuda_memory_test)

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
    bazel build -c opt --dynamic_mode=off "${repo_env[@]}" "${tests[@]}" || exit 1
    rm -rf "$pack" && mkdir -p "$pack"
    for t in "${tests[@]}"; do
      path=${t#//}; path=${path/://}
      cp -L "bazel-bin/$path" "$pack/"
    done
    # The Debian libraries the binaries need beside libtorch (absl, protobuf, gtest, gloo).
    ldd "$pack"/* | awk '/=> \/(usr\/)?lib/ {print $3}' | sort -u |
      grep -E 'absl|protobuf|gtest|gmock|gloo|tcmalloc|unwind' | xargs -r cp -L -t "$pack/"
    du -sh "$pack"
    ;;
  --run)
    torch_lib=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
    export LD_LIBRARY_PATH="$PWD/$pack:$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    nvidia-smi -L
    passed=0 failed=0
    for bin in "$pack"/*_test; do
      if (cd "$pack" && "./$(basename "$bin")"); then passed=$((passed + 1)); else failed=$((failed + 1)); fi
    done
    echo "${passed} passed, ${failed} failed"
    [[ $failed -eq 0 ]]
    ;;
  *) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; [[ "${1:-}" == -h || "${1:-}" == --help ]] ;;
esac
