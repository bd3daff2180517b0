#include "base/registry.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/nearest.h"

namespace kd {
namespace {

std::string FormatSite(const RegistrationSite& site) {
  if (site.file.empty()) return "an unnamed site";
  return absl::StrCat(site.file, ":", site.line);
}

struct Directory {
  absl::Mutex mu;
  std::map<std::string, RegistryBase*, std::less<>> by_kind ABSL_GUARDED_BY(mu);
};

Directory& GetDirectory() {
  static Directory* const directory = new Directory;
  return *directory;
}

}  // namespace

std::vector<std::string> RegistryBase::Keys() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::string> keys;
  keys.reserve(infos_.size());
  for (const auto& [key, info] : infos_) keys.push_back(key);
  return keys;
}

bool RegistryBase::Contains(absl::string_view key) const {
  absl::ReaderMutexLock lock(&mu_);
  return infos_.find(key) != infos_.end();
}

absl::Status RegistryBase::CheckKey(absl::string_view key) const {
  absl::ReaderMutexLock lock(&mu_);
  if (infos_.find(key) != infos_.end()) return absl::OkStatus();
  return NotFoundLocked(key);
}

std::optional<std::vector<KwargSpec>> RegistryBase::KwargSpecs(absl::string_view key) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = infos_.find(key);
  if (it == infos_.end()) return std::nullopt;
  return it->second.kwargs;
}

std::optional<RegistrationSite> RegistryBase::Site(absl::string_view key) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = infos_.find(key);
  if (it == infos_.end()) return std::nullopt;
  return it->second.site;
}

KwargsCheck RegistryBase::GetKwargsCheck(absl::string_view key) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = infos_.find(key);
  return it == infos_.end() ? nullptr : it->second.check;
}

absl::Status RegistryBase::AddKeyLocked(const std::string& key, RegistrationSite site,
                                        std::optional<std::vector<KwargSpec>> kwargs,
                                        KwargsCheck check) {
  if (key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("empty ", kind_, " key registered at ", FormatSite(site)));
  }
  auto [it, inserted] = infos_.try_emplace(key, Info{site, std::move(kwargs), std::move(check)});
  if (!inserted) {
    return absl::AlreadyExistsError(absl::StrCat("duplicate ", kind_, " key \"", key,
                                                 "\": registered at ", FormatSite(it->second.site),
                                                 " and again at ", FormatSite(site)));
  }
  return absl::OkStatus();
}

absl::Status RegistryBase::NotFoundLocked(absl::string_view key) const {
  std::vector<std::string> keys;
  for (const auto& [k, info] : infos_) keys.push_back(k);
  std::string message = absl::StrCat("no ", kind_, " ", QuoteName(key), " is registered");
  if (keys.empty()) {
    absl::StrAppend(&message, "; none are (is the library that registers them linked, with ",
                    "alwayslink = True?)");
  } else {
    const std::string near = DidYouMean(key, keys);
    absl::StrAppend(&message, "; ", near, near.empty() ? "" : " ",
                    "registered: ", absl::StrJoin(keys, ", "));
  }
  return absl::NotFoundError(message);
}

void AddToRegistryDirectory(RegistryBase* registry) {
  Directory& directory = GetDirectory();
  absl::MutexLock lock(&directory.mu);
  if (!directory.by_kind.try_emplace(registry->kind(), registry).second) {
    base_internal::DieOfRegistrationError(absl::AlreadyExistsError(
        absl::StrCat("two global registries of kind \"", registry->kind(), "\"")));
  }
}

const RegistryBase* FindRegistry(absl::string_view kind) {
  Directory& directory = GetDirectory();
  absl::MutexLock lock(&directory.mu);
  auto it = directory.by_kind.find(kind);
  return it == directory.by_kind.end() ? nullptr : it->second;
}

std::vector<std::string> RegistryKinds() {
  Directory& directory = GetDirectory();
  absl::MutexLock lock(&directory.mu);
  std::vector<std::string> kinds;
  for (const auto& [kind, registry] : directory.by_kind) kinds.push_back(kind);
  return kinds;
}

namespace base_internal {

void DieOfRegistrationError(const absl::Status& status) {
  std::fprintf(stderr, "libkd: start-up failed: %s\n", std::string(status.message()).c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace base_internal
}  // namespace kd
