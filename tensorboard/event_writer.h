// TensorBoard event files written from C++, no Python at run time: scalars, text and
// histograms as TensorBoard's Event/Summary protos (summary.proto), framed as TensorBoard's
// record format requires (each record: its length as 8 little-endian bytes, the length's masked
// CRC-32C, the bytes, their masked CRC-32C).
//
//   KD_ASSIGN_OR_RETURN(std::unique_ptr<kd::tensorboard::EventWriter> tb,
//                       kd::tensorboard::EventWriter::Open("runs/kd/tb"));
//   KD_RETURN_IF_ERROR(tb->Scalar("train/loss", 0.42, /*step=*/50));
//
// A file is events.out.tfevents.<seconds>.<host>.<pid>.<n> (TensorBoard reads files with
// "tfevents" in their name, one run per folder), opened by Open, its first record the file
// version. Each record is one write(2) of its own: a process killed mid-run leaves whole records
// and at most one partial last record, which TensorBoard's reader stops at (as in files
// PyTorch's SummaryWriter leaves).
#ifndef LIBKD_TENSORBOARD_EVENT_WRITER_H_
#define LIBKD_TENSORBOARD_EVENT_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensorboard/summary.pb.h"

namespace kd {
namespace tensorboard {

class EventWriter {
 public:
  // A new event file in `dir` (created if missing). An error names the folder and why.
  static absl::StatusOr<std::unique_ptr<EventWriter>> Open(const std::string& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // A scalar (the scalars plugin; TensorBoard stores it as a float32).
  absl::Status Scalar(const std::string& tag, double value, int64_t step);
  // Text (the text plugin renders it as Markdown).
  absl::Status Text(const std::string& tag, const std::string& text, int64_t step);
  // The histogram of `values` (the histograms and distributions plugins) over TensorBoard's
  // default buckets (limits +-1e-12 * 1.1^k, 0 and DBL_MAX, as torch.utils.tensorboard's
  // bins="tensorflow"), from the one before the first non-empty bucket to the last.
  absl::Status Histogram(const std::string& tag, absl::Span<const float> values, int64_t step);
  // Writes `event` as one record (wall_time set to now if 0).
  absl::Status Write(Event event);

  const std::string& path() const { return path_; }

 private:
  EventWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  std::string path_;
  int fd_;
};

// The record framing of `data`: what EventWriter writes for one serialized Event.
std::string FrameRecord(const std::string& data);

// TensorBoard's default histogram bucket limits, ascending, DBL_MAX last.
const std::vector<double>& DefaultBucketLimits();

}  // namespace tensorboard
}  // namespace kd

#endif  // LIBKD_TENSORBOARD_EVENT_WRITER_H_
