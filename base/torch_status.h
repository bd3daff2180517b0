// The one crossing from libtorch's exceptions into absl::Status.
//
//   absl::StatusOr<torch::jit::Module> m = CallTorch([&] { return torch::jit::load(path); });
#ifndef LIBKD_BASE_TORCH_STATUS_H_
#define LIBKD_BASE_TORCH_STATUS_H_

#include <exception>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "c10/util/Exception.h"

namespace kd {

// Converts a c10::Error into a status with `code`, keeping what_without_backtrace().
absl::Status StatusFromTorchError(const c10::Error& error,
                                  absl::StatusCode code = absl::StatusCode::kInternal);

// Runs `fn`; a c10::Error or std::exception it throws becomes a status with `code`.
// Returns absl::Status for void functions, absl::StatusOr<T> for functions returning T.
template <typename Fn>
auto CallTorch(Fn&& fn, absl::StatusCode code = absl::StatusCode::kInternal) {
  using R = std::invoke_result_t<Fn>;
  using Out = std::conditional_t<std::is_void_v<R>, absl::Status, absl::StatusOr<R>>;
  try {
    if constexpr (std::is_void_v<R>) {
      std::forward<Fn>(fn)();
      return Out(absl::OkStatus());
    } else {
      return Out(std::forward<Fn>(fn)());
    }
  } catch (const c10::Error& e) {
    return Out(StatusFromTorchError(e, code));
  } catch (const std::exception& e) {
    return Out(absl::Status(code, e.what()));
  }
}

}  // namespace kd

#endif  // LIBKD_BASE_TORCH_STATUS_H_
