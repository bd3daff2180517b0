#include "base/kwargs.h"

#include <gtest/gtest.h>

#include "c10/util/Exception.h"

namespace kd {
namespace {

const std::vector<KwargSpec> kSpecs = {
    {.name = "temperature", .type = KwargType::kNumber, .default_value = 4},
    {.name = "reduction", .type = KwargType::kString, .default_value = "mean"},
    {.name = "betas", .type = KwargType::kNumberList, .default_value = std::vector<int64_t>{1, 2}},
    {.name = "sizes", .type = KwargType::kIntegerList, .default_value = std::vector<int64_t>{3}},
    {.name = "nesterov", .type = KwargType::kBool, .default_value = false},
    {.name = "weight", .type = KwargType::kNumberList},  // optional, no default
};

TEST(WithDefaultsTest, FillsAbsentAndNoneInTheSpecsType) {
  const Kwargs filled = WithDefaults({{"reduction", c10::IValue()}}, kSpecs);
  EXPECT_TRUE(filled.at("temperature").isDouble());  // an integer default of a number
  EXPECT_EQ(NumberKwarg(filled, "temperature"), 4.0);
  EXPECT_EQ(StringKwarg(filled, "reduction"), "mean");  // None takes the default
  EXPECT_EQ(NumberListKwarg(filled, "betas"), (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(IntListKwarg(filled, "sizes"), (std::vector<int64_t>{3}));
  EXPECT_FALSE(BoolKwarg(filled, "nesterov"));
  EXPECT_EQ(FindKwarg(filled, "weight"), nullptr);
  EXPECT_EQ(filled.count("weight"), 0u);
}

TEST(WithDefaultsTest, KeepsGivenValues) {
  const Kwargs filled = WithDefaults({{"temperature", 2.5}, {"extra", 1}}, kSpecs);
  EXPECT_EQ(NumberKwarg(filled, "temperature"), 2.5);
  EXPECT_EQ(IntKwarg(filled, "extra"), 1);
}

TEST(KwargReadersTest, ConvertOnlyWhereTheContractDoes) {
  const Kwargs kwargs = {{"n", 3}, {"s", std::vector<std::string>{"a", "b"}}};
  EXPECT_EQ(NumberKwarg(kwargs, "n"), 3.0);  // integer accepted where a number is expected
  EXPECT_EQ(StringListKwarg(kwargs, "s"), (std::vector<std::string>{"a", "b"}));
  EXPECT_THROW(StringKwarg(kwargs, "n"), c10::Error);
}

TEST(KwargReadersTest, ReadingAnUndefaultedAbsentKwargNamesIt) {
  try {
    NumberKwarg({}, "weight");
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("kwarg \"weight\" is read but neither"),
              std::string::npos);
  }
}

TEST(DefaultTextTest, PrintsAsAConfigWouldSayIt) {
  EXPECT_EQ(DefaultText(kSpecs[0]), "4.");
  EXPECT_EQ(DefaultText(kSpecs[1]), "\"mean\"");
  EXPECT_EQ(DefaultText(kSpecs[2]), "[1., 2.]");
  EXPECT_EQ(DefaultText(kSpecs[4]), "false");
  EXPECT_EQ(DefaultText(kSpecs[5]), "");
}

TEST(MergeKwargsTest, OverridesWin) {
  const Kwargs merged = MergeKwargs({{"lr", 0.1}, {"momentum", 0.9}}, {{"lr", 0.01}});
  EXPECT_EQ(merged.at("lr").toDouble(), 0.01);
  EXPECT_EQ(merged.at("momentum").toDouble(), 0.9);
}

}  // namespace
}  // namespace kd
