// bazel run //tools:distill -- [--config=FILE] [--run_dir=DIR] [--resume] [--seed=N]
//                              [--device=cpu|cuda:N]
// Without --config: the Fashion-MNIST job (tools/distill_main.h).
#include "tools/distill_main.h"

int main(int argc, char** argv) { return kd::DistillMain(argc, argv); }
