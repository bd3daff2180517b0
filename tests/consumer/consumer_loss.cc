// A loss registered from another repository, by key: half the mean squared error between the
// student's output and the teacher's (or a target), usable in any config's criterion.
#include <memory>

#include <ATen/ATen.h>

#include "distill/losses/loss.h"

namespace consumer {

absl::StatusOr<std::unique_ptr<kd::Loss>> MakeHalfMse(const kd::Kwargs&) {
  return kd::MakeStudentTeacherLoss(
      "consumer_half_mse", kd::PairShape::kSame,
      [](const at::Tensor& s, const at::Tensor& t) { return 0.5 * at::mse_loss(s, t); });
}

KD_REGISTER(kd::LossRegistry(), "consumer_half_mse", MakeHalfMse, {});

}  // namespace consumer
