#include "hooks/torchscript_model.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <map>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>
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

void CollectNodes(torch::jit::Block* block, std::vector<Node*>* out) {
  for (Node* node : block->nodes()) {
    out->push_back(node);
    for (torch::jit::Block* sub : node->blocks()) CollectNodes(sub, out);
  }
}

std::vector<Node*> CallMethods(Graph& graph) {
  std::vector<Node*> nodes, calls;
  CollectNodes(graph.block(), &nodes);
  for (Node* node : nodes) {
    if (node->kind() == c10::prim::CallMethod) calls.push_back(node);
  }
  return calls;
}

// A call of a module's forward: "forward", or "forward1", "forward2", ... which
// torch.jit.trace names the second, third, ... call of one module in a forward.
bool IsForwardCall(Node* call) {
  const std::string& name = call->s(c10::attr::name);
  if (name.compare(0, 7, "forward") != 0) return false;
  return std::all_of(name.begin() + 7, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

torch::jit::GraphFunction& Callee(Node* call) {
  auto cls = call->input(0)->type()->expect<c10::ClassType>();
  return torch::jit::toGraphFunction(cls->getMethod(call->s(c10::attr::name)));
}

std::string ShortTypeName(const torch::jit::Module& module) {
  return module.type()->name() ? module.type()->name()->name() : module.type()->str();
}

// A copy of forward's graph with taps, compiled into a function that runs with the module as
// `self`; it receives its own taps and hands them to the model's tap list.
class CompiledForward final : public TapSink {
 public:
  CompiledForward(internal::TapList* taps) : taps_(taps) {}

  void OnTap(int64_t site, c10::IValue args, c10::IValue output) override {
    taps_->Dispatch(sites[site], args.toTupleRef().elements().vec(), output);
  }

  int64_t address() const {
    return static_cast<int64_t>(reinterpret_cast<intptr_t>(static_cast<const TapSink*>(this)));
  }

  std::shared_ptr<Graph> graph;
  std::vector<std::string> sites;    // site index -> module path
  std::vector<Node*> tapped_calls;   // the calls of tapped modules, before compilation
  std::unique_ptr<torch::jit::GraphFunction> function;

 private:
  internal::TapList* taps_;
};

class TorchScriptModel final : public Model {
 public:
  explicit TorchScriptModel(torch::jit::Module module) : module_(std::move(module)) {}

  std::string kind() const override { return "torchscript"; }

  c10::IValue Forward(std::vector<c10::IValue> args, const Kwargs& kwargs) override {
    if (dirty_) Rebuild();
    return Run(tapped_.get(), std::move(args), kwargs);
  }

  absl::StatusOr<c10::IValue> ForwardTruncated(std::vector<c10::IValue> args,
                                               const Kwargs& kwargs,
                                               const std::vector<std::string>& stop_after) override {
    std::vector<std::string> paths = stop_after;
    std::sort(paths.begin(), paths.end());
    paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
    for (const std::string& path : paths) {
      if (path.empty()) {
        return absl::InvalidArgumentError(
            "cannot truncate after the root module \"\": that is the whole forward");
      }
      if (absl::Status s = CheckModulePath(path); !s.ok()) return s;
    }
    const std::string key = absl::StrJoin(paths, ",");
    auto it = truncated_.find(key);
    if (it == truncated_.end()) {
      auto compiled = std::make_unique<CompiledForward>(&taps_);
      absl::Status built =
          CallTorch([&] { BuildTruncated(paths, *compiled); }, absl::StatusCode::kFailedPrecondition);
      if (!built.ok()) return built;
      it = truncated_.emplace(key, std::move(compiled)).first;
    }
    return CallTorch([&] {
      return Run(it->second.get(), std::move(args), kwargs, /*tap_root=*/false);
    });
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
      absl::Status built = CallTorch(
          [&] {
            CompiledForward probe(&taps_);
            BuildTappedGraph({key}, probe);
          },
          absl::StatusCode::kFailedPrecondition);
      if (!built.ok()) return built;
      dirty_ = true;
    }
    return taps_.Add(std::move(key), std::move(fn),
                     [this](const internal::TapList::Tap& removed) {
                       if (!taps_.HasPath(removed.path)) dirty_ = true;
                     });
  }

  absl::Status CheckTapsFired() const override {
    // Every tapped call site in a TorchScript graph is a hook point: nothing can be bypassed.
    return absl::OkStatus();
  }

  const torch::jit::Module& module() const { return module_; }

 private:
  // Runs `compiled` (or the module's own forward if null) and, if `tap_root`, the root taps.
  c10::IValue Run(CompiledForward* compiled, std::vector<c10::IValue> args,
                  const Kwargs& kwargs, bool tap_root = true) {
    tap_root = tap_root && taps_.HasPath("");
    std::vector<c10::IValue> root_args;
    if (tap_root) root_args = args;
    c10::IValue output;
    if (compiled == nullptr) {
      output = module_.forward(std::move(args), kwargs);
    } else {
      torch::jit::Stack stack = std::move(args);
      stack.insert(stack.begin(), module_._ivalue());
      module_.get_method("forward").function().getSchema().checkAndNormalizeInputs(stack,
                                                                                  kwargs);
      compiled->function->run(stack);
      output = torch::jit::pop(stack);
    }
    if (tap_root) taps_.Dispatch("", root_args, output);
    return output;
  }

  void Rebuild() {
    dirty_ = false;
    tapped_.reset();  // cut graphs stay: they depend on their paths only, not on other taps
    std::vector<std::string> paths = taps_.Paths();
    paths.erase(std::remove(paths.begin(), paths.end(), std::string()), paths.end());
    if (paths.empty()) return;
    auto compiled = std::make_unique<CompiledForward>(&taps_);
    BuildTappedGraph(paths, *compiled);
    Compile(*compiled);
    tapped_ = std::move(compiled);
  }

  // Copies forward's graph into `out`, inlines the calls on the way to `paths` and places a
  // kd::tap after each call of a module in `paths`. Throws naming a path forward never calls.
  void BuildTappedGraph(const std::vector<std::string>& paths, CompiledForward& out) {
    const torch::jit::GraphFunction& forward =
        torch::jit::toGraphFunction(module_.get_method("forward").function());
    out.graph = forward.graph()->copy();
    Graph& graph = *out.graph;
    Value* self = graph.inputs().at(0);

    const std::set<std::string> targets(paths.begin(), paths.end());
    auto leads_to_target = [&](const std::string& path) {
      return std::any_of(targets.begin(), targets.end(),
                         [&](const std::string& t) { return IsProperAncestor(path, t); });
    };
    std::set<std::string> found;
    std::set<Node*> tapped;
    // Tap every visible call of a target, then inline the calls on ancestors of targets (a
    // target may be an ancestor of another: its tap stays after its inlined body, where the
    // inlined outputs replace the call's), until no call is left to inline.
    for (bool changed = true; changed;) {
      changed = false;
      std::vector<Node*> calls = CallMethods(graph);
      for (Node* call : calls) {
        if (!IsForwardCall(call) || tapped.count(call)) continue;
        std::optional<std::string> path = ModulePathOf(call->input(0), self);
        if (!path || !targets.count(*path)) continue;
        found.insert(*path);
        InsertTap(out, call, *path);
        tapped.insert(call);
      }
      for (Node* call : calls) {
        std::optional<std::string> path = ModulePathOf(call->input(0), self);
        if (!path || !leads_to_target(*path)) continue;
        if (call->input(0)->type()->cast<c10::ClassType>() == nullptr) {
          continue;  // a module interface: its callee is not known statically
        }
        torch::jit::GraphFunction& callee = Callee(call);
        tapped.erase(call);
        torch::jit::inlineCallTo(call, &callee, callee.graph().get());
        changed = true;
      }
    }
    for (const std::string& path : paths) {
      TORCH_CHECK(found.count(path), "module \"", path, "\" (", ModuleType(path),
                  ") exists but forward never calls it, so it has no output to capture");
    }
    out.tapped_calls.assign(tapped.begin(), tapped.end());
  }

  // Places kd::tap(sink, site, (args...), output) right after `call`.
  void InsertTap(CompiledForward& out, Node* call, const std::string& path) {
    Graph& graph = *out.graph;
    torch::jit::WithInsertPoint guard(call->next());
    Value* args = graph.insertNode(graph.createTuple(call->inputs().slice(1)))->output();
    Value* sink = graph.insertConstant(c10::IValue(out.address()));
    Value* site = graph.insertConstant(c10::IValue(static_cast<int64_t>(out.sites.size())));
    graph.insertNode(graph.create(c10::Symbol::fromQualString(kTapOp),
                                  {sink, site, args, call->outputs().at(0)},
                                  /*num_outputs=*/0));
    out.sites.push_back(path);
  }

  void Compile(CompiledForward& compiled) {
    compiled.tapped_calls.clear();
    compiled.function = std::make_unique<torch::jit::GraphFunction>(
        c10::QualifiedName("__kd_tapped_forward"), compiled.graph, nullptr);
  }

  // The tapped graph of `paths`, cut after their last calls: forward returns None, and every
  // module call and op that the taps do not need is removed. Throws (FailedPrecondition)
  // where the cut would change a captured value: a removed op or module that modifies a
  // captured value (or something sharing its memory) in place.
  void BuildTruncated(const std::vector<std::string>& paths, CompiledForward& out) {
    BuildTappedGraph(paths, out);
    Graph& graph = *out.graph;

    // Before cutting, find every node that may modify a captured value (the tapped calls'
    // arguments and outputs) in place.
    std::map<Node*, std::string> writers;
    Value* self = graph.inputs().at(0);
    for (Node* call : out.tapped_calls) {
      const std::string path = ModulePathOf(call->input(0), self).value_or("?");
      std::vector<std::pair<Value*, std::string>> values;
      for (size_t i = 1; i < call->inputs().size(); ++i) {
        values.emplace_back(call->input(i), absl::StrCat("the input of \"", path, "\""));
      }
      values.emplace_back(call->output(), absl::StrCat("the output of \"", path, "\""));
      for (const auto& [value, what] : values) {
        for (const auto& [node, how] : InPlaceWriters(graph, {value}, self)) {
          writers.emplace(node, absl::StrCat(how, " modifies ", what, " in place"));
        }
      }
    }

    // Cut: return None, then remove unused module calls and dead code until nothing changes.
    // (Dead-code elimination alone keeps calls: alias analysis takes them to write their
    // arguments. In eval mode module calls are pure, and in training mode the calls removed
    // are exactly those after the cut, whose effects — running statistics — are skipped.)
    {
      torch::jit::WithInsertPoint guard(graph.return_node());
      Value* none = graph.insertConstant(c10::IValue());
      for (size_t i = 0; i < graph.outputs().size(); ++i) graph.return_node()->replaceInput(i, none);
    }
    for (bool changed = true; changed;) {
      changed = false;
      torch::jit::EliminateDeadCode(out.graph);
      for (Node* call : CallMethods(graph)) {
        if (!call->hasUses()) {
          call->destroy();
          changed = true;
        }
      }
    }
    std::vector<Node*> survivors;
    CollectNodes(graph.block(), &survivors);
    const std::set<Node*> alive(survivors.begin(), survivors.end());
    for (const auto& [node, why] : writers) {
      TORCH_CHECK(alive.count(node), "cannot truncate the forward after ",
                  absl::StrJoin(paths, ", "), ": ", why,
                  " after the cut, so a truncated run would capture a different value than a "
                  "full run; run without truncation");
    }
    Compile(out);
  }

  // The nodes of `graph` that may modify one of `start` in place, with what they are
  // ("aten::mul_", "bump.forward()"). Follows what shares memory with `start` through ops
  // whose schema says an output aliases an input (views), containers and control flow, and
  // into module calls. Module state (parameters, buffers) is not followed: a module updating
  // its own buffers (BatchNorm's num_batches_tracked) modifies no captured value.
  // `returns_alias` (if given) tells whether the graph's output may share memory with
  // `start`.
  std::map<Node*, std::string> InPlaceWriters(Graph& graph, std::set<const Value*> aliases,
                                              Value* self, bool* returns_alias = nullptr) const {
    std::map<Node*, std::string> writers;
    std::vector<Node*> nodes;
    CollectNodes(graph.block(), &nodes);
    for (Node* node : nodes) {
      bool touches = false;
      for (const Value* in : node->inputs()) touches = touches || aliases.count(in);
      if (!touches || node->kind() == c10::Symbol::fromQualString(kTapOp)) continue;
      if (node->kind() == c10::prim::CallMethod) {
        if (node->input(0)->type()->cast<c10::ClassType>() == nullptr) {
          writers.emplace(node, "a call through a module interface");
          continue;
        }
        const std::string callee_name =
            absl::StrCat(ModulePathOf(node->input(0), self).value_or("a module"), ".",
                         node->s(c10::attr::name), "()");
        Graph& callee = *Callee(node).graph();
        for (size_t i = 1; i < node->inputs().size(); ++i) {
          if (!aliases.count(node->input(i))) continue;
          bool returned = false;
          if (!InPlaceWriters(callee, {callee.inputs().at(i)}, callee.inputs().at(0), &returned)
                   .empty()) {
            writers.emplace(node, callee_name);
          }
          // The result shares memory with the argument if the callee returns (a view of) it.
          if (returned) {
            for (const Value* o : node->outputs()) aliases.insert(o);
          }
        }
        continue;
      }
      const c10::FunctionSchema* schema = node->maybeSchema();
      if (schema == nullptr) {
        // prim ops without a schema (containers, control flow): whatever they produce may
        // share memory with what they take.
        for (const Value* o : node->outputs()) aliases.insert(o);
        for (torch::jit::Block* block : node->blocks()) {
          for (const Value* p : block->inputs()) aliases.insert(p);
        }
        continue;
      }
      for (size_t i = 0; i < node->inputs().size() && i < schema->arguments().size(); ++i) {
        const c10::AliasInfo* info = schema->arguments()[i].alias_info();
        if (info != nullptr && info->isWrite() && aliases.count(node->input(i))) {
          writers.emplace(node, node->kind().toQualString());
        }
      }
      for (size_t o = 0; o < node->outputs().size() && o < schema->returns().size(); ++o) {
        if (schema->returns()[o].alias_info() != nullptr) aliases.insert(node->output(o));
      }
    }
    if (returns_alias != nullptr) {
      *returns_alias = false;
      for (const Value* o : graph.outputs()) *returns_alias = *returns_alias || aliases.count(o);
    }
    return writers;
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
  std::unique_ptr<CompiledForward> tapped_;  // null: run the module's own forward
  std::map<std::string, std::unique_ptr<CompiledForward>> truncated_;  // by joined paths
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
