#include "tensorboard/event_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cfloat>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tensorboard/crc32c.h"

namespace kd {
namespace tensorboard {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void AppendLittleEndian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

std::atomic<int> files_opened{0};

}  // namespace

std::string FrameRecord(const std::string& data) {
  std::string record;
  record.reserve(data.size() + 16);
  AppendLittleEndian(record, data.size(), 8);
  AppendLittleEndian(record, MaskedCrc32c(absl::string_view(record.data(), 8)), 4);
  record += data;
  AppendLittleEndian(record, MaskedCrc32c(data), 4);
  return record;
}

const std::vector<double>& DefaultBucketLimits() {
  static const std::vector<double>* limits = [] {
    std::vector<double> positive;
    for (double v = 1e-12; v < 1e20; v *= 1.1) positive.push_back(v);
    auto* all = new std::vector<double>();
    for (auto it = positive.rbegin(); it != positive.rend(); ++it) all->push_back(-*it);
    all->push_back(0);
    all->insert(all->end(), positive.begin(), positive.end());
    all->push_back(DBL_MAX);
    return all;
  }();
  return *limits;
}

absl::StatusOr<std::unique_ptr<EventWriter>> EventWriter::Open(const std::string& dir) {
  // Something other than a folder in its place (a file, a FIFO, a symbolic link, a loop of
  // them) is the user's to remove: bad input, never written through.
  struct stat st;
  if (lstat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TensorBoard folder ", dir, ": ",
        S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a file",
        " is in its place; libkd writes events only into a folder of its own: remove it, or "
        "give --tensorboard=false"));
  }
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error || !std::filesystem::is_directory(dir)) {
    const bool in_the_way = error == std::errc::not_a_directory ||
                            error == std::errc::file_exists ||
                            error == std::errc::too_many_symbolic_link_levels;
    const std::string message = absl::StrCat(
        "TensorBoard folder ", dir,
        ": cannot create it: ", error ? error.message() : "a file of that name is in the way");
    return in_the_way ? absl::InvalidArgumentError(message) : absl::UnavailableError(message);
  }
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const std::string path = (std::filesystem::path(dir) /
                            absl::StrCat("events.out.tfevents.", static_cast<int64_t>(Now()), ".",
                                         host, ".", getpid(), ".", files_opened.fetch_add(1)))
                               .string();
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("TensorBoard event file ", path, ": cannot create it: ", strerror(errno)));
  }
  std::unique_ptr<EventWriter> writer(new EventWriter(path, fd));
  Event version;
  version.set_file_version("brain.Event:2");
  absl::Status written = writer->Write(std::move(version));
  if (!written.ok()) return written;
  return writer;
}

EventWriter::~EventWriter() { close(fd_); }

absl::Status EventWriter::Write(Event event) {
  if (event.wall_time() == 0) event.set_wall_time(Now());
  const std::string record = FrameRecord(event.SerializeAsString());
  // One write(2): a kill leaves the record whole or cut at its end, never interleaved.
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::InternalError(
          absl::StrCat("TensorBoard event file ", path_, ": write failed: ", strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status EventWriter::Scalar(const std::string& tag, double value, int64_t step) {
  Event event;
  event.set_step(step);
  Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  return Write(std::move(event));
}

absl::Status EventWriter::Text(const std::string& tag, const std::string& text, int64_t step) {
  Event event;
  event.set_step(step);
  Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  TensorProto* tensor = v->mutable_tensor();
  tensor->set_dtype(DT_STRING);
  tensor->mutable_tensor_shape()->add_dim()->set_size(1);
  tensor->add_string_val(text);
  return Write(std::move(event));
}

absl::Status EventWriter::Histogram(const std::string& tag, absl::Span<const float> values,
                                    int64_t step) {
  Event event;
  event.set_step(step);
  Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  HistogramProto* histo = v->mutable_histo();
  const std::vector<double>& limits = DefaultBucketLimits();
  std::vector<double> counts(limits.size(), 0);
  double min = DBL_MAX, max = -DBL_MAX, sum = 0, sum_squares = 0;
  for (float f : values) {
    const double x = f;
    min = std::min(min, x);
    max = std::max(max, x);
    sum += x;
    sum_squares += x * x;
    // The first limit >= x: bucket i holds (limits[i - 1], limits[i]].
    counts[std::lower_bound(limits.begin(), limits.end(), x) - limits.begin()] += 1;
  }
  histo->set_min(values.empty() ? 0 : min);
  histo->set_max(values.empty() ? 0 : max);
  histo->set_num(static_cast<double>(values.size()));
  histo->set_sum(sum);
  histo->set_sum_squares(sum_squares);
  // The buckets from the one before the first non-empty one (its limit is the first's left
  // edge) to the last non-empty one, empty ones between kept (each bucket's left edge is the
  // limit before it), as torch.utils.tensorboard trims them.
  size_t first = 0, last = 0;
  while (first < counts.size() && counts[first] == 0) ++first;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] > 0) last = i;
  }
  if (first < counts.size()) {
    for (size_t i = first > 0 ? first - 1 : 0; i <= last; ++i) {
      histo->add_bucket_limit(limits[i]);
      histo->add_bucket(counts[i]);
    }
  }
  return Write(std::move(event));
}

}  // namespace tensorboard
}  // namespace kd
