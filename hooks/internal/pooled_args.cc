#include "hooks/internal/pooled_args.h"

namespace kd {
namespace hooks_internal {
namespace {

// The vectors of this thread's hooked calls in progress, by nesting depth (deeper calls, rare:
// a hook that runs a forward that runs hooks, get vectors of their own).
struct Stack {
  static constexpr int kDepth = 8;
  std::vector<c10::IValue> vectors[kDepth];
  int depth = 0;
};

thread_local Stack stack;

}  // namespace

PooledArgs::PooledArgs()
    : args_(stack.depth < Stack::kDepth ? &stack.vectors[stack.depth]
                                        : new std::vector<c10::IValue>()) {
  ++stack.depth;
}

PooledArgs::~PooledArgs() {
  if (borrowed_) {
    for (c10::IValue& value : *args_) c10::MaybeOwnedTraits<c10::IValue>::destroyBorrow(value);
  }
  args_->clear();  // keeps the capacity
  if (--stack.depth >= Stack::kDepth) delete args_;
}

void PooledArgs::Borrow(c10::ArrayRef<c10::IValue> values) {
  borrowed_ = true;
  for (const c10::IValue& value : values) {
    args_->push_back(c10::MaybeOwnedTraits<c10::IValue>::createBorrow(value));
  }
}

}  // namespace hooks_internal
}  // namespace kd
