#include "hooks/internal/pooled_args.h"

#include <memory>

namespace kd {
namespace hooks_internal {
namespace {

// The vectors free on this thread (deleted when the thread ends).
struct Pool {
  std::vector<std::unique_ptr<std::vector<c10::IValue>>> free;
};

Pool& ThreadPool() {
  thread_local Pool pool;
  return pool;
}

}  // namespace

PooledArgs::PooledArgs() {
  Pool& pool = ThreadPool();
  if (pool.free.empty()) {
    args_ = new std::vector<c10::IValue>();
  } else {
    args_ = pool.free.back().release();
    pool.free.pop_back();
  }
}

PooledArgs::~PooledArgs() {
  args_->clear();
  ThreadPool().free.emplace_back(args_);
}

}  // namespace hooks_internal
}  // namespace kd
