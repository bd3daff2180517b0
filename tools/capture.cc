// capture: runs a TorchScript model on inputs saved by Python and records the inputs/outputs
// of chosen modules with a ForwardHookManager.
//
//   bazel run //tools:capture -- --model=m.pt --input=in.pt --paths=layer1,layer2.0 \
//       [--inputs] [--out=io.pt]
//
// Exit codes: 0 OK, 2 bad input (files, unknown module paths, a failing forward).
#include <iostream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "hooks/forward_hook_manager.h"
#include "hooks/torchscript_model.h"
#include "tools/tool_util.h"

ABSL_FLAG(std::string, model, "", "TorchScript file (torch.jit.save). Required.");
ABSL_FLAG(std::string, input, "",
          "File written by Python's torch.save of the forward's input: a tensor, a tuple of "
          "tensors (positional arguments) or a dict (keyword arguments). Required. (Use a tuple, "
          "not a one-element list: libtorch 1.13 cannot read those.)");
ABSL_FLAG(std::string, paths, "",
          "Comma-separated module paths to record, e.g. layer1,layer2.0 (\"\" is not allowed "
          "here; use the model's output instead). Required.");
ABSL_FLAG(bool, inputs, false, "Also record each module's input (default: outputs only).");
ABSL_FLAG(std::string, out, "",
          "Write the I/O dict here with torch::pickle_save (atomically); Python's torch.load "
          "returns {path: {\"input\": ..., \"output\": ...}}. Without it, prints each path's "
          "shapes, dtypes and checksums.");

namespace kd {
namespace {

struct ForwardInput {
  std::vector<c10::IValue> args;
  Kwargs kwargs;
};

absl::StatusOr<ForwardInput> ReadInput(const std::string& path) {
  KD_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  absl::StatusOr<c10::IValue> value = CallTorch(
      [&] { return torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end())); },
      absl::StatusCode::kInvalidArgument);
  if (!value.ok()) {
    std::string hint;
    if (absl::StrContains(value.status().message(), "Unknown opcode")) {
      hint = " (a one-element Python list is written with an opcode libtorch 1.13 cannot read: "
             "save a tuple instead)";
    }
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a file written by torch.save: ", LastLine(value.status().message()), hint));
  }
  ForwardInput input;
  if (value->isTensor()) {
    input.args.push_back(*value);
  } else if (value->isTuple()) {
    input.args = value->toTupleRef().elements().vec();
  } else if (value->isList()) {
    input.args = value->toListRef().vec();
  } else if (value->isGenericDict()) {
    for (const auto& entry : value->toGenericDict()) {
      if (!entry.key().isString()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": a dict input must have string keys (keyword names)"));
      }
      input.kwargs.emplace(entry.key().toStringRef(), entry.value());
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": holds a ", value->tagKind(),
        "; save a tensor, a tuple of tensors or a dict of keyword arguments"));
  }
  return input;
}

// "sum=... mean|x|=..." over every tensor in a value, for eyeballing against Python.
std::string Checksum(const c10::IValue& value) {
  double sum = 0, abs_sum = 0;
  int64_t count = 0;
  std::function<void(const c10::IValue&)> visit = [&](const c10::IValue& v) {
    if (v.isTensor()) {
      const at::Tensor t = v.toTensor().to(at::kDouble);
      sum += t.sum().item<double>();
      abs_sum += t.abs().sum().item<double>();
      count += t.numel();
    } else if (v.isTuple()) {
      for (const auto& e : v.toTupleRef().elements()) visit(e);
    } else if (v.isList()) {
      for (const auto& e : v.toListRef()) visit(e);
    }
  };
  visit(value);
  return absl::StrFormat("sum=%.6g mean|x|=%.6g", sum, count ? abs_sum / count : 0.0);
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Records the inputs/outputs of chosen modules of a TorchScript model.\n"
      "Usage: bazel run //tools:capture -- --model=m.pt --input=in.pt --paths=layer1,layer2.0 "
      "[--inputs] [--out=io.pt]");
  absl::ParseCommandLine(argc, argv);
  const std::string model_path = absl::GetFlag(FLAGS_model);
  const std::string input_path = absl::GetFlag(FLAGS_input);
  const std::string paths_flag = absl::GetFlag(FLAGS_paths);
  if (model_path.empty()) return Fail("capture", "--model is required (a torch.jit.save file)");
  if (input_path.empty()) return Fail("capture", "--input is required (a torch.save file)");
  if (paths_flag.empty()) return Fail("capture", "--paths is required, e.g. --paths=layer1,fc");
  const std::vector<std::string> paths = absl::StrSplit(paths_flag, ',');

  auto model = LoadTorchScriptModel(ResolveUserPath(model_path));
  if (!model.ok()) return Fail("capture", model.status().message());
  auto input = ReadInput(ResolveUserPath(input_path));
  if (!input.ok()) return Fail("capture", input.status().message());

  ForwardHookManager manager;
  const HookOptions options{.requires_input = absl::GetFlag(FLAGS_inputs)};
  for (const std::string& path : paths) {
    if (path.empty()) return Fail("capture", "--paths has an empty path; list module paths");
    if (absl::Status s = manager.AddHook(**model, path, options); !s.ok()) {
      return Fail("capture", s.message());
    }
  }
  (*model)->SetTraining(false);
  absl::Status ran = CallTorch([&] { (*model)->Forward(input->args, input->kwargs); });
  if (!ran.ok()) return Fail("capture", absl::StrCat("forward failed: ", LastLine(ran.message())));
  auto io = manager.PopIoDict();
  if (!io.ok()) return Fail("capture", io.status().message());

  const std::string out = absl::GetFlag(FLAGS_out);
  if (!out.empty()) {
    auto bytes = CallTorch([&] { return torch::jit::pickle_save(IoDictToIValue(*io)); });
    if (!bytes.ok()) return Fail("capture", bytes.status().message());
    const std::string out_path = ResolveUserPath(out);
    if (absl::Status s = WriteFileAtomically(out_path, std::string(bytes->begin(), bytes->end()));
        !s.ok()) {
      return Fail("capture", s.message());
    }
    std::cout << "wrote " << paths.size() << " module(s) to " << out_path << "\n";
    return 0;
  }
  for (const std::string& path : paths) {
    for (const auto& [io_type, value] : (*io)[path]) {
      std::cout << path << " " << io_type << " " << DescribeValue(value) << " "
                << Checksum(value) << "\n";
    }
  }
  return 0;
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) { return kd::Main(argc, argv); }
