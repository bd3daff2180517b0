"""The system-library repositories (BUILD files by label) and the offline stand-ins."""

def _absl_build_files(packages):
    return {
        Label("//third_party/com_google_absl:absl/%s.BUILD.bazel" % package): "absl/%s/BUILD.bazel" % package
        for package in packages
    }

# Repository name -> attributes of its system_library (third_party/repositories.bzl). The BUILD
# files are files of libkd, third_party/<name>/system.BUILD.bazel (TensorStore's pattern), given
# by Label() so that they resolve to libkd's from any workspace.
SYSTEM_LIBRARIES = {
    # libabsl-dev 20220623, as targets with upstream abseil's names
    # (@com_google_absl//absl/status:statusor, ...): one BUILD file per package.
    "com_google_absl": {
        "build_file": Label("//third_party/com_google_absl:system.BUILD.bazel"),
        "build_files": _absl_build_files([
            "base",
            "container",
            "debugging",
            "flags",
            "hash",
            "numeric",
            "profiling",
            "status",
            "strings",
            "synchronization",
            "time",
            "types",
        ]),
    },
    "com_google_protobuf": {
        "build_file": Label("//third_party/com_google_protobuf:system.BUILD.bazel"),
    },
    "com_google_googletest": {
        "build_file": Label("//third_party/com_google_googletest:system.BUILD.bazel"),
    },
    "com_github_google_benchmark": {
        "build_file": Label("//third_party/com_github_google_benchmark:system.BUILD.bazel"),
    },
    # zlib1g-dev: gzip files (Fashion-MNIST's IDX files, distill/data).
    "zlib": {
        "build_file": Label("//third_party/zlib:system.BUILD.bazel"),
    },
    # libyaml-cpp-dev 0.7: torchdistill's YAML configs (distill/torchdistill).
    "com_github_jbeder_yaml_cpp": {
        "build_file": Label("//third_party/com_github_jbeder_yaml_cpp:system.BUILD.bazel"),
    },
    # nlohmann-json3-dev: JSON (Hugging Face's config.json, safetensors' headers).
    "com_github_nlohmann_json": {
        "build_file": Label("//third_party/com_github_nlohmann_json:system.BUILD.bazel"),
    },
    # libjpeg62-turbo-dev and libpng-dev: image files (ImageFolder datasets, distill/data).
    "libjpeg_turbo": {
        "build_file": Label("//third_party/libjpeg_turbo:system.BUILD.bazel"),
    },
    "png": {
        "build_file": Label("//third_party/png:system.BUILD.bazel"),
    },
    # libgoogle-perftools-dev: tcmalloc for the training binaries (//tools:distill).
    "com_github_gperftools_gperftools": {
        "build_file": Label("//third_party/com_github_gperftools_gperftools:system.BUILD.bazel"),
    },
}

_RULES_CC_DEFS = """
# Offline stand-in for rules_cc: Debian's bazel-rules-cc is too new for Bazel 4.2.3.
def cc_library(**kwargs):
    native.cc_library(**kwargs)

def cc_binary(**kwargs):
    native.cc_binary(**kwargs)

def cc_test(**kwargs):
    native.cc_test(**kwargs)

def cc_import(**kwargs):
    native.cc_import(**kwargs)

def cc_proto_library(**kwargs):
    native.cc_proto_library(**kwargs)

def cc_toolchain(**kwargs):
    native.cc_toolchain(**kwargs)

def cc_toolchain_suite(**kwargs):
    native.cc_toolchain_suite(**kwargs)
"""

STAND_IN_FILES = {
    "rules_cc": {
        "WORKSPACE": "workspace(name = \"rules_cc\")\n",
        "BUILD.bazel": "",
        "cc/BUILD.bazel": "",
        "cc/defs.bzl": _RULES_CC_DEFS,
    },
    "remote_coverage_tools": {
        "WORKSPACE": "workspace(name = \"remote_coverage_tools\")\n",
        "BUILD.bazel": "\n".join([
            "package(default_visibility = [\"//visibility:public\"])",
            "filegroup(name = \"coverage_report_generator\")",
            "filegroup(name = \"lcov_merger\")",
            "",
        ]),
    },
}
