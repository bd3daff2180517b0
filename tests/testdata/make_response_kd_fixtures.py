"""Reference values of silverspoon-kd's ResponseBasedDistiller and of TRL's generalized JSD on
a tiny Llama pair, for distill/boxes/box_response_kd_test.cc (nothing is downloaded).

  ~/.cache/libkd/venv/bin/python tests/testdata/make_response_kd_fixtures.py

The teacher is tests/testdata/lm/llama (make_lm_fixtures.py); the student, a smaller Llama of
the same vocabulary made here at random init, is written to tests/testdata/lm/kd_student/
(save_pretrained's config.json and model.safetensors). tests/testdata/lm/response_kd.pt is a
torch.save'd dict:
  "input_ids"                 int64 [2, 12], the batch (labels = input_ids, no padding)
  "loss.<case>"               ResponseBasedDistiller.compute_loss(student, batch): the value
  "grad.<case>.<param>"       its gradient for every student parameter
with <case> "<soft>_a<alpha>[_mag]": soft "kl_div" (temperature 2) or "jsd" (temperature 2,
beta 0.3), alpha 0, 0.5 or 1, "_mag" with magnitude_aware_weighting;
  "gkd.student", "gkd.teacher"  logits [2, 12, 64] (student, teacher) on input_ids
  "gkd.labels"                  the labels with the first 5 positions of each row -100 (a prompt)
  "gkd.beta<b>"                 TRL's generalized_jsd_loss(student_logits[:, :-1],
                                teacher_logits[:, :-1], labels[:, 1:], beta=b, temperature=2),
                                b in 0.1, 0.5, 0.9: its formula, written out below
Float32, one thread, the CPU.
"""
import math
import os
import tempfile

import torch
import torch.nn.functional as F
import transformers
from silverspoon_kd import ResponseBasedDistiller, TrainingArguments

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lm")


def student_model():
    torch.manual_seed(11)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                      num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=1, max_position_embeddings=64,
                                      initializer_range=0.3)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    folder = os.path.join(HERE, "kd_student")
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder)
    extra = os.path.join(folder, "generation_config.json")
    if os.path.exists(extra):
        os.remove(extra)
    return transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager")


def teacher_model():
    return transformers.AutoModelForCausalLM.from_pretrained(os.path.join(HERE, "llama"),
                                                             attn_implementation="eager")


def response_kd(student, teacher, batch, soft, soft_kwargs, alpha, magnitude):
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, alpha=alpha,
                                 magnitude_aware_weighting=magnitude, report_to=[], max_steps=1,
                                 use_cpu=True)
        distiller = ResponseBasedDistiller(student_model=student, teacher_model=teacher,
                                           args=args, soft_loss_fn=soft,
                                           soft_loss_fn_kwargs=soft_kwargs)
        student.train()
        teacher.eval()
        student.zero_grad()
        loss = distiller.compute_loss(student, dict(batch))
        loss.backward()
        grads = {name: p.grad.detach().clone() for name, p in student.named_parameters()}
        student.zero_grad()
        return loss.detach(), grads


# TRL's GKDTrainer.generalized_jsd_loss (trl/trainer/gkd_trainer.py), written out: beta 0 is
# the forward KL(teacher || student), 1 the reverse; between, the mixture m = beta p_t +
# (1 - beta) p_s and beta KL(p_t || m) + (1 - beta) KL(p_s || m); temperature on both logits;
# the sum over the tokens whose label is not -100 divided by their count ("batchmean").
def generalized_jsd(student_logits, teacher_logits, labels, beta, temperature):
    s = F.log_softmax(student_logits / temperature, dim=-1)
    t = F.log_softmax(teacher_logits / temperature, dim=-1)
    if beta == 0:
        jsd = F.kl_div(s, t, reduction="none", log_target=True)
    elif beta == 1:
        jsd = F.kl_div(t, s, reduction="none", log_target=True)
    else:
        b = torch.tensor(beta, dtype=s.dtype)
        m = torch.logsumexp(torch.stack([s + torch.log(1 - b), t + torch.log(b)]), dim=0)
        kl_teacher = F.kl_div(m, t, reduction="none", log_target=True)
        kl_student = F.kl_div(m, s, reduction="none", log_target=True)
        jsd = beta * kl_teacher + (1 - beta) * kl_student
    mask = labels != -100
    jsd = jsd[mask]
    return jsd.sum() / mask.sum()


def main():
    torch.set_num_threads(1)
    student, teacher = student_model(), teacher_model()
    g = torch.Generator().manual_seed(5)
    input_ids = torch.randint(0, 64, (2, 12), generator=g)
    batch = {"input_ids": input_ids, "labels": input_ids.clone()}
    out = {"input_ids": input_ids}
    softs = {"kl_div": ("kl_div", {"temperature": 2.0}),
             "jsd": ("jsd", {"temperature": 2.0, "beta": 0.3})}
    for name, (soft, kwargs) in softs.items():
        for alpha in (0.0, 0.5, 1.0):
            for magnitude in (False, True):
                if magnitude and alpha == 0.0:
                    continue  # silverspoon-kd weighs by magnitude only where it combines two
                case = f"{name}_a{alpha:g}" + ("_mag" if magnitude else "")
                loss, grads = response_kd(student, teacher, batch, soft, kwargs, alpha,
                                          magnitude)
                out[f"loss.{case}"] = loss
                for param, grad in grads.items():
                    out[f"grad.{case}.{param}"] = grad
    with torch.no_grad():
        student.eval()
        s = student(input_ids).logits
        t = teacher(input_ids).logits
    labels = input_ids.clone()
    labels[:, :5] = -100
    out["gkd.student"], out["gkd.teacher"], out["gkd.labels"] = s, t, labels
    for beta in (0.1, 0.5, 0.9):
        out[f"gkd.beta{beta:g}"] = generalized_jsd(s[:, :-1], t[:, :-1], labels[:, 1:], beta,
                                                   2.0)
    torch.save(out, os.path.join(HERE, "response_kd.pt"))
    print("wrote", len(out), "entries; losses:",
          {k: round(v.item(), 6) for k, v in out.items() if k.startswith("loss.")})


if __name__ == "__main__":
    main()
