// libkd's own memory roots for memdiag (memdiag/inventory.h): what a box holds, registered so
// that inventories name a storage's owner by path.
//
//   kd::MemoryRoots roots;
//   kd::AddModelRoots(roots, "student", student);        // student.fc.weight, .grad, buffers
//   kd::AddOptimizerRoots(roots, "optimizer", optimizer); // optimizer.state[3].momentum_buffer
//   kd::AddIoDictRoots(roots, "teacher_io", &teacher_io); // teacher_io[layer2].output
#ifndef LIBKD_DISTILL_BOXES_MEMORY_ROOTS_H_
#define LIBKD_DISTILL_BOXES_MEMORY_ROOTS_H_

#include <string>

#include "hooks/io_dict.h"
#include "hooks/model.h"
#include "memdiag/inventory.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace kd {

// The model's parameters (and their gradients, "<path>.grad") and buffers, as "<name>.<path>".
// `model` must outlive the root.
void AddModelRoots(MemoryRoots& roots, const std::string& name, const Model& model);

// The optimizer's per-parameter state (SGD's momentum buffers, Adam's moments) as
// "<name>.state[<parameter index>].<field>". `optimizer` must outlive the root.
void AddOptimizerRoots(MemoryRoots& roots, const std::string& name,
                       const torch::optim::Optimizer& optimizer);

// The values of an I/O dict, tensors in lists and tuples too, as "<name>[<path>].<io type>" (and
// "[i]" for list elements). `io` must outlive the root.
void AddIoDictRoots(MemoryRoots& roots, const std::string& name, const IoDict* io);

}  // namespace kd

#endif  // LIBKD_DISTILL_BOXES_MEMORY_ROOTS_H_
