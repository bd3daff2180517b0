// A Hugging Face folder's weights: transformers' shards read, the same shards written, shard
// names that would lead the reader out of the folder refused.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "base/file_util.h"
#include "base/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

constexpr char kSharded[] = "tests/testdata/safetensors_hf_sharded";

std::string TempFolder(const std::string& name) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
  return path;
}

std::vector<std::string> Files(const std::string& folder) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

nlohmann::json ReadJson(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  return text.ok() ? nlohmann::json::parse(*text) : nlohmann::json();
}

// The tiny GPT-2's state dict as make_safetensors_fixtures.py recorded it, its values
// ((i % 17) - 8) * 0.125 of the flat index i.
NamedTensors ExpectedGpt2() {
  NamedTensors tensors;
  const nlohmann::json expected = ReadJson("tests/testdata/safetensors_hf_sharded.expected.json");
  for (const nlohmann::json& t : expected["tensors"]) {
    const std::vector<int64_t> shape = t["shape"].get<std::vector<int64_t>>();
    const at::Tensor i = at::arange(c10::multiply_integers(shape), at::kDouble);
    tensors.emplace_back(t["name"].get<std::string>(),
                         ((i.remainder(17) - 8) * 0.125).to(at::kFloat).reshape(shape));
  }
  return tensors;
}

TEST(HfWeightsTest, ReadsTransformersShards) {
  // Bazel's runfiles are links out of the folder, which the reader refuses: a copy.
  const std::string folder = TempFolder("transformers") + "/model";
  std::filesystem::copy(kSharded, folder, std::filesystem::copy_options::recursive);
  absl::StatusOr<NamedTensors> read = ReadHfWeights(folder);
  ASSERT_THAT(read, IsOk());
  const NamedTensors expected = ExpectedGpt2();
  ASSERT_EQ(expected.size(), 16u);
  ASSERT_EQ(read->size(), expected.size());
  std::map<std::string, at::Tensor> by_name(read->begin(), read->end());
  for (const auto& [name, tensor] : expected) {
    SCOPED_TRACE(name);
    ASSERT_EQ(by_name.count(name), 1u);
    EXPECT_TRUE(at::equal(by_name.at(name), tensor));
  }
  // Shard by shard, each in its file's order (all F32: by name).
  EXPECT_EQ(read->front().first, "transformer.h.0.attn.c_attn.bias");
  EXPECT_EQ(read->back().first, "transformer.ln_f.weight");
}

// Split as huggingface_hub splits, written as safetensors writes: the shards are transformers'
// bytes, and the index maps every tensor to the same shard.
TEST(HfWeightsTest, WritesTheShardsTransformersWrites) {
  const std::string folder = TempFolder("gpt2");
  ASSERT_THAT(WriteHfWeights(folder, ExpectedGpt2(), /*max_shard_bytes=*/1000), IsOk());
  EXPECT_THAT(Files(folder), UnorderedElementsAre("model-00001-of-00002.safetensors",
                                                  "model-00002-of-00002.safetensors",
                                                  "model.safetensors.index.json"));
  for (const char* shard :
       {"/model-00001-of-00002.safetensors", "/model-00002-of-00002.safetensors"}) {
    SCOPED_TRACE(shard);
    absl::StatusOr<std::string> ours = ReadFile(folder + shard);
    absl::StatusOr<std::string> theirs = ReadFile(std::string(kSharded) + shard);
    ASSERT_THAT(ours, IsOk());
    ASSERT_THAT(theirs, IsOk());
    EXPECT_TRUE(*ours == *theirs);
  }
  const nlohmann::json ours = ReadJson(folder + "/model.safetensors.index.json");
  const nlohmann::json theirs = ReadJson(std::string(kSharded) + "/model.safetensors.index.json");
  EXPECT_EQ(ours["weight_map"], theirs["weight_map"]);
  EXPECT_EQ(ours["metadata"]["total_size"], theirs["metadata"]["total_size"]);
}

TEST(HfWeightsTest, OneFileRoundTrips) {
  const std::string folder = TempFolder("one_file");
  const NamedTensors tensors = {{"b", at::arange(3, at::kBFloat16)}, {"a", at::ones({2, 2})}};
  ASSERT_THAT(WriteHfWeights(folder, tensors), IsOk());
  EXPECT_THAT(Files(folder), ElementsAre("model.safetensors"));
  absl::StatusOr<SafetensorsContents> file = ReadSafetensors(folder + "/model.safetensors");
  ASSERT_THAT(file, IsOk());
  EXPECT_EQ(file->metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  absl::StatusOr<NamedTensors> back = ReadHfWeights(folder);
  ASSERT_THAT(back, IsOk());
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].first, "a");  // F32 before BF16
  EXPECT_TRUE(at::equal((*back)[0].second, tensors[1].second));
  EXPECT_TRUE(at::equal((*back)[1].second, tensors[0].second));
}

// One save's files replace the other's: a reader never meets the two mixed.
TEST(HfWeightsTest, ASaveRemovesTheEarlierSavesWeights) {
  const std::string folder = TempFolder("resave");
  ASSERT_THAT(WriteFileAtomically(folder + "/config.json", "{}"), IsOk());
  const NamedTensors tensors = {{"a", at::zeros({4})}, {"b", at::ones({4})}, {"c", at::ones({4})}};
  ASSERT_THAT(WriteHfWeights(folder, tensors, 16), IsOk());
  EXPECT_THAT(Files(folder), UnorderedElementsAre("config.json", "model-00001-of-00003.safetensors",
                                                  "model-00002-of-00003.safetensors",
                                                  "model-00003-of-00003.safetensors",
                                                  "model.safetensors.index.json"));
  ASSERT_THAT(WriteHfWeights(folder, tensors), IsOk());
  EXPECT_THAT(Files(folder), UnorderedElementsAre("config.json", "model.safetensors"));
  ASSERT_THAT(WriteHfWeights(folder, tensors, 32), IsOk());
  EXPECT_THAT(Files(folder), UnorderedElementsAre("config.json", "model-00001-of-00002.safetensors",
                                                  "model-00002-of-00002.safetensors",
                                                  "model.safetensors.index.json"));
  absl::StatusOr<NamedTensors> back = ReadHfWeights(folder);
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->size(), 3u);
}

// A tensor larger than a shard gets one of its own, as huggingface_hub's split does.
TEST(HfWeightsTest, ALargeTensorHasAShardOfItsOwn) {
  const std::string folder = TempFolder("large");
  const NamedTensors tensors = {
      {"a", at::zeros({2})}, {"big", at::zeros({100})}, {"c", at::zeros({2})}};
  ASSERT_THAT(WriteHfWeights(folder, tensors, 64), IsOk());
  const nlohmann::json index = ReadJson(folder + "/model.safetensors.index.json");
  EXPECT_EQ(index["weight_map"]["big"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["a"], "model-00002-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["c"], "model-00002-of-00002.safetensors");
  EXPECT_EQ(index["metadata"]["total_size"], 416);
}

// Writes an index mapping tensor "w" to `shard`, and a valid shard file at `file`.
void WriteIndexAndShard(const std::string& folder, const std::string& shard,
                        const std::string& file) {
  ASSERT_THAT(WriteSafetensors(file, {{"w", at::ones({2})}}), IsOk());
  const nlohmann::json index = {{"weight_map", {{"w", shard}}}};
  ASSERT_THAT(WriteFileAtomically(folder + "/model.safetensors.index.json", index.dump()), IsOk());
}

TEST(HfWeightsTest, ShardsMustLieInTheFolder) {
  const std::string root = TempFolder("escape");
  const std::string folder = root + "/model";
  std::filesystem::create_directories(folder);
  WriteIndexAndShard(folder, "../outside.safetensors", root + "/outside.safetensors");
  EXPECT_THAT(ReadHfWeights(folder),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       folder + "/model.safetensors.index.json: shard \"../outside.safetensors\" "
                                "climbs out of the folder with \"..\"; the index must name its "
                                "shards by their names in the model's folder"));
  WriteIndexAndShard(folder, root + "/outside.safetensors", root + "/outside.safetensors");
  EXPECT_THAT(ReadHfWeights(folder), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("is not a file name inside the folder")));
  std::filesystem::create_symlink(root + "/outside.safetensors", folder + "/link.safetensors");
  WriteIndexAndShard(folder, "link.safetensors", root + "/outside.safetensors");
  EXPECT_THAT(ReadHfWeights(folder),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       folder + "/model.safetensors.index.json: shard \"link.safetensors\" is a "
                                "symbolic link out of the folder; copy the shard into the "
                                "folder"));
  // A link that stays inside is fine.
  std::filesystem::create_directories(folder + "/sub");
  WriteIndexAndShard(folder, "sub/../in.safetensors", folder + "/in.safetensors");
  EXPECT_THAT(ReadHfWeights(folder), StatusIs(absl::StatusCode::kInvalidArgument));
  std::filesystem::create_symlink("sub/../in.safetensors", folder + "/in_link.safetensors");
  WriteIndexAndShard(folder, "in_link.safetensors", folder + "/in.safetensors");
  EXPECT_THAT(ReadHfWeights(folder), IsOk());
}

// The hub cache's snapshot folders hold links into the repository's blobs/ folder.
TEST(HfWeightsTest, ReadsTheHubCachesLinks) {
  const std::string repo = TempFolder("models--org--tiny");
  const std::string snapshot = repo + "/snapshots/0123abcd";
  std::filesystem::create_directories(snapshot);
  std::filesystem::create_directories(repo + "/blobs");
  WriteIndexAndShard(snapshot, "model-00001-of-00001.safetensors", repo + "/blobs/5f3e");
  std::filesystem::create_symlink("../../blobs/5f3e",
                                  snapshot + "/model-00001-of-00001.safetensors");
  absl::StatusOr<NamedTensors> read = ReadHfWeights(snapshot);
  ASSERT_THAT(read, IsOk());
  EXPECT_EQ(read->size(), 1u);
}

TEST(HfWeightsTest, IndexAndShardsMustAgree) {
  const std::string folder = TempFolder("disagree");
  ASSERT_THAT(WriteSafetensors(folder + "/s1.safetensors", {{"a", at::ones({1})}}), IsOk());
  ASSERT_THAT(WriteSafetensors(folder + "/s2.safetensors", {{"b", at::ones({1})}}), IsOk());
  const auto index = [&](const nlohmann::json& weight_map) {
    return WriteFileAtomically(folder + "/model.safetensors.index.json",
                               nlohmann::json({{"weight_map", weight_map}}).dump());
  };
  ASSERT_THAT(index({{"a", "s1.safetensors"}, {"b", "s1.safetensors"}}), IsOk());
  EXPECT_THAT(ReadHfWeights(folder),
              StatusIs(absl::StatusCode::kDataLoss,
                       folder + "/model.safetensors.index.json: names tensor \"b\" in shard "
                                "\"s1.safetensors\", which does not hold it (1 such); save the "
                                "model again"));
  ASSERT_THAT(index({{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s2.safetensors"}}),
              IsOk());
  EXPECT_THAT(ReadHfWeights(folder),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("shard \"s2.safetensors\" holds tensor \"b\", which the index "
                                 "puts in \"s1.safetensors\"")));
  ASSERT_THAT(index({{"a", 3}}), IsOk());
  EXPECT_THAT(ReadHfWeights(folder),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("weight_map maps \"a\" to 3, not a shard's file name")));
  ASSERT_THAT(WriteFileAtomically(folder + "/model.safetensors.index.json", "{\"w\": 1}"), IsOk());
  EXPECT_THAT(ReadHfWeights(folder),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has no \"weight_map\"")));
}

TEST(HfWeightsTest, AFolderWithoutWeightsIsNamed) {
  const std::string folder = TempFolder("no_weights");
  EXPECT_THAT(ReadHfWeights(folder),
              StatusIs(absl::StatusCode::kNotFound,
                       folder + ": holds neither model.safetensors nor "
                                "model.safetensors.index.json; give the folder transformers' "
                                "save_pretrained wrote"));
  ASSERT_THAT(WriteFileAtomically(folder + "/pytorch_model.bin", "x"), IsOk());
  EXPECT_THAT(ReadHfWeights(folder), StatusIs(absl::StatusCode::kNotFound,
                                              HasSubstr("its pytorch_model.bin is a pickle")));
  EXPECT_THAT(ReadHfWeights(folder + "/nope"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no such folder")));
}

}  // namespace
}  // namespace kd
