"""Records torch.profiler's own answers for libkd's profiler tests (profiler/schedule_test.cc):
for several (wait, warmup, active, repeat, skip_first) settings, torch.profiler.schedule's action
at steps 0..39, and the step_num at which torch.profiler.profile calls on_trace_ready when a loop
calls step() 30 times inside `with profile(...)` (the trace files silverspoon-kd's
create_profiler names trace_step_<N>.json).

  ~/.cache/libkd/venv/bin/python profiler/testdata/make_schedule_fixture.py \
      > profiler/testdata/schedule_fixture.txt
"""
import warnings

import torch
from torch.profiler import ProfilerAction, ProfilerActivity, profile, schedule

SETTINGS = [  # wait, warmup, active, repeat, skip_first
    (20, 3, 3, 1, 0),  # silverspoon-kd's defaults
    (1, 1, 2, 2, 0),
    (0, 0, 1, 0, 0),
    (2, 1, 3, 0, 0),  # repeat 0: until stopped
    (1, 2, 1, 3, 2),
    (0, 2, 2, 1, 3),
    (3, 0, 2, 2, 1),
]
ACTION = {ProfilerAction.NONE: "N", ProfilerAction.WARMUP: "W", ProfilerAction.RECORD: "R",
          ProfilerAction.RECORD_AND_SAVE: "S"}
STEPS = 40
LOOP_STEPS = 30


def main():
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    print("# wait warmup active repeat skip_first | actions at steps 0..%d | trace steps after "
          "%d step() calls" % (STEPS - 1, LOOP_STEPS))
    for wait, warmup, active, repeat, skip_first in SETTINGS:
        fn = schedule(wait=wait, warmup=warmup, active=active, repeat=repeat,
                      skip_first=skip_first)
        actions = "".join(ACTION[fn(i)] for i in range(STEPS))
        saved = []
        x = torch.ones(4, 4)
        with profile(activities=[ProfilerActivity.CPU], schedule=fn,
                     on_trace_ready=lambda p: saved.append(p.step_num)) as prof:
            for _ in range(LOOP_STEPS):
                x = x @ x
                prof.step()
        print(wait, warmup, active, repeat, skip_first, "|", actions, "|",
              " ".join(map(str, saved)))


if __name__ == "__main__":
    main()
