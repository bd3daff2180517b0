// Several optimizers stepped, zeroed, scheduled and checkpointed as one (silverspoon-kd's
// CompositeOptimizer and CompositeScheduler): a student trained by one optimizer and its
// projectors by another.
//
//   std::vector<kd::CompositeOptimizer::Child> children;
//   children.push_back({"student", std::move(sgd)});
//   children.push_back({"projectors", std::move(adamw)});
//   kd::CompositeOptimizer both(std::move(children));
//   both.step();                 // each child's step
//   scheduler over `both`        // a learning-rate schedule scales every child's groups
//
// Its parameter groups are the children's, in order (copies of their settings: a schedule sets
// their learning rates on it, which each step hands to the children). Its state saves and loads
// each child's under the child's name.
#ifndef LIBKD_DISTILL_BOXES_OPTIM_COMPOSITE_OPTIMIZER_H_
#define LIBKD_DISTILL_BOXES_OPTIM_COMPOSITE_OPTIMIZER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/optim/optimizer.h>

namespace kd {

class CompositeOptimizer final : public torch::optim::Optimizer {
 public:
  struct Child {
    std::string name;
    std::unique_ptr<torch::optim::Optimizer> optimizer;
  };
  // At least one child; names distinct (not checked here: the stage names them).
  explicit CompositeOptimizer(std::vector<Child> children);

  // Hands each group's learning rate to its child, then steps every child in order.
  at::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  const std::vector<Child>& children() const { return children_; }

 private:
  // The groups' learning rates from the children's.
  void SyncFromChildren();

  std::vector<Child> children_;
};

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_OPTIM_COMPOSITE_OPTIMIZER_H_
