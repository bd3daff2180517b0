"""Checks the Chrome traces write_profile wrote (argv[1:]) with Python's json: trace events with
the Chrome fields, and the user scopes containing the ops run inside them."""
import json
import sys

paths = sys.argv[1:]
assert [p.rsplit("/", 1)[1] for p in paths] == ["trace_step_4.json", "trace_step_8.json"], paths
for path in paths:
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    complete = [e for e in events if e.get("ph") == "X"]
    assert complete, path
    for e in complete:
        for field in ("ph", "ts", "dur", "pid", "tid", "name"):
            assert field in e, (field, e)
    # Each recorded step inside torch.profiler's "ProfilerStep#N" scope (steps 2-3, 6-7).
    steps = sorted(e["name"] for e in complete if e["name"].startswith("ProfilerStep#"))
    assert steps in (["ProfilerStep#2", "ProfilerStep#3"], ["ProfilerStep#6", "ProfilerStep#7"]), steps
    scopes = [e for e in complete if e.get("cat") == "user_annotation" and
              not e["name"].startswith("ProfilerStep#")]
    names = sorted({e["name"] for e in scopes})
    assert names == ["loss", "student_forward"], names
    # Two active steps: each scope twice, and each forward scope holds an aten::mm.
    forwards = [e for e in scopes if e["name"] == "student_forward"]
    assert len(forwards) == 2, len(forwards)
    mms = [e for e in complete if e["name"] == "aten::mm"]
    for scope in forwards:
        inside = [m for m in mms if scope["ts"] <= m["ts"] and
                  m["ts"] + m["dur"] <= scope["ts"] + scope["dur"]]
        assert len(inside) == 1, (scope, mms)
print("ok: %d traces" % len(paths))
