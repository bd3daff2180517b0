// //distill/losses:loss_benchmark's cases for torchdistill's other methods: each loss as a
// config names it, and its formula written inline with libtorch ops (as torchdistill's class
// computes it), on training-sized inputs.
#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "distill/losses/internal/loss_benchmark_case.h"
#include "distill/losses/loss.h"

namespace kd {
namespace loss_benchmark {
namespace {

at::Tensor Normalized(const at::Tensor& x, double q) {
  const at::Tensor flat = x.flatten(1);
  return flat / flat.norm(q, 1).unsqueeze(1);
}

at::Tensor Inter(const at::Tensor& a, const at::Tensor& b) {
  return 1 - at::cosine_similarity(a - a.mean(1, true), b - b.mean(1, true), 1, 1e-8).mean();
}

// SSKD's batches: rows 4i..4i+3 one sample's four views. The unrotated rows and the rotated.
std::pair<at::Tensor, at::Tensor> ViewsOf(const at::Tensor& x) {
  const at::Tensor v = x.view({x.size(0) / 4, 4, -1});
  return {v.select(1, 0), v.slice(1, 1).reshape({-1, x.size(1)})};
}

// Cosine of each rotated row with each unrotated one: (3N, N), expanded as torchdistill does.
at::Tensor Similarities(const at::Tensor& x) {
  auto [normal, aug] = ViewsOf(x);
  return at::cosine_similarity(aug.unsqueeze(2).expand({-1, -1, normal.size(0)}),
                               normal.unsqueeze(2).expand({-1, -1, aug.size(0)}).transpose(0, 2),
                               1);
}

// Rows whose label `scores` rank first, and `ratio` of the others, in row order.
at::Tensor Kept(const at::Tensor& scores, const at::Tensor& labels, double ratio) {
  const at::Tensor rank =
      (at::argsort(scores, 1, true) == labels.unsqueeze(1)).to(at::kLong).argmax(1);
  const int64_t wrong = (rank != 0).sum().item<int64_t>();
  const int64_t keep = scores.size(0) - wrong + static_cast<int64_t>(wrong * ratio);
  return std::get<0>(at::sort(at::argsort(rank).slice(0, 0, keep)));
}

at::Tensor BatchKl(const at::Tensor& log_p, const at::Tensor& q) {
  return at::kl_div(log_p, q, at::Reduction::Sum) / log_p.size(0);
}

}  // namespace

std::vector<Case> MethodCases(const Shapes& x) {
  const at::Tensor labels = at::randint(0, 100, {256});
  const at::Tensor log_var = at::randn({64, 256}) * 0.3;
  const at::Tensor var = at::rand({1, 64, 1, 1}) + 0.5;
  std::vector<Case> cases;
  cases.push_back(
      {"FTLoss", "FTLoss", "", {{"student", x.map_s}, {"teacher", x.map_t}}, [](const Inputs& in) {
         return at::l1_loss(Normalized(in.at("student"), 2), Normalized(in.at("teacher"), 2));
       }});
  cases.push_back({"KTALoss",
                   "KTALoss",
                   R"pb(kwargs { name: "p" number: 2 }
                        kwargs { name: "q" number: 1 })pb",
                   {{"student", x.map_s}, {"teacher", x.map_t}},
                   [](const Inputs& in) {
                     return (Normalized(in.at("student"), 1) - Normalized(in.at("teacher"), 1))
                         .norm(2, 1)
                         .mean();
                   }});
  cases.push_back({"AltActTransferLoss",
                   "AltActTransferLoss",
                   R"pb(kwargs { name: "margin" number: 1 }
                        kwargs { name: "reduction" str: "mean" })pb",
                   {{"student", x.map_s}, {"teacher", x.map_t}},
                   [](const Inputs& in) {
                     const at::Tensor s = in.at("student"), t = in.at("teacher");
                     const at::Tensor loss =
                         (s + 1).pow(2) * ((s > -1) & (t <= 0)).to(s.scalar_type()) +
                         (s - 1).pow(2) * ((s <= 1) & (t > 0)).to(s.scalar_type());
                     return loss.abs().sum() / s.size(0);
                   }});
  cases.push_back({"ChSimLoss",
                   "ChSimLoss",
                   "",
                   {{"student", x.map_s}, {"teacher", x.map_t}},
                   [](const Inputs& in) {
                     const at::Tensor s = in.at("student");
                     const int64_t b = s.size(0), ch = s.size(1);
                     auto gram = [&](const at::Tensor& f) {
                       const at::Tensor flat = f.reshape({b, ch, -1});
                       return L2Normalize(at::bmm(flat, flat.transpose(1, 2)), 2);
                     };
                     const at::Tensor d = gram(s) - gram(in.at("teacher"));
                     return (d * d).sum() / static_cast<double>(ch * b * b);
                   }});
  cases.push_back({"AffinityLoss",
                   "AffinityLoss",
                   "",
                   {{"student", x.map_s}, {"teacher", x.map_t}},
                   [](const Inputs& in) {
                     const at::Tensor fs = in.at("student").flatten(2);
                     const at::Tensor ft = in.at("teacher").flatten(2);
                     const at::Tensor ns = fs / fs.norm(2, 2).unsqueeze(-1);
                     const at::Tensor nt = ft / ft.norm(2, 2).unsqueeze(-1);
                     at::Tensor total = at::zeros({fs.size(0)}, fs.options());
                     for (int64_t c = 0; c < fs.size(1); ++c) {
                       const at::Tensor a = ns.select(1, c), b = nt.select(1, c);
                       total = total + ((at::bmm(a.unsqueeze(2), a.unsqueeze(1)) -
                                         at::bmm(b.unsqueeze(2), b.unsqueeze(1))) /
                                        static_cast<double>(fs.size(2)))
                                           .flatten(1)
                                           .norm(2, 1);
                     }
                     return total.mean();
                   }});
  cases.push_back(
      {"DISTPlusLoss",
       "DISTPlusLoss",
       "",
       {{"student", x.emb_s.narrow(1, 0, 100)},
        {"teacher", x.emb_t.narrow(1, 0, 100)},
        {"student_features", x.map_s},
        {"teacher_features", x.map_t}},
       [](const Inputs& in) {
         const at::Tensor ys = in.at("student").softmax(1);
         const at::Tensor yt = in.at("teacher").softmax(1);
         const at::Tensor fs = in.at("student_features");
         const at::Tensor ft = in.at("teacher_features");
         const at::Tensor cs = fs - fs.mean(1, true), ct = ft - ft.mean(1, true);
         const at::Tensor channel =
             ((cs * ct).sum(1) / ((cs.pow(2).sum(1) * ct.pow(2).sum(1)).sqrt() + 1e-8)).mean();
         return Inter(ys, yt) + Inter(ys.t(), yt.t()) + channel +
                Inter(fs.sum(1).flatten(1).t(), ft.sum(1).flatten(1).t());
       }});
  cases.push_back(
      {"SRDLoss",
       "SRDLoss",
       "",
       {{"student", x.logits_s},
        {"teacher", x.logits_t},
        {"student_features", x.emb_s},
        {"teacher_features", x.emb_t}},
       [](const Inputs& in) {
         const at::Tensor s = in.at("student");
         return 2 * at::log((in.at("student_features") - in.at("teacher_features")).abs().sum()) +
                at::kl_div(at::log_softmax(s, 1), at::softmax(in.at("teacher"), 1),
                           at::Reduction::Sum) /
                    s.size(0);
       }});
  cases.push_back({"HierarchicalContextLoss",
                   "HierarchicalContextLoss",
                   "",
                   {{"student", x.map_s}, {"teacher", x.map_t}},
                   [](const Inputs& in) {
                     const at::Tensor s = in.at("student"), t = in.at("teacher");
                     at::Tensor loss = at::mse_loss(s, t);
                     double weight = 1, total = 1;
                     for (int64_t k : {4, 2, 1}) {
                       weight /= 2;
                       loss = loss + weight * at::mse_loss(at::adaptive_avg_pool2d(s, {k, k}),
                                                           at::adaptive_avg_pool2d(t, {k, k}));
                       total += weight;
                     }
                     return loss / total;
                   }});
  cases.push_back({"PADL2Loss",
                   "PADL2Loss",
                   "",
                   {{"student", x.emb_s}, {"teacher", x.emb_t}, {"log_variances", log_var}},
                   [](const Inputs& in) {
                     const at::Tensor lv = in.at("log_variances");
                     return ((in.at("teacher") - in.at("student")).pow(2) / (1e-6 + at::exp(lv)) +
                             lv)
                         .mean(1)
                         .mean();
                   }});
  cases.push_back(
      {"VIDLoss",
       "VIDLoss",
       "",
       {{"pred_mean", x.map_s}, {"pred_var", var}, {"teacher", x.map_t}},
       [](const Inputs& in) {
         const at::Tensor v = in.at("pred_var");
         return (0.5 * ((in.at("pred_mean") - in.at("teacher")).pow(2) / v + at::log(v))).mean();
       }});
  cases.push_back({"SKDDirectionLoss",
                   "SKDDirectionLoss",
                   "",
                   {{"student", x.emb_s}, {"teacher", x.emb_t}},
                   [](const Inputs& in) {
                     auto gram = [](const at::Tensor& e) {
                       const at::Tensor n = L2Normalize(e, 1);
                       return at::mm(n, n.t());
                     };
                     const at::Tensor d = gram(in.at("student")) - gram(in.at("teacher"));
                     const at::Tensor cov = at::cov(d.t()) + 0.1 * at::eye(d.size(1), d.options());
                     const at::Tensor inv = at::cholesky_inverse(at::linalg_cholesky(cov));
                     return at::einsum("bi,ij,bj->b", {d, inv, d}).sqrt().mean();
                   }});
  cases.push_back({"SKDInstanceLoss",
                   "SKDInstanceLoss",
                   "",
                   {{"student", x.logits_s}, {"teacher", x.logits_t}},
                   [](const Inputs& in) {
                     const at::Tensor s = in.at("student");
                     return at::kl_div(at::log_softmax(s / 4.0, 1),
                                       at::softmax(in.at("teacher") / 4.0, 1), at::Reduction::Sum) /
                            s.size(0);
                   }});
  cases.push_back({"HuberLoss",
                   "HuberLoss",
                   "",
                   {{"input", x.map_s}, {"target", x.map_t}},
                   [](const Inputs& in) {
                     return at::huber_loss(in.at("input"), in.at("target"), at::Reduction::Mean,
                                           1.0);
                   }});
  cases.push_back({"NLLLoss",
                   "NLLLoss",
                   "",
                   {{"input", at::log_softmax(x.logits_s, 1)}, {"target", labels}},
                   [](const Inputs& in) {
                     // What torch.nn.functional.nll_loss calls.
                     return at::nll_loss_nd(in.at("input"), in.at("target"), {},
                                            at::Reduction::Mean, -100);
                   }});
  // SSKD on 64 samples in four views: 256 rows of logits and of 128-wide ss-module outputs.
  const at::Tensor ss_s = at::randn({256, 128}), ss_t = at::randn({256, 128});
  const at::Tensor sample_labels = labels.slice(0, 0, 64);
  cases.push_back({"AuxSSKDLoss", "AuxSSKDLoss", "", {{"ss", ss_t}}, [](const Inputs& in) {
                     const at::Tensor own =
                         at::arange(in.at("ss").size(0) / 4).repeat_interleave(3);
                     return at::cross_entropy_loss(Similarities(in.at("ss")), own);
                   }});
  cases.push_back(
      {"SSKDLoss",
       "SSKDLoss",
       R"pb(kwargs { name: "kl_temp" number: 4 }
            kwargs { name: "ss_temp" number: 0.5 }
            kwargs { name: "tf_temp" number: 4 }
            kwargs { name: "ss_ratio" number: 0.75 }
            kwargs { name: "tf_ratio" number: 1 }
            kwargs {
              name: "loss_weights"
              numbers { values: [ 1, 0.9, 10, 2.7 ] }
            })pb",
       {{"student_linear", x.logits_s},
        {"teacher_linear", x.logits_t},
        {"student_ss", ss_s},
        {"teacher_ss", ss_t},
        {"targets", sample_labels}},
       [](const Inputs& in) {
         auto [s, s_aug] = ViewsOf(in.at("student_linear"));
         auto [t, t_aug] = ViewsOf(in.at("teacher_linear"));
         const at::Tensor y = in.at("targets");
         const at::Tensor ce = at::cross_entropy_loss(s, y);
         const at::Tensor kl = BatchKl(at::log_softmax(s / 4.0, 1), at::softmax(t / 4.0, 1)) * 16.0;
         const at::Tensor knowledge = at::softmax(t_aug / 4.0, 1);
         const at::Tensor tf_rows = Kept(knowledge, y.repeat_interleave(3), 1.0);
         const at::Tensor s_cos = Similarities(in.at("student_ss"));
         const at::Tensor t_cos = Similarities(in.at("teacher_ss")).detach();
         const at::Tensor ss_rows = Kept(t_cos, at::arange(y.size(0)).repeat_interleave(3), 0.75);
         const at::Tensor ss = BatchKl(at::log_softmax(s_cos.index({ss_rows}) / 0.5, 1),
                                       at::softmax(t_cos.index({ss_rows}) / 0.5, 1)) *
                               0.25;
         const at::Tensor tf =
             BatchKl(at::log_softmax(s_aug / 4.0, 1).index({tf_rows}), knowledge.index({tf_rows})) *
             16.0;
         return ce + 0.9 * kl + 10.0 * ss + 2.7 * tf;
       }});
  return cases;
}

}  // namespace loss_benchmark
}  // namespace kd
