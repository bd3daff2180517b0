// Knowledge-distillation losses on features and relations, with torchdistill's definitions and
// defaults (torchdistill/losses/mid_level.py): ATLoss, PKTLoss, RKDLoss, DISTLoss; and FitNet's
// hint loss with the regressor it owns. A term reads "student" and "teacher"; torchdistill's
// pair lists are one term each here.
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>
#include <string>
#include <utility>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/losses/loss.h"

namespace kd {
namespace {

// F.normalize(x, p=2, dim): x / max(||x||, eps).
at::Tensor Normalize(const at::Tensor& x, int64_t dim, double eps = 1e-12) {
  return x / x.norm(2, dim, /*keepdim=*/true).clamp_min(eps);
}

using PairFn = std::function<at::Tensor(const at::Tensor& student, const at::Tensor& teacher)>;

absl::StatusOr<std::unique_ptr<Loss>> Make(std::string key, PairFn fn) {
  return MakeStudentTeacherLoss(std::move(key), PairShape::kSameBatch, std::move(fn));
}

// Attention transfer (Zagoruyko & Komodakis 2017). mode "code": the authors' code,
// mean((a_s - a_t)^2) with a = normalize(mean_c(f^2)); mode "paper": Eq. 2,
// sum_i ||a_s - a_t||_2 / batch with a = normalize(sum_c(f^2)).
absl::StatusOr<std::unique_ptr<Loss>> MakeAt(const Kwargs& kwargs) {
  const bool paper = StringKwarg(kwargs, "mode", "code") == "paper";
  return Make("ATLoss", [paper](const at::Tensor& s, const at::Tensor& t) {
    if (paper) {
      const at::Tensor as = Normalize(s.pow(2).sum(1).flatten(1), 1);
      const at::Tensor at_ = Normalize(t.pow(2).sum(1).flatten(1), 1);
      return (as - at_).norm(2, 1).sum() / s.size(0);
    }
    const at::Tensor as = Normalize(s.pow(2).mean(1).flatten(1), 1);
    const at::Tensor at_ = Normalize(t.pow(2).mean(1).flatten(1), 1);
    return (as - at_).pow(2).mean();
  });
}

// Probabilistic knowledge transfer (Passalis & Tefas 2018): KL between the cosine-similarity
// distributions of the batch.
absl::StatusOr<std::unique_ptr<Loss>> MakePkt(const Kwargs& kwargs) {
  const double eps = NumberKwarg(kwargs, "eps", 1e-7);
  auto similarity = [eps](const at::Tensor& x) {
    at::Tensor n = x / (x.pow(2).sum(1, /*keepdim=*/true).sqrt() + eps);
    n = at::where(n.isnan(), at::zeros_like(n), n);
    at::Tensor sim = (at::mm(n, n.t()) + 1.0) / 2.0;
    return sim / sim.sum(1, /*keepdim=*/true);
  };
  return Make("PKTLoss", [similarity, eps](const at::Tensor& s, const at::Tensor& t) {
    const at::Tensor ss = similarity(s), ts = similarity(t);
    return (ts * at::log((ts + eps) / (ss + eps))).mean();
  });
}

// Relational KD (Park et al. 2019): distance- and angle-wise relations of the batch, the
// teacher's without gradients, compared with smooth L1.
at::Tensor PairwiseDistance(const at::Tensor& e, double eps = 1e-12) {
  const at::Tensor square = e.pow(2).sum(1);
  at::Tensor d = (square.unsqueeze(1) + square.unsqueeze(0) - 2 * at::mm(e, e.t()))
                     .clamp_min(eps)
                     .sqrt();
  return d * (1 - at::eye(e.size(0), e.options()));  // zero diagonal
}

at::Tensor Angles(const at::Tensor& e) {
  const at::Tensor diff = e.unsqueeze(0) - e.unsqueeze(1);
  const at::Tensor n = Normalize(diff, 2);
  return at::bmm(n, n.transpose(1, 2)).view(-1);
}

absl::StatusOr<std::unique_ptr<Loss>> MakeRkd(const Kwargs& kwargs) {
  const double dist_factor = NumberKwarg(kwargs, "dist_factor", 1.0);
  const double angle_factor = NumberKwarg(kwargs, "angle_factor", 2.0);
  const int64_t red = ReductionKwarg(kwargs);
  return Make("RKDLoss", [=](const at::Tensor& student, const at::Tensor& teacher) {
    const at::Tensor s = student.flatten(1), t = teacher.flatten(1).detach();
    at::Tensor loss = at::zeros({}, s.options());
    if (dist_factor != 0) {
      at::Tensor td = PairwiseDistance(t);
      td = td / td.masked_select(td > 0).mean();
      at::Tensor d = PairwiseDistance(s);
      d = d / d.masked_select(d > 0).mean();
      loss = loss + dist_factor * at::smooth_l1_loss(d, td, red);
    }
    if (angle_factor != 0) {
      loss = loss + angle_factor * at::smooth_l1_loss(Angles(s), Angles(t), red);
    }
    return loss;
  });
}

// DIST (Huang et al. 2022): inter- and intra-class Pearson relations of softened predictions.
absl::StatusOr<std::unique_ptr<Loss>> MakeDist(const Kwargs& kwargs) {
  const double beta = NumberKwarg(kwargs, "beta", 1.0);
  const double gamma = NumberKwarg(kwargs, "gamma", 1.0);
  const double tau = NumberKwarg(kwargs, "tau", 1.0);
  const double eps = NumberKwarg(kwargs, "eps", 1e-8);
  auto inter = [eps](const at::Tensor& ys, const at::Tensor& yt) {
    const at::Tensor cs = ys - ys.mean(1).unsqueeze(1), ct = yt - yt.mean(1).unsqueeze(1);
    return 1 - at::cosine_similarity(cs, ct, 1, eps).mean();
  };
  return Make("DISTLoss", [=](const at::Tensor& s, const at::Tensor& t) {
    const at::Tensor ys = (s / tau).softmax(1), yt = (t / tau).softmax(1);
    const at::Tensor inter_loss = tau * tau * inter(ys, yt);
    const at::Tensor intra_loss = tau * tau * inter(ys.transpose(0, 1), yt.transpose(0, 1));
    return beta * inter_loss + gamma * intra_loss;
  });
}

// FitNet hints (Romero et al. 2015): MSE between the teacher's feature map and the student's,
// mapped by a learnable 1x1-convolution regressor (student channels -> teacher channels) that
// the loss owns: Parameters() hands it to the optimizer and checkpoints.
class FitNetLoss final : public Loss {
 public:
  FitNetLoss(int64_t student_channels, int64_t teacher_channels, int64_t reduction)
      : weight_(at::empty({teacher_channels, student_channels, 1, 1})),
        bias_(at::zeros({teacher_channels})),
        reduction_(reduction) {
    // torch.nn.Conv2d's default initialization: kaiming_uniform_(a=sqrt(5)), i.e. U(-b, b)
    // with b = 1 / sqrt(fan_in), for the weight and the bias alike.
    const double bound = 1.0 / std::sqrt(static_cast<double>(student_channels));
    weight_.uniform_(-bound, bound).requires_grad_(true);
    bias_.uniform_(-bound, bound).requires_grad_(true);
  }

  absl::StatusOr<at::Tensor> Forward(const LossInputs& inputs) override {
    KD_ASSIGN_OR_RETURN(at::Tensor student, inputs.Get("FitNetLoss", "student"));
    KD_ASSIGN_OR_RETURN(at::Tensor teacher, inputs.Get("FitNetLoss", "teacher"));
    if (student.dim() != 4 || student.size(1) != weight_.size(1) || teacher.dim() != 4 ||
        teacher.size(1) != weight_.size(0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loss \"FitNetLoss\": its regressor maps ", weight_.size(1), " to ", weight_.size(0),
          " channels (N, C, H, W), but student is ", ShapeString(student), " and teacher ",
          ShapeString(teacher)));
    }
    const at::Tensor mapped = at::conv2d(student, weight_.to(student.device()),
                                         bias_.to(student.device()));
    if (!mapped.sizes().equals(teacher.sizes())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loss \"FitNetLoss\": the regressed student ", ShapeString(mapped),
          " does not match the teacher ", ShapeString(teacher)));
    }
    return at::mse_loss(mapped, teacher, reduction_);
  }

  std::vector<at::Tensor> Parameters() const override { return {weight_, bias_}; }

 private:
  at::Tensor weight_, bias_;
  int64_t reduction_;
};

absl::StatusOr<std::unique_ptr<Loss>> MakeFitNet(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  return std::unique_ptr<Loss>(std::make_unique<FitNetLoss>(
      kwargs.at("student_channels").toInt(), kwargs.at("teacher_channels").toInt(), reduction));
}

KD_REGISTER(LossRegistry(), "FitNetLoss", MakeFitNet,
            {{.name = "student_channels", .type = KwargType::kInteger,
              .doc = "channels of the student's hint layer", .min = 1, .required = true},
             {.name = "teacher_channels", .type = KwargType::kInteger,
              .doc = "channels of the teacher's hint layer", .min = 1, .required = true},
             {.name = "reduction", .type = KwargType::kString, .doc = "MSE's; mean",
              .choices = {"mean", "sum"}}});

KD_REGISTER(LossRegistry(), "ATLoss", MakeAt,
            {{.name = "mode", .type = KwargType::kString,
              .doc = "code (default: the authors' code) or paper (Eq. 2)",
              .choices = {"code", "paper"}}});
KD_REGISTER(LossRegistry(), "PKTLoss", MakePkt,
            {{.name = "eps", .type = KwargType::kNumber, .doc = "1e-7", .min = 0}});
KD_REGISTER(LossRegistry(), "RKDLoss", MakeRkd,
            {{.name = "dist_factor", .type = KwargType::kNumber,
              .doc = "distance weight (torchdistill's example: 1)", .min = 0, .required = true},
             {.name = "angle_factor", .type = KwargType::kNumber,
              .doc = "angle weight (torchdistill's example: 2)", .min = 0, .required = true},
             {.name = "reduction", .type = KwargType::kString, .doc = "smooth L1's: mean or sum",
              .choices = {"mean", "sum"}, .required = true}});
KD_REGISTER(LossRegistry(), "DISTLoss", MakeDist,
            {{.name = "beta", .type = KwargType::kNumber, .doc = "inter-class weight; 1", .min = 0},
             {.name = "gamma", .type = KwargType::kNumber, .doc = "intra-class weight; 1",
              .min = 0},
             {.name = "tau", .type = KwargType::kNumber, .doc = "temperature; 1", .min = 0,
              .min_exclusive = true},
             {.name = "eps", .type = KwargType::kNumber, .doc = "1e-8", .min = 0}});

}  // namespace
}  // namespace kd
