#include "hooks/sequential_model.h"

#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/nearest.h"
#include "base/status_macros.h"
#include "hooks/internal/tap_list.h"

namespace kd {
namespace {

class SequentialModel final : public Model {
 public:
  struct Element {
    std::string name;
    std::unique_ptr<Model> model;
  };

  explicit SequentialModel(std::vector<Element> elements) : elements_(std::move(elements)) {}

  std::string kind() const override { return "sequential"; }

  c10::IValue Forward(std::vector<c10::IValue> args, const Kwargs& kwargs) override {
    const bool tap_root = taps_.HasPath(hooks_internal::TapList::kRootPathId);
    std::vector<c10::IValue> root_args;
    if (tap_root) root_args = args;
    c10::IValue value = elements_.front().model->Forward(std::move(args), kwargs);
    for (size_t i = 1; i < elements_.size(); ++i) {
      value = elements_[i].model->Forward({std::move(value)});
    }
    if (tap_root) {
      taps_.Dispatch(hooks_internal::TapList::kRootPathId, root_args, value, root_args, value);
    }
    return value;
  }

  std::vector<ModuleInfo> NamedModules() const override {
    std::vector<ModuleInfo> out = {{"", "Sequential"}};
    for (const Element& element : elements_) {
      for (ModuleInfo& info : element.model->NamedModules()) {
        info.path = Prefixed(element.name, info.path);
        out.push_back(std::move(info));
      }
    }
    return out;
  }

  std::vector<NamedTensor> NamedParameters() const override {
    return Gather([](const Model& m) { return m.NamedParameters(); });
  }
  std::vector<NamedTensor> NamedBuffers() const override {
    return Gather([](const Model& m) { return m.NamedBuffers(); });
  }

  void SetTraining(bool training) override {
    for (Element& element : elements_) element.model->SetTraining(training);
  }
  bool is_training() const override { return elements_.front().model->is_training(); }

  absl::StatusOr<HookHandle> AddHook(absl::string_view path, HookFn fn,
                                     HookValues values) override {
    if (absl::Status found = CheckModulePath(path); !found.ok()) return found;
    if (path.empty()) return taps_.Add("", std::move(fn), values);
    // Element names hold no dots: the first one ends the element's name.
    const size_t dot = path.find('.');
    const absl::string_view name = path.substr(0, dot);
    for (Element& element : elements_) {
      if (element.name != name) continue;
      return element.model->AddHook(
          dot == absl::string_view::npos ? absl::string_view() : path.substr(dot + 1),
          std::move(fn), values);
    }
    return absl::InternalError(absl::StrCat("no element ", QuoteName(name)));  // checked above
  }

  absl::Status CheckHooksFired() const override {
    for (const Element& element : elements_) {
      if (absl::Status fired = element.model->CheckHooksFired(); !fired.ok()) {
        return WithContext(
            absl::StrCat("in the sequential model's element \"", element.name, "\""), fired);
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Model>> Submodel(absl::string_view path) const override {
    if (absl::Status found = CheckModulePath(path); !found.ok()) return found;
    if (path.empty()) {
      std::vector<Element> copies;
      for (const Element& element : elements_) {
        absl::StatusOr<std::unique_ptr<Model>> copy = element.model->Submodel("");
        if (!copy.ok()) return copy.status();
        copies.push_back({element.name, *std::move(copy)});
      }
      return std::unique_ptr<Model>(std::make_unique<SequentialModel>(std::move(copies)));
    }
    const size_t dot = path.find('.');
    for (const Element& element : elements_) {
      if (element.name == path.substr(0, dot)) {
        return element.model->Submodel(dot == absl::string_view::npos ? absl::string_view()
                                                                      : path.substr(dot + 1));
      }
    }
    return absl::InternalError(absl::StrCat("no module ", QuoteName(path)));  // checked above
  }

 private:
  static std::string Prefixed(const std::string& name, const std::string& path) {
    return path.empty() ? name : absl::StrCat(name, ".", path);
  }

  template <typename F>
  std::vector<NamedTensor> Gather(F list) const {
    std::vector<NamedTensor> out;
    for (const Element& element : elements_) {
      for (auto& [path, tensor] : list(*element.model)) {
        out.emplace_back(Prefixed(element.name, path), tensor);
      }
    }
    return out;
  }

  std::vector<Element> elements_;
  hooks_internal::TapList taps_;  // the root's
};

}  // namespace

std::string SequentialElementName(const std::string& path) {
  return absl::StrReplaceAll(path, {{".", "__attr__"}});
}

absl::StatusOr<std::unique_ptr<Model>> MakeSequentialModel(const Model& source,
                                                           const std::vector<std::string>& paths) {
  if (paths.empty()) {
    return absl::InvalidArgumentError("a sequential model needs at least one module path");
  }
  std::set<std::string> seen;
  std::vector<SequentialModel::Element> elements;
  for (const std::string& path : paths) {
    if (path.empty()) {
      return absl::InvalidArgumentError(
          "a sequential model's module paths name modules inside the model; \"\" (the whole "
          "model) is not one");
    }
    for (const std::string& other : seen) {
      const bool same = other == path;
      if (same || absl::StartsWith(path, other + ".") || absl::StartsWith(other, path + ".")) {
        return absl::InvalidArgumentError(absl::StrCat(
            "module ", QuoteName(path), same ? " is listed twice" : " overlaps ",
            same ? "" : QuoteName(other),
            " in the sequential model: its parameters would be trained twice; list each module "
            "once"));
      }
    }
    seen.insert(path);
    absl::StatusOr<std::unique_ptr<Model>> module = source.Submodel(path);
    if (!module.ok()) return module.status();
    elements.push_back({SequentialElementName(path), *std::move(module)});
  }
  return std::unique_ptr<Model>(std::make_unique<SequentialModel>(std::move(elements)));
}

}  // namespace kd
