// image_folder against torchvision's ImageFolder + DataLoader on the same folder of JPEGs
// (ImageNet-like sizes, made once by the peer script with PIL) through the ImageNet samples'
// training transforms (RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize),
// images/s of one epoch with 1 and 2 workers (threads here, processes there; one intra-op thread
// each), in alternating rounds; prints each side's medians and libkd / torchvision.
//
//   bazel run -c opt //distill/data:image_folder_benchmark [-- --rounds=5 --images=256]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "distill/data/data_loader.h"
#include "distill/data/dataset.h"
#include "testing/peer_process.h"

ABSL_FLAG(int, rounds, 5, "alternating rounds per worker count");
ABSL_FLAG(int, images, 256, "JPEGs in the folder");
ABSL_FLAG(int, batch, 32, "batch size");

namespace kd {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main() {
  at::set_num_threads(1);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string root = std::string(tmp != nullptr ? tmp : "/tmp") + "/libkd_image_folder_bench";
  const int images = absl::GetFlag(FLAGS_images), batch = absl::GetFlag(FLAGS_batch);
  test::PeerProcess peer;
  if (!peer.Start({.script = "distill/data/peer_image_folder_timing.py"}) ||
      !peer.Ask(absl::StrCat("make ", root, " ", images)).has_value()) {
    std::fprintf(stderr, "the peer script did not answer (tools/install_deps.sh --peers)\n");
    return 1;
  }
  absl::StatusOr<std::shared_ptr<Dataset>> data =
      MakeDataset("image_folder", {{"root", root},
                                   {"random_resized_crop", int64_t{224}},
                                   {"horizontal_flip", true},
                                   {"mean", c10::List<double>({0.485, 0.456, 0.406})},
                                   {"std", c10::List<double>({0.229, 0.224, 0.225})}});
  if (!data.ok()) {
    std::fprintf(stderr, "%s\n", std::string(data.status().message()).c_str());
    return 1;
  }
  std::printf(
      "image_folder + RandomResizedCrop(224) + flip + Normalize, %d JPEGs, batch %d, "
      "one epoch, wall time, %d alternating rounds, medians:\n%-8s %14s %14s %10s\n",
      images, batch, absl::GetFlag(FLAGS_rounds), "workers", "libkd img/s", "torchvision img/s",
      "ratio");
  for (int workers : {1, 2}) {
    std::vector<double> ours, theirs;
    for (int round = 0; round < absl::GetFlag(FLAGS_rounds) + 1; ++round) {
      absl::StatusOr<DataLoader> loader = DataLoader::Create(
          *data, {.batch_size = batch, .shuffle = true, .seed = 1, .num_workers = workers});
      loader->SetEpoch(round);
      const auto start = std::chrono::steady_clock::now();
      int64_t seen = 0;
      BatchStream stream(*loader);
      while (!stream.done()) seen += stream.Next().samples.toTensor().size(0);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const auto peer_time = peer.Ask(absl::StrCat("time ", root, " ", workers, " ", batch));
      if (!peer_time || peer_time->size() != 2) return 1;
      if (round == 0) continue;  // warm-up: file cache, allocator
      ours.push_back(static_cast<double>(seen) / seconds);
      theirs.push_back((*peer_time)[1] / (*peer_time)[0]);
    }
    std::printf("%-8d %14.1f %14.1f %9.2fx\n", workers, Median(ours), Median(theirs),
                Median(ours) / Median(theirs));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace kd

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kd::Main();
}
