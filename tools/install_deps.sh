#!/bin/bash
# Installs the Debian 12 packages libkd's build, tests and main job need. Idempotent: installs
# only what is missing and runs `apt-get update` only then. Needs root (or sudo).
#
#   tools/install_deps.sh            # install what is missing
#   tools/install_deps.sh --check    # exit 1 listing what is missing, install nothing
set -euo pipefail

PACKAGES=(
  # Build: Bazel 4.2.3 and the offline repositories libkd_deps.bzl points at.
  bazel-bootstrap bazel-platforms bazel-rules-java g++
  # Libraries (see third_party/system_build_files.bzl).
  libtorch-dev libabsl-dev libprotobuf-dev protobuf-compiler libgtest-dev libgmock-dev
  libbenchmark-dev libgloo-dev
  # The main job's data set: Fashion-MNIST under /usr/share/datasets/fashion-mnist.
  dataset-fashion-mnist
  # Python torch 1.13.1: tests/testdata/make_fixtures.py (fixtures, benchmark models).
  python3-torch python3-torchvision
)

die() { echo "install_deps: $*" >&2; exit 1; }

command -v dpkg-query >/dev/null 2>&1 || die "dpkg-query not found: this installer is for Debian 12"

missing=()
for p in "${PACKAGES[@]}"; do
  if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all ${#PACKAGES[@]} packages are installed"
  exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
  echo "install_deps: missing: ${missing[*]}"
  exit 1
fi

command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install these by hand: ${missing[*]}"
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 || die "not root and no sudo: run as root to install ${missing[*]}"
  sudo=(sudo)
fi

echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q >/dev/null || die "apt-get update failed (no network to Debian's mirror?)"
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" \
  || die "apt-get install failed for: ${missing[*]}"
echo "install_deps: done"
