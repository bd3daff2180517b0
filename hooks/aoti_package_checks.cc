// What libkd checks of an AOTInductor package before libtorch's loader sees it (the package's
// zip entries, its manifest, the instruction sets it was compiled for): hooks/aoti_model.h's
// hooks_internal functions.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "base/torch_archive.h"
#include "hooks/aoti_manifest.pb.h"
#include "hooks/aoti_model.h"

namespace kd {
namespace hooks_internal {

std::vector<std::string> MissingCpuIsa(const std::string& isa_list,
                                       const std::function<bool(const std::string&)>& supports) {
  std::vector<std::string> missing;
  for (absl::string_view name : absl::StrSplit(isa_list, ' ', absl::SkipEmpty())) {
    if (!supports(std::string(name))) missing.emplace_back(name);
  }
  return missing;
}

bool CpuSupports(const std::string& isa) {
  // The names Inductor writes (torch/_inductor/cpu_vec_isa.py, upper-cased), by the CPU's own
  // flags. A name not known here is taken as missing: a package whose kernels use an
  // instruction set libkd cannot check would die of an illegal instruction, not fail cleanly.
  if (isa == "INVALID_VEC_ISA") return true;  // Inductor's name for scalar code: runs anywhere
#if defined(__x86_64__) || defined(__i386__)
  if (isa == "AVX2") return __builtin_cpu_supports("avx2");
  if (isa == "AVX512") {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
  if (isa == "AVX512_VNNI") return __builtin_cpu_supports("avx512vnni");
  if (isa == "AVX512_BF16") return __builtin_cpu_supports("avx512bf16");
  if (isa == "AMX_TILE") return __builtin_cpu_supports("amx-tile");
#endif
  return false;
}

absl::Status CheckManifest(const AotiManifest& manifest) {
  std::vector<std::string> problems;
  if (manifest.num_model_outputs() < 1 || manifest.num_model_outputs() > kMaxManifestOutputs) {
    problems.push_back(absl::StrCat("num_model_outputs ", manifest.num_model_outputs(),
                                    " is not in [1, ", kMaxManifestOutputs, "]"));
  }
  if (manifest.module_paths_size() > kMaxManifestOutputs ||
      manifest.module_types_size() > kMaxManifestOutputs) {
    problems.push_back(absl::StrCat(std::max(manifest.module_paths_size(),
                                             manifest.module_types_size()),
                                    " module paths or types, more than ", kMaxManifestOutputs));
  }
  if (manifest.values_size() > kMaxManifestOutputs) {
    problems.push_back(absl::StrCat(manifest.values_size(), " values, more than ",
                                    kMaxManifestOutputs));
  }
  // Each call of a module has at least one value, so a call's number is below the count of
  // values; an argument's number is below the most arguments a Python call takes.
  for (int i = 0; i < manifest.values_size() && problems.size() < 3; ++i) {
    const AotiManifest::Value& v = manifest.values(i);
    if (v.path().empty()) problems.push_back(absl::StrCat("values[", i, "] has no path"));
    if (v.call() < 0 || v.call() >= manifest.values_size()) {
      problems.push_back(absl::StrCat("values[", i, "].call ", v.call(), " is not in [0, ",
                                      manifest.values_size(), ")"));
    }
    if (v.arg() < 0 || v.arg() >= kMaxManifestArgs) {
      problems.push_back(
          absl::StrCat("values[", i, "].arg ", v.arg(), " is not in [0, ", kMaxManifestArgs, ")"));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "its libkd manifest is out of range (", absl::StrJoin(problems, "; "),
      "); re-export it with tools/export_teacher.py"));
}

std::map<std::string, std::vector<Call>> BuildCalls(const AotiManifest& manifest) {
  std::map<std::string, std::vector<Call>> calls_by_path;
  for (int i = 0; i < manifest.values_size(); ++i) {
    const AotiManifest::Value& v = manifest.values(i);
    std::vector<Call>& calls = calls_by_path[v.path()];
    if (calls.size() <= static_cast<size_t>(v.call())) calls.resize(v.call() + 1);
    const size_t index = static_cast<size_t>(manifest.num_model_outputs() + i);
    if (v.io() == AotiManifest::Value::OUTPUT) {
      calls[v.call()].output = index;
    } else {
      calls[v.call()].args.emplace_back(v.arg(), index);
    }
  }
  for (auto& [path, calls] : calls_by_path) {
    for (Call& call : calls) std::sort(call.args.begin(), call.args.end());
  }
  return calls_by_path;
}

absl::Status CheckPackageEntries(const std::string& path) {
  KD_ASSIGN_OR_RETURN(const std::string bytes, ReadFile(path));
  absl::StatusOr<TorchArchive> archive = InspectTorchArchive(bytes);
  if (!archive.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is not an AOTInductor package (", archive.status().message(),
        "): make one with tools/export_teacher.py"));
  }
  if (archive->records.size() > static_cast<size_t>(kMaxPackageEntries)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": holds ", archive->records.size(), " entries, more than the ",
                     kMaxPackageEntries, " a package extracts; re-export it"));
  }
  uint64_t total = 0;
  for (const TorchArchive::Record& record : archive->records) {
    // libtorch's loader writes each entry at <temp folder>/<name>: a name that climbs out of
    // it, is absolute, or is a Windows path would be written wherever it points.
    const absl::string_view name = record.name;
    bool bad = name.empty() || name.front() == '/' || name.find('\\') != name.npos ||
               name.find('\0') != name.npos;
    for (absl::string_view part : absl::StrSplit(name, '/')) {
      if (part == "..") bad = true;
    }
    if (bad) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": entry \"", absl::CEscape(name.substr(0, 200)),
          "\" would be extracted outside the package's folder (an absolute name, a \"..\" or a "
          "backslash); libkd does not open such a package: re-export it"));
    }
    total += record.uncompressed_size;
    if (total > static_cast<uint64_t>(kMaxPackageExtractedBytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": its entries extract to more than ", HumanBytes(kMaxPackageExtractedBytes),
          "; libkd does not open such a package: re-export it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace hooks_internal

}  // namespace kd
