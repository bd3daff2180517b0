#include "hooks/aoti_model.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hooks/forward_hook_manager.h"
#include "testing/fixtures.h"
#include "testing/status_matchers.h"
#include "testing/tensor_matchers.h"

namespace kd {
namespace {

using ::kd::test::At;
using ::kd::test::FixturePath;
using ::kd::test::IValueNear;
using ::testing::HasSubstr;

// small_cnn compiled by AOTInductor (tools/export_teacher.py through
// tests/testdata/make_aoti_fixtures.py, exported with batch 2, run here with 3): its logits and
// the hooked values, call by call, equal eager Python's forward hooks within 1e-5.
TEST(AotiModelTest, OutputsAndHookedValuesEqualEagerPython) {
  auto model = LoadAotiModel(FixturePath("small_cnn_aoti.pt2"), {.single_threaded = true});
  ASSERT_THAT(model, IsOk());
  EXPECT_EQ((*model)->kind(), "aoti");
  EXPECT_TRUE((*model)->NamedParameters().empty());
  const c10::IValue expected = test::LoadExpected("small_cnn_aoti");
  std::map<std::string, std::vector<std::vector<c10::IValue>>> args;
  std::map<std::string, std::vector<c10::IValue>> outputs;
  std::vector<HookHandle> handles;
  for (const char* path : {"stem", "layer1.0.relu", "layer2.0", "layer2", ""}) {
    auto handle = (*model)->AddHook(path, [&, path = std::string(path)](
                                              const std::vector<c10::IValue>& a,
                                              const c10::IValue& out) {
      args[path].push_back(a);
      outputs[path].push_back(out);
    });
    ASSERT_THAT(handle, IsOk()) << path;
    handles.push_back(*std::move(handle));
  }
  const at::Tensor x = At(expected, "input").toTensor();
  const c10::IValue y = (*model)->Forward({x});
  EXPECT_THAT(y, IValueNear(At(expected, "output"), 1e-5));
  EXPECT_THAT(outputs.at(""), ::testing::SizeIs(1));
  const c10::IValue hooks = At(expected, "hooks");
  for (const char* path : {"stem", "layer1.0.relu", "layer2.0", "layer2"}) {
    SCOPED_TRACE(path);
    const c10::IValue recorded = At(hooks, path);
    const auto& want_out = At(recorded, "output").toListRef();
    const auto& want_in = At(recorded, "input").toListRef();
    const size_t calls = std::max(want_out.size(), want_in.size());
    ASSERT_EQ(outputs.at(path).size(), calls);
    for (size_t c = 0; c < calls; ++c) {
      if (!want_out.empty()) {
        EXPECT_THAT(outputs.at(path)[c], IValueNear(want_out[c], 1e-5)) << c;
      } else {
        EXPECT_TRUE(outputs.at(path)[c].isNone()) << "not exported";
      }
      if (!want_in.empty()) {
        const auto& tuple = want_in[c].toTupleRef().elements();
        ASSERT_EQ(args.at(path)[c].size(), tuple.size());
        for (size_t a = 0; a < tuple.size(); ++a) {
          EXPECT_THAT(args.at(path)[c][a], IValueNear(tuple[a], 1e-5)) << c << " " << a;
        }
      } else {
        EXPECT_TRUE(args.at(path)[c].empty());
      }
    }
  }
  // layer1.0.relu runs twice per forward (its block applies it twice).
  EXPECT_EQ(outputs.at("layer1.0.relu").size(), 2u);
}

// Boxes read a teacher through ForwardHookManager: the package's values fill its I/O dict.
TEST(AotiModelTest, ForwardHookManagerRecordsTheExportedValues) {
  auto model = LoadAotiModel(FixturePath("small_cnn_aoti.pt2"));
  ASSERT_THAT(model, IsOk());
  const c10::IValue expected = test::LoadExpected("small_cnn_aoti");
  ForwardHookManager manager(at::kCPU);
  ASSERT_THAT(manager.AddHook(**model, "stem", {.requires_input = false}), IsOk());
  (*model)->Forward({At(expected, "input").toTensor()});
  auto io = manager.PopIoDict();
  ASSERT_THAT(io, IsOk());
  EXPECT_THAT(io->at("stem").at("output"),
              IValueNear(At(At(At(expected, "hooks"), "stem"), "output").toListRef()[0], 1e-5));
}

// Paths: an unknown one names the nearest; a module of the model that was not exported names
// the exported paths and the re-export. A package runs in eval mode only.
TEST(AotiModelTest, PathsTheProgramDoesNotReturnAreNamed) {
  auto model = LoadAotiModel(FixturePath("small_cnn_aoti.pt2"));
  ASSERT_THAT(model, IsOk());
  auto noop = [](const std::vector<c10::IValue>&, const c10::IValue&) {};
  EXPECT_THAT((*model)->AddHook("layer3", noop),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("did you mean \"layer1\" or \"layer2\"?")));
  EXPECT_THAT((*model)->AddHook("layer1", noop),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("was not exported with the values of \"layer1\""),
                             HasSubstr("\"layer1.0.relu\""),
                             HasSubstr("tools/export_teacher.py --hooks=layer1:output"))));
  (*model)->SetTraining(true);
  EXPECT_THAT([&] { (*model)->Forward({at::randn({1, 1, 28, 28})}); },
              ::testing::ThrowsMessage<c10::Error>(HasSubstr("eval mode only")));
}

// What is not a package says so in one line naming the file.
TEST(AotiModelTest, BadPackagesAreNamed) {
  EXPECT_THAT(LoadAotiModel("/nonexistent/teacher.pt2"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/teacher.pt2")));
  const std::string text = std::string(std::getenv("TEST_TMPDIR")) + "/teacher.pt2";
  std::ofstream(text) << "not a package\n";
  EXPECT_THAT(LoadAotiModel(text),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a zip file")));
  // A zip that is no package: a TorchScript archive.
  auto torchscript = LoadAotiModel(FixturePath("small_cnn.pt"));
  EXPECT_THAT(torchscript, StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("cannot load the AOTInductor package")));
  if (!torchscript.ok()) {
    EXPECT_EQ(std::string(torchscript.status().message()).find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace kd
