"""The Python side of //distill/boxes:lm_kd_benchmark: silverspoon-kd's ResponseBasedDistiller
and a plain PyTorch loop of the same kernels, on the same tiny Llama pair and token windows as
libkd's box, timed here and served over a pipe (one request a line on stdin, one answer a line
on stdout; what the libraries print goes to the log file LOG, or else to stderr).

  models DIR
      makes the teacher (4 layers x hidden 256) and the student (2 x 128), vocabulary 4096,
      random init (seeded), with transformers' LlamaConfig + AutoModelForCausalLM.from_config
      and save_pretrained's them to DIR/teacher and DIR/student (config.json +
      model.safetensors), which libkd's "hf_causal_lm" reads: both sides start from the same
      weights. -> "models TEACHER_PARAMS STUDENT_PARAMS"
  losses TOKENS BATCH BLOCK STEPS
      fresh models from DIR; the total loss of each of the first STEPS training steps of
      silverspoon-kd's distiller, then of the plain loop -> "losses S_1 .. S_n P_1 .. P_n"
  silverspoon TOKENS BATCH BLOCK STEPS
      one round of STEPS steps of the distiller's own Trainer loop (distiller.train() over the
      token file's windows), timed from each step's on_step_begin to its on_step_end (the
      Trainer's training_step: silverspoon-kd's forwards, loss and backward; the grad-norm
      computation the Trainer logs, the optimizer step, zero_grad and callbacks; not the
      fetching of the batch) -> "silverspoon WALL_SECONDS CPU_SECONDS", sums over the steps
  plain TOKENS BATCH BLOCK STEPS
      the same round by a plain loop: teacher forward under no_grad, student forward with
      labels (its outputs.loss is the hard loss), the same KL as silverspoon-kd's "kl_div",
      backward, AdamW step -> "plain WALL_SECONDS CPU_SECONDS"

TOKENS is a flat file of little-endian uint16 ids written by the benchmark, cut into windows of
BLOCK tokens in order (libkd's "token_file", flat mode); batches are BATCH consecutive windows,
never shuffled, labels = input_ids (the models shift them). The models and loops of a TOKENS
file are made at its first request and kept, so later rounds continue training, as libkd's do.

Both Python columns: the distiller's args alpha 0.5, soft loss "kl_div" at temperature 2 (total
= 0.5 soft + 0.5 the student's own loss); AdamW lr 1e-3, betas (0.9, 0.999), eps 1e-8, no weight
decay, torch.optim.AdamW's per-parameter implementation (the Trainer's optim "adamw_torch"; its
default for torch >= 2.8 is the fused kernel, which libkd's torch::optim::AdamW is not); constant
learning rate; no gradient clipping (max_grad_norm 0). transformers' default attention, sdpa.
Float32 on the CPU; the benchmark sets the threads and LD_PRELOADs tcmalloc.

  python peer_lm_kd_timing.py THREADS [LOG]    (run by //distill/boxes:lm_kd_benchmark)

peer_feature_kd_timing.py (//distill/boxes:feature_kd_benchmark) reuses the models, windows,
step timer, Trainer arguments and request loop defined here.
"""
import logging
import os
import sys
import tempfile
import time
import warnings

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from torch.utils.data import Dataset

from silverspoon_kd import ResponseBasedDistiller, TrainingArguments

ALPHA = 0.5
TEMPERATURE = 2.0
LR = 1e-3
ATTENTION = "sdpa"
SHAPES = {  # hidden, layers, heads, intermediate
    "teacher": (256, 4, 4, 688),
    "student": (128, 2, 4, 344),
}
VOCAB = 4096
FOLDER = None  # the models' folder, from "models DIR"


def make_models(folder, shapes=None):
    """Each of `shapes` (role -> (hidden, layers, heads, intermediate); default SHAPES), seeded
    by its position, saved to folder/role; returns their parameter counts."""
    counts = []
    for seed, (role, (hidden, layers, heads, inter)) in enumerate((shapes or SHAPES).items()):
        torch.manual_seed(seed)
        config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=hidden,
                                          intermediate_size=inter, num_hidden_layers=layers,
                                          num_attention_heads=heads, num_key_value_heads=heads,
                                          max_position_embeddings=1024)
        model = transformers.AutoModelForCausalLM.from_config(config)
        path = os.path.join(folder, role)
        model.save_pretrained(path)
        extra = os.path.join(path, "generation_config.json")
        if os.path.exists(extra):
            os.remove(extra)
        counts.append(sum(p.numel() for p in model.parameters()))
    return counts


def load(role):
    return transformers.AutoModelForCausalLM.from_pretrained(
        os.path.join(FOLDER, role), attn_implementation=ATTENTION, dtype=torch.float32)


def windows(tokens, block):
    """The token file's windows of `block` ids in order, int64 [N, block]."""
    ids = np.fromfile(tokens, dtype="<u2").astype(np.int64)
    return torch.from_numpy(ids[: len(ids) // block * block].reshape(-1, block))


class Windows(Dataset):
    """The windows as the Trainer's examples: input_ids and, with `labels`, labels (the same
    ids)."""

    def __init__(self, rows, labels=True):
        self.rows = rows
        self.labels = labels

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        if not self.labels:
            return {"input_ids": self.rows[i]}
        return {"input_ids": self.rows[i], "labels": self.rows[i]}


class StepTimer(transformers.TrainerCallback):
    """Wall and CPU seconds from each step's on_step_begin to its on_step_end, summed."""

    def __init__(self):
        self.wall = self.cpu = 0.0
        self._start = (0.0, 0.0)

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = (time.perf_counter(), time.process_time())

    def on_step_end(self, args, state, control, **kwargs):
        self.wall += time.perf_counter() - self._start[0]
        self.cpu += time.process_time() - self._start[1]


class RecordingDistiller(ResponseBasedDistiller):
    """The distiller, keeping each training step's loss (for "losses" only, not timed)."""

    losses = None

    def training_step(self, *args, **kwargs):
        loss = super().training_step(*args, **kwargs)
        self.losses.append(loss.item())
        return loss


def training_args(batch, steps, **extra):
    """The Trainer's arguments both peers share: STEPS steps of BATCH windows in order on the
    CPU, AdamW (per-parameter) lr LR, betas (0.9, 0.999), eps 1e-8, no weight decay, a constant
    rate, no saving or logging; `extra` adds or overrides (max_grad_norm, alpha, ...)."""
    # The Trainer's output_dir (it saves nothing here), beside the models: the benchmark's
    # work_dir, replaced each run.
    out = tempfile.mkdtemp(prefix="trainer_", dir=os.path.dirname(FOLDER))
    kwargs = dict(output_dir=out, report_to=[], use_cpu=True, per_device_train_batch_size=batch,
                  max_steps=steps, learning_rate=LR, weight_decay=0.0, adam_beta1=0.9,
                  adam_beta2=0.999, adam_epsilon=1e-8, optim="adamw_torch",
                  lr_scheduler_type="constant", warmup_steps=0,
                  train_sampling_strategy="sequential", save_strategy="no",
                  logging_strategy="no", disable_tqdm=True, dataloader_pin_memory=False,
                  dataloader_num_workers=0)
    kwargs.update(extra)
    return TrainingArguments(**kwargs)


def make_distiller(rows, batch, steps, cls=ResponseBasedDistiller):
    args = training_args(batch, steps, alpha=ALPHA, max_grad_norm=0.0)
    return cls(student_model=load("student"), teacher_model=load("teacher"), args=args,
               train_dataset=Windows(rows), soft_loss_fn="kl_div",
               soft_loss_fn_kwargs={"temperature": TEMPERATURE})


class PlainLoop:
    """The same step in plain PyTorch, over the windows in order."""

    def __init__(self, rows, batch):
        self.batches = list(rows.split(batch))
        self.teacher, self.student = load("teacher").eval(), load("student").train()
        self.teacher.requires_grad_(False)
        self.opt = torch.optim.AdamW(self.student.parameters(), lr=LR, betas=(0.9, 0.999),
                                     eps=1e-8, weight_decay=0.0)

    def step(self, ids):
        with torch.no_grad():
            teacher = self.teacher(input_ids=ids).logits
        out = self.student(input_ids=ids, labels=ids)
        vocab = out.logits.shape[-1]
        # silverspoon-kd's kl_divergence_loss: batchmean over the tokens, times T^2.
        soft = F.kl_div(F.log_softmax(out.logits.view(-1, vocab) / TEMPERATURE, dim=-1),
                        F.softmax(teacher.view(-1, vocab) / TEMPERATURE, dim=-1),
                        reduction="batchmean") * TEMPERATURE ** 2
        loss = (1 - ALPHA) * soft + ALPHA * out.loss
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.detach()

    def round(self, steps):
        wall = cpu = 0.0
        for ids in self.batches[:steps]:
            start, start_cpu = time.perf_counter(), time.process_time()
            self.step(ids)
            wall += time.perf_counter() - start
            cpu += time.process_time() - start_cpu
        return wall, cpu


DISTILLERS, LOOPS = {}, {}


def silverspoon_round(tokens, batch, block, steps):
    key = (tokens, batch, block, steps)
    if key not in DISTILLERS:
        distiller = make_distiller(windows(tokens, block), batch, steps)
        distiller.add_callback(StepTimer())
        DISTILLERS[key] = distiller
    distiller = DISTILLERS[key]
    timer = distiller.callback_handler.callbacks[-1]
    timer.wall = timer.cpu = 0.0
    distiller.train()
    return timer.wall, timer.cpu


def plain_round(tokens, batch, block, steps):
    key = (tokens, batch, block)
    if key not in LOOPS:
        LOOPS[key] = PlainLoop(windows(tokens, block), batch)
    return LOOPS[key].round(steps)


def first_losses(tokens, batch, block, steps):
    rows = windows(tokens, block)
    distiller = make_distiller(rows, batch, steps, RecordingDistiller)
    distiller.losses = []
    distiller.train()
    plain = PlainLoop(rows, batch)
    return distiller.losses + [plain.step(ids).item() for ids in plain.batches[:steps]]


def set_folder(folder):
    """Where the models are (or go): the "models DIR" request's DIR."""
    global FOLDER
    FOLDER = folder


def tokens_request(fn):
    """A request handler taking TOKENS BATCH BLOCK STEPS (the last three integers)."""
    return lambda tokens, batch, block, steps: fn(tokens, int(batch), int(block), int(steps))


def serve(handlers, name):
    """Answers requests, one a line on stdin, until its end: handlers[word](*args) for a line
    "word args..." gives the numbers of the answer line "word numbers..."; an unknown request or
    a failure answers "error" (the reason, prefixed by `name`, to the log). sys.argv: THREADS
    (intra-op threads) and LOG (where the libraries' prints and logs go; default stderr)."""
    torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    # Answers go to the real stdout; what the libraries print or log (progress bars included)
    # to the log file, if one is given, else to stderr.
    answers = sys.stdout
    log = open(sys.argv[2], "w", buffering=1) if len(sys.argv) > 2 else sys.stderr
    sys.stdout = sys.stderr = log
    logging.disable(logging.WARNING)
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        try:
            if words[0] not in handlers:
                raise ValueError(f"unknown request {line.strip()!r}")
            numbers = handlers[words[0]](*words[1:])
            print(words[0], *numbers, file=answers, flush=True)
        except Exception as e:  # the benchmark names the request; the reason goes to stderr
            print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            print("error", file=answers, flush=True)


def models_request(folder):
    set_folder(folder)
    return make_models(folder)


def main():
    serve({"models": models_request, "losses": tokens_request(first_losses),
           "silverspoon": tokens_request(silverspoon_round),
           "plain": tokens_request(plain_round)}, "peer_lm_kd_timing.py")


if __name__ == "__main__":
    main()
