// LeakSanitizer reads these suppressions in --config=asan test runs. Leaks reported inside
// libtorch itself (e.g. 152 bytes when torch::jit::load rejects a truncated archive) are
// libtorch's, not libkd's. Without a sanitizer the function is never called.
extern "C" const char* __lsan_default_suppressions() { return "leak:libtorch_cpu.so\n"; }
