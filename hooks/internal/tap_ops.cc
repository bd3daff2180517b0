// The taps at run time and the passes that place them before a tapped graph compiles: the
// kd::tap and kd::taps operators (graph_transforms.h), SinkTaps and MergeTaps. Part of the
// graph_transforms library; the graph's other transforms are in graph_transforms.cc.
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include "base/ivalue_util.h"
#include "hooks/internal/graph_transforms.h"

namespace kd {
namespace hooks_internal {
namespace {

// FireTap with copies (copy != 0), out of line: the common case saves fewer registers.
[[gnu::noinline]] void FireTapCopying(TapSink& sink, int64_t site, int64_t copy,
                                      c10::ArrayRef<c10::IValue> args, const c10::IValue& output) {
  std::vector<c10::IValue> args_now(args.begin(), args.end());
  if (copy & kCopyArgs) {
    for (c10::IValue& arg : args_now) arg = CloneValue(arg);
  }
  const c10::IValue output_now = (copy & kCopyOutput) ? CloneValue(output) : output;
  sink.OnTap(site, args, output, args_now, output_now);
}

// Hands one tap's values to `sink`: the graph's own, and (copy != 0) copies of those the rest
// of the graph writes in place, for the sink's HookValues::kAsReturned consumers.
[[gnu::always_inline]] inline void FireTap(TapSink& sink, int64_t site, int64_t copy,
                                           c10::ArrayRef<c10::IValue> args,
                                           const c10::IValue& output) {
  if (copy == 0) [[likely]] {
    sink.OnTap(site, args, output, args, output);
  } else {
    FireTapCopying(sink, site, copy, args, output);
  }
}

// The tap's Operation, made once per node when its graph is compiled: the sink, site and copy
// flags are the node's attributes, so a call pushes nothing but the values it passes.
torch::jit::Operation CreateTap(const torch::jit::Node* node) {
  auto* sink = reinterpret_cast<TapSink*>(node->i(TapAttr::kSink));
  const int64_t site = node->i(TapAttr::kSite);
  const int64_t copy = node->i(TapAttr::kCopy);
  const size_t n = node->inputs().size();  // the args, then the output
  return [sink, site, copy, n](torch::jit::Stack& stack) {
    // Read in place and dropped after: a hooked call pays no copies here.
    const c10::ArrayRef<c10::IValue> in(&*(stack.end() - static_cast<std::ptrdiff_t>(n)), n);
    FireTap(*sink, site, copy, in.slice(0, n - 1), in.back());
    torch::jit::drop(stack, n);
  };
}

// kd::taps: the taps of a run, in order, each reading its args and output where the node's
// layout says.
torch::jit::Operation CreateTaps(const torch::jit::Node* node) {
  auto* sink = reinterpret_cast<TapSink*>(node->i(TapAttr::kSink));
  struct Fired {
    int64_t site, copy, first_arg, args, output;
  };
  std::vector<Fired> taps;
  const std::vector<int64_t>& sites = node->is(TapAttr::kSites);
  const std::vector<int64_t>& copies = node->is(TapAttr::kCopies);
  const std::vector<int64_t>& layout = node->is(TapAttr::kLayout);
  for (size_t t = 0; t < sites.size(); ++t) {
    taps.push_back({sites[t], copies[t], layout[3 * t], layout[3 * t + 1], layout[3 * t + 2]});
  }
  const size_t n = node->inputs().size();
  return [sink, taps = std::move(taps), n](torch::jit::Stack& stack) {
    const c10::ArrayRef<c10::IValue> in(&*(stack.end() - static_cast<std::ptrdiff_t>(n)), n);
    for (const Fired& t : taps) {
      FireTap(*sink, t.site, t.copy, in.slice(t.first_arg, t.args), in[t.output]);
    }
    torch::jit::drop(stack, n);
  };
}

torch::jit::RegisterOperators register_tap_ops({
    torch::jit::Operator(c10::Symbol::fromQualString(kTapOp), CreateTap,
                         c10::AliasAnalysisKind::CONSERVATIVE),
    torch::jit::Operator(c10::Symbol::fromQualString(kTapsOp), CreateTaps,
                         c10::AliasAnalysisKind::CONSERVATIVE),
});

}  // namespace

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

namespace {

// Whether `node` or a node in its blocks has side effects.
bool HasSideEffectsWithin(Node* node) {
  if (node->hasSideEffects()) return true;
  for (torch::jit::Block* block : node->blocks()) {
    for (Node* inner : block->nodes()) {
      if (HasSideEffectsWithin(inner)) return true;
    }
  }
  return false;
}

// SinkTaps within `block` (and, first, within the blocks of its nodes).
void SinkTapsIn(torch::jit::Block* block, const torch::jit::AliasDb& db) {
  const c10::Symbol tap_kind = c10::Symbol::fromQualString(kTapOp);
  std::vector<Node*> pending;   // taps passed, in order, not placed yet
  torch::jit::ValueSet values;  // what they pass
  auto place_before = [&](Node* node) {
    for (Node* tap : pending) tap->moveBefore(node);
    pending.clear();
    values.clear();
  };
  Node* next = nullptr;
  for (Node* node = block->nodes().front(); node != block->return_node(); node = next) {
    next = node->next();
    if (node->kind() == tap_kind) {
      pending.push_back(node);
      values.insert(node->inputs().begin(), node->inputs().end());
      continue;
    }
    for (torch::jit::Block* inner : node->blocks()) SinkTapsIn(inner, db);
    if (!pending.empty() && (HasSideEffectsWithin(node) || db.writesToAlias(node, values))) {
      place_before(node);
    }
  }
  place_before(block->return_node());
}

}  // namespace

void SinkTaps(const std::shared_ptr<Graph>& graph) {
  torch::jit::Inline(*graph);
  const torch::jit::AliasDb db(graph);
  SinkTapsIn(graph->block(), db);
}

namespace {

// Replaces `run` (consecutive taps of one sink, at least two) by one kd::taps node.
void MergeRun(Graph& graph, const std::vector<Node*>& run) {
  std::vector<Value*> inputs;
  std::vector<int64_t> sites, copies, layout;
  // Where `values` are, in order, among the inputs (appended if they are not).
  auto place = [&inputs](c10::ArrayRef<Value*> values) -> int64_t {
    for (size_t i = 0; i + values.size() <= inputs.size(); ++i) {
      if (std::equal(values.begin(), values.end(), inputs.begin() + static_cast<ptrdiff_t>(i))) {
        return static_cast<int64_t>(i);
      }
    }
    inputs.insert(inputs.end(), values.begin(), values.end());
    return static_cast<int64_t>(inputs.size() - values.size());
  };
  for (Node* tap : run) {
    const c10::ArrayRef<Value*> in = tap->inputs();
    const c10::ArrayRef<Value*> args = in.slice(0, in.size() - 1);
    const int64_t first_arg = place(args);
    layout.insert(layout.end(),
                  {first_arg, static_cast<int64_t>(args.size()), place(in.slice(in.size() - 1))});
    sites.push_back(tap->i(TapAttr::kSite));
    copies.push_back(tap->i(TapAttr::kCopy));
  }
  Node* merged = graph.create(c10::Symbol::fromQualString(kTapsOp), inputs, /*num_outputs=*/0);
  merged->i_(TapAttr::kSink, run.front()->i(TapAttr::kSink));
  merged->is_(TapAttr::kSites, std::move(sites));
  merged->is_(TapAttr::kCopies, std::move(copies));
  merged->is_(TapAttr::kLayout, std::move(layout));
  merged->insertBefore(run.front());
  for (Node* tap : run) tap->destroy();
}

void MergeTapsIn(torch::jit::Block* block) {
  const c10::Symbol tap_kind = c10::Symbol::fromQualString(kTapOp);
  std::vector<Node*> run;
  auto end_run = [&] {
    if (run.size() > 1) MergeRun(*block->owningGraph(), run);
    run.clear();
  };
  for (Node* node : block->nodes()) {
    for (torch::jit::Block* inner : node->blocks()) MergeTapsIn(inner);
    if (node->kind() != tap_kind) {
      end_run();
    } else {
      if (!run.empty() && run.front()->i(TapAttr::kSink) != node->i(TapAttr::kSink)) end_run();
      run.push_back(node);
    }
  }
  end_run();
}

}  // namespace

void MergeTaps(Graph& graph) { MergeTapsIn(graph.block()); }

}  // namespace hooks_internal
}  // namespace kd
