// The record format against known values: CRC-32C's check values (the CRC catalogue's and RFC
// 3720's), a file read back record by record (lengths and masked CRCs checked, each record an
// Event), histograms' buckets. TensorBoard's own reader reads the files libkd's runs write:
// //tools:tensorboard_test.
#include "tensorboard/event_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensorboard/crc32c.h"
#include "testing/status_matchers.h"

namespace kd {
namespace tensorboard {
namespace {

TEST(Crc32cTest, CheckValues) {
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);              // the CRC catalogue's check
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);    // RFC 3720, B.4
  EXPECT_EQ(Crc32c(std::string(32, '\xFF')), 0x62A8AB43u);  // RFC 3720, B.4
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);  // RFC 3720, B.4
}

uint64_t LittleEndian(const std::string& bytes, size_t at, int n) {
  uint64_t value = 0;
  for (int i = n - 1; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
  return value;
}

// The file's records, each checked against its masked CRCs.
std::vector<Event> ReadRecords(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  std::vector<Event> events;
  size_t at = 0;
  while (at < bytes.size()) {
    const uint64_t length = LittleEndian(bytes, at, 8);
    EXPECT_EQ(LittleEndian(bytes, at + 8, 4), MaskedCrc32c(bytes.substr(at, 8)));
    const std::string data = bytes.substr(at + 12, length);
    EXPECT_EQ(LittleEndian(bytes, at + 12 + length, 4), MaskedCrc32c(data));
    Event event;
    EXPECT_TRUE(event.ParseFromString(data));
    events.push_back(event);
    at += 16 + length;
  }
  EXPECT_EQ(at, bytes.size());
  return events;
}

TEST(EventWriterTest, RecordsReadBack) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/tb";
  std::string path;
  {
    absl::StatusOr<std::unique_ptr<EventWriter>> writer = EventWriter::Open(dir);
    ASSERT_THAT(writer, IsOk());
    path = (*writer)->path();
    EXPECT_THAT(path, ::testing::HasSubstr("/events.out.tfevents."));
    ASSERT_THAT((*writer)->Scalar("train/loss", 0.25, 7), IsOk());
    ASSERT_THAT((*writer)->Text("config", "run { seed: 1 }", 0), IsOk());
    ASSERT_THAT((*writer)->Histogram("fc.weight", std::vector<float>{-1, 0, 0.5, 2}, 3), IsOk());
  }
  const std::vector<Event> events = ReadRecords(path);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_GT(events[0].wall_time(), 1.7e9);
  EXPECT_EQ(events[1].step(), 7);
  EXPECT_EQ(events[1].summary().value(0).tag(), "train/loss");
  EXPECT_EQ(events[1].summary().value(0).simple_value(), 0.25f);
  const Summary::Value& text = events[2].summary().value(0);
  EXPECT_EQ(text.metadata().plugin_data().plugin_name(), "text");
  EXPECT_EQ(text.tensor().dtype(), DT_STRING);
  EXPECT_EQ(text.tensor().string_val(0), "run { seed: 1 }");
  const HistogramProto& histo = events[3].summary().value(0).histo();
  EXPECT_EQ(histo.num(), 4);
  EXPECT_EQ(histo.sum(), 1.5);
  EXPECT_EQ(histo.sum_squares(), 5.25);
  EXPECT_EQ(histo.min(), -1);
  EXPECT_EQ(histo.max(), 2);
  double counted = 0;
  for (int i = 0; i < histo.bucket_size(); ++i) counted += histo.bucket(i);
  EXPECT_EQ(counted, 4);
  // Each value in its bucket (left edge: the limit before): -1 in (-1.0xxx, -0.9xxx]... the
  // bucket holding 0 is (−1e-12, 0].
  for (float v : {-1.0f, 0.0f, 0.5f, 2.0f}) {
    int found = 0;
    for (int i = 1; i < histo.bucket_size(); ++i) {
      if (histo.bucket_limit(i - 1) < v && v <= histo.bucket_limit(i)) {
        EXPECT_EQ(histo.bucket(i), 1) << v;
        ++found;
      }
    }
    EXPECT_EQ(found, 1) << v;
  }
  EXPECT_EQ(histo.bucket(0), 0);  // the left edge of the first non-empty bucket
}

TEST(EventWriterTest, DefaultBucketsAreTensorboards) {
  const std::vector<double>& limits = DefaultBucketLimits();
  // 1e-12 * 1.1^k below 1e20: k = 0..773, both signs, 0 and DBL_MAX.
  EXPECT_EQ(limits.size(), 2 * 774 + 2);
  EXPECT_TRUE(std::is_sorted(limits.begin(), limits.end()));
  EXPECT_EQ(limits[774], 0);
  EXPECT_DOUBLE_EQ(limits[775], 1e-12);
}

// Something in the folder's place is bad input (exit 2 from the tools), never written through.
TEST(EventWriterTest, AFolderInTheWayIsOneError) {
  const std::string tmp = std::getenv("TEST_TMPDIR");
  const std::string file = tmp + "/a_file";
  std::ofstream(file) << "x";
  EXPECT_THAT(EventWriter::Open(file),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "TensorBoard folder " + file +
                           ": a file is in its place; libkd writes events only into a folder of "
                           "its own: remove it, or give --tensorboard=false"));
  EXPECT_THAT(EventWriter::Open(file + "/tb"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("a_file/tb: cannot create it: Not a directory")));
  const std::string fifo = tmp + "/a_fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(EventWriter::Open(fifo), StatusIs(absl::StatusCode::kInvalidArgument,
                                                ::testing::HasSubstr(": a FIFO is in its place")));
  const std::string loop = tmp + "/a_loop";
  ASSERT_EQ(symlink(loop.c_str(), loop.c_str()), 0);
  EXPECT_THAT(EventWriter::Open(loop),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr(": a symbolic link is in its place")));
  // A link to a real folder elsewhere is not followed either.
  const std::string elsewhere = tmp + "/elsewhere", link = tmp + "/tb_link";
  ASSERT_EQ(mkdir(elsewhere.c_str(), 0755), 0);
  ASSERT_EQ(symlink(elsewhere.c_str(), link.c_str()), 0);
  EXPECT_THAT(EventWriter::Open(link), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace tensorboard
}  // namespace kd
