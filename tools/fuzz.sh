#!/bin/bash
# Builds libkd's fuzz targets with clang, libFuzzer and ASan (bazel --config=fuzz, in an output
# base of its own) and runs each for SECONDS (default 300), then merges what grew the coverage
# into fuzz/corpus/<target>/ (minimized: -merge=1). A crash is written to fuzz/corpus/<target>/
# too, as crash-<sha1>, so that //fuzz:<target>_fuzzer_test replays it from then on.
#
#   bash tools/fuzz.sh [SECONDS] [TARGET ...]     # targets: config torch_archive checkpoint idx flag_file torchdistill_yaml image
#
# Prints, per target, the executions libFuzzer ran and whether it stayed clean.
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-300}
shift || true
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(config torch_archive checkpoint idx flag_file torchdistill_yaml image)
command -v clang >/dev/null || { echo "fuzz.sh: clang is needed: bash tools/install_deps.sh --fuzz" >&2; exit 2; }

base="${XDG_CACHE_HOME:-$HOME/.cache}/libkd-fuzz-output"
labels=()
for t in "${targets[@]}"; do labels+=("//fuzz:${t}_fuzzer"); done
bazel --output_base="$base" build --config=fuzz "${labels[@]}" || exit 1
bin=$(bazel --output_base="$base" info --config=fuzz bazel-bin 2>/dev/null)
torch_lib=$(dirname "$(readlink -f "$(bazel --output_base="$base" info output_base)/external/libtorch/lib/libc10.so")")

status=0
for t in "${targets[@]}"; do
  corpus="fuzz/corpus/$t"
  work=$(mktemp -d)
  log="$work/log"
  # libtorch is not instrumented: its allocations are not leaks of ours, and odr/alloc
  # mismatches between its copies of libstdc++ symbols are not findings.
  ASAN_OPTIONS=detect_leaks=0:alloc_dealloc_mismatch=0:detect_odr_violation=0 \
  LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$bin/fuzz/${t}_fuzzer" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=20 \
      -artifact_prefix="$corpus/" -print_final_stats=1 "$work" "$corpus" >"$log" 2>&1
  rc=$?
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
  ASAN_OPTIONS=detect_leaks=0:alloc_dealloc_mismatch=0:detect_odr_violation=0 \
  LD_LIBRARY_PATH="$torch_lib" "$bin/fuzz/${t}_fuzzer" -merge=1 "$corpus" "$work" \
    >>"$log" 2>&1
  if [[ $rc -eq 0 ]]; then
    echo "fuzz $t: clean, ${runs:-?} executions in ${seconds}s, corpus $(ls "$corpus" | wc -l) files"
  else
    echo "fuzz $t: FAILED (exit $rc) after ${runs:-?} executions; see $log and $corpus/crash-*"
    grep -m 5 -E 'ERROR|SUMMARY|==[0-9]+==' "$log"
    status=1
  fi
done
exit $status
