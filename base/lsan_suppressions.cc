// LeakSanitizer's suppressions for --config=asan builds (tools/sanitize.sh): leaks inside
// libtorch's own code that libkd cannot free, each named by the function that allocates and
// why it is not libkd's. Everything else is reported, so a tensor, module or buffer that libkd
// leaks fails the run. Without a sanitizer LSan never calls the function.
//
// - mz_zip_reader_init, mz_zip_reader_read_central_dir (miniz, inside libtorch_cpu):
//   caffe2::serialize::PyTorchStreamReader initializes its zip reader in its constructor and
//   ends it in its destructor; when the constructor throws on an archive libtorch refuses (a
//   truncated or corrupt file, which libkd's own checks let through to libtorch only in its
//   fuzz replays), the destructor never runs and the reader's state (~900 bytes) is lost.
// - _GLOBAL__sub_I_CachingHostAllocator.cpp (libtorch_cuda's static initializer): loading an
//   AOTInductor package loads libtorch.so, which loads libtorch_cuda; its static initializer
//   allocates 24 bytes it never frees (seen in hooks:aoti_model_test under ASan, no GPU).
extern "C" const char* __lsan_default_suppressions() {
  return "leak:mz_zip_reader_init\n"
         "leak:mz_zip_reader_read_central_dir\n"
         "leak:_GLOBAL__sub_I_CachingHostAllocator.cpp\n";
}
