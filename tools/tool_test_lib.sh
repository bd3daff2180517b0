# Shared by the tools' end-to-end sh_tests; source it, set `tool` to the binary under test.
#
#   source "$TEST_SRCDIR/$TEST_WORKSPACE/tools/tool_test_lib.sh"
#   tool="$TEST_SRCDIR/$TEST_WORKSPACE/tools/inspect"
#   check "prints the root" grep -q '^(root)' <<<"$("$tool" --model=m.pt)"
#   expect_error "missing file" "inspect: /x.pt: cannot open" --model=/x.pt
#   finish inspect_test

failures=0

# check NAME COMMAND...: PASS if COMMAND succeeds, else FAIL (counted).
check() {
  local name=$1; shift
  if "$@"; then echo "PASS $name"; else echo "FAIL $name"; failures=$((failures + 1)); fi
}

# expect_error NAME TEXT ARGS...: `$tool ARGS` exits 2 with one line on stderr containing TEXT.
expect_error() {
  local name=$1 text=$2; shift 2
  local err rc
  err=$("$tool" "$@" 2>&1 >/dev/null); rc=$?
  check "$name: exit 2" test "$rc" -eq 2
  check "$name: one line" test "$(wc -l <<<"$err")" -eq 1
  check "$name: message" grep -qF -- "$text" <<<"$err"
}

# expect_exact_error NAME LINE ARGS...: `$tool ARGS` exits 2 and stderr is exactly LINE.
expect_exact_error() {
  local name=$1 line=$2; shift 2
  local err rc
  err=$("$tool" "$@" 2>&1 >/dev/null); rc=$?
  check "$name: exit 2" test "$rc" -eq 2
  check "$name: one line" test "$err" = "$line"
}

# python_tool SCRIPT: prints the path of a wrapper (written under $TEST_TMPDIR) that runs
# tools/SCRIPT with libkd's venv Python from the workspace root: tool=$(python_tool x.py).
python_tool() {
  local root="$TEST_SRCDIR/$TEST_WORKSPACE" wrapper="$TEST_TMPDIR/${1%.py}"
  printf '#!/bin/sh\ncd "%s" && exec "%s" tools/%s "$@"\n' "$root" \
    "$root/external/libtorch/python.sh" "$1" >"$wrapper"
  chmod +x "$wrapper"
  echo "$wrapper"
}

# finish TEST_NAME: prints the failure count and exits non-zero if any check failed.
finish() {
  echo "$1: $failures failure(s)"
  exit $((failures > 0))
}
