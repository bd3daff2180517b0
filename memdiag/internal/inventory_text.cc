#include "memdiag/internal/inventory_text.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kd {
namespace memdiag_internal {

std::string DeviceName(c10::Device device) {
  return device.is_cpu() ? std::string("cpu") : device.str();
}

std::string DtypeName(c10::ScalarType type) {
  static const auto* names = [] {
    auto* table = new std::vector<std::string>();
    for (int i = 0; i < static_cast<int>(c10::ScalarType::NumOptions); ++i) {
      const auto t = static_cast<c10::ScalarType>(i);
      std::string name;
      try {
        name = absl::StrCat("torch.", std::string(c10::getDtypeNames(t).first));
      } catch (...) {
        name = absl::StrCat("torch.", c10::toString(t));
      }
      table->push_back(std::move(name));
    }
    return table;
  }();
  return (*names)[static_cast<int>(type)];
}

std::string Unowned(int64_t nbytes, const std::string& device, uint64_t seq,
                    const std::string& scope, int64_t step) {
  if (seq == 0) {  // not the tracking allocator's: a CUDA caching-allocator block
    return absl::StrCat("unowned: ", nbytes, " bytes on ", device, " that no root reaches");
  }
  std::string where =
      scope.empty() ? "outside any annotated scope" : absl::StrCat("in scope \"", scope, "\"");
  if (step >= 0) absl::StrAppend(&where, " step ", step);
  return absl::StrCat("unowned: ", nbytes, " bytes allocated ", where, " (#", seq, ")");
}

}  // namespace memdiag_internal
}  // namespace kd
