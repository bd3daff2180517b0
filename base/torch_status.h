// libkd's error rule, written once, and the one crossing from libtorch's exceptions into it.
//
// - Every fallible libkd function returns absl::Status or absl::StatusOr; nothing libkd throws
//   crosses its API. The code says what kind of problem it is: InvalidArgument for bad input
//   (configs, kwargs, shapes, flags), NotFound for unknown keys, paths and files (with the
//   nearest that exist), FailedPrecondition for a call in the wrong state, AlreadyExists for an
//   output that is there already, Unavailable for an unreachable peer or store, DataLoss for a
//   damaged file, Internal for a failure inside libtorch on valid input.
// - The message names the problem and its fix, on one line, with what it concerns first: the
//   config's file:line:col and field, the plugin (`loss "KDLoss"`), the module path, the file.
//   Callers add their context in front ("stage 1: ..."), never behind.
// - libtorch throws (c10::Error, std::exception). A call that can throw on what a user gave
//   is wrapped where it is made, with CallTorch below: its code and, where the caller has
//   something to say, a context in front of libtorch's first line. Hand-written try/catch is
//   for the three places where an exception is not an error crossing: control flow (a native
//   forward stopped after its last captured module, hooks/native_model.cc), an exception
//   carried from a loader worker to the consumer (distill/data/data_loader.cc), and the
//   process-function call boundary (a user's function that throws, distill/procs/proc_func.h).
// - A bug inside libkd (a factory reading a kwarg its spec does not define) is a c10::Error
//   from TORCH_CHECK, which the nearest CallTorch reports as Internal.
// - Tools print a status as one line on stderr (control bytes escaped) and exit 2 where the user
//   can fix the input (InvalidArgument, NotFound, PermissionDenied, DataLoss, OutOfRange,
//   AlreadyExists; tools/tool_util.h), 1 otherwise.
//
//   absl::StatusOr<torch::jit::Module> m = CallTorch([&] { return torch::jit::load(path); });
//   KD_RETURN_IF_ERROR(CallTorch("optimizer state", absl::StatusCode::kDataLoss,
//                                [&] { optimizer.load(archive); }));
#ifndef LIBKD_BASE_TORCH_STATUS_H_
#define LIBKD_BASE_TORCH_STATUS_H_

#include <exception>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "c10/util/Exception.h"

namespace kd {

// Converts a c10::Error into a status with `code`, keeping what_without_backtrace().
absl::Status StatusFromTorchError(const c10::Error& error,
                                  absl::StatusCode code = absl::StatusCode::kInternal);

// The first line of what `error` says (a c10::Error without its backtrace and the failing
// check c10 appends): for messages that stay on one line.
std::string TorchErrorLine(const std::exception& error);

// Runs `fn`; what it throws (c10::Error derives from std::exception) becomes
// `to_status(exception)`. absl::Status for void functions, absl::StatusOr<T> otherwise. For a
// caller that words the error from the exception itself; CallTorch below for the rest.
template <typename Fn, typename ToStatus>
auto CallTorchWith(Fn&& fn, const ToStatus& to_status) {
  using R = std::invoke_result_t<Fn>;
  using Out = std::conditional_t<std::is_void_v<R>, absl::Status, absl::StatusOr<R>>;
  try {
    if constexpr (std::is_void_v<R>) {
      std::forward<Fn>(fn)();
      return Out(absl::OkStatus());
    } else {
      return Out(std::forward<Fn>(fn)());
    }
  } catch (const std::exception& e) {
    return Out(to_status(e));
  }
}

// Runs `fn`; a c10::Error or std::exception it throws becomes a status with `code`.
// Returns absl::Status for void functions, absl::StatusOr<T> for functions returning T.
template <typename Fn>
auto CallTorch(Fn&& fn, absl::StatusCode code = absl::StatusCode::kInternal) {
  return CallTorchWith(std::forward<Fn>(fn), [code](const std::exception& e) {
    if (const auto* torch_error = dynamic_cast<const c10::Error*>(&e)) {
      return StatusFromTorchError(*torch_error, code);
    }
    return absl::Status(code, e.what());
  });
}

// As CallTorch, for a `fn` that returns a status itself (absl::Status or absl::StatusOr<T>):
// one status of that type, what `fn` returned or what it threw. For callers that treat both
// alike; one that words a thrown error differently uses CallTorch.
template <typename Fn>
auto CallTorchFlat(Fn&& fn, absl::StatusCode code = absl::StatusCode::kInternal) {
  using R = std::invoke_result_t<Fn>;
  auto done = CallTorch(std::forward<Fn>(fn), code);
  return done.ok() ? R(*std::move(done)) : R(done.status());
}

// As CallTorch, the message "<context>: <TorchErrorLine of what was thrown>".
template <typename Fn>
auto CallTorch(absl::string_view context, absl::StatusCode code, Fn&& fn) {
  return CallTorchWith(std::forward<Fn>(fn), [context, code](const std::exception& e) {
    return absl::Status(code, absl::StrCat(context, ": ", TorchErrorLine(e)));
  });
}

}  // namespace kd

#endif  // LIBKD_BASE_TORCH_STATUS_H_
