"""What silverspoon-kd's own create_alignments makes of module patterns, for
distill/config/create_alignments_test.cc: the pairs (teacher path, student path) it returns, or
that it raises, on the tiny Llamas of tests/testdata/lm (teacher llama: 2 layers; students
kd_student: 1 layer, bkd_student: 2 layers). Writes tests/testdata/create_alignments.json:
  "paths": {model: its named_modules() paths in order}
  "cases": [{"student", "modules" (a list) or "module_map" (pairs, in order),
             "pairs": [[teacher, student], ...] or "raises": true}]
Nothing is downloaded.

  ~/.cache/libkd/venv/bin/python tests/testdata/make_create_alignments_fixtures.py
"""
import json
import os

import transformers
from silverspoon_kd import create_alignments

HERE = os.path.dirname(os.path.abspath(__file__))
LM = os.path.join(HERE, "lm")

CASES = [
    ("bkd_student", {"modules": [r"model\.layers\.\d+$"]}),
    ("bkd_student", {"modules": [r"layers\.0"]}),  # unanchored: the layer and its submodules
    ("kd_student", {"modules": [r"model\.norm$", r"lm_head", r"embed_tokens"]}),
    ("kd_student", {"modules": [r"model\.layers\.\d+$"]}),  # layer 1: no student module
    ("kd_student", {"modules": [r"no_such_module"]}),
    ("bkd_student", {"module_map": [[r"model\.layers\.(\d+)$", r"model.layers.\1"]]}),
    ("bkd_student", {"module_map": [[r"layers\.(\d+)\.(mlp|self_attn)$", r"layers.\1.\2"],
                                    [r"^model\.norm$", r"model\.norm"]]}),
    ("kd_student", {"module_map": [[r"model\.layers\.\d+$", r"model\.layers\.0$"]]}),
    ("kd_student", {"module_map": [[r"model\.layers\.(\d+)$", r"model.layers.\1"]]}),
    ("kd_student", {"module_map": [[r"(\w+)\.(norm)$", r"\g<1>.\2"]]}),  # \g<1> and \2
]


def main():
    models = {name: transformers.AutoModelForCausalLM.from_pretrained(os.path.join(LM, name))
              for name in ("llama", "kd_student", "bkd_student")}
    out = {"paths": {name: [n for n, _ in m.named_modules()] for name, m in models.items()},
           "cases": []}
    for student, spec in CASES:
        modules = spec.get("modules") or dict(spec["module_map"])
        case = {"student": student, **spec}
        try:
            made = create_alignments(models["llama"], models[student], modules)
            case["pairs"] = [[a.teacher_module_name, a.student_module_name] for a in made]
        except ValueError:
            case["raises"] = True
        out["cases"].append(case)
    with open(os.path.join(HERE, "create_alignments.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
