// What //tools:distill writes about a run: one line of JSON per message (metrics.jsonl,
// summary.json, stdout), the progress lines on stderr, and the config's digest.
#ifndef LIBKD_TOOLS_RUN_REPORT_H_
#define LIBKD_TOOLS_RUN_REPORT_H_

#include <fstream>
#include <string>

#include "distill/boxes/box.h"
#include "google/protobuf/message.h"

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

// Progress: a bar redrawn in place on a terminal, plain lines otherwise; metrics.jsonl in the
// run folder, appended to.
class Reporter {
 public:
  Reporter(const std::string& run_dir, std::string job);
  void Step(const StepReport& r);
  void Epoch(const EpochReport& r);

 private:
  std::string job_;
  bool tty_;
  std::ofstream jsonl_;
};

}  // namespace kd

#endif  // LIBKD_TOOLS_RUN_REPORT_H_
