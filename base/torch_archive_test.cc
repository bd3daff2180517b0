#include "base/torch_archive.h"

#include <string>

#include "base/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Fixture(const std::string& name) {
  absl::StatusOr<std::string> bytes = ReadFile("tests/testdata/" + name);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.value_or("");
}

const TorchArchive::Record* Find(const TorchArchive& archive, const std::string& suffix) {
  for (const TorchArchive::Record& r : archive.records) {
    if (r.name.size() >= suffix.size() &&
        r.name.compare(r.name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return &r;
    }
  }
  return nullptr;
}

TEST(TorchArchiveTest, TellsTorchScriptFromTorchSave) {
  absl::StatusOr<TorchArchive> model = VerifyTorchArchive(Fixture("small_cnn.pt"));
  ASSERT_THAT(model, IsOk());
  EXPECT_EQ(model->kind, TorchArchive::Kind::kTorchScript);
  EXPECT_EQ(model->prefix, "small_cnn");
  EXPECT_NE(Find(*model, "/constants.pkl"), nullptr);
  // torch 2.x writes format version 10 (caffe2/serialize/versions.h's kProducedFileFormatVersion
  // for modules with no newer operators... read from the file, not assumed: positive).
  EXPECT_GT(model->format_version, 0);

  absl::StatusOr<TorchArchive> state = VerifyTorchArchive(Fixture("small_cnn.state.pt"));
  ASSERT_THAT(state, IsOk());
  EXPECT_EQ(state->kind, TorchArchive::Kind::kTorchSave);
  EXPECT_NE(Find(*state, "/data.pkl"), nullptr);
}

TEST(TorchArchiveTest, ACorruptedRecordIsNamed) {
  std::string bytes = Fixture("small_cnn.state.pt");
  absl::StatusOr<TorchArchive> archive = InspectTorchArchive(bytes);
  ASSERT_THAT(archive, IsOk());
  const TorchArchive::Record* data = Find(*archive, "/data/0");
  ASSERT_NE(data, nullptr);
  ASSERT_GT(data->size, 3u);
  bytes[data->data_offset + 3] ^= 0x10;  // one bit of the first tensor's storage
  EXPECT_THAT(VerifyTorchArchive(bytes),
              StatusIs(absl::StatusCode::kDataLoss,
                       StartsWith("record \"" + data->name + "\" is corrupted: its CRC-32 is")));
  // Inspection alone does not read the records' contents.
  EXPECT_THAT(InspectTorchArchive(bytes), IsOk());
}

TEST(TorchArchiveTest, EveryRecordIsChecked) {
  const std::string original = Fixture("small_cnn.pt");
  absl::StatusOr<TorchArchive> archive = InspectTorchArchive(original);
  ASSERT_THAT(archive, IsOk());
  int checked = 0;
  for (const TorchArchive::Record& r : archive->records) {
    if (r.size == 0) continue;
    std::string bytes = original;
    bytes[r.data_offset + r.size / 2] ^= 0x01;
    EXPECT_THAT(VerifyTorchArchive(bytes),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("\"" + r.name + "\"")));
    ++checked;
  }
  EXPECT_GT(checked, 5);
}

TEST(TorchArchiveTest, TruncatedFilesAreCutShort) {
  const std::string bytes = Fixture("small_cnn.pt");
  for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{100}, size_t{10}}) {
    EXPECT_THAT(InspectTorchArchive(bytes.substr(0, keep)),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cut short")))
        << keep;
  }
}

TEST(TorchArchiveTest, NamesWhatIsNotAnArchive) {
  EXPECT_THAT(InspectTorchArchive(Fixture("small_cnn.legacy_state.pt")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       StartsWith("a legacy torch.save file (the pre-1.6 format")));
  EXPECT_THAT(InspectTorchArchive("student { }"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       StartsWith("not a zip archive (11 bytes beginning 0x73)")));
  EXPECT_THAT(InspectTorchArchive(""), StatusIs(absl::StatusCode::kInvalidArgument,
                                                StartsWith("not a zip archive (0 bytes)")));
}

TEST(TorchArchiveTest, DirectoryOutsideTheFileIsDamage) {
  std::string bytes = Fixture("small_cnn.state.pt");
  // The end record's directory offset (its bytes 16..19) pointed past the end.
  const size_t end = bytes.rfind(std::string("PK\x05\x06", 4));
  ASSERT_NE(end, std::string::npos);
  if (bytes.rfind(std::string("PK\x06\x07", 4)) == std::string::npos) {
    bytes[end + 19] = '\x7f';
    EXPECT_THAT(InspectTorchArchive(bytes),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside the file")));
  }
}

}  // namespace
}  // namespace kd
