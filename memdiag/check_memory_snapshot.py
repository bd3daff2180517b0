"""Checks a libkd CPU memory snapshot (argv[1]) with Python's pickle and PyTorch's memory viewer
helpers (torch.cuda._memory_viz), as a snapshot of torch.cuda.memory._snapshot() is read."""
import pickle
import sys

from torch.cuda import _memory_viz

with open(sys.argv[1], "rb") as f:
    data = pickle.load(f)

assert set(data) >= {"segments", "device_traces"}, sorted(data)
events = data["device_traces"][0]
allocs = [e for e in events if e["action"] == "alloc" and e["size"] == 16384]
# Per batch: the ones() temporary and the kept product, both (64, 64) float32.
assert len(allocs) == 6, len(allocs)
freed = {e["addr"] for e in events if e["action"] == "free_completed"}
kept = [e for e in allocs if e["addr"] not in freed]
assert len(kept) == 3, kept
notes = [e["user_metadata"] for e in events if e["action"] == "annotate" and e["size"] == 16384]
assert notes[:2] == ["eval step 0", "eval step 0"], notes
assert all(e["frames"] and {"filename", "line", "name"} <= set(e["frames"][0]) for e in allocs)
live = {s["address"] for s in data["segments"]}
assert {e["addr"] for e in kept} <= live
# The viewer's own helpers accept it.
text = _memory_viz.trace(data)
assert "Device 0" in text and "eval step 1" in text, text[:400]
_memory_viz.segments(data, format_flamegraph=lambda lines: lines)
_memory_viz.memory(data, format_flamegraph=lambda lines: lines)
assert "segments: " in _memory_viz.segsum(data)
assert "MemoryViz.js" in _memory_viz.trace_plot(data)
print("ok: %d events, %d live segments" % (len(events), len(data["segments"])))
