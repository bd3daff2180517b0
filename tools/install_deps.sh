#!/bin/bash
# Installs what libkd's build, tests and main job need, on Debian 12. Idempotent: installs only
# what is missing, runs `apt-get update` only then, and reinstalls the Python environment only
# when it is missing or the pinned lock changed. Needs root (or sudo) for the Debian packages.
#
#   tools/install_deps.sh            # Debian packages + the virtual environment with libtorch
#                                    # (and tensorboard + matplotlib, which tests read with)
#   tools/install_deps.sh --peers    # also torchdistill and silverspoon-kd (reference values,
#                                    # side-by-side benchmarks; tests and CI never need them)
#   tools/install_deps.sh --fuzz     # also clang (its libFuzzer), for tools/fuzz.sh
#   tools/install_deps.sh --check    # exit 1 listing what is missing, install nothing
#
# libtorch is the PyPI torch wheel (its site-packages/torch holds include/ and lib/), pinned
# with hashes in tools/requirements/torch.lock and installed into a virtual environment outside
# the work tree: $LIBKD_VENV, else ${XDG_CACHE_HOME:-~/.cache}/libkd/venv, which is where the
# @libtorch repository (third_party/repositories.bzl) looks for it.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
LOCK="$here/requirements/torch.lock"
PEERS_LOCK="$here/requirements/peers.lock"
TOOLS_LOCK="$here/requirements/tools.lock"
VENV="${LIBKD_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/libkd/venv}"

PACKAGES=(
  # Build: Bazel 4.2.3 and the offline repositories libkd_deps.bzl points at.
  bazel-bootstrap bazel-platforms bazel-rules-java g++
  # Libraries (see third_party/system_build_files.bzl); libtorch comes from the wheel.
  libabsl-dev libprotobuf-dev protobuf-compiler libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev
  # Image files (ImageFolder datasets): JPEG and PNG codecs.
  libjpeg62-turbo-dev libpng-dev
  # Gloo's headers for c10d's ProcessGroupGloo (distill/boxes/distributed/ddp): the torch wheel ships
  # libtorch's own gloo but not its headers.
  libgloo-dev
  # tcmalloc, the training binaries' malloc (a CPU training step spends ~20% of its time in
  # glibc's malloc and free at small batches).
  libgoogle-perftools-dev
  # YAML (torchdistill's configs: //tools:import_torchdistill).
  libyaml-cpp-dev
  # JSON (Hugging Face's config.json and safetensors headers) and SentencePiece's trainer,
  # spm_train, run as a child process by //tools:tokenize (Debian's libsentencepiece is not
  # linked: it carries protobuf-lite 3.14, which aborts beside Debian's libprotobuf 3.21;
  # distill/data/sentencepiece_tokenizer.h encodes with libkd's own reader).
  nlohmann-json3-dev sentencepiece
  # The main jobs' data: Fashion-MNIST under /usr/share/datasets/fashion-mnist; an English text
  # corpus, fortune-mod's under /usr/share/games/fortunes.
  dataset-fashion-mnist fortunes
  # The virtual environment (python3 -m venv).
  python3 python3-venv
)

die() { echo "install_deps: $*" >&2; exit 1; }

mode=install
peers=0
for arg in "$@"; do
  case "$arg" in
    --check) mode=check ;;
    --peers) peers=1 ;;
    --fuzz) PACKAGES+=(clang) ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown flag $arg (flags: --check, --peers, --fuzz, --help)" ;;
  esac
done

command -v dpkg-query >/dev/null 2>&1 || die "dpkg-query not found: this installer is for Debian 12"

# --- Debian packages ---------------------------------------------------------------------------
missing=()
for p in "${PACKAGES[@]}"; do
  if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done

# --- the virtual environment ---------------------------------------------------------------------
# Stamps of the lock files' contents: a changed pin reinstalls, an unchanged one is left alone.
# torch's lock and the peers' have a stamp each, so adding the peers to an environment adds
# them and touches nothing else (a build beside it keeps its libtorch).
stamp() { sha256sum "$1" | cut -c1-16; }
# Environments made before the stamps were split hold one stamp of both locks (or of torch's
# alone, hashed with cat): rewritten to today's, nothing reinstalled.
old_stamp="$(cat "$VENV/.libkd-lock" 2>/dev/null || true)"
if [[ -n "$old_stamp" && ! -e "$VENV/.libkd-peers-lock" ]]; then
  if [[ "$old_stamp" == "$(cat "$LOCK" "$PEERS_LOCK" | sha256sum | cut -c1-16)" ]]; then
    stamp "$LOCK" > "$VENV/.libkd-lock"
    stamp "$PEERS_LOCK" > "$VENV/.libkd-peers-lock"
  elif [[ "$old_stamp" == "$(cat "$LOCK" | sha256sum | cut -c1-16)" ]]; then
    stamp "$LOCK" > "$VENV/.libkd-lock"
  fi
fi
venv_ok=0
if [[ -x "$VENV/bin/python" && "$(cat "$VENV/.libkd-lock" 2>/dev/null)" == "$(stamp "$LOCK")" ]]; then
  venv_ok=1
fi
tools_ok=1
if [[ "$(cat "$VENV/.libkd-tools-lock" 2>/dev/null)" != "$(stamp "$TOOLS_LOCK")" ]]; then
  tools_ok=0
fi
peers_ok=1
if ((peers)) && [[ "$(cat "$VENV/.libkd-peers-lock" 2>/dev/null)" != "$(stamp "$PEERS_LOCK")" ]]; then
  peers_ok=0
fi

if [[ "$mode" == check ]]; then
  problems=()
  [[ ${#missing[@]} -eq 0 ]] || problems+=("Debian packages: ${missing[*]}")
  [[ $venv_ok -eq 1 ]] || problems+=("virtual environment $VENV (missing or not at the pinned lock)")
  [[ $tools_ok -eq 1 ]] || problems+=("tensorboard and matplotlib in $VENV (missing or not at $TOOLS_LOCK)")
  [[ $peers_ok -eq 1 ]] || problems+=("the peers in $VENV (missing or not at $PEERS_LOCK)")
  if [[ ${#problems[@]} -eq 0 ]]; then echo "install_deps: everything is installed"; exit 0; fi
  echo "install_deps: missing: $(IFS=';'; echo "${problems[*]}")"
  exit 1
fi

if [[ ${#missing[@]} -gt 0 ]]; then
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
else
  echo "install_deps: all ${#PACKAGES[@]} Debian packages are installed"
fi

pip_args=(--quiet --disable-pip-version-check --require-hashes --no-deps)

# The peers alone, into an environment at the pinned lock: pip adds them (their pins only).
install_peers() {
  echo "install_deps: adding torchdistill and silverspoon-kd to $VENV ($PEERS_LOCK)"
  "$VENV/bin/python" -m pip install "${pip_args[@]}" -r "$PEERS_LOCK" ||
    die "pip install -r $PEERS_LOCK failed (PyPI unreachable, or a hash mismatch)"
  "$VENV/bin/python" -c 'import torchdistill, silverspoon_kd' ||
    die "torchdistill or silverspoon_kd does not import in $VENV"
  stamp "$PEERS_LOCK" > "$VENV/.libkd-peers-lock"
}

# What the tests read run output with (tensorboard's event reader, matplotlib), added the same way.
install_tools() {
  echo "install_deps: adding tensorboard and matplotlib to $VENV ($TOOLS_LOCK)"
  "$VENV/bin/python" -m pip install "${pip_args[@]}" -r "$TOOLS_LOCK" ||
    die "pip install -r $TOOLS_LOCK failed (PyPI unreachable, or a hash mismatch)"
  "$VENV/bin/python" -c 'import tensorboard, matplotlib' ||
    die "tensorboard or matplotlib does not import in $VENV"
  stamp "$TOOLS_LOCK" > "$VENV/.libkd-tools-lock"
}

if [[ $venv_ok -eq 1 ]]; then
  echo "install_deps: $VENV is at the pinned lock ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
  if [[ $tools_ok -eq 0 ]]; then install_tools; fi
  if [[ $peers_ok -eq 0 ]]; then install_peers; fi
  exit 0
fi

# The lock holds CPython 3.11 wheels: Debian 12's python3 is 3.11, and so is a pyenv python3.
python=""
for candidate in python3.11 python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 &&
     "$candidate" -c 'import sys, venv; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
    python="$(command -v "$candidate")"; break
  fi
done
[[ -n "$python" ]] || die "no Python 3.11 with venv found (tools/requirements/torch.lock is for CPython 3.11)"

start=$SECONDS
echo "install_deps: installing $(grep -m1 '^torch==' "$LOCK" | cut -d' ' -f1) into $VENV (~3 GB download, ~5 GB on disk)"
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$python" -m venv "$VENV" || die "could not create the virtual environment $VENV"
"$VENV/bin/python" -m pip install "${pip_args[@]}" -r "$LOCK" ||
  die "pip install -r $LOCK failed (PyPI unreachable, or a hash mismatch)"
"$VENV/bin/python" -c 'import torch, torchvision' || die "torch does not import in $VENV"
stamp "$LOCK" > "$VENV/.libkd-lock"
install_tools
if ((peers)); then install_peers; fi
echo "install_deps: $VENV ready in $((SECONDS - start)) s ($(du -sh "$VENV" | cut -f1)); " \
     "if Bazel built against an older torch before, run: bazel sync --only=libtorch"
