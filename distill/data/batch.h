// One batch from a data loader, as torchdistill's boxes pass it to process functions:
// (sample_batch, targets, supp_dict).
#ifndef LIBKD_DISTILL_DATA_BATCH_H_
#define LIBKD_DISTILL_DATA_BATCH_H_

#include <ATen/core/ivalue.h>

namespace kd {

struct Batch {
  // sample_batch: a tensor, a tuple or list, or a dict with string keys.
  c10::IValue samples;
  // The targets; None when the dataset has none.
  c10::IValue targets;
  // supp_dict: a dict with string keys (sample indices, cached teacher outputs), or None.
  c10::IValue supp;
};

}  // namespace kd

#endif  // LIBKD_DISTILL_DATA_BATCH_H_
