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

TEST(SuggestTest, OneWordingForNearNamesAndForNone) {
  // Ties at the smallest distance, in the candidates' order.
  EXPECT_EQ(Suggest("layer5", {"layer4", "layer3", "fc"}), "did you mean \"layer4\" or \"layer3\"?");
  EXPECT_EQ(Suggest("layer5", {"layer1", "layer2", "layer3", "layer4"}),
            "did you mean \"layer1\", \"layer2\" or \"layer3\"?");
  EXPECT_EQ(Suggest("layr", {"layer1", "fc"}), "did you mean \"layer1\"?");  // 2 edits
  EXPECT_EQ(Suggest("a", {""}), "did you mean \"\" (root)?");
  // Nothing within a third of the name's length (at least 2 edits): the valid names.
  EXPECT_EQ(Suggest("xyzzy", {"train", "val"}), "valid: train, val");
  EXPECT_EQ(Suggest("x", {}), "there are none");
  EXPECT_EQ(DidYouMean("xyzzy", {"train"}), "");
  EXPECT_EQ(ValidNames({"a", "b", "c"}, 2), "valid: a, b and 1 more");
  EXPECT_EQ(QuoteName(""), "\"\" (root)");
  EXPECT_EQ(QuoteName("fc"), "\"fc\"");
}

}  // namespace
}  // namespace kd
