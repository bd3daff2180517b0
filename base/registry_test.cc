#include "base/registry.h"

#include <functional>
#include <string>
#include <vector>

#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pointee;

using IntFn = std::function<int(int)>;

Registry<IntFn>& TestRegistry() {
  static Registry<IntFn>* const registry = NewGlobalRegistry<IntFn>("registry_test_fn");
  return *registry;
}

int Twice(int x) { return 2 * x; }

// Registrations at start-up, as a plugin's .cc does them. The line numbers are checked below.
KD_REGISTER(TestRegistry(), "twice", Twice, kAnyKwargs);  // line 28
KD_REGISTER(TestRegistry(), "plus_one", [](int x) { return x + 1; },
            {{"offset", KwargType::kInteger, "added to x"}});

TEST(RegistryTest, StaticRegistrationsAreFoundWithTheirSites) {
  EXPECT_THAT(TestRegistry().Keys(), ElementsAre("plus_one", "twice"));
  absl::StatusOr<const IntFn*> twice = TestRegistry().Get("twice");
  ASSERT_THAT(twice, IsOk());
  EXPECT_EQ((**twice)(21), 42);
  absl::StatusOr<const IntFn*> plus_one = TestRegistry().Get("plus_one");
  ASSERT_THAT(plus_one, IsOk());
  EXPECT_EQ((**plus_one)(41), 42);

  std::optional<RegistrationSite> site = TestRegistry().Site("twice");
  ASSERT_TRUE(site.has_value());
  EXPECT_THAT(site->file, HasSubstr("base/registry_test.cc"));
  EXPECT_EQ(site->line, 28);
}

TEST(RegistryTest, KwargSpecsAreKeptAndOptional) {
  std::optional<std::vector<KwargSpec>> specs = TestRegistry().KwargSpecs("plus_one");
  ASSERT_TRUE(specs.has_value());
  ASSERT_EQ(specs->size(), 1u);
  EXPECT_EQ((*specs)[0].name, "offset");
  EXPECT_EQ((*specs)[0].type, KwargType::kInteger);
  EXPECT_EQ((*specs)[0].doc, "added to x");
  EXPECT_FALSE(TestRegistry().KwargSpecs("twice").has_value());  // declared none: any
  EXPECT_FALSE(TestRegistry().KwargSpecs("nope").has_value());
}

TEST(RegistryTest, RoundTripInALocalRegistry) {
  Registry<std::string> registry("greeting");
  EXPECT_THAT(registry.Register("en", "hello"), IsOk());
  EXPECT_THAT(registry.Register("fr", "bonjour"), IsOk());
  EXPECT_THAT(registry.Get("en"), IsOkAndHolds(Pointee(std::string("hello"))));
  EXPECT_THAT(registry.Get("fr"), IsOkAndHolds(Pointee(std::string("bonjour"))));
  EXPECT_TRUE(registry.Contains("en"));
  EXPECT_FALSE(registry.Contains("de"));
  EXPECT_THAT(registry.CheckKey("fr"), IsOk());
  EXPECT_EQ(registry.kind(), "greeting");
}

TEST(RegistryTest, UnknownKeyNamesNearestAndListsAll) {
  Registry<int> registry("loss");
  ASSERT_THAT(registry.Register("KDLoss", 1), IsOk());
  ASSERT_THAT(registry.Register("CrossEntropyLoss", 2), IsOk());
  ASSERT_THAT(registry.Register("MSELoss", 3), IsOk());
  const std::string expected =
      "no loss \"KDLos\" is registered; did you mean \"KDLoss\"? registered: CrossEntropyLoss, "
      "KDLoss, "
      "MSELoss";
  EXPECT_THAT(registry.Get("KDLos"), StatusIs(absl::StatusCode::kNotFound, expected));
  EXPECT_THAT(registry.CheckKey("KDLos"), StatusIs(absl::StatusCode::kNotFound, expected));
}

TEST(RegistryTest, EmptyRegistrySaysWhatToCheck) {
  Registry<int> registry("dataset");
  EXPECT_THAT(registry.Get("mnist"),
              StatusIs(absl::StatusCode::kNotFound,
                       "no dataset \"mnist\" is registered; none are (is the library that "
                       "registers them linked, with alwayslink = True?)"));
}

TEST(RegistryTest, DuplicateKeyNamesBothSitesAndKeepsTheFirst) {
  Registry<int> registry("metric");
  ASSERT_THAT(registry.Register("acc", 1, {"a.cc", 10}), IsOk());
  EXPECT_THAT(registry.Register("acc", 2, {"b.cc", 20}),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       "duplicate metric key \"acc\": registered at a.cc:10 and again at b.cc:20"));
  EXPECT_THAT(registry.Get("acc"), IsOkAndHolds(Pointee(1)));
  EXPECT_THAT(registry.Keys(), ElementsAre("acc"));
}

TEST(RegistryTest, EmptyKeyIsRefused) {
  Registry<int> registry("metric");
  EXPECT_THAT(
      registry.Register("", 1, {"a.cc", 3}),
      StatusIs(absl::StatusCode::kInvalidArgument, "empty metric key registered at a.cc:3"));
}

TEST(RegistryDeathTest, DuplicateAtStartUpStopsTheProgramNamingBothSites) {
  EXPECT_DEATH(
      {
        Registry<int> registry("optimizer");
        base_internal::RegisterOrDie(registry, "a.cc", 10, "sgd", 1, kAnyKwargs);
        base_internal::RegisterOrDie(registry, "b.cc", 20, "sgd", 2, kAnyKwargs);
      },
      "libkd: start-up failed: duplicate optimizer key \"sgd\": registered at a.cc:10 and "
      "again at b.cc:20");
}

TEST(RegistryDirectoryTest, GlobalRegistriesAreFoundByKind) {
  TestRegistry();  // created by the registrations above
  const RegistryBase* found = FindRegistry("registry_test_fn");
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found, &TestRegistry());
  EXPECT_THAT(found->Keys(), ElementsAre("plus_one", "twice"));
  EXPECT_EQ(FindRegistry("no_such_kind"), nullptr);
  EXPECT_THAT(RegistryKinds(), ::testing::Contains("registry_test_fn"));
}

TEST(RegistryDeathTest, TwoGlobalRegistriesOfOneKindStopTheProgram) {
  EXPECT_DEATH(NewGlobalRegistry<int>("registry_test_fn"),
               "two global registries of kind \"registry_test_fn\"");
}

}  // namespace
}  // namespace kd
