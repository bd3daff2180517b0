// The LM job, `//tools:distill -- --job=lm` (docs/lm_job.md): a corpus tokenized into
// <root>/data (tools/token_corpus.h: a BPE of 2048 pieces on its train split), then the
// configs of kLmJobParts run in turn in <root>/<part> (the KD configs take the teacher's
// model.pt), each model saved as a Hugging Face folder (<root>/<part>/hf) and sampled from fixed
// prompts; the table (parameters, test perplexity, token accuracy, time) and the samples go
// to stdout.
#ifndef LIBKD_TOOLS_LM_JOB_H_
#define LIBKD_TOOLS_LM_JOB_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "distill/config/distill_config.pb.h"
#include "tools/run_job.h"

namespace kd {

// The job's parts, in the order they run. Their configs name the token files
// "runs/lm/data/{train,val,test}.bin"; the job points them at <root>/data.
inline constexpr JobPart kLmJobParts[] = {
    {"teacher", "fortunes_teacher.pbtxt"},         {"student", "fortunes_student.pbtxt"},
    {"student_kd", "fortunes_student_kd.pbtxt"},   {"student_gkd", "fortunes_student_gkd.pbtxt"},
    {"student_hkd", "fortunes_student_hkd.pbtxt"}, {"student_bkd", "fortunes_student_bkd.pbtxt"}};

struct LmJobOptions {
  std::string root;        // the job's folder (resolved)
  std::string corpus;      // fortune-mod files or one text file (resolved)
  bool overwrite = false;  // tokenize again even if <root>/data holds the token files
  // How each part runs in its folder (RunJob's options: resume, seed, device, ...).
  std::function<JobOptions(std::string run_dir)> job_options;
};

// Runs the job on `configs`, kLmJobParts' configs loaded and checked, in that order. The corpus
// is tokenized unless <root>/data holds its meta.json (a resumed job reuses it) or `overwrite`.
// Errors name the part that failed ("student_kd: ..."); their codes are the tool's exit codes
// (ExitCodeOf). A corpus that cannot be read leaves no folder the job made.
absl::Status RunLmJob(std::vector<DistillConfig> configs, const LmJobOptions& options);

}  // namespace kd

#endif  // LIBKD_TOOLS_LM_JOB_H_
