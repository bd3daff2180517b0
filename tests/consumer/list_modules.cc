// Lists the module paths of a TorchScript file through @libkd//hooks:torchscript_model.
#include <iostream>

#include "hooks/torchscript_model.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: list_modules MODEL.pt\n";
    return 2;
  }
  auto model = kd::LoadTorchScriptModel(argv[1]);
  if (!model.ok()) {
    std::cerr << "list_modules: " << model.status().message() << "\n";
    return 2;
  }
  for (const kd::ModuleInfo& m : (*model)->NamedModules()) {
    std::cout << (m.path.empty() ? "(root)" : m.path) << " " << m.type << "\n";
  }
  return 0;
}
