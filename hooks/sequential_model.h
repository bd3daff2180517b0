// torchdistill's redesigned stage model: a chain of modules of one model, run one after the
// other (its `sequential` model section, as FitNets' hint stage trims a student to its layers up
// to the hint).
//
//   // The student up to layer3, as torch.nn.Sequential(conv1, bn1, relu, maxpool, layer1, ...):
//   KD_ASSIGN_OR_RETURN(std::unique_ptr<kd::Model> trimmed,
//                       kd::MakeSequentialModel(*student, {"conv1", "bn1", "relu", "maxpool",
//                                                          "layer1", "layer2", "layer3"}));
//
// The chain shares the source's parameters and buffers (training it trains the source). Each
// module is an element named as torchdistill names it: its path with "." replaced by
// "__attr__" ("layer2.1" -> "layer2__attr__1"), so the chain's paths are "layer3",
// "layer3.0.conv1", and its state dict's keys "layer3.0.conv1.weight" (what torchdistill's
// dst_ckpt of such a stage holds). The first element gets the forward's arguments, each later
// one the previous output.
#ifndef LIBKD_HOOKS_SEQUENTIAL_MODEL_H_
#define LIBKD_HOOKS_SEQUENTIAL_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hooks/model.h"

namespace kd {

// The modules of `source` at `paths`, in that order, as one model (Model::Submodel each).
// InvalidArgument for no paths, the root "", a path listed twice or one inside another (their
// parameters would be trained twice); Submodel's errors naming the path otherwise.
absl::StatusOr<std::unique_ptr<Model>> MakeSequentialModel(const Model& source,
                                                           const std::vector<std::string>& paths);

// torchdistill's element name for a module path: "." -> "__attr__".
std::string SequentialElementName(const std::string& path);

}  // namespace kd

#endif  // LIBKD_HOOKS_SEQUENTIAL_MODEL_H_
