"""Reads a //tools:distill run's TensorBoard event files with TensorBoard's own reader
(EventAccumulator) and checks them against the run's metrics.jsonl; then corrupts one record of
a copy, and of a file PyTorch's SummaryWriter wrote with the same scalars, and checks that
TensorBoard reads both the same way. Prints one line per check; exit 1 if any failed.

  python tools/check_tensorboard.py RUN_DIR HISTOGRAM_EPOCHS
"""
import glob
import json
import os
import shutil
import struct
import sys
import tempfile

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

failures = 0


def check(name, ok, detail=""):
    global failures
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + detail))
    failures += 0 if ok else 1


def load(folder):
    acc = EventAccumulator(folder, size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
    acc.Reload()
    return acc


def scalars(acc):
    return {tag: {(e.step, e.value) for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def expected(run_dir):
    """Every value of metrics.jsonl as the (tag, step, float32 value) libkd writes."""
    want = {}
    offset, stage, stage_steps = 0, None, 0
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            if "step" in record:
                s = record["step"]
                for key in ("epoch", "step", "steps_per_epoch"):  # int64: strings in JSON
                    s[key] = int(s.get(key, 0))
                if s["stage"] != stage:
                    offset, stage, stage_steps = offset + stage_steps, s["stage"], 0
                at = (s["epoch"] - 1) * s["steps_per_epoch"] + s["step"]
                stage_steps = max(stage_steps, s["epoch"] * s["steps_per_epoch"])
                values = {"loss": s.get("loss", 0.0), "lr": s.get("lr", 0.0),
                          "samples_per_second": s.get("samples_per_second", 0.0)}
                values.update({"terms/" + k: v for k, v in s.get("terms", {}).items()})
                for name, value in values.items():
                    want.setdefault(f"{s['stage']}/{name}", set()).add(
                        (offset + at, float(np.float32(value))))
            else:
                e = record["epoch"]
                e["epoch"] = int(e.get("epoch", 0))
                values = {"train_loss": e.get("train_loss", 0.0), "lr": e.get("lr", 0.0),
                          "seconds": e.get("seconds", 0.0),
                          "samples_per_second": e.get("samples_per_second", 0.0)}
                values.update({"val_" + k: v for k, v in e.get("metrics", {}).items()})
                for name, value in values.items():
                    want.setdefault(f"{e['stage']}/epoch/{name}", set()).add(
                        (e["epoch"], float(np.float32(value))))
    return want


def scalar_records_before(path, index):
    """How many of the file's records before record `index` hold a scalar."""
    from tensorboard.compat.proto import event_pb2
    data = open(path, "rb").read()
    at, count = 0, 0
    for _ in range(index):
        (length,) = struct.unpack("<Q", data[at:at + 8])
        event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
        count += sum(1 for v in event.summary.value if v.HasField("simple_value"))
        at += 16 + length
    return count


def count_records(path):
    data = open(path, "rb").read()
    at, n = 0, 0
    while at < len(data):
        (length,) = struct.unpack("<Q", data[at:at + 8])
        at += 16 + length
        n += 1
    return n


def corrupt_record(path, index):
    """Flips a byte in the data of record `index` (0 is the file version)."""
    data = bytearray(open(path, "rb").read())
    at = 0
    for _ in range(index):
        (length,) = struct.unpack("<Q", data[at:at + 8])
        at += 16 + length
    data[at + 12] ^= 0xFF
    open(path, "wb").write(bytes(data))


def main():
    run_dir, histogram_epochs = sys.argv[1], int(sys.argv[2])
    tb = os.path.join(run_dir, "tb")
    files = glob.glob(os.path.join(tb, "events.out.tfevents.*"))
    check("one event file", len(files) == 1, str(files))
    acc = load(tb)
    got, want = scalars(acc), expected(run_dir)
    check("the scalars are metrics.jsonl's tags", set(got) == set(want),
          f"only in events: {set(got) - set(want)}, only in metrics.jsonl: {set(want) - set(got)}")
    for tag in sorted(want):
        check(f"{tag}: every value equal", got.get(tag) == want[tag],
              f"events {sorted(got.get(tag, []))[:4]} vs metrics.jsonl {sorted(want[tag])[:4]}")
    texts = acc.Tags()["tensors"]
    check("the config as text", "config" in texts, str(texts))
    if "config" in texts:
        text = acc.Tensors("config")[0].tensor_proto.string_val[0].decode()
        check("the config's text", "train {" in text and "criterion" in text, text[:80])
    histograms = acc.Tags()["histograms"]
    check("histograms of parameters and gradients",
          any("/params/" in t for t in histograms) and any("/grads/" in t for t in histograms),
          str(histograms[:4]))
    for tag in histograms:
        events = acc.Histograms(tag)
        check(f"{tag}: one per {histogram_epochs} epoch(s)",
              [e.step for e in events] == list(range(histogram_epochs, 1 + 2, histogram_epochs)),
              str([e.step for e in events]))
        h = events[0].histogram_value
        check(f"{tag}: counts sum to num", abs(sum(h.bucket) - h.num) < 1e-9, f"{h.num}")

    # A run killed while writing a record: the file ends inside it; TensorBoard reads the whole
    # records before it.
    cut = tempfile.mkdtemp()
    shutil.copy(files[0], cut)
    cut_file = glob.glob(os.path.join(cut, "*"))[0]
    size = os.path.getsize(cut_file)
    with open(cut_file, "r+b") as f:
        f.truncate(size - 5)
    records = count_records(files[0])
    whole = scalar_records_before(files[0], records - 1)  # the scalars of the whole records
    read = sum(len(v) for v in scalars(load(cut)).values())
    check("a file cut inside its last record: every whole record read", read == whole,
          f"{read} of {whole}")

    # A corrupted record: TensorBoard reads libkd's file as it reads PyTorch's.
    from torch.utils.tensorboard import SummaryWriter
    tmp = tempfile.mkdtemp()
    ours, theirs = os.path.join(tmp, "libkd"), os.path.join(tmp, "pytorch")
    os.makedirs(ours)
    shutil.copy(files[0], ours)
    writer = SummaryWriter(theirs)
    n = 0
    for event in sorted(((s, t, v) for t, events in got.items() for s, v in events)):
        writer.add_scalar(event[1], event[2], event[0])
        n += 1
    writer.close()
    theirs_file = glob.glob(os.path.join(theirs, "events.out.tfevents.*"))[0]
    counts = {}
    for name, folder, path in (("libkd", ours, glob.glob(os.path.join(ours, "*"))[0]),
                               ("pytorch", theirs, theirs_file)):
        before = sum(len(v) for v in scalars(load(folder)).values())
        corrupt_record(path, 5)
        after = sum(len(v) for v in scalars(load(folder)).values())
        counts[name] = (before, after, scalar_records_before(path, 5))
    check("a corrupted record: TensorBoard keeps the scalars before it and reads no further, in "
          "libkd's file as in PyTorch's",
          all(after == preceding and 0 < after < before
              for before, after, preceding in counts.values()), str(counts))
    print(f"check_tensorboard: {failures} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
