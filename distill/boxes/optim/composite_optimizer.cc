#include "distill/boxes/optim/composite_optimizer.h"

#include <memory>
#include <utility>
#include <vector>

#include <torch/serialize/archive.h>

namespace kd {
namespace {

std::vector<torch::optim::OptimizerParamGroup> Groups(
    const std::vector<CompositeOptimizer::Child>& children) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (const CompositeOptimizer::Child& child : children) {
    for (const auto& group : child.optimizer->param_groups()) groups.emplace_back(group);
  }
  return groups;
}

}  // namespace

CompositeOptimizer::CompositeOptimizer(std::vector<Child> children)
    : Optimizer(Groups(children), children.at(0).optimizer->defaults().clone()),
      children_(std::move(children)) {
  // Optimizer's constructor gives groups of another options type its defaults' values: the
  // learning rates, which schedules read and set here, are the children's.
  SyncFromChildren();
}

void CompositeOptimizer::SyncFromChildren() {
  size_t k = 0;
  for (Child& child : children_) {
    for (const auto& group : child.optimizer->param_groups()) {
      param_groups_[k++].options().set_lr(group.options().get_lr());
    }
  }
}

at::Tensor CompositeOptimizer::step(LossClosure closure) {
  size_t k = 0;
  for (Child& child : children_) {
    for (auto& group : child.optimizer->param_groups()) {
      group.options().set_lr(param_groups_[k++].options().get_lr());
    }
  }
  at::Tensor loss;
  for (Child& child : children_) {
    at::Tensor child_loss = child.optimizer->step(closure);
    if (!loss.defined()) loss = child_loss;
  }
  return loss;
}

void CompositeOptimizer::save(torch::serialize::OutputArchive& archive) const {
  for (const Child& child : children_) {
    torch::serialize::OutputArchive part;
    child.optimizer->save(part);
    archive.write(child.name, part);
  }
}

void CompositeOptimizer::load(torch::serialize::InputArchive& archive) {
  for (Child& child : children_) {
    torch::serialize::InputArchive part;
    archive.read(child.name, part);
    child.optimizer->load(part);
  }
  // The children's groups came back with their learning rates: the composite's copies follow.
  SyncFromChildren();
}

}  // namespace kd
