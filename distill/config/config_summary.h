// A paragraph describing the run a config describes, for `validate_config` and logs.
//
//   std::cout << kd::SummarizeConfig(loaded.config) << "\n";
//   // Distills the teacher (TorchScript teacher.pt) into the student (native model "cnn") in
//   // 1 stage of 10 epochs in all. Stage "stage0": ...
#ifndef LIBKD_DISTILL_CONFIG_CONFIG_SUMMARY_H_
#define LIBKD_DISTILL_CONFIG_CONFIG_SUMMARY_H_

#include <string>

#include "distill/config/distill_config.pb.h"

namespace kd {

// One paragraph describing the run a valid `config` describes: models, stages with epochs,
// data, loss terms, optimizer and scheduler, evaluation, run folder and device.
std::string SummarizeConfig(const DistillConfig& config);

}  // namespace kd

#endif  // LIBKD_DISTILL_CONFIG_CONFIG_SUMMARY_H_
