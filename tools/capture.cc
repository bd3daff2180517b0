// capture: runs a TorchScript model on inputs saved by Python and records the inputs/outputs
// of chosen modules with a ForwardHookManager.
//
//   bazel run //tools:capture -- --model=m.pt --input=in.pt --paths=layer1,layer2.0
//       [--inputs] [--truncate | --accumulate | --call=N] [--train] [--out=io.pt]
//
// Exit codes: 0 OK, 2 bad input (files, unknown module paths, a failing forward).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/module_path.h"
#include "base/status_macros.h"
#include "base/torch_file.h"
#include "base/torch_status.h"
#include "capture/module_capture_engine.h"
#include "hooks/forward_hook_manager.h"
#include "hooks/torchscript_model.h"
#include "tools/tool_util.h"

ABSL_FLAG(std::string, model, "",
          "TorchScript file (torch.jit.save), or an AOTInductor package (.pt2, "
          "tools/export_teacher.py; only its exported paths). Required.");
ABSL_FLAG(std::string, input, "",
          "File written by Python's torch.save of the forward's input: a tensor, a tuple or list "
          "of tensors (positional arguments) or a dict (keyword arguments). Required.");
ABSL_FLAG(std::string, paths, "",
          "Comma-separated module paths to record, e.g. layer1,layer2.0 (\"\" is not allowed "
          "here; use the model's output instead). Required.");
ABSL_FLAG(bool, inputs, false, "Also record each module's input (default: outputs only).");
ABSL_FLAG(bool, truncate, false,
          "Capture with ModuleCaptureEngine's auto_truncate: the forward stops after the last "
          "listed module (nothing after it is computed), and the tool prints the forward's "
          "median time with and without truncation (5 interleaved runs each, after 3 warm-up "
          "rounds). Each module must "
          "run once per forward.");
ABSL_FLAG(bool, accumulate, false,
          "Record every call of each module in the forward, in call order (a list per path; "
          "HookOptions::accumulates); without it the last call wins. Not with --truncate.");
ABSL_FLAG(int, call, -1,
          "For modules called several times in the forward: record only call N (0-based) of "
          "each. Not with --truncate.");
ABSL_FLAG(bool, train, false,
          "Run the forward in train mode (dropout active, batch norm on batch statistics); "
          "default eval mode.");
ABSL_FLAG(std::string, out, "",
          "Write the I/O dict here (atomically, in torch.save's format); Python's torch.load "
          "returns {path: {\"input\": ..., \"output\": ...}}. Without it, prints each path's "
          "shapes, dtypes and checksums.");

namespace kd {
namespace {

constexpr char kTool[] = "capture";

struct ForwardInput {
  std::vector<c10::IValue> args;
  Kwargs kwargs;
};

absl::StatusOr<ForwardInput> ReadInput(const std::string& path) {
  KD_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  absl::StatusOr<c10::IValue> value = DecodeTorchSave(bytes);
  if (!value.ok()) {
    return WithContext(path, absl::Status(value.status().code(),
                                          ErrorSummary(value.status().message())));
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
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": holds a ", value->tagKind(),
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

absl::Status ForwardError(const absl::Status& status) {
  return WithContext("forward failed",
                     absl::Status(status.code(), ErrorSummary(status.message())));
}

// The I/O dict from a ForwardHookManager over one full forward: each module's last call, all
// its calls (--accumulate) or its call number --call.
absl::StatusOr<IoDict> CaptureWithHooks(Model& model, const std::vector<std::string>& paths,
                                        const ForwardInput& input) {
  ForwardHookManager manager;
  const int call = absl::GetFlag(FLAGS_call);
  const HookOptions options{.requires_input = absl::GetFlag(FLAGS_inputs),
                            .accumulates = absl::GetFlag(FLAGS_accumulate) || call >= 0};
  for (const std::string& path : paths) KD_RETURN_IF_ERROR(manager.AddHook(model, path, options));
  absl::Status ran = CallTorch([&] { model.Forward(input.args, input.kwargs); });
  if (!ran.ok()) return ForwardError(ran);
  KD_ASSIGN_OR_RETURN(IoDict io, manager.PopIoDict());
  if (call < 0) return io;
  IoDict picked;
  for (const auto& [path, values] : io) {
    for (const auto& [io_type, value] : values) {
      const size_t calls = value.isList() ? value.toListRef().size() : 1;
      if (static_cast<size_t>(call) >= calls) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--call=", call, ": module \"", path, "\" ran ", calls, calls == 1 ? " time" : " times",
            " in this forward; give --call=0..", calls - 1));
      }
      picked[path][io_type] = value.isList() ? value.toListRef()[call] : value;
    }
  }
  return picked;
}

double MedianMs(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The I/O dict from a truncating ModuleCaptureEngine; prints full vs truncated forward time.
absl::StatusOr<IoDict> CaptureTruncated(Model& model, const std::vector<std::string>& paths,
                                        const ForwardInput& input) {
  const bool with_inputs = absl::GetFlag(FLAGS_inputs);
  // The modules in the order the forward calls them: the cut is after the last one called,
  // whatever the order of --paths.
  std::vector<int> called;
  ModuleCaptureEngine engine(model, paths,
                             {.output_callback =
                                  [&](int id, const std::vector<c10::IValue>&, const c10::IValue&) {
                                    if (std::find(called.begin(), called.end(), id) == called.end())
                                      called.push_back(id);
                                  },
                              .capture_inputs = with_inputs,
                              .auto_truncate = true});
  KD_RETURN_IF_ERROR(engine.Register());
  auto truncated = [&]() -> absl::Status {
    engine.ClearCaptured();
    absl::StatusOr<c10::IValue> out = engine.Forward(input.args, input.kwargs);
    return out.ok() ? absl::OkStatus() : out.status();
  };
  // The first run builds the cut graph and tells whether a cut is allowed.
  if (absl::Status s = truncated(); !s.ok()) {
    return s.code() == absl::StatusCode::kFailedPrecondition ? s : ForwardError(s);
  }
  std::vector<double> full_ms, cut_ms;
  // Three untimed rounds first: TorchScript's profiling executor optimizes a graph after it
  // has run it a few times.
  for (int i = 0; i < 8; ++i) {
    engine.Deregister();
    auto start = std::chrono::steady_clock::now();
    absl::Status ran = CallTorch([&] { model.Forward(input.args, input.kwargs); });
    if (!ran.ok()) return ForwardError(ran);
    const double full_time =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    KD_RETURN_IF_ERROR(engine.Register());
    start = std::chrono::steady_clock::now();
    KD_RETURN_IF_ERROR(truncated());
    const double cut_time =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (i >= 3) {
      full_ms.push_back(full_time);
      cut_ms.push_back(cut_time);
    }
  }
  const double full = MedianMs(full_ms), cut = MedianMs(cut_ms);
  const std::string last = called.empty() ? paths.back() : paths[called.back()];
  std::cout << absl::StrFormat(
      "forward (median of 5, after 3 warm-up rounds): full %.3f ms, truncated after %s %.3f ms "
      "(%.2fx faster)\n",
      full, last, cut, full / cut);
  IoDict io;
  for (size_t id = 0; id < paths.size(); ++id) {
    KD_ASSIGN_OR_RETURN(Captured captured, engine.GetCaptured(static_cast<int>(id)));
    if (with_inputs) {
      io[paths[id]][kInput] = captured.args.size() == 1
                                  ? captured.args[0]
                                  : c10::IValue(c10::ivalue::Tuple::create(captured.args));
    }
    io[paths[id]][kOutput] = captured.output;
  }
  return io;
}

// `value` with its lists as lists of Any: a typed list (a module's List[Tensor] input, as
// DenseNet's layers take) pickles through torch.jit._pickle.build_tensorlist, a global Python's
// default torch.load (weights_only, since torch 2.6) refuses; a list of Any is a plain list.
c10::IValue ForPython(const c10::IValue& value) {
  if (value.isList()) {
    c10::impl::GenericList list(c10::AnyType::get());
    for (const c10::IValue& e : value.toListRef()) list.push_back(ForPython(e));
    return list;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const c10::IValue& e : value.toTupleRef().elements()) elements.push_back(ForPython(e));
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  if (value.isGenericDict()) {
    const c10::impl::GenericDict dict = value.toGenericDict();
    c10::impl::GenericDict out(dict.keyType(), c10::AnyType::get());
    for (const auto& entry : dict) out.insert(entry.key(), ForPython(entry.value()));
    return out;
  }
  return value;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Records the inputs/outputs of chosen modules of a TorchScript model.\n"
      "Usage: bazel run //tools:capture -- --model=m.pt --input=in.pt --paths=layer1,layer2.0 "
      "[--inputs] [--truncate | --accumulate | --call=N] [--train] [--out=io.pt]");
  kd::ParseFlagsOrExit(argc, argv, kd::kTool);
  const std::string model_path = absl::GetFlag(FLAGS_model);
  const std::string input_path = absl::GetFlag(FLAGS_input);
  const std::string paths_flag = absl::GetFlag(FLAGS_paths);
  if (model_path.empty()) return Fail(kTool, "--model is required (a torch.jit.save file)");
  if (input_path.empty()) return Fail(kTool, "--input is required (a torch.save file)");
  if (paths_flag.empty()) return Fail(kTool, "--paths is required, e.g. --paths=layer1,fc");
  const std::vector<std::string> paths = absl::StrSplit(paths_flag, ',');
  for (size_t i = 0; i < paths.size(); ++i) {
    if (paths[i].empty()) return Fail(kTool, "--paths has an empty path; list module paths");
    if (const std::string problem = ModulePathProblem(paths[i]); !problem.empty()) {
      return Fail(kTool, absl::StrCat("--paths: ", problem));
    }
    if (std::find(paths.begin(), paths.begin() + i, paths[i]) != paths.begin() + i) {
      return Fail(kTool, absl::StrCat("--paths lists \"", paths[i],
                                      "\" twice; list each "
                                      "module once"));
    }
  }
  if (absl::GetFlag(FLAGS_truncate) &&
      (absl::GetFlag(FLAGS_accumulate) || absl::GetFlag(FLAGS_call) >= 0)) {
    return Fail(kTool,
                "--truncate records each module's one call: give --accumulate or --call "
                "without --truncate");
  }
  if (absl::GetFlag(FLAGS_call) < -1) {
    return Fail(kTool, absl::StrCat("--call must be >= 0, got ", absl::GetFlag(FLAGS_call)));
  }
  const std::string out = absl::GetFlag(FLAGS_out);
  // Nothing libkd reads is ever written over.
  for (const auto& [flag, input_file] :
       {std::pair<const char*, std::string>{"--model", model_path}, {"--input", input_path}}) {
    if (!out.empty() && SameFile(ResolveUserPath(out), ResolveUserPath(input_file))) {
      return Fail(kTool, absl::StrCat("--out=", out, " is the ", flag,
                                      " file; the tool never writes over its inputs: give "
                                      "another --out"));
    }
  }
  if (!out.empty()) {
    if (absl::Status writable = CheckWritablePath(ResolveUserPath(out)); !writable.ok()) {
      return Fail(kTool, absl::StrCat("--out: ", writable.message()));
    }
  }

  auto model = LoadModelFile(ResolveUserPath(model_path));
  if (!model.ok()) return Fail(kTool, model.status().message());
  auto input = ReadInput(ResolveUserPath(input_path));
  if (!input.ok()) return Fail(kTool, input.status().message());

  (*model)->SetTraining(absl::GetFlag(FLAGS_train));
  auto io = absl::GetFlag(FLAGS_truncate) ? CaptureTruncated(**model, paths, *input)
                                          : CaptureWithHooks(**model, paths, *input);
  if (!io.ok()) {
    // The engine words it for C++ callers; the fix here is a flag.
    if (absl::StrContains(io.status().message(), "ran twice in one forward")) {
      return Fail(kTool,
                  absl::StrCat(io.status().message().substr(0, io.status().message().find(':')),
                               ": drop --inputs, or record every call with --accumulate "
                               "(without --truncate)"));
    }
    return Fail(kTool, io.status().message());
  }

  if (!out.empty()) {
    const std::string out_path = ResolveUserPath(out);
    if (absl::Status s = WriteTorchFile(out_path, ForPython(IoDictToIValue(*io))); !s.ok()) {
      return Fail(kTool, s.message());
    }
    std::cout << "wrote " << paths.size() << " module(s) to " << out_path << "\n";
    return 0;
  }
  for (const std::string& path : paths) {
    for (const auto& [io_type, value] : (*io)[path]) {
      std::cout << path << " " << io_type << " " << DescribeValue(value) << " " << Checksum(value)
                << "\n";
    }
  }
  return 0;
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) { return kd::FinishOutput(kd::kTool, kd::Main(argc, argv)); }
