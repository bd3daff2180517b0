#!/usr/bin/env python3
"""Every BUILD file's dependency lists (deps) sorted as buildifier sorts them:
local labels (":x") first, then the workspace's ("//x"), then external ones ("@x"), each group
alphabetical. Prints each unsorted list as file:line and exits 1 on any; --fix sorts them in
place (a line's trailing comment moves with it).

  python3 tools/check_build_files.py [--fix]    # from the repository root (.ci/run checks)
"""
import re
import subprocess
import sys

LIST = re.compile(r'^( +)(deps) = \[\n((?:\1    "[^"\n]*",[^\n]*\n)+)\1\]',
                  re.M)
ITEM = re.compile(r'^ *"([^"]*)",')


def key(line):
    label = ITEM.match(line).group(1)
    group = 0 if label.startswith(":") else 2 if label.startswith("@") else 1
    return (group, label.lower().replace(":", "\0"))


def main():
    fix = "--fix" in sys.argv[1:]
    files = subprocess.check_output(
        ["git", "ls-files", "BUILD.bazel", "*/BUILD.bazel", "*/BUILD"], text=True).split()
    problems = 0
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = f.read()

        def sort(m):
            nonlocal problems
            lines = m.group(3).splitlines(keepends=True)
            ordered = sorted(lines, key=key)
            if ordered != lines:
                problems += 1
                line = text.count("\n", 0, m.start()) + 1
                print(f"{path}:{line}: {m.group(2)} not sorted (python3 tools/check_build_files.py "
                      "--fix)")
            return f"{m.group(1)}{m.group(2)} = [\n{''.join(ordered)}{m.group(1)}]"

        fixed = LIST.sub(sort, text)
        if fix and fixed != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(fixed)
    print(f"build files: {len(files)} read, {problems} unsorted lists" +
          (" (sorted)" if fix and problems else ""))
    return 1 if problems and not fix else 0


if __name__ == "__main__":
    sys.exit(main())
