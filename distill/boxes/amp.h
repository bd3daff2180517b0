// Mixed precision for training loops: libtorch's autocast as an RAII guard
// (torch.autocast) and dynamic loss scaling for float16 (torch.amp.GradScaler),
// on CPU and CUDA. The boxes use both for run.precision BF16 / FP16; a
// hand-written loop uses them the way Python's AMP recipe does:
//
//   kd::GradScaler scaler(device);                   // fp16 only; bf16 needs no scaling
//   {
//     kd::AutocastGuard autocast(device.type(), at::kHalf);
//     loss = criterion(model(x), y);                 // forward and loss in autocast
//   }
//   scaler.Scale(loss).backward();                   // backward outside it
//   scaler.Unscale(optimizer);                       // only before clipping
//   torch::nn::utils::clip_grad_norm_(params, 1.0);
//   scaler.Step(optimizer);                          // skipped on inf/NaN gradients
//   scaler.Update();
#ifndef LIBKD_DISTILL_BOXES_AMP_H_
#define LIBKD_DISTILL_BOXES_AMP_H_

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace kd {

// Autocast on `device_type` in `dtype` for this thread while alive, as `with
// torch.autocast`: the previous state comes back on destruction, and the
// cast-weight cache is cleared when the outermost guard ends.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device_type, at::ScalarType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_type_;
  bool previous_enabled_;
  at::ScalarType previous_dtype_;
};

// torch.amp.GradScaler for one optimizer, with its defaults and its ATen
// kernels
// (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_).
class GradScaler {
 public:
  struct Options {
    double init_scale = 65536.0;
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int64_t growth_interval = 2000;
  };
  explicit GradScaler(c10::Device device, Options options);
  explicit GradScaler(c10::Device device) : GradScaler(device, Options()) {}

  // `loss` times the current scale.
  at::Tensor Scale(const at::Tensor& loss) const;
  // Divides the optimizer's gradients by the scale and notes whether any is inf
  // or NaN. At most once between updates (later calls do nothing).
  void Unscale(torch::optim::Optimizer& optimizer);
  // Unscales if not done yet, then steps the optimizer unless a gradient was
  // inf or NaN. Whether it stepped.
  bool Step(torch::optim::Optimizer& optimizer);
  // The scale for the next iteration: backoff after an inf/NaN, growth after
  // growth_interval finite steps in a row.
  void Update();

  double scale() const;
  // What a checkpoint keeps: scale and growth tracker.
  std::vector<double> State() const;
  void LoadState(const std::vector<double>& state);

 private:
  Options options_;
  at::Tensor scale_;           // float32, 1 element, on the device
  at::Tensor growth_tracker_;  // int32
  at::Tensor found_inf_;       // float32: 1 if the last unscale found inf/NaN
  bool unscaled_ = false;
};

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_AMP_H_
