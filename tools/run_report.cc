#include "tools/run_report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/types/span.h"
#include "base/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/type_resolver.h"
#include "google/protobuf/util/type_resolver_util.h"
#include "hooks/model.h"
#include "tools/run_log.pb.h"

namespace kd {

std::string Digest(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return absl::StrFormat("%016x", h);
}

std::string Json(const google::protobuf::Message& message) {
  std::string binary;
  {
    google::protobuf::io::StringOutputStream stream(&binary);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  constexpr char kUrlPrefix[] = "type.googleapis.com";
  static google::protobuf::util::TypeResolver* const resolver =
      google::protobuf::util::NewTypeResolverForDescriptorPool(
          kUrlPrefix, google::protobuf::DescriptorPool::generated_pool());
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::BinaryToJsonString(
      resolver, absl::StrCat(kUrlPrefix, "/", message.GetDescriptor()->full_name()), binary, &out,
      options);
  return out;
}

double MetricOrNan(const google::protobuf::Map<std::string, double>& metrics,
                   const std::string& name) {
  const auto it = metrics.find(name);
  return it == metrics.end() ? NAN : it->second;
}

std::string Clock(double seconds) {
  const int64_t s = static_cast<int64_t>(std::lround(seconds));
  return absl::StrFormat("%02d:%02d", s / 60, s % 60);
}

Reporter::Reporter(const std::string& run_dir, std::string job)
    : job_(std::move(job)), tty_(isatty(STDERR_FILENO) != 0) {
  jsonl_.open((std::filesystem::path(run_dir) / "metrics.jsonl").string(), std::ios::app);
}

absl::Status Reporter::EnableTensorboard(const std::string& dir, const std::string& config_text) {
  KD_ASSIGN_OR_RETURN(tb_, tensorboard::EventWriter::Open(dir));
  // Markdown: the config as a code block.
  return tb_->Text("config", "    " + absl::StrReplaceAll(config_text, {{"\n", "\n    "}}), 0);
}

void Reporter::Written(const absl::Status& status) {
  if (status.ok() || tb_ == nullptr) return;
  std::cerr << "\n" << job_ << ": TensorBoard events left off: " << status.message() << std::endl;
  tb_.reset();
}

void Reporter::TbScalar(const std::string& tag, double value, int64_t step) {
  if (tb_ != nullptr) Written(tb_->Scalar(tag, value, step));
}

Reporter::~Reporter() {
  for (auto& [tensor, hook] : grad_hooks_) tensor.remove_hook(hook);
}

void Reporter::WatchGradients(Model& student) {
  for (const auto& [name, tensor] : student.NamedParameters()) {
    if (!tensor.requires_grad()) continue;
    at::Tensor param = tensor;
    const unsigned hook = param.register_hook(
        [this, name = name](const at::Tensor& grad) { last_grads_[name] = grad; });
    grad_hooks_.emplace_back(param, hook);
  }
}

void Reporter::Histograms(Model& student, const std::string& stage, int64_t epoch) {
  if (tb_ == nullptr) return;
  for (const auto& [name, tensor] : student.NamedParameters()) {
    for (const bool grads : {false, true}) {
      at::Tensor values = tensor;
      if (grads) {
        auto it = last_grads_.find(name);
        values = it != last_grads_.end() ? it->second : tensor.grad();
      }
      if (!values.defined()) continue;
      const at::Tensor flat = values.detach().to(at::kCPU, at::kFloat).contiguous().view({-1});
      if (tb_ == nullptr) return;  // a failed write turned TensorBoard off
      Written(tb_->Histogram(absl::StrCat(stage, grads ? "/grads/" : "/params/", name),
                             absl::Span<const float>(flat.data_ptr<float>(), flat.numel()), epoch));
    }
  }
}

void Reporter::Step(const StepReport& r) {
  MetricsLine line;
  StepLine* step = line.mutable_step();
  step->set_stage(r.stage);
  step->set_epoch(r.epoch);
  step->set_step(r.step);
  step->set_loss(r.loss);
  for (const auto& [name, value] : r.terms) (*step->mutable_terms())[name] = value;
  step->set_lr(r.lr);
  step->set_samples_per_second(r.samples_per_second);
  step->set_steps_per_epoch(r.steps_per_epoch);
  jsonl_ << Json(line) << "\n";
  if (tb_ != nullptr) {
    if (r.stage != stage_) {  // a new stage: its steps count on from the last one's
      stage_offset_ += stage_steps_;
      stage_steps_ = 0;
      stage_ = r.stage;
    }
    const int64_t global = (r.epoch - 1) * r.steps_per_epoch + r.step;
    stage_steps_ = std::max(stage_steps_, r.epoch * r.steps_per_epoch);
    const int64_t at = stage_offset_ + global;
    TbScalar(r.stage + "/loss", r.loss, at);
    for (const auto& [name, value] : r.terms) {
      TbScalar(absl::StrCat(r.stage, "/terms/", name), value, at);
    }
    TbScalar(r.stage + "/lr", r.lr, at);
    TbScalar(r.stage + "/samples_per_second", r.samples_per_second, at);
  }
  const double eta = static_cast<double>(r.steps_per_epoch - r.step) * r.seconds_per_step;
  const int width = 24;
  const int done = static_cast<int>(width * r.step / std::max<int64_t>(1, r.steps_per_epoch));
  const std::string text =
      absl::StrFormat("%s %s epoch %d [%s%s] %d/%d %.0f samples/s loss %.4f ETA %s", job_, r.stage,
                      r.epoch, std::string(done, '='), std::string(width - done, ' '), r.step,
                      r.steps_per_epoch, r.samples_per_second, r.loss, Clock(eta));
  if (tty_) {
    std::cerr << "\r" << text << std::flush;
  } else {
    std::cerr << text << "\n";
  }
}

void Reporter::Epoch(const EpochReport& r) {
  MetricsLine line;
  EpochLine* epoch = line.mutable_epoch();
  epoch->set_stage(r.stage);
  epoch->set_epoch(r.epoch);
  epoch->set_train_loss(r.train_loss);
  for (const auto& [name, value] : r.metrics) (*epoch->mutable_metrics())[name] = value;
  epoch->set_lr(r.lr);
  epoch->set_seconds(r.seconds);
  epoch->set_samples_per_second(r.samples_per_second);
  std::string cache;
  if (r.teacher_cache.has_value()) {
    const TeacherCacheReport& c = *r.teacher_cache;
    TeacherCacheLine* out = epoch->mutable_teacher_cache();
    out->set_on(c.on);
    out->set_off_reason(c.off_reason);
    out->set_hits(c.hits);
    out->set_misses(c.misses);
    out->set_bytes_memory(c.bytes_memory);
    out->set_bytes_disk(c.bytes_disk);
    out->set_teacher_seconds(c.teacher_seconds);
    out->set_saved_seconds(c.saved_seconds);
    out->set_overlapped(c.overlapped);
    out->set_overlap_off_reason(c.overlap_off_reason);
    out->set_lookahead_rows(c.lookahead_rows);
    out->set_lookahead_off_reason(c.lookahead_off_reason);
    const int64_t rows = c.hits + c.misses;
    if (rows > 0 && (c.on || c.hits > 0)) {
      cache += absl::StrFormat("; teacher cache %.0f%% hits, %.1f MB, %.1f s saved",
                               100.0 * static_cast<double>(c.hits) / static_cast<double>(rows),
                               static_cast<double>(c.bytes_memory + c.bytes_disk) / 1e6,
                               c.saved_seconds);
    }
    if (!c.on && !c.off_reason.empty() && c.off_reason != "teacher_cache mode OFF") {
      cache += absl::StrCat("; teacher cache off: ", c.off_reason);
    }
    if (c.on && c.lookahead_rows > 0) {
      cache += absl::StrCat(", look-ahead ", c.lookahead_rows, " rows");
    } else if (c.on && !c.overlapped && !c.lookahead_off_reason.empty() &&
               c.lookahead_off_reason != "lookahead_rows 0") {
      cache += absl::StrCat("; look-ahead off: ", c.lookahead_off_reason);
    }
    if (c.overlapped) cache += "; teacher overlapped";
  }
  jsonl_ << Json(line) << std::endl;
  if (tb_ != nullptr) {
    const std::string prefix = r.stage + "/epoch/";
    TbScalar(prefix + "train_loss", r.train_loss, r.epoch);
    for (const auto& [name, value] : r.metrics) {
      TbScalar(prefix + "val_" + name, value, r.epoch);
    }
    TbScalar(prefix + "lr", r.lr, r.epoch);
    TbScalar(prefix + "seconds", r.seconds, r.epoch);
    TbScalar(prefix + "samples_per_second", r.samples_per_second, r.epoch);
  }
  std::vector<std::string> metrics;
  for (const auto& [name, value] : r.metrics) {
    metrics.push_back(absl::StrFormat("%s %.4f", name, value));
  }
  if (tty_) std::cerr << "\r\033[K";
  std::cerr << absl::StrFormat(
      "%s %s epoch %d/%d: train loss %.4f, val %s, lr %.4g, %.1f s "
      "(%.0f samples/s)%s\n",
      job_, r.stage, r.epoch, r.num_epochs, r.train_loss,
      metrics.empty() ? "-" : absl::StrJoin(metrics, ", "), r.lr, r.seconds, r.samples_per_second,
      cache);
}

}  // namespace kd
