"""libkd_dependencies(): the repositories libkd needs, for libkd itself and for consumers.

libtorch comes from the PyPI torch wheel in libkd's virtual environment (or LIBKD_TORCH_DIR, see
third_party/repositories.bzl); every other dependency from Debian's packages under /usr (see
tools/install_deps.sh), and the
repositories Bazel 4.2.3 would otherwise download (rules_cc, rules_java, platforms,
remote_coverage_tools) are replaced by offline stand-ins. Each repository is declared only if
the calling workspace has not declared one of the same name, so a consumer can override any.

Use from another workspace (TensorStore's `tensorstore_dependencies()` pattern):

    local_repository(name = "libkd", path = "/path/to/libkd")
    load("@libkd//:libkd_deps.bzl", "libkd_dependencies")
    libkd_dependencies()
"""

load("//third_party:repositories.bzl", "libtorch_repository", "offline_stand_in", "system_library")
load("//third_party:system_build_files.bzl", "STAND_IN_FILES", "SYSTEM_LIBRARIES")

def _maybe(rule, name, **kwargs):
    if name not in native.existing_rules():
        rule(name = name, **kwargs)

def libkd_dependencies():
    """Declares libkd's external repositories (system libraries and offline stand-ins)."""

    # Offline stand-ins for what Bazel 4.2.3 downloads by default.
    for name, files in STAND_IN_FILES.items():
        _maybe(offline_stand_in, name, files = files)
    _maybe(native.local_repository, "rules_java", path = "/usr/share/bazel/rules/java")
    _maybe(native.local_repository, "platforms", path = "/usr/share/bazel/tools/platforms")

    # libtorch: headers and libraries of the torch wheel, found by asking the environment's Python.
    _maybe(
        libtorch_repository,
        "libtorch",
        build_file_template = Label("//third_party/libtorch:BUILD.tpl.bazel"),
    )

    # System libraries from Debian's -dev packages; their BUILD files are libkd's
    # third_party/<name>/system.BUILD.bazel (and, for abseil, one file per package).
    for name, attrs in SYSTEM_LIBRARIES.items():
        _maybe(system_library, name, **attrs)
