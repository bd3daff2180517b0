// The `distill` program as a library: a repository with its own plugins (losses, models,
// datasets registered with KD_REGISTER in alwayslink libraries) links them next to this target
// and calls DistillMain from its own main:
//
//   # BUILD
//   cc_binary(name = "distill", srcs = ["main.cc"],
//             deps = [":my_losses", "@libkd//tools:distill_main"])
//   // main.cc
//   int main(int argc, char** argv) { return kd::DistillMain(argc, argv); }
//
// Usage: distill [--config=FILE] [--run_dir=DIR] [--resume] [--seed=N] [--device=cpu|cuda:N]
// Without --config it runs the default job on Fashion-MNIST: a teacher CNN, the student alone
// and the student distilled from the teacher, then prints their test accuracies and times.
#ifndef LIBKD_TOOLS_DISTILL_MAIN_H_
#define LIBKD_TOOLS_DISTILL_MAIN_H_

namespace kd {

// Parses the flags and runs; returns the exit code (0 done, 1 the run failed, 2 bad input).
int DistillMain(int argc, char** argv);

}  // namespace kd

#endif  // LIBKD_TOOLS_DISTILL_MAIN_H_
