"""BUILD files of the system-library repositories and the offline stand-ins."""

_ABSL_LIBS = [
    "flags_parse", "flags_usage", "flags_usage_internal", "flags_internal", "flags_marshalling",
    "flags_reflection", "flags_config", "flags_program_name", "flags_private_handle_accessor",
    "flags_commandlineflag", "flags_commandlineflag_internal", "statusor", "status", "cord",
    "cord_internal", "cordz_info", "cordz_handle", "cordz_functions", "cordz_sample_token",
    "str_format_internal", "strings", "strings_internal", "synchronization", "time",
    "time_zone", "civil_time", "raw_hash_set", "hash", "city", "low_level_hash",
    "hashtablez_sampler", "exponential_biased", "stacktrace", "symbolize", "debugging_internal",
    "demangle_internal", "malloc_internal", "graphcycles_internal", "int128", "throw_delegate",
    "raw_logging_internal", "log_severity", "spinlock_wait", "base", "bad_optional_access",
    "bad_variant_access", "strerror",
]

_ABSL = """
package(default_visibility = ["//visibility:public"])

# libabsl-dev 20220623: one target for the libraries libkd uses (status, strings, str_format,
# containers, synchronization, flags).
cc_library(
    name = "absl",
    linkopts = [%s],
)
""" % ", ".join(['"-labsl_%s"' % lib for lib in _ABSL_LIBS])

_PROTOBUF = """
package(default_visibility = ["//visibility:public"])

# protobuf 3.21 (libprotobuf-dev, protobuf-compiler) for native proto_library/cc_proto_library;
# .bazelrc points --proto_compiler and --proto_toolchain_for_cc here.
sh_binary(
    name = "protoc",
    srcs = ["bin/protoc"],
)

cc_library(
    name = "protobuf",
    linkopts = ["-lprotobuf", "-lpthread"],
)

proto_lang_toolchain(
    name = "cc_toolchain",
    command_line = "--cpp_out=$(OUT)",
    runtime = ":protobuf",
)

# Well-known types (struct.proto, ...) live under /usr/include.
proto_library(
    name = "struct_proto",
    srcs = ["include/google/protobuf/struct.proto"],
    strip_import_prefix = "include",
)
"""

_GOOGLETEST = """
package(default_visibility = ["//visibility:public"])

cc_library(name = "gtest", linkopts = ["-lgmock", "-lgtest", "-lpthread"])

cc_library(name = "gtest_main", linkopts = ["-lgmock", "-lgtest_main", "-lgtest", "-lpthread"])
"""

_BENCHMARK = """
package(default_visibility = ["//visibility:public"])

cc_library(name = "benchmark", linkopts = ["-lbenchmark", "-lpthread"])

cc_library(name = "benchmark_main", linkopts = ["-lbenchmark_main", "-lbenchmark", "-lpthread"])
"""

SYSTEM_BUILD_FILES = {
    "com_google_absl": _ABSL,
    "com_google_protobuf": _PROTOBUF,
    "com_google_googletest": _GOOGLETEST,
    "com_github_google_benchmark": _BENCHMARK,
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
