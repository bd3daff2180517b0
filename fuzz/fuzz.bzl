"""kd_fuzz_target: a libFuzzer target and its corpus as a regression test.

kd_fuzz_target(name = "x_fuzzer", srcs = ["x_fuzzer.cc"], deps = [...]) makes
  :x_fuzzer       the fuzzer under `--config=fuzz` (clang, libFuzzer, ASan: tools/fuzz.sh),
                  a replay binary (fuzz/replay_main.cc) otherwise;
  :x_fuzzer_test  a cc_test replaying every file of fuzz/corpus/x/ (seeds, what fuzzing kept,
                  and the crashes it found), built with the default toolchain.
"""

def kd_fuzz_target(name, srcs, deps):
    corpus = name[:-len("_fuzzer")]
    native.cc_library(
        name = name + "_lib",
        srcs = srcs,
        deps = deps,
        alwayslink = True,
    )
    native.cc_binary(
        name = name,
        deps = [":" + name + "_lib"] + select({
            ":libfuzzer": [],
            "//conditions:default": [":replay_main"],
        }),
        linkopts = select({
            ":libfuzzer": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
    )
    native.cc_test(
        name = name + "_test",
        deps = [":" + name + "_lib", ":replay_main"],
        data = native.glob(["corpus/" + corpus + "/*"]),
        args = ["fuzz/corpus/" + corpus],
    )
