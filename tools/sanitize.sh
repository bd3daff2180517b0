#!/bin/bash
# libkd's tests under AddressSanitizer (with LeakSanitizer) and UndefinedBehaviorSanitizer, each
# in a Bazel output base of its own (switching --config in one output base would throw the
# regular build away; the disk cache of .bazelrc is shared). LeakSanitizer suppresses only the
# libtorch-internal leaks named in base/lsan_suppressions.cc, so a tensor or module libkd leaks
# fails the run; under a sanitizer the tools link its allocator, not tcmalloc.
#
#   tools/sanitize.sh                  # ASan and UBSan, every test
#   tools/sanitize.sh asan [TARGET...] # one sanitizer; targets default to every package's
#   tools/sanitize.sh --ci             # what .ci/run runs: the fuzz replays (every corpus
#                                      # file, crashes found earlier included) under ASan
#
# Prints "<sanitizer>: N passed, N failed" per run; exits 1 if any failed. Cold, on this
# project's 2-core machine, an ASan run of //... takes about half an hour; --ci about N min.
set -uo pipefail
cd "$(dirname "$0")/.."

# Every package's targets, as //... means them. Not //... itself: a Bazel server of another
# output base would walk into the workspace's bazel-* links, which point into the regular one.
every_package() {
  git ls-files 'BUILD.bazel' '*/BUILD.bazel' | grep -v '^tests/consumer/' | xargs -n1 dirname |
    sort -u |
    sed 's|^\.$||; s|^|//|; s|$|:all|'
}

run() {  # run SANITIZER TARGET...
  local sanitizer=$1; shift
  local base="${XDG_CACHE_HOME:-$HOME/.cache}/libkd-$sanitizer-output"
  local log
  log=$(mktemp)
  # --symlink_prefix=/: the workspace's bazel-* links keep pointing at the regular build.
  bazel --output_base="$base" test --config="$sanitizer" --keep_going --symlink_prefix=/ \
    -- "$@" 2>&1 | tee "$log"
  local passed failed
  passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
  failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY|INCOMPLETE|FAILED TO BUILD)' "$log")
  echo "$sanitizer: ${passed} passed, ${failed} failed"
  rm -f "$log"
  [[ $failed -eq 0 && $passed -gt 0 ]]
}

case "${1:-}" in
  --ci) run asan //fuzz:all ;;
  asan|ubsan)
    sanitizer=$1; shift
    [[ $# -gt 0 ]] || set -- $(every_package)
    run "$sanitizer" "$@"
    ;;
  "") status=0; run asan $(every_package) || status=1; run ubsan $(every_package) || status=1
      exit $status ;;
  -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) echo "sanitize: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac
