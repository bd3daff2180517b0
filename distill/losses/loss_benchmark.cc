// Each loss's forward + backward through kd::Criterion (one term reading I/O dict references,
// as a training step runs it) against the same formula written inline with libtorch ops, on
// training-sized inputs, one thread: the median of paired ratios criterion / inline (the
// target is <= 1.05). With --peers, the peers' own losses (torchdistill's, silverspoon-kd's,
// torch.nn's) run in a Python process on the same inputs, saved to a file, in rounds that
// alternate with libkd's, and the median libkd / peer is printed too.
//
//   bazel run -c opt //distill/losses:loss_benchmark -- --peers   (needs install_deps.sh --peers)
//   bazel run -c opt //distill/losses:loss_benchmark -- --pairs=15 --only=KDLoss,jsd
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/Dict.h>
#include <ATen/core/grad_mode.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/torch_file.h"
#include "distill/losses/criterion.h"
#include "distill/losses/internal/loss_benchmark_case.h"
#include "google/protobuf/text_format.h"
#include "testing/peer_process.h"
#include "testing/ratio_reporter.h"

ABSL_FLAG(int, pairs, 25, "timed pairs (criterion, inline) per loss");
ABSL_FLAG(bool, peers, false,
          "also time the peers' own losses (libkd's venv python with torchdistill and "
          "silverspoon-kd) on the same inputs");
ABSL_FLAG(std::string, only, "", "comma-separated case names to run (default: all)");

namespace kd {
namespace {

using loss_benchmark::Case;
using loss_benchmark::Inputs;

at::Tensor Kl(const at::Tensor& log_p, const at::Tensor& log_q) {
  return (log_p.exp() * (log_p - log_q)).sum(-1);
}

std::vector<Case> Cases() {
  at::manual_seed(0);
  const at::Tensor logits_s = at::randn({256, 100}), logits_t = at::randn({256, 100});
  const at::Tensor labels = at::randint(0, 100, {256});
  const at::Tensor map_s = at::randn({64, 64, 16, 16}), map_t = at::randn({64, 64, 16, 16});
  const at::Tensor emb_s = at::randn({64, 256}), emb_t = at::randn({64, 256});
  const at::Tensor seq_s = at::randn({8, 128, 1000}), seq_t = at::randn({8, 128, 1000});
  at::Tensor seq_labels = at::randint(0, 1000, {8, 128});
  seq_labels.narrow(1, 0, 16).fill_(-100);  // prompts
  const at::Tensor hid_s = at::randn({8, 128, 256}), hid_t = at::randn({8, 128, 256});
  const at::Tensor head = at::randn({1000, 256}) * 0.05;

  std::vector<Case> cases;
  cases.push_back({"KDLoss",
                   "KDLoss",
                   R"pb(kwargs { name: "temperature" number: 4 }
                        kwargs { name: "alpha" number: 0.5 })pb",
                   {{"student", logits_s}, {"teacher", logits_t}, {"targets", labels}},
                   [](const Inputs& in) {
                     const double t = 4;
                     const at::Tensor s = in.at("student");
                     const at::Tensor soft =
                         at::kl_div(at::log_softmax(s / t, 1), at::softmax(in.at("teacher") / t, 1),
                                    at::Reduction::Sum) /
                         s.size(0);
                     return 0.5 * at::cross_entropy_loss(s, in.at("targets")) + 0.5 * t * t * soft;
                   }});
  cases.push_back({"DKDLoss",
                   "DKDLoss",
                   "",
                   {{"student", logits_s}, {"teacher", logits_t}, {"targets", labels}},
                   [](const Inputs& in) {
                     const double t = 4;
                     const at::Tensor s = in.at("student"), te = in.at("teacher");
                     const at::Tensor gt =
                         at::zeros_like(s).scatter_(1, in.at("targets").unsqueeze(1), 1.0);
                     auto binary = [&](const at::Tensor& p) {
                       return at::cat({(p * gt).sum(1, true), (p * (1 - gt)).sum(1, true)}, 1);
                     };
                     const at::Tensor tckd =
                         at::kl_div(at::log(binary(at::softmax(s / t, 1))),
                                    binary(at::softmax(te / t, 1)), at::Reduction::Sum);
                     const at::Tensor nckd =
                         at::kl_div(at::log_softmax(s / t - 1000.0 * gt, 1),
                                    at::softmax(te / t - 1000.0 * gt, 1), at::Reduction::Sum);
                     return (tckd + 8.0 * nckd) * (t * t) / s.size(0);
                   }});
  cases.push_back(
      {"ATLoss", "ATLoss", "", {{"student", map_s}, {"teacher", map_t}}, [](const Inputs& in) {
         auto a = [](const at::Tensor& f) { return L2Normalize(f.pow(2).mean(1).flatten(1), 1); };
         return (a(in.at("student")) - a(in.at("teacher"))).pow(2).mean();
       }});
  cases.push_back(
      {"RKDLoss",
       "RKDLoss",
       R"pb(kwargs { name: "dist_factor" number: 1 }
            kwargs { name: "angle_factor" number: 2 }
            kwargs { name: "reduction" str: "mean" })pb",
       {{"student", emb_s}, {"teacher", emb_t}},
       [](const Inputs& in) {
         auto dist = [](const at::Tensor& e) {
           const at::Tensor sq = e.pow(2).sum(1);
           at::Tensor d =
               (sq.unsqueeze(1) + sq.unsqueeze(0) - 2 * at::mm(e, e.t())).clamp_min(1e-12).sqrt();
           d = d * (1 - at::eye(e.size(0), e.options()));
           return d / d.masked_select(d > 0).mean();
         };
         const at::Tensor s = in.at("student"), t = in.at("teacher").detach();
         return at::smooth_l1_loss(dist(s), dist(t)) +
                2.0 * at::smooth_l1_loss(PivotAngles(s).view(-1), PivotAngles(t).view(-1));
       }});
  cases.push_back(
      {"DISTLoss",
       "DISTLoss",
       "",
       {{"student", logits_s}, {"teacher", logits_t}},
       [](const Inputs& in) {
         const at::Tensor ys = in.at("student").softmax(1);
         const at::Tensor yt = in.at("teacher").softmax(1);
         auto inter = [](const at::Tensor& a, const at::Tensor& b) {
           return 1 -
                  at::cosine_similarity(a - a.mean(1, true), b - b.mean(1, true), 1, 1e-8).mean();
         };
         return inter(ys, yt) + inter(ys.t(), yt.t());
       }});
  cases.push_back(
      {"SPKDLoss", "SPKDLoss", "", {{"student", map_s}, {"teacher", map_t}}, [](const Inputs& in) {
         auto g = [](const at::Tensor& z) {
           const at::Tensor f = z.flatten(1);
           return L2Normalize(at::mm(f, f.t()), 1);
         };
         const int64_t b = in.at("student").size(0);
         return (g(in.at("teacher")) - g(in.at("student"))).norm().pow(2) / (b * b);
       }});
  cases.push_back(
      {"MSELoss", "MSELoss", "", {{"student", map_s}, {"teacher", map_t}}, [](const Inputs& in) {
         return at::mse_loss(in.at("student"), in.at("teacher"));
       }});
  cases.push_back({"kl_divergence",
                   "kl_divergence",
                   R"pb(kwargs { name: "temperature" number: 2 })pb",
                   {{"student", seq_s}, {"teacher", seq_t}},
                   [](const Inputs& in) {
                     const at::Tensor s = in.at("student").reshape({-1, 1000});
                     const at::Tensor t = in.at("teacher").reshape({-1, 1000});
                     return at::kl_div(at::log_softmax(s / 2.0, -1), at::softmax(t / 2.0, -1),
                                       at::Reduction::Sum) /
                            s.size(0) * 4.0;
                   }});
  cases.push_back(
      {"jsd", "jsd", "", {{"student", seq_s}, {"teacher", seq_t}}, [](const Inputs& in) {
         const at::Tensor ls = at::log_softmax(in.at("student").reshape({-1, 1000}), -1);
         const at::Tensor lt = at::log_softmax(in.at("teacher").reshape({-1, 1000}), -1);
         const at::Tensor lm = at::logaddexp(lt + std::log(0.5), ls + std::log(0.5));
         return (0.5 * at::kl_div(lm, lt.exp(), at::Reduction::Sum) +
                 0.5 * at::kl_div(lm, ls.exp(), at::Reduction::Sum)) /
                ls.size(0);
       }});
  cases.push_back({"forward_kl",
                   "forward_kl",
                   "",
                   {{"student", seq_s}, {"teacher", seq_t}, {"labels", seq_labels}},
                   [](const Inputs& in) {
                     const at::Tensor d = Kl(at::log_softmax(in.at("teacher"), -1),
                                             at::log_softmax(in.at("student"), -1));
                     const at::Tensor keep = in.at("labels").ne(-100);
                     return d.masked_fill(keep.logical_not(), 0).sum() / keep.sum();
                   }});
  cases.push_back({"generalized_jsd",
                   "generalized_jsd",
                   "",
                   {{"student", seq_s}, {"teacher", seq_t}, {"labels", seq_labels}},
                   [](const Inputs& in) {
                     const at::Tensor ls = at::log_softmax(in.at("student"), -1);
                     const at::Tensor lt = at::log_softmax(in.at("teacher"), -1);
                     const at::Tensor lm = at::logaddexp(lt + std::log(0.5), ls + std::log(0.5));
                     const at::Tensor d = 0.5 * Kl(lt, lm) + 0.5 * Kl(ls, lm);
                     const at::Tensor keep = in.at("labels").ne(-100);
                     return d.masked_fill(keep.logical_not(), 0).sum() / keep.sum();
                   }});
  cases.push_back({"mahalanobis_mse",
                   "mahalanobis_mse",
                   "",
                   {{"student", hid_s}, {"teacher", hid_t}, {"weight_matrix", head}},
                   [](const Inputs& in) {
                     // The metric computed once, as the loss caches it.
                     static const at::Tensor m = [&] {
                       at::NoGradGuard no_grad;
                       const at::Tensor w = in.at("weight_matrix").detach();
                       return at::matmul(w.t(), w);
                     }();
                     const at::Tensor diff = in.at("student") - in.at("teacher");
                     return (at::matmul(diff, m) * diff).sum(-1).mean();
                   }});
  cases.push_back(
      {"relkd_da", "relkd_da", "", {{"student", emb_s}, {"teacher", emb_t}}, [](const Inputs& in) {
         auto dist = [](const at::Tensor& x) {
           const at::Tensor d = at::cdist(x, x);
           return d / (d.masked_select(d > 0).mean() + 1e-8);
         };
         at::Tensor td, ta;
         {
           at::NoGradGuard no_grad;
           td = dist(in.at("teacher"));
           ta = PivotAngles(in.at("teacher"));
         }
         const at::Tensor s = in.at("student");
         return at::smooth_l1_loss(dist(s), td) + 2.0 * at::smooth_l1_loss(PivotAngles(s), ta);
       }});
  for (Case& c : loss_benchmark::MethodCases({logits_s, logits_t, map_s, map_t, emb_s, emb_t})) {
    cases.push_back(std::move(c));
  }
  return cases;
}

// Fresh leaves for a step (gradients of the previous step dropped).
Inputs Leaves(const Inputs& inputs) {
  Inputs out;
  for (const auto& [name, t] : inputs) {
    out[name] =
        t.is_floating_point() && name != "weight_matrix" ? t.detach().requires_grad_(true) : t;
  }
  return out;
}

struct Step {
  std::function<void()> criterion, inline_step;
};

Step Prepare(const Case& c) {
  CriterionConfig config;
  LossTermConfig* term = config.add_terms();
  if (!google::protobuf::TextFormat::MergeFromString(c.kwargs, term)) std::abort();
  term->set_key(c.key);
  for (const auto& [name, t] : c.inputs) {
    IoRef* ref = term->add_inputs();
    ref->set_arg(name);
    if (name == "targets") {
      ref->set_source(IoRef::TARGETS);
    } else {
      ref->set_source(name == "teacher" ? IoRef::TEACHER : IoRef::STUDENT);
      ref->set_path(name);
    }
  }
  auto criterion = std::make_shared<Criterion>(*Criterion::FromConfig(config));
  const Inputs inputs = c.inputs;
  const auto inline_fn = c.inline_fn;
  auto forward = [criterion, inputs] {
    const Inputs in = Leaves(inputs);
    IoDict s_io, t_io;
    for (const auto& [name, t] : in) (name == "teacher" ? t_io : s_io)[name][kOutput] = t;
    const at::Tensor targets = in.count("targets") ? in.at("targets") : at::Tensor();
    absl::StatusOr<CriterionResult> result =
        criterion->Forward({.student_io = &s_io, .teacher_io = &t_io, .targets = targets});
    if (!result.ok()) {
      std::cerr << result.status() << "\n";
      std::abort();
    }
    return result->total;
  };
  // The two sides time the same computation: their values agree first.
  const at::Tensor by_criterion = forward().detach(), by_hand = inline_fn(inputs).detach();
  if (!at::allclose(by_criterion, by_hand, 1e-4, 1e-6)) {
    std::cerr << c.name << ": the criterion gives " << by_criterion.item<double>()
              << ", the inline formula " << by_hand.item<double>() << "\n";
    std::abort();
  }
  Step step;
  step.criterion = [forward] { forward().backward(); };
  step.inline_step = [inline_fn, inputs] { inline_fn(Leaves(inputs)).backward(); };
  return step;
}

double MedianSeconds(const std::function<void()>& fn, int runs) {
  std::vector<double> times;
  for (int i = 0; i < runs + 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i >= 3) times.push_back(s);
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

// The peer script (peer_loss_timing.py) serving timings: it loads the saved inputs, then for
// each request line "case runs" answers "case seconds" (median of `runs` forward + backward
// steps; "-" when no peer has the loss). Requests alternate with libkd's own timings, so both
// sides see the same machine state: the ratio is a median of paired ratios, as for criterion /
// inline.
std::optional<double> PeerSeconds(test::PeerProcess& peer, const std::string& name, int runs) {
  const std::optional<std::vector<double>> answer = peer.Ask(absl::StrCat(name, " ", runs));
  if (!answer.has_value() || answer->size() != 1) return std::nullopt;
  return answer->front();
}

int Main() {
  at::set_num_threads(1);
  const int pairs = absl::GetFlag(FLAGS_pairs);
  const std::string only = absl::GetFlag(FLAGS_only);
  std::vector<Case> cases = Cases();
  if (!only.empty()) {
    const std::vector<std::string> names = absl::StrSplit(only, ',');
    cases.erase(std::remove_if(cases.begin(), cases.end(),
                               [&](const Case& c) {
                                 return std::find(names.begin(), names.end(), c.name) ==
                                        names.end();
                               }),
                cases.end());
  }
  std::unique_ptr<test::PeerProcess> peers;
  if (absl::GetFlag(FLAGS_peers)) {
    c10::impl::GenericDict all(c10::StringType::get(), c10::AnyType::get());
    for (const Case& c : cases) {
      c10::impl::GenericDict inputs(c10::StringType::get(), c10::TensorType::get());
      for (const auto& [name, t] : c.inputs) inputs.insert(name, t);
      all.insert(c.name, inputs);
    }
    const std::string path = "/tmp/libkd_loss_benchmark_inputs.pt";
    if (absl::Status written = WriteTorchFile(path, all); !written.ok()) {
      std::cerr << written << "\n";
      return 1;
    }
    // bazel run's working folder is the main repository's runfiles; @libtorch's are beside it.
    peers = std::make_unique<test::PeerProcess>();
    if (!peers->Start({.script = "distill/losses/peer_loss_timing.py", .args = {path}})) {
      std::cerr << "could not start the peer script\n";
      return 1;
    }
  }
  std::cout << absl::StrFormat("%-16s %18s %12s %14s\n", "loss", "criterion/inline", "libkd (ms)",
                               "libkd/peer");
  bool within = true;
  for (const Case& c : cases) {
    const Step step = Prepare(c);
    const double ratio = test::MedianPairedRatio(step.inline_step, step.criterion, pairs);
    within = within && ratio <= 1.05;
    const double seconds = MedianSeconds(step.criterion, pairs);
    std::string versus = "-";
    if (peers != nullptr) {
      // Rounds of 5 steps each side, alternating; the median of the rounds' ratios.
      std::vector<double> ratios;
      for (int round = 0; round < std::max(3, pairs / 5); ++round) {
        const std::optional<double> peer = PeerSeconds(*peers, c.name, 5);
        if (!peer.has_value()) break;
        ratios.push_back(MedianSeconds(step.criterion, 5) / *peer);
      }
      if (!ratios.empty()) {
        std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
        versus = absl::StrFormat("%.3f", ratios[ratios.size() / 2]);
      }
    }
    std::cout << absl::StrFormat("%-16s %18.3f %12.2f %14s\n", c.name, ratio, seconds * 1e3,
                                 versus);
  }
  std::cout << (within ? "every criterion/inline ratio <= 1.05\n"
                       : "some criterion/inline ratio > 1.05\n");
  return within ? 0 : 1;
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kd::Main();
}
