#include "base/nearest.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kd {
namespace {

using ::testing::ElementsAre;

TEST(EditDistanceTest, KnownDistances) {
  EXPECT_EQ(EditDistance("", ""), 0u);
  EXPECT_EQ(EditDistance("abc", ""), 3u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);  // the textbook example
  EXPECT_EQ(EditDistance("layer5", "layer4"), 1u);
  EXPECT_EQ(EditDistance("temprature", "temperature"), 1u);
}

TEST(NearestNamesTest, OrdersByDistanceKeepingOrderOnTies) {
  std::vector<std::string> paths = {"fc", "layer1", "layer2", "layer3", "conv1"};
  EXPECT_THAT(NearestNames("layer5", paths), ElementsAre("layer1", "layer2", "layer3"));
  EXPECT_THAT(NearestNames("layer2.0.conv", {"layer2.0.conv1", "layer2.0.conv2", "fc"}, 2),
              ElementsAre("layer2.0.conv1", "layer2.0.conv2"));
}

TEST(NearestNamesTest, DropsFarNamesButAlwaysSuggestsOne) {
  EXPECT_THAT(NearestNames("fc", {"fc1", "a_very_long_module_name"}), ElementsAre("fc1"));
  EXPECT_THAT(NearestNames("x", {"a_very_long_module_name"}),
              ElementsAre("a_very_long_module_name"));
  EXPECT_TRUE(NearestNames("x", {}).empty());
}

TEST(FormatNearestTest, Messages) {
  // "fc" is 6 edits from "layer5", farther than max(3, 6 / 2): left out.
  EXPECT_EQ(FormatNearest("layer5", {"layer4", "layer3", "fc"}), "nearest: layer4, layer3");
  EXPECT_EQ(FormatNearest("layr", {"layer1", "fc"}), "nearest: layer1");  // fc: 4 edits
  EXPECT_EQ(FormatNearest("x", {}), "there are none");
  EXPECT_EQ(FormatNearest("a", {""}), "nearest: \"\" (root)");
  EXPECT_EQ(QuoteName(""), "\"\" (root)");
  EXPECT_EQ(QuoteName("fc"), "\"fc\"");
}

}  // namespace
}  // namespace kd
