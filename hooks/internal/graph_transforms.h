// Pure transforms of TorchScript graphs: the taps that give TorchScript modules forward hooks,
// and the cut that truncates a forward after its last captured module. Nothing here knows a
// kd::Model; hooks/torchscript_model.cc is the adapter that compiles and runs the results.
//
//   torch::jit::Graph& forward = *toGraphFunction(module.get_method("forward")).graph();
//   kd::hooks_internal::TappedGraph tapped = kd::hooks_internal::InsertTaps(forward, {"layer1"},
//   sink); if (!tapped.missing.empty()) ...;  // paths forward never calls
//   std::optional<std::string> refused = kd::hooks_internal::Truncate(tapped, {"layer1"});
//
// Graph facts these rely on (verified on libtorch 1.13 and 2.x; see DESIGN.md): a loaded
// module's forward graph is not inlined (each submodule call is a prim::CallMethod whose
// receiver is a chain of prim::GetAttr from `self`); nested paths need the enclosing calls
// inlined with the three-argument inlineCallTo; dead-code elimination alone keeps unused
// prim::CallMethod nodes (alias analysis assumes they write their arguments).
#ifndef LIBKD_HOOKS_INTERNAL_GRAPH_TRANSFORMS_H_
#define LIBKD_HOOKS_INTERNAL_GRAPH_TRANSFORMS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

namespace kd {
namespace hooks_internal {

// The side-effecting op a tap is: kd::tap(args..., output) -> (), a variadic op whose node
// carries the sink's address, the site and the copy flags as int attributes (TapAttr), read
// once when the graph is compiled. Registered (tap_ops.cc) with CONSERVATIVE alias
// analysis, so dead-code elimination keeps it and what it reads. Running it clones the args
// (copy & kCopyArgs) and the output (copy & kCopyOutput) and hands the sink both the
// originals and those.
inline constexpr char kTapOp[] = "kd::tap";
inline constexpr int64_t kCopyArgs = 1;
inline constexpr int64_t kCopyOutput = 2;
// Consecutive taps merged (MergeTaps): kd::taps(values...) -> (), one op that fires each tap of
// the run in order; the node carries the sink and, per tap, its site, copy flags and where its
// args (a run of the values) and output are (TapAttr::kLayout: first arg, arg count, output).
inline constexpr char kTapsOp[] = "kd::taps";
struct TapAttr {
  static inline const c10::Symbol kSink = c10::Symbol::attr("kd_sink");
  static inline const c10::Symbol kSite = c10::Symbol::attr("kd_site");
  static inline const c10::Symbol kCopy = c10::Symbol::attr("kd_copy");
  static inline const c10::Symbol kSites = c10::Symbol::attr("kd_sites");
  static inline const c10::Symbol kCopies = c10::Symbol::attr("kd_copies");
  static inline const c10::Symbol kLayout = c10::Symbol::attr("kd_layout");
};

// Receives the values of kd::tap ops. The graph carries the sink's address as a constant: the
// owner of a tapped graph must keep its sink alive while the graph can run.
class TapSink {
 public:
  virtual ~TapSink() = default;
  // `args` and `output` are the graph's own values; `args_now` and `output_now` the same
  // objects (args_now.data() == args.data()) or, where the tap copies, copies taken at the
  // tap. They live for the call.
  virtual void OnTap(int64_t site, c10::ArrayRef<c10::IValue> args, const c10::IValue& output,
                     c10::ArrayRef<c10::IValue> args_now, const c10::IValue& output_now) = 0;
};

// The module path of a module value: the chain of prim::GetAttr from `self` ("layer2.0"),
// "" for `self`; nullopt if `value` is not reached that way.
std::optional<std::string> ModulePathOf(torch::jit::Value* value, torch::jit::Value* self);

// Whether a prim::CallMethod calls a module's forward: "forward"; "forward1", "forward2", ...
// (torch.jit.trace's names of a module's later calls); "forward__0", "forward__1", ... (the
// overloads TorchScript compiles from @torch.jit._overload_method, as in DenseNet and LSTM).
bool IsForwardCall(const torch::jit::Node* call);

// Every node of `block` and of the blocks nested in it, in order.
std::vector<torch::jit::Node*> AllNodes(torch::jit::Block* block);

// The prim::CallMethod nodes of `graph`, nested blocks included.
std::vector<torch::jit::Node*> CallMethods(torch::jit::Graph& graph);

// A copy of a forward graph with taps.
struct TappedGraph {
  std::shared_ptr<torch::jit::Graph> graph;
  std::vector<std::string> sites;               // a tap's site index -> its module path
  std::vector<torch::jit::Node*> tapped_calls;  // the calls a tap follows
  std::vector<std::string> missing;             // requested paths forward never calls
  std::set<std::string> as_returned;            // paths whose taps copy what is written later
};

// Copies `forward` (which is not modified; libtorch's Graph::copy is not const), inlines the
// calls on the way to `paths` and places kd::tap(sink, site, copy, (args...), output) right
// after every call of a module in `paths`. For paths in `as_returned`, a tap copies the args
// or the output when a later node may write them in place (InPlaceWriters), so that it passes
// on the values as the call took and returned them; otherwise it passes the graph's own.
TappedGraph InsertTaps(torch::jit::Graph& forward, const std::vector<std::string>& paths,
                       int64_t sink, const std::set<std::string>& as_returned = {});

// Cuts `tapped` after the last calls of its tapped modules: the graph returns None and every
// module call and op the taps do not need is removed. Returns the reason when the cut would
// change a captured value (a removed op or module modifies a tapped call's input or output,
// or something sharing its memory, in place, and the tap passes references: paths not in
// `as_returned`); the graph is then unusable.
std::optional<std::string> Truncate(TappedGraph& tapped, const std::vector<std::string>& paths);

// Inlines every module call of `graph` (a tapped graph ready to compile) and moves each tap
// down its block past the nodes that can neither change what it passes nor see that it has not
// run: nodes that write none of its values in place (torch's AliasDb) and have no side effects
// (exceptions, prints, calls left, other taps' ops keep theirs). The taps keep their order; they
// fire later in the forward with the same values. Why: a tap is a side-effecting op, and one
// between two differentiable ops splits the autodiff subgraph the graph executor would make of
// them under autograd (a chain of small ops then records one backward node per op instead of
// one for all); gathered after the run of ops, they leave it whole.
void SinkTaps(const std::shared_ptr<torch::jit::Graph>& graph);

// Replaces each run of consecutive taps (as SinkTaps leaves them) by one kd::taps op: the taps
// fire in the same order with the same values, for one interpreter op and one load of each
// distinct value (a module's output that is the next one's input is passed once). The last
// step before a tapped graph is compiled: the other transforms know kd::tap only.
void MergeTaps(torch::jit::Graph& graph);

// The nodes of `graph` that may modify one of `aliases` in place, with what they are
// ("aten::mul_", "bump.forward()"). Follows what shares memory through ops whose schema says
// an output aliases an input (views), containers and control flow, and into module calls.
// Module state (parameters, buffers) is not followed. `returns_alias` (if given) tells
// whether the graph's output may share memory with `aliases`.
std::map<torch::jit::Node*, std::string> InPlaceWriters(torch::jit::Graph& graph,
                                                        std::set<const torch::jit::Value*> aliases,
                                                        torch::jit::Value* self,
                                                        bool* returns_alias = nullptr);

}  // namespace hooks_internal
}  // namespace kd

#endif  // LIBKD_HOOKS_INTERNAL_GRAPH_TRANSFORMS_H_
