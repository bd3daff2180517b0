#include "base/module_path.h"

#include "gtest/gtest.h"

namespace kd {
namespace {

TEST(ModulePathTest, DottedNamesAreFine) {
  EXPECT_EQ(ModulePathProblem(""), "");
  EXPECT_EQ(ModulePathProblem("fc"), "");
  EXPECT_EQ(ModulePathProblem("layer2.0.conv1"), "");
}

TEST(ModulePathTest, EmptyComponentsAreNamedWithTheFix) {
  EXPECT_EQ(ModulePathProblem("layer2."),
            "module path \"layer2.\" has an empty component (a leading, trailing or doubled "
            "\".\"); did you mean \"layer2\"?");
  EXPECT_EQ(ModulePathProblem(".fc"),
            "module path \".fc\" has an empty component (a leading, trailing or doubled "
            "\".\"); did you mean \"fc\"?");
  EXPECT_EQ(ModulePathProblem("layer2..conv1"),
            "module path \"layer2..conv1\" has an empty component (a leading, trailing or "
            "doubled \".\"); did you mean \"layer2.conv1\"?");
  EXPECT_EQ(ModulePathProblem("."),
            "module path \".\" has an empty component (a leading, trailing or doubled \".\")");
}

TEST(ModulePathTest, WhitespaceIsNamed) {
  EXPECT_NE(ModulePathProblem("layer2 .0").find("contains whitespace"), std::string::npos);
}

}  // namespace
}  // namespace kd
