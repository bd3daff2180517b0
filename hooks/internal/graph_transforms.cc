#include "hooks/internal/graph_transforms.h"

#include <algorithm>
#include <utility>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kd {
namespace hooks_internal {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// One pass of InPlaceWriters over `graph`, growing `aliases`.
std::map<Node*, std::string> InPlaceWritersOnce(Graph& graph, std::set<const Value*>& aliases,
                                                Value* self);

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

torch::jit::GraphFunction& Callee(Node* call) {
  auto cls = call->input(0)->type()->expect<c10::ClassType>();
  return torch::jit::toGraphFunction(cls->getMethod(call->s(c10::attr::name)));
}

// How many of `call`'s arguments (self not counted) its caller gave: TorchScript fills in
// defaults, so trailing arguments that are constants equal to the callee's defaults are left
// out, and a Python hook's positional arguments come out.
size_t GivenArguments(Node* call) {
  size_t n = call->inputs().size() - 1;
  if (call->input(0)->type()->cast<c10::ClassType>() == nullptr) return n;
  const std::vector<c10::Argument>& schema = Callee(call).getSchema().arguments();
  while (n > 0 && n < schema.size()) {
    const std::optional<c10::IValue> value = torch::jit::toIValue(call->input(n));
    const std::optional<c10::IValue>& fallback = schema[n].default_value();
    if (!value || !fallback || !(*value == *fallback)) break;
    --n;
  }
  return n;
}

// Places kd::tap(args..., output) right after `call`, with attributes sink, site and copy 0
// (copying nothing yet).
void InsertTap(TappedGraph& out, Node* call, const std::string& path, int64_t sink) {
  Graph& graph = *out.graph;
  torch::jit::WithInsertPoint guard(call->next());
  std::vector<Value*> inputs;
  for (Value* arg : call->inputs().slice(1, GivenArguments(call))) inputs.push_back(arg);
  inputs.push_back(call->outputs().at(0));
  Node* tap = graph.insertNode(
      graph.create(c10::Symbol::fromQualString(kTapOp), inputs, /*num_outputs=*/0));
  tap->i_(TapAttr::kSink, sink);
  tap->i_(TapAttr::kSite, static_cast<int64_t>(out.sites.size()));
  tap->i_(TapAttr::kCopy, 0);
  out.sites.push_back(path);
}

// Whether a node after `tap` may write one of `values` in place.
bool WrittenAfter(Graph& graph, Node* tap, const std::set<const Value*>& values, Value* self) {
  for (const auto& [node, how] : InPlaceWriters(graph, values, self)) {
    if (node->isAfter(tap)) return true;
  }
  return false;
}

// Sets each tap's copy flags: the args or output of a call in `as_returned` that a later node
// may write in place are copied by the tap.
void SetCopyFlags(TappedGraph& out, const std::set<std::string>& as_returned) {
  Graph& graph = *out.graph;
  Value* self = graph.inputs().at(0);
  for (Node* node : AllNodes(graph.block())) {
    if (node->kind() != c10::Symbol::fromQualString(kTapOp)) continue;
    const int64_t site = node->i(TapAttr::kSite);
    if (!as_returned.count(out.sites[site])) continue;
    const auto inputs = node->inputs();
    const std::set<const Value*> arg_values(inputs.begin(), inputs.end() - 1);
    const int64_t copy = (WrittenAfter(graph, node, arg_values, self) ? kCopyArgs : 0) |
                         (WrittenAfter(graph, node, {inputs.back()}, self) ? kCopyOutput : 0);
    node->i_(TapAttr::kCopy, copy);
  }
}

}  // namespace

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

bool IsForwardCall(const Node* call) {
  const std::string& name = call->s(c10::attr::name);
  if (name.compare(0, 7, "forward") != 0) return false;
  // forward1, forward2 (traced later calls); forward__0, forward__1 (overloads).
  const size_t digits = name.compare(7, 2, "__") == 0 ? 9 : 7;
  if (digits == 9 && name.size() == 9) return false;
  return std::all_of(name.begin() + digits, name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

std::vector<Node*> AllNodes(torch::jit::Block* block) {
  std::vector<Node*> nodes;
  CollectNodes(block, &nodes);
  return nodes;
}

std::vector<Node*> CallMethods(Graph& graph) {
  std::vector<Node*> calls;
  for (Node* node : AllNodes(graph.block())) {
    if (node->kind() == c10::prim::CallMethod) calls.push_back(node);
  }
  return calls;
}

TappedGraph InsertTaps(Graph& forward, const std::vector<std::string>& paths, int64_t sink,
                       const std::set<std::string>& as_returned) {
  TappedGraph out;
  out.as_returned = as_returned;
  out.graph = forward.copy();
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
      InsertTap(out, call, *path, sink);
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
    if (!found.count(path)) out.missing.push_back(path);
  }
  out.tapped_calls.assign(tapped.begin(), tapped.end());
  SetCopyFlags(out, as_returned);
  return out;
}

std::optional<std::string> Truncate(TappedGraph& tapped, const std::vector<std::string>& paths) {
  Graph& graph = *tapped.graph;

  // Before cutting, find every node that may modify a captured value (the tapped calls'
  // arguments and outputs) in place.
  std::map<Node*, std::string> writers;
  Value* self = graph.inputs().at(0);
  for (Node* call : tapped.tapped_calls) {
    const std::string path = ModulePathOf(call->input(0), self).value_or("?");
    // Its tap copies what later nodes write: no cut can change what it captured.
    if (tapped.as_returned.count(path)) continue;
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
    torch::jit::EliminateDeadCode(tapped.graph);
    for (Node* call : CallMethods(graph)) {
      if (!call->hasUses()) {
        call->destroy();
        changed = true;
      }
    }
  }
  tapped.tapped_calls.clear();  // some were destroyed; the survivors are not needed any more
  const std::vector<Node*> survivors = AllNodes(graph.block());
  const std::set<Node*> alive(survivors.begin(), survivors.end());
  for (const auto& [node, why] : writers) {
    if (!alive.count(node)) {
      return absl::StrCat("cannot truncate the forward after ", absl::StrJoin(paths, ", "), ": ",
                          why,
                          " after the cut, so a truncated run would capture a different value "
                          "than a full run; run without truncation");
    }
  }
  return std::nullopt;
}

std::map<Node*, std::string> InPlaceWriters(Graph& graph, std::set<const Value*> aliases,
                                            Value* self, bool* returns_alias) {
  std::map<Node*, std::string> writers;
  // Until nothing new shares memory: a prim::If or prim::Loop comes before the nodes of its
  // blocks, whose results it passes on.
  for (size_t known = 0; known != aliases.size();) {
    known = aliases.size();
    writers = InPlaceWritersOnce(graph, aliases, self);
  }
  if (returns_alias != nullptr) {
    *returns_alias = false;
    for (const Value* o : graph.outputs()) *returns_alias = *returns_alias || aliases.count(o);
  }
  return writers;
}

namespace {

std::map<Node*, std::string> InPlaceWritersOnce(Graph& graph, std::set<const Value*>& aliases,
                                                Value* self) {
  std::map<Node*, std::string> writers;
  for (Node* node : AllNodes(graph.block())) {
    bool touches = false;
    for (const Value* in : node->inputs()) touches = touches || aliases.count(in);
    // A node with blocks passes on what its blocks return.
    for (torch::jit::Block* block : node->blocks()) {
      for (const Value* returned : block->outputs()) {
        if (aliases.count(returned)) {
          touches = true;
          for (const Value* o : node->outputs()) aliases.insert(o);
        }
      }
    }
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
    if (node->kind() == c10::prim::CallFunction) {
      // A scripted function (torch.nn.functional.relu with inplace=True, say): input 0 is the
      // function, the rest are its arguments.
      auto fn_type = node->input(0)->type()->cast<c10::FunctionType>();
      if (fn_type == nullptr) {
        writers.emplace(node, "a call of an unknown function");
        continue;
      }
      torch::jit::Function* fn = fn_type->function();
      Graph& callee = *torch::jit::toGraphFunction(*fn).graph();
      for (size_t i = 1; i < node->inputs().size(); ++i) {
        if (!aliases.count(node->input(i))) continue;
        bool returned = false;
        if (!InPlaceWriters(callee, {callee.inputs().at(i - 1)}, nullptr, &returned).empty()) {
          writers.emplace(node, absl::StrCat(fn->qualname().qualifiedName(), "()"));
        }
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
  return writers;
}

}  // namespace
}  // namespace hooks_internal
}  // namespace kd
