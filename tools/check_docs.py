#!/usr/bin/env python3
"""The house rules for libkd's Markdown (issue 51): README.md a front door of at most 160 lines
and 12 KB, and no table cell over 400 characters in any tracked Markdown file (a long account
goes under its table as a note). Prints each violation as file:line and exits 1 on any.

  python3 tools/check_docs.py        # from the repository root (.ci/run does)
"""
import subprocess
import sys

MAX_README_LINES, MAX_README_BYTES, MAX_CELL = 160, 12 * 1024, 400


def cells(line):
    """The cells of a Markdown table row, split on | outside backticks."""
    out, cur, tick = [], "", False
    for ch in line.strip()[1:-1]:
        if ch == "`":
            tick = not tick
        if ch == "|" and not tick:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [c.strip() for c in out]


def main():
    problems = []
    with open("README.md", "rb") as f:
        readme = f.read()
    lines = readme.count(b"\n")
    if lines > MAX_README_LINES or len(readme) > MAX_README_BYTES:
        problems.append(f"README.md: {lines} lines, {len(readme)} bytes (at most "
                        f"{MAX_README_LINES} lines and {MAX_README_BYTES} bytes: move detail "
                        "to docs/)")
    files = subprocess.check_output(["git", "ls-files", "*.md"], text=True).split()
    for path in files:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.startswith("|"):
                    longest = max(len(c) for c in cells(line))
                    if longest > MAX_CELL:
                        problems.append(f"{path}:{n}: a table cell of {longest} characters "
                                        f"(at most {MAX_CELL}: give the rest as a note under "
                                        "the table)")
    for p in problems:
        print(p)
    print(f"docs: {len(files)} Markdown files checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
