#include "hooks/hook_point.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/intrusive_ptr.h>

#include "hooks/internal/lazy_clone.h"
#include "hooks/internal/pooled_args.h"

namespace kd {
namespace hooks_internal {

std::atomic<int64_t> num_hooks{0};

namespace {

// Copy-on-write: a module's list is replaced, never changed, so a call looks it
// up once and runs it outside the lock. Every change bumps `generation`, which
// tells a thread's cache (HooksOf) that what it remembers may be stale.
struct Table {
  std::shared_mutex mutex;
  std::unordered_map<const torch::nn::Module*, std::shared_ptr<const HookList>> by_module;
  std::atomic<uint64_t> generation{1};
};

Table& GetTable() {
  static Table* table = new Table();
  return *table;
}

void Remove(const torch::nn::Module* module, const HookFn* fn) {
  Table& table = GetTable();
  std::unique_lock lock(table.mutex);
  auto it = table.by_module.find(module);
  if (it == table.by_module.end()) return;
  auto list = std::make_shared<HookList>(*it->second);
  auto found = std::find_if(list->fns.begin(), list->fns.end(),
                            [fn](const auto& f) { return f.get() == fn; });
  if (found == list->fns.end()) return;
  list->fns.erase(found);
  if (list->fns.empty()) {
    table.by_module.erase(it);
  } else {
    it->second = std::move(list);
  }
  table.generation.fetch_add(1, std::memory_order_release);
  num_hooks.fetch_sub(1, std::memory_order_relaxed);
}

// What one thread last looked up for a module, valid while the table's
// generation is unchanged. Weak: a cache never keeps removed hooks alive.
struct CacheEntry {
  const torch::nn::Module* module = nullptr;
  uint64_t generation = 0;
  std::weak_ptr<const HookList> hooks;  // empty: the module had no hooks
};

}  // namespace

std::shared_ptr<const HookList> HooksOf(const torch::nn::Module* module) {
  Table& table = GetTable();
  // A small per-thread cache: the hot path takes no lock and hashes nothing.
  thread_local std::array<CacheEntry, 16> cache;
  CacheEntry& entry = cache[(reinterpret_cast<uintptr_t>(module) * 0x9E3779B97F4A7C15u) >> 60];
  if (entry.module == module &&
      entry.generation == table.generation.load(std::memory_order_acquire)) {
    return entry.hooks.lock();
  }
  std::shared_lock lock(table.mutex);
  auto it = table.by_module.find(module);
  std::shared_ptr<const HookList> hooks = it == table.by_module.end() ? nullptr : it->second;
  entry.module = module;
  entry.generation = table.generation.load(std::memory_order_relaxed);  // stable under the lock
  entry.hooks = hooks;
  return hooks;
}

// The lazy copy a thread made last, handed out again while its tensor is alive and unchanged:
// in a chain of hooked modules one module's output is the next one's input, and both records
// then share one copy (as they share the tensor with HookValues::kReferences).
struct LastCopy {
  std::optional<c10::weak_intrusive_ptr<c10::TensorImpl>> original;
  uint32_t version = 0;
  std::optional<c10::weak_intrusive_ptr<c10::TensorImpl>> copy;
  uint32_t copy_version = 0;  // a hook that wrote its copy in place gets no share of it
  bool grad_mode = false;     // a copy made without autograd serves no call under it
};

c10::IValue LazyCopy(const c10::IValue& value) {
  if (!value.isTensor()) return LazyCloneValue(value);
  const at::Tensor& t = value.toTensor();
  if (!t.defined() || t.is_inference()) return LazyCloneValue(value);
  thread_local LastCopy last;
  const uint32_t version = t.unsafeGetTensorImpl()->version_counter().current_version();
  const bool grad_mode = at::GradMode::is_enabled();
  if (last.original && last.version == version && last.grad_mode == grad_mode) {
    c10::intrusive_ptr<c10::TensorImpl> original = last.original->lock();
    if (original.get() == t.unsafeGetTensorImpl()) {
      c10::intrusive_ptr<c10::TensorImpl> copy = last.copy->lock();
      if (copy && copy->version_counter().current_version() == last.copy_version) {
        return at::Tensor(std::move(copy));
      }
    }
  }
  c10::IValue copy = LazyCloneValue(value);
  last.original.emplace(t.getIntrusivePtr());
  last.version = version;
  last.grad_mode = grad_mode;
  last.copy.emplace(copy.toTensor().getIntrusivePtr());
  last.copy_version = copy.toTensor().unsafeGetTensorImpl()->version_counter().current_version();
  return copy;
}

}  // namespace hooks_internal

HookHandle AddNativeHook(const torch::nn::Module& module, HookFn fn, HookValues values) {
  using hooks_internal::HookList;
  if (values == HookValues::kAsReturned) {
    // A native forward's later ops are unknown: copies that cost memory only if written.
    fn = [fn = std::move(fn)](const std::vector<c10::IValue>& args, const c10::IValue& output) {
      hooks_internal::PooledArgs copied;
      for (const c10::IValue& arg : args) copied->push_back(hooks_internal::LazyCopy(arg));
      fn(*copied, hooks_internal::LazyCopy(output));
    };
  }
  auto shared = std::make_shared<const HookFn>(std::move(fn));
  {
    hooks_internal::Table& table = hooks_internal::GetTable();
    std::unique_lock lock(table.mutex);
    std::shared_ptr<const HookList>& slot = table.by_module[&module];
    auto list = slot ? std::make_shared<HookList>(*slot) : std::make_shared<HookList>();
    list->fns.push_back(shared);
    slot = std::move(list);
    table.generation.fetch_add(1, std::memory_order_release);
    hooks_internal::num_hooks.fetch_add(1, std::memory_order_relaxed);
  }
  // The module is only a key here: removal after the module is gone is safe.
  return HookHandle(
      [module = &module, fn = shared.get()] { hooks_internal::Remove(module, fn); });
}

}  // namespace kd
