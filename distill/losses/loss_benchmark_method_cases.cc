// //distill/losses:loss_benchmark's cases for torchdistill's other methods: each loss as a
// config names it, and its formula written inline with libtorch ops (as torchdistill's class
// computes it), on training-sized inputs.
#include <cmath>
#include <tuple>
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
  return cases;
}

}  // namespace loss_benchmark
}  // namespace kd
