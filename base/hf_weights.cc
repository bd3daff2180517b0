// A Hugging Face model folder's weights (base/safetensors.h): model.safetensors, or the shards
// that model.safetensors.index.json names.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/internal/safetensors_header.h"
#include "base/safetensors.h"
#include "base/status_macros.h"
#include "base/torch_status.h"

namespace kd {
namespace {

using Json = nlohmann::json;
using base_internal::QuoteName;

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";

std::string InFolder(const std::string& folder, absl::string_view name) {
  return absl::StrCat(folder, absl::EndsWith(folder, "/") ? "" : "/", name);
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// model-00001-of-00002.safetensors: a shard as transformers names it.
bool IsShardName(absl::string_view name) {
  constexpr absl::string_view kExample = "model-00001-of-00002.safetensors";
  if (name.size() != kExample.size()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const bool digit = (i >= 6 && i < 11) || (i >= 15 && i < 20);
    if (digit ? !absl::ascii_isdigit(name[i]) : name[i] != kExample[i]) return false;
  }
  return true;
}

// The hub cache's layout: <repo>/snapshots/<revision>/<file> is a link to <repo>/blobs/<hash>.
bool IsHubCacheBlob(const std::string& folder, const std::string& path) {
  std::error_code error;
  const std::filesystem::path real = std::filesystem::weakly_canonical(folder, error);
  if (error || real.parent_path().filename() != "snapshots") return false;
  return IsWithinFolder(path, (real.parent_path().parent_path() / "blobs").string());
}

// The shard `name` of the index, refused when it would lead the reader out of `folder`.
absl::StatusOr<std::string> ShardPath(const std::string& folder, const std::string& name) {
  const std::string context =
      absl::StrCat(InFolder(folder, kIndexFile), ": shard ", QuoteName(name), " ");
  if (name.empty() || name[0] == '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        context,
        "is not a file name inside the folder; the index must name its shards by their "
        "names in the model's folder"));
  }
  for (absl::string_view part : absl::StrSplit(name, '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(context,
                       "climbs out of the folder with \"..\"; the index must name its shards by "
                       "their names in the model's folder"));
    }
  }
  const std::string path = InFolder(folder, name);
  if (!IsWithinFolder(path, folder) && !IsHubCacheBlob(folder, path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, "is a symbolic link out of the folder; copy the shard into the folder"));
  }
  return path;
}

// The index's weight_map: tensor name -> shard name.
absl::StatusOr<std::map<std::string, std::string>> ReadWeightMap(const std::string& path) {
  KD_ASSIGN_OR_RETURN(std::string text, ReadFile(path, kMaxTextBytes));
  absl::StatusOr<Json> json =
      CallTorch(absl::StrCat(path, ": not JSON"), absl::StatusCode::kInvalidArgument,
                [&] { return Json::parse(text); });
  if (!json.ok()) return json.status();
  const auto found = json->is_object() ? json->find("weight_map") : json->end();
  if (found == json->end() || !found->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": has no \"weight_map\" object (tensor name -> shard file); not a "
                     "transformers index"));
  }
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, shard] : found->items()) {
    if (!shard.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": weight_map maps ", QuoteName(name),
                                                     " to ", shard.dump(),
                                                     ", not a shard's file name"));
    }
    weight_map.emplace(name, shard.get<std::string>());
  }
  return weight_map;
}

absl::StatusOr<NamedTensors> ReadShards(const std::string& folder) {
  const std::string index = InFolder(folder, kIndexFile);
  KD_ASSIGN_OR_RETURN(auto weight_map, ReadWeightMap(index));
  std::set<std::string> shards;
  for (const auto& [name, shard] : weight_map) shards.insert(shard);
  NamedTensors tensors;
  for (const std::string& shard : shards) {
    KD_ASSIGN_OR_RETURN(std::string path, ShardPath(folder, shard));
    KD_ASSIGN_OR_RETURN(SafetensorsContents contents, ReadSafetensors(path));
    for (auto& [name, tensor] : contents.tensors) {
      const auto mapped = weight_map.find(name);
      if (mapped == weight_map.end() || mapped->second != shard) {
        return absl::DataLossError(absl::StrCat(
            index, ": shard ", QuoteName(shard), " holds tensor ", QuoteName(name),
            mapped == weight_map.end()
                ? ", which the index does not name"
                : absl::StrCat(", which the index puts in ", QuoteName(mapped->second)),
            "; save the model again"));
      }
      weight_map.erase(mapped);
      tensors.emplace_back(std::move(name), std::move(tensor));
    }
  }
  if (!weight_map.empty()) {
    const auto& [name, shard] = *weight_map.begin();
    return absl::DataLossError(absl::StrCat(index, ": names tensor ", QuoteName(name), " in shard ",
                                            QuoteName(shard), ", which does not hold it (",
                                            weight_map.size(), " such); save the model again"));
  }
  return tensors;
}

// Removes the weight files of an earlier save in `folder` that are not in `keep`.
absl::Status RemoveStaleWeights(const std::string& folder, const std::set<std::string>& keep) {
  std::error_code error;
  std::vector<std::string> stale;
  for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    // A link is removed, never what it points to; folders are left alone.
    const std::filesystem::file_type type = entry.symlink_status(error).type();
    if ((name == kSingleFile || name == kIndexFile || IsShardName(name)) && !keep.count(name) &&
        (type == std::filesystem::file_type::regular ||
         type == std::filesystem::file_type::symlink)) {
      stale.push_back(name);
    }
  }
  for (const std::string& name : stale) {
    const std::string path = InFolder(folder, name);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      const int err = errno;
      return absl::PermissionDeniedError(absl::StrCat(
          path, ": cannot remove this weight file of an earlier save (", std::strerror(err),
          "); remove it, or a reader may take it for the new weights"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<NamedTensors> ReadHfWeights(const std::string& folder) {
  const std::string single = InFolder(folder, kSingleFile);
  if (IsRegularFile(single)) {
    KD_ASSIGN_OR_RETURN(SafetensorsContents contents, ReadSafetensors(single));
    return std::move(contents.tensors);
  }
  if (IsRegularFile(InFolder(folder, kIndexFile))) return ReadShards(folder);
  struct stat st;
  if (::stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat(folder, ": no such folder; give a model's folder"));
  }
  return absl::NotFoundError(absl::StrCat(
      folder, ": holds neither ", kSingleFile, " nor ", kIndexFile,
      IsRegularFile(InFolder(folder, "pytorch_model.bin"))
          ? "; its pytorch_model.bin is a pickle, which libkd does not run: convert it to "
            "safetensors in Python (transformers' save_pretrained)"
          : "; give the folder transformers' save_pretrained wrote"));
}

absl::Status WriteHfWeights(const std::string& folder, const NamedTensors& tensors,
                            int64_t max_shard_bytes) {
  struct stat st;
  if (::stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(
        absl::StrCat(folder, ": no such folder; make it before writing the weights into it"));
  }
  KD_RETURN_IF_ERROR(WithContext(folder, base_internal::CheckTensorsToWrite(tensors).status()));
  // huggingface_hub's split: in order, a new shard when the next tensor would overflow this
  // one, a tensor larger than a shard alone in its own.
  std::vector<NamedTensors> shards;
  NamedTensors current;
  int64_t current_bytes = 0, total_bytes = 0;
  for (const auto& named : tensors) {
    const int64_t bytes = static_cast<int64_t>(named.second.nbytes());
    total_bytes += bytes;
    if (max_shard_bytes > 0 && bytes > max_shard_bytes) {
      shards.push_back({named});
      continue;
    }
    if (max_shard_bytes > 0 && current_bytes + bytes > max_shard_bytes && !current.empty()) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(named);
    current_bytes += bytes;
  }
  if (!current.empty() || shards.empty()) shards.push_back(std::move(current));
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  if (shards.size() == 1) {
    // The new file wins over an earlier index as soon as it is in place (readers prefer it).
    KD_RETURN_IF_ERROR(WriteSafetensors(InFolder(folder, kSingleFile), shards[0], metadata));
    return RemoveStaleWeights(folder, {kSingleFile});
  }
  // An earlier model.safetensors would win over the new index: it goes first.
  KD_RETURN_IF_ERROR(RemoveStaleWeights(folder, {}));
  Json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", Json::object()}};
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name =
        absl::StrCat("model-", absl::Dec(i + 1, absl::kZeroPad5), "-of-",
                     absl::Dec(shards.size(), absl::kZeroPad5), ".safetensors");
    KD_RETURN_IF_ERROR(WriteSafetensors(InFolder(folder, name), shards[i], metadata));
    for (const auto& named : shards[i]) index["weight_map"][named.first] = name;
  }
  // As transformers writes it: json.dumps(index, indent=2, sort_keys=True) + "\n".
  KD_ASSIGN_OR_RETURN(std::string text,
                      CallTorch(absl::StrCat(folder, ": index"), absl::StatusCode::kInvalidArgument,
                                [&] { return index.dump(2, ' ', /*ensure_ascii=*/true) + "\n"; }));
  return WriteFileAtomically(InFolder(folder, kIndexFile), text);
}

}  // namespace kd
