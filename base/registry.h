// Plugins by key: one registry template for every plugin kind (process functions, losses,
// models, datasets, optimizers, schedulers, ...), each plugin with its kwargs contract
// (kd::KwargSpec, base/kwargs.h).
//
//   // The registry of a kind, created on first use (safe from static initializers).
//   kd::Registry<LossFn>& LossRegistry() {
//     static kd::Registry<LossFn>* const registry = kd::NewGlobalRegistry<LossFn>("loss");
//     return *registry;
//   }
//
//   // A plugin registers itself at the end of its .cc, whose cc_library has alwayslink = True
//   // (without it the linker drops the file and the lookup fails at run time):
//   KD_REGISTER(LossRegistry(), "l1", L1Loss, {});                 // takes no kwargs
//   KD_REGISTER(LossRegistry(), "kd", KdLoss, {{"temperature", kd::KwargType::kNumber}});
//   KD_REGISTER(LossRegistry(), "custom", Custom, kd::kAnyKwargs);  // any kwargs, unchecked
//   // Ranges and choices in the specs; relations between kwargs in a check of the plugin's own:
//   KD_REGISTER(LossRegistry(), "dkd", DkdLoss,
//               {{.name = "temperature", .type = kd::KwargType::kNumber, .default_value = 4.0,
//                 .min = 0, .min_exclusive = true}},
//               [](const kd::KwargsView& view) { return absl::OkStatus(); });
//
//   // Lookup; an unknown key gives NotFound naming the nearest key and listing all of them.
//   KD_ASSIGN_OR_RETURN(const LossFn* loss, LossRegistry().Get("l1"));
//
// A duplicate key registered at start-up stops the program, naming the key and both sites.
// Global registries are also listed by kind (FindRegistry("loss")), so config validation can
// check keys of any kind without knowing the plugin type.
#ifndef LIBKD_BASE_REGISTRY_H_
#define LIBKD_BASE_REGISTRY_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "base/kwargs.h"

namespace kd {

// Given to KD_REGISTER instead of a kwarg spec list: the plugin accepts any keyword arguments,
// and config validation checks neither their names nor their types. Every registration says
// which it is: a spec list (`{}`: no kwargs) or this.
struct AnyKwargs {
  // Not constructible from `{}`, which must keep meaning "an empty spec list".
  explicit constexpr AnyKwargs(int) {}
};
inline constexpr AnyKwargs kAnyKwargs{0};

// Where a plugin was registered (the KD_REGISTER line).
struct RegistrationSite {
  std::string file;
  int line = 0;
};

// The part of a registry that does not depend on the plugin type: kind, keys, sites, kwargs.
// Thread-safe.
class RegistryBase {
 public:
  explicit RegistryBase(std::string kind) : kind_(std::move(kind)) {}
  virtual ~RegistryBase() = default;
  RegistryBase(const RegistryBase&) = delete;
  RegistryBase& operator=(const RegistryBase&) = delete;

  // The plugin kind, as it appears in messages and configs: "loss", "pre_forward_proc".
  const std::string& kind() const { return kind_; }

  // Registered keys, sorted.
  std::vector<std::string> Keys() const;
  bool Contains(absl::string_view key) const;

  // OK if `key` is registered; otherwise NotFound naming the nearest and all registered keys:
  //   no loss "KDLos" is registered; nearest: KDLoss; registered: CE, KDLoss
  absl::Status CheckKey(absl::string_view key) const;

  // The kwargs `key` declared when it registered; nullopt if it declared none (then any kwargs
  // are accepted) or if `key` is unknown.
  std::optional<std::vector<KwargSpec>> KwargSpecs(absl::string_view key) const;

  // Where `key` was registered; nullopt if unknown.
  std::optional<RegistrationSite> Site(absl::string_view key) const;

  // The KwargsCheck `key` registered with; null if none or if `key` is unknown.
  KwargsCheck GetKwargsCheck(absl::string_view key) const;

 protected:
  // Records `key`; AlreadyExists naming both sites if it is taken. Called with mu_ held.
  absl::Status AddKeyLocked(const std::string& key, RegistrationSite site,
                            std::optional<std::vector<KwargSpec>> kwargs, KwargsCheck check)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status NotFoundLocked(absl::string_view key) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;

 private:
  struct Info {
    RegistrationSite site;
    std::optional<std::vector<KwargSpec>> kwargs;
    KwargsCheck check;
  };
  const std::string kind_;
  std::map<std::string, Info, std::less<>> infos_ ABSL_GUARDED_BY(mu_);
};

// Plugins of one kind, of type T (usually a std::function or a factory), by key.
template <typename T>
class Registry final : public RegistryBase {
 public:
  explicit Registry(std::string kind) : RegistryBase(std::move(kind)) {}

  // Adds `value` under `key`, with the kwargs it accepts (nullopt: any) and its own check of
  // them. AlreadyExists naming the key and both registration sites if `key` is taken; the
  // registry is then unchanged.
  absl::Status Register(const std::string& key, T value, RegistrationSite site = {},
                        std::optional<std::vector<KwargSpec>> kwargs = std::nullopt,
                        KwargsCheck check = nullptr) {
    absl::MutexLock lock(&mu_);
    absl::Status added = AddKeyLocked(key, std::move(site), std::move(kwargs), std::move(check));
    if (added.ok()) values_.emplace(key, std::move(value));
    return added;
  }

  // The plugin under `key`, valid for the registry's lifetime (entries are never removed);
  // NotFound listing the registered keys and the nearest one.
  absl::StatusOr<const T*> Get(absl::string_view key) const {
    absl::ReaderMutexLock lock(&mu_);
    auto it = values_.find(key);
    if (it == values_.end()) return NotFoundLocked(key);
    return &it->second;
  }

 private:
  std::map<std::string, T, std::less<>> values_ ABSL_GUARDED_BY(mu_);
};

// Adds `registry` to the directory of global registries by kind. Stops the program if the
// kind is taken: two registries of one kind would split its plugins.
void AddToRegistryDirectory(RegistryBase* registry);

// A new registry of `kind` listed in the directory; never deleted.
template <typename T>
Registry<T>* NewGlobalRegistry(std::string kind) {
  auto* registry = new Registry<T>(std::move(kind));
  AddToRegistryDirectory(registry);
  return registry;
}

// The global registry of `kind`, or nullptr if none is linked into this program (or it has
// not been created yet: registries are created by their first registration or lookup).
const RegistryBase* FindRegistry(absl::string_view kind);

// Kinds of the global registries, sorted.
std::vector<std::string> RegistryKinds();

namespace base_internal {

// Prints `status` as a start-up failure and aborts.
[[noreturn]] void DieOfRegistrationError(const absl::Status& status);

// Registers `value` under `key` at start-up; stops the program if that fails.
template <typename T>
bool RegisterOrDie(Registry<T>& registry, RegistrationSite site, const std::string& key, T value,
                   std::optional<std::vector<KwargSpec>> kwargs, KwargsCheck check = nullptr) {
  absl::Status status = registry.Register(key, std::move(value), std::move(site), std::move(kwargs),
                                          std::move(check));
  if (!status.ok()) DieOfRegistrationError(status);
  return true;
}

// KD_REGISTER's entry points: any kwargs, or a spec list. (There is deliberately no form
// without either: "accepts anything" must be said.)
template <typename T, typename V>
bool RegisterOrDie(Registry<T>& registry, const char* file, int line, const std::string& key,
                   V&& value, AnyKwargs) {
  return RegisterOrDie(registry, {file, line}, key, T(std::forward<V>(value)), std::nullopt);
}
template <typename T, typename V>
bool RegisterOrDie(Registry<T>& registry, const char* file, int line, const std::string& key,
                   V&& value, std::vector<KwargSpec> kwargs, KwargsCheck check = nullptr) {
  return RegisterOrDie(registry, {file, line}, key, T(std::forward<V>(value)), std::move(kwargs),
                       std::move(check));
}

}  // namespace base_internal
}  // namespace kd

// Registers a plugin at start-up: KD_REGISTER(registry, key, value, kwarg_specs[, check]).
// `registry` is an expression giving a kd::Registry<T>&; `kwarg_specs` a
// std::vector<kd::KwargSpec> (a braced list works; `{}` for none) or kd::kAnyKwargs; `check`
// an optional kd::KwargsCheck (with a spec list). Use at namespace scope in a .cc file.
#define KD_REGISTER(registry, ...) KD_REGISTER_IMPL_(__COUNTER__, registry, __VA_ARGS__)

#define KD_REGISTER_IMPL_(counter, registry, ...)                                   \
  [[maybe_unused]] static const bool KD_REGISTRY_CONCAT_(kd_registered_, counter) = \
      ::kd::base_internal::RegisterOrDie(registry, __FILE__, __LINE__, __VA_ARGS__)

#define KD_REGISTRY_CONCAT_INNER_(x, y) x##y
#define KD_REGISTRY_CONCAT_(x, y) KD_REGISTRY_CONCAT_INNER_(x, y)

#endif  // LIBKD_BASE_REGISTRY_H_
