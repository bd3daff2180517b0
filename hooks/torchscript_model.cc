#include "hooks/torchscript_model.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>
#include <torch/csrc/jit/serialization/import.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "base/nearest.h"
#include "base/torch_status.h"
#include "hooks/internal/tap_list.h"

namespace kd {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

constexpr char kTapOp[] = "kd::tap";

// Receives the values of a `kd::tap` op. The graph carries the sink's address as a constant;
// a tapped graph is owned by its sink, so the address is valid whenever the graph runs.
class TapSink {
 public:
  virtual ~TapSink() = default;
  virtual void OnTap(int64_t site, c10::IValue args, c10::IValue output) = 0;
};

// kd::tap(int sink, int site, Any args, Any output) -> (): CONSERVATIVE alias analysis marks
// it as having side effects, so dead-code elimination keeps it and what it reads.
torch::jit::RegisterOperators register_tap_op({torch::jit::Operator(
    "kd::tap(int sink, int site, Any args, Any output) -> ()",
    [](torch::jit::Stack& stack) {
      c10::IValue output = torch::jit::pop(stack);
      c10::IValue args = torch::jit::pop(stack);
      const int64_t site = torch::jit::pop(stack).toInt();
      auto* sink = reinterpret_cast<TapSink*>(torch::jit::pop(stack).toInt());
      sink->OnTap(site, std::move(args), std::move(output));
    },
    c10::AliasAnalysisKind::CONSERVATIVE)});

// The module path of a module value in `graph`: a chain of prim::GetAttr from `self`.
std::optional<std::string> ModulePathOf(Value* value, Value* self) {
  std::vector<std::string> parts;
  while (value != self) {
    Node* node = value->node();
    if (node->kind() != c10::prim::GetAttr) return std::nullopt;
    parts.push_back(node->s(c10::attr::name));
    value = node->input(0);
  }
  std::reverse(parts.begin(), parts.end());
  return absl::StrJoin(parts, ".");
}

bool IsProperAncestor(const std::string& ancestor, const std::string& path) {
  if (ancestor.empty()) return !path.empty();
  return path.size() > ancestor.size() && path.compare(0, ancestor.size(), ancestor) == 0 &&
         path[ancestor.size()] == '.';
}

void CollectCallMethods(torch::jit::Block* block, std::vector<Node*>* out) {
  for (Node* node : block->nodes()) {
    if (node->kind() == c10::prim::CallMethod) out->push_back(node);
    for (torch::jit::Block* sub : node->blocks()) CollectCallMethods(sub, out);
  }
}

std::string ShortTypeName(const torch::jit::Module& module) {
  return module.type()->name() ? module.type()->name()->name() : module.type()->str();
}

class TorchScriptModel final : public Model, private TapSink {
 public:
  explicit TorchScriptModel(torch::jit::Module module) : module_(std::move(module)) {}

  std::string kind() const override { return "torchscript"; }

  c10::IValue Forward(std::vector<c10::IValue> args, const Kwargs& kwargs) override {
    const bool tap_root = taps_.HasPath("");
    std::vector<c10::IValue> root_args;
    if (tap_root) root_args = args;
    c10::IValue output;
    if (tapped_paths_.empty() && !dirty_) {
      output = module_.forward(std::move(args), kwargs);
    } else {
      if (dirty_) Rebuild();
      if (tapped_forward_ == nullptr) {
        output = module_.forward(std::move(args), kwargs);
      } else {
        torch::jit::Stack stack = std::move(args);
        stack.insert(stack.begin(), module_._ivalue());
        module_.get_method("forward").function().getSchema().checkAndNormalizeInputs(stack,
                                                                                    kwargs);
        tapped_forward_->run(stack);
        output = torch::jit::pop(stack);
      }
    }
    if (tap_root) taps_.Dispatch("", root_args, output);
    return output;
  }

  std::vector<ModuleInfo> NamedModules() const override {
    std::vector<ModuleInfo> out;
    for (const auto& item : module_.named_modules()) {
      out.push_back(ModuleInfo{item.name, ShortTypeName(item.value)});
    }
    return out;
  }

  std::vector<NamedTensor> NamedParameters() const override {
    std::vector<NamedTensor> out;
    for (const auto& item : module_.named_parameters(/*recurse=*/true)) {
      out.emplace_back(item.name, item.value);
    }
    return out;
  }

  std::vector<NamedTensor> NamedBuffers() const override {
    std::vector<NamedTensor> out;
    for (const auto& item : module_.named_buffers(/*recurse=*/true)) {
      out.emplace_back(item.name, item.value);
    }
    return out;
  }

  void SetTraining(bool training) override { module_.train(training); }
  bool is_training() const override { return module_.is_training(); }

  absl::StatusOr<TapHandle> AddTap(absl::string_view path, TapFn fn) override {
    if (absl::Status s = CheckModulePath(path); !s.ok()) return s;
    std::string key(path);
    if (!key.empty() && !taps_.HasPath(key)) {
      // Build the graph now, so that a module forward never calls is reported here.
      std::vector<std::string> paths = taps_.Paths();
      paths.erase(std::remove(paths.begin(), paths.end(), std::string()), paths.end());
      paths.push_back(key);
      absl::Status built = CallTorch([&] { BuildTappedForward(paths, /*check_only=*/true); },
                                     absl::StatusCode::kFailedPrecondition);
      if (!built.ok()) return built;
      dirty_ = true;
    }
    return taps_.Add(std::move(key), std::move(fn), [this](const internal::TapList::Tap& removed) {
      if (!taps_.HasPath(removed.path)) dirty_ = true;
    });
  }

  absl::Status CheckTapsFired() const override {
    // Every tapped call site in a TorchScript graph is a hook point: nothing can be bypassed.
    return absl::OkStatus();
  }

  const torch::jit::Module& module() const { return module_; }

 private:
  struct Site {
    std::string path;
  };

  void OnTap(int64_t site, c10::IValue args, c10::IValue output) override {
    std::vector<c10::IValue> arg_list = args.toTupleRef().elements().vec();
    taps_.Dispatch(sites_[site], arg_list, output);
  }

  void Rebuild() {
    dirty_ = false;
    std::vector<std::string> paths = taps_.Paths();
    paths.erase(std::remove(paths.begin(), paths.end(), std::string()), paths.end());
    tapped_paths_ = paths;
    tapped_forward_.reset();
    sites_.clear();
    if (!paths.empty()) BuildTappedForward(paths, /*check_only=*/false);
  }

  // Copies forward's graph, inlines the calls on the way to `paths` and places a kd::tap
  // after each call of a module in `paths`. Throws naming a path that forward never calls.
  void BuildTappedForward(const std::vector<std::string>& paths, bool check_only) {
    const torch::jit::GraphFunction& forward =
        torch::jit::toGraphFunction(module_.get_method("forward").function());
    std::shared_ptr<Graph> graph = forward.graph()->copy();
    Value* self = graph->inputs().at(0);

    const std::set<std::string> targets(paths.begin(), paths.end());
    auto leads_to_target = [&](const std::string& path) {
      return std::any_of(targets.begin(), targets.end(),
                         [&](const std::string& t) { return IsProperAncestor(path, t); });
    };
    std::set<std::string> found;
    std::vector<std::string> sites;
    std::set<Node*> tapped;
    // Tap every visible call of a target, then inline the calls on ancestors of targets (a
    // target may be an ancestor of another: its tap stays after its inlined body, where the
    // inlined outputs replace the call's), until no call is left to inline.
    for (bool changed = true; changed;) {
      changed = false;
      std::vector<Node*> calls;
      CollectCallMethods(graph->block(), &calls);
      for (Node* call : calls) {
        if (call->s(c10::attr::name) != "forward" || tapped.count(call)) continue;
        std::optional<std::string> path = ModulePathOf(call->input(0), self);
        if (!path || !targets.count(*path)) continue;
        found.insert(*path);
        InsertTap(*graph, call, static_cast<int64_t>(sites.size()));
        tapped.insert(call);
        sites.push_back(*path);
      }
      for (Node* call : calls) {
        std::optional<std::string> path = ModulePathOf(call->input(0), self);
        if (!path || !leads_to_target(*path)) continue;
        auto cls = call->input(0)->type()->cast<c10::ClassType>();
        if (cls == nullptr) continue;  // a module interface: its callee is not known statically
        torch::jit::GraphFunction& callee =
            torch::jit::toGraphFunction(cls->getMethod(call->s(c10::attr::name)));
        tapped.erase(call);
        torch::jit::inlineCallTo(call, &callee, callee.graph().get());
        changed = true;
      }
    }
    for (const std::string& path : paths) {
      TORCH_CHECK(found.count(path), "module \"", path, "\" (", ModuleType(path),
                  ") exists but forward never calls it, so it has no output to capture");
    }
    if (check_only) return;
    sites_ = std::move(sites);
    tapped_forward_ = std::make_unique<torch::jit::GraphFunction>(
        c10::QualifiedName("__kd_tapped_forward"), graph, nullptr);
  }

  // Places kd::tap(sink, site, (args...), output) right after `call`.
  void InsertTap(Graph& graph, Node* call, int64_t site) {
    torch::jit::WithInsertPoint guard(call->next());
    Value* args = graph.insertNode(graph.createTuple(call->inputs().slice(1)))->output();
    const auto sink_address =
        static_cast<int64_t>(reinterpret_cast<intptr_t>(static_cast<TapSink*>(this)));
    Value* sink = graph.insertConstant(c10::IValue(sink_address));
    Value* site_value = graph.insertConstant(c10::IValue(site));
    graph.insertNode(graph.create(c10::Symbol::fromQualString(kTapOp),
                                  {sink, site_value, args, call->outputs().at(0)},
                                  /*num_outputs=*/0));
  }

  std::string ModuleType(const std::string& path) const {
    for (const ModuleInfo& m : NamedModules()) {
      if (m.path == path) return m.type;
    }
    return "?";
  }

  torch::jit::Module module_;
  internal::TapList taps_;
  bool dirty_ = false;
  std::vector<std::string> tapped_paths_;
  std::vector<std::string> sites_;  // site index -> module path
  std::unique_ptr<torch::jit::GraphFunction> tapped_forward_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadTorchScriptModel(const std::string& path) {
  // Read the bytes ourselves, so that a missing or unreadable file gets errno's reason.
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  if (bytes->size() < 4 || bytes->compare(0, 2, "PK") != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a TorchScript file (expected the zip archive torch.jit.save writes; got ",
        bytes->size(), " bytes that are not a zip archive)"));
  }
  absl::StatusOr<torch::jit::Module> module = CallTorch(
      [&] {
        std::istringstream stream(*bytes);
        return torch::jit::load(stream, c10::Device(c10::kCPU));
      },
      absl::StatusCode::kInvalidArgument);
  if (!module.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a TorchScript module (save it with torch.jit.save, not torch.save): ",
        module.status().message()));
  }
  return std::unique_ptr<Model>(std::make_unique<TorchScriptModel>(*std::move(module)));
}

std::unique_ptr<Model> MakeTorchScriptModel(const torch::jit::Module& module) {
  return std::make_unique<TorchScriptModel>(module);
}

const torch::jit::Module* GetTorchScriptModule(const Model& model) {
  const auto* ts = dynamic_cast<const TorchScriptModel*>(&model);
  return ts == nullptr ? nullptr : &ts->module();
}

}  // namespace kd
