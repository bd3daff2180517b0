// Every plugin libkd registers keeps its kwargs contract consistent: each default is a value its
// own spec accepts (type, range, choices), no kwarg is both required and defaulted, and a
// factory reads its defaults from the spec (MakeX with no kwargs equals MakeX with the
// documented defaults written out).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "base/kwargs.h"
#include "base/registry.h"
#include "distill/config/kwargs.h"
#include "distill/config/plugin_kinds.h"
#include "distill/losses/loss.h"
#include "testing/status_matchers.h"

namespace kd {
namespace {

TEST(PluginSpecsTest, EveryDefaultPassesItsOwnSpec) {
  const std::vector<std::string> kinds = RegistryKinds();
  for (absl::string_view kind : kConfigPluginKinds) {  // all linked into this test
    EXPECT_TRUE(std::set<std::string>(kinds.begin(), kinds.end()).count(std::string(kind))) << kind;
  }
  int defaults = 0;
  for (const std::string& kind : kinds) {
    const RegistryBase* registry = FindRegistry(kind);
    ASSERT_NE(registry, nullptr) << kind;
    for (const std::string& key : registry->Keys()) {
      const std::optional<std::vector<KwargSpec>> specs = registry->KwargSpecs(key);
      if (!specs) continue;
      for (const KwargSpec& spec : *specs) {
        if (spec.default_value.isNone()) continue;
        ++defaults;
        const std::string owner = absl::StrCat(kind, " \"", key, "\"");
        EXPECT_FALSE(spec.required) << owner << "." << spec.name << " is required and defaulted";
        EXPECT_THAT(CheckKwargValues(WithDefaults({}, {spec}), std::vector<KwargSpec>{spec}, owner),
                    IsOk())
            << spec.name << " = " << DefaultText(spec);
      }
    }
  }
  RecordProperty("defaults", defaults);
  EXPECT_GE(defaults, 140);  // 150 (aliases counted once each) when written
}

TEST(PluginSpecsTest, ADefaultOutsideItsSpecIsCaught) {
  const KwargSpec bad = {
      .name = "eps", .type = KwargType::kNumber, .default_value = -1.0, .min = 0};
  EXPECT_FALSE(CheckKwargValues(WithDefaults({}, {bad}), std::vector<KwargSpec>{bad}, "x").ok());
}

// The factories read the spec's defaults: no kwargs and the defaults written out agree.
TEST(PluginSpecsTest, FactoriesUseTheSpecDefaults) {
  at::manual_seed(0);
  const at::Tensor s = at::randn({4, 10}), t = at::randn({4, 10});
  struct Case {
    std::string key;
    Kwargs written_out;   // the defaults of the peers' code
    std::string changed;  // a kwarg whose other value must change the result
    c10::IValue other;
  };
  const std::vector<Case> cases = {
      {"DKDLoss", {{"alpha", 1.0}, {"beta", 8.0}, {"temperature", 4.0}}, "temperature", 2.0},
      {"jsd", {{"temperature", 1.0}, {"beta", 0.5}, {"chunk_size", 0}}, "beta", 0.25},
      {"DISTLoss", {{"beta", 1.0}, {"gamma", 1.0}, {"tau", 1.0}, {"eps", 1e-8}}, "tau", 4.0},
      {"CCKDLoss",
       {{"kernel", "gaussian"}, {"gamma", 0.4}, {"max_p", 2}, {"reduction", "batchmean"}},
       "kernel",
       "bilinear"},
  };
  for (const auto& [key, kwargs, changed, other_value] : cases) {
    const LossInputs in = {{"student", s}, {"teacher", t}, {"targets", at::arange(4, at::kLong)}};
    auto value = [&](const Kwargs& given) {
      absl::StatusOr<std::unique_ptr<Loss>> loss = MakeLoss(key, given);
      EXPECT_THAT(loss, IsOk()) << key;
      absl::StatusOr<at::Tensor> v = (*loss)->Forward(in);
      EXPECT_THAT(v, IsOk()) << key;
      return *v;
    };
    const at::Tensor implicit = value({}), written = value(kwargs);
    EXPECT_TRUE(at::equal(implicit, written)) << key;
    // And a non-default value changes the result, so the comparison means something.
    Kwargs other = kwargs;
    other[changed] = other_value;
    EXPECT_FALSE(at::equal(implicit, value(other))) << key << " with " << changed << " changed";
  }
}

}  // namespace
}  // namespace kd
