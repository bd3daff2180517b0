// What //tools:distill writes about a run: one line of JSON per message (metrics.jsonl,
// summary.json, stdout), the progress lines on stderr, and the config's digest.
#ifndef LIBKD_TOOLS_RUN_REPORT_H_
#define LIBKD_TOOLS_RUN_REPORT_H_

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "distill/boxes/box.h"
#include "google/protobuf/map.h"
#include "google/protobuf/message.h"
#include "tensorboard/event_writer.h"

namespace kd {

// FNV-1a of `text`, as 16 hex digits.
std::string Digest(const std::string& text);

// One line of JSON, the same for the same message in every process: MessageToJsonString prints
// a map in its hash order, which differs between runs, so the message goes through protobuf's
// deterministic wire form (fields by number, map entries by key), which BinaryToJsonString
// prints in the order it reads.
std::string Json(const google::protobuf::Message& message);

// "mm:ss".
std::string Clock(double seconds);

// `metrics`' value of `name` (a RunSummary's test_metrics or final_metrics), NaN without one:
// what the default jobs' tables print.
double MetricOrNan(const google::protobuf::Map<std::string, double>& metrics,
                   const std::string& name);

// Progress: a bar redrawn in place on a terminal, plain lines otherwise; metrics.jsonl in the
// run folder, appended to; with EnableTensorboard, the same values as TensorBoard scalars.
class Reporter {
 public:
  Reporter(const std::string& run_dir, std::string job);
  // TensorBoard event files in `dir` (a new file; a resumed run's adds to the folder): the
  // config as text, then each step line's and epoch line's values as scalars "<stage>/<name>"
  // (step lines at the run's global step, counted over its stages; epoch lines as
  // "<stage>/epoch/<name>" at the epoch).
  absl::Status EnableTensorboard(const std::string& dir, const std::string& config_text);
  void Step(const StepReport& r);
  void Epoch(const EpochReport& r);
  // Keeps the gradient each of the student's parameters gets in a backward pass (a reference,
  // replaced by the next one), for Histograms: the optimizer step zeroes `.grad` right after.
  void WatchGradients(Model& student);
  // Histograms of the student's parameters and of their gradients (the last backward's, with
  // WatchGradients) as "<stage>/params/<name>" and "<stage>/grads/<name>" at the epoch.
  void Histograms(Model& student, const std::string& stage, int64_t epoch);
  ~Reporter();

 private:
  // Scalars and text that fail to write are reported once and then left off: the run goes on.
  void Written(const absl::Status& status);
  // One scalar, if TensorBoard is still on (a failed write turns it off mid-way through a
  // report's scalars: each write checks).
  void TbScalar(const std::string& tag, double value, int64_t step);

  std::string job_;
  bool tty_;
  std::ofstream jsonl_;
  std::unique_ptr<tensorboard::EventWriter> tb_;
  std::map<std::string, at::Tensor> last_grads_;
  std::vector<std::pair<at::Tensor, unsigned>> grad_hooks_;  // removed when the reporter goes
  // The global step of a step line: the steps of the stages before, plus this stage's.
  std::string stage_;
  int64_t stage_offset_ = 0;
  int64_t stage_steps_ = 0;
};

}  // namespace kd

#endif  // LIBKD_TOOLS_RUN_REPORT_H_
