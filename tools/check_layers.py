#!/usr/bin/env python3
"""The order of distill/'s sub-packages (distill/BUILD.bazel): each may include only those before
it. Prints every include that points up, as file:line, and exits 1 on any (issue 51: the
importer once lived inside config/ and included boxes, losses and models).

  python3 tools/check_layers.py      # from the repository root (.ci/run does)
"""
import re
import subprocess
import sys

ORDER = ["config", "models", "data", "losses", "procs", "boxes", "torchdistill"]
INCLUDE = re.compile(r'#include "distill/([a-z_]+)/')


def main():
    rank = {name: i for i, name in enumerate(ORDER)}
    files = subprocess.check_output(["git", "ls-files", "distill"], text=True).split()
    problems, checked = [], 0
    for path in files:
        parts = path.split("/")
        if len(parts) < 3 or not path.endswith((".cc", ".h")):
            continue
        own = parts[1]
        if own not in rank:
            problems.append(f"{path}: distill/{own}/ is in no layer: add it to ORDER in "
                            "tools/check_layers.py and to distill/BUILD.bazel's list")
            continue
        checked += 1
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if m and m.group(1) in rank and rank[m.group(1)] > rank[own]:
                    problems.append(f"{path}:{n}: distill/{own}/ includes distill/{m.group(1)}/, "
                                    f"which comes after it ({' < '.join(ORDER)})")
    for p in problems:
        print(p)
    print(f"layers: {checked} files of distill/ checked, {len(problems)} includes pointing up")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
