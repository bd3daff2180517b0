// inspect: prints every module of a TorchScript model: path, type, parameter count, and with
// --input_shape the output shape of each module from one forward on zeros.
//
//   bazel run //tools:inspect -- --model=m.pt --input_shape=1,1,28,28 --format=json
//   bazel run //tools:inspect -- --model=m.pt --input_shape=1,1,28,28 --device=cuda:0
//
// Exit codes: 0 OK, 2 bad input (missing/unreadable/non-TorchScript file, bad flags, a forward
// that fails on the given shape).
#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/device.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "hooks/model.h"
#include "hooks/torchscript_model.h"
#include "tools/tool_util.h"

ABSL_FLAG(std::string, model, "",
          "Path of a TorchScript file (torch.jit.save) or an AOTInductor package (.pt2, "
          "tools/export_teacher.py: its module paths, the exported ones' shapes). Relative "
          "paths are taken from the folder `bazel run` was called in. Required.");
ABSL_FLAG(std::string, input_shape, "",
          "Comma-separated shape of one input tensor, e.g. 1,3,32,32. When given, runs one "
          "forward on zeros of that shape in eval mode and prints each module's output shape "
          "(of its first call; modules called more than once show the number of calls).");
ABSL_FLAG(std::string, format, "text", "Output format: text (an aligned table) or json.");
ABSL_FLAG(std::string, device, "cpu",
          "Where the model and its input live for --input_shape: cpu, cuda or cuda:N.");

namespace kd {
namespace {

constexpr char kTool[] = "inspect";

struct Row {
  ModuleInfo module;
  int64_t params = 0;
  std::string output;  // shape description, "" if not run
  int calls = 0;
};

absl::StatusOr<std::vector<int64_t>> ParseShape(const std::string& text) {
  std::vector<int64_t> shape;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t dim;
    if (!absl::SimpleAtoi(part, &dim) || dim <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--input_shape=", text, ": \"", part,
                       "\" is not a positive integer; give dimensions like 1,3,32,32"));
    }
    shape.push_back(dim);
  }
  return shape;
}

int64_t ParamsUnder(const std::string& path, const std::vector<NamedTensor>& params) {
  int64_t total = 0;
  for (const auto& [name, t] : params) {
    if (path.empty() || name.rfind(path + ".", 0) == 0) total += t.numel();
  }
  return total;
}

absl::StatusOr<std::vector<Row>> Inspect(Model& model, const std::string& input_shape,
                                         c10::Device device) {
  std::vector<Row> rows;
  const std::vector<NamedTensor> params = model.NamedParameters();
  for (const ModuleInfo& m : model.NamedModules()) {
    rows.push_back(Row{m, ParamsUnder(m.path, params)});
  }
  if (input_shape.empty()) return rows;

  KD_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ParseShape(input_shape));
  std::vector<HookHandle> taps;
  for (Row& row : rows) {
    auto tap = model.AddHook(row.module.path,
                             [&row](const std::vector<c10::IValue>&, const c10::IValue& output) {
                               if (row.calls++ == 0) row.output = DescribeValue(output);
                             });
    if (tap.ok()) {
      taps.push_back(*std::move(tap));
    } else {
      // A package's program returns only the values it was exported with.
      row.output = model.kind() == "aoti" ? "(not exported)" : "(not called by forward)";
    }
  }
  model.SetTraining(false);
  model.To(device);
  absl::Status ran = CallTorch([&] { model.Forward({at::zeros(shape, device)}); },
                               absl::StatusCode::kInvalidArgument);
  if (!ran.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("forward on zeros of shape [", input_shape,
                                                   "] failed: ", ErrorSummary(ran.message())));
  }
  return rows;
}

void PrintText(const std::vector<Row>& rows, bool with_outputs) {
  size_t path_width = 6, type_width = 4;
  for (const Row& r : rows) {
    path_width = std::max(path_width, r.module.path.empty() ? 6 : r.module.path.size());
    type_width = std::max(type_width, r.module.type.size());
  }
  auto pad = [](const std::string& s, size_t w) { return s + std::string(w - s.size() + 2, ' '); };
  std::cout << pad("path", path_width) << pad("type", type_width)
            << (with_outputs ? "params      output" : "params") << "\n";
  for (const Row& r : rows) {
    std::string params = std::to_string(r.params);
    std::cout << pad(r.module.path.empty() ? "(root)" : r.module.path, path_width)
              << pad(r.module.type, type_width);
    if (with_outputs) {
      std::cout << params << std::string(params.size() < 12 ? 12 - params.size() : 1, ' ')
                << r.output << (r.calls > 1 ? absl::StrCat("  (", r.calls, " calls)") : "");
    } else {
      std::cout << params;
    }
    std::cout << "\n";
  }
}

void PrintJson(const std::vector<Row>& rows, bool with_outputs) {
  std::cout << "[\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::cout << "  {\"path\": " << JsonString(r.module.path)
              << ", \"type\": " << JsonString(r.module.type) << ", \"params\": " << r.params;
    if (with_outputs) {
      std::cout << ", \"output\": " << JsonString(r.output) << ", \"calls\": " << r.calls;
    }
    std::cout << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  std::cout << "]\n";
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Prints every module of a TorchScript model (or AOTInductor package): path, type, parameter "
      "count (including "
      "submodules), and with --input_shape each module's output shape.\n"
      "Usage: bazel run //tools:inspect -- --model=m.pt [--input_shape=1,3,32,32] "
      "[--format=text|json] [--device=cpu|cuda:N]");
  kd::ParseFlagsOrExit(argc, argv, kd::kTool);
  const std::string model_flag = absl::GetFlag(FLAGS_model);
  const std::string format = absl::GetFlag(FLAGS_format);
  if (model_flag.empty()) return Fail(kTool, "--model is required (a torch.jit.save file)");
  if (format != "text" && format != "json") {
    return Fail(kTool, absl::StrCat("--format=", format, ": use text or json"));
  }
  absl::StatusOr<c10::Device> device = ParseDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) return Fail(kTool, absl::StrCat("--device: ", device.status().message()));
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModelFile(ResolveUserPath(model_flag));
  if (!model.ok()) return Fail(kTool, model.status().message());
  const std::string shape = absl::GetFlag(FLAGS_input_shape);
  absl::StatusOr<std::vector<Row>> rows = Inspect(**model, shape, *device);
  if (!rows.ok()) return Fail(kTool, rows.status().message());
  if (format == "json") {
    PrintJson(*rows, !shape.empty());
  } else {
    PrintText(*rows, !shape.empty());
  }
  return 0;
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) { return kd::FinishOutput(kd::kTool, kd::Main(argc, argv)); }
