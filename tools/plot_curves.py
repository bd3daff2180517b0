"""Draws the curves of //tools:distill's runs from their TensorBoard event files (read with
TensorBoard's own EventAccumulator): validation accuracy and training loss per epoch, one line
per run, as the README shows the main job's teacher, student alone and distilled student.

  /root/.cache/libkd/venv/bin/python tools/plot_curves.py runs/default docs/main_job_curves.png

Each run is a folder under the first argument holding tb/ (the default job: teacher, student,
student_kd).
"""
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402


def series(acc, suffix):
    tags = [t for t in acc.Tags()["scalars"] if t.endswith(suffix)]
    if not tags:
        return [], []
    events = acc.Scalars(tags[0])
    return [e.step for e in events], [e.value for e in events]


def main():
    root, out = sys.argv[1], sys.argv[2]
    runs = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d, "tb")))
    if not runs:
        sys.exit(f"plot_curves.py: no run with a tb/ folder under {root}")
    fig, (acc_ax, loss_ax) = plt.subplots(1, 2, figsize=(10, 3.6))
    for run in runs:
        acc = EventAccumulator(os.path.join(root, run, "tb"), size_guidance={"scalars": 0})
        acc.Reload()
        steps, values = series(acc, "/epoch/val_accuracy")
        acc_ax.plot(steps, [100 * v for v in values], marker="o", label=run)
        steps, values = series(acc, "/epoch/train_loss")
        loss_ax.plot(steps, values, marker="o", label=run)
    acc_ax.set(xlabel="epoch", ylabel="validation top-1 (%)", title="validation accuracy")
    loss_ax.set(xlabel="epoch", ylabel="training loss (the run's criterion)",
                title="training loss")
    for ax in (acc_ax, loss_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot_curves.py: {out} ({', '.join(runs)})")


if __name__ == "__main__":
    main()
