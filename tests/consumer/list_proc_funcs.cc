// Builds this repository's own process function by key through @libkd//distill/procs:proc_func,
// and lists the pre-forward process keys libkd's registry knows.
#include <iostream>

#include "distill/procs/proc_func.h"

int main() {
  auto proc = kd::BuildProcFunc<kd::PreForwardProc>("consumer_halve_samples");
  if (!proc.ok()) {
    std::cerr << "list_proc_funcs: " << proc.status().message() << "\n";
    return 2;
  }
  for (const std::string& key : kd::ProcRegistry<kd::PreForwardProc>().Keys()) {
    std::cout << key << "\n";
  }
  return 0;
}
