#include "hooks/aoti_model.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
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
using ::testing::AllOf;
using ::testing::HasSubstr;

// Within 1e-5 of the expected values' scale (absolute for values up to 1).
double Tolerance(const c10::IValue& expected) {
  return 1e-5 * std::max(1.0, expected.toTensor().abs().max().item<double>());
}

// The package `name`_aoti.pt2 (tools/export_teacher.py through
// tests/testdata/make_aoti_fixtures.py, exported with batch 2, run here with 3): its output and
// every hooked value, call by call, equal eager Python's forward hooks.
void ExpectEagerPythonsValues(const std::string& name) {
  SCOPED_TRACE(name);
  auto model = LoadAotiModel(FixturePath(name + "_aoti.pt2"), {.single_threaded = true});
  ASSERT_THAT(model, IsOk());
  EXPECT_EQ((*model)->kind(), "aoti");
  EXPECT_TRUE((*model)->NamedParameters().empty());
  const c10::IValue expected = test::LoadExpected(name + "_aoti");
  const c10::IValue hooks = At(expected, "hooks");
  std::vector<std::string> paths = {""};
  for (const auto& entry : hooks.toGenericDict()) paths.push_back(entry.key().toStringRef());
  std::map<std::string, std::vector<std::vector<c10::IValue>>> args;
  std::map<std::string, std::vector<c10::IValue>> outputs;
  std::vector<HookHandle> handles;
  for (const std::string& path : paths) {
    auto handle = (*model)->AddHook(
        path, [&, path](const std::vector<c10::IValue>& a, const c10::IValue& out) {
          args[path].push_back(a);
          outputs[path].push_back(out);
        });
    ASSERT_THAT(handle, IsOk()) << path;
    handles.push_back(*std::move(handle));
  }
  const c10::IValue y = (*model)->Forward({At(expected, "input").toTensor()});
  EXPECT_THAT(y, IValueNear(At(expected, "output"), Tolerance(At(expected, "output"))));
  EXPECT_THAT(outputs.at(""), ::testing::SizeIs(1));
  for (const std::string& path : paths) {
    if (path.empty()) continue;
    SCOPED_TRACE(path);
    const c10::IValue recorded = At(hooks, path);
    const auto& want_out = At(recorded, "output").toListRef();
    const auto& want_in = At(recorded, "input").toListRef();
    const size_t calls = std::max(want_out.size(), want_in.size());
    ASSERT_EQ(outputs.at(path).size(), calls);
    for (size_t c = 0; c < calls; ++c) {
      if (!want_out.empty()) {
        EXPECT_THAT(outputs.at(path)[c], IValueNear(want_out[c], Tolerance(want_out[c]))) << c;
      } else {
        EXPECT_TRUE(outputs.at(path)[c].isNone()) << "not exported";
      }
      if (!want_in.empty()) {
        const auto& tuple = want_in[c].toTupleRef().elements();
        ASSERT_EQ(args.at(path)[c].size(), tuple.size());
        for (size_t a = 0; a < tuple.size(); ++a) {
          EXPECT_THAT(args.at(path)[c][a], IValueNear(tuple[a], Tolerance(tuple[a]))) << c;
        }
      } else {
        EXPECT_TRUE(args.at(path)[c].empty());
      }
    }
  }
}

// small_cnn's package (its relu in layer1.0 runs twice per forward: two calls), and
// torchvision's ResNet-18 and MobileNetV3-Small, a torch Transformer encoder and libkd's
// fashion_cnn (its Python twin).
TEST(AotiModelTest, OutputsAndHookedValuesEqualEagerPython) {
  for (const char* name :
       {"small_cnn", "resnet18", "mobilenet_v3_small", "transformer_encoder", "fashion_cnn16"}) {
    ExpectEagerPythonsValues(name);
  }
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
  EXPECT_THAT(
      (*model)->AddHook("layer3", noop),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("did you mean \"layer1\" or \"layer2\"?")));
  EXPECT_THAT((*model)->AddHook("layer1", noop),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("was not exported with the values of \"layer1\""),
                             HasSubstr("\"layer1.0.relu\""),
                             HasSubstr("tools/export_teacher.py --hooks=layer1:output"))));
  (*model)->SetTraining(true);
  EXPECT_THAT(
      [&] {
        (*model)->Forward({at::randn({1, 1, 28, 28})});
      },
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
  // A package torch made, not tools/export_teacher.py: no manifest naming its outputs.
  EXPECT_THAT(LoadAotiModel(FixturePath("no_manifest_aoti.pt2")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("has no libkd manifest (metadata \"libkd.manifest\"): export it "
                                 "with tools/export_teacher.py")));
  // A package cut short (a copy interrupted): its zip directory is gone.
  {
    std::ifstream whole(FixturePath("small_cnn_aoti.pt2"), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(whole)),
                            std::istreambuf_iterator<char>());
    const std::string cut = std::string(std::getenv("TEST_TMPDIR")) + "/cut.pt2";
    std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    auto truncated = LoadAotiModel(cut);
    EXPECT_THAT(truncated, StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("is not an AOTInductor package (a zip archive cut "
                                              "short")));
    if (!truncated.ok()) {
      EXPECT_EQ(std::string(truncated.status().message()).find('\n'), std::string::npos);
    }
  }
  // A package compiled for CUDA, on a machine without a GPU: refused before its code loads.
  if (!at::hasCUDA()) {
    EXPECT_THAT(LoadAotiModel(FixturePath("cuda_claim_aoti.pt2")),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("was compiled for CUDA and this machine has no GPU: export it "
                                   "with tools/export_teacher.py --device=cpu")));
  }
  // A zip that is no package: a TorchScript archive.
  auto torchscript = LoadAotiModel(FixturePath("small_cnn.pt"));
  EXPECT_THAT(torchscript, StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("cannot load the AOTInductor package")));
  if (!torchscript.ok()) {
    EXPECT_EQ(std::string(torchscript.status().message()).find('\n'), std::string::npos);
  }
}

// A CPU package's kernels need the instruction sets of the machine that compiled it: the names
// this CPU lacks are listed (and a package is refused with them); the fixtures, built here,
// need none this CPU lacks.
TEST(AotiModelTest, InstructionSetsTheCpuLacks) {
  auto only_avx2 = [](const std::string& isa) { return isa == "AVX2"; };
  EXPECT_THAT(hooks_internal::MissingCpuIsa("AVX512 AVX512_VNNI", only_avx2),
              ::testing::ElementsAre("AVX512", "AVX512_VNNI"));
  EXPECT_THAT(hooks_internal::MissingCpuIsa("AVX2", only_avx2), ::testing::IsEmpty());
  EXPECT_THAT(hooks_internal::MissingCpuIsa("", only_avx2), ::testing::IsEmpty());
  // A name libkd cannot check is taken as missing: the package's kernels might use it.
  EXPECT_FALSE(hooks_internal::CpuSupports("NOT_AN_ISA"));
  EXPECT_FALSE(hooks_internal::CpuSupports("AVX10_2"));
  EXPECT_TRUE(hooks_internal::CpuSupports("INVALID_VEC_ISA"));  // Inductor's scalar code
  const std::string unknown = FixturePath("unknown_isa_aoti.pt2");
  EXPECT_THAT(LoadAotiModel(unknown),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       unknown + " was compiled for instruction sets this CPU lacks (AVX10_2): "
                                 "export it again on this machine, or on one no newer than it"));
}

// libtorch's loader leaves its extraction folder behind when it fails; libkd points it at a
// folder of its own and removes that on every way out.
TEST(AotiModelTest, AFailedLoadLeavesNoExtractionFolder) {
  auto leftovers = [] {
    int n = 0;
    for (const auto& entry :
         std::filesystem::directory_iterator(std::filesystem::temp_directory_path())) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("libkd_aoti_", 0) == 0 || name.rfind("aotinductor_", 0) == 0) ++n;
    }
    return n;
  };
  const int before = leftovers();
  // A zip that passes libkd's checks and fails in the loader, after it made its folder.
  EXPECT_THAT(LoadAotiModel(FixturePath("small_cnn.pt")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cannot load the AOTInductor package")));
  EXPECT_EQ(leftovers(), before);
  // Metadata libtorch's reader cannot parse: it fails after extracting the files.
  EXPECT_THAT(LoadAotiModel(FixturePath("cut_metadata_aoti.pt2")).status(), ::testing::Not(IsOk()));
  EXPECT_EQ(leftovers(), before);
  {
    auto model = LoadAotiModel(FixturePath("small_cnn_aoti.pt2"));
    ASSERT_THAT(model, IsOk());
    EXPECT_EQ(leftovers(), before + 1);  // the loaded package's folder, while it lives
  }
  EXPECT_EQ(leftovers(), before);
}

// A package's entries are read by libkd before libtorch's loader extracts them: a name that
// climbs out of the extraction folder refuses the package, and nothing is written there.
TEST(AotiModelTest, EntriesOutsideTheExtractionFolderAreRefused) {
  const std::string climb = FixturePath("climb_aoti.pt2");
  EXPECT_THAT(
      LoadAotiModel(climb),
      StatusIs(absl::StatusCode::kInvalidArgument,
               climb + ": entry \"data/aotinductor/model/../../../../libkd_climbed\" would be "
                       "extracted outside the package's folder (an absolute name, a \"..\" or a "
                       "backslash); libkd does not open such a package: re-export it"));
  // The loader extracts under /tmp/XXXXXX: four levels up from data/aotinductor/model is /tmp.
  EXPECT_FALSE(std::filesystem::exists("/tmp/libkd_climbed"));
  EXPECT_FALSE(std::filesystem::exists("/libkd_climbed"));
}

// Manifest values out of range are refused at load (call -1 indexed before a vector, call 2e9
// allocated two billion calls).
TEST(AotiModelTest, ManifestValuesOutOfRangeAreRefused) {
  for (const char* name : {"bad_call_aoti.pt2", "huge_call_aoti.pt2"}) {
    const std::string path = FixturePath(name);
    EXPECT_THAT(
        LoadAotiModel(path),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 AllOf(HasSubstr(path + ": its libkd manifest is out of range (values[0].call "),
                       HasSubstr("); re-export it with tools/export_teacher.py"))));
  }
  AotiManifest manifest;
  manifest.set_num_model_outputs(1);
  manifest.add_values()->set_path("conv1");
  EXPECT_THAT(hooks_internal::CheckManifest(manifest), IsOk());
  manifest.mutable_values(0)->set_arg(-2);
  EXPECT_THAT(hooks_internal::CheckManifest(manifest),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("values[0].arg -2 is not in [0, 256)")));
  manifest.mutable_values(0)->set_arg(0);
  for (int i = 0; i < 70000; ++i) manifest.add_module_paths("m" + std::to_string(i));
  EXPECT_THAT(hooks_internal::CheckManifest(manifest),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("70000 module paths or types, more than 65536")));
  manifest.clear_module_paths();
  manifest.set_num_model_outputs(0);
  EXPECT_THAT(hooks_internal::CheckManifest(manifest),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("num_model_outputs 0 is not in [1, 65536]")));
}

}  // namespace
}  // namespace kd
