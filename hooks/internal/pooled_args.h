// A hooked call's argument vector without an allocation per call.
#ifndef LIBKD_HOOKS_INTERNAL_POOLED_ARGS_H_
#define LIBKD_HOOKS_INTERNAL_POOLED_ARGS_H_

#include <vector>

#include <ATen/core/ivalue.h>

namespace kd {
namespace hooks_internal {

// An empty std::vector<c10::IValue> taken from a per-thread pool and given
// back, emptied with its capacity kept, when this goes: HookFn takes a call's
// args as a vector, and allocating one per hooked call cost as much as the rest
// of the call. Nested calls (a hook that runs a forward) take vectors of their
// own.
class PooledArgs {
 public:
  PooledArgs();
  ~PooledArgs();
  PooledArgs(const PooledArgs&) = delete;
  PooledArgs& operator=(const PooledArgs&) = delete;

  std::vector<c10::IValue>& operator*() const { return *args_; }
  std::vector<c10::IValue>* operator->() const { return args_; }

 private:
  std::vector<c10::IValue>* args_;
};

}  // namespace hooks_internal
}  // namespace kd

#endif  // LIBKD_HOOKS_INTERNAL_POOLED_ARGS_H_
