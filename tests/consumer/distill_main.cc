// This repository's own distill program: libkd's main with this repository's plugins linked in.
#include "tools/distill_main.h"

int main(int argc, char** argv) { return kd::DistillMain(argc, argv); }
