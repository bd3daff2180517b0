#include "distill/losses/internal/chunked_divergence.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace kd {
namespace losses_internal {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// log softmax(x / T) over the last dimension, in float32 (silverspoon-kd upcasts likewise).
at::Tensor LogProbs(const at::Tensor& x, double temperature) {
  return at::log_softmax(x.to(at::kFloat) / temperature, -1);
}

// The chunks [begin, end) of n tokens.
template <typename F>
void ForEachChunk(int64_t n, int64_t chunk, F&& f) {
  for (int64_t begin = 0; begin < n; begin += chunk) f(begin, std::min(begin + chunk, n));
}

// Per-token softmax Jacobian-vector product: p (g - sum(p g)) over the last dimension.
at::Tensor SoftmaxBackward(const at::Tensor& p, const at::Tensor& g) {
  return p * (g - (p * g).sum(-1, /*keepdim=*/true));
}

// The inputs' gradient buffers (undefined where no gradient is needed).
struct Grads {
  at::Tensor student, teacher;
};
Grads EmptyGrads(AutogradContext* ctx, const at::Tensor& s, const at::Tensor& t) {
  return {ctx->needs_input_grad(0) ? at::empty_like(s) : at::Tensor(),
          ctx->needs_input_grad(1) ? at::empty_like(t) : at::Tensor()};
}

struct KlFunction : torch::autograd::Function<KlFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& s, const at::Tensor& t,
                            double temperature, int64_t chunk) {
    ctx->save_for_backward({s, t});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk"] = chunk;
    at::Tensor total = at::zeros({}, s.options().dtype(at::kFloat));
    ForEachChunk(s.size(0), chunk, [&](int64_t begin, int64_t end) {
      const at::Tensor s_log = LogProbs(s.slice(0, begin, end), temperature);
      const at::Tensor t_prob = LogProbs(t.slice(0, begin, end), temperature).exp_();
      total += at::kl_div(s_log, t_prob, at::Reduction::Sum);
    });
    return total / s.size(0) * (temperature * temperature);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &s = saved[0], &t = saved[1];
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const at::Tensor scale = grad_outputs[0].to(at::kFloat) * (temperature / s.size(0));
    Grads grads = EmptyGrads(ctx, s, t);
    ForEachChunk(s.size(0), ctx->saved_data["chunk"].toInt(), [&](int64_t begin, int64_t end) {
      const at::Tensor s_log = LogProbs(s.slice(0, begin, end), temperature);
      const at::Tensor t_log = LogProbs(t.slice(0, begin, end), temperature);
      const at::Tensor t_prob = t_log.exp();
      if (grads.student.defined()) {
        grads.student.slice(0, begin, end).copy_((s_log.exp() - t_prob) * scale);
      }
      if (grads.teacher.defined()) {
        grads.teacher.slice(0, begin, end).copy_(SoftmaxBackward(t_prob, t_log - s_log) * scale);
      }
    });
    return {grads.student, grads.teacher, at::Tensor(), at::Tensor()};
  }
};

struct JsdFunction : torch::autograd::Function<JsdFunction> {
  // log m, m = beta p_t + (1 - beta) p_s.
  static at::Tensor LogMixture(const at::Tensor& s_log, const at::Tensor& t_log, double beta) {
    return at::logaddexp(t_log + std::log(beta), s_log + std::log(1 - beta));
  }

  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& s, const at::Tensor& t,
                            double temperature, double beta, int64_t chunk) {
    ctx->save_for_backward({s, t});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["beta"] = beta;
    ctx->saved_data["chunk"] = chunk;
    at::Tensor total = at::zeros({}, s.options().dtype(at::kFloat));
    ForEachChunk(s.size(0), chunk, [&](int64_t begin, int64_t end) {
      const at::Tensor s_log = LogProbs(s.slice(0, begin, end), temperature);
      const at::Tensor t_log = LogProbs(t.slice(0, begin, end), temperature);
      const at::Tensor log_m = LogMixture(s_log, t_log, beta);
      total += beta * at::kl_div(log_m, t_log.exp(), at::Reduction::Sum) +
               (1 - beta) * at::kl_div(log_m, s_log.exp(), at::Reduction::Sum);
    });
    return total / s.size(0) * (temperature * temperature);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &s = saved[0], &t = saved[1];
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const double beta = ctx->saved_data["beta"].toDouble();
    const at::Tensor scale = grad_outputs[0].to(at::kFloat) * (temperature / s.size(0));
    Grads grads = EmptyGrads(ctx, s, t);
    ForEachChunk(s.size(0), ctx->saved_data["chunk"].toInt(), [&](int64_t begin, int64_t end) {
      const at::Tensor s_log = LogProbs(s.slice(0, begin, end), temperature);
      const at::Tensor t_log = LogProbs(t.slice(0, begin, end), temperature);
      const at::Tensor log_m = LogMixture(s_log, t_log, beta);
      if (grads.student.defined()) {
        grads.student.slice(0, begin, end)
            .copy_(SoftmaxBackward(s_log.exp(), (1 - beta) * (s_log - log_m)) * scale);
      }
      if (grads.teacher.defined()) {
        grads.teacher.slice(0, begin, end)
            .copy_(SoftmaxBackward(t_log.exp(), beta * (t_log - log_m)) * scale);
      }
    });
    return {grads.student, grads.teacher, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// (tokens, vocabulary) views, in the inputs' dtype.
at::Tensor Tokens(const at::Tensor& x) { return x.reshape({-1, x.size(-1)}); }

}  // namespace

at::Tensor ChunkedKlDivergence(const at::Tensor& student, const at::Tensor& teacher,
                               double temperature, int64_t chunk) {
  return KlFunction::apply(Tokens(student), Tokens(teacher), temperature, chunk);
}

at::Tensor ChunkedJsd(const at::Tensor& student, const at::Tensor& teacher, double temperature,
                      double beta, int64_t chunk) {
  return JsdFunction::apply(Tokens(student), Tokens(teacher), temperature, beta, chunk);
}

}  // namespace losses_internal
}  // namespace kd
