// The hand-written libtorch loop box_benchmark times a DistillationBox against: the box
// benchmark's pair (fashion_cnn, widths 16 and 4), synthetic batches, the teacher under
// no-grad, the student's forward, torchdistill's KD loss (T 4, alpha 0.5), backward, an SGD
// step (lr 0.05, momentum 0.9).
#ifndef LIBKD_DISTILL_BOXES_INTERNAL_HAND_KD_LOOP_H_
#define LIBKD_DISTILL_BOXES_INTERNAL_HAND_KD_LOOP_H_

#include <string>

namespace kd {

// One epoch of `samples` synthetic images in batches of `batch_size`; returns its seconds.
// With `teacher_file`, the teacher is that TorchScript file (frozen and optimized for inference
// outside the timing if `optimize_teacher`) instead of the native one.
double HandKdEpoch(int samples, int batch_size, const std::string& teacher_file,
                   bool optimize_teacher);

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_INTERNAL_HAND_KD_LOOP_H_
