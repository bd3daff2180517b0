#include "hooks/hook_point.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace kd {
namespace hook_point_internal {

std::atomic<int64_t> num_hooks{0};

namespace {

struct Hook {
  Hook(int64_t id, NativeHookFn fn) : id(id), fn(std::move(fn)) {}
  const int64_t id;
  const NativeHookFn fn;
  std::atomic<bool> fired{false};
};

struct Table {
  std::shared_mutex mutex;
  // Hooks are shared: a call runs a snapshot of its module's hooks outside the lock, and a
  // hook removed meanwhile stays alive until that call is done with it.
  std::unordered_map<const torch::nn::Module*, std::vector<std::shared_ptr<Hook>>> by_module;
  std::unordered_map<int64_t, const torch::nn::Module*> module_of;
  int64_t next_id = 0;
};

Table& GetTable() {
  static Table* table = new Table();
  return *table;
}

}  // namespace

bool HasHooks(const torch::nn::Module* module) {
  Table& table = GetTable();
  std::shared_lock lock(table.mutex);
  return table.by_module.count(module) != 0;
}

void RunHooks(const torch::nn::Module* module, const std::vector<c10::IValue>& args,
              const c10::IValue& output) {
  Table& table = GetTable();
  std::vector<std::shared_ptr<Hook>> snapshot;
  {
    std::shared_lock lock(table.mutex);
    auto it = table.by_module.find(module);
    if (it == table.by_module.end()) return;
    snapshot = it->second;
  }
  // Run outside the lock: a hook may add or remove hooks.
  for (const std::shared_ptr<Hook>& hook : snapshot) {
    hook->fired.store(true, std::memory_order_relaxed);
    hook->fn(args, output);
  }
}

}  // namespace hook_point_internal

using hook_point_internal::GetTable;
using hook_point_internal::Table;

int64_t AddNativeHook(const torch::nn::Module& module, NativeHookFn fn) {
  Table& table = GetTable();
  std::unique_lock lock(table.mutex);
  const int64_t id = table.next_id++;
  table.by_module[&module].push_back(std::make_shared<hook_point_internal::Hook>(id, std::move(fn)));
  table.module_of[id] = &module;
  hook_point_internal::num_hooks.fetch_add(1, std::memory_order_relaxed);
  return id;
}

void RemoveNativeHook(int64_t id) {
  Table& table = GetTable();
  std::unique_lock lock(table.mutex);
  auto owner = table.module_of.find(id);
  if (owner == table.module_of.end()) return;
  auto it = table.by_module.find(owner->second);
  auto& hooks = it->second;
  hooks.erase(std::remove_if(hooks.begin(), hooks.end(),
                             [id](const std::shared_ptr<hook_point_internal::Hook>& h) {
                               return h->id == id;
                             }),
              hooks.end());
  if (hooks.empty()) table.by_module.erase(it);
  table.module_of.erase(owner);
  hook_point_internal::num_hooks.fetch_sub(1, std::memory_order_relaxed);
}

bool NativeHookFired(int64_t id) {
  Table& table = GetTable();
  std::shared_lock lock(table.mutex);
  auto owner = table.module_of.find(id);
  if (owner == table.module_of.end()) return false;
  for (const auto& hook : table.by_module.at(owner->second)) {
    if (hook->id == id) return hook->fired.load(std::memory_order_relaxed);
  }
  return false;
}

}  // namespace kd
