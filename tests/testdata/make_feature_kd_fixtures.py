"""Reference values of silverspoon-kd's HolisticDistiller and BlockwiseDistiller: one real
training step each (its Trainer loop, max_steps=1), for distill/boxes/box_feature_kd_test.cc.
Nothing is downloaded.

  ~/.cache/libkd/venv/bin/python tests/testdata/make_feature_kd_fixtures.py

Models: the LM teacher is tests/testdata/lm/llama (make_lm_fixtures.py: hidden 32, 2 layers);
the holistic LM student is lm/kd_student (make_response_kd_fixtures.py: hidden 16, 1 layer);
the blockwise LM student, made here, is lm/bkd_student (hidden 32, 2 narrower layers). The CNNs
are made here, feature_kd/{cnn_teacher,cnn_student}.pt their TorchScript (silverspoon-kd runs the
eager modules, whose hooks it needs). Each case's step
starts from torch.manual_seed(7) (a callback at the step's beginning): the projectors
auto_projector makes in the step draw from there. feature_kd/<case>.pt holds:
  "input"                 the batch's samples (int64 [2, 12] token ids, or float [2, 3, 8, 8])
  "loss"                  the step's loss (the Trainer's training_loss)
  "init.<alignment>.<projector>.<param>"   each inferred projector's initial values
  "after.<param>"         the student's parameters after the step
  "after.<alignment>.<projector>.<param>"  the projectors' after the step
Cases: holistic_lm (alignments model.layers.1 <- model.layers.0, mse; model.norm <- model.norm,
cosine, loss_weight 2; Linear projectors inferred), holistic_lm_alpha (the same, alpha 0.5,
magnitude-aware), holistic_cnn (layer1, layer2: Conv2d projectors), blockwise_lm (decoder layer
i <- i, no projector), blockwise_cnn (layer1: an output projector; layer2: input and output
projectors). AdamW lr 0.01, no weight decay, the linear schedule (its first step at lr), the
Trainer's max_grad_norm 1.0. Float32, one thread, the CPU.
"""
import os
import tempfile

import torch
import torch.nn as nn
import transformers
from silverspoon_kd import (Alignment, BlockwiseDistiller, HolisticDistiller,
                            TrainingArguments)

HERE = os.path.dirname(os.path.abspath(__file__))
LM = os.path.join(HERE, "lm")
OUT = os.path.join(HERE, "feature_kd")


def load(folder):
    return transformers.AutoModelForCausalLM.from_pretrained(os.path.join(LM, folder),
                                                             attn_implementation="eager")


def blockwise_student():
    torch.manual_seed(13)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=24,
                                      num_hidden_layers=2, num_attention_heads=2, head_dim=8,
                                      num_key_value_heads=1, max_position_embeddings=64,
                                      initializer_range=0.3)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    folder = os.path.join(LM, "bkd_student")
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder)
    extra = os.path.join(folder, "generation_config.json")
    if os.path.exists(extra):
        os.remove(extra)
    return load("bkd_student")


class Cnn(nn.Module):
    def __init__(self, c1, c2):
        super().__init__()
        self.layer1 = nn.Sequential(nn.Conv2d(3, c1, 3, padding=1), nn.ReLU())
        self.layer2 = nn.Sequential(nn.Conv2d(c1, c2, 3, stride=2, padding=1), nn.ReLU())
        self.fc = nn.Linear(c2, 10)

    def forward(self, x):
        return self.fc(self.layer2(self.layer1(x)).mean((2, 3)))


def cnns():
    torch.manual_seed(17)
    teacher, student = Cnn(16, 32), Cnn(8, 16)
    os.makedirs(OUT, exist_ok=True)
    for name, model in (("cnn_teacher", teacher), ("cnn_student", student)):
        path = os.path.join(OUT, name + ".pt")
        torch.jit.script(model).save(path)
    return teacher, student


class Seed(transformers.TrainerCallback):
    def on_step_begin(self, args, state, control, **kwargs):
        torch.manual_seed(7)


class Rows(torch.utils.data.Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def step(kind, teacher, student, alignments, rows, **extra):
    inits = {}
    original = Alignment._try_infer_output_projector, Alignment._try_infer_input_projector

    def keep(role, fn):
        def wrapped(self, *a, **k):
            made = fn(self, *a, **k)
            if made is not None:
                for n, p in made.named_parameters():
                    inits[f"init.{self.student_module_name}.{role}.{n}"] = p.detach().clone()
            return made
        return wrapped

    Alignment._try_infer_output_projector = keep("output_projector", original[0])
    Alignment._try_infer_input_projector = keep("input_projector", original[1])
    try:
        with tempfile.TemporaryDirectory() as out:
            args = TrainingArguments(output_dir=out, report_to=[], max_steps=1, use_cpu=True,
                                     per_device_train_batch_size=2, learning_rate=0.01,
                                     optim="adamw_torch", save_strategy="no", logging_steps=1,
                                     seed=7, **extra)
            common = dict(teacher_model=teacher, alignments=alignments, args=args,
                          train_dataset=Rows(rows), callbacks=[Seed()])
            if kind == "holistic":
                distiller = HolisticDistiller(student_model=student, **common)
            else:
                distiller = BlockwiseDistiller(**common)
            result = distiller.train()
    finally:
        Alignment._try_infer_output_projector, Alignment._try_infer_input_projector = original
    out = dict(inits)
    out["loss"] = torch.tensor(result.training_loss)
    for n, p in student.named_parameters():
        out[f"after.{n}"] = p.detach().clone()
    for a in alignments:
        for role in ("input_projector", "output_projector"):
            proj = getattr(a, role)
            if proj is not None:
                for n, p in proj.named_parameters():
                    out[f"after.{a.student_module_name}.{role}.{n}"] = p.detach().clone()
    return out


def align(teacher, student, t, s, **kw):
    return Alignment(teacher_block=teacher.get_submodule(t), student_block=student.get_submodule(s),
                     teacher_module_name=t, student_module_name=s, auto_projector=True, **kw)


def save(case, data, input):
    data["input"] = input
    torch.save(data, os.path.join(OUT, case + ".pt"))
    print(case, "loss", round(data["loss"].item(), 6), "entries", len(data))


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 64, (2, 12), generator=g)
    lm_rows = [{"input_ids": ids[i], "labels": ids[i]} for i in range(2)]
    for case, extra in (("holistic_lm", {}),
                        ("holistic_lm_alpha", {"alpha": 0.5, "magnitude_aware_weighting": True})):
        teacher, student = load("llama"), load("kd_student")
        alignments = [align(teacher, student, "model.layers.1", "model.layers.0"),
                      align(teacher, student, "model.norm", "model.norm",
                            loss_function="cosine", loss_weight=2.0)]
        rows = lm_rows if extra else [{"input_ids": ids[i]} for i in range(2)]
        save(case, step("holistic", teacher, student, alignments, rows, **extra), ids)

    images = torch.randn(2, 3, 8, 8, generator=g)
    image_rows = [{"x": images[i]} for i in range(2)]
    teacher, student = cnns()
    alignments = [align(teacher, student, "layer1", "layer1"),
                  align(teacher, student, "layer2", "layer2")]
    save("holistic_cnn", step("holistic", teacher, student, alignments, image_rows), images)

    teacher, student = load("llama"), blockwise_student()
    # Without a KV cache in the teacher's forward (silverspoon-kd drops the captured cache only
    # after its auto-projector probe, which the cache of another width breaks).
    teacher.config.use_cache = False
    alignments = [align(teacher, student, f"model.layers.{i}", f"model.layers.{i}")
                  for i in range(2)]
    save("blockwise_lm",
         step("blockwise", teacher, student, alignments, [{"input_ids": ids[i]} for i in range(2)]),
         ids)

    teacher, student = cnns()
    alignments = [align(teacher, student, "layer1", "layer1"),
                  align(teacher, student, "layer2", "layer2")]
    save("blockwise_cnn", step("blockwise", teacher, student, alignments, image_rows), images)


if __name__ == "__main__":
    main()
