// Internal to //distill/losses:loss_benchmark: one timed case (a loss through the criterion
// against its formula written inline), and the cases of torchdistill's other methods
// (loss_benchmark_method_cases.cc).
#ifndef LIBKD_DISTILL_LOSSES_INTERNAL_LOSS_BENCHMARK_CASE_H_
#define LIBKD_DISTILL_LOSSES_INTERNAL_LOSS_BENCHMARK_CASE_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace kd {
namespace loss_benchmark {

using Inputs = std::map<std::string, at::Tensor>;

struct Case {
  std::string name;  // also the peer script's key
  std::string key;
  std::string kwargs;  // text of LossTermConfig.kwargs
  Inputs inputs;       // float inputs are differentiated
  std::function<at::Tensor(const Inputs&)> inline_fn;
};

// Training-sized inputs the cases share.
struct Shapes {
  at::Tensor logits_s, logits_t;  // (256, 100)
  at::Tensor map_s, map_t;        // (64, 64, 16, 16)
  at::Tensor emb_s, emb_t;        // (64, 256)
};

// FT, KTA, AltActTransfer, ChSim, Affinity, DISTPlus, SRD, HierarchicalContext, PADL2, VID,
// SKD direction and instance, SSKD and AuxSSKD, and torch.nn's Huber and NLL.
std::vector<Case> MethodCases(const Shapes& shapes);

}  // namespace loss_benchmark
}  // namespace kd

#endif  // LIBKD_DISTILL_LOSSES_INTERNAL_LOSS_BENCHMARK_CASE_H_
