"""Checks a trace of a box's training steps (argv[1]) with Python's json: the Chrome
trace-event fields, torch.profiler's ProfilerStep#N scopes, and each phase the box annotates
(argv[2:]) holding at least one op inside its span."""
import json
import sys

with open(sys.argv[1]) as f:
    events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
for e in events:
    for field in ("ph", "ts", "dur", "pid", "tid", "name"):
        assert field in e, (field, e)
assert any(e["name"].startswith("ProfilerStep#") for e in events)
ops = [e for e in events if e.get("cat") == "cpu_op"]
for phase in sys.argv[2:]:
    scopes = [e for e in events if e.get("cat") == "user_annotation" and e["name"] == phase]
    assert scopes, "no %s scope" % phase
    for s in scopes:
        inside = [o for o in ops if s["ts"] <= o["ts"] and o["ts"] + o["dur"] <= s["ts"] + s["dur"]]
        assert inside, "%s holds no op" % phase
print("ok")
