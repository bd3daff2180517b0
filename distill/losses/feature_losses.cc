// Knowledge-distillation losses on features and relations, with torchdistill's
// definitions and defaults (torchdistill/losses/mid_level.py): ATLoss, PKTLoss,
// RKDLoss, DISTLoss, FSPLoss, SPKDLoss, CCKDLoss; and FitNet's hint loss with
// the regressor it owns. A term reads "student" and "teacher"; torchdistill's
// pair lists are one term each here.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "base/ivalue_util.h"
#include "base/kwargs.h"
#include "base/status_macros.h"
#include "base/torch_status.h"
#include "distill/losses/loss.h"
#include "distill/losses/torchdistill_rule.h"

namespace kd {
namespace {

using PairFn = std::function<at::Tensor(const at::Tensor& student, const at::Tensor& teacher)>;

absl::StatusOr<std::unique_ptr<Loss>> Make(std::string key, PairFn fn) {
  return MakeStudentTeacherLoss(std::move(key), PairShape::kSameBatch, std::move(fn));
}

// Attention transfer (Zagoruyko & Komodakis 2017). mode "code": the authors'
// code, mean((a_s - a_t)^2) with a = normalize(mean_c(f^2)); mode "paper": Eq.
// 2, sum_i ||a_s - a_t||_2 / batch with a = normalize(sum_c(f^2)).
absl::StatusOr<std::unique_ptr<Loss>> MakeAt(const Kwargs& kwargs) {
  const bool paper = StringKwarg(kwargs, "mode") == "paper";
  return Make("ATLoss", [paper](const at::Tensor& s, const at::Tensor& t) {
    if (paper) {
      const at::Tensor as = L2Normalize(s.pow(2).sum(1).flatten(1), 1);
      const at::Tensor at_ = L2Normalize(t.pow(2).sum(1).flatten(1), 1);
      return (as - at_).norm(2, 1).sum() / s.size(0);
    }
    const at::Tensor as = L2Normalize(s.pow(2).mean(1).flatten(1), 1);
    const at::Tensor at_ = L2Normalize(t.pow(2).mean(1).flatten(1), 1);
    return (as - at_).pow(2).mean();
  });
}

// Probabilistic knowledge transfer (Passalis & Tefas 2018): KL between the
// cosine-similarity distributions of the batch.
absl::StatusOr<std::unique_ptr<Loss>> MakePkt(const Kwargs& kwargs) {
  const double eps = NumberKwarg(kwargs, "eps");
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

// Relational KD (Park et al. 2019): distance- and angle-wise relations of the
// batch, the teacher's without gradients, compared with smooth L1.
at::Tensor PairwiseDistance(const at::Tensor& e, double eps = 1e-12) {
  const at::Tensor square = e.pow(2).sum(1);
  at::Tensor d =
      (square.unsqueeze(1) + square.unsqueeze(0) - 2 * at::mm(e, e.t())).clamp_min(eps).sqrt();
  return d * (1 - at::eye(e.size(0), e.options()));  // zero diagonal
}

at::Tensor Angles(const at::Tensor& e) { return PivotAngles(e).view(-1); }

absl::StatusOr<std::unique_ptr<Loss>> MakeRkd(const Kwargs& kwargs) {
  const double dist_factor = NumberKwarg(kwargs, "dist_factor");
  const double angle_factor = NumberKwarg(kwargs, "angle_factor");
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

// DIST (Huang et al. 2022): inter- and intra-class Pearson relations of
// softened predictions.
absl::StatusOr<std::unique_ptr<Loss>> MakeDist(const Kwargs& kwargs) {
  const double beta = NumberKwarg(kwargs, "beta");
  const double gamma = NumberKwarg(kwargs, "gamma");
  const double tau = NumberKwarg(kwargs, "tau");
  const double eps = NumberKwarg(kwargs, "eps");
  auto inter = [eps](const at::Tensor& ys, const at::Tensor& yt) {
    return 1 - at::cosine_similarity(ys - ys.mean(1, /*keepdim=*/true),
                                     yt - yt.mean(1, /*keepdim=*/true), 1, eps)
                   .mean();
  };
  // Factors of 1 (the defaults) are skipped: on small logits each op is a
  // visible cost.
  auto scaled = [](double factor, const at::Tensor& x) { return factor == 1 ? x : factor * x; };
  return Make("DISTLoss", [=](const at::Tensor& s, const at::Tensor& t) {
    const at::Tensor ys = (tau == 1 ? s : s / tau).softmax(1);
    const at::Tensor yt = (tau == 1 ? t : t / tau).softmax(1);
    const at::Tensor inter_loss = scaled(tau * tau, inter(ys, yt));
    const at::Tensor intra_loss = scaled(tau * tau, inter(ys.t(), yt.t()));
    return scaled(beta, inter_loss) + scaled(gamma, intra_loss);
  });
}

// FitNet hints (Romero et al. 2015): MSE between the teacher's feature map and
// the student's, mapped by a learnable 1x1-convolution regressor (student
// channels -> teacher channels) that the loss owns: Parameters() hands it to
// the optimizer and checkpoints.
class FitNetLoss final : public Loss {
 public:
  FitNetLoss(int64_t student_channels, int64_t teacher_channels, int64_t reduction)
      : weight_(at::empty({teacher_channels, student_channels, 1, 1})),
        bias_(at::zeros({teacher_channels})),
        reduction_(reduction) {
    // torch.nn.Conv2d's default initialization: kaiming_uniform_(a=sqrt(5)),
    // i.e. U(-b, b) with b = 1 / sqrt(fan_in), for the weight and the bias
    // alike.
    const double bound = 1.0 / std::sqrt(static_cast<double>(student_channels));
    weight_.uniform_(-bound, bound).requires_grad_(true);
    bias_.uniform_(-bound, bound).requires_grad_(true);
  }

  absl::StatusOr<at::Tensor> Forward(const LossInputs& inputs) override {
    KD_ASSIGN_OR_RETURN(at::Tensor student, inputs.Get("FitNetLoss", "student"));
    KD_ASSIGN_OR_RETURN(at::Tensor teacher, inputs.Get("FitNetLoss", "teacher"));
    if (student.dim() != 4 || student.size(1) != weight_.size(1) || teacher.dim() != 4 ||
        teacher.size(1) != weight_.size(0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("loss \"FitNetLoss\": its regressor maps ", weight_.size(1), " to ",
                       weight_.size(0), " channels (N, C, H, W), but student is ",
                       ShapeString(student), " and teacher ", ShapeString(teacher)));
    }
    const at::Tensor mapped =
        at::conv2d(student, weight_.to(student.device()), bias_.to(student.device()));
    if (!mapped.sizes().equals(teacher.sizes())) {
      return absl::InvalidArgumentError(
          absl::StrCat("loss \"FitNetLoss\": the regressed student ", ShapeString(mapped),
                       " does not match the teacher ", ShapeString(teacher)));
    }
    return at::mse_loss(mapped, teacher, reduction_);
  }

  std::vector<at::Tensor> Parameters() const override { return {weight_, bias_}; }
  std::vector<std::pair<std::string, at::Tensor>> NamedState() const override {
    return {{"regressor.weight", weight_}, {"regressor.bias", bias_}};
  }

 private:
  at::Tensor weight_, bias_;
  int64_t reduction_;
};

absl::StatusOr<std::unique_ptr<Loss>> MakeFitNet(const Kwargs& kwargs) {
  const int64_t reduction = ReductionKwarg(kwargs);
  return std::unique_ptr<Loss>(std::make_unique<FitNetLoss>(
      IntKwarg(kwargs, "student_channels"), IntKwarg(kwargs, "teacher_channels"), reduction));
}

// The flow of solution procedure (Yim et al. 2017): the Gram matrix between two
// feature maps of a model (the larger max-pooled to the smaller's size), the
// student's against the teacher's, sum_i ||G_s - G_t||_(dim 1) / batch. Reads
// "student_first", "student_second", "teacher_first", "teacher_second" (N, C,
// H, W); one of torchdistill's fsp_pairs per term.
at::Tensor FspMatrix(at::Tensor first, at::Tensor second) {
  const int64_t h = std::min(first.size(2), second.size(2));
  const int64_t w = std::min(first.size(3), second.size(3));
  if (first.size(2) > h || first.size(3) > w)
    first = std::get<0>(at::adaptive_max_pool2d(first, {h, w}));
  if (second.size(2) > h || second.size(3) > w) {
    second = std::get<0>(at::adaptive_max_pool2d(second, {h, w}));
  }
  first = first.flatten(2);
  second = second.flatten(2);
  return at::matmul(first, second.transpose(1, 2)) / first.size(2);
}

class FspLoss final : public Loss {
 public:
  absl::StatusOr<at::Tensor> Forward(const LossInputs& inputs) override {
    std::vector<at::Tensor> maps;
    for (const char* name :
         {"student_first", "student_second", "teacher_first", "teacher_second"}) {
      KD_ASSIGN_OR_RETURN(at::Tensor map, inputs.Get("FSPLoss", name));
      if (map.dim() != 4) {
        return absl::InvalidArgumentError(absl::StrCat("loss \"FSPLoss\": ", name,
                                                       " must be a feature map (N, C, H, W), got ",
                                                       ShapeString(map)));
      }
      maps.push_back(map);
    }
    KD_ASSIGN_OR_RETURN(auto matrices, CallTorch(
                                           [&] {
                                             return std::make_pair(FspMatrix(maps[0], maps[1]),
                                                                   FspMatrix(maps[2], maps[3]));
                                           },
                                           absl::StatusCode::kInvalidArgument));
    const auto& [s, t] = matrices;
    if (!s.sizes().equals(t.sizes())) {
      return absl::InvalidArgumentError(
          absl::StrCat("loss \"FSPLoss\": the student's FSP matrices ", ShapeString(s),
                       " differ from the teacher's ", ShapeString(t),
                       " (the first maps' and the second maps' channels must match)"));
    }
    return (s - t).norm(2, 1).sum() / maps[0].size(0);
  }
};

// Similarity-preserving KD (Tung & Mori 2019): the row-normalized batch Gram
// matrices,
// ||G_s - G_t||_F^2, divided by batch^2 for reduction "batchmean". torchdistill
// normalizes the rows by their L1 norm (it calls F.normalize(G, 1), whose
// second argument is p, not dim): p 1, the default, matches it; p 2 is the
// paper's L2 row normalization.
absl::StatusOr<std::unique_ptr<Loss>> MakeSpkd(const Kwargs& kwargs) {
  const bool batchmean = StringKwarg(kwargs, "reduction") == "batchmean";
  const double p = NumberKwarg(kwargs, "p");
  return Make("SPKDLoss", [batchmean, p](const at::Tensor& s, const at::Tensor& t) {
    auto gram = [p](const at::Tensor& z) {
      const at::Tensor flat = z.flatten(1);
      const at::Tensor g = at::mm(flat, flat.t());
      return g / g.norm(p, 1, /*keepdim=*/true).clamp_min(1e-12);
    };
    const at::Tensor loss = (gram(t) - gram(s)).norm().pow(2);
    return batchmean ? loss / (s.size(0) * s.size(0)) : loss;
  });
}

// Correlation congruence (Peng et al. 2019): the batch correlation matrices of
// embeddings (B, D) under a bilinear kernel (x x^T) or the Taylor-expanded
// Gaussian RBF, ||C_s - C_t||_2, divided by batch^2 for "batchmean".
absl::StatusOr<std::unique_ptr<Loss>> MakeCckd(const Kwargs& kwargs) {
  const bool gaussian = StringKwarg(kwargs, "kernel") == "gaussian";
  const double gamma = NumberKwarg(kwargs, "gamma");
  const int64_t max_p = IntKwarg(kwargs, "max_p");
  const bool batchmean = StringKwarg(kwargs, "reduction") == "batchmean";
  auto correlation = [=](const at::Tensor& x) {
    const at::Tensor gram = at::mm(x, x.t());
    if (!gaussian) return gram;
    at::Tensor sum = at::ones_like(gram);
    double factorial = 1;
    for (int64_t p = 1; p <= max_p; ++p) {
      factorial *= static_cast<double>(p);
      sum = sum + std::pow(2 * gamma, static_cast<double>(p)) / factorial * gram.pow(p);
    }
    return sum * std::exp(-2 * gamma);
  };
  return Make("CCKDLoss", [=](const at::Tensor& s, const at::Tensor& t) {
    const at::Tensor loss = at::dist(correlation(s.flatten(1)), correlation(t.flatten(1)), 2);
    return batchmean ? loss / (s.size(0) * s.size(0)) : loss;
  });
}

const KwargSpec kBatchmeanOrSum = {.name = "reduction",
                                   .type = KwargType::kString,
                                   .doc = "batchmean (divide by batch^2) or sum",
                                   .default_value = "batchmean",
                                   .choices = {"batchmean", "sum"}};

KD_REGISTER(LossRegistry(), "FSPLoss",
            [](const Kwargs&) -> absl::StatusOr<std::unique_ptr<Loss>> {
              return std::unique_ptr<Loss>(std::make_unique<FspLoss>());
            },
            {});
KD_REGISTER(LossRegistry(), "SPKDLoss", MakeSpkd,
            {kBatchmeanOrSum,
             {.name = "p",
              .type = KwargType::kInteger,
              .doc = "row norm: 1 (torchdistill's) or 2 (the paper's)",
              .default_value = 1,
              .min = 1,
              .max = 2}});
KD_REGISTER(LossRegistry(), "CCKDLoss", MakeCckd,
            {{.name = "kernel",
              .type = KwargType::kString,
              .doc = "gaussian (the Taylor-expanded RBF) or bilinear",
              .default_value = "gaussian",
              .choices = {"gaussian", "bilinear"}},
             PositiveNumberSpec("gamma", "the RBF's gamma", 0.4),
             {.name = "max_p",
              .type = KwargType::kInteger,
              .doc = "Taylor order",
              .default_value = 2,
              .min = 1,
              .max = 16},
             kBatchmeanOrSum});

KD_REGISTER(LossRegistry(), "FitNetLoss", MakeFitNet,
            {{.name = "student_channels",
              .type = KwargType::kInteger,
              .doc = "channels of the student's hint layer",
              .min = 1,
              .required = true},
             {.name = "teacher_channels",
              .type = KwargType::kInteger,
              .doc = "channels of the teacher's hint layer",
              .min = 1,
              .required = true},
             {.name = "reduction",
              .type = KwargType::kString,
              .doc = "MSE's",
              .default_value = "mean",
              .choices = {"mean", "sum"}}});

KD_REGISTER(LossRegistry(), "ATLoss", MakeAt,
            {{.name = "mode",
              .type = KwargType::kString,
              .doc = "code (the authors' code) or paper (Eq. 2)",
              .default_value = "code",
              .choices = {"code", "paper"}}});
KD_REGISTER(LossRegistry(), "PKTLoss", MakePkt,
            {NonNegativeNumberSpec("eps", "normalization guard", 1e-7)});
KD_REGISTER(LossRegistry(), "RKDLoss", MakeRkd,
            {{.name = "dist_factor",
              .type = KwargType::kNumber,
              .doc = "distance weight (torchdistill's example: 1)",
              .min = 0,
              .required = true},
             {.name = "angle_factor",
              .type = KwargType::kNumber,
              .doc = "angle weight (torchdistill's example: 2)",
              .min = 0,
              .required = true},
             {.name = "reduction",
              .type = KwargType::kString,
              .doc = "smooth L1's: mean or sum",
              .choices = {"mean", "sum"},
              .required = true}});
KD_REGISTER(LossRegistry(), "DISTLoss", MakeDist,
            {NonNegativeNumberSpec("beta", "inter-class weight", 1.0),
             NonNegativeNumberSpec("gamma", "intra-class weight", 1.0),
             PositiveNumberSpec("tau", "temperature", 1.0),
             NonNegativeNumberSpec("eps", "cosine's guard", 1e-8)});

// torchdistill's import rules (//tools:import_torchdistill).
KD_REGISTER(TorchdistillLossRules(), "PKTLoss", TorchdistillLossRule::ModuleIoPair(), kAnyKwargs);
KD_REGISTER(TorchdistillLossRules(), "DISTLoss", TorchdistillLossRule::ModuleIoPair(), kAnyKwargs);
KD_REGISTER(TorchdistillLossRules(), "RKDLoss",
            TorchdistillLossRule::PathPair("student_output_path", "teacher_output_path"),
            kAnyKwargs);
KD_REGISTER(TorchdistillLossRules(), "SPKDLoss",
            TorchdistillLossRule::PathPair("student_output_path", "teacher_output_path"),
            kAnyKwargs);
KD_REGISTER(
    TorchdistillLossRules(), "CCKDLoss",
    [] {
      TorchdistillLossRule rule =
          TorchdistillLossRule::PathPair("student_linear_path", "teacher_linear_path");
      // torchdistill's sample configs and docstring write kernel_params {key, ...}; its code reads
      // kernel_config {type, ...}
      rule.renamed = {{"kernel_params", "kernel_config"}};
      rule.flattened = {{"kernel_config", "kernel"}};
      return rule;
    }(),
    kAnyKwargs);
KD_REGISTER(TorchdistillLossRules(), "ATLoss",
            TorchdistillLossRule::Pairs("at_pairs", {"student", "teacher"}), kAnyKwargs);
KD_REGISTER(TorchdistillLossRules(), "FSPLoss",
            TorchdistillLossRule::Pairs("fsp_pairs", {"student_first", "student_second",
                                                      "teacher_first", "teacher_second"}),
            kAnyKwargs);

}  // namespace
}  // namespace kd
