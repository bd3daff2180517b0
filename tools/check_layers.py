#!/usr/bin/env python3
"""The layers of the tree: which top-level package may include which (PACKAGES, as
docs/layout.md draws them), and the order of distill/'s sub-packages (distill/BUILD.bazel), each
of which may include only those before it. Prints every include that points up or sideways
against them, as file:line, and exits 1 on any (issue 51: the importer once lived inside
config/ and included boxes, losses and models).

  python3 tools/check_layers.py      # from the repository root (.ci/run does)
"""
import re
import subprocess
import sys

# Each top-level package and the packages it may include besides itself. testing/ (test support)
# may be included from any package's tests and test fixtures.
PACKAGES = {
    "base": set(),
    "hooks": {"base"},
    "memdiag": {"base"},
    "profiler": {"base"},
    "tensorboard": {"base"},
    "capture": {"base", "hooks", "memdiag"},
    "distill": {"base", "hooks", "capture", "memdiag", "profiler"},
    "tools": {"base", "hooks", "capture", "memdiag", "profiler", "tensorboard", "distill"},
    "examples": {"base", "hooks", "capture", "memdiag", "profiler", "tensorboard", "distill"},
    "fuzz": {"base", "hooks", "capture", "memdiag", "profiler", "tensorboard", "distill",
             "tools"},
    "testing": {"base", "hooks"},
    "tests": {"base", "hooks", "capture", "memdiag", "profiler", "tensorboard", "distill",
              "tools"},
}
DISTILL = ["config", "models", "data", "losses", "procs", "boxes", "torchdistill"]
INCLUDE = re.compile(r'#include "([a-z_]+)/(?:([a-z_]+)/)?')


def main():
    rank = {name: i for i, name in enumerate(DISTILL)}
    files = subprocess.check_output(["git", "ls-files", "*.cc", "*.h"], text=True).split()
    problems, checked = [], 0
    for path in files:
        parts = path.split("/")
        top = parts[0]
        if len(parts) < 2 or top == "third_party":
            continue
        if top not in PACKAGES:
            problems.append(f"{path}: {top}/ is in no layer: add it to PACKAGES in "
                            "tools/check_layers.py and to docs/layout.md")
            continue
        own = parts[1] if top == "distill" and len(parts) > 2 else None
        if own is not None and own not in rank:
            problems.append(f"{path}: distill/{own}/ is in no layer: add it to DISTILL in "
                            "tools/check_layers.py and to distill/BUILD.bazel's list")
            continue
        checked += 1
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m or m.group(1) not in PACKAGES or m.group(1) in (top, "testing"):
                    if m and top == "distill" and m.group(1) == "distill":
                        sub = m.group(2)
                        if own and sub in rank and rank[sub] > rank[own]:
                            problems.append(
                                f"{path}:{n}: distill/{own}/ includes distill/{sub}/, which "
                                f"comes after it ({' < '.join(DISTILL)})")
                    continue
                if m.group(1) not in PACKAGES[top]:
                    problems.append(f"{path}:{n}: {top}/ includes {m.group(1)}/, which it may "
                                    f"not (it may include: "
                                    f"{', '.join(sorted(PACKAGES[top])) or 'nothing'})")
    for p in problems:
        print(p)
    print(f"layers: {checked} files checked, {len(problems)} includes against the layers")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
