#include "memdiag/memory_history.h"

#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <utility>

#include <torch/csrc/jit/serialization/pickle.h>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "memdiag/internal/cuda_backend.h"

namespace kd {
namespace {

using c10::IValue;
using GenericDict = c10::impl::GenericDict;
using GenericList = c10::impl::GenericList;

GenericDict NewDict() { return GenericDict(c10::StringType::get(), c10::AnyType::get()); }
GenericList NewList() { return GenericList(c10::AnyType::get()); }

int64_t Address(const void* p) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(p)); }

// A return address as the viewer's frame: the function (demangled) and the
// object file.
IValue Frame(void* address, std::map<void*, IValue>& cache) {
  auto it = cache.find(address);
  if (it != cache.end()) return it->second;
  std::string name = "??", file = "??";
  Dl_info info;
  if (dladdr(address, &info) != 0) {
    if (info.dli_fname != nullptr) file = info.dli_fname;
    if (info.dli_sname != nullptr) {
      int status = 0;
      char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
      name = status == 0 && demangled != nullptr ? demangled : info.dli_sname;
      std::free(demangled);
    }
  }
  GenericDict frame = NewDict();
  frame.insert("filename", file);
  frame.insert("line", int64_t{0});
  frame.insert("name", name);
  return cache.emplace(address, frame).first->second;
}

GenericDict Event(const std::string& action, const Allocation& a, const GenericList& frames,
                  int64_t time_us) {
  GenericDict e = NewDict();
  e.insert("action", action);
  e.insert("addr", Address(a.data));
  e.insert("size", static_cast<int64_t>(a.nbytes));
  e.insert("stream", int64_t{0});
  e.insert("time_us", time_us);
  e.insert("frames", frames);
  return e;
}

}  // namespace

std::string MemorySnapshotPickle(const std::vector<AllocationEvent>& events,
                                 const std::vector<Allocation>& live) {
  std::map<void*, IValue> frame_cache;
  std::map<const void*, GenericList> frames_of;  // an allocation's frames, for its block
  GenericList trace = NewList();
  for (const AllocationEvent& event : events) {
    GenericList frames = NewList();
    for (void* address : event.frames) frames.push_back(Frame(address, frame_cache));
    if (event.action == AllocationEvent::Action::kAlloc) {
      trace.push_back(Event("alloc", event.allocation, frames, event.time_us));
      frames_of.insert_or_assign(event.allocation.data, frames);
      if (!event.allocation.scope.empty() || event.allocation.step >= 0) {
        GenericDict note = Event("annotate", event.allocation, frames, event.time_us);
        note.insert("user_metadata",
                    absl::StrCat(event.allocation.scope, " step ", event.allocation.step));
        trace.push_back(note);
      }
    } else {
      // A CPU free completes at once.
      trace.push_back(Event("free_requested", event.allocation, frames, event.time_us));
      trace.push_back(Event("free_completed", event.allocation, frames, event.time_us));
    }
  }
  GenericList segments = NewList();
  for (const Allocation& a : live) {
    auto known = frames_of.find(a.data);
    const GenericList frames = known != frames_of.end() ? known->second : NewList();
    GenericDict block = NewDict();
    block.insert("address", Address(a.data));
    block.insert("size", static_cast<int64_t>(a.nbytes));
    block.insert("requested_size", static_cast<int64_t>(a.nbytes));
    block.insert("state", std::string("active_allocated"));
    block.insert("frames", frames);
    GenericList blocks = NewList();
    blocks.push_back(block);
    GenericDict segment = NewDict();
    segment.insert("device", int64_t{0});
    segment.insert("address", Address(a.data));
    segment.insert("total_size", static_cast<int64_t>(a.nbytes));
    segment.insert("allocated_size", static_cast<int64_t>(a.nbytes));
    segment.insert("active_size", static_cast<int64_t>(a.nbytes));
    segment.insert("requested_size", static_cast<int64_t>(a.nbytes));
    segment.insert("stream", int64_t{0});
    segment.insert("segment_type", std::string(a.nbytes >= (1 << 20) ? "large" : "small"));
    segment.insert("segment_pool_id", c10::ivalue::Tuple::create({int64_t{0}, int64_t{0}}));
    segment.insert("is_expandable", false);
    segment.insert("blocks", blocks);
    segments.push_back(segment);
  }
  GenericList device_traces = NewList();
  device_traces.push_back(trace);
  GenericDict snapshot = NewDict();
  snapshot.insert("segments", segments);
  snapshot.insert("device_traces", device_traces);
  GenericDict settings = NewDict();
  settings.insert("device", std::string("cpu"));
  settings.insert("recorded_by", std::string("libkd memdiag"));
  snapshot.insert("allocator_settings", settings);
  const std::vector<char> bytes = torch::jit::pickle(snapshot);
  return std::string(bytes.begin(), bytes.end());
}

RecordMemoryHistory::RecordMemoryHistory(std::string snapshot_path, size_t max_entries,
                                         int max_frames, c10::Device device)
    : path_(std::move(snapshot_path)), cuda_(device.is_cuda()) {
  if (!cuda_) {
    TrackingAllocator::Install().StartHistory(max_entries, max_frames);
    return;
  }
  memdiag_internal::CudaMemoryBackend* cuda = memdiag_internal::GetCudaMemoryBackend();
  if (cuda == nullptr) {
    unavailable_ = memdiag_internal::kNoCudaMemorySupport;
  } else if (!cuda->Available()) {
    unavailable_ = "CUDA is not available";
  } else {
    cuda->StartHistory(max_entries);
  }
}

RecordMemoryHistory::~RecordMemoryHistory() {
  if (finished_) return;
  if (absl::Status done = Finish(); !done.ok()) {
    std::cerr << "RecordMemoryHistory: " << done.message() << std::endl;
  }
}

absl::Status RecordMemoryHistory::Finish() {
  if (finished_) return absl::OkStatus();
  finished_ = true;
  std::string bytes;
  if (!cuda_) {
    TrackingAllocator& tracker = TrackingAllocator::Install();
    const std::vector<AllocationEvent> events = tracker.StopHistory();
    bytes = MemorySnapshotPickle(events, tracker.LiveAllocations());
  } else if (!unavailable_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA memory history written to ", path_, ": ", unavailable_));
  } else {
    memdiag_internal::CudaMemoryBackend* cuda = memdiag_internal::GetCudaMemoryBackend();
    bytes = cuda->SnapshotPickled();
    cuda->StopHistory();
  }
  const std::filesystem::path path(path_);
  std::error_code error;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), error);
  return WriteFileAtomically(path_, bytes);
}

}  // namespace kd
