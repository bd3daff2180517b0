#!/usr/bin/env python3
"""Regenerates torch.lock and peers.lock (pinned, with sha256 hashes) from torch.in / peers.in,
or, with --tools, tools.lock alone from tools.in.

    python3.11 tools/requirements/make_locks.py [--tools]

pip resolves each .in file (`pip install --dry-run --report`) and the report gives every
distribution's version and the hash PyPI serves for it, for this platform and Python (Linux
x86_64, CPython 3.11). peers.lock is resolved in a scratch virtual environment that already
holds torch.lock, so it lists only what the peers add and never moves the torch pin. tools.lock is
resolved with torch.lock's versions as constraints (no torch download) and lists only what
torch.lock lacks.
"""
import json
import os
import subprocess
import sys
import tempfile
import venv

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = """# {what}
# Made by tools/requirements/make_locks.py from tools/requirements/{src}; installed by
# tools/install_deps.sh with --require-hashes --no-deps. Do not edit by hand.
"""


def resolve(python, requirements, report, ignore_installed):
    cmd = [python, "-m", "pip", "install", "--dry-run", "--quiet", "--report", report,
           "-r", requirements]
    if ignore_installed:
        cmd.append("--ignore-installed")
    subprocess.run(cmd, check=True)
    with open(report) as f:
        items = json.load(f)["install"]
    return sorted((i["metadata"]["name"].lower(), i["metadata"]["version"],
                   i["download_info"]["archive_info"]["hashes"]["sha256"]) for i in items)


def write(path, what, src, pins):
    with open(path, "w") as f:
        f.write(HEADER.format(what=what, src=src))
        for name, version, sha in pins:
            f.write(f"{name}=={version} \\\n    --hash=sha256:{sha}\n")


def pinned(lock):
    """name -> version of a lock file."""
    pins = {}
    with open(lock) as f:
        for line in f:
            if "==" in line and not line.startswith("#"):
                name, version = line.split("==")
                pins[name.strip().lower()] = version.split()[0]
    return pins


def make_tools_lock(tmp):
    venv.create(os.path.join(tmp, "venv"), with_pip=True)
    python = os.path.join(tmp, "venv", "bin", "python")
    torch_pins = pinned(os.path.join(HERE, "torch.lock"))
    constraints = os.path.join(tmp, "torch_constraints.txt")
    with open(constraints, "w") as f:
        f.writelines(f"{name}=={version}\n" for name, version in torch_pins.items())
    report = os.path.join(tmp, "tools.json")
    subprocess.run([python, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
                    "--report", report, "-r", os.path.join(HERE, "tools.in"), "-c", constraints],
                   check=True)
    with open(report) as f:
        items = json.load(f)["install"]
    pins = sorted((i["metadata"]["name"].lower(), i["metadata"]["version"],
                   i["download_info"]["archive_info"]["hashes"]["sha256"]) for i in items
                  if i["metadata"]["name"].lower() not in torch_pins)
    write(os.path.join(HERE, "tools.lock"), "tensorboard and matplotlib with what they add to "
          "torch.lock (Linux x86_64, CPython 3.11).", "tools.in", pins)


def main():
    if sys.version_info[:2] != (3, 11):
        sys.exit("make_locks.py: run with CPython 3.11 (the locks are for cp311 wheels)")
    if sys.argv[1:] == ["--tools"]:
        with tempfile.TemporaryDirectory() as tmp:
            make_tools_lock(tmp)
        return
    with tempfile.TemporaryDirectory() as tmp:
        venv.create(os.path.join(tmp, "venv"), with_pip=True)
        python = os.path.join(tmp, "venv", "bin", "python")
        torch_lock = os.path.join(HERE, "torch.lock")
        pins = resolve(python, os.path.join(HERE, "torch.in"), os.path.join(tmp, "t.json"), True)
        write(torch_lock, "libkd's pinned libtorch (the torch wheel) and torchvision, with every "
              "dependency (Linux x86_64, CPython 3.11).", "torch.in", pins)
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps",
                        "--require-hashes", "-r", torch_lock], check=True)
        pins = resolve(python, os.path.join(HERE, "peers.in"), os.path.join(tmp, "p.json"), False)
        write(os.path.join(HERE, "peers.lock"), "torchdistill and silverspoon-kd with what they "
              "add to torch.lock (Linux x86_64, CPython 3.11).", "peers.in", pins)


if __name__ == "__main__":
    main()
