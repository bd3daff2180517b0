#include "distill/config/kwargs.h"

#include <string>
#include <vector>

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>

#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace kd {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::IsEmpty;

KwargList Parse(const std::string& text) {
  PluginConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config.kwargs();
}

const std::optional<std::vector<KwargSpec>> kAnyKwargs = std::nullopt;

TEST(KwargsTest, EveryValueKindBecomesTheMatchingIValue) {
  auto kwargs = KwargsFromConfig(Parse(R"pb(
                                   kwargs { name: "t" number: 4.5 }
                                   kwargs { name: "n" integer: -3 }
                                   kwargs { name: "b" boolean: true }
                                   kwargs { name: "s" str: "mean" }
                                   kwargs {
                                     name: "ns"
                                     numbers { values: [ 0.5, 2 ] }
                                   }
                                   kwargs {
                                     name: "is"
                                     integers { values: [ 30, 60 ] }
                                   }
                                   kwargs {
                                     name: "ss"
                                     strs { values: [ "a", "b" ] }
                                   }
                                   kwargs {
                                     name: "d"
                                     dict {
                                       kwargs { name: "x" integer: 1 }
                                       kwargs { name: "y" str: "z" }
                                     }
                                   }
                                 )pb"),
                                 kAnyKwargs, "test");
  ASSERT_THAT(kwargs, IsOk());
  EXPECT_EQ(kwargs->at("t").toDouble(), 4.5);
  EXPECT_EQ(kwargs->at("n").toInt(), -3);
  EXPECT_EQ(kwargs->at("b").toBool(), true);
  EXPECT_EQ(kwargs->at("s").toStringRef(), "mean");
  EXPECT_EQ(kwargs->at("ns").toDoubleVector(), (std::vector<double>{0.5, 2.0}));
  EXPECT_EQ(kwargs->at("is").toIntVector(), (std::vector<int64_t>{30, 60}));
  const c10::List<c10::IValue> strs = kwargs->at("ss").toList();
  ASSERT_EQ(strs.size(), 2u);
  EXPECT_EQ(strs.get(0).toStringRef(), "a");
  EXPECT_EQ(strs.get(1).toStringRef(), "b");
  const c10::impl::GenericDict dict = kwargs->at("d").toGenericDict();
  ASSERT_EQ(dict.size(), 2u);
  EXPECT_EQ(dict.at("x").toInt(), 1);
  EXPECT_EQ(dict.at("y").toStringRef(), "z");
}

TEST(KwargsTest, IntegersBecomeDoublesWhereNumbersAreDeclared) {
  const std::vector<KwargSpec> specs = {{"t", KwargType::kNumber, ""},
                                        {"ms", KwargType::kNumberList, ""},
                                        {"k", KwargType::kInteger, ""}};
  auto kwargs = KwargsFromConfig(Parse(R"pb(
                                   kwargs { name: "t" integer: 4 }
                                   kwargs {
                                     name: "ms"
                                     integers { values: [ 1, 2 ] }
                                   }
                                   kwargs { name: "k" integer: 5 }
                                 )pb"),
                                 specs, "test");
  ASSERT_THAT(kwargs, IsOk());
  EXPECT_TRUE(kwargs->at("t").isDouble());
  EXPECT_EQ(kwargs->at("t").toDouble(), 4.0);
  EXPECT_EQ(kwargs->at("ms").toDoubleVector(), (std::vector<double>{1.0, 2.0}));
  EXPECT_TRUE(kwargs->at("k").isInt());
}

TEST(KwargsTest, EveryProblemIsReportedWithItsIndex) {
  const std::vector<KwargSpec> specs = {{"temperature", KwargType::kNumber, ""},
                                        {"alpha", KwargType::kNumber, ""},
                                        {"reduction", KwargType::kString, ""}};
  const std::vector<KwargProblem> problems = CheckKwargs(Parse(R"pb(
                                                           kwargs { name: "temprature" number: 4 }
                                                           kwargs { name: "alpha" str: "half" }
                                                           kwargs { name: "alpha" number: 0.5 }
                                                           kwargs { number: 1 }
                                                           kwargs { name: "reduction" }
                                                           kwargs { name: "xyzzy" number: 1 }
                                                           kwargs {
                                                             name: "reduction"
                                                             dict { kwargs { name: "q" } }
                                                           }
                                                         )pb"),
                                                         specs, "loss \"KDLoss\"");
  std::vector<std::string> messages;
  std::vector<int> indices;
  for (const KwargProblem& p : problems) {
    indices.push_back(p.index);
    messages.push_back(p.message);
  }
  EXPECT_THAT(indices, ElementsAre(2, 3, 4, 6, 6, 0, 1, 5, 6));
  EXPECT_THAT(
      messages,
      ElementsAre("duplicate kwarg \"alpha\" for loss \"KDLoss\"",
                  "kwarg without a name for loss \"KDLoss\"",
                  "kwarg \"reduction\" for loss \"KDLoss\" has no value",
                  "duplicate kwarg \"reduction\" for loss \"KDLoss\"",
                  "kwarg \"q\" for dict \"reduction\" of loss \"KDLoss\" has no value",
                  // The spec checks come after the structural ones.
                  "unknown kwarg \"temprature\" for loss \"KDLoss\"; did you mean "
                  "\"temperature\"?",
                  "kwarg \"alpha\" for loss \"KDLoss\" must be a number, not a string",
                  "unknown kwarg \"xyzzy\" for loss \"KDLoss\"; valid: temperature, alpha, "
                  "reduction",
                  "kwarg \"reduction\" for loss \"KDLoss\" must be a string, not a dict"));
}

TEST(KwargsTest, WithoutSpecsAnyNamesAreAccepted) {
  EXPECT_THAT(
      CheckKwargs(Parse(R"pb(kwargs { name: "anything" number: 1 })pb"), kAnyKwargs, "test"),
      IsEmpty());
  EXPECT_THAT(CheckKwargValues({{"anything", 1.0}}, kAnyKwargs, "test"), IsOk());
  EXPECT_THAT(CheckKwargValues({{"b", 1.0}, {"a", 1.0}}, std::vector<KwargSpec>{}, "proc \"p\""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unknown kwarg \"a\" for proc \"p\"; there are none; unknown kwarg \"b\" "
                       "for proc \"p\"; there are none"));
}

TEST(KwargsTest, FailureListsEveryProblem) {
  EXPECT_THAT(KwargsFromConfig(Parse(R"pb(
                                 kwargs { name: "a" }
                                 kwargs { name: "a" number: 1 }
                               )pb"),
                               kAnyKwargs, "dataset \"d\""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "kwarg \"a\" for dataset \"d\" has no value; duplicate kwarg \"a\" for "
                       "dataset \"d\""));
}

}  // namespace
}  // namespace kd
