"""The Python side of //distill/boxes:feature_kd_benchmark: silverspoon-kd's BlockwiseDistiller
on the same tiny Llama pair and token windows as libkd's blockwise stage, timed here and served
over a pipe as peer_lm_kd_timing.py serves the response-based one (whose models, windows, step
timer, Trainer arguments and request loop this reuses).

  models DIR
      makes the teacher (4 layers x hidden 256, intermediate 688) and the student (4 x 256,
      intermediate 344: the same width, narrower MLPs), 4 heads each, vocabulary 4096, random
      init (seeded), and save_pretrained's them to DIR/teacher and DIR/student, which libkd's
      "hf_causal_lm" reads -> "models TEACHER_PARAMS STUDENT_PARAMS"
  losses TOKENS BATCH BLOCK STEPS TRUNCATE
      a fresh distiller; the loss (the sum over the blocks) of each of its first STEPS training
      steps -> "losses L_1 .. L_n"
  blockwise TOKENS BATCH BLOCK STEPS TRUNCATE
      one round of STEPS steps of the distiller's own Trainer loop (distiller.train()), timed
      from each step's on_step_begin to its on_step_end (silverspoon-kd's training_step: the
      teacher's forward with its captures, each block's forward, loss and backward, the
      per-alignment clipping; the grad norm the Trainer computes, the optimizer step, zero_grad
      and callbacks; not fetching the batch) -> "blockwise WALL_SECONDS CPU_SECONDS", sums
  memory TOKENS BATCH BLOCK STEP TRUNCATE
      a fresh distiller made and trained STEP steps under torch.profiler (profile_memory=True,
      CPU), untimed; from its memory events, in order, the running total of the bytes c10's CPU
      allocator handed out since the profiler started (the models, the optimizer's state, the
      batches, each step's temporaries) and freed since -> "memory PEAK START": the total's
      highest value during step STEP (from its on_step_begin to its on_step_end) and its value
      when the step began, in bytes

The distiller: BlockwiseDistiller(teacher, alignments, auto_truncate=TRUNCATE (0 or 1)), one
Alignment per decoder layer i (the teacher's model.layers.i -> the student's model.layers.i,
silverspoon-kd's default loss, mse; no projectors: the shapes agree), the teacher's
config.use_cache False (no KV cache built in the teacher's forward, as in libkd's; silverspoon-kd's
blocks drop a captured one anyway);
the Trainer's arguments peer_lm_kd_timing.training_args (AdamW lr 1e-3, no weight decay, a
constant rate) with max_grad_norm 1.0 (silverspoon-kd clips each alignment's parameters on
their own) and backward_per_block True. The examples are the windows' input_ids alone (the
teacher's forward needs no labels; libkd's teacher gets the samples alone).

  python peer_feature_kd_timing.py THREADS [LOG]    (run by //distill/boxes:feature_kd_benchmark)
"""
import contextlib
import gc
import os
import sys

import torch
import transformers
from silverspoon_kd import Alignment, BlockwiseDistiller
from torch.profiler import ProfilerActivity, profile, record_function

sys.dont_write_bytecode = True  # importing the sibling below leaves no __pycache__ in the tree
import peer_lm_kd_timing as lm  # noqa: E402

SHAPES = {  # hidden, layers, heads, intermediate
    "teacher": (256, 4, 4, 688),
    "student": (256, 4, 4, 344),
}
MAX_GRAD_NORM = 1.0


class RecordingDistiller(BlockwiseDistiller):
    """The distiller, keeping each training step's loss (for "losses" only, not timed)."""

    losses = None

    def training_step(self, *args, **kwargs):
        loss = super().training_step(*args, **kwargs)
        self.losses.append(loss.item())
        return loss


class StepMarker(transformers.TrainerCallback):
    """A profiler range "measured_step" around step `step` (from 1), on_step_begin to
    on_step_end."""

    def __init__(self, step):
        self.step = step
        self.range = None

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == self.step:
            self.range = record_function("measured_step")
            self.range.__enter__()

    def on_step_end(self, args, state, control, **kwargs):
        if self.range is not None:
            self.range.__exit__(None, None, None)
            self.range = None


@contextlib.contextmanager
def log_native_stderr():
    """What native code writes to file descriptor 2 (Kineto's start and stop lines) goes to the
    log (sys.stderr, which serve() points there) meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(sys.stderr.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def make_distiller(tokens, batch, block, steps, truncate, cls=BlockwiseDistiller):
    rows = lm.windows(tokens, block)
    teacher, student = lm.load("teacher"), lm.load("student")
    teacher.config.use_cache = False
    alignments = []
    for i in range(SHAPES["teacher"][1]):
        path = f"model.layers.{i}"
        alignments.append(Alignment(teacher_block=teacher.get_submodule(path),
                                    student_block=student.get_submodule(path),
                                    teacher_module_name=path, student_module_name=path))
    args = lm.training_args(batch, steps, max_grad_norm=MAX_GRAD_NORM, backward_per_block=True)
    return cls(teacher_model=teacher, alignments=alignments, args=args,
               train_dataset=lm.Windows(rows, labels=False), auto_truncate=bool(truncate))


DISTILLERS = {}


def blockwise_round(tokens, batch, block, steps, truncate):
    key = (tokens, batch, block, steps, truncate)
    if key not in DISTILLERS:
        distiller = make_distiller(tokens, batch, block, steps, truncate)
        distiller.add_callback(lm.StepTimer())
        DISTILLERS[key] = distiller
    distiller = DISTILLERS[key]
    timer = distiller.callback_handler.callbacks[-1]
    timer.wall = timer.cpu = 0.0
    distiller.train()
    return timer.wall, timer.cpu


def first_losses(tokens, batch, block, steps, truncate):
    distiller = make_distiller(tokens, batch, block, steps, truncate, RecordingDistiller)
    distiller.losses = []
    distiller.train()
    return distiller.losses


def step_memory(tokens, batch, block, step, truncate):
    # What earlier requests left for the garbage collector is freed now, not in the window
    # (transformers maps the weights' files through ATen's MapAllocator, whose unmapping the
    # profiler reports even for a mapping made before it started).
    gc.collect()
    with log_native_stderr(), profile(activities=[ProfilerActivity.CPU],
                                      profile_memory=True) as prof:
        distiller = make_distiller(tokens, batch, block, step, truncate)
        distiller.add_callback(StepMarker(step))
        distiller.train()
    events = prof.profiler.kineto_results.events()
    cpu = torch.autograd.DeviceType.CPU
    memory = sorted(((e.start_ns(), e.nbytes()) for e in events
                     if e.name() == "[memory]" and e.device_type() == cpu),
                    key=lambda m: m[0])
    marks = [e for e in events if e.name() == "measured_step"]
    if len(marks) != 1:
        raise RuntimeError(f"found {len(marks)} ranges of the measured step, not 1")
    begin, end = marks[0].start_ns(), marks[0].end_ns()
    total = start = peak = 0
    for time_ns, nbytes in memory:
        if time_ns > end:
            break
        total += nbytes
        if time_ns < begin:
            start = peak = total
        else:
            peak = max(peak, total)
    return peak, start


def main():
    def models(folder):
        lm.set_folder(folder)
        return lm.make_models(folder, SHAPES)

    def tokens_request(fn):  # TOKENS BATCH BLOCK STEPS TRUNCATE
        return lambda tokens, *ints: fn(tokens, *(int(i) for i in ints))

    lm.serve({"models": models, "losses": tokens_request(first_losses),
              "blockwise": tokens_request(blockwise_round),
              "memory": tokens_request(step_memory)}, "peer_feature_kd_timing.py")


if __name__ == "__main__":
    main()
