#include "hooks/io_dict.h"

#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using ::kd::test::IValueNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<std::string> Keys(const IoDict& io) {
  std::vector<std::string> keys;
  for (const auto& [path, entry] : io) keys.push_back(path);
  return keys;
}

TEST(IoDictTest, ReadsLikeADictOfDictsInPathOrder) {
  IoDict io;
  io["layer2"][kOutput] = at::ones({2});
  io["fc"][kInput] = at::zeros({1});
  io["fc"][kOutput] = at::full({1}, 3.0);
  EXPECT_THAT(Keys(io), ElementsAre("fc", "layer2"));
  EXPECT_EQ(io.at("fc").size(), 2u);
  EXPECT_EQ(io.at("layer2").count(kInput), 0u);
  EXPECT_THAT(io.at("fc").at(kOutput), IValueNear(at::full({1}, 3.0), 0));
  std::vector<std::string> types;
  for (const auto& [io_type, value] : io.at("fc")) types.emplace_back(io_type);
  EXPECT_THAT(types, ElementsAre("input", "output"));
  EXPECT_THAT(io["conv"], IsEmpty());  // operator[] inserts, as std::map's does
  EXPECT_EQ(io.size(), 3u);
}

TEST(IoDictTest, MistakesAreNamed) {
  IoDict io;
  io["layer2"][kOutput] = at::ones({2});
  EXPECT_THROW(io["layer2"]["outptu"], std::invalid_argument);
  EXPECT_THROW(io.at("layer3"), std::out_of_range);
  EXPECT_THROW(io.at("layer2").at(kInput), std::out_of_range);
  EXPECT_THAT(GetIo(io, "layer3", kOutput),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("did you mean \"layer2\"?")));
  EXPECT_THAT(GetIo(io, "layer2", kInput),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("(recorded: output)")));
}

TEST(IoDictTest, AppendKeepsThePathOrder) {
  IoDict io;
  io.Append("a")[kOutput] = at::ones({1});
  io.Append("b")[kOutput] = at::ones({1});
  EXPECT_THROW(io.Append("a"), std::invalid_argument);
  EXPECT_THAT(Keys(io), ElementsAre("a", "b"));
}

}  // namespace
}  // namespace kd
