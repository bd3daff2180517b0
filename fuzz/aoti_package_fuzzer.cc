// What libkd reads of an AOTInductor package before libtorch's loader sees it, on arbitrary
// bytes: input starting "PK" is a zip whose entries CheckPackageEntries reads (through a file,
// as LoadAotiModel does); anything else is a libkd manifest in text form, checked and, where
// CheckManifest accepts it, turned into the model's call table, whose every index must lie
// within the package's outputs (aborts otherwise: a manifest the check passes may never index
// out of the outputs).
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "google/protobuf/text_format.h"
#include "hooks/aoti_manifest.pb.h"
#include "hooks/aoti_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  if (bytes.rfind("PK", 0) == 0) {
    static const std::string path = [] {
      const char* dir = std::getenv("TEST_TMPDIR");
      return std::string(dir != nullptr ? dir : "/tmp") + "/aoti_package_fuzzer." +
             std::to_string(::getpid()) + ".pt2";
    }();
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    (void)kd::hooks_internal::CheckPackageEntries(path);
    return 0;
  }
  kd::AotiManifest manifest;
  google::protobuf::TextFormat::Parser parser;
  parser.AllowPartialMessage(true);
  if (!parser.ParseFromString(bytes, &manifest)) return 0;
  if (!kd::hooks_internal::CheckManifest(manifest).ok()) return 0;
  const size_t outputs = static_cast<size_t>(manifest.num_model_outputs()) +
                         static_cast<size_t>(manifest.values_size());
  for (const auto& [path, calls] : kd::hooks_internal::BuildCalls(manifest)) {
    for (const kd::hooks_internal::Call& call : calls) {
      if (call.output.has_value() && *call.output >= outputs) std::abort();
      for (const auto& [arg, index] : call.args) {
        if (arg < 0 || index >= outputs) std::abort();
      }
    }
  }
  return 0;
}
