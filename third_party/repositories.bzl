"""Repository rules that work from any workspace, offline."""

def _offline_stand_in_impl(ctx):
    for path, content in ctx.attr.files.items():
        ctx.file(path, content)

offline_stand_in = repository_rule(
    implementation = _offline_stand_in_impl,
    attrs = {"files": attr.string_dict(doc = "file path -> content")},
    doc = "A repository made of the given files; replaces one Bazel would download.",
)

def _system_library_impl(ctx):
    # Link the parts of /usr the BUILD files refer to; the compiler finds /usr/include itself.
    for sub in ["include", "lib", "bin"]:
        ctx.symlink(ctx.path("/usr/" + sub), sub)
    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)
    ctx.symlink(ctx.path(ctx.attr.build_file), "BUILD.bazel")
    for label, path in ctx.attr.build_files.items():
        ctx.symlink(ctx.path(label), path)

system_library = repository_rule(
    implementation = _system_library_impl,
    attrs = {
        "build_file": attr.label(
            mandatory = True,
            allow_single_file = True,
            doc = "The repository's top-level BUILD file.",
        ),
        "build_files": attr.label_keyed_string_dict(
            allow_files = True,
            doc = "More BUILD files: file -> its path in the repository (\"absl/status/BUILD.bazel\").",
        ),
    },
    local = True,
    doc = """A library installed under /usr by a Debian -dev package, described by BUILD files
given by label (Label("//third_party/<name>:system.BUILD.bazel") in a .bzl of libkd, so that they
resolve to libkd's files from any workspace).""",
)

# Folders of the wheel's include/ that must not reach the include path: the wheel's protobuf
# 3.21 headers (without port_def.inc) would shadow Debian's, and pybind11 is Python's.
_TORCH_INCLUDE_EXCLUDED = ["google", "pybind11"]

_INSTALL_HINT = ("run tools/install_deps.sh (it makes the virtual environment with libkd's " +
                 "pinned torch), or set LIBKD_TORCH_DIR to a folder holding libtorch's include/ " +
                 "and lib/ (an unpacked libtorch zip or a site-packages/torch)")

def _default_venv(ctx):
    venv = ctx.os.environ.get("LIBKD_VENV", "")
    if venv:
        return venv
    cache = ctx.os.environ.get("XDG_CACHE_HOME", "")
    if not cache:
        cache = ctx.os.environ.get("HOME", "") + "/.cache"
    return cache + "/libkd/venv"

def _find_torch(ctx):
    """Returns (torch folder, python or None, how it was found)."""
    explicit = ctx.os.environ.get("LIBKD_TORCH_DIR", "")
    if explicit:
        return ctx.path(explicit), None, "LIBKD_TORCH_DIR=" + explicit
    python = ctx.os.environ.get("LIBKD_PYTHON", "")
    if not python:
        python = _default_venv(ctx) + "/bin/python"
    if not ctx.path(python).exists:
        fail("libtorch not found: no Python at %s; %s" % (python, _INSTALL_HINT))
    result = ctx.execute([python, "-c", "\n".join([
        "import importlib.util",
        "spec = importlib.util.find_spec('torch')",
        "print(spec.submodule_search_locations[0] if spec else '')",
    ])])
    location = result.stdout.strip()
    if result.return_code != 0 or not location:
        fail("libtorch not found: %s has no torch package; %s" % (python, _INSTALL_HINT))
    return ctx.path(location), python, python

def _torch_version(ctx, torch_dir):
    version_py = torch_dir.get_child("version.py")
    if version_py.exists:
        for line in ctx.read(version_py).splitlines():
            if line.startswith("__version__"):
                return line.split("=", 1)[1].strip().strip("'\"")
    build_version = torch_dir.get_child("build-version")  # libtorch zip
    if build_version.exists:
        return ctx.read(build_version).strip()
    return "unknown"

def _cuda_backend(ctx, lib):
    """Whether binaries can link libtorch_cuda: it exists and every library it needs resolves
    (a lean install, `pip install --no-deps torch nvidia-cuda-runtime nvidia-cuda-cupti`, has
    libtorch_cuda.so but not cuBLAS, cuDNN, cuFile...). Returns (bool, reason)."""
    cuda = lib.get_child("libtorch_cuda.so")
    if not cuda.exists:
        return False, "this libtorch has no libtorch_cuda.so (a CPU build)"
    result = ctx.execute(["ldd", str(cuda.realpath)])
    if result.return_code != 0:
        return False, "ldd failed on libtorch_cuda.so: " + result.stderr.strip()
    missing = [line.strip().split(" ")[0] for line in result.stdout.splitlines() if "not found" in line]
    if missing:
        return False, "libtorch_cuda.so needs libraries that are not installed: " + ", ".join(missing)
    return True, "libtorch_cuda.so and every library it needs are installed"

def _cuda_headers(ctx, torch_dir, has_cuda):
    """Links the CUDA toolkit's headers (CUDA_HOME, else /usr/local/cuda) and NCCL's (the
    wheel's nvidia-nccl package, else the toolkit's) under cuda_include/, for the translation
    units that include libtorch's CUDA headers (ProcessGroupNCCL.hpp). Returns (include folders
    in search order, reason)."""
    if not has_cuda:
        return [], "no libtorch_cuda to link"
    cuda_home = ctx.os.environ.get("CUDA_HOME", "") or "/usr/local/cuda"
    toolkit = ctx.path(cuda_home + "/include")
    if not toolkit.get_child("cuda_runtime_api.h").exists or not toolkit.get_child("crt").exists:
        return [], "no CUDA toolkit headers at %s (set CUDA_HOME)" % toolkit
    includes = []
    wheel_nccl = torch_dir.dirname.get_child("nvidia").get_child("nccl").get_child("include")
    if wheel_nccl.get_child("nccl.h").exists:
        ctx.symlink(wheel_nccl, "cuda_include/nccl")
        includes.append("cuda_include/nccl")
    elif not toolkit.get_child("nccl.h").exists:
        return [], "no nccl.h in the wheel's nvidia-nccl package or in %s" % toolkit
    ctx.symlink(toolkit, "cuda_include/toolkit")
    includes.append("cuda_include/toolkit")
    return includes, "CUDA headers from %s, NCCL's from %s" % (
        toolkit,
        wheel_nccl if includes[0] == "cuda_include/nccl" else toolkit,
    )

def _libtorch_impl(ctx):
    torch_dir, python, found_by = _find_torch(ctx)
    include = torch_dir.get_child("include")
    lib = torch_dir.get_child("lib")
    if not include.get_child("torch").exists or not lib.get_child("libtorch_cpu.so").exists:
        fail("libtorch not found: %s (from %s) lacks include/torch or lib/libtorch_cpu.so; %s" %
             (torch_dir, found_by, _INSTALL_HINT))

    # include/: every entry of libtorch's include folder but the excluded ones.
    for entry in include.readdir():
        if entry.basename not in _TORCH_INCLUDE_EXCLUDED:
            ctx.symlink(entry, "include/" + entry.basename)

    # The wheel's libraries find the CUDA runtime through RUNPATHs relative to their real
    # location ($ORIGIN/../../nvidia/...), so binaries get an rpath to the real lib/ folder,
    # never to a symlink of it.
    lib_dir = str(lib.realpath)
    ctx.symlink(lib, "lib")
    has_cuda, cuda_note = _cuda_backend(ctx, lib)
    cuda_includes, cuda_headers_note = _cuda_headers(ctx, torch_dir, has_cuda)

    version = _torch_version(ctx, torch_dir)
    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)
    ctx.template("BUILD.bazel", ctx.attr.build_file_template, {
        "%{LIB_DIR}": lib_dir,
        "%{CUDA_LINKOPTS}": (
            '"-Wl,--push-state,--no-as-needed", "-ltorch_cuda", "-lc10_cuda", "-Wl,--pop-state"'
            if has_cuda else ""
        ),
        "%{VERSION}": version,
        "%{FOUND_BY}": found_by,
        "%{CUDA_NOTE}": cuda_note,
        "%{CUDA_DEFINES}": '"LIBKD_CUDA_BACKEND=1"' if has_cuda else "",
        "%{CUDA_INCLUDES}": ", ".join(['"%s"' % i for i in cuda_includes]),
        "%{CUDA_HEADERS_DEFINES}": '"LIBKD_CUDA_HEADERS=1"' if cuda_includes else "",
        "%{CUDA_HEADERS_NOTE}": cuda_headers_note,
    })
    ctx.file("version.bzl", "\n".join([
        "\"\"\"The libtorch this workspace builds against.\"\"\"",
        "TORCH_VERSION = \"%s\"" % version,
        "TORCH_HAS_CUDA = %s" % ("True" if has_cuda else "False"),
        "",
    ]))
    if python:
        script = "#!/bin/sh\nexec '%s' \"$@\"\n" % python
    else:
        script = ("#!/bin/sh\necho 'no Python torch: libtorch comes from LIBKD_TORCH_DIR; " +
                  "set LIBKD_PYTHON to a Python with torch and torchvision' >&2\nexit 1\n")
    ctx.file("python.sh", script, executable = True)

libtorch_repository = repository_rule(
    implementation = _libtorch_impl,
    attrs = {"build_file_template": attr.label(mandatory = True, allow_single_file = True)},
    environ = ["LIBKD_TORCH_DIR", "LIBKD_PYTHON", "LIBKD_VENV", "XDG_CACHE_HOME", "HOME", "CUDA_HOME"],
    local = True,
    doc = """libtorch from the PyPI torch wheel in libkd's virtual environment (made by
tools/install_deps.sh), or from LIBKD_TORCH_DIR / LIBKD_PYTHON / LIBKD_VENV (also settable
with --repo_env).""",
)
