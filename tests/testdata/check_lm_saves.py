"""Checks that libkd's saved causal LMs open in transformers with the fixture's logits.

  TEST_TMPDIR=/tmp/kdsave bazel-bin/distill/models/causal_lm_test \
      --gtest_filter='*HuggingFaceFolders*'      # (from its runfiles folder) writes saved_<name>
  ~/.cache/libkd/venv/bin/python tests/testdata/check_lm_saves.py /tmp/kdsave

For each of llama, qwen2 and gpt2: AutoModelForCausalLM.from_pretrained(DIR/saved_<name>) and
the largest difference of its logits from those transformers recorded (make_lm_fixtures.py).
Exits 1 on a difference above 1e-5 of the logits' scale.
"""
import os
import sys

import torch
import transformers

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lm")


def main(folder):
    worst = 0.0
    for name in ("llama", "qwen2", "gpt2"):
        model = transformers.AutoModelForCausalLM.from_pretrained(
            os.path.join(folder, "saved_" + name), attn_implementation="eager").eval()
        expected = torch.load(os.path.join(HERE, name, "expected.pt"))
        with torch.no_grad():
            logits = model(expected["input_ids"]).logits
        diff = (logits - expected["logits"]).abs().max().item()
        scale = expected["logits"].abs().max().item()
        worst = max(worst, diff / scale)
        print(f"{name}: {type(model).__name__}, max |logits - fixture| = {diff:.3g}")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
