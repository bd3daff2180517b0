// Allocation history in the format of PyTorch's memory viewer
// (pytorch.org/memory_viz, torch.cuda._memory_viz): silverspoon-kd's
// record_cuda_memory_history, for CPU memory.
//
//   {
//     kd::RecordMemoryHistory history("/tmp/eval.pickle");
//     for (...) {
//       kd::ScopedMemoryAnnotation scope("eval", step);
//       model.Forward(...);
//     }
//   }  // or history.Finish() for its status
//
// While alive, every allocation and free of the tracking allocator (installed
// if it is not) is recorded with its C++ frames; the snapshot written at the
// end has "segments" (the allocations live then, one block each) and
// "device_traces" (alloc / free_requested / free_completed events, and an
// "annotate" event naming each allocation's scope and step). It is a pickle of
// plain dicts and lists, written by libtorch's own pickler as
// torch.cuda.memory._snapshot()'s is, so torch.cuda._memory_viz (trace_plot,
// segment_plot, trace, segsum) reads it.
//
// CUDA memory is libtorch's caching allocator's business
// (torch.cuda.memory._record_memory_history); this recorder sees CPU tensors
// only.
#ifndef LIBKD_MEMDIAG_MEMORY_HISTORY_H_
#define LIBKD_MEMDIAG_MEMORY_HISTORY_H_

#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "absl/status/status.h"
#include "memdiag/tracking_allocator.h"

namespace kd {

class RecordMemoryHistory {
 public:
  // On the CPU, libkd's tracking allocator records (with up to `max_frames` C++ frames an
  // event); on a CUDA device, libtorch's caching allocator does (_record_memory_history with
  // C++ stacks), which needs //memdiag:cuda_memory linked and a GPU: without them Finish says
  // so and writes nothing (silverspoon-kd warns and does nothing).
  explicit RecordMemoryHistory(std::string snapshot_path, size_t max_entries = 100000,
                               int max_frames = 16, c10::Device device = c10::Device(c10::kCPU));
  // Writes the snapshot if Finish was not called (an error goes to stderr).
  ~RecordMemoryHistory();
  RecordMemoryHistory(const RecordMemoryHistory&) = delete;
  RecordMemoryHistory& operator=(const RecordMemoryHistory&) = delete;

  // Stops recording and writes the snapshot (its folder created); once.
  absl::Status Finish();

 private:
  std::string path_;
  bool cuda_ = false;
  std::string unavailable_;  // why a CUDA history records nothing ("" if it records)
  bool finished_ = false;
};

// The snapshot of `events` and the live allocations `live` as the viewer's
// pickle bytes.
std::string MemorySnapshotPickle(const std::vector<AllocationEvent>& events,
                                 const std::vector<Allocation>& live);

}  // namespace kd

#endif  // LIBKD_MEMDIAG_MEMORY_HISTORY_H_
