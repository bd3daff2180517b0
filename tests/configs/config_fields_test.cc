// Every field of DistillConfig is honoured: a field that the validator checks and nothing else
// reads is the defect this test exists for (LoaderConfig.num_workers and .sampler,
// StageModelConfig.find_unused_parameters and silverspoon-kd's chunk_size were accepted and
// ignored once).
//
// It walks every field of every message a DistillConfig holds (its own, PluginConfig's, Kwarg's,
// ProfilerConfig's) and requires that the code that runs a config (the sources passed as
// arguments: distill/, profiler/, memdiag/, tools/ without the validator and the config summary)
// reads it: a source that deals with the message (names its type, or calls the accessor of a
// field holding it) also calls the field's accessor (`.f()`, `->f()`, `.f(i)`, `has_f()`,
// `f_size()`) or names the field in a string (reflection, as GetProcConfig does). Every field is
// read today; a field kept only to be refused (say, a torchdistill name libkd cannot honour)
// would be listed here with a test of its refusal. A new field fails the test until code reads
// it.
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "distill/config/distill_config.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"

namespace kd {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

std::vector<std::string>* sources = nullptr;

// Every field of `message` and of the messages it holds, as "Message.field".
void Walk(const Descriptor* message, std::set<const Descriptor*>& seen,
          std::vector<const FieldDescriptor*>& fields) {
  if (!seen.insert(message).second) return;
  for (int i = 0; i < message->field_count(); ++i) {
    const FieldDescriptor* field = message->field(i);
    fields.push_back(field);
    if (field->message_type() != nullptr && field->message_type()->file()->package() == "kd") {
      Walk(field->message_type(), seen, fields);
    }
  }
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool CallsAccessor(const std::string& text, const std::string& name) {
  for (const std::string& pattern :
       {absl::StrCat(".", name, "()"), absl::StrCat("->", name, "()"), absl::StrCat(".", name, "("),
        absl::StrCat("has_", name, "()"), absl::StrCat(name, "_size()"),
        absl::StrCat("\"", name, "\"")}) {
    if (absl::StrContains(text, pattern)) return true;
  }
  return false;
}

TEST(ConfigFieldsTest, EveryFieldIsReadOrRefused) {
  ASSERT_NE(sources, nullptr);
  ASSERT_GE(sources->size(), 40u);
  std::map<std::string, std::string> texts;
  for (const std::string& path : *sources) texts[path] = Read(path);
  std::set<const Descriptor*> seen;
  std::vector<const FieldDescriptor*> fields;
  Walk(DistillConfig::descriptor(), seen, fields);
  ASSERT_GE(fields.size(), 100u);
  for (const FieldDescriptor* field : fields) {
    const std::string type = field->containing_type()->name();
    const std::string full = absl::StrCat(type, ".", field->name());
    // A source deals with the message when it names its type or a field holding it.
    std::vector<std::string> names = {type};
    for (const FieldDescriptor* holder : fields) {
      if (holder->message_type() == field->containing_type()) {
        names.push_back(absl::StrCat(holder->name(), "("));
      }
    }
    bool read = false;
    for (const auto& [path, text] : texts) {
      bool deals = false;
      for (const std::string& name : names) deals = deals || absl::StrContains(text, name);
      if (deals && CallsAccessor(text, field->name())) {
        read = true;
        break;
      }
    }
    EXPECT_TRUE(read) << full << " is not read by the code that runs a config: make it do what "
                      << "its comment says, or have the validator refuse any value of it and "
                      << "list it here as refused";
  }
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  kd::sources = new std::vector<std::string>(argv + 1, argv + argc);
  return RUN_ALL_TESTS();
}
