#include "distill/boxes/amp.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/optim/optimizer.h>

namespace kd {

AutocastGuard::AutocastGuard(c10::DeviceType device_type, at::ScalarType dtype)
    : device_type_(device_type),
      previous_enabled_(at::autocast::is_autocast_enabled(device_type)),
      previous_dtype_(at::autocast::get_autocast_dtype(device_type)) {
  at::autocast::set_autocast_enabled(device_type, true);
  at::autocast::set_autocast_dtype(device_type, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, previous_enabled_);
  at::autocast::set_autocast_dtype(device_type_, previous_dtype_);
}

GradScaler::GradScaler(c10::Device device, Options options)
    : options_(options),
      scale_(at::full({1}, options.init_scale, at::dtype(at::kFloat).device(device))),
      growth_tracker_(at::zeros({1}, at::dtype(at::kInt).device(device))),
      found_inf_(at::zeros({1}, at::dtype(at::kFloat).device(device))) {}

at::Tensor GradScaler::Scale(const at::Tensor& loss) const {
  return loss * scale_.to(loss.scalar_type());
}

void GradScaler::Unscale(torch::optim::Optimizer& optimizer) {
  if (unscaled_) return;
  unscaled_ = true;
  found_inf_.zero_();
  // torch's GradScaler groups gradients by device and dtype; the kernel takes
  // one such group.
  std::vector<std::vector<at::Tensor>> groups;
  for (const auto& group : optimizer.param_groups()) {
    for (const at::Tensor& p : group.params()) {
      const at::Tensor& grad = p.grad();
      if (!grad.defined()) continue;
      auto same = std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
        return g[0].device() == grad.device() && g[0].scalar_type() == grad.scalar_type();
      });
      if (same == groups.end()) {
        groups.push_back({grad});
      } else {
        same->push_back(grad);
      }
    }
  }
  const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  for (const std::vector<at::Tensor>& grads : groups) {
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_,
                                                   inv_scale.to(grads[0].device()));
  }
}

bool GradScaler::Step(torch::optim::Optimizer& optimizer) {
  Unscale(optimizer);
  if (found_inf_.item<float>() != 0) return false;
  optimizer.step();
  return true;
}

void GradScaler::Update() {
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor,
                         options_.backoff_factor, options_.growth_interval);
  unscaled_ = false;
}

double GradScaler::scale() const { return scale_.item<double>(); }

std::vector<double> GradScaler::State() const {
  return {scale_.item<double>(), static_cast<double>(growth_tracker_.item<int>())};
}

void GradScaler::LoadState(const std::vector<double>& state) {
  if (state.size() != 2) return;
  scale_.fill_(state[0]);
  growth_tracker_.fill_(static_cast<int>(state[1]));
}

}  // namespace kd
